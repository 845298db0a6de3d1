"""Code 5's --demo time: seconds to a target validation bpc on demo 1's slow network, for
demo 2's schemes (compress/slow_network.py trains them), in a table and in words
(lecture 9, §5.12). Every sentence reads the table's numbers.
"""

import statistics
from dataclasses import dataclass, replace

from lecture01.console import print_header, print_table, print_wrapped
from lecture09.compress.slow_network import calibrate, time_scale_for, train_timed, train_timed_diloco
from lecture09.compress.training import Run, Seeds
from lecture09.schedule.schedule_setup import build_networks

ROWS = (Run("fp32", "adamw", "none"), Run("fp16", "adamw", "fp16"), Run("int8", "adamw", "int8"),
        Run("top-k+EF", "adamw", "topk", error_feedback=True), Run("sign+EF", "adamw", "sign", error_feedback=True),
        Run("DiLoCo H=10", "diloco", "none", param=10), Run("DiLoCo H=10 int8", "diloco", "int8", param=10))
EVAL_EVERY = 10


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
            step(f"{run.label}，种子 seeds ({seeds.model}, {seeds.data})")
            train = train_timed_diloco if run.optimizer == "diloco" else train_timed
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
    out(f" {n}. 每个实测秒都已按时间比例换回 1.3B 任务的秒；计算是这台机器实测的（随负载变），通信是模拟链路上的。")


def print_time_demo(setup, schedule, seeds_list, target, step=lambda text: None):
    print_header("慢网络上到目标的时间 time to a target on the slow network（4 个工作者）")
    setup = replace(setup, precision="fp32")
    rows, scale = run_rows(setup, schedule, seeds_list, target, step)
    print_wrapped(f"4 个工作者在演示 1 网络（种子 {schedule.net_seed}）的 4 个地区各一台；每步各自算梯度（实测），"
                  f"再把编码后的张量发给另外 3 个（all-gather，共享上行）。时间比例：小模型 1 秒计算 = 1.3B 任务 "
                  f"{1 / scale.time:.0f} 秒；1 个梯度元素代表 1.3B 的 1 个（字节比例 {scale.bytes:.2e}）。fp32 前向。")
    seeds_text = "、".join(f"({s.model}, {s.data})" for s in seeds_list)
    print_wrapped(f"种子 seeds {seeds_text}；多个种子时是平均±半个范围（(最高−最低)/2）。目标 target：验证 bpc ≤ {target}。")
    print_table(["方案", "GB/步", "计算 秒", "等网络 秒", "等待", "bpc", "Δ bpc", "到目标 秒", "无网络 秒"],
                [[r.label, f"{r.job_gb:.2f}", fmt_spread(r.compute_s),
                  fmt_spread(r.network_s), fmt_spread(r.waiting_share, 0, 100) + "%", fmt_spread(r.bpc, 3),
                  fmt_spread(r.delta, 3), fmt_spread(r.to_target, 0), fmt_spread(r.to_target_no_network, 0)]
                 for r in rows])
    observations(rows, target)
    return rows
