"""Code 5's --demo executed, in tables and words (lecture 9, §5.12): demo 1's layouts run as
messages (executed.execute) beside the cost model's seconds, the controls that change one
assumption each, and observations read off those tables.
"""

import random
from dataclasses import dataclass, replace

from lecture01.console import print_header, print_table, print_wrapped
from lecture09.network.emulator import TimeScale
from lecture09.network.executed import CONTROLS, EXECUTED, LOCKSTEP, Job, execute
from lecture09.schedule.hand_layouts import dp_groups_in_regions, pipelines_in_regions, random_assignment
from lecture09.schedule.layout_optimum import optimal_layout
from lecture09.schedule.schedule_setup import build_networks

LAYOUT_LABELS = {"optimum": "最优（已证明）optimum", "pipelines_in_regions": "手工：流水线在地区内",
                 "dp_groups_in_regions": "手工：DP 组在地区内"}
CONTROL_LABELS = {
    "lockstep": "按模型逐步走 lockstep（Eq. 1-4 的全部假设）",
    "executed": "执行 executed（GPipe + Eq. 2 分片交换）",
    "uplink_off": "只改：上行不共享 uplink not shared",
    "no_overlap": "只改：微批次不跨切口重叠 no overlap",
    "stop_and_wait": "只改：每条消息等到达 stop-and-wait",
    "dp_after_pipeline": "只改：DP 等整条流水线 DP after PP",
    "ring": "只改：环形交换 ring exchange",
}
CONTROL_LAYOUTS = ("optimum", "dp_groups_in_regions")
# Controls that put back one assumption of Eq. 1-4 the executed run drops (they move it
# toward the model); the other controls (uplink_off, ring) ask "what if" instead.
ASSUMPTIONS = ("no_overlap", "stop_and_wait", "dp_after_pipeline")
SHORT = {"uplink_off": "上行不共享", "no_overlap": "微批次不重叠", "stop_and_wait": "逐条等到达",
         "dp_after_pipeline": "DP 等流水线", "ring": "环形交换"}


@dataclass(frozen=True)
class LayoutRow:
    """Seconds of one iteration (job seconds: measured / scale.time). lockstep_s and
    executed_s are the emulated network's clock when the last device finished (every
    message stamped at its sender, emulator.py); executed_wall_s is the wall clock of the
    same run, which adds this machine's thread wake-up lateness (--demo emulator)."""
    name: str
    model_s: float
    lockstep_s: float
    executed_s: float
    executed_wall_s: float

    @property
    def ratio(self):
        return self.executed_s / self.model_s

    @property
    def lockstep_error(self):
        return self.lockstep_s / self.model_s - 1


@dataclass(frozen=True)
class ControlRow:
    layout: str
    name: str
    measured_s: float      # the emulated clock, as LayoutRow.executed_s
    model_s: float
    wall_s: float

    @property
    def ratio(self):
        return self.measured_s / self.model_s


@dataclass(frozen=True)
class SeedResult:
    net_seed: int
    rows: tuple         # LayoutRow, table order
    controls: tuple     # ControlRow


def layouts_of(setup, net, n_random):
    """{name: layout}: the proven optimum, the hand layouts that fit, n_random random ones."""
    opt = optimal_layout(net, setup.n_stages, setup.n_replicas, setup.stage_param_bytes, setup.act_bytes,
                         n_micro_batches=setup.n_micro_batches)
    layouts = {"optimum": opt.assignment}
    for name, make in (("pipelines_in_regions", pipelines_in_regions), ("dp_groups_in_regions", dp_groups_in_regions)):
        try:
            layouts[name] = make(net, setup.n_stages, setup.n_replicas)
        except ValueError:
            pass
    rng = random.Random(0)   # demo 1's random layouts, the first n_random of them
    for k in range(n_random):
        layouts[f"random_{k + 1}"] = random_assignment(range(setup.n_gpus), setup.n_stages, setup.n_replicas, rng)
    return layouts, opt.exact


def planned_model_seconds(setup, n_random=3, seeds=None):
    """Job seconds run_executed will run, priced by the cost model (lockstep ≈ model; the
    executed and control runs are taken at the model's seconds too, an upper bound on
    most). Arithmetic only: the script checks it against its budget before running."""
    total = 0.0
    for k, seed in enumerate(executed_seeds(setup) if seeds is None else seeds):
        s = replace(setup, net_seed=seed)
        net, _ = build_networks(s)
        cost = s.layout_cost(net)
        layouts, _ = layouts_of(s, net, n_random)
        chosen = CONTROL_LAYOUTS if k == 0 else ("optimum",)
        for name, layout in layouts.items():
            total += cost(layout) * (2 + (len(CONTROLS) if name in chosen else 0))
    return total


def label(name):
    if name.startswith("random_"):
        return f"随机 random #{name.split('_')[1]}"
    return LAYOUT_LABELS[name]


def run_seed(setup, net_seed, scale, n_random, control_layouts, step=lambda text: None):
    setup = replace(setup, net_seed=net_seed)
    net, _ = build_networks(setup)
    cost, job = setup.layout_cost(net), Job.of(setup)
    layouts, _ = layouts_of(setup, net, n_random)
    rows, controls = [], []
    for name, layout in layouts.items():
        step(f"网络种子 {net_seed}：{name}")
        model = cost(layout)
        lock = execute(layout, net, job, LOCKSTEP, scale)
        done = execute(layout, net, job, EXECUTED, scale)
        rows.append(LayoutRow(name, model, lock.stamped_seconds, done.stamped_seconds, done.seconds))
        if name in control_layouts:
            controls.append(ControlRow(name, "lockstep", lock.stamped_seconds, model, lock.seconds))
            controls.append(ControlRow(name, "executed", done.stamped_seconds, model, done.seconds))
            for cname, pattern in CONTROLS.items():
                run = execute(layout, net, job, pattern, scale)
                controls.append(ControlRow(name, cname, run.stamped_seconds, model, run.seconds))
    return SeedResult(net_seed, tuple(rows), tuple(controls))


TIE = 1e-6   # relative: two emulated-clock times closer than this are equal (float rounding)


def tolerance(result):
    """The emulator's own error on this pattern: the largest |lockstep / model - 1| of the
    table (messages rounded to whole bytes at the scale: the lockstep pattern is Eq. 1-4),
    at least TIE. Two
    executed times closer than twice it are a tie."""
    return max([TIE] + [abs(r.lockstep_error) for r in result.rows])


def fastest(result):
    """(the fastest executed rows within the tolerance: names, tolerance)."""
    tol = tolerance(result)
    best = min(r.executed_s for r in result.rows)
    return [r.name for r in result.rows if r.executed_s <= best * (1 + 2 * tol)], tol


def ranking_agrees(result):
    """Whether ordering by measured executed seconds agrees with ordering by model seconds
    on every pair whose executed times differ by more than twice the tolerance."""
    tol = tolerance(result)
    disagree = []
    for a in result.rows:
        for b in result.rows:
            if a.model_s < b.model_s and a.executed_s > b.executed_s * (1 + 2 * tol):
                disagree.append((a.name, b.name))
    return disagree


def gap_closed(controls, layout):
    """{control: share of (model - executed) that the control closes}, for one layout:
    (control - executed) / (model - executed); None when executed equals the model."""
    rows = {c.name: c for c in controls if c.layout == layout}
    executed, model = rows["executed"].measured_s, rows["executed"].model_s
    gap = model - executed
    return {name: (None if abs(gap) < 1e-12 else (rows[name].measured_s - executed) / gap)
            for name in ASSUMPTIONS}


def print_seed(result, scale, out=print_wrapped):
    print_table(["分配 layout", "模型 model 秒", "逐步 lockstep 秒", "执行 executed 秒", "执行/模型", "墙钟 wall 秒"],
                [[label(r.name), f"{r.model_s:.2f}", f"{r.lockstep_s:.2f}", f"{r.executed_s:.2f}",
                  f"{r.ratio:.2f}", f"{r.executed_wall_s:.2f}"] for r in result.rows])
    if result.controls:
        out(f"对照 controls（网络种子 {result.net_seed}；每行只改执行的一个假设）：")
        print_table(["分配 layout", "消息怎么走 pattern", "秒", "/模型", "墙钟 秒"],
                    [[label(c.layout), CONTROL_LABELS[c.name], f"{c.measured_s:.2f}", f"{c.ratio:.2f}",
                      f"{c.wall_s:.2f}"] for c in result.controls])


def observations(results, out=print_wrapped):
    """Observations read off the seeds' tables (results: SeedResult, first seed first)."""
    out("观察 Observations（执行的演示 1）：")
    first = results[0]
    tol = tolerance(first)
    worst = max(first.rows, key=lambda r: abs(r.lockstep_error))
    late = max(r.executed_wall_s / r.executed_s - 1 for r in first.rows)
    out(f" 1. 按模型的全部假设逐步走（lockstep），模拟网络的时钟和模型最多差 {100 * worst.lockstep_error:+.4f}%"
        f"（{label(worst.name)}，消息按时间比例取整到整字节）：消息按这些假设走时，Eq. 1-4 就是它的时间。墙钟比模拟时钟最多多 "
        f"{100 * late:.1f}%：这台机器唤醒线程的迟到（--demo emulator 测它），不是网络的；下面的比较用模拟时钟。")
    for k, result in enumerate(results):
        names, tol = fastest(result)
        opt = next(r for r in result.rows if r.name == "optimum")
        others = [r for r in result.rows if r.name != "optimum"]
        best_other = min(others, key=lambda r: r.executed_s) if others else None
        if "optimum" in names:
            ties = [label(n) for n in names if n != "optimum"]
            verdict = ("最优分配执行起来仍然最快" + (f"（和{'、'.join(ties)}在误差内一样）" if ties else ""))
        else:
            verdict = (f"最优分配执行起来不是最快：{label(best_other.name)} {best_other.executed_s:.2f} 秒，"
                       f"比它的 {opt.executed_s:.2f} 秒快")
        bad = ranking_agrees(result)
        order = ("执行时间的排序和模型一致（差别超过误差的每一对）" if not bad else
                 f"执行时间和模型的排序在 {len(bad)} 对上相反，例如{label(bad[0][0])}和{label(bad[0][1])}")
        where = f"网络种子 {result.net_seed}" if len(results) > 1 else "这个网络上"
        out(f" {2 + k}. {where}：{verdict}（执行 {opt.executed_s:.2f} 秒，模型 {opt.model_s:.2f} 秒，"
            f"比 {opt.ratio:.2f}）；{order}。")
    n = 2 + len(results)
    for layout in CONTROL_LAYOUTS:
        rows = [c for c in first.controls if c.layout == layout]
        if not rows:
            continue
        closed = gap_closed(first.controls, layout)
        by = {c.name: c for c in rows}
        executed = by["executed"]
        known = {k: v for k, v in closed.items() if v is not None}
        whatif = "；".join(f"{SHORT[k]}时是模型的 {by[k].ratio:.2f} 倍" for k in ("uplink_off", "ring"))
        if known:
            top = max(known, key=known.get)
            out(f" {n}. {label(layout)}：执行是模型的 {executed.ratio:.2f} 倍。放回模型的一个假设，补回差距"
                f"（模型 − 执行）最多的是'{SHORT[top]}'：{100 * known[top]:.0f}%（{executed.measured_s:.2f} → "
                f"{by[top].measured_s:.2f} 秒）；"
                + "、".join(f"{SHORT[k]} {100 * v:.0f}%" for k, v in known.items() if k != top)
                + f"。换一种做法：{whatif}。")
        else:
            out(f" {n}. {label(layout)}：执行和模型一样（{executed.measured_s:.2f} 秒）；{whatif}。")
        n += 1
    out(f" {n}. 只算通信、不算计算（和 Eq. 1-4 一样）；每个实测秒都已经按时间比例换回 1.3B 任务的秒。")


def executed_seeds(setup):
    """--net-seed and the next one on a random network; a measured preset has no seed."""
    return (setup.net_seed, setup.net_seed + 1) if setup.network == "random" else (setup.net_seed,)


def run_executed(setup, scale=TimeScale(), n_random=3, seeds=None, step=lambda text: None):
    """Print the demo and return its SeedResults (controls on the first seed for both
    control layouts, on later seeds for the optimum only)."""
    seeds = executed_seeds(setup) if seeds is None else seeds
    print_header("执行的演示 1：32 个模拟设备上真的发消息（demo 1 executed on emulated links）")
    print_wrapped(f"时间比例 time scale：任务的 1 秒跑成 {scale.time:g} 秒，1 字节发成 {scale.bytes:g} 字节"
                  f"（延迟、串行化、计算都乘同一个比例，比例关系不变）；实测秒都已换回任务的秒。")
    results = []
    for k, seed in enumerate(seeds):
        chosen = CONTROL_LAYOUTS if k == 0 else ("optimum",)
        result = run_seed(setup, seed, scale, n_random, chosen, step)
        print_wrapped(f"网络种子 net seed {seed}：" if setup.network == "random" else f"网络 network {setup.network}：")
        print_seed(result, scale)
        results.append(result)
    observations(results)
    return results
