"""
第 9 讲 · 代码 8：会说谎的工作者——稳健聚合 (robust aggregation) 和它管不住的 AdamW
Lecture 9, code 8: workers that lie — robust aggregators, attacks, and the AdamW step that
clipping each upload does not bound.

这个文件回答的问题 (the question)
    n 个工作者里有 f 个不老实（拜占庭 Byzantine）。接收方把 n 份梯度合成一份的规则叫聚合器
    (aggregator)：平均 (mean) 之外还有逐坐标中位数、截尾平均、Krum、中心裁剪。每种规则挡得住哪种
    攻击？没人攻击时它又要付出多少？

    表 (1)：一轮的量。先用诚实的平均训练 30 步，再取下一批数据，从同一个状态出发，对每个聚合器 ×
            攻击各走一步 AdamW；表里是"说谎的工作者把这一步改变了多少"，单位是一个诚实工作者在平均里
            的分量。最后一行是对照：同一轮、同样的上传，换成没有逐分量归一化的 SGD。
    表 (2)：训练的量。每个聚合器 × 攻击训练一遍，bits/字符减去同种子的诚实平均（配对差 Δ）。
    表 (3)：和压缩放在一起：工作者发 top-k（代码 6 的默认）时，稳健聚合本身的代价。

对应讲义 (notes): lectures/lecture09/08_byzantine.md §8

运行 (run):
    python3 code/lecture09/08_byzantine.py                   # 表 (1)–(3)；用时见 README 的表（中位数）
    python3 code/lecture09/08_byzantine.py --seeds 3         # 每格 3 组种子：Δ 的范围
    python3 code/lecture09/08_byzantine.py --liars 2 --attacks alie ipm
    python3 code/lecture09/08_byzantine.py --quick           # 很小的设置（测试用）
需要 (needs): torch；本目录的 robust/aggregators.py、robust/attacks.py、swarm/influence.py 和
compress/ 的训练引擎。用时打印到 stderr。
"""

import math
import sys
import time
from dataclasses import dataclass, replace

try:
    import lecture01  # noqa: F401  the course toolkit, installed by `pip install -r requirements.txt`
except ModuleNotFoundError:
    import _course_path  # noqa: F401  a clone without that install (see that file)

from lecture01.cli_args import Parser, apply_quick, given_flags, int_in, float_in, precision_from_args, run_main  # noqa: E402
from lecture01.console import LINE_WIDTH, pad, print_header, print_wrapped, utf8_output  # noqa: E402
from lecture09.compress import training_flags  # noqa: E402

SGD_LR = 0.3          # swarm.influence.SGD_LR: the control row's plain SGD (tests check they agree)
# Written out so that --help needs no torch (tests check them against the registries).
AGGREGATOR_NAMES = ("mean", "median", "trimmed-mean", "krum", "multi-krum", "centered-clip")
ATTACK_NAMES = ("none", "sign-flip", "alie", "ipm", "tiny-dense", "tiny-dense-fixed", "gaussian", "replay")
DEFAULTS = dict(training_flags.DEFAULTS, steps=60, workers=8, liars=1, warm_steps=30, cc_tau=1.0, bucket=0, worker_momentum=0.0,
                aggregators=("mean", "median", "trimmed-mean", "krum", "centered-clip"),
                attacks=("none", "sign-flip", "alie"), compressed_attacks=("none", "tiny-dense", "tiny-dense-fixed"),
                compressed_aggregators=("mean", "median", "trimmed-mean"))
QUICK = dict(steps=4, warm_steps=3, aggregators=["mean", "median", "trimmed-mean"], attacks=["none", "alie"],
             compressed_aggregators=["mean", "median"])
BOUND_UNITS = 2.0     # an aggregator "bounds" an attack when the liar moves the step by at most this


@dataclass(frozen=True)
class Settings:
    train: object          # compressed_dp.TrainSetup (n_workers, steps, bucket, cc_tau, precision)
    seeds: object
    n_seeds: int
    jobs: int
    liars: int
    warm_steps: int
    aggregators: tuple
    attacks: tuple
    compressed_aggregators: tuple
    compressed_attacks: tuple
    compressed_scheme: str = "topk"     # what the workers of table (3) send: code 6's default


def scheme_name(scheme):
    """How table (1) names an upload format: the scheme "none" is the uncompressed fp32 gradient."""
    return "fp32" if scheme == "none" else scheme


def signed(x, digits=3):
    return f"{x:+.{digits}f}" if round(x, digits) != 0 else f"{0:.{digits}f}"


# =============================================================================
# Table (1): one round, measured
# =============================================================================

def round_aggregators(settings):
    """(the aggregators table (1) can run with these n, f and buckets, [(name, why not)])."""
    from lecture09.robust import aggregators
    names, skipped = [], []
    for name in AGGREGATOR_NAMES:
        try:
            aggregators.check_settings(name, settings.train.n_workers, settings.liars, settings.train.bucket)
            names.append(name)
        except aggregators.AggregatorError as error:
            skipped.append((name, str(error)))
    return tuple(names), skipped


def changed_settings(train):
    """--bucket, --cc-tau off their defaults (they change results; the titles name --worker-momentum)."""
    said = ([f"分桶 bucketing s = {train.bucket}（--bucket）"] if train and train.bucket > 1 else []) \
        + ([f"centered-clip τ = {train.cc_tau:g}（--cc-tau）"] if train and train.cc_tau != DEFAULTS["cc_tau"] else [])
    return "设置 settings：" + "，".join(said) + "。" if said else ""


def print_round(study, control, dense, out=print_wrapped, train=None):
    attacks = [a for a in dict.fromkeys(c.attack for c in study.cells)]
    print_header(f"表 (1)：一轮里说谎者把这一步推动多少（{study.n_workers} 个工作者，{study.liars} 个说谎，"
                 f"发 {study.scheme}，AdamW）")
    out(changed_settings(train) + f"单位 = 一个诚实工作者在平均里的分量 |Δw(n 个的平均) − Δw(前 n−1 个的平均)| = {study.unit:.4g}"
        f"（整轮 |Δw| = {study.honest_step:.4g}）。每份上传先裁剪到 n × clip_norm，和代码 6 一样。"
        "“保留”= 没人说谎时这个聚合器的一步和平均那一步的余弦；“非零”= 聚合出的梯度里不为 0 的分量。")
    widths = (14, 6, 7) + (11,) * len(attacks)
    out(pad("聚合器", widths[0]) + pad("保留", widths[1], ">") + pad("非零", widths[2], ">")
        + "".join(pad(a, w, ">") for a, w in zip(attacks, widths[3:])))
    out("-" * sum(widths))
    for name in study.kept:
        out(pad(name, widths[0]) + pad(f"{study.kept[name]:.2f}", widths[1], ">")
            + pad(f"{study.nonzero[name]:.1%}", widths[2], ">")
            + "".join(pad(f"{study.cell(name, a).influence:.2f}", w, ">") for a, w in zip(attacks, widths[3:])))
    if study.bounded:
        out(pad("mean，|Δw| 封顶", widths[0] + widths[1] + widths[2])
            + "".join(pad(f"{study.bounded[a]:.2f}", w, ">") for a, w in zip(attacks, widths[3:])))
    out(pad("mean，换 SGD", widths[0] + widths[1] + widths[2])
        + "".join(pad(f"{control.cell('mean', a).influence:.2f}", w, ">") for a, w in zip(attacks, widths[3:])))
    for name in dense.kept:
        out(pad(f"{name}，发 {scheme_name(dense.scheme)}", widths[0] + widths[1] + widths[2])
            + "".join(pad(f"{dense.cell(name, a).influence:.2f}", w, ">") for a, w in zip(attacks, widths[3:])))
    out("“|Δw| 封顶”= 平均那一步走完以后，把 |Δw| 裁到诚实那一步自己的大小（这个上限用到了诚实"
        "那一步有多大，真的服务器并不知道）。")
    out(f"下面是对照：同一轮、同样的权重，只换一样——“mean，换 SGD”换成没有逐分量归一化的 SGD（lr {SGD_LR:g}，"
        f"不用动量）；“发 {scheme_name(dense.scheme)}”的几行是诚实的工作者发稠密的 {scheme_name(dense.scheme)}"
        "（热身也是；表 (2) 发的格式），"
        "它们自己把 v 填满，每个聚合器一行。每行用它自己那一轮的单位。")


def format_observations(study, dense):
    """One line: the bounds (<= BOUND_UNITS) that aggregators other than the mean hold with
    the honest workers' top-k uploads (table (1)'s rows) and lose in the same round with
    dense uploads (the upload format of table (2)): the one-change control of those bounds.
    [] when none is lost. Compared as printed (2 decimals), so a printed 2.00 is within."""
    shown = (lambda x: round(x, 2))
    lost = []
    for attack in dict.fromkeys(c.attack for c in study.cells):
        pairs = [f"{name} {study.cell(name, attack).influence:.2f} → {dense.cell(name, attack).influence:.2f}"
                 for name in study.kept if name != "mean" and name in dense.kept
                 and shown(study.cell(name, attack).influence) <= BOUND_UNITS < shown(dense.cell(name, attack).influence)]
        if pairs:
            mean = f"（mean {dense.cell('mean', attack).influence:.2f}）" if "mean" in dense.kept else ""
            lost.append(f"{attack}：" + "、".join(pairs) + mean)
    if not lost:
        return []
    return [f"同一轮、同一个说谎者，只把诚实的上传从 {study.scheme} 换成稠密的 {scheme_name(dense.scheme)}（表 (2) 发的格式），"
            f"这些 {BOUND_UNITS:g} 个单位以内的界就没了：" + "；".join(lost)
            + f"。它们属于诚实的发 {study.scheme} 的一轮，不能搬到表 (2)。"]


def round_observations(study, control, dense, out=print_wrapped):
    """Lines worded from table (1)'s numbers (each a function of them; tests cover each branch)."""
    lines = []
    if "tiny-dense" in {c.attack for c in study.cells} and "mean" in study.kept:
        adam = study.cell("mean", "tiny-dense").influence
        sgd, full = control.cell("mean", "tiny-dense").influence, dense.cell("mean", "tiny-dense").influence
        if adam > BOUND_UNITS and adam > BOUND_UNITS * max(sgd, full):
            lines.append(f"微小稠密上传（每个分量 ±1e-4）在平均下把 AdamW 这一步推动 {adam:.1f} 个单位。"
                         f"换成 SGD 只有 {sgd:.2f} 个，诚实的工作者发稠密的 {scheme_name(dense.scheme)} 时只有 "
                         f"{full:.2f} 个（对照行）：上传本身很小，放大它的是 AdamW 按每个分量自己的均方根去除——诚实的 "
                         f"{study.scheme} 很少碰到的分量，v 几乎是 0，再小的值也被放大成整整一步。")
        elif adam > BOUND_UNITS:
            lines.append(f"微小稠密上传在平均下推动 AdamW 这一步 {adam:.2f} 个单位；换成 SGD {sgd:.2f} 个，"
                         f"诚实的发 {scheme_name(dense.scheme)} 时 {full:.2f} 个：两个对照没有都把它压下去，"
                         "这组设置下说不清是 AdamW 的归一化放大了它。")
        else:
            lines.append(f"微小稠密上传在平均下只推动 AdamW 这一步 {adam:.2f} 个单位"
                         f"（不超过 {BOUND_UNITS:g}）：这组设置下它没有被放大。")
        capped = (study.bounded or {}).get("tiny-dense")
        if capped is not None and adam > BOUND_UNITS:
            lines.append(f"把平均那一步的 |Δw| 裁到诚实那一步的大小以后，tiny-dense 仍然推动 {capped:.1f} 个单位"
                         + ("：只限制更新的大小，挡不住它。" if capped > BOUND_UNITS
                            else f"，在 {BOUND_UNITS:g} 以内：这组设置下限制更新的大小就够了。"))
    for attack in dict.fromkeys(c.attack for c in study.cells):
        bounded = [name for name in study.kept if study.cell(name, attack).influence <= BOUND_UNITS]
        loose = [name for name in study.kept if name not in bounded]
        if loose:
            lines.append(f"{attack}：" + ("、".join(bounded) + f" 把说谎者的推动压在 {BOUND_UNITS:g} 个单位以内；"
                                          if bounded else f"没有一个聚合器把它压在 {BOUND_UNITS:g} 个单位以内；")
                         + "、".join(f"{name} {study.cell(name, attack).influence:.1f}" for name in loose) + "。")
    lines += format_observations(study, dense)
    picked = [c for c in study.cells if c.picked_liar and c.influence > BOUND_UNITS]
    if picked:
        lines.append("Krum 类挑中了说谎者的向量：" + "、".join(f"{c.aggregator}（{c.attack}）" for c in picked)
                     + "。它选离别人最近的那一个；诚实的 top-k 彼此离得远，一个接近 0 的向量反而离谁都近。")
    if "median" in study.nonzero and "mean" in study.nonzero:
        n = study.n_workers
        need = f"过半数（{n // 2 + 1} 个）" if n % 2 else f"至少一半（{n // 2} 个）"
        lines.append(f"诚实的 {study.scheme} 上传：平均里 {study.nonzero['mean']:.1%} 的分量非零，逐坐标中位数里只剩 "
                     f"{study.nonzero['median']:.1%}——{n} 个工作者里要有{need}发了同一个分量，"
                     "它的中位数才不是 0。")
    for k, line in enumerate(lines, 1):
        out(f" {k}. {line}")
    return lines


# =============================================================================
# Tables (2) and (3): training, paired against the honest mean
# =============================================================================

def training_rows(settings, scheme, aggregator_names, attack_names):
    from lecture09.compress.compressed_dp import Run
    f = settings.liars
    return [Run(f"{a}/{t}", "adamw", scheme, aggregator=a, attack=t, liars=0 if t == "none" else f)
            for a in aggregator_names for t in attack_names]


def cell_text(deltas, n_seeds):
    finite = [d for d in deltas if math.isfinite(d)]
    if len(finite) < len(deltas):
        return "发散"
    if n_seeds == 1:
        return signed(finite[0])
    return f"{signed(min(finite), 2)}..{signed(max(finite), 2)}"


def print_training(title, settings, runs, results_iter, out=print_wrapped):
    """Print one training table; return {(aggregator, attack): (results, deltas)}."""
    from lecture09.compress import compressed_dp as cdp
    n_seeds = settings.n_seeds
    aggregator_names = list(dict.fromkeys(r.aggregator for r in runs))
    attack_names = list(dict.fromkeys(r.attack for r in runs))
    print_header(title)
    out(changed_settings(settings.train) + "格子里是 Δ = bits/字符 − 同种子的诚实平均（mean/none），正数 = 变差"
        + ("" if n_seeds == 1 else f"；{n_seeds} 组种子的范围 low..high")
        + f"。|Δ| ≤ {cdp.DELTA_TOLERANCE_BPC:g} 算差不多。")
    cell_width = 8 if n_seeds == 1 else 13
    widths = [max(cell_width, len(a) + 1) for a in attack_names]
    # columns that fit 100 display columns together; rows stream when one group holds them all
    groups, current = [], []
    for k, w in enumerate(widths):
        if current and 14 + sum(widths[j] for j in current) + w > LINE_WIDTH:
            groups.append(current)
            current = []
        current.append(k)
    groups.append(current)

    def header(group):
        out(pad("聚合器", 14) + "".join(pad(attack_names[k], widths[k], ">") for k in group))
        out("-" * (14 + sum(widths[k] for k in group)))

    def row(name, cells, group):
        out(pad(name, 14) + "".join(pad(cells[k], widths[k], ">") for k in group))

    streaming = len(groups) == 1
    if streaming:
        header(groups[0])
    table, base, rows = {}, None, []
    for name in aggregator_names:
        cells = []
        for attack in attack_names:
            results = tuple(next(results_iter) for _ in range(n_seeds))
            base = results if base is None else base
            deltas = tuple(cdp.paired_deltas(results, base))
            table[(name, attack)] = (results, deltas)
            cells.append(cell_text(deltas, n_seeds) if (name, attack) != (aggregator_names[0], attack_names[0])
                         else f"{cdp.Spread.of(r.bpc for r in results).mean:.4f}")
        rows.append((name, cells))
        if streaming:
            row(name, cells, groups[0])
            sys.stdout.flush()
    if not streaming:
        for number, group in enumerate(groups):
            if number:
                out("")
            header(group)
            for name, cells in rows:
                row(name, cells, group)
    out(f"（左上角是诚实平均本身的 bits/字符{'' if n_seeds == 1 else '（各种子的平均）'}）")
    return table


def training_observations(table, compressed, settings, out=print_wrapped, start=1):
    from lecture09.compress import compressed_dp as cdp
    words = {"same": "差不多", "worse": "变差", "better": "变好", "unclear": "说不清，种子之间不一致"}

    def said(key, source):
        deltas = source[key][1]
        finite = [d for d in deltas if math.isfinite(d)]
        mean = signed(sum(finite) / len(finite)) if len(finite) == len(deltas) else "发散"
        return f"{words[cdp.verdict(deltas)]}（Δ {mean}）"

    lines = []
    honest = [k for k in table if k[1] == "none" and k[0] != "mean"]
    if honest:
        lines.append("没人攻击时，稳健聚合的代价：" + "；".join(f"{k[0]} {said(k, table)}" for k in honest) + "。")
    for attack in dict.fromkeys(k[1] for k in table):
        if attack == "none" or ("mean", attack) not in table:
            continue
        fixed = [k[0] for k in table if k[1] == attack and k[0] != "mean"
                 and cdp.verdict([a - b for a, b in zip(table[k][1], table[("mean", attack)][1])]) == "better"]
        lines.append(f"{attack}：平均{said(('mean', attack), table)}"
                     + (f"；比平均好的：{'、'.join(fixed)}" if fixed else "；没有一个聚合器比平均好")
                     + "（每个种子上都好过 0.01 才算）。")
    if compressed:
        keys = [k for k in compressed if k != next(iter(compressed))]
        lines.append(f"工作者发 {settings.compressed_scheme} 时（表 (3)）：" + ("；".join(
            f"{k[0]}/{k[1]} {said(k, compressed)}" for k in keys) if keys
            else "只有诚实平均这一格，没有可比的（再给 --compressed-aggregators 或 --compressed-attacks）") + "。")
        pair = ("mean", "tiny-dense"), ("mean", "tiny-dense-fixed")
        if all(k in compressed for k in pair):
            diff = [b - a for a, b in zip(compressed[pair[0]][1], compressed[pair[1]][1])]
            verdict = cdp.verdict(diff)
            lines.append("同样的微小稠密上传，每一轮用同一组符号时，平均的训练"
                         + {"worse": "差得更多", "better": "反而差得少", "same": "和随机符号差不多",
                            "unclear": "和随机符号比说不清（种子之间不一致）"}[verdict]
                         + f"（两者之差 {signed(sum(diff) / len(diff))}）"
                         + ("：各轮的推动方向一致时会积累起来，随机符号的推动互相抵消。" if verdict == "worse" else "。"))
    for k, line in enumerate(lines, start):
        out(f" {k}. {line}")
    return lines


# =============================================================================
# Command line
# =============================================================================

def parse_args(argv=None):
    d = DEFAULTS
    p = Parser(description="第 9 讲代码 8：会说谎的工作者和稳健聚合 (lecture 9 code 8: Byzantine workers, "
                           "robust aggregation)")
    p.add_argument("--quick", action="store_true",
                   help="很小的设置（冒烟测试 smoke test）；覆盖 --steps、--warm-steps、--aggregators、"
                        "--attacks、--compressed-aggregators")
    p.add_argument("--workers", type=int_in(3, 32), default=d["workers"], help="工作者数 n, number of workers (default %(default)s)")
    p.add_argument("--liars", type=int_in(1, 15), default=d["liars"],
                   help="说谎的工作者数 f，也是聚合器假设的 f (liars, Byzantine workers; default %(default)s)")
    p.add_argument("--aggregators", nargs="+", choices=AGGREGATOR_NAMES, default=list(d["aggregators"]),
                   metavar="A", help="表 (2) 的聚合器 aggregators: " + " ".join(AGGREGATOR_NAMES) + " (default %(default)s)")
    p.add_argument("--attacks", nargs="+", choices=ATTACK_NAMES, default=list(d["attacks"]), metavar="T",
                   help="表 (2) 的攻击 attacks: " + " ".join(ATTACK_NAMES) + " (default %(default)s)")
    p.add_argument("--compressed-aggregators", nargs="+", choices=AGGREGATOR_NAMES,
                   default=list(d["compressed_aggregators"]), metavar="A",
                   help="表 (3)（工作者发 top-k）的聚合器 aggregators of table (3) (default %(default)s)")
    p.add_argument("--compressed-attacks", nargs="+", choices=ATTACK_NAMES, default=list(d["compressed_attacks"]),
                   metavar="T", help="表 (3) 的攻击 attacks of table (3) (default %(default)s)")
    p.add_argument("--warm-steps", type=int_in(1, 1000), default=d["warm_steps"],
                   help="表 (1) 量那一轮之前的诚实训练步数 honest warm-up steps (default %(default)s)")
    p.add_argument("--bucket", type=int_in(0, 32), default=d["bucket"],
                   help="分桶 bucketing：先把 s 份随机分一组取平均，0 = 不分桶 (default %(default)s)")
    p.add_argument("--cc-tau", type=float_in(0, 1e6, low_open=True), default=d["cc_tau"],
                   help="centered-clip 的裁剪半径 tau (default %(default)s)")
    p.add_argument("--worker-momentum", type=float_in(0, 1, high_open=True), default=d["worker_momentum"],
                   metavar="BETA", help="表 (2)、(3)：每个工作者发自己的动量 m = βm + (1−β)g，接收方的 AdamW 不再有动量"
                   "（β1 = 0）；0 = 发梯度 worker momentum (Karimireddy et al. 2021; default %(default)s)")
    training_flags.add_training_arguments(p, d)
    args = p.parse_args(argv)
    if args.quick:
        apply_quick(args, QUICK, given_flags(p, argv))
    from lecture09.robust import aggregator_rules as aggregators    # no torch: a refusal answers at once
    if 2 * args.liars >= args.workers:
        p.error(f"--liars {args.liars} 要少于工作者的一半 (f < n/2, n = --workers {args.workers})")
    for name in dict.fromkeys(list(args.aggregators) + list(args.compressed_aggregators) + ["mean", "median"]):
        try:
            aggregators.check_settings(name, args.workers, args.liars, args.bucket)
        except aggregators.AggregatorError as error:
            p.error(f"{error} (--workers {args.workers}, --liars {args.liars})".replace(" (Blanchard et al.)", ""))
    from lecture09.compress.compressed_dp import Seeds, TrainSetup
    train = replace(TrainSetup(n_workers=args.workers).with_steps(args.steps), bucket=args.bucket,
                    cc_tau=args.cc_tau, worker_momentum=args.worker_momentum, precision=precision_from_args(args))
    return Settings(train=train, seeds=Seeds(args.model_seed, args.data_seed), n_seeds=args.seeds, jobs=args.jobs,
                    liars=args.liars, warm_steps=args.warm_steps,
                    aggregators=tuple(dict.fromkeys(["mean"] + args.aggregators)),
                    attacks=tuple(dict.fromkeys(["none"] + args.attacks)),
                    compressed_aggregators=tuple(dict.fromkeys(["mean"] + args.compressed_aggregators)),
                    compressed_attacks=tuple(dict.fromkeys(["none"] + args.compressed_attacks)))


def main(argv=None):
    utf8_output()                        # UTF-8 through any console or redirect (Windows: cp1252)
    settings = parse_args(argv)
    from lecture09.compress import compressed_dp as cdp
    from lecture09.swarm.influence import measure_round
    from lecture01 import tiny_gpt
    tiny_gpt.use_deterministic_threads()
    started = time.perf_counter()
    t = settings.train
    seeds = [settings.seeds.shifted(k) for k in range(settings.n_seeds)]
    plain = training_rows(settings, "none", settings.aggregators, settings.attacks)
    compressed = training_rows(settings, settings.compressed_scheme, settings.compressed_aggregators,
                               settings.compressed_attacks)
    jobs = [(run, s, t) for run in plain + compressed for s in seeds]
    pool, results_iter = cdp.start_training(jobs, settings.jobs)     # trains while table (1) is measured
    try:
        names, skipped = round_aggregators(settings)
        study = measure_round(t, scheme=settings.compressed_scheme, warm_steps=settings.warm_steps,
                              liars=settings.liars, seeds=settings.seeds, aggregator_names=names)
        control = measure_round(t, scheme=settings.compressed_scheme, warm_steps=settings.warm_steps,
                                liars=settings.liars, aggregator_names=("mean",), seeds=settings.seeds,
                                optimizer="sgd")
        dense = measure_round(t, scheme="none", warm_steps=settings.warm_steps, liars=settings.liars,
                              aggregator_names=names, seeds=settings.seeds)
        print_round(study, control, dense, train=t)
        for name, why in skipped:
            print_wrapped(f"（表里没有 {name}：{why}）")
        print("\n观察 Observations（表 (1)）：")
        round_observations(study, control, dense)
        print()
        sends = f"动量 momentum β = {t.worker_momentum:g}" if t.worker_momentum else "fp32"
        table = print_training(f"表 (2)：训练 {t.steps} 步（{t.n_workers} 个工作者发 {sends}，{settings.liars} 个说谎；"
                               f"前向 {t.precision}）", settings, plain, results_iter)
        print()
        sends = f" 的动量（β = {t.worker_momentum:g}）" if t.worker_momentum else "（代码 6 的默认）"
        table3 = print_training(f"表 (3)：工作者发 {settings.compressed_scheme}{sends}，同样训练 {t.steps} 步",
                                settings, compressed, results_iter)
    finally:
        if pool is not None:
            pool.terminate()
    print("\n观察 Observations（表 (2)、(3)）：")
    training_observations(table, table3, settings)
    print(f"（总用时 total {time.perf_counter() - started:.1f} 秒）", file=sys.stderr)
    return {"study": study, "control": control, "dense": dense, "table": table, "compressed": table3}


if __name__ == "__main__":
    run_main(main)
