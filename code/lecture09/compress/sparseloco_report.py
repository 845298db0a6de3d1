"""Code 11's demo 4: SparseLoCo beside DiLoCo (fp32 and int8 pseudo-gradients) and
every-step AdamW, trained at the same seeds (table (g)); what one exchange of each costs on
demo 1's 1.3B job (table (h)); observations worded from both (lecture 9, §11.5).

Pricing as decoupled_report's: DiLoCo's dense pseudo-gradient goes round a ring (an int8
one comes back in fp32, as in table (d): c = (up + 4) / 2); SparseLoCo's (index, 2-bit
value) pairs differ between workers, so they are all-gathered: c = D s / 2 for s sent.
"""

import math
from dataclasses import dataclass

from lecture01.console import print_table
from lecture09.compress import compressed_dp as cdp
from lecture09.compress.decoupled_report import XL, collect, delta_cell, gpt_shapes, _signed  # noqa: F401

FP32 = 4
WORDS = {"same": "差不多", "worse": "更差", "better": "更好", "unclear": "种子之间不一致"}


@dataclass(frozen=True)
class SparseRow:
    run: object                # compressed_dp.Run
    label: str
    gathered: bool             # its pairs are all-gathered (True) or the vector all-reduced
    control: bool = False      # a training control (fp32 values), not a method to price


def build_rows(h, topk, chunk):
    """Table (g)'s rows: AdamW (the baseline of Δ), DiLoCo in fp32 (demo 2's row), DiLoCo
    with int8 pseudo-gradients (the reference of the paired column), SparseLoCo, and its
    control with fp32 values (only the 2 bits removed)."""
    Run = cdp.Run
    return [SparseRow(Run("AdamW", "adamw", "none"), "AdamW，每步通信（基准）", False),
            SparseRow(Run(f"DiLoCo H{h}", "diloco", "none", param=h), f"DiLoCo，每 {h} 步", False),
            SparseRow(Run(f"DiLoCo H{h} int8", "diloco", "int8-block", param=h), f"DiLoCo，每 {h} 步，int8", False),
            SparseRow(Run("SparseLoCo", "sparseloco", "none", param=(h, topk, chunk, 2)),
                      f"SparseLoCo，k = {topk}，2 bit", True),
            SparseRow(Run("SparseLoCo fp32", "sparseloco", "none", param=(h, topk, chunk, 32)),
                      "SparseLoCo，值用 fp32（对照）", True, control=True)]




def per_exchange(result, h):
    """Bytes per parameter one worker sends in one exchange: local_sgd syncs every h steps
    and once more at the end when h does not divide the steps."""
    return result.bytes_per_element * result.steps_done / max(1, math.ceil(result.steps_done / h))


def _find(table, test):
    return next(label for label, (row, _, _) in table.items() if test(row))


def _labels(table):
    return (_find(table, lambda r: r.run.optimizer == "diloco" and r.run.scheme != "none"),
            _find(table, lambda r: r.run.optimizer == "sparseloco" and not r.control),
            _find(table, lambda r: r.control))


def _pair(table, a, b):
    """Per seed, bits per char of row a minus row b (nan when either diverged)."""
    return [x.bpc - y.bpc if math.isfinite(x.bpc) and math.isfinite(y.bpc) else float("nan")
            for x, y in zip(table[a][1], table[b][1])]


def print_table_g(setup, table, h, chunk, n_seeds, out):
    t = setup
    int8, _, _ = _labels(table)
    out(f"(g) 小 GPT，{t.n_workers} 个工作者，{t.steps} 步，前向 {t.precision}，每 {h} 步交换一次伪梯度。SparseLoCo："
        f"误差反馈衰减 β {t.sparseloco_decay:g}，外层 lr α {t.sparseloco_lr:g}，没有外层动量；DiLoCo 的外层是 Nesterov"
        f"（lr {t.outer_lr:g}，动量 {t.outer_momentum:g}）。k = 每块（边长不超过 {chunk} 的块）发几个分量。"
        f"平均 = 每个工作者每步每个参数发出的字节（交换那一步发出 平均 × {h}，最后不满 {h} 步时也交换一次）。Δ = 这一行 − 同样种子的 AdamW；"
        f"比 int8 = 这一行 − 同样种子的「{int8}」，平均（配对差，{n_seeds} 组种子；范围见观察）：")
    rows = []
    for label, (row, results, deltas) in table.items():
        bpcs = [r.bpc for r in results if math.isfinite(r.bpc)]
        mean = results[0].bytes_per_element
        base = row.run.optimizer == "adamw"
        pair = "—" if label == int8 or base else delta_cell(_pair(table, label, int8), 1, results, table[int8][1])
        rows.append((label, f"{mean:.4f}", f"{sum(bpcs) / len(bpcs):.4f}" if bpcs else "发散",
                     "—" if base else delta_cell(deltas, n_seeds, results, next(iter(table.values()))[1]), pair))
    print_table(["做法", "平均 字节/参数", "bits/字符", "Δ", "比 int8"], rows)


def _times(a, b):
    """a as a fraction or a multiple of b, in words."""
    return f"1/{b / a:.1f}" if a < b else f"{a / b:.1f} 倍"


def _verdict_words(diffs, tolerance):
    return WORDS[cdp.verdict(diffs, tolerance)]


def table_g_observations(table, h, tolerance=cdp.DELTA_TOLERANCE_BPC):
    int8, sparse, control = _labels(table)
    n = len(table[sparse][1])
    s_mean, i_mean = table[sparse][1][0].bytes_per_element, table[int8][1][0].bytes_per_element
    lines = [f"字节：「{sparse}」交换那一步每个参数发 {per_exchange(table[sparse][1][0], h):.4f} 字节，平均每步 {s_mean:.4f}，是「{int8}」"
             f"（{i_mean:.4f}）的 {_times(s_mean, i_mean)}，是 fp32 DiLoCo（{FP32 / h:.4f}）的 {_times(s_mean, FP32 / h)}"]
    spread = (lambda d: "" if n == 1 else f"，各种子 {_signed(min(d))}..{_signed(max(d))}")
    for a, b, what in ((sparse, int8, "比 int8 的 DiLoCo"), (sparse, control, "2 bit 减去 fp32 的值（对照，只改了值的位数）")):
        d = _pair(table, a, b)
        if not all(math.isfinite(x) for x in d):
            lines.append(f"「{a}」{what}：有一行发散了，没有配对差")
            continue
        lines.append(f"「{a}」{what}：{_signed(sum(d) / n)}{spread(d)}（{_verdict_words(d, tolerance)}）")
    lines[-1] += f"。|Δ| ≤ {tolerance:g} 算差不多" + ("；一组种子只是一次抽样，--seeds 5 给出范围" if n == 1
                                                    else f"，{n} 组种子都在同一边才说更好或更差")
    return lines


def price_rows(table, h, topk, chunk, n_replicas):
    """{label: (c for Eq. 2, bytes per parameter one worker sends in one exchange on the
    1.3B)} for table (h): the DiLoCo rows and SparseLoCo (not AdamW: tables (d), (f) have it;
    not the control). SparseLoCo's bytes from the 1.3B's own shapes."""
    from lecture09.compress.sparseloco import sent_bytes
    shapes = gpt_shapes(**XL)
    n = sum(math.prod(s) for s in shapes)
    priced = {}
    for label, (row, results, _) in table.items():
        if row.control or row.run.optimizer == "adamw":
            continue
        if row.gathered:
            up = sent_bytes(shapes, topk, chunk, 2) / n
            priced[label] = (n_replicas * up / 2, up)
        else:
            up = per_exchange(results[0], h)                # bytes per parameter: the same on any shapes
            priced[label] = ((up + FP32) / 2 if row.run.scheme != "none" else up, up)
    return priced


def print_table_h(priced, prices, setup, plain_s, out):
    out(f"(h) 每一行每 {next(iter(prices.values())).every:g} 步交换一次，放到演示 1 的 {setup.n_params / 1e9:.1f}B 任务上"
        f"（和表 (d)、(f) 一样，{setup.n_replicas} 个副本，不重叠）。SparseLoCo 发出的字节按 1.3B 自己的形状算，"
        f"all-gather 记作 c = {setup.n_replicas} × 发出 / 2；int8 的行回程是 fp32。一次迭代不算数据并行时是 {plain_s:.2f} 秒：")
    rows = [(label, f"{up:.4f}", f"{c:.4f}", f"{p.sync_s:.2f}", f"{p.blocked_per_iteration_s:.2f}", f"{p.iteration_s:.2f}")
            for (label, (c, up)), p in zip(priced.items(), prices.values())]
    print_table(["做法", "一次发出 字节/参数", "Eq. 2 的 c", "一次交换 s", "每步摊到 s", "每次迭代 s"], rows)


def table_h_observations(priced, prices, plain_s):
    labels = list(priced)
    cheapest = min(labels, key=lambda l: prices[l].iteration_s)
    parts = "；".join(f"「{l}」{prices[l].sync_s:.2f} 秒，摊到每步 {prices[l].blocked_per_iteration_s:.2f}" for l in labels)
    return [f"一次交换：{parts}。最快的是「{cheapest}」，每次迭代 {prices[cheapest].iteration_s:.2f} 秒，"
            f"离不交换的 {plain_s:.2f} 秒还差 {prices[cheapest].iteration_s - plain_s:.2f} 秒"]
