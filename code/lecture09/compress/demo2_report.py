"""Demo 2 of code 5, printed: the rows to train (TABLE_A with AdamW, TABLE_B with SGD),
both tables row by row as results arrive, and observations worded from the paired
differences (lecture 9, §5.6-§5.8). Imports torch (through compressed_dp).
"""

import math
import statistics
import sys
from dataclasses import dataclass

from lecture01 import tiny_gpt
from lecture01.console import pad, print_header, print_wrapped, printed_difference
from lecture09.compress import compressed_dp
from lecture09.compress.compressed_dp import Run, Spread

TABLE_A = (Run("不压缩（fp32）", "adamw", "none"),
           Run("fp16", "adamw", "fp16"),
           Run("int8（整个向量一个缩放因子）", "adamw", "int8"),
           Run("top-k，没有误差反馈", "adamw", "topk"),
           Run("top-k，有误差反馈", "adamw", "topk", error_feedback=True),
           Run("只发符号，没有误差反馈", "adamw", "sign"),
           Run("只发符号，有误差反馈", "adamw", "sign", error_feedback=True))
TABLE_B = (Run("不压缩（fp32）", "sgd", "none"),
           Run("top-k，没有误差反馈", "sgd", "topk"),
           Run("top-k，有误差反馈", "sgd", "topk", error_feedback=True))


WORDS = {"same": "和不压缩差不多", "worse": "比不压缩差", "better": "比不压缩好", "unclear": "好坏说不清"}


def seed_list(setup):
    return [setup.seeds.shifted(k) for k in range(setup.n_seeds)]


def training_jobs(setup):
    """(run, seeds, train setup) for every row and seed, row by row: the print order."""
    return [(run, seeds, setup.train) for run in TABLE_A + TABLE_B for seeds in seed_list(setup)]


def percent(x, digits):
    """x as a percentage with `digits` decimals, or two significant digits where those
    decimals would show a non-zero share as 0 (--topk-ratio 0.0001: 0.01%, not 0%)."""
    text = f"{x:.{digits}%}"
    return f"{x * 100:.2g}%" if x > 0 and float(text[:-1]) == 0 else text


def _signed(x, digits=4):
    return f"{x:+.{digits}f}" if round(x, digits) != 0 else f"{0:.{digits}f}"   # never "-0.0000"


def _bpc_cell(spread, n_seeds):
    if spread.n == 0:
        return "发散 diverged"
    diverged = spread.n_total - spread.n
    if n_seeds == 1:
        return f"{spread.mean:.4f}"
    text = f"{spread.mean:.4f}（{spread.low:.4f}–{spread.high:.4f}）"
    return text + (f" {diverged}/{spread.n_total} 发散" if diverged else "")


def _delta_cell(deltas, n_seeds, mean):
    """mean: the Δ from the two printed means (a calculator agrees); the range, per seed."""
    finite = [d for d in deltas if math.isfinite(d)]
    if len(finite) < len(deltas) or not math.isfinite(mean):
        return "—"
    if n_seeds == 1:
        return _signed(mean)
    d = Spread.of(finite)
    return f"{_signed(mean)}（{_signed(d.low)}..{_signed(d.high)}）"


@dataclass(frozen=True)
class RowSummary:
    run: "Run"
    results: tuple          # RunResult per seed
    deltas: tuple           # paired Δ per seed against the same optimizer's uncompressed run
    bpc: "Spread"
    delta: float = math.nan  # the mean Δ as printed: from the two printed means (compressed_dp.printed_mean_delta)

    @property
    def verdict(self):
        return compressed_dp.verdict(self.deltas)


def print_demo2(setup, results_iter, started, out=print_wrapped):
    """Print both tables row by row as results arrive; return {Run.key: RowSummary}."""
    n_seeds = setup.n_seeds
    seeds = seed_list(setup)
    t = setup.train
    print_header(f"演示 2：梯度压缩（{t.n_workers} 个工作者的数据并行，从随机初始化训练 {t.steps} 步，"
                 f"batch {t.recipe.batch_size} = {t.n_workers} × {t.recipe.batch_size // t.n_workers}）")
    out(f"模型：第 1 讲的小 GPT（lecture_model.MODEL_CONFIG，{tiny_gpt.make_model(t.model, 0).n_params():,} 个参数）；"
        f"每步每个工作者发送一个梯度向量；top-k 保留 {percent(t.topk_ratio, 1)}")
    out(f"前向精度 forward precision：{t.precision}（{precision_reason(setup.precision_choice, t.precision)}）；"
        f"验证集 bits/字符越低越好")
    seed_text = "、".join(f"({s.model}, {s.data})" for s in seeds)
    out(f"种子 seeds（模型 model, 数据 data）：{seed_text}。Δ = 这一行 − 同一优化器、同样种子的不压缩那一行"
        "（配对差 paired difference）" + ("" if n_seeds == 1 else "；括号里是各种子的最小–最大"))
    # with ranges, at least two spaces before each cell: "1.5485（1.5397–1.5638）  -0.0001（...）"
    widths = (30, 9, 8, 24 if n_seeds > 1 else 12, 29 if n_seeds > 1 else 12)
    header = (pad("压缩方式", widths[0]) + pad("字节/数", widths[1], ">") + pad("÷ fp32", widths[2], ">")
              + pad("bits/字符", widths[3], ">") + pad("Δ", widths[4], ">"))
    summaries = {}
    clipping = (f"+ 聚合后全局裁剪到 {t.recipe.clip_norm:g}（第 1 讲的训练配方）" if t.recipe.clip_norm
                else "，不裁剪（clip_norm 0：第 1 讲的配方去掉裁剪，练习 9）")
    for title, runs in ((f"(a) AdamW（lr {t.recipe.peak_lr:g}）{clipping}", TABLE_A),
                        (f"(b) {sgd_name(t)}，不裁剪（误差反馈的经典设定）", TABLE_B)):
        out(f"\n{title}")
        out(header)
        out("-" * sum(widths))
        for run in runs:
            results = tuple(next(results_iter) for _ in seeds)
            baseline = summaries.get(run.baseline_key)
            base_results = results if baseline is None else baseline.results
            deltas = tuple(compressed_dp.paired_deltas(results, base_results))
            row = RowSummary(run, results, deltas, Spread.of(r.bpc for r in results),
                             compressed_dp.printed_mean_delta(results, base_results))
            summaries[run.key] = row
            bytes_per_element = results[0].bytes_per_element
            out(pad(run.label, widths[0]) + pad(f"{bytes_per_element:.3f}", widths[1], ">")
                + pad(f"{bytes_per_element / 4:.4f}", widths[2], ">")
                + pad(_bpc_cell(row.bpc, n_seeds), widths[3], ">")
                + pad("—" if baseline is None else _delta_cell(deltas, n_seeds, row.delta), widths[4], ">"))
            sys.stdout.flush()
    return summaries


def sgd_name(t):
    if t.sgd_momentum:
        return f"带动量的 SGD（lr {t.sgd_lr:g}，动量 momentum {t.sgd_momentum:g}）"
    return f"普通 SGD（lr {t.sgd_lr:g}，不带动量）"


def precision_reason(choice, precision):
    if choice != "auto":
        return f"--precision {choice}"
    return "auto：这台 CPU 有 bf16 硬件" if precision == "bf16" else "auto：这台 CPU 没有 bf16 硬件，用 fp32 更快"


def demo2_observations(setup, rows, out=print_wrapped):
    """Observations worded from the paired differences, found by (optimizer, scheme, EF)."""
    t = setup.train
    tol = compressed_dp.DELTA_TOLERANCE_BPC
    n_seeds = setup.n_seeds
    every = "" if n_seeds == 1 else f"（{n_seeds} 个种子都如此才算）"

    def row(optimizer, scheme, ef=False):
        return rows[(optimizer, scheme, ef)]

    def bpc(r):
        return "发散（loss 变成 NaN）" if r.bpc.n == 0 else f"{r.bpc.mean:.4f}"

    def delta(r):
        return "—" if not all(math.isfinite(d) for d in r.deltas) else _signed(r.delta)

    def gains(without, with_ef):
        """Per seed, how much error feedback lowers bits per char (positive = it helps);
        +inf if the run without it diverged and the one with it did not."""
        out_gains = []
        for a, b in zip(without.results, with_ef.results, strict=True):
            if a.diverged or b.diverged:
                out_gains.append(math.nan if a.diverged == b.diverged else (math.inf if a.diverged else -math.inf))
            else:
                out_gains.append(a.bpc - b.bpc)
        return out_gains

    def gain_words(without, with_ef):
        g = gains(without, with_ef)
        v = compressed_dp.verdict([-x for x in g])     # verdict calls a positive difference "worse"
        words = {"better": "有帮助", "worse": "反而有害", "same": "几乎没有影响", "unclear": "说不清有没有帮助"}[v]
        if any(math.isinf(x) for x in g):
            return words + ("（没有它就发散）" if all(x > 0 for x in g) else "（有一边发散）")
        mean = printed_difference(without.bpc.mean, with_ef.bpc.mean)   # from the two printed bits/char
        spread = "" if len(g) == 1 else f"，各种子 {_signed(min(g))}..{_signed(max(g))}"
        return f"{words}（{'好了' if mean >= 0 else '差了'} {abs(mean):.4f}{spread}）"

    base, base_sgd = row("adamw", "none"), row("sgd", "none")
    fp16, int8 = row("adamw", "fp16"), row("adamw", "int8")
    topk, topk_ef = row("adamw", "topk"), row("adamw", "topk", True)
    sign, sign_ef = row("adamw", "sign"), row("adamw", "sign", True)
    topk_sgd, topk_sgd_ef = row("sgd", "topk"), row("sgd", "topk", True)
    out("\n观察 Observations（演示 2）：")
    if n_seeds == 1:
        noise = "bits/字符本身随种子和 CPU 变（讲义 5.7 节；--seeds 3 量一量）"
    else:
        int8_deltas = Spread.of(int8.deltas)
        base_range, delta_range = base.bpc.high - base.bpc.low, int8_deltas.high - int8_deltas.low
        noise = (f"这次 {n_seeds} 组种子之间，不压缩的 AdamW 相差 {base_range:.4f}，"
                 f"int8 的 Δ {'只' if delta_range < base_range else ''}相差 {delta_range:.4f}")
    out(f" 0. 怎么读：{noise}；所以每一行都和同样种子的不压缩那一行相减（Δ，配对差）。"
        f"|Δ| ≤ {tol:g} 算'差不多'{every}。")
    out(f" 1. fp16：通信量减半，{WORDS[fp16.verdict]}（Δ {delta(fp16)}）。int8（整个向量一个缩放因子）：通信量 1/4，"
        f"{WORDS[int8.verdict]}（Δ {delta(int8)}）；缩放因子由最大的那个梯度决定，平均 "
        f"{statistics.fmean(r.zeroed_fraction for r in int8.results):.0%} 的分量被舍入成 0。"
        "实际系统按块（block-wise，如 bitsandbytes 每 4096 个一块）各用一个缩放因子。")
    sends = t.steps * t.topk_ratio
    out(f" 2. top-{percent(t.topk_ratio, 0)}：每步每个工作者只发 {percent(t.topk_ratio, 0)} 的分量，{t.steps} 步里每个分量平均只被发出 "
        f"{sends:g} 次。AdamW：没有误差反馈 {bpc(topk)}、有误差反馈 {bpc(topk_ef)}（不压缩 {bpc(base)}）；"
        f"{sgd_name(t)}：没有误差反馈 {bpc(topk_sgd)}、有误差反馈 {bpc(topk_sgd_ef)}（不压缩 {bpc(base_sgd)}）。")
    gain_adam, gain_sgd = gains(topk, topk_ef), gains(topk_sgd, topk_sgd_ef)
    sgd_minus_adam = [s - a for s, a in zip(gain_sgd, gain_adam)]
    more = compressed_dp.verdict([-x for x in sgd_minus_adam])
    comparison = {"better": "误差反馈对 SGD 帮助更大", "worse": "误差反馈对 AdamW 帮助更大",
                  "same": "误差反馈对两种优化器的作用差不多", "unclear": "说不清误差反馈对哪种优化器帮助更大"}[more]
    diverged_note = ("没有误差反馈的 SGD 这次发散了，" if topk_sgd.bpc.n == 0 else
                     ("没有误差反馈的 SGD 在部分种子上发散了，" if topk_sgd.bpc.n < topk_sgd.bpc.n_total else ""))
    out(f"    误差反馈：对 AdamW {gain_words(topk, topk_ef)}，对 SGD {gain_words(topk_sgd, topk_sgd_ef)}。"
        f"{diverged_note}{comparison}{every}。")
    out(f" 3. 只发符号（每个分量 1 bit）：AdamW 下没有误差反馈 {bpc(sign)}（{WORDS[sign.verdict]}，Δ {delta(sign)}），"
        f"有误差反馈 {bpc(sign_ef)}；误差反馈在这里{gain_words(sign, sign_ef)}。")
    sign_hypothesis = sign_error_feedback_hypothesis(gains(sign, sign_ef), t)
    if sign_hypothesis:
        out("    " + sign_hypothesis)
    out(" 4. " + error_feedback_and_the_optimizer(gain_adam, gain_sgd, t))
    out(" 结论：压缩会和优化器、梯度裁剪互相影响，不能单独设计；这个几百步的玩具实验展示机制，不能决定哪种方法更好。")


def sign_error_feedback_hypothesis(sign_gains, t):
    """Observation 3's second line: why error feedback might hurt sign compression under AdamW,
    said only when it did hurt on every seed (sign_gains: without − with, per seed), and said
    as what it is: two candidate causes no run here has separated (notes §5.7, exercise 9)."""
    if compressed_dp.verdict([-x for x in sign_gains]) != "worse":
        return ""
    if not t.recipe.clip_norm:      # exercise 9 (a): clipping removed, one candidate left
        return ("这次没有裁剪，误差反馈仍然有害：剩下的候选原因（假设 hypothesis，讲义 5.7 节）是 Adam 按每个分量的"
                "大小归一化，攒下的残差一次发出时不再是'晚一点发出去'那么简单；练习 9 (b) 换成 SGD 对照。")
    return ("可能的原因（假设 hypothesis，这里没有只去掉一个原因的对照；讲义 5.7 节、练习 9）："
            "Adam 按每个分量的大小归一化，只发符号本来丢的信息不多；误差反馈攒下的残差要先经过聚合后的"
            f"全局裁剪（范数压到 {t.recipe.clip_norm:g}）和 Adam 的归一化，不再是'晚一点发出去'那么简单。")


def error_feedback_and_the_optimizer(gain_adam, gain_sgd, t):
    """Observation 4, from what error feedback did to each optimizer in this run (gains per
    seed: bits per char without EF minus with EF; positive = EF helped), beside 1-bit Adam's
    premise (Tang et al. 2021): error feedback suits SGD, whose update is linear in the
    gradient, and not Adam as it stands."""
    helped = {name: compressed_dp.verdict([-x for x in g]) == "better"
              for name, g in (("adam", gain_adam), ("sgd", gain_sgd))}
    sgd = sgd_name(t)
    if helped["sgd"] and not helped["adam"]:
        said = (f"这次的数字和 1-bit Adam（Tang et al. 2021）的出发点一致：误差反馈帮了{sgd}，没有帮 AdamW。"
                "他们的论证是：误差反馈的理论针对 SGD 这样对梯度是线性的更新，Adam 的更新不是线性的。")
    elif helped["sgd"]:
        said = f"这次误差反馈帮了{sgd}，也帮了 AdamW；1-bit Adam（Tang et al. 2021）论证的是它不能直接用在 Adam 上。"
    elif t.sgd_momentum:
        said = (f"这次误差反馈没有帮{sgd}。一个假设：残差先进动量、再被动量放大，Lin et al. 2018（DGC）"
                "为此加了动量修正（momentum correction）；练习 8 检验它。1-bit Adam（Tang et al. 2021）的出发点，"
                "误差反馈适合对梯度线性的 SGD，在这里没有显出来。")
    else:
        said = (f"这次误差反馈没有帮{sgd}，和 1-bit Adam（Tang et al. 2021）的出发点（误差反馈适合对梯度线性的 SGD）"
                "不一致；--seeds 3 看看是不是种子的噪声。")
    return (said + "1-bit Adam 的做法：先用普通 Adam 热身，等方差项稳定后冻结它，再对动量做 1 bit 压缩"
            "（工作者和服务器两边都有误差反馈）；论文报告通信量最多少到 1/5，BERT-Large 预训练吞吐最多提高到 3.3 倍。")
