"""Code 11's demo 2, table (c): every-step AdamW, DiLoCo, and Streaming DiLoCo with and
without overlap and with quantized outer gradients, trained at the same seeds; the mean
and the peak bytes each sends, and Δ bits per character against AdamW (lecture 9, §11.3).
"""

import math
from dataclasses import dataclass

from lecture01.console import print_table, printed_difference
from lecture09.compress import compressed_dp as cdp


@dataclass(frozen=True)
class StreamingRow:
    run: object                # compressed_dp.Run
    label: str
    every: float               # inner steps between two exchanges (one fragment or the whole model)
    overlap: int               # τ: inner steps an exchange overlaps


def build_rows(h_total, n_fragments, delay):
    """The rows of table (c), in order; the first is the baseline every Δ is taken against."""
    Run = cdp.Run
    h = h_total // n_fragments
    rows = [StreamingRow(Run("AdamW", "adamw", "none"), "AdamW，每步通信（基准）", 1, 0),
            StreamingRow(Run(f"DiLoCo H{h_total}", "diloco", "none", param=h_total), f"DiLoCo，每 {h_total} 步",
                         h_total, 0),
            StreamingRow(Run("streaming τ0", "streaming-diloco", "none", param=(h_total, n_fragments, 0)),
                         f"Streaming，{n_fragments} 片，τ = 0", h, 0)]
    if delay:
        rows.append(StreamingRow(Run("streaming", "streaming-diloco", "none", param=(h_total, n_fragments, delay)),
                                 f"Streaming，{n_fragments} 片，τ = {delay}", h, delay))
    for scheme, name in (("int8-block", "int8"), ("int4-block", "4 bit")):
        rows.append(StreamingRow(Run(f"streaming {name}", "streaming-diloco", scheme,
                                     param=(h_total, n_fragments, delay)),
                                 f"Streaming，τ = {delay}，{name}", h, delay))
    return rows


def peak_of(result):
    """The most one worker sends in one step, per parameter: a DiLoCo exchange is the whole
    model at once, an every-step row sends its mean every step."""
    if result.peak_bytes_per_element is not None:
        return result.peak_bytes_per_element
    if result.run.optimizer == "diloco":
        return 4.0          # local_sgd sends the whole fp32 pseudo-gradient in one step (scheme "none")
    return result.bytes_per_element


def collect(rows, results_iter, n_seeds):
    """{row label: (row, results, deltas)} as the runs arrive (in row order)."""
    table, base = {}, None
    for row in rows:
        results = tuple(next(results_iter) for _ in range(n_seeds))
        base = results if base is None else base
        table[row.label] = (row, results, tuple(cdp.paired_deltas(results, base)))
    return table


def _signed(x):
    return f"{x:+.4f}" if round(x, 4) != 0 else "0.0000"


def print_table_c(setup, table, n_seeds, out):
    t = setup
    out(f"(c) 小 GPT，{t.n_workers} 个工作者，{t.steps} 步，batch {t.recipe.batch_size}，前向 {t.precision}；"
        f"外层 SGD lr {t.outer_lr:g}、" + (f"Nesterov 动量 {t.outer_momentum:g}" if t.outer_momentum else "不用动量")
        + f"；片段合并 α = {t.fragment_alpha:g}" + ("（torchft 的默认）" if t.fragment_alpha == 0 else "")
        + ("；--final-sync：训练结束后每一片再同步一次（这次的字节不计）" if t.final_sync else "")
        + "。字节/参数 = 每个工作者每步每个参数发出的字节（平均，和发得最多的那一步：峰值），"
        f"从编码后的张量数出来。Δ = 这一行 − 同样种子的 AdamW（配对差，{n_seeds} 组种子）：")
    rows = []
    for label, (row, results, deltas) in table.items():
        finite = [d for d in deltas if math.isfinite(d)]
        bpcs = [r.bpc for r in results if math.isfinite(r.bpc)]
        if row is next(iter(table.values()))[0]:
            delta = "—"
        elif len(finite) < len(deltas):
            delta = "发散"
        else:
            base_results = next(iter(table.values()))[1]       # Δ from the two printed means
            delta = _signed(cdp.printed_mean_delta(results, base_results)) + ("" if n_seeds == 1 else
                                                          f"（{_signed(min(finite))}..{_signed(max(finite))}）")
        rows.append((label, f"{results[0].bytes_per_element:.4f}", f"{peak_of(results[0]):.4f}",
                     f"{sum(bpcs) / len(bpcs):.4f}" if bpcs else "发散", delta))
    print_table(["做法", "平均 字节/参数", "峰值", "bits/字符", "Δ"], rows)


def table_c_observations(table, tolerance=cdp.DELTA_TOLERANCE_BPC):
    """What table (c) shows, worded from its numbers (means over the seeds)."""
    def mean_delta(label):
        """The row's Δ as table (c) prints it (from the two printed means), None if a seed diverged."""
        deltas = [d for d in table[label][2] if math.isfinite(d)]
        if not deltas or len(deltas) < len(table[label][2]):
            return None
        return cdp.printed_mean_delta(table[label][1], next(iter(table.values()))[1])

    labels = list(table)
    diloco = next(l for l in labels if table[l][0].run.optimizer == "diloco")
    streams = [l for l in labels if table[l][0].run.optimizer == "streaming-diloco"]
    lines = []
    d_res, s_res = table[diloco][1][0], table[streams[0]][1][0]
    n_fragments = table[streams[0]][0].run.param[1]
    same = abs(s_res.bytes_per_element - d_res.bytes_per_element) < 5e-5
    mean_words = (f"每步平均发的一样多（{s_res.bytes_per_element:.4f} 字节/参数）" if same else
                  f"每步平均发 {s_res.bytes_per_element:.4f} 和 {d_res.bytes_per_element:.4f} 字节/参数")
    if n_fragments == 1:
        lines.append(f"只有 1 片：Streaming 就是 DiLoCo，τ = 0 时和「{diloco}」逐位相同"
                     "（tests/test_streaming_diloco.py），峰值也一样，都是 "
                     f"{peak_of(s_res):.4f} 字节/参数")
    else:
        lines.append(f"「{streams[0]}」和「{diloco}」{mean_words}；峰值 {peak_of(s_res):.4f} 对 "
                     f"{peak_of(d_res):.4f}，是 {peak_of(s_res) / peak_of(d_res):.2f} 倍。切成 {n_fragments} 片，"
                     "省下的是一次要发的量")
    base = mean_delta(diloco)
    pairs = [(l, mean_delta(l)) for l in streams]
    if base is not None and all(d is not None for _, d in pairs):
        worded = []
        for label, d in pairs:
            diffs = [s.bpc - b.bpc for s, b in zip(table[label][1], table[diloco][1])]   # paired, seed by seed
            word = {"same": "差不多", "worse": "更差", "better": "更好",
                    "unclear": "种子之间不一致"}[cdp.verdict(diffs, tolerance)]
            spread = "" if len(diffs) == 1 else f"，{_signed(min(diffs))}..{_signed(max(diffs))}"
            worded.append(f"「{label}」{_signed(d)}（比 DiLoCo {_signed(printed_difference(d, base))}{spread}，{word}）")
        n = len(table[diloco][1])
        lines.append(f"Δ（越小越好）：DiLoCo {_signed(base)}；" + "；".join(worded)
                     + f"。和 DiLoCo 的差是同一组种子上的配对差，差的绝对值 ≤ {tolerance:g} 算差不多"
                     + ("；一组种子只是一次抽样，--seeds 5 给出范围" if n == 1 else
                        f"；{n} 组种子都在同一边才说更好或更差"))
    else:
        lines.append("有的行发散了，表里没有它的 Δ，不比较")
    return lines
