"""Code 11's demo 5: gossip local SGD beside local SGD with a full average, DiLoCo and
every-step AdamW, trained at the same seeds (table (i)); what one exchange of each costs on
demo 1's network (table (j)); observations worded from both (lecture 9, §11.6).

The control of the gossip row is "全体平均": the same inner steps, the same H, no outer
optimizer, only the exchange differs (everyone's mean instead of one peer's). DiLoCo (with
its Nesterov outer step) is there as the reference of tables (c) and (g). Between DiLoCo
(outer lr 0.7, momentum 0.9) and the full average (in effect outer lr 1, momentum 0) sits
one more row that changes one thing: DiLoCo with momentum 0 and its own lr, so the gap
splits into what the momentum does and what the learning rate does (notes §11.6). With
--outer-momentum 0 that row would be the DiLoCo row itself, and it is left out.
"""

import math
from dataclasses import dataclass

from lecture01.console import print_table
from lecture09.compress import compressed_dp as cdp
from lecture09.compress.gossip import bytes_per_exchange, ring_bytes_per_exchange
from lecture09.compress.decoupled_report import collect, delta_cell, _signed  # noqa: F401  (collect: re-exported)

WORDS = {"same": "差不多", "worse": "更差", "better": "更好", "unclear": "种子之间不一致"}


@dataclass(frozen=True)
class GossipRow:
    run: object                # compressed_dp.Run
    label: str


def build_rows(h, outer_momentum=0.9):
    """Table (i)'s rows: AdamW (the baseline of Δ), DiLoCo (demos 2 and 4's row), DiLoCo
    without outer momentum (one change from DiLoCo; left out when DiLoCo has none), local SGD
    with a full average (the control), gossip with one random peer."""
    Run = cdp.Run
    rows = [GossipRow(Run("AdamW", "adamw", "none"), "AdamW，每步通信（基准）"),
            GossipRow(Run(f"DiLoCo H{h}", "diloco", "none", param=h), f"DiLoCo，每 {h} 步")]
    if outer_momentum:
        rows.append(GossipRow(Run(f"DiLoCo H{h} m0", "diloco-no-momentum", "none", param=h),
                              f"DiLoCo，每 {h} 步，动量 0"))
    return rows + [GossipRow(Run(f"Local SGD H{h}", "gossip", "none", param=(h, "all")), "全体平均（对照）"),
                   GossipRow(Run(f"Gossip H{h}", "gossip", "none", param=(h, "gossip")), "gossip，一个随机同伴")]


def _labels(table):
    find = (lambda mode: next(l for l, (row, _, _) in table.items()
                              if row.run.optimizer == "gossip" and row.run.param[1] == mode))
    return find("all"), find("gossip")


def _optimizer_label(table, optimizer):
    """The label of the row trained with `optimizer`, or None if the table has none."""
    return next((l for l, (row, _, _) in table.items() if row.run.optimizer == optimizer), None)


def _pair(table, a, b):
    return [x.bpc - y.bpc if math.isfinite(x.bpc) and math.isfinite(y.bpc) else float("nan")
            for x, y in zip(table[a][1], table[b][1])]


def _mean(xs):
    xs = [x for x in xs if math.isfinite(x)]
    return sum(xs) / len(xs) if xs else float("nan")


def _spread_cell(results, i):
    value = _mean([r.spread[i] for r in results])
    return "—" if not math.isfinite(value) else f"{value:.4f}"


def print_table_i(setup, table, h, n_seeds, out):
    t = setup
    control, _ = _labels(table)
    no_momentum = _optimizer_label(table, "diloco-no-momentum")
    out(f"(i) 小 GPT，{t.n_workers} 个工作者，{t.steps} 步，前向 {t.precision}，每 {h} 步交换一次模型。「全体平均」和 gossip "
        "都没有外层优化器：交换后一个工作者的模型 = 全体的平均，或它和一个随机同伴的平均（每次重新随机配对）。"
        f"评估的是 {t.n_workers} 个副本的平均模型。字节 = 每个工作者平均每步每个参数发出的字节。散布 = 副本之间的相对距离 "
        "sqrt(平均 ||θ_w − θ̄||²) / ||θ̄||，交换前、交换后各取所有交换的平均。（DiLoCo 每次交换后也人人一样。）Δ = 这一行 − 同样种子的 AdamW；"
        f"比对照 = 这一行 − 同样种子的「{control}」，平均（配对差，{n_seeds} 组种子；范围见观察）。"
        + (f"「{no_momentum}」和 DiLoCo 只差一处：外层 lr 还是 {t.outer_lr:g}，不用动量，"
           "夹在 DiLoCo 和全体平均（相当于 lr 1、动量 0）之间：" if no_momentum else ""))
    rows = []
    for label, (row, results, deltas) in table.items():
        bpcs = [r.bpc for r in results if math.isfinite(r.bpc)]
        base = row.run.optimizer == "adamw"
        own = row.run.optimizer == "gossip"
        rows.append((label, f"{results[0].bytes_per_element:.4f}", f"{sum(bpcs) / len(bpcs):.4f}" if bpcs else "发散",
                     "—" if base else delta_cell(deltas, n_seeds, results, next(iter(table.values()))[1]),
                     delta_cell(_pair(table, label, control), 1, results, table[control][1])
                     if own and label != control else "—",
                     _spread_cell(results, 0) if own else "—", _spread_cell(results, 1) if own else "—"))
    print_table(["做法", "字节", "bits/字符", "Δ", "比对照", "散布 前", "散布 后"], rows)


def bytes_words(gossip, control, g, a, n_workers):
    """Table (i)'s bytes in words: the same count per message as DiLoCo's row, and how a ring
    all-reduce of the message multiplies it (none of it when W = 2)."""
    if g == a:
        words = f"字节：「{gossip}」和「{control}」平均每步每个参数都发 {g:.4f} 字节（每次交换每人一份 fp32 的模型，和 DiLoCo 一样记）"
    else:
        words = f"字节：「{gossip}」平均每步每个参数发 {g:.4f} 字节，「{control}」发 {a:.4f}"
    ring = ring_bytes_per_exchange(n_workers) / bytes_per_exchange("all")
    if ring > 1:
        return words + (f"；差在怎样走：走环形 all-reduce 时，全体平均（和 DiLoCo）每人实发这一份的 2(W − 1)/W = {ring:.2f} 倍"
                        f"（W = {n_workers}），gossip 的一对只互发一份，表 (j) 算时间")
    return words + f"；W = {n_workers} 时环形 all-reduce 每人也只发一份"


def _part(d, n, tolerance):
    """A paired difference in words: mean, the seeds' range, the verdict."""
    spread = "" if n == 1 else f"，各种子 {_signed(min(d))}..{_signed(max(d))}"
    return f"{_signed(sum(d) / n)}{spread}（{WORDS[cdp.verdict(d, tolerance)]}）"


def outer_step_words(table, outer_lr, outer_momentum, tolerance=cdp.DELTA_TOLERANCE_BPC):
    """DiLoCo against the full average, split one change at a time: the momentum (DiLoCo −
    its momentum-0 row), then the learning rate (that row − the full average). Which part is
    larger is said only when both parts hold the same sign on every seed."""
    diloco, control = _optimizer_label(table, "diloco"), _labels(table)[0]
    no_momentum = _optimizer_label(table, "diloco-no-momentum")
    n = len(table[diloco][1])
    total = _pair(table, diloco, control)
    if not all(math.isfinite(x) for x in total):
        return f"外层优化器：「{diloco}」或「{control}」发散了，没有配对差"
    head = f"外层优化器：「{diloco}」（lr {outer_lr:g}，动量 {outer_momentum:g}）比「{control}」：{_part(total, n, tolerance)}"
    if no_momentum is None:
        if outer_lr == 1:
            return head + "。lr 1、没有动量的 DiLoCo 和全体平均是同一个计算，只差舍入"
        return head + f"。DiLoCo 没有动量（--outer-momentum 0），两行只差外层 lr（{outer_lr:g} 和 1）"
    mom, lr = _pair(table, diloco, no_momentum), _pair(table, no_momentum, control)
    if not all(math.isfinite(x) for x in mom + lr):
        return head + f"；「{no_momentum}」发散了，拆不开"
    words = (head + f"。一次只改一处，拆成两份：动量那一份（「{diloco}」减「{no_momentum}」）{_part(mom, n, tolerance)}；"
             f"lr 那一份（{outer_lr:g} 对 1，「{no_momentum}」减「{control}」）{_part(lr, n, tolerance)}")
    if outer_lr == 1:
        return words + "；lr 已经是 1，后一段只是舍入"
    m, l = sum(mom) / n, sum(lr) / n
    if round(m, 4) + round(l, 4) != round(sum(total) / n, 4):
        words += "（两段相加和总差差在最后一位，是舍入）"
    v_mom, v_lr = cdp.verdict(mom, tolerance), cdp.verdict(lr, tolerance)
    if v_mom == v_lr and v_mom in ("worse", "better") and abs(m) != abs(l):
        words += "；两份同号，平均来看" + ("lr" if abs(l) > abs(m) else "动量") + "那一份大"
    elif {v_mom, v_lr} == {"worse", "better"}:
        words += "；两份方向相反，互相抵消了一部分"
    return words


def table_i_observations(table, n_workers, tolerance=cdp.DELTA_TOLERANCE_BPC, outer_lr=0.7, outer_momentum=0.9):
    control, gossip = _labels(table)
    n = len(table[gossip][1])
    g, a = table[gossip][1][0].bytes_per_element, table[control][1][0].bytes_per_element
    lines = [bytes_words(gossip, control, g, a, n_workers)]
    d = _pair(table, gossip, control)
    if all(math.isfinite(x) for x in d):
        spread = "" if n == 1 else f"，各种子 {_signed(min(d))}..{_signed(max(d))}"
        word = WORDS[cdp.verdict(d, tolerance)]
        lines.append(f"「{gossip}」比「{control}」：{_signed(sum(d) / n)}{spread}（{word}）。两行只差交换的方式。"
                     f"|Δ| ≤ {tolerance:g} 算差不多" + ("；一组种子只是一次抽样，--seeds 5 给出范围" if n == 1
                                                   else f"，{n} 组种子都在同一边才说更好或更差"))
    else:
        lines.append(f"「{gossip}」比「{control}」：有一行发散了，没有配对差")
    before, after = (_mean([r.spread[i] for r in table[gossip][1]]) for i in (0, 1))
    c_after = _mean([r.spread[1] for r in table[control][1]])
    if math.isfinite(before) and math.isfinite(after):
        kept = f"，是交换前（{before:.4f}）的 {after / before:.0%}" if before > 0 else ""
        lines.append(f"散布：「{control}」交换后是 {c_after:.4f}（人人一样）；「{gossip}」交换后还有 {after:.4f}{kept}："
                     "和一个同伴平均只把副本拉近，不拉齐")
    lines.append(outer_step_words(table, outer_lr, outer_momentum, tolerance))
    return lines


@dataclass(frozen=True)
class ExchangePrice:
    label: str
    exchange_s: float          # one exchange
    range_s: tuple = None      # (fastest, slowest) where it depends on the pair
    every: int = 1

    @property
    def per_step_s(self):
        return self.exchange_s / self.every


def price_rows(gossip_price, all_reduce_s, h):
    """Table (j)'s rows: the full average by Eq. 2; gossip as one replica waits for its own
    pair; gossip as a synchronous round waits for the slowest pair."""
    p = gossip_price
    return [ExchangePrice("全体平均：环形 all-reduce（Eq. 2）", all_reduce_s, None, h),
            ExchangePrice("gossip：只等自己这一对（期望）", p.own_mean_s, (p.own_min_s, p.own_max_s), h),
            ExchangePrice("gossip：一轮等最慢的一对（期望）", p.round_mean_s, (None, p.own_max_s), h)]


def print_table_j(rows, setup, plain_s, out):
    out(f"(j) 每 {rows[0].every} 步交换一次整个模型（fp32），放到演示 1 的 {setup.n_params / 1e9:.1f}B 任务上（演示 1 为 fp16 "
        f"找到的最优分配，每个阶段 {setup.n_replicas} 个副本）。gossip 的一对同时互发自己这个阶段的参数，"
        "一条链路上要 延迟 + 字节 / 带宽；配对在每个阶段里均匀随机。一次迭代不算数据并行时是 "
        f"{plain_s:.2f} 秒：")
    print_exchange_prices(rows, plain_s)


def print_exchange_prices(rows, plain_s):
    """Rows of ExchangePrice as a table: one exchange, its range (fastest..slowest, or the
    worst case alone), its share per step, and one iteration with it (tables (j) and (m))."""
    table = []
    for r in rows:
        lo, hi = r.range_s or (None, None)
        span = "—" if hi is None else (f"{lo:.2f}..{hi:.2f}" if lo is not None else f"最坏 {hi:.2f}")
        table.append((r.label, f"{r.exchange_s:.2f}", span, f"{r.per_step_s:.2f}", f"{plain_s + r.per_step_s:.2f}"))
    print_table(["做法", "一次交换 s", "范围 s", "每步摊到 s", "每次迭代 s"], table)


def table_j_observations(rows, gossip_price):
    ring, own, rnd = rows
    p = gossip_price
    lines = []
    if own.exchange_s < ring.exchange_s:
        lines.append(f"一个副本只等自己那一对时，期望 {own.exchange_s:.2f} 秒，是环形的 {ring.exchange_s:.2f} 秒的 "
                     f"{own.exchange_s / ring.exchange_s:.0%}；可是同伴是随机的，最快的一对 {p.own_min_s:.2f} 秒，"
                     f"最慢的 {p.own_max_s:.2f} 秒")
    else:
        lines.append(f"一个副本只等自己那一对时，期望 {own.exchange_s:.2f} 秒，不比环形的 {ring.exchange_s:.2f} 秒快")
    if rnd.exchange_s < ring.exchange_s:
        lines.append(f"一轮里人人等最慢的一对：期望 {rnd.exchange_s:.2f} 秒，比环形快 {ring.exchange_s - rnd.exchange_s:.2f} 秒")
    else:
        lines.append(f"一轮里人人等最慢的一对：期望 {rnd.exchange_s:.2f} 秒，不比环形快（多 "
                     f"{rnd.exchange_s - ring.exchange_s:.2f} 秒）：一对要在一条链路上发整个阶段的模型，"
                     "环形在每条链路上只发这个阶段的 2/D（Eq. 2）" + ("。gossip 省时间，只在副本不等别人的时候"
                                                if own.exchange_s < ring.exchange_s else ""))
    return lines
