"""Code 11's demo 3: DeMo beside every-step AdamW and top-k with error feedback, trained at
the same seeds (table (e)); what one exchange of each costs on demo 1's 1.3B job (table
(f)); observations worded from both (lecture 9, §11.4). Bytes are arithmetic from the
tensors' shapes; no torch at import (the shapes of the 1.3B model are written out).

How a row's exchange is priced on demo 1's network (sync_pricing, Yuan et al.'s Eq. 2,
which charges each device 2 (D − 1) messages of c / D):
  - a dense fp32 gradient (AdamW) is all-reduced: c = 4 bytes per parameter;
  - DeMo's and top-k's (index, value) pairs differ from worker to worker, so nothing can be
    summed on the way: every worker receives the D − 1 others' pairs, (D − 1) s bytes for
    s sent. That is Eq. 2's bandwidth term with c = D s / 2 (exact); its latency term then
    counts two messages per pair where an all-gather needs one (a little too dear).
"""

import math
from dataclasses import dataclass

from lecture01.console import print_table
from lecture09.compress import compressed_dp as cdp

FP32 = 4
TOPK_BYTES_PER_KEPT = 8        # compression_schemes "topk": an int32 index and an fp32 value


@dataclass(frozen=True)
class DemoRow:
    run: object                # compressed_dp.Run
    label: str
    gathered: bool             # its pairs are all-gathered (True) or the vector all-reduced
    control: bool = False      # a training control (every coefficient sent), not a method to price


def build_rows(topk, chunk, topk_ratio):
    """Table (e)'s rows in order; the first (every-step AdamW) is the baseline. The last,
    when top-k < chunk², is the control that sends every coefficient (k = chunk²): DeMo with
    nothing left in the momentum, which is sign-SGD on the mean gradient."""
    Run = cdp.Run
    rows = [DemoRow(Run("AdamW", "adamw", "none"), "AdamW，每步通信（基准）", False),
            DemoRow(Run("top-k EF", "adamw", "topk", error_feedback=True),
                    f"top-k {topk_ratio:.0%} + 误差反馈（AdamW）", True),
            DemoRow(Run("DeMo", "demo", "none", param=(topk, chunk)), f"DeMo，每块 {topk} 个", True)]
    if topk < chunk * chunk:
        rows.append(DemoRow(Run("DeMo all", "demo", "none", param=(chunk * chunk, chunk)),
                            "DeMo，系数全发（对照）", True, control=True))
    return rows


def received(row_sent, gathered, n_workers):
    """Bytes per parameter one worker receives per step: (W − 1) s for an all-gather of s;
    2 (W − 1) / W × s for a ring all-reduce of a dense vector of s."""
    if gathered:
        return (n_workers - 1) * row_sent
    return 2 * (n_workers - 1) / n_workers * row_sent


def ring_crossover(sent):
    """The fewest workers W at which an all-gather of `sent` bytes per parameter receives
    more than a ring all-reduce of fp32: (W − 1) s > 8 (W − 1) / W, i.e. s W > 8 (W ≥ 2)."""
    if sent <= 0:
        raise ValueError("need a positive number of bytes")
    w = max(2, math.floor(2 * FP32 / sent) + 1)
    while w > 2 and sent * (w - 1) > 2 * FP32:      # the floor of a rounded quotient may be one high
        w -= 1
    while sent * w <= 2 * FP32:
        w += 1
    return w


# GPT-3 XL (Brown et al. 2020, Table 2.1): demo 1's 1.3B model, 24 layers of width 2048,
# GPT-2's vocabulary of 50,257 and a context of 2,048 (learned positions), MLP 4 d.
XL = dict(n_layer=24, d=2048, vocab=50257, context=2048)


def gpt_shapes(n_layer, d, vocab, context):
    """Every parameter tensor's shape of a GPT-2-style model (tied embedding)."""
    shapes = [(vocab, d), (context, d)]
    for _ in range(n_layer):
        shapes += [(d,), (d,), (3 * d, d), (3 * d,), (d, d), (d,), (d,), (d,), (4 * d, d), (4 * d,), (d, 4 * d), (d,)]
    return shapes + [(d,), (d,)]


def chunk_side(n, target):
    """As decoupled_momentum.chunk_side (kept here so this module needs no torch)."""
    return max(k for k in range(1, min(n, target) + 1) if n % k == 0)


def demo_bytes(shapes, topk, chunk):
    """(bytes one worker sends per step, parameters) for DeMo over tensors of `shapes`:
    per tensor, chunks × min(k, coefficients per chunk) × (index + 4) bytes."""
    total = params = 0
    for shape in shapes:
        sides = [chunk_side(n, chunk) for n in shape]
        per_chunk, n_chunks = math.prod(sides), math.prod(n // s for n, s in zip(shape, sides))
        total += n_chunks * min(topk, per_chunk) * ((2 if per_chunk <= 1 << 15 else 4) + FP32)
        params += math.prod(shape)
    return total, params


def collect(rows, results_iter, n_seeds):
    """{row label: (row, results, deltas against the first row)} as the runs arrive (in row
    order; a run another demo trained comes through compressed_dp.Arrivals)."""
    table, base = {}, None
    for row in rows:
        results = tuple(next(results_iter) for _ in range(n_seeds))
        base = results if base is None else base
        table[row.label] = (row, results, tuple(cdp.paired_deltas(results, base)))
    return table


def _signed(x):
    return f"{x:+.4f}" if round(x, 4) != 0 else "0.0000"


def delta_cell(deltas, n_seeds, results=None, base=None):
    """The Δ cell: the mean, and the per-seed range with several seeds. Given the row's and its
    baseline's results, the mean comes from the two mean bits/char as printed
    (compressed_dp.printed_mean_delta), so a calculator on the table agrees with it."""
    finite = [d for d in deltas if math.isfinite(d)]
    if len(finite) < len(deltas):
        return "发散"
    mean = sum(finite) / len(finite) if results is None else cdp.printed_mean_delta(results, base)
    return _signed(mean) + ("" if n_seeds == 1 else f"（{_signed(min(finite))}..{_signed(max(finite))}）")


def print_table_e(setup, table, n_seeds, out):
    t = setup
    out(f"(e) 小 GPT，{t.n_workers} 个工作者，{t.steps} 步，batch {t.recipe.batch_size}，前向 {t.precision}。"
        f"DeMo：sign-SGD，lr {t.demo_lr:g}（按第 1 讲的调度），动量衰减 β {t.demo_decay:g}，"
        f"权重衰减 {t.demo_weight_decay:g}，不裁剪；AdamW 的两行用第 1 讲的配方（lr {t.recipe.peak_lr:g}，聚合后裁剪）。"
        "发出 = 每个工作者每步每个参数发出的字节（每步一样多，峰值就是平均）；收到 = 每个工作者每步收到的："
        "AdamW 的稠密向量做环形 all-reduce，2(W−1)/W × 4；稀疏的 (下标, 值) 各工作者不同，"
        f"只能 all-gather，(W−1) × 发出。Δ = 这一行 − 同样种子的 AdamW（配对差，{n_seeds} 组种子）：")
    rows = []
    first, first_results, _ = next(iter(table.values()))
    for label, (row, results, deltas) in table.items():
        bpcs = [r.bpc for r in results if math.isfinite(r.bpc)]
        sent = results[0].bytes_per_element
        rows.append((label, f"{sent:.4f}", f"{received(sent, row.gathered, t.n_workers):.4f}",
                     f"{sum(bpcs) / len(bpcs):.4f}" if bpcs else "发散",
                     "—" if row is first else delta_cell(deltas, n_seeds, results, first_results)))
    print_table(["做法", "发出 字节/参数", "收到", "bits/字符", "Δ"], rows)


def _mean_delta(table, label):
    deltas = table[label][2]
    if not deltas or not all(math.isfinite(d) for d in deltas):
        return None
    return sum(deltas) / len(deltas)


def _find(table, test):
    return next((label for label, (row, _, _) in table.items() if test(row)), None)


def table_e_observations(table, n_workers, tolerance=cdp.DELTA_TOLERANCE_BPC):
    """What table (e) shows, worded from its numbers: bytes first (arithmetic), then the
    paired differences, each compared seed by seed."""
    labels = list(table)
    base = labels[0]
    topk = _find(table, lambda row: row.run.scheme == "topk")
    demo = _find(table, lambda row: row.run.optimizer == "demo" and not row.control)
    control = _find(table, lambda row: row.control)
    sent = table[demo][1][0].bytes_per_element
    ring = received(FP32, False, n_workers)
    got = received(sent, True, n_workers)
    k, chunk = table[demo][0].run.param
    ratio = f"是 fp32 的 1/{FP32 / sent:.1f}" if sent < FP32 else f"是 fp32 的 {sent / FP32:.2f} 倍"
    if k >= chunk * chunk:
        ratio += f"（每块最多 {chunk}² = {chunk * chunk} 个系数，k = {k} 不比它少：每个系数都发了）"
    recv = (f"{n_workers} 个工作者时每个收到 {got:.4f}，AdamW 的环形 all-reduce 收到 {ring:.4f}，"
            + (f"是它的 {ring / got:.1f} 倍" if got < ring else f"只有它的 1/{got / ring:.1f}"))
    lines = [f"字节：DeMo 每步发出 {sent:.4f} 字节/参数，{ratio}；{recv}。all-gather 收到的随 W "
             f"线性增长，环形的不超过 8：从 W = {ring_crossover(sent)} 起 DeMo 收到的比环形多"]
    words = {"same": "差不多", "worse": "更差", "better": "更好", "unclear": "种子之间不一致"}
    n = len(table[base][1])
    parts = []
    for label in (topk, demo, control):
        if label is None:
            continue
        d = _mean_delta(table, label)
        if d is None:
            parts.append(f"「{label}」发散了")
            continue
        verdict = cdp.verdict(table[label][2], tolerance)
        parts.append(f"「{label}」{_signed(d)}（{words[verdict]}）")
    lines.append("和 AdamW 比（Δ，越小越好）：" + "；".join(parts) + f"。|Δ| ≤ {tolerance:g} 算差不多"
                 + ("；一组种子只是一次抽样，--seeds 5 给出范围" if n == 1 else f"，{n} 组种子都在同一边才说更好或更差"))
    dt, dd = _mean_delta(table, topk), _mean_delta(table, demo)
    if dt is not None and dd is not None:
        diffs = [a.bpc - b.bpc for a, b in zip(table[demo][1], table[topk][1])]
        v = cdp.verdict(diffs, tolerance)
        spread = "" if n == 1 else f"，各种子 {_signed(min(diffs))}..{_signed(max(diffs))}"
        t_sent = table[topk][1][0].bytes_per_element
        lines.append(f"DeMo 对 top-k + 误差反馈：发出 {sent:.4f} 对 {t_sent:.4f} 字节/参数，bits/字符 "
                     f"{_signed(sum(diffs) / n)}{spread}（{words[v]}）。两行不止压缩方式不同，优化器也不同"
                     "（sign-SGD 对 AdamW），这张表不能把差别归给其中一个")
    if control is not None and dd is not None and _mean_delta(table, control) is not None:
        diffs = [a.bpc - b.bpc for a, b in zip(table[demo][1], table[control][1])]
        v = cdp.verdict(diffs, tolerance)
        spread = "" if n == 1 else f"，各种子 {_signed(min(diffs))}..{_signed(max(diffs))}"
        lines.append(f"对照：系数全发时，每一步的动量都整个发出去，本地什么也不留，DeMo 就是平均梯度的 sign-SGD"
                     f"（tests/test_decoupled_momentum.py）。每块 {k} 个减去全发：{_signed(sum(diffs) / n)}{spread}"
                     f"（{words[v]}）。这一对只改了每块发几个系数（k），别的都一样：k 小时没发的部分留在本地动量里，"
                     "以后再发")
    return lines


def price_rows(table, topk, chunk, topk_ratio, n_replicas):
    """{label: (c bytes per parameter for Eq. 2, sent by one worker on the 1.3B)} for
    table (f), with n_replicas data-parallel replicas (demo 1's job: 8): AdamW and the first
    DeMo and top-k rows (the control is a training control, not a method). DeMo's bytes
    from the 1.3B's own shapes (demo_bytes(gpt_shapes(XL)))."""
    w = n_replicas
    total, params = demo_bytes(gpt_shapes(**XL), topk, chunk)
    priced = {}
    for label, (row, _, _) in table.items():
        if row.control:
            continue
        if row.run.optimizer == "demo":
            sent = total / params
        elif row.run.scheme == "topk":
            sent = topk_ratio * TOPK_BYTES_PER_KEPT
        else:
            sent = FP32
        priced[label] = (w * sent / 2 if row.gathered else sent, sent)
    return priced, params


def print_table_f(priced, prices, setup, plain_s, n_params_xl, out):
    out(f"(f) 每一行每步交换一次，放到演示 1 的 {setup.n_params / 1e9:.1f}B 任务上（它为 fp16 流量找到的最优分配，"
        f"{setup.n_replicas} 个副本，不重叠）。发出的字节按 1.3B 模型自己的形状算（GPT-3 XL：24 层，宽 2048，"
        f"词表 50257，{n_params_xl / 1e9:.3f}B 参数）；all-gather 按 Eq. 2 的 c = {setup.n_replicas} × 发出 / 2 计"
        f"（带宽项相等）。一次迭代不算数据并行时是 {plain_s:.2f} 秒：")
    rows = [(label, f"{sent:.4f}", f"{c:.4f}", f"{p.sync_s:.2f}", f"{p.iteration_s:.2f}")
            for (label, (c, sent)), p in zip(priced.items(), prices.values())]
    print_table(["做法", "发出 字节/参数", "Eq. 2 的 c", "一次交换 s", "每次迭代 s"], rows)


def table_f_observations(priced, prices, plain_s):
    labels = list(priced)
    base = labels[0]
    b = prices[base]
    lines = []
    for label in labels[1:]:
        p = prices[label]
        saved = b.iteration_s - p.iteration_s
        lines.append(f"「{label}」每次迭代 {p.iteration_s:.2f} 秒，比每步 all-reduce 的 AdamW（{b.iteration_s:.2f} 秒）"
                     + (f"快 {saved:.2f} 秒" if saved > 0 else f"慢 {-saved:.2f} 秒")
                     + f"；其中交换 {p.sync_s:.2f} 秒，其余 {p.iteration_s - p.sync_s:.2f} 秒是计算和流水线")
    cheapest = min(labels, key=lambda l: prices[l].iteration_s)
    lines.append(f"这张表里最快的是「{cheapest}」；没有数据并行交换时一次迭代 {plain_s:.2f} 秒，"
                 "每步都交换的做法最多省到这里")
    return lines
