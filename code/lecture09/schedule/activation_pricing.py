"""Demo 1's job with its pipeline activations compressed: the proven optimum found again
with the pipeline bytes scaled, and the fp16 optimum's layout priced at the same bytes
(lecture 9, §11.1; code 11, demo 1). Pure arithmetic: no torch.

Demo 1 sends activations (forward) and their gradients (backward) across every stage cut
as fp16, 2 bytes per value (schedule_setup.ScheduleSetup.act_bytes_at). An encoding that
sends b bytes per value scales Eq. 3-4's c_PP by b / 2 and leaves the data-parallel
gradient (Eq. 2's c_DP) alone. Because c_PP is linear in the batch too, batch B at b bytes
per value costs what batch B * b / 2 costs at fp16 (one exact identity a test checks).
"""

from dataclasses import dataclass

from lecture09.schedule.hand_layouts import layout_stats
from lecture09.schedule.layout_cost import LayoutCost
from lecture09.schedule.layout_optimum import optimal_layout

FP16_BYTES = 2.0   # demo 1's activations and activation gradients travel as fp16


@dataclass(frozen=True)
class PricedEncoding:
    """One encoding of the activations at one global batch, priced on one network."""
    label: str
    bytes_per_value: float
    global_batch: int
    optimum: object          # layout_optimum.OptimumResult found for these bytes
    fp16_layout: dict        # {"dp", "pp", "total"} s: the fp16 optimum's layout at these bytes
    stats: dict              # hand_layouts.layout_stats of optimum.assignment
    fp16_stats: dict         # the same of the fp16 optimum's layout
    fp16_cost: float         # s: the fp16 optimum's communication at fp16 (demo 1's figure)

    @property
    def ratio(self):
        """How many times fewer pipeline bytes than fp16."""
        return FP16_BYTES / self.bytes_per_value

    @property
    def gain_s(self):
        """Seconds per iteration the new optimum saves over keeping the fp16 layout (>= 0
        when the optimum is proven: the fp16 layout is one of the layouts it beat)."""
        return self.fp16_layout["total"] - self.optimum.cost

    @property
    def layout_changed(self):
        """The fp16 layout is no longer optimal: a proven optimum strictly cheaper than it
        (None when the optimum is only a lower bound, which cannot decide)."""
        if not self.optimum.exact:
            return None
        return self.gain_s > 1e-9


def price_encodings(setup, net, bytes_per_value_by_label, batches, step=None):
    """[PricedEncoding] for every batch in `batches` (in order) and every encoding (label ->
    bytes per value, in order), on `net` with demo 1's job `setup`. step(text): progress of
    each search (layout_optimum.progress_words), for a search that takes long."""
    import time

    from lecture09.schedule.layout_optimum import progress_words

    def optimum(act, what):
        started = time.perf_counter()
        report = None if step is None else (lambda priced, budget: step(
            f"{what}：" + progress_words(priced, budget, time.perf_counter() - started)))
        return optimal_layout(net, setup.n_stages, setup.n_replicas, setup.stage_param_bytes, act,
                              n_micro_batches=setup.n_micro_batches, on_progress=report)

    if not bytes_per_value_by_label:
        raise ValueError("no encodings to price")
    rows = []
    for batch in batches:
        fp16_act = setup.act_bytes_at(batch)
        fp16 = optimum(fp16_act, f"batch {batch} fp16")
        fp16_stats = layout_stats(fp16.assignment, net, setup.n_stages, setup.n_replicas)
        for label, b in bytes_per_value_by_label.items():
            if not b > 0:
                raise ValueError(f"bytes per value must be positive, got {b!r} for {label!r}")
            act = fp16_act * b / FP16_BYTES
            best = optimum(act, f"batch {batch} {label}")
            kept = LayoutCost(net, setup.n_stages, setup.n_replicas, setup.stage_param_bytes, act,
                              setup.n_micro_batches).breakdown(fp16.assignment)
            rows.append(PricedEncoding(label, b, batch, best, kept,
                                       layout_stats(best.assignment, net, setup.n_stages, setup.n_replicas),
                                       fp16_stats, fp16.cost))
    return rows


def _layout_words(stats):
    return (f"流水线边 {stats['pipeline_links_within_region']}/{stats['pipeline_links']} 在地区内、"
            f"DP 组 {stats['dp_groups_within_region']}/{stats['dp_groups']} 整组在一个地区")


def print_pricing(setup, rows, out):
    """Table (b): per batch and encoding, the optimum found for these bytes and the fp16
    optimum's layout priced at them."""
    from lecture01.console import print_table
    kind = "最优（已证明）" if all(r.optimum.exact for r in rows) else "最优或下界（见下）"
    out(f"(b) 演示 1 的 {setup.n_params / 1e9:.1f}B 任务（{setup.n_stages} 阶段 × {setup.n_replicas} 副本，"
        f"M = {setup.n_micro_batches}）：每个切口两个方向的字节都按 (a) 的 字节/值 缩小，数据并行的梯度仍是 "
        f"fp16。每一行重新找{kind}的分配，再把 fp16 的最优分配按同样的字节算一遍（只算通信秒）：")
    table = []
    for r in rows:
        table.append((str(r.global_batch), r.label, f"{r.optimum.dp:.2f}", f"{r.optimum.pp:.2f}",
                      f"{r.optimum.cost:.2f}" + ("" if r.optimum.exact else "（下界）"),
                      f"{r.stats['pipeline_links_within_region']}/{r.stats['pipeline_links']}",
                      f"{r.stats['dp_groups_within_region']}/{r.stats['dp_groups']}",
                      f"{r.fp16_layout['total']:.2f}"))
    print_table(["batch", "编码", "dp 秒", "pp 秒", "通信 秒", "地区内 PP 边", "地区内 DP 组",
                 "fp16 分配 秒"], table, aligns=["<", "<"] + [">"] * 6)


def _change_words(before, after, digits):
    """"少了 x 秒", "多了 x 秒" or "一样", from the two numbers as printed with `digits` decimals."""
    from lecture01.console import printed_difference
    d = printed_difference(after, before, digits)
    return "一样" if d == 0 else f"{'多' if d > 0 else '少'}了 {abs(d):.{digits}f} 秒"


def pricing_observations(setup, rows):
    """What table (b) shows, worded from its numbers: per batch, whether an encoding moves
    the optimum, and what that is worth with the compute added."""
    from lecture01.console import printed_difference
    lines = []
    for batch in dict.fromkeys(r.global_batch for r in rows):
        group = [r for r in rows if r.global_batch == batch]
        changed = [r for r in group if r.layout_changed]
        undecided = [r for r in group if r.layout_changed is None]
        if changed:
            r = changed[0]
            which = (f"压缩到 {r.label}（压缩比 {r.ratio:.2f}）时最优分配变了" if len(changed) == 1 else
                     "、".join(c.label for c in changed) + f"都让最优分配变了，以 {r.label}（压缩比 {r.ratio:.2f}）为例")
            bigger = "这种编码比 fp16 还大（压缩比小于 1），流水线要发的字节更多；" if r.ratio < 1 else ""
            before, after = setup.compute_s + r.fp16_cost, setup.compute_s + r.optimum.cost
            lines.append(
                f"batch {batch}：{which}：{bigger}fp16 的最优是"
                f"{_layout_words(r.fp16_stats)}，这时的最优是{_layout_words(r.stats)}；"
                f"保留 fp16 的分配要 {r.fp16_layout['total']:.2f} 秒，换分配 {r.optimum.cost:.2f} 秒，"
                f"换了省 {printed_difference(r.fp16_layout['total'], r.optimum.cost, 2):.2f} 秒。"
                f"加上计算 {setup.compute_s:.1f} 秒，每次迭代 {before:.1f} → {after:.1f} 秒"
                f"（fp16 激活的最优 → 这一行的最优），{_change_words(before, after, 1)}。")
        elif undecided:
            lines.append(f"batch {batch}：网络不是按地区一致的，表里是下界，不能断定分配变没变。")
        else:
            last = group[-1]
            bigger = f"（压缩比 {last.ratio:.2f}，比 fp16 还大）" if last.ratio < 1 else ""
            lines.append(f"batch {batch}：表里每一种编码下，fp16 的最优分配仍然最优（{_layout_words(last.stats)}）；"
                         f"编码只改变流水线通信的时间，以 {last.label} 为例{bigger}：{last.fp16_cost:.2f} → "
                         f"{last.optimum.cost:.2f} 秒，{_change_words(last.fp16_cost, last.optimum.cost, 2)}。")
    return lines
