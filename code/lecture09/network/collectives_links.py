"""Code 1's demo 7 (lecture 9, §1.6; opt-in: --links LATENCY_MS MBIT_S): every collective's
schedules on real gloo ranks, every message crossing an emulated link (network/gloo_links.py),
the measured seconds beside the α–β model's (schedule_cost's rounds and path bytes, the same
α and β).

Two ways to run one schedule, both on the same links:
- free-running (自由运行): a rank sends as soon as its program gets there, i.e. when the data
  it sends has arrived; a rank with nothing to wait for sends at once. This is how a program
  runs.
- lockstep (按轮同步, the control): every send of round k is stamped at the model's start of
  round k (the sum of α + largest message / β of the rounds before it), as if a barrier
  closed every round. The α–β model assumes exactly this. It changes only when a message
  leaves, not the links, the bytes or the schedule.
Sends are stamped (emulator.py's stamped mode): free-running, a rank's clock is the model
arrival of the last message it received, so its wake-up lateness does not pile up along a
chain; it shows once, in the wall clock of the last arrival, which is what is measured.
torch is imported inside the functions: --help and a bad flag never wait for it.
"""

import time
from dataclasses import dataclass

from lecture09.ranks import alpha_beta
from lecture09.ranks.alpha_beta import ALGORITHMS, COLLECTIVES

TOLERANCE = 1.25          # measured/model within [1/1.25, 1.25] counts as "agrees" (see the notes)
MAX_EMULATED_S = 60.0     # refuse a link on which the table would take longer (model seconds, both modes)
MODES = ("free", "lockstep")


@dataclass(frozen=True)
class LinksJob:
    latency_s: float
    bandwidth_bps: float                  # bit/s
    sizes: tuple = (256, 131072)          # fp32 elements per rank: 1 KiB and 512 KiB
    shared_uplink: bool = True
    modes: tuple = MODES
    keys: tuple = tuple((c, a) for c in COLLECTIVES for a in ALGORITHMS)
    seed: int = 0
    start_margin_s: float = 0.03          # the agreed start lies this far ahead of rank 0's clock


def model_s(rounds, path_bytes, latency_s, bandwidth_bps):
    """The α–β model: rounds·α + path bytes·8/bandwidth (bit/s)."""
    return rounds * latency_s + 8 * path_bytes / bandwidth_bps


def planned_seconds(p, job):
    """The model's seconds of the whole table (every key, size and mode): the flag's budget.
    alpha_beta.collective_cost needs n divisible by p: rounded up to a multiple (an upper bound)."""
    total = 0.0
    for collective, algorithm in job.keys:
        for n in job.sizes:
            n_bytes = 4 * (n + (-n) % p)
            rounds, path = alpha_beta.collective_cost(collective, algorithm, n_bytes, p)
            total += model_s(rounds, path, job.latency_s, job.bandwidth_bps) + job.start_margin_s
    return total * len(job.modes)


def round_offsets(rounds, bounds, latency_s, bandwidth_bps, element_bytes=4):
    """Lockstep: the model's start of each round after the start, in seconds."""
    offsets, t = [], 0.0
    for rnd in rounds:
        offsets.append(t)
        largest = max((bounds[x.hi] - bounds[x.lo]) * element_bytes for x in rnd)
        t += latency_s + 8 * largest / bandwidth_bps
    return offsets


def run_plan_links(plan, buf, links, t0, starts=None):
    """collectives.run_plan_gloo through GlooLinks: per round, send (stamped at this rank's
    clock, or at starts[k] in lockstep), receive (waits until the link delivers), apply.
    Returns (buf, wall-clock time of this rank's last arrival, or t0 if it receives nothing)."""
    import torch
    clock, finish = t0, t0
    for k, (send, receive) in enumerate(plan):
        if starts is not None:
            clock = max(clock, t0 + starts[k])
        if send is not None:
            dst, a, b = send
            links.send(buf[a:b], dst, at=clock)
        if receive is not None:
            src, a, b, reduce = receive
            incoming = torch.empty(b - a, dtype=buf.dtype)
            arrival, finish = links.recv(incoming, src)
            clock = max(clock, arrival)
            if reduce:
                buf[a:b] += incoming
            else:
                buf[a:b] = incoming
    return buf, finish


def agreed_start(margin_s):
    """A start time every rank shares: rank 0's clock + margin, broadcast (after a barrier)."""
    import torch
    import torch.distributed as dist
    dist.barrier()
    t = torch.tensor([time.time() + margin_s], dtype=torch.float64)
    dist.broadcast(t, 0)
    return float(t[0])


def links_worker(rank, world_size, job):
    """Every (collective, algorithm, size, mode) of job on this rank: {key: (seconds from the
    start to this rank's last arrival, bytes this rank sent, result equals expected())}."""
    import torch
    from lecture09.network.gloo_links import GlooLinks
    from lecture09.ranks import collectives as c
    p = world_size
    latency = [[job.latency_s] * p for _ in range(p)]
    bandwidth = [[job.bandwidth_bps] * p for _ in range(p)]
    out = {}
    for collective, algorithm in job.keys:
        rounds = c.schedule(collective, algorithm, p)
        for n in job.sizes:
            inputs = c.integer_inputs(p, n, seed=job.seed + n)
            bounds = c.chunk_bounds(n, p)
            plan = c.rank_plan(rounds, rank, bounds)
            want, mask = c.expected(collective, inputs)[rank]
            for mode in job.modes:
                starts = round_offsets(rounds, bounds, job.latency_s, job.bandwidth_bps) if mode == "lockstep" else None
                links = GlooLinks(rank, latency, bandwidth, job.shared_uplink)
                t0 = agreed_start(job.start_margin_s)
                buf, finish = run_plan_links(plan, inputs[rank].clone(), links, t0, starts)
                links.flush()
                out[(collective, algorithm, n, mode)] = (finish - t0, sum(links.bytes_sent.values()),
                                                        torch.equal(buf[mask], want[mask]))
    return out


def table_rows(results, job, p):
    """One row per (collective, algorithm, size): the model (schedule_cost), each mode's
    measured seconds (the slowest rank's last arrival), bytes per rank, correctness."""
    from lecture09.ranks import collectives as c
    rows = []
    for collective, algorithm in job.keys:
        rounds = c.schedule(collective, algorithm, p)
        for n in job.sizes:
            stats = c.schedule_cost(rounds, n, p, element_bytes=4)
            keyed = [r[(collective, algorithm, n, mode)] for r in results for mode in job.modes]
            rows.append({"collective": collective, "algorithm": algorithm, "bytes": 4 * n,
                         "model_s": model_s(stats.rounds, stats.path_bytes, job.latency_s, job.bandwidth_bps),
                         **{f"{mode}_s": max(r[(collective, algorithm, n, mode)][0] for r in results)
                            for mode in job.modes},
                         "sent": tuple(r[(collective, algorithm, n, job.modes[0])][1] for r in results),
                         "schedule_sent": stats.bytes_sent,
                         "ok": all(ok for _, _, ok in keyed)})
    return rows


def within(ratio, tolerance=TOLERANCE):
    return 1 / tolerance <= ratio <= tolerance


def ranking_pairs(rows, tolerance=TOLERANCE):
    """Per (collective, size), every pair of algorithms the model tells apart (times differ
    by more than the tolerance): (collective, bytes, faster by the model, slower, agrees:
    the measured free-running order is the same)."""
    groups = {}
    for row in rows:
        groups.setdefault((row["collective"], row["bytes"]), []).append(row)
    pairs = []
    for (collective, n_bytes), group in groups.items():
        for i, x in enumerate(group):
            for y in group[i + 1:]:
                fast, slow = (x, y) if x["model_s"] < y["model_s"] else (y, x)
                if slow["model_s"] > tolerance * fast["model_s"]:
                    pairs.append((collective, n_bytes, fast["algorithm"], slow["algorithm"],
                                  fast["free_s"] < slow["free_s"]))
    return pairs


def links_observation(rows, latency_s, bandwidth_bps, tolerance=TOLERANCE):
    """The sentences under demo 7's table, read off its rows (each branch unit-tested)."""
    pairs = ranking_pairs(rows, tolerance)
    wrong = [q for q in pairs if not q[4]]
    link = f"α = {latency_s * 1e3:g} ms，{bandwidth_bps / 1e6:g} Mbit/s"
    text = [f"排名 ranking（{link}）：模型分得出快慢（相差超过 {tolerance:g} 倍）的 {len(pairs)} 对算法里，"
            f"自由运行实测有 {len(pairs) - len(wrong)} 对快慢相同"]
    if wrong:
        text[0] += ("；不同的：" + "；".join(f"{col} {alpha_beta.human_bytes(b)} 模型 {f} 快于 {s}，实测相反"
                                          for col, b, f, s, _ in wrong[:4]) + ("……" if len(wrong) > 4 else ""))
    by = {(r["collective"], r["algorithm"], r["bytes"]): r for r in rows}
    sizes = sorted({r["bytes"] for r in rows})
    if all(("all-reduce", a, b) in by for a in ("ring", "tree") for b in sizes):
        parts = []
        for b in (sizes[0], sizes[-1]):
            ring, tree = by[("all-reduce", "ring", b)], by[("all-reduce", "tree", b)]
            parts.append(f"{alpha_beta.human_bytes(b)} 时环 ÷ 树 模型 {ring['model_s'] / tree['model_s']:.2f}、"
                         f"实测 {ring['free_s'] / tree['free_s']:.2f}")
        text[0] += "。all-reduce：" + "，".join(parts) + "（小于 1 是环快）"
    text[0] += "。"
    off = [r for r in rows if not within(r["free_s"] / r["model_s"], tolerance)]
    if not off:
        text.append(f"每一行的 实测 ÷ 模型 都在 [1/{tolerance:g}, {tolerance:g}] 之内。")
        return "".join(text)
    named = "；".join(f"{r['collective']} {r['algorithm']} {alpha_beta.human_bytes(r['bytes'])} "
                     f"{r['free_s'] / r['model_s']:.2f}→{r['lockstep_s'] / r['model_s']:.2f}"
                     for r in sorted(off, key=lambda r: r["free_s"] / r["model_s"])[:5])
    explained = [r for r in off if within(r["lockstep_s"] / r["model_s"], tolerance)]
    head = (f"{len(off)} 行自由运行的 实测 ÷ 模型 在 [1/{tolerance:g}, {tolerance:g}] 之外"
            f"（自由→按轮同步：{named}{'……' if len(off) > 5 else ''}）")
    if len(explained) == len(off):
        text.append(head + "；按轮同步（对照：每轮的消息在模型的轮开始时才发，链路、字节、消息序列都不变）"
                    "把它们全拉回了容差之内：差别来自模型把每一轮当成一道屏障，而程序里没有要等的"
                    "消息的 rank 会立刻发（朴素的做法最明显：几个 rank 同时发给根，根的下行不限速；"
                    "根发出的几条消息在路上重叠，不是一轮一条）。")
    elif not explained:
        text.append(head + "；按轮同步也没有拉回来：不是轮次的问题，是链路以外的代价（回环本身、"
                    "进程醒得晚）；链路越快，它占得越多，在空闲的机器上或更慢的链路上再跑。")
    else:
        rest = "、".join(f"{r['collective']} {r['algorithm']} {alpha_beta.human_bytes(r['bytes'])}"
                         for r in off if r not in explained)
        text.append(head + f"；按轮同步拉回了 {len(explained)} 行（模型的轮是屏障，程序里不是），"
                    f"没拉回的 {rest} 多半是机器的负载，再跑一次看它是否还在。")
    return "".join(text)


def run_demo7(job, p, timeout_s, out=None):
    """Code 1's demo 7: the table and its observation; returns the rows."""
    import sys
    from lecture01.console import print_header, print_table, print_wrapped
    from lecture09.ranks import gloo_ranks
    out = out or print_wrapped
    print_header(f"演示 7 demo 7：{p} 个真的 gloo 进程，每条消息走模拟链路（α = {job.latency_s * 1e3:g} ms，"
                 f"{job.bandwidth_bps / 1e6:g} Mbit/s）")
    print(f"（约 {planned_seconds(p, job):.0f} 秒的模拟时间 + 启动进程 starting {p} processes...）",
          file=sys.stderr, flush=True)
    results = gloo_ranks.run_ranks(links_worker, p, args=(job,), timeout_s=timeout_s)
    rows = table_rows(results, job, p)
    table = [[r["collective"], r["algorithm"], alpha_beta.human_bytes(r["bytes"]), f"{r['model_s'] * 1e3:.1f}",
              f"{r['free_s'] * 1e3:.1f}", f"{r['free_s'] / r['model_s']:.2f}",
              f"{r['lockstep_s'] * 1e3:.1f}", f"{r['lockstep_s'] / r['model_s']:.2f}"] for r in rows]
    print_table(["原语 collective", "算法", "n", "模型 ms", "实测 ms", "÷模型", "按轮同步 ms", "÷模型"], table)
    ok = all(r["ok"] for r in rows)
    metered = all(r["sent"] == r["schedule_sent"] for r in rows)
    out(f"模型 = schedule_cost 的 轮数·α + 关键路径字节·8/带宽（同一个 α 和带宽）。实测 = 从约定的起点到最后一个 rank "
        f"收到最后一条消息的墙上时间（wall clock，实测，随负载变）；自由运行：消息在程序走到那里时就发；按轮同步"
        f"（对照 control）：第 k 轮的消息在模型的第 k 轮开始时才发。结果{'都等于' if ok else '并不都等于'}真正的和；"
        f"每个 rank 发出的字节{'都等于' if metered else '并不都等于'} schedule_cost 数出来的字节"
        f"（{'共享上行' if job.shared_uplink else '不共享上行'} shared uplink {'on' if job.shared_uplink else 'off'}）。")
    out(links_observation(rows, job.latency_s, job.bandwidth_bps))
    return {"rows": rows, "ok": ok, "metered": metered}
