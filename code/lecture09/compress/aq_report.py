"""Code 11's demo 6: AQ-SGD on the real gloo pipeline (pipeline_aq.py): its flags, table (k)
and the observations worded from it (lecture 9, §11.7).

No torch at import: 11_frontier.py adds the flags here and --help answers at once.
AQ-SGD 4 bit against direct 4 bit is not a clean control: AQ-SGD also sends epoch 1 in fp32.
The clean control of "the delta is what helps" is the row "direct 4 bit, first visits in
fp32": the same bytes, the same epoch 1, the same backward; only what is quantized after
epoch 1 differs (a, or a − m(ξ)). The observations credit the delta only if that pair is
better on every seed beyond the tolerance; the control minus direct 4 bit isolates epoch 1.
"""

import math

from lecture01.cli_args import int_in
from lecture09.compress.verdicts import DELTA_TOLERANCE_BPC, verdict

DEFAULTS = dict(aq_sequences=384, aq_epochs=10, aq_stages=2, aq_micro_batches=4, aq_backward="int8-block")
QUICK = dict(aq_sequences=64, aq_epochs=2)
BATCH = 32                                  # tiny_gpt.TrainConfig().batch_size, written out (no torch here)
MAX_PIECES = 3                              # embedding, MODEL_CONFIG's 1 block, head: stage_bounds' limit
TOLERANCE = DELTA_TOLERANCE_BPC             # the suite's |Δ| for "about the same" (verdicts.py)
BACKWARD = {"int8-block": "int8", "int4-block": "4 bit", "none": "fp32"}


def add_arguments(parser):
    g = parser.add_argument_group("演示 6 AQ-SGD 流水线（表 (k)；种子、--block-size、精度用上面的）")
    g.add_argument("--aq-sequences", type=int_in(BATCH, 100_000), default=DEFAULTS["aq_sequences"], metavar="D",
                   help=f"训练集有几个序列，要是 batch {BATCH} 的倍数 training sequences (default %(default)s)")
    g.add_argument("--aq-epochs", type=int_in(1, 1000), default=DEFAULTS["aq_epochs"],
                   help="每个序列见几次 epochs over the D sequences (default %(default)s)")
    g.add_argument("--aq-stages", type=int_in(2, 4), default=DEFAULTS["aq_stages"], metavar="P",
                   help=f"流水线几个阶段（gloo 进程），小 GPT 最多切 {MAX_PIECES} 段 stages (default %(default)s)")
    g.add_argument("--aq-micro-batches", type=int_in(1, BATCH), default=DEFAULTS["aq_micro_batches"], metavar="M",
                   help="每步几个微批次（1F1B），要整除 batch micro-batches per step (default %(default)s)")
    g.add_argument("--aq-backward", choices=tuple(BACKWARD), default=DEFAULTS["aq_backward"],
                   help="压缩的行反向传回的梯度怎么编码（直接量化）gradients sent back (default %(default)s)")


def check_arguments(parser, args):
    """One-line errors (exit 2) for demo 6's flags that only make sense together."""
    if args.aq_sequences % BATCH:
        parser.error(f"--aq-sequences {args.aq_sequences} must be a multiple of the batch {BATCH}")
    if BATCH % args.aq_micro_batches:
        parser.error(f"--aq-micro-batches {args.aq_micro_batches} must divide the batch {BATCH}")
    if args.aq_stages > MAX_PIECES:
        parser.error(f"--aq-stages {args.aq_stages}: the tiny GPT has only {MAX_PIECES} pieces to cut")


def setup_from_args(args, precision):
    from lecture09.compress.pipeline_aq import AQSetup
    return AQSetup(epochs=args.aq_epochs, n_sequences=args.aq_sequences, n_stages=args.aq_stages,
                   n_micro=args.aq_micro_batches, block_size=args.block_size, precision=precision)


def _signed(x):
    return f"{x:+.4f}" if round(x, 4) != 0 else "0.0000"


def _pair(a, b):
    return [x.bpc - y.bpc if math.isfinite(x.bpc) and math.isfinite(y.bpc) else float("nan") for x, y in zip(a, b)]


def collect(results, rows):
    """{label: (row, [AQResult per seed pair], [Δ per seed pair])}; Δ against the first row."""
    base = results[rows[0].label]
    return {row.label: (row, results[row.label], _pair(results[row.label], base)) for row in rows}


def delta_cell(deltas):
    if not all(math.isfinite(d) for d in deltas):
        return "发散"
    mean = _signed(sum(deltas) / len(deltas))
    return mean if len(deltas) == 1 else f"{mean}（{_signed(min(deltas))}..{_signed(max(deltas))}）"


def _megabytes(n):
    """At most 8 columns up to 10 GB, so table (k) stays within 100 at any --aq-sequences."""
    return f"{n / 1e6:.2f} MB" if n < 1e8 else f"{n / 1e6:.0f} MB"


def print_table_k(setup, table, out):
    from lecture01.console import print_table
    s = setup
    n = len(next(iter(table.values()))[1])
    out(f"(k) 小 GPT 切成 {s.n_stages} 个阶段，{s.n_stages} 个 gloo 进程，1F1B，每步 {s.n_micro} 个微批次；训练集 "
        f"{s.n_sequences} 个序列 × {s.epochs} 个 epoch = {s.steps} 步（batch {s.batch_size}，每个 epoch 重新打乱），"
        f"前向 {s.precision}。字节/值 = 经过切口的每个值平均发几个字节，从编码后的张量数出来，第 1 个 epoch 也算在内；"
        f"AQ-SGD 和它的对照行第一次见到一个序列时发 fp32。Δ = 这一行的 bits/字符 − 同样种子的不压缩流水线（{n} 组种子"
        + ("" if n == 1 else "，括号里是范围") + "）。存储 = 一个切口的一端存的 m(ξ)：")
    rows = []
    for label, (row, results, deltas) in table.items():
        bpcs = [r.bpc for r in results if math.isfinite(r.bpc)]
        first = results[0]
        rows.append((label, f"{first.forward_bytes_per_value:.4f}", f"{first.backward_bytes_per_value:.4f}",
                     f"{sum(bpcs) / len(bpcs):.4f}" if bpcs else "发散",
                     "—" if label == next(iter(table)) else delta_cell(deltas),
                     _megabytes(first.store_bytes_per_end) if first.store_bytes_per_end else "—"))
    print_table(["做法", "前向 字节/值", "反向 字节/值", "bits/字符", "Δ", "每端存储"], rows)


def _find(table, forward, delta, first_fp32=None):
    """The label of the row that sends `forward`, with or without the delta; first_fp32
    (direct rows): whether first visits travel in fp32 (None: AQ-SGD's rows always do)."""
    first = delta if first_fp32 is None else first_fp32
    return next((label for label, (row, _, _) in table.items()
                 if row.forward == forward and row.delta == delta and row.fp32_first_visit == first), None)


def _range(d):
    return _signed(d[0]) if len(d) == 1 else f"{_signed(sum(d) / len(d))}（{_signed(min(d))}..{_signed(max(d))}）"


def paired_words(name, d, control, tolerance):
    """One sentence for paired differences d (this row − its control), with the rule that
    decided it; one seed pair says so, and a disagreement between seeds is called that."""
    if not all(math.isfinite(x) for x in d):
        return f"{name}比「{control}」：有一行发散了，没有配对差"
    word = verdict(d, tolerance)
    rule = f"|差| ≤ {tolerance:g} 算分不出来" + ("；只有一组种子，--seeds 5 才有范围" if len(d) == 1
                                             else f"，{len(d)} 组种子都在同一边才说更好或更差")
    text = {"same": "分不出来", "worse": "更差", "better": "更好",
            "unclear": "种子之间不一致，分不出来"}[word]
    return f"{name}比「{control}」{_range(d)}：{text}（{rule}）"


def table_k_observations(table, setup, n_params, tolerance=TOLERANCE):
    lines = []
    base = next(iter(table))
    for label, (row, _, deltas) in list(table.items())[1:]:
        lines.append(paired_words(f"「{label}」", deltas, base, tolerance))
    for forward, bits in (("int8-block", "int8"), ("int4-block", "4 bit")):
        aq, direct = _find(table, forward, True), _find(table, forward, False, False)
        control = _find(table, forward, False, True)
        if aq and direct:
            d = _pair(table[aq][1], table[direct][1])
            lines.append(paired_words(f"同样 {bits}，发变化量的「{aq}」", d, direct, tolerance)
                         + "；这不是干净的对照：两行差量化的是 a 还是 a − m(ξ)，还差 AQ-SGD 第 1 个 epoch 发 fp32")
        if aq and direct and control:
            lines += control_words(table, aq, direct, control, tolerance)
    aq, direct = _find(table, "int4-block", True), _find(table, "int4-block", False, False)
    if aq and direct:
        a, b = table[aq][1][0].forward_bytes_per_value, table[direct][1][0].forward_bytes_per_value
        lines.append(f"字节：「{aq}」前向平均 {a:.4f} 字节/值，比「{direct}」的 {b:.4f} 多 {a - b:.4f}："
                     f"{setup.epochs} 个 epoch 里第 1 个发 fp32（4 字节/值），之后才发变化量"
                     + _control_bytes(table, a))
        store = table[aq][1][0].store_bytes_per_end
        params = 4 * n_params
        ratio = f"，是整个模型 fp32 参数（{params / 1e6:.2f} MB）的 {store / params:.0f} 倍" if store else ""
        lines.append(f"存储：AQ-SGD 每个切口两端各存 {setup.n_sequences} 个序列的激活，一端 {store / 1e6:.2f} MB{ratio}；"
                     f"{setup.n_stages - 1} 个切口共 {2 * (setup.n_stages - 1) * store / 1e6:.2f} MB，随序列数线性增长")
    return lines


def _control_bytes(table, aq_bytes):
    control = _find(table, "int4-block", False, True)
    if not control:
        return ""
    c = table[control][1][0].forward_bytes_per_value
    same = "一样" if round(c, 4) == round(aq_bytes, 4) else f"却是 {c:.4f}"
    return f"；「{control}」{c:.4f}，{same}"


def control_words(table, aq, direct, control, tolerance=TOLERANCE):
    """The two pairs that split AQ-SGD's gain over direct at the same bits, and what follows:
    aq − control (the clean control: the same bytes and epoch 1, only a or a − m(ξ) after it)
    and control − direct (only epoch 1 in fp32 differs). The gain is credited to the delta
    only if the clean pair is "better" on every seed beyond the tolerance."""
    clean, first = _pair(table[aq][1], table[control][1]), _pair(table[control][1], table[direct][1])
    lines = [paired_words(f"干净的对照：「{aq}」", clean, control, tolerance)
             + "；两行字节一样、第 1 个 epoch 都发 fp32，只差之后量化的是 a − m(ξ) 还是 a",
             paired_words(f"只看第 1 个 epoch：「{control}」", first, direct, tolerance)
             + "；两行之后都直接发，只差第 1 个 epoch 发不发 fp32"]
    word = verdict(clean, tolerance)
    seeds = "这 1 组种子上" if len(clean) == 1 else f"{len(clean)} 组种子上都"
    if word == "better":
        lines.append(f"所以是变化量在帮忙：同样的字节、同样的第 1 个 epoch，「{aq}」{seeds}比「{control}」"
                     f"好 {tolerance:g} 以上" + ("（只有一组种子，--seeds 5 再确认）" if len(clean) == 1 else ""))
    elif word == "worse":
        lines.append(f"所以变化量没有帮忙，反而更差：「{aq}」{seeds}比「{control}」差 {tolerance:g} 以上")
    else:
        n = "" if len(clean) == 1 else f" {len(clean)} 组种子上都"
        why = ("里有一行发散了" if not all(map(math.isfinite, clean)) else
               f"里，配对差{n}在 ±{tolerance:g} 以内" if word == "same" else "里，配对差在种子之间不一致")
        lines.append(f"所以分不出变化量本身有没有帮忙（cannot be told apart）：干净的对照{why}；"
                     f"「{aq}」和「{direct}」的差别不能算在变化量头上")
    return lines
