"""
第 9 讲 · 代码 7：比演示 2 更进一步的压缩——按块 int8、PowerSGD、1-bit Adam、DiLoCo，以及它们在慢速网络上值多少
Lecture 9, code 7: compression beyond demo 2 — per-block int8, PowerSGD, 1-bit Adam, local SGD / DiLoCo,
and what each buys on demo 1's slow network.

这个文件回答的问题 (the question)
    代码 5 的演示 2 只压缩每一步的梯度。实际系统还有三条路：换一种压缩（按块量化 block-wise、低秩
    low-rank 的 PowerSGD）、压缩优化器自己的状态（1-bit Adam 压缩动量）、干脆少说话（DiLoCo 每 H 步
    才通信一次）。每一种省多少字节？训练变差多少？放到演示 1 的慢速网络上，一次迭代快多少？

    表 (c)：和演示 2 一样的小 GPT、4 个工作者、300 步；每一行和同样种子、每步通信的 AdamW 相减（Δ）。
    表 (d)：每一行的 字节/参数 用在演示 1 的 1.3B 模型、它的最优分配上 → 每次迭代的时间、比数据中心慢多少。
    最后是各行训练 loss 的曲线（控制台图）。

对应讲义 (notes): lectures/lecture09/07_compression_beyond.md §7.1–§7.5

运行 (run):
    python3 code/lecture09/07_compression_beyond.py              # 12 个模型，各 300 步（时间见 README）
    python3 code/lecture09/07_compression_beyond.py --seeds 3    # 每行 3 组种子：平均和范围
    python3 code/lecture09/07_compression_beyond.py --powersgd-ranks 1 2 4 --diloco-h 10 50
    python3 code/lecture09/07_compression_beyond.py --quick      # 很小的设置，秒级跑完（测试用）
需要 (needs): torch、numpy；本目录的 compressed_dp.py、compression*.py、powersgd.py、onebit_adam.py、
local_sgd.py、dist_sim.py 和 schedule_setup.py（演示 1 的任务和网络）。用时打印到 stderr。
"""

import math
import sys
import time
from dataclasses import dataclass, replace

try:
    import lecture01  # noqa: F401  the course toolkit, installed by `pip install -r requirements.txt`
except ModuleNotFoundError:
    import _course_path  # noqa: F401  a clone without that install (see that file)

from lecture01.cli_args import Parser, add_figures_flag, apply_quick, given_flags, float_in, int_in, positive_int, precision_from_args, run_main  # noqa: E402
from lecture01.console import pad, print_header, print_wrapped, utf8_output  # noqa: E402
from lecture09.compress import training_flags  # noqa: E402

# Flag defaults, written out so that --help needs no torch (tests check they agree with
# compressed_dp.TrainSetup and the settings below).
DEFAULTS = dict(training_flags.DEFAULTS, block_size=256, onebit_warmup=0.2, outer_lr=0.7, outer_momentum=0.9,
                powersgd_ranks=(1, 4), diloco_h=(5, 25, 100), diloco_compressed_h=25)
QUICK = dict(steps=12, diloco_h=(2, 6), diloco_compressed_h=6)
CHART_WIDTH, CHART_HEIGHT = 60, 12


@dataclass(frozen=True)
class Row:
    """A row of table (c): the compressed_dp.Run it trains, and what a student reads."""
    run: object
    label: str
    sync_every: int = 1       # steps between two communications (DiLoCo's H)


def steps_per_sync(h, steps):
    """Steps between two of DiLoCo's exchanges as the training does them: every H steps and
    once more at the end (local_sgd.train), so ceil(steps / H) exchanges in `steps` steps."""
    return steps / math.ceil(steps / h)


def diloco_label(h, steps, suffix=""):
    """A DiLoCo row's label: every H steps, or once at the end when H is not below the steps."""
    if h >= steps:
        return f"DiLoCo H{h}，只通信 1 次" + ("，int8" if suffix else "")
    return f"DiLoCo，每 {h} 步{suffix}" if suffix else f"DiLoCo，每 {h} 步通信一次"


def build_rows(settings):
    from lecture09.compress.compressed_dp import Run
    rows = [Row(Run("AdamW，每步通信，不压缩", "adamw", "none"), "AdamW，每步 fp32（基准）"),
            Row(Run("int8", "adamw", "int8"), "int8（整个向量一个缩放因子）"),
            Row(Run("int8-block", "adamw", "int8-block"), f"int8（每 {settings.train.block_size} 个一块）")]
    rows += [Row(Run(f"PowerSGD r{r}", "adamw", "powersgd", True, r), f"PowerSGD 秩 rank {r}，误差反馈")
             for r in settings.powersgd_ranks]
    rows += [Row(Run("adamw-frozen-v-avgclip", "adamw-frozen-v-avgclip", "none"), "AdamW 冻结方差，裁剪平均"),
             Row(Run("adamw-frozen-v", "adamw-frozen-v", "none"), "AdamW 冻结方差，各自裁剪"),
             Row(Run("1-bit Adam", "onebit-adam", "sign-l2"), "1-bit Adam，冻结 v，1 bit 动量")]
    steps = settings.train.steps
    rows += [Row(Run(f"DiLoCo H{h}", "diloco", "none", param=h), diloco_label(h, steps), steps_per_sync(h, steps))
             for h in settings.diloco_h]
    h = settings.diloco_compressed_h
    rows.append(Row(Run(f"DiLoCo H{h} int8", "diloco", "int8", param=h), diloco_label(h, steps, "，int8 伪梯度"),
                    steps_per_sync(h, steps)))
    return rows


@dataclass(frozen=True)
class Settings:
    train: object                 # compressed_dp.TrainSetup
    seeds: object                 # compressed_dp.Seeds: the first pair
    n_seeds: int
    jobs: int
    powersgd_ranks: tuple
    diloco_h: tuple
    diloco_compressed_h: int
    precision_choice: str
    figures: object = None        # --figures DIR (lecture01/figures.py), or None


# =============================================================================
# Table (c): bits per character and bytes, paired against every-step AdamW
# =============================================================================

def _signed(x, digits=4):
    return f"{x:+.{digits}f}" if round(x, digits) != 0 else f"{0:.{digits}f}"


def print_table_c(settings, rows, results_iter, started, out=print_wrapped):
    """Print table (c) row by row; return {Run.key: (row, results, deltas)}."""
    from lecture09.compress import compressed_dp as cdp
    t, n_seeds = settings.train, settings.n_seeds
    print_header(f"表 (c)：压缩的更多做法（{t.n_workers} 个工作者，{t.steps} 步，batch {t.recipe.batch_size}；"
                 f"前向 {t.precision}）")
    out(f"Δ = 这一行 − 同样种子、每步通信的 AdamW（配对差）；|Δ| ≤ {cdp.DELTA_TOLERANCE_BPC:g} 算差不多。"
        "字节/数 = 每个工作者平均每步每个参数发出的字节，从编码后的张量量出来；"
        f"1-bit Adam 前 {t.onebit_warmup:.0%} 步发 fp32，算在平均里；"
        f"DiLoCo 的外层 SGD：lr {t.outer_lr:g}、"
        + (f"Nesterov 动量 {t.outer_momentum:g}" if t.outer_momentum else "不用动量"))
    # one seed: every column; several: the ranges need the room of the ÷ fp32 column (100 columns)
    widths = (31, 8, 8 if n_seeds == 1 else 0, 24 if n_seeds > 1 else 10, 28 if n_seeds > 1 else 9, 9)
    ratio_head = pad("÷ fp32", widths[2], ">") if widths[2] else ""
    out(pad("做法", widths[0]) + pad("字节/数", widths[1], ">") + ratio_head
        + pad("bits/字符", widths[3], ">") + pad("Δ", widths[4], ">") + pad("舍入成0", widths[5], ">"))
    out("-" * sum(widths))
    table, base = {}, None
    for row in rows:
        results = tuple(next(results_iter) for _ in range(n_seeds))
        base = results if base is None else base
        deltas = tuple(cdp.paired_deltas(results, base))
        spread = cdp.Spread.of(r.bpc for r in results)
        table[row.run.key] = (row, results, deltas)
        bpe = results[0].bytes_per_element
        if spread.n == 0:
            bpc_text = "发散 diverged"
        else:
            bpc_text = f"{spread.mean:.4f}" + ("" if n_seeds == 1 else f"（{spread.low:.4f}–{spread.high:.4f}）")
        finite = [d for d in deltas if math.isfinite(d)]
        if row is rows[0]:
            delta_text = "—"
        elif len(finite) < len(deltas):
            delta_text = "—"
        else:
            d = cdp.Spread.of(finite)          # the mean from the two printed means: a calculator agrees
            delta_text = (_signed(cdp.printed_mean_delta(results, base))
                          + ("" if n_seeds == 1 else f"（{_signed(d.low)}..{_signed(d.high)}）"))
        zeros = (f"{sum(r.zeroed_fraction for r in results) / n_seeds:.1%}"
                 if row.run.scheme in cdp.ZERO_COUNTED and row.run.optimizer == "adamw" else "")
        ratio_cell = pad(f"{bpe / 4:.4f}", widths[2], ">") if widths[2] else ""
        out(pad(row.label, widths[0]) + pad(f"{bpe:.3f}", widths[1], ">") + ratio_cell
            + pad(bpc_text, widths[3], ">") + pad(delta_text, widths[4], ">") + pad(zeros, widths[5], ">"))
        sys.stdout.flush()
    return table


# =============================================================================
# Table (d): what the bytes buy on demo 1's network
# =============================================================================

def slow_network_costs(bytes_per_param_by_key, sync_every_by_key):
    """{key: (dp_s, total_s, pp_s)} per row, the data center's total, compute s, demo 1's settings.

    Demo 1's job and cost model (schedule_setup: M micro-batches, compute with GPipe's
    bubble), its 1.3B model's data-parallel exchange with `bytes_per_param` instead of
    demo 1's fp16 (2 bytes), on demo 1's proven-optimal layout (found for fp16 traffic); a
    row that talks every H steps pays its exchange once per H iterations."""
    from lecture09 import dist_sim
    from lecture09.schedule.schedule_setup import ScheduleSetup, build_networks, datacenter_comm_s
    s = ScheduleSetup()
    geo, dc = build_networks(s)
    optimum = dist_sim.optimal_layout(geo, s.n_stages, s.n_replicas, s.stage_param_bytes, s.act_bytes,
                                      n_micro_batches=s.n_micro_batches)
    dc_total = s.compute_s + datacenter_comm_s(s, dc)
    costs = {}
    for key, bytes_per_param in bytes_per_param_by_key.items():
        h = sync_every_by_key[key]
        stage_bytes = s.n_params * bytes_per_param * h / s.n_stages    # one exchange carries H steps' worth
        c = s.layout_cost(geo, stage_bytes).breakdown(optimum.assignment)
        dp_s = c["dp"] / h
        costs[key] = (dp_s, s.compute_s + c["pp"] + dp_s, c["pp"])
    return costs, dc_total, s.compute_s, s


def return_leg_bytes(row, up_bytes):
    """Bytes per parameter per step on the ring's second leg (the all-gather of the averaged
    shards), as the training does it. Uncompressed rows send fp32 both ways; PowerSGD
    all-reduces its factors, so both legs carry P and Q; 1-bit Adam compresses the average
    again at the server (onebit_adam, server-side error feedback). Every other scheme is
    decoded and averaged exactly, and each worker gets the fp32 mean back: 4 bytes per
    parameter per exchange, i.e. 4 / H per step."""
    if row.run.scheme in ("none", "powersgd") or row.run.optimizer == "onebit-adam":
        return up_bytes
    return 4.0 / row.sync_every


def print_table_d(table, out=print_wrapped):
    keys = list(table)
    up = {k: table[k][1][0].bytes_per_element for k in keys}
    back = {k: return_leg_bytes(table[k][0], up[k]) for k in keys}
    priced = {k: (up[k] + back[k]) / 2 for k in keys}     # the ring's two legs carry half the exchange each
    costs, dc_total, compute_s, s = slow_network_costs(priced, {k: table[k][0].sync_every for k in keys})
    fp16_total = slow_network_costs({"fp16": 2.0}, {"fp16": 1})[0]["fp16"][1]
    print_header(f"表 (d)：用在演示 1 的 {s.n_params / 1e9:.1f}B 模型上（{s.n_gpus} 张卡，演示 1 的最优分配）")
    out(f"每次迭代 = 计算 {compute_s:.1f} 秒（其中 GPipe 气泡 {compute_s - s.compute_ideal_s:.1f} 秒，"
        f"M = {s.n_micro_batches}，和演示 1 一样）+ 流水线通信 + 数据并行通信。数据并行的环形 all-reduce 分两段："
        "reduce-scatter 带上行的字节（表 (c) 的 字节/数），all-gather 带回程的字节，各占一半；演示 1 两段都用 fp16"
        f"（2 字节/参数）。对照：演示 1 本身（这个分配、两段 fp16）{fp16_total:.2f} 秒/迭代；"
        f"数据中心、fp16、{dc_total:.1f} 秒/迭代")
    if any(back[k] > up[k] for k in keys):
        out("回程比上行多的行（int8 这类）：训练把各工作者解码后的消息精确地平均，每人拿回的是 fp32 的平均，"
            "所以回程按每次交换 4 字节/参数计；把平均后的分片也量化了再发回，是练习 7。")
    widths = (31, 8, 8, 11, 9, 11, 8, 10)
    out(pad("做法", widths[0]) + pad("上行", widths[1], ">") + pad("回程", widths[2], ">")
        + pad("数据并行 s", widths[3], ">") + pad("流水线 s", widths[4], ">") + pad("每次迭代 s", widths[5], ">")
        + pad("÷ 机房", widths[6], ">") + pad("bits/字符", widths[7], ">"))
    out("-" * sum(widths))
    for key in keys:
        row, results, _ = table[key]
        dp_s, total_s, pp_s = costs[key]
        bpc = [r.bpc for r in results if math.isfinite(r.bpc)]
        out(pad(row.label, widths[0]) + pad(f"{up[key]:.3f}", widths[1], ">") + pad(f"{back[key]:.3f}", widths[2], ">")
            + pad(f"{dp_s:.2f}", widths[3], ">") + pad(f"{pp_s:.2f}", widths[4], ">")
            + pad(f"{total_s:.2f}", widths[5], ">") + pad(f"{total_s / dc_total:.2f}×", widths[6], ">")
            + pad(f"{sum(bpc) / len(bpc):.4f}" if bpc else "发散", widths[7], ">"))
    return costs, dc_total


# =============================================================================
# The loss curves
# =============================================================================

MARKS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def chart_rows(rows):
    """The curves worth telling apart in 60 columns: the baseline, the first PowerSGD row,
    1-bit Adam and the DiLoCo row that talks least often (int8 and the frozen-variance
    AdamW lie on top of the baseline and of 1-bit Adam)."""
    picked = [rows[0]]
    for wanted in (("adamw", "powersgd"), ("onebit-adam", "sign-l2")):
        picked += [r for r in rows if (r.run.optimizer, r.run.scheme) == wanted][:1]
    diloco = [r for r in rows if r.run.optimizer == "diloco" and r.run.scheme == "none"]
    return picked + sorted(diloco, key=lambda r: r.sync_every)[-1:]


def curve_lines(series, width=CHART_WIDTH, height=CHART_HEIGHT):
    """Console chart of several curves: {label: [y per step]} -> lines. Each curve gets a
    letter (* where two meet); a column shows the mean of its steps; lower is lower. A curve
    that meets another in every column shows no letter: its legend line says so."""
    finite = [y for ys in series.values() for y in ys if math.isfinite(y)]
    if not finite:
        return ["（没有可画的点 nothing to plot）"]
    low, high = min(finite), max(finite)
    span = (high - low) or 1.0
    grid = [[" "] * width for _ in range(height)]
    for mark, ys in zip(MARKS, series.values()):
        n = len(ys)
        for col in range(width):
            chunk = [y for y in ys[col * n // width:max(col * n // width + 1, (col + 1) * n // width)]
                     if math.isfinite(y)]
            if chunk:
                level = round((sum(chunk) / len(chunk) - low) / span * (height - 1))
                cell = grid[height - 1 - level]
                cell[col] = mark if cell[col] in (" ", mark) else "*"
    lines = [f"{high - (high - low) * i / (height - 1):6.2f} |" + "".join(r) for i, r in enumerate(grid)]
    lines.append(" " * 7 + "+" + "-" * width)
    lines.append(" " * 8 + "第 1 步" + " " * (width - 14) + f"第 {max(len(v) for v in series.values())} 步")
    visible = {ch for row in grid for ch in row}
    lines += [f"  {mark} = {label}" + ("（每一格都和别的曲线重合，只画成 * all under *）" if mark not in visible else "")
              for mark, label in zip(MARKS, series)]
    lines.append("  * = 两条以上的曲线落在同一格 two or more curves in one cell")
    return lines


# =============================================================================
# Observations, worded from the numbers
# =============================================================================

def observations(settings, table, costs, dc_total, out=print_wrapped):
    from lecture09.compress import compressed_dp as cdp
    from lecture09.lecture_model import MODEL_CONFIG
    tol = cdp.DELTA_TOLERANCE_BPC
    words = {"same": "和每步 AdamW 差不多", "worse": "比每步 AdamW 差", "better": "比每步 AdamW 好",
             "unclear": "好坏说不清（种子之间不一致）"}

    base = next(iter(table.values()))[1]          # the first row: every Δ's baseline

    def d(key):
        deltas = table[key][2]
        finite = [x for x in deltas if math.isfinite(x)]
        text = _signed(cdp.printed_mean_delta(table[key][1], base)) if len(finite) == len(deltas) else "—"
        return f"{words[cdp.verdict(deltas)]}（Δ {text}）"

    def zeros(key):
        return sum(r.zeroed_fraction for r in table[key][1]) / len(table[key][1])

    one, block = ("adamw", "int8", False), ("adamw", "int8-block", False)
    frozen, onebit = ("adamw-frozen-v", "none", False), ("onebit-adam", "sign-l2", False)
    out("\n观察 Observations（代码 7）：")
    out(f" 1. 按块 int8：舍入成 0 的分量从 {zeros(one):.1%}（整个向量一个缩放因子）变成 {zeros(block):.1%}"
        f"（每 {settings.train.block_size} 个一块），多花的字节是每块一个 fp32 缩放因子。"
        f"一个缩放因子 {d(one)}；按块 {d(block)}。")
    out(" 2. PowerSGD（每个矩阵只发 P、Q 两个细长的因子，向量照发）：" + "；".join(
        f"秩 {r} 每步每个参数 {table[key][1][0].bytes_per_element:.3f} 字节，{d(key)}"
        for r in settings.powersgd_ranks for key in [("adamw", "powersgd", True, r)]) + "。")
    avgclip = ("adamw-frozen-v-avgclip", "none", False)

    def part(a, b):
        """(words, mean text) for row a minus row b, paired per seed."""
        diff = [x - y for x, y in zip(table[a][2], table[b][2])]
        words = {"same": "几乎没有改变结果", "worse": "让结果变差", "better": "让结果变好",
                 "unclear": "的影响在种子之间不一致"}[cdp.verdict(diff)]
        return words, (_signed(cdp.printed_mean_delta(table[a][1], table[b][1])) if all(map(math.isfinite, diff))
                       else "—")

    compress_words, compress_text = part(onebit, frozen)
    clip_words, clip_text = part(frozen, avgclip)
    out(f" 3. 1-bit Adam {d(onebit)}。分三段读：只冻结方差（照常裁剪平均后的梯度）{d(avgclip)}；"
        f"再改成每个工作者各自裁剪（1-bit Adam 只能这样：它压缩的是每个工作者自己的动量，那时还没有平均）"
        f"{clip_words}（{clip_text}）；再加上 1 bit 的压缩{compress_words}（{compress_text}）。")
    out(" 4. DiLoCo（每 H 步才交换一次伪梯度）：" + "；".join(
        f"H = {h} {d(key)}，每次迭代 {costs[key][1]:.2f} 秒（数据中心的 {costs[key][1] / dc_total:.2f} 倍）"
        for h in settings.diloco_h for key in [("diloco", "none", False, h)]) + "。")
    base_total = costs[("adamw", "none", False)][1]
    from lecture09.schedule.schedule_setup import ScheduleSetup
    big_width = ScheduleSetup().hidden      # the 1.3B model's hidden size in demo 1
    best_key = min(costs, key=lambda k: costs[k][1])
    out(f" 结论：在演示 1 的网络上每步发 fp32 的 AdamW 每次迭代 {base_total:.2f} 秒；最快的一行是"
        f"“{table[best_key][0].label}”（{costs[best_key][1]:.2f} 秒），它的 bits/字符{d(best_key)}。"
        f"|Δ| ≤ {tol:g} 的行才算没变差；这是 {settings.train.steps} 步的小实验，展示机制，不决定大模型上谁更好。"
        f"PowerSGD 在 1.3B 模型上省得更多：{big_width} 宽的矩阵的 (行+列)×秩 / (行×列) 比这里 "
        f"{MODEL_CONFIG.n_embd} 宽的小得多，表 (d) 用的是这里量到的字节，偏保守。")


# =============================================================================
# Command line
# =============================================================================

def parse_args(argv=None):
    d = DEFAULTS
    p = Parser(description="第 9 讲代码 7：压缩的更多做法 (lecture 9 code 7: compression beyond demo 2)")
    p.add_argument("--quick", action="store_true", help="很小的设置，秒级跑完（冒烟测试 smoke test）；覆盖 --steps、--diloco-h、--diloco-compressed-h "
                        "tiny settings for a smoke test (they replace those flags, and a note says so)")
    add_figures_flag(p)                 # fig09_07_loss_curves.svg
    p.add_argument("--block-size", type=int_in(1, 1 << 20), default=d["block_size"],
                   help="按块 int8 每块的分量数 entries per scale (default %(default)s)")
    p.add_argument("--powersgd-ranks", metavar="R", type=int_in(1, 64), nargs="+", default=list(d["powersgd_ranks"]),
                   help="PowerSGD 的秩，每个一行 ranks, one row each (default %(default)s)")
    p.add_argument("--diloco-h", metavar="H", type=positive_int, nargs="+", default=list(d["diloco_h"]),
                   help="DiLoCo 每 H 步通信一次，每个 H 一行 one row per sync period H (default %(default)s)")
    p.add_argument("--diloco-compressed-h", type=positive_int, default=d["diloco_compressed_h"],
                   help="int8 伪梯度那一行的 H (default %(default)s)")
    p.add_argument("--outer-lr", type=float_in(0, 10, low_open=True), default=d["outer_lr"],
                   help="DiLoCo 外层 SGD 的学习率 outer learning rate (default %(default)s)")
    p.add_argument("--outer-momentum", type=float_in(0, 1, high_open=True), default=d["outer_momentum"],
                   help="DiLoCo 外层 Nesterov 动量，0 = 不用动量 (default %(default)s)")
    p.add_argument("--onebit-warmup", type=float_in(0, 1, low_open=True, high_open=True), default=d["onebit_warmup"],
                   help="1-bit Adam 热身（普通 AdamW）占的步数比例 warm-up fraction (default %(default)s)")
    training_flags.add_training_arguments(p, d)
    args = p.parse_args(argv)
    if args.quick:
        quick = {k: list(v) if isinstance(v, tuple) else v for k, v in QUICK.items()}   # nargs="+" flags are lists
        apply_quick(args, quick, given_flags(p, argv))
    from lecture09.compress.compressed_dp import Seeds, TrainSetup
    train = replace(TrainSetup().with_steps(args.steps), block_size=args.block_size,
                    onebit_warmup=args.onebit_warmup, outer_lr=args.outer_lr, outer_momentum=args.outer_momentum,
                    precision=precision_from_args(args))
    return Settings(train=train, seeds=Seeds(args.model_seed, args.data_seed), n_seeds=args.seeds, jobs=args.jobs,
                    powersgd_ranks=tuple(dict.fromkeys(args.powersgd_ranks)), diloco_h=tuple(dict.fromkeys(args.diloco_h)),
                    diloco_compressed_h=args.diloco_compressed_h,
                    precision_choice="fp32" if args.fp32 else args.precision, figures=args.figures)


def main(argv=None):
    utf8_output()                        # UTF-8 through any console or redirect (Windows: cp1252)
    settings = parse_args(argv)
    from lecture09.compress import compressed_dp as cdp
    from lecture01 import tiny_gpt
    tiny_gpt.use_deterministic_threads()
    started = time.perf_counter()
    rows = build_rows(settings)
    seeds = [settings.seeds.shifted(k) for k in range(settings.n_seeds)]
    jobs = [(row.run, s, settings.train) for row in rows for s in seeds]
    pool, results_iter = cdp.start_training(jobs, settings.jobs)
    try:
        table = print_table_c(settings, rows, results_iter, started)
    finally:
        if pool is not None:
            pool.terminate()
    print()
    costs, dc_total = print_table_d(table)
    print()
    print_header("训练 loss 曲线（第一组种子，每族一行）training loss")
    for line in curve_lines({row.label: list(table[row.run.key][1][0].losses) for row in chart_rows(rows)}):
        print(line)
    observations(settings, table, costs, dc_total)
    if settings.figures:
        from lecture09.compress.loss_figures import draw_code7   # matplotlib only now
        draw_code7(settings, [(row.label, row.run, table[row.run.key][1][0].losses) for row in rows])
    print(f"（总用时 total {time.perf_counter() - started:.1f} 秒）", file=sys.stderr)
    return {"table": table, "costs": costs, "dc_total": dc_total}


if __name__ == "__main__":
    run_main(main)
