"""Code 5's --demo time: seconds to a target validation bpc on demo 1's slow network, for
demo 2's schemes and the low-communication methods (compress/slow_network.py and
slow_network_lowcomm.py train them), in a table and in words (lecture 9, §5.12). Every
sentence reads the table's numbers.
"""

import statistics
from dataclasses import dataclass, replace

from lecture01.console import display_width, format_table, print_header, print_wrapped
from lecture09.compress.slow_network import calibrate, time_scale_for, train_timed, train_timed_diloco
from lecture09.compress.slow_network_lowcomm import train_timed_sparseloco, train_timed_streaming
from lecture09.compress.training import Run, Seeds
from lecture09.schedule.schedule_setup import build_networks

STREAMING = Run("Streaming τ=4", "streaming-diloco", "none", param=(10, 2, 4))
NO_OVERLAP = Run("Streaming 不重叠", "streaming-no-overlap", "none", param=(10, 2, 4))
SPARSELOCO = Run("SparseLoCo H=10", "sparseloco", "none", param=(10, 32, 64, 2))   # code 11's k, chunk, 2 bits
ROWS = (Run("fp32", "adamw", "none"), Run("fp16", "adamw", "fp16"), Run("int8", "adamw", "int8"),
        Run("top-k+EF", "adamw", "topk", error_feedback=True), Run("sign+EF", "adamw", "sign", error_feedback=True),
        Run("DiLoCo H=10", "diloco", "none", param=10), Run("DiLoCo H=10 int8", "diloco", "int8", param=10),
        STREAMING, NO_OVERLAP, SPARSELOCO)
EVAL_EVERY = 10
TRAINERS = {"diloco": train_timed_diloco, "sparseloco": train_timed_sparseloco}


@dataclass(frozen=True)
class Row:
    """One scheme over the seeds (each list one value per seed, seeds in order)."""
    label: str
    key: tuple
    bytes_per_element: float
    job_gb: float                # per worker per step, all-gather to 3 peers, scaled back
    compute_s: tuple
    network_s: tuple
    bpc: tuple
    to_target: tuple             # job seconds to the target, None: not reached
    to_target_no_network: tuple  # the same curve with the waiting removed (steps x compute)
    delta: tuple                 # bpc - fp32's bpc at the same seed

    @property
    def step_s(self):
        return tuple(c + n for c, n in zip(self.compute_s, self.network_s))

    @property
    def waiting_share(self):
        return tuple(n / s for n, s in zip(self.network_s, self.step_s))


def _mean(values):
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if len(known) == len(values) and known else None


def fmt_spread(values, digits=1, scale=1.0):
    """'mean' or 'mean (low–high)' over seeds; '未达到' if any seed did not get there."""
    if any(v is None for v in values):
        reached = sum(v is not None for v in values)
        return "未达到" if not reached else f"{reached}/{len(values)} 达到"
    vals = [v * scale for v in values]
    text = f"{statistics.fmean(vals):.{digits}f}"
    return text if len(vals) == 1 else f"{text}±{(max(vals) - min(vals)) / 2:.{digits}f}"


def to_target_without_network(run, target):
    """Job seconds to the target if the network took no time: the evaluation's step x
    the run's compute seconds per step (the same trajectory: timing never changes training)."""
    for step, _, bpc in run.curve:
        if bpc <= target:
            return step * run.job_compute_s
    return None


def run_rows(setup, schedule, seeds_list, target, step=lambda text: None):
    """(rows, scale): every scheme at every seed pair, on 4 devices of demo 1's network, one per
    region (the first device of each)."""
    net, _ = build_networks(schedule)
    devices = [sum(schedule.region_sizes[:k]) for k in range(len(schedule.region_sizes))][:setup.n_workers]
    while len(devices) < setup.n_workers:       # fewer regions than workers: fill region 0
        devices.append(next(d for d in range(schedule.n_gpus) if d not in devices))
    step("标定计算时间 calibrating compute")
    tiny_s, tiny_params = calibrate(setup, seeds_list[0])
    scale = time_scale_for(tiny_s, tiny_params, schedule.compute_s)
    runs = {}
    for seeds in seeds_list:
        for run in ROWS:
            if run is NO_OVERLAP:         # timed from STREAMING's own run: only the overlap removed
                continue
            step(f"{run.label}，种子 seeds ({seeds.model}, {seeds.data})")
            if run is STREAMING:
                both = train_timed_streaming(run, seeds, setup, net, devices, scale, EVAL_EVERY)
                runs[(run.key, seeds)], runs[(NO_OVERLAP.key, seeds)] = both
                continue
            train = TRAINERS.get(run.optimizer, train_timed)
            runs[(run.key, seeds)] = train(run, seeds, setup, net, devices, scale, EVAL_EVERY)
    rows = []
    for run in ROWS:
        timed = [runs[(run.key, s)] for s in seeds_list]
        base = [runs[(ROWS[0].key, s)] for s in seeds_list]
        rows.append(Row(run.label, run.key, timed[0].bytes_per_element, timed[0].job_bytes / 1e9,
                        tuple(t.job_compute_s for t in timed), tuple(t.job_network_s for t in timed),
                        tuple(t.bpc for t in timed), tuple(t.seconds_to(target) for t in timed),
                        tuple(to_target_without_network(t, target) for t in timed),
                        tuple(t.bpc - b.bpc for t, b in zip(timed, base))))
    return rows, scale


def order(rows, attr, reverse=False):
    """Labels ordered by the mean of attr over seeds (not reached last)."""
    def key(row):
        m = _mean(getattr(row, attr))
        return (m is None, (-m if reverse else m) if m is not None else 0)
    return [r.label for r in sorted(rows, key=key)]


def observations(rows, target, out=print_wrapped):
    out("观察 Observations（慢网络上到目标的时间）：")
    by_s, by_bytes = order(rows, "to_target"), [r.label for r in sorted(rows, key=lambda r: r.job_gb)]
    by_bpc = order(rows, "bpc")
    by_free = order(rows, "to_target_no_network")
    out(f" 1. 到 {target} bits/字符 的秒数从快到慢：{' < '.join(by_s)}；按字节从少到多：{' < '.join(by_bytes)}；"
        f"按最后的 bpc 从好到差：{' < '.join(by_bpc)}。")
    fp32 = rows[0]
    w = _mean(fp32.waiting_share)
    out(f" 2. 不压缩时每步 {_mean(fp32.step_s):.1f} 秒里 {100 * w:.0f}% 在等网络（计算 {_mean(fp32.compute_s):.1f} 秒）："
        f"这张网上每步多长主要看发多少字节（对照：'无网络 秒'一列只剩计算）。")
    n = 3
    if by_s != by_bytes:
        first_diff = next(i for i, (a, b) in enumerate(zip(by_s, by_bytes)) if a != b)
        few = next(r for r in rows if r.label == by_bytes[first_diff])
        reached = _mean(few.to_target)
        when = f"到目标要 {reached:.0f} 秒" if reached is not None else f"到最后{fmt_spread(few.to_target)}目标"
        out(f" {n}. 秒数和字节的排序在第 {first_diff + 1} 位分开：{few.label} 每步只发 {few.job_gb:.2f} GB，"
            f"却{when}（最后 bpc {fmt_spread(few.bpc, 3)}，Δ {fmt_spread(few.delta, 3)}）："
            f"它省下每步的秒数，却要更多步。对照'无网络 秒'（同一条曲线，去掉等待，只剩计算）的排序是 "
            f"{' < '.join(by_free)}{'，和 bpc 的排序一样' if by_free == by_bpc else ''}。")
        n += 1
    else:
        out(f" {n}. 秒数和字节的排序一样：这张网上每步的秒数主要是等网络。")
        n += 1
    n = overlap_observation(rows, by_s, n, out)
    out(f" {n}. 每个实测秒都已按时间比例换回 1.3B 任务的秒；计算是这台机器实测的（随负载变），通信是模拟链路上的。")


def overlap_observation(rows, by_s, n, out):
    """What Streaming DiLoCo's overlap hides, read off its row and its control (the same run
    timed without the overlap); the next observation's number."""
    found = {r.key: r for r in rows}
    if STREAMING.key not in found or NO_OVERLAP.key not in found:
        return n
    s, c = found[STREAMING.key], found[NO_OVERLAP.key]
    wait_s, wait_c = round(_mean(s.network_s), 1), round(_mean(c.network_s), 1)
    same = f"{s.label} 和它的对照是同一次训练（同样 {s.job_gb:.2f} GB/步，bpc {fmt_spread(s.bpc, 3)}）"
    if wait_c == 0:
        out(f" {n}. 重叠 overlap：{same}；对照每步等网络 0.0 秒：网络不花时间，重叠没有可藏的。")
        return n + 1
    hidden = 100 * (wait_c - wait_s) / wait_c
    how = ("每片的交换在 τ 步计算里全部藏住" if wait_s == 0 else "重叠没有减少等待" if wait_s >= wait_c else
           f"藏住 {hidden:.0f}%，剩下的是交换（含排队）比 τ 步计算长出的部分")
    t_s, t_c = _mean(s.to_target), _mean(c.to_target)
    if t_s is None or t_c is None:        # the same bpc curve: both reach the target or neither
        rank = f"两者到目标的情况一样（同一条 bpc 曲线）：{fmt_spread(s.to_target)}"
    else:
        passed = by_s[by_s.index(s.label) + 1:by_s.index(c.label)]
        rank = f"到目标 {t_s:.0f} 秒对 {t_c:.0f} 秒，" + (
            f"排到 {'、'.join(passed)} 前面，对照在它们后面：字节和 bpc 都一样，排序的这个差别只来自重叠"
            if passed else "在秒数排序里没有越过别的行")
    out(f" {n}. 重叠 overlap：{same}；不重叠时每步等网络 {wait_c:.1f} 秒，重叠后 {wait_s:.1f} 秒（{how}）；"
        f"{rank}。")
    return n + 1


def table_lines(rows):
    """The table's lines: compute in whole seconds, and one space between columns where two
    would pass 100 columns (two seeds, 5-digit seconds)."""
    cells = [[r.label, f"{r.job_gb:.2f}", fmt_spread(r.compute_s, 0),
              fmt_spread(r.network_s), fmt_spread(r.waiting_share, 0, 100) + "%", fmt_spread(r.bpc, 3),
              fmt_spread(r.delta, 3), fmt_spread(r.to_target, 0), fmt_spread(r.to_target_no_network, 0)]
             for r in rows]
    headers = ["方案", "GB/步", "计算 秒", "等网络 秒", "等待", "bpc", "Δ bpc", "到目标 秒", "无网络 秒"]
    lines = format_table(headers, cells)
    return lines if max(map(display_width, lines)) <= 100 else format_table(headers, cells, gap=1)


def print_time_demo(setup, schedule, seeds_list, target, step=lambda text: None):
    print_header("慢网络上到目标的时间 time to a target on the slow network（4 个工作者）")
    setup = replace(setup, precision="fp32")
    rows, scale = run_rows(setup, schedule, seeds_list, target, step)
    print_wrapped(f"4 个工作者在演示 1 网络（种子 {schedule.net_seed}）的 4 个地区各一台；每步各自算梯度（实测），"
                  f"再把编码后的张量发给另外 3 个（all-gather，共享上行）。时间比例：小模型 1 秒计算 = 1.3B 任务 "
                  f"{1 / scale.time:.0f} 秒；1 个梯度元素代表 1.3B 的 1 个（字节比例 {scale.bytes:.2e}）。fp32 前向。")
    (h_total, fragments, tau), (h_sparse, topk, chunk, _) = STREAMING.param, SPARSELOCO.param
    print_wrapped(f"Streaming DiLoCo（H = {h_total}，F = {fragments}）：模型切成 {fragments} 片，"
                  f"每 {h_total // fragments} 步轮到一片同步；一片发出后工作者接着算 τ = {tau} 步才用到它，"
                  f"交换藏在这些计算后面（重叠 overlap）。'Streaming 不重叠'一行是同一次训练换一种计时："
                  f"每片一发出就等它到齐（对照，只去掉重叠）。SparseLoCo：每 {h_sparse} 步，伪梯度每块"
                  f"（{chunk}×{chunk}）只发最大的 {topk} 个，值 2 bit，没发的留在误差反馈里（代码 11 演示 4）。")
    seeds_text = "、".join(f"({s.model}, {s.data})" for s in seeds_list)
    print_wrapped(f"种子 seeds {seeds_text}；多个种子时是平均±半个范围（(最高−最低)/2）。目标 target：验证 bpc ≤ {target}。")
    for line in table_lines(rows):
        print(line)
    observations(rows, target)
    return rows
