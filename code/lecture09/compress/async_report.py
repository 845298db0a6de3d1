"""Code 11's demo 7: asynchronous local SGD (a server that applies each worker's
pseudo-gradient when it arrives) beside its synchronous twins, trained at the same seeds
(table (l)); what one exchange of each costs on demo 1's network (table (m)); observations
worded from both (lecture 9, §11.8).

Each asynchronous row has a synchronous twin that differs from it only in waiting: the
delayed Nesterov row and the per-arrival Nesterov row have DiLoCo (demos 2, 4 and 5's row,
the same outer lr and momentum); the row without momentum has the full average of demo 5
(lr 1, no momentum). Those three rows are demo 5's runs, trained once when both demos run.
"""

import math
from dataclasses import dataclass

from lecture01.console import print_table
from lecture09.compress import compressed_dp as cdp
from lecture09.compress import gossip_report
from lecture09.compress.async_local_sgd import FP32, synchronous_time, step_times
from lecture09.compress.decoupled_report import collect, delta_cell, _signed  # noqa: F401  (collect: re-exported)

WORDS = gossip_report.WORDS


@dataclass(frozen=True)
class AsyncRow:
    run: object                # compressed_dp.Run
    label: str
    twin: str = None           # the label of its synchronous twin (asynchronous rows)


def build_rows(h, slowest):
    """Table (l)'s rows: demo 5's AdamW (the baseline of Δ), DiLoCo and full average, then the
    three asynchronous servers, each with its synchronous twin."""
    Run = cdp.Run
    adamw, diloco, average = (gossip_report.GossipRow(r.run, r.label) for r in gossip_report.build_rows(h)[:3])
    diloco_label, average_label = f"同步：DiLoCo，每 {h} 步", "同步：全体平均，每 {h} 步".format(h=h)
    return [AsyncRow(adamw.run, adamw.label), AsyncRow(diloco.run, diloco_label),
            AsyncRow(average.run, average_label),
            AsyncRow(Run(f"Async Nesterov H{h} s{slowest:g}", "async-local-sgd", "none", param=(h, "nesterov", slowest)),
                     "异步：Nesterov 每次到达", diloco_label),
            AsyncRow(Run(f"Async DN H{h} s{slowest:g}", "async-local-sgd", "none", param=(h, "delayed", slowest)),
                     "异步：延迟的 Nesterov", diloco_label),
            AsyncRow(Run(f"Async avg H{h} s{slowest:g}", "async-local-sgd", "none", param=(h, "average", slowest)),
                     "异步：没有动量", average_label)]


def _pair(table, a, b):
    return gossip_report._pair(table, a, b)


def _mean(xs):
    xs = [x for x in xs if math.isfinite(x)]
    return sum(xs) / len(xs) if xs else float("nan")


def row_time(row, results, steps, slowest):
    """Time units to the end of training: an asynchronous row's last arrival (the same for
    every seed: arrival times do not depend on the model); a synchronous row waits for the
    slowest worker every step."""
    if row.twin is None:
        return synchronous_time(steps, slowest)
    return results[0].timing[0]


def print_table_l(setup, table, h, slowest, n_seeds, out):
    t = setup
    times = ", ".join(f"{x:.3g}" for x in step_times(t.n_workers, slowest))
    out(f"(l) 小 GPT，{t.n_workers} 个工作者，一共 {t.steps} × {t.n_workers} 个内层步（和 DiLoCo 一样多），每步 "
        f"{t.recipe.batch_size // t.n_workers} 个序列，前向 {t.precision}。工作者一步要 {times} 个时间单位；"
        f"走完 {h} 步把伪梯度发给服务器，服务器收到一个就更新一次，工作者再取回新模型接着训练，谁也不等谁。"
        f"Nesterov 每次到达：一步 lr {t.outer_lr:g}/{t.n_workers}，动量 {t.outer_momentum:g}；延迟的 Nesterov："
        f"N = {t.n_workers}，lr {t.outer_lr:g}，动量 {t.outer_momentum:g}（和 DiLoCo 一样）；没有动量：每次到达 "
        f"θ 减去 g/{t.n_workers}。字节 = 每个工作者每步每个参数发出的字节，平均/峰值（一步里最多）。"
        "陈旧 = 一个伪梯度从取模型到送达之间，服务器用过的别人的伪梯度个数，平均/最多。时间 = 训练完要几个时间单位"
        f"（同步的行每步都等最慢的工作者）。Δ = 这一行 − 同样种子的 AdamW，平均（配对差，{n_seeds} 组种子"
        + ("" if n_seeds == 1 else "，括号里是范围") + "）；异步的行和它的同步对照之差见观察：")
    rows = []
    for label, (row, results, deltas) in table.items():
        bpcs = [r.bpc for r in results if math.isfinite(r.bpc)]
        base = row.run.optimizer == "adamw"
        rows.append((label, f"{results[0].bytes_per_element:.4f}/{peak_bytes(row, results[0]):g}",
                     f"{sum(bpcs) / len(bpcs):.4f}" if bpcs else "发散", "—" if base else delta_cell(deltas, n_seeds, results, next(iter(table.values()))[1]),
                     _stale_cell(results) if row.twin is not None else "0", f"{row_time(row, results, t.steps, slowest):g}"))
    print_table(["做法", "字节", "bits/字符", "Δ", "陈旧", "时间"], rows)


def peak_bytes(row, result):
    """The most bytes per parameter one worker sends in one step: every-step AdamW sends the
    same each step; DiLoCo, the full average and an arrival send one fp32 copy at once."""
    if result.peak_bytes_per_element is not None:
        return result.peak_bytes_per_element
    return result.bytes_per_element if row.run.optimizer == "adamw" else FP32


def _stale_cell(results):
    return f"{_mean([r.timing[1] for r in results]):.2f}/{max(r.timing[2] for r in results)}"


def _labels(table):
    find = (lambda mode: next(l for l, (row, _, _) in table.items()
                              if row.twin is not None and row.run.param[1] == mode))
    return find("nesterov"), find("delayed"), find("average")


def _compare(table, a, b, tolerance, what):
    d = _pair(table, a, b)
    n = len(d)
    if not all(math.isfinite(x) for x in d):
        return f"「{a}」比「{b}」：有一行发散了（或它的对照发散了），没有配对差", d
    spread = "" if n == 1 else f"，各种子 {_signed(min(d))}..{_signed(max(d))}"
    return (f"「{a}」比「{b}」：{_signed(cdp.printed_mean_delta(table[a][1], table[b][1]))}{spread}（{WORDS[cdp.verdict(d, tolerance)]}）。{what}", d)


def table_l_observations(table, steps, slowest, outer_lr, outer_momentum, tolerance=cdp.DELTA_TOLERANCE_BPC):
    naive, delayed, average = _labels(table)
    row, results, _ = table[delayed]
    t_async, t_sync = results[0].timing[0], synchronous_time(steps, slowest)
    stale = f"平均 {_mean([r.timing[1] for r in results]):.2f}，最多 {max(r.timing[2] for r in results)}"
    if t_async < t_sync:
        lines = [f"时间：异步的行 {t_async:g} 个时间单位就训练完，同步的行要 {t_sync:g}（{t_async / t_sync:.0%}）："
                 f"同样多的内层步，谁也不等最慢的工作者。代价是陈旧：{stale}"]
    elif t_async == t_sync and slowest == 1:
        lines = [f"时间：工作者一样快（--slowest {slowest:g}），异步不省时间（都是 {t_sync:g} 个时间单位），"
                 f"却照样陈旧：{stale}"]
    else:
        lines = [f"时间：异步的行要 {t_async:g} 个时间单位，不比同步的 {t_sync:g} 少：时间由最后送达的那一轮决定，"
                 f"而这个模拟里一轮最多 H 步，谁先空下来谁接着走剩下的步数，最后几轮不一定由大家分。陈旧：{stale}"]
    lines.append(_compare(table, delayed, naive, tolerance, "两行每次到达都让 θ 走 lr/W 倍的 g，只差动量："
                          "每次到达都更新、都用（N = 1），还是攒够 W 个到达才更新、才用一次（N = W）"
                          if outer_momentum else "没有动量（--outer-momentum 0）时两行是同一个计算："
                          "每次到达 θ 都减去 lr/W 倍的 g，只差舍入")[0])
    text, with_momentum = _compare(table, delayed, row.twin, tolerance, "两行只差等不等（和取数据的顺序）")
    lines.append(text)
    text, without = _compare(table, average, table[average][0].twin, tolerance, "两行只差等不等（和取数据的顺序）")
    lines.append(text)
    lines += cost_words(with_momentum, without, outer_lr, outer_momentum, tolerance)
    return lines


def what_differs(outer_lr, outer_momentum):
    """What the DiLoCo pair's outer step has that the pair without momentum (lr 1, no
    momentum) has not: its lr, its momentum, both, or nothing."""
    parts = ([f"lr（{outer_lr:g} 和 1）"] if outer_lr != 1 else []) + \
            ([f"动量（{outer_momentum:g} 和 0）"] if outer_momentum != 0 else [])
    return "、".join(parts)


def cost_words(with_momentum, without, outer_lr, outer_momentum, tolerance):
    """The price of asynchrony under DiLoCo's outer step against the pair without momentum:
    per seed, (delayed − DiLoCo) − (no momentum − full average); what it can be blamed on
    follows from what differs between the pairs."""
    both = list(zip(with_momentum, without))
    if not both or not all(math.isfinite(a) and math.isfinite(b) for a, b in both):
        return []
    differs = what_differs(outer_lr, outer_momentum)
    if not differs:
        return [f"外层 lr 1、没有动量时，两对的外层步是同一个（DN 的 N = W 时每次到达都是 θ 减去 g/W），"
                "异步的代价只差舍入和种子"]
    gap = [a - b for a, b in both]
    span = (lambda lo, hi: _signed(lo) if len(gap) == 1 else f"{_signed(lo)}..{_signed(hi)}")
    if all(g > tolerance for g in gap):
        head = (f"异步的代价：DiLoCo 那一对比没有动量的那一对大 {span(min(gap), max(gap))}"
                f"（{'每组种子都大' if len(gap) > 1 else '一组种子'}）。")
    elif all(g < -tolerance for g in gap):
        head = f"异步的代价：DiLoCo 那一对比没有动量的那一对小 {span(-max(gap), -min(gap))}。"
    else:
        return ["异步的代价在两对之间分不出大小（差在容差内，或种子之间不一致）"]
    if outer_lr != 1 and outer_momentum != 0:
        return [head + f"两对的外层步差在 {differs}，哪一个造成的，这张表分不出来"
                "（加 --outer-lr 1，两对就只差动量；加 --outer-momentum 0，就只差 lr）"]
    return [head + f"两对的外层步只差 {differs}，这个差来自它"]


def price_rows(server_price, all_reduce_s, h):
    """Table (m)'s rows: a synchronous exchange (everyone waits for the ring all-reduce of
    Eq. 2); an asynchronous one (a replica waits for its own link to its stage's server)."""
    p, Price = server_price, gossip_report.ExchangePrice
    return [Price("同步：环形 all-reduce（Eq. 2），人人等", all_reduce_s, None, h),
            Price("异步：只等自己到服务器的链路（平均）", p.mean_s, (p.min_s, p.max_s), h)]


def print_table_m(rows, setup, plain_s, out):
    out(f"(m) 每 {rows[0].every} 步交换一次（伪梯度上去、模型回来，fp32），放到演示 1 的 {setup.n_params / 1e9:.1f}B 任务上"
        f"（演示 1 为 fp16 找到的最优分配，每个阶段 {setup.n_replicas} 个副本）。异步时每个阶段的服务器放在这一组里到别人"
        "平均最快的那个副本上，别的副本和它在一条链路上互发这个阶段的参数（服务器的网卡被几个副本同时用时会更慢，没有算）。"
        f"一次迭代不算数据并行时是 {plain_s:.2f} 秒：")
    gossip_report.print_exchange_prices(rows, plain_s)


def table_m_observations(rows, server_price):
    ring, own = rows
    p = server_price
    if own.exchange_s < ring.exchange_s:
        text = (f"异步时一个副本只等自己的链路：平均 {own.exchange_s:.2f} 秒，是环形的 {ring.exchange_s:.2f} 秒的 "
                f"{own.exchange_s / ring.exchange_s:.0%}")
    else:
        text = f"异步时一个副本只等自己的链路：平均 {own.exchange_s:.2f} 秒，不比环形的 {ring.exchange_s:.2f} 秒快"
    if p.max_s > ring.exchange_s:
        text += f"；离服务器最远的副本要 {p.max_s:.2f} 秒，比环形还慢"
    else:
        text += f"；最远的副本 {p.max_s:.2f} 秒，也不比环形慢"
    return [text + "。同步时人人还要等最慢的工作者算完，演示 1 的模型里卡一样快，这一项没有出现"]
