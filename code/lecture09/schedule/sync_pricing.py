"""What an outer sync costs on demo 1's network, and how much of it τ inner steps hide
(lecture 9, §11.3; code 11, demo 2). Pure arithmetic: no torch.

A row syncs `bytes_per_param` bytes per parameter of demo 1's 1.3B model in one exchange
(the ring's two legs averaged, as code 7's table (d) prices them) every `every` iterations,
and that exchange may overlap `overlap` iterations of compute and pipeline traffic
(Streaming DiLoCo's τ). Priced on demo 1's proven-optimal layout for fp16 traffic (the
layout code 7's table (d) uses), with Yuan et al.'s Eq. 2 for the exchange:

    sync_s     = DATAP-COST of that layout with c_DP = n_params * bytes_per_param / n_stages
    hidden_s   = overlap * (compute_s + PIPELINEP-COST)          (what runs meanwhile)
    blocked_s  = max(0, sync_s - hidden_s)                       (what the iteration waits)
    per iteration: compute_s + PIPELINEP-COST + blocked_s / every
"""

from dataclasses import dataclass

from lecture09.schedule.layout_optimum import optimal_layout
from lecture09.schedule.schedule_setup import ScheduleSetup, build_networks


@dataclass(frozen=True)
class SyncPrice:
    sync_s: float        # one exchange on the network
    hidden_s: float      # the compute and pipeline time it overlaps
    blocked_s: float     # what one exchange makes the training wait
    every: float         # iterations between two exchanges
    iteration_s: float   # compute + pipeline + blocked / every

    @property
    def blocked_per_iteration_s(self):
        return self.blocked_s / self.every


def price_syncs(rows, setup=None):
    """{key: SyncPrice} for rows {key: (bytes_per_param, every, overlap)} on demo 1's network;
    also the setup and the iteration without any data-parallel exchange."""
    s = setup or ScheduleSetup()
    geo, _ = build_networks(s)
    optimum = optimal_layout(geo, s.n_stages, s.n_replicas, s.stage_param_bytes, s.act_bytes,
                             n_micro_batches=s.n_micro_batches)
    prices = {}
    pp_s = None
    for key, (bytes_per_param, every, overlap) in rows.items():
        if not (bytes_per_param >= 0 and every > 0 and overlap >= 0):
            raise ValueError(f"row {key!r}: need bytes >= 0, every > 0, overlap >= 0")
        c = s.layout_cost(geo, s.n_params * bytes_per_param / s.n_stages).breakdown(optimum.assignment)
        pp_s = c["pp"]
        hidden = overlap * (s.compute_s + c["pp"])
        blocked = max(0.0, c["dp"] - hidden)
        prices[key] = SyncPrice(c["dp"], hidden, blocked, every, s.compute_s + c["pp"] + blocked / every)
    return prices, s, (s.compute_s + pp_s if pp_s is not None else None)


def print_table_d(labels, prices, setup, plain_iteration_s, out):
    """Table (d): one exchange's seconds, what overlaps it, what blocks, per iteration."""
    from lecture01.console import print_table
    out(f"(d) 用在演示 1 的 {setup.n_params / 1e9:.1f}B 任务上（它为 fp16 流量找到的最优分配，{setup.n_gpus} 张卡）："
        f"一次迭代不算数据并行时是 计算 {setup.compute_s:.1f} 秒 + 流水线 {plain_iteration_s - setup.compute_s:.2f} 秒 "
        f"= {plain_iteration_s:.2f} 秒。一次交换按 (c) 的峰值（环形两段的平均，压缩的行回程是 fp32，和代码 7 的表 (d) "
        "一样）算；每几步 = 调度的周期（H，或 Streaming 的 H/F）；τ 步重叠就有 τ 次迭代的时间藏住它：")
    rows = [(label, f"{p.sync_s:.2f}", f"{p.every:g}", f"{p.hidden_s:.2f}", f"{p.blocked_s:.2f}",
             f"{p.blocked_per_iteration_s:.2f}", f"{p.iteration_s:.2f}") for label, p in zip(labels, prices.values())]
    print_table(["做法", "一次交换 s", "每几步", "藏住 s", "阻塞 s", "每步摊到 s", "每次迭代 s"], rows)


def table_d_observations(labels, prices, whole, fragment, n_fragments):
    """What table (d) shows, from its numbers: `whole` and `fragment` are the labels of the
    DiLoCo row and of the first Streaming row (τ = 0), n_fragments their F."""
    by = dict(zip(labels, prices.values()))
    w, f = by[whole], by[fragment]
    lines = [f"「{whole}」每 {w.every:g} 步阻塞一次，一次 {w.blocked_s:.2f} 秒；「{fragment}」每 {f.every:g} 步一次，"
             f"一次 {f.blocked_s:.2f} 秒。摊到每步：{w.blocked_per_iteration_s:.2f} 对 {f.blocked_per_iteration_s:.2f} 秒"]
    if n_fragments > 1:
        extra = n_fragments * f.sync_s - w.sync_s
        if extra > 0:
            lines.append(f"{n_fragments} 片各交换一次共 {n_fragments * f.sync_s:.2f} 秒，比整个模型一次多 "
                         f"{extra:.2f} 秒：每次交换都要付一遍 Eq. 2 的延迟项（在没有延迟的网络上两者相等，"
                         "tests/test_code11.py 的 test_fragments_pay_the_latency_once_each）")
    fully = [l for l, p in by.items() if p.blocked_s == 0 and p.hidden_s > 0]
    if fully:
        lines.append("、".join(f"「{l}」" for l in fully) + "：一次交换比它重叠的 τ 次迭代短，阻塞 0 秒，每次迭代"
                     "只剩计算和流水线")
    elif any(p.hidden_s > 0 for p in by.values()):
        lines.append("有重叠的行，交换都比重叠的迭代长：重叠只藏住了一部分")
    return lines
