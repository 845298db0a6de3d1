"""Code 6's table (3): peers that come and go (lecture 9, §6, "失败是常态 failures are
the normal case"). One synchronous swarm starts with the default run's workers; at one
version a worker process is killed with SIGKILL (a crash: no goodbye), at a later one a
new worker joins; training goes on to the end. Printed: the membership timeline the
server recorded (one line per run of identical rounds) and the bits per char against the
undisturbed run of table (1) with the same compression, seeds and data.

torch is imported inside the functions, as in swarm_report.py.
"""

from dataclasses import asdict, dataclass, replace

from lecture01.console import format_table, print_wrapped, printed_difference
from lecture09.swarm.swarm_protocol import token_for

DEADLINE_STEPS = 5        # the demo's round deadline: this many of table (1)'s measured steps,
DEADLINE_FLOOR_S = 0.3    # and at least this; a crash costs it once
TEST_DEADLINE_S = 1.0     # run_churn's default, for callers without a measured step


def churn_deadline_s(undisturbed):
    """The demo's round deadline from a measured run (table (1)'s SwarmResult with the same
    compression): DEADLINE_STEPS x its wall time per step, at least DEADLINE_FLOOR_S,
    rounded up to 0.1 s. Measured, not fixed, so that a slow laptop's honest rounds do
    not miss it: a fixed 1 s would be 10 steps on this machine but less than one on a
    machine 10 times slower."""
    import math
    per_step_s = undisturbed.wall_s / undisturbed.steps
    return max(DEADLINE_FLOOR_S, math.ceil(DEADLINE_STEPS * per_step_s * 10 - 1e-9) / 10)


@dataclass(frozen=True)
class ChurnPlan:
    kill_at: int        # the version at which the last worker is killed
    join_at: int        # the version at which a new worker (the next id) starts


def churn_plan(steps, workers):
    """Kill at 1/12 of the run, join at 1/6 (5 and 10 of the default 60 steps); None when
    the run is too short for both, or when killing one would leave no worker."""
    if workers < 2 or steps < 3:
        return None
    kill_at = max(1, round(steps / 12))
    return ChurnPlan(kill_at, max(kill_at + 1, round(steps / 6)))


@dataclass(frozen=True)
class ChurnResult:
    plan: ChurnPlan
    timeline: list      # the server's rounds: {version, workers, by, waited_s, late}
    val_bpc: float
    uploads_averaged: int
    workers: int
    deadline_s: float = TEST_DEADLINE_S


def run_churn(pool, spare, server_config, worker_config, val_tokens, plan, deadline_s=TEST_DEADLINE_S):
    """Train once with len(pool) workers; kill pool[-1] at plan.kill_at, start `spare` as a
    new worker at plan.join_at. Returns a ChurnResult (the killed process is gone after)."""
    from lecture01.tiny_gpt import bits_per_char
    from lecture09.swarm.swarm_http import RunningServer

    # After the crash one worker fewer is left: a quorum above that would wait for ever.
    config = replace(server_config, round_deadline_s=deadline_s,
                     min_workers=min(server_config.min_workers, len(pool) - 1))
    server = RunningServer(config)
    swarm = server.swarm

    def send(process, worker_id):
        own = replace(worker_config, worker_id=worker_id, token=token_for(config, worker_id))
        job = {"url": server.url, "config": asdict(own)}
        process.send(job)

    def wait_for(version):
        with swarm.changed:
            swarm.changed.wait_for(lambda: swarm.version >= version or swarm.done)

    try:
        for worker_id, process in enumerate(pool):
            send(process, worker_id)
        wait_for(plan.kill_at)
        pool[-1].kill()
        pool[-1].wait()
        wait_for(plan.join_at)
        send(spare, len(pool))
        stats = [process.result() for process in pool[:-1] + [spare]]
        errors = [s["error"] for s in stats if s["error"]]
        if errors:
            raise RuntimeError(f"worker failed: {errors[0]}")
        with swarm.lock:
            timeline = list(swarm.timeline)
            bpc = bits_per_char(swarm.model, val_tokens)
    finally:
        server.close()
    return ChurnResult(plan, timeline, bpc, sum(len(r["workers"]) for r in timeline), len(pool), deadline_s)


HOW = {"all": "到齐 all", "expected": "预期的都到 expected", "deadline": "截止 deadline"}


def timeline_rows(timeline):
    """Consecutive rounds with the same workers, way of stepping and missing workers: one row."""
    rows = []
    for entry in timeline:
        key = (entry["workers"], entry["by"], entry["late"])
        if rows and rows[-1][0] == key:
            rows[-1][2] = entry["version"]
            rows[-1][3].append(entry["waited_s"])
        else:
            rows.append([key, entry["version"], entry["version"], [entry["waited_s"]]])
    out = []
    for (workers, by, late), first, last, waits in rows:
        versions = str(first) if first == last else f"{first}-{last}"
        out.append([versions, ",".join(workers), str(len(workers)), HOW[by], f"{max(waits):.1f}",
                    ",".join(late) or "-"])
    return out


def deadline_rule(result, undisturbed, mode):
    """How the deadline was chosen, when it was churn_deadline_s's rule (else nothing)."""
    if result.deadline_s != churn_deadline_s(undisturbed):
        return ""
    return (f"：表 (1) 那次 {mode} 训练每步用时 {undisturbed.wall_s / undisturbed.steps:.3f} s（计时表 Timing "
            f"的用时 / 步数）的 {DEADLINE_STEPS} 倍，向上取到 0.1 s，至少 {DEADLINE_FLOOR_S:g} s")


def print_churn(result, undisturbed, mode, figures=None):
    """Table (3) and its summary line; undisturbed: table (1)'s SwarmResult for `mode`;
    figures: --figures DIR, where its membership figure goes (swarm_figures.py), or None."""
    plan, n = result.plan, result.workers
    print("\n(3) 成员进出 peers that come and go [实测 measured]")
    print_wrapped(f"    {n} 个工作者开始；版本 {plan.kill_at} 时工作者 {n - 1} 被 SIGKILL 杀掉（像崩溃，不告而别），"
                  f"版本 {plan.join_at} 时新工作者 {n} 加入；sync，{mode}。轮次截止时间 round deadline "
                  f"{result.deadline_s:.1f} s{deadline_rule(result, undisturbed, mode)}。"
                  "服务器记下的每一轮（相同的连续几轮合成一行）：")
    top = ["版本", "上传的工作者", "份数", "这一轮怎么走的", "最长等待 s", "缺席"]
    bottom = ["versions", "workers in", "n", "how it stepped", "max wait s", "late"]
    lines = format_table(top, [bottom] + timeline_rows(result.timeline), [">", "<", ">", "<", ">", "<"])
    for line in [lines[0], lines[2], lines[1]] + lines[3:]:
        print(line)
    deadline_rounds = sum(1 for r in result.timeline if r["by"] == "deadline")
    full = undisturbed.workers * undisturbed.steps
    print_wrapped(f"    有进出 with churn：验证 bpc {result.val_bpc:.4f}，{result.uploads_averaged} 份上传进了平均；"
                  f"不受干扰 undisturbed（表 (1) 的 {mode} 行，同样的种子和数据）：{undisturbed.val_bpc:.4f}，"
                  f"{full} 份；差 Δ {printed_difference(result.val_bpc, undisturbed.val_bpc):+.4f}。"
                  f"{deadline_rounds} 轮等到了截止时间。")
    if figures:
        from lecture09.swarm.swarm_figures import draw_churn   # matplotlib only now
        draw_churn(figures, result, mode)


def print_no_churn(reason):
    print()
    print_wrapped(f"(3) 成员进出 peers that come and go：不演示 not shown（{reason}）")
