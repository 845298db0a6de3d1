"""
第 9 讲 · 代码 11：少通信训练的前沿——先从演示 1 最大的那一项说起：压缩流水线的激活
Lecture 9, code 11: the frontier of low-communication training — starting with the
largest term of demo 1's table: compressing the pipeline's activations.

这个文件回答的问题 (the question)
    代码 5、7 只压缩梯度。可是演示 1 里一张中间阶段的卡每次迭代发出的激活（前向）和激活的梯度
    （反向）比它的数据并行梯度还多。把激活也压缩（AQ-SGD，Wang、Yuan 等 2022）能省多少？
    演示 1 证明过的最优分配会不会因此改变？

    演示 1（demo 1）：
      表 (a)：小 GPT 的真实激活经过编码登记表（fp16、int8、4 bit），字节/值 从编码后的张量数出来；
        直接发激活和发"这次与上次见到同一批序列时的变化量"（AQ-SGD 的做法）各差多少。
      表 (b)：演示 1 的 1.3B 任务，流水线的字节按表 (a) 的 字节/值 缩小，重新求最优分配（分支定界），
        并把 fp16 时的最优分配按同样的字节再算一遍：分配变没变、每次迭代快多少。
    演示 2（demo 2）：Streaming DiLoCo（Douillard et al. 2025）：模型切成几片轮流同步，每次同步和 τ 步
      内层训练重叠，外层伪梯度可以量化成 int8 / 4 bit。
      表 (c)：和 DiLoCo、每步通信的 AdamW 在同样种子上比：平均和峰值 字节/参数，Δ bits/字符。
      表 (d)：每一行的一次交换放到演示 1 的慢网络上要几秒，重叠藏住多少，每次迭代等多久。
    演示 3（demo 3）：DeMo（Peng、Quesnelle & Kingma 2024）：每个工作者把动量留在本地，每步只发它分块 DCT
      后每块最大的 k 个系数，收到的平均后取符号（sign-SGD）。
      表 (e)：和每步通信的 AdamW、top-k 1% + 误差反馈在同样种子上比：发出和收到的 字节/参数，Δ bits/字符；
        外加一行对照：系数全发。
      表 (f)：每一行每步交换一次，放到演示 1 的 1.3B 任务上，每次迭代几秒。
    演示 4（demo 4）：SparseLoCo（Sarfi et al. 2025）：DiLoCo 的 H 步内层训练之后，伪梯度每块只发最大的 k 个，
      值用 2 bit，没发的留在会衰减的误差反馈里，外层不用动量。
      表 (g)：和 DiLoCo（fp32、int8）、每步通信的 AdamW 在同样种子上比：字节/参数，Δ bits/字符；
        外加一行对照：值用 fp32。
      表 (h)：每一行的一次交换放到演示 1 的 1.3B 任务上，每次迭代几秒。
    演示 5（demo 5）：gossip（NoLoCo 的通信方式，Kolehmainen et al. 2025）：每 H 步每个工作者只和一个随机同伴
      平均模型，不做全体的 all-reduce。
      表 (i)：和「全体平均」（只差交换方式的对照）、DiLoCo、每步通信的 AdamW 在同样种子上比：字节/参数，
        Δ bits/字符，副本之间的散布（交换前、交换后）。外加一行：DiLoCo 去掉外层动量（只改一处），
        把 DiLoCo 和全体平均之差拆成动量的一份和学习率的一份。
      表 (j)：一次交换放到演示 1 的慢网络上：只等自己这一对，和一轮等最慢的一对，各要几秒。
    演示 6（demo 6，要 --demo 6 或 --demo all；all 时最后跑）：AQ-SGD 在真实的 gloo 流水线上：小 GPT 切成 2–3
      个阶段，多个 epoch 训练，激活直接量化（int8 / 4 bit）或发和上次见到同一序列时的变化量，梯度直接量化传回。
      表 (k)：前向、反向 字节/值（从编码后的张量数），Δ bits/字符 对不压缩的流水线，两端的存储。
        外加一行对照：4 bit 直接，但第一次见到的序列发 fp32（字节和 AQ-SGD 4 bit 一样，只差发不发变化量）。
    演示 7（demo 7，要 --demo 7 或 --demo all）：异步 local SGD（Liu et al. 2024）：工作者有快有慢，各自走完 H 步
      就把伪梯度发给服务器，服务器收到一个就更新一次（延迟的 Nesterov：动量攒够 W 个到达才动一次），谁也不等谁。
      表 (l)：和它们各自的同步对照（DiLoCo、全体平均）在同样种子上比：Δ bits/字符，陈旧，训练完要多少时间单位。
      表 (m)：一次交换放到演示 1 的慢网络上：同步的环形 all-reduce 人人等，异步只等自己到服务器的一条链路。

对应讲义 (notes): lectures/lecture09/11_frontier.md 第 11 节

运行 (run):
    python3 code/lecture09/11_frontier.py                    # 演示 1-5（课堂上的一次运行）；用时见 README 的表（中位数）
    python3 code/lecture09/11_frontier.py --demo 6           # AQ-SGD 在真实的 gloo 流水线上
    python3 code/lecture09/11_frontier.py --demo 7 --slowest 4   # 异步 local SGD，最慢的工作者慢 4 倍
    python3 code/lecture09/11_frontier.py --demo all         # 所有演示
    python3 code/lecture09/11_frontier.py --demo 1           # 只跑演示 1
    python3 code/lecture09/11_frontier.py --demo 2 --seeds 3 --fragments 5 --overlap 2
    python3 code/lecture09/11_frontier.py --demo 3 --topk-per-chunk 8 --chunk 16
    python3 code/lecture09/11_frontier.py --demo 4 --sync-every 10 --sparse-topk 64
    python3 code/lecture09/11_frontier.py --demo 5 --seeds 3 --sync-every 10
    python3 code/lecture09/11_frontier.py --demo 6 --seeds 5 --aq-epochs 10
    python3 code/lecture09/11_frontier.py --global-batch 512 --second-batch 0
    python3 code/lecture09/11_frontier.py --gap-steps 1      # 两次见到同一批序列之间只隔 1 步
    python3 code/lecture09/11_frontier.py --quick            # 更少的训练步（测试用）
需要 (needs): torch（表 (a)、(c)、(e)、(g)、(i)、(l) 训练小 GPT）；表 (b)、(d)、(f)、(h)、(j)、(m) 是纯算术，在任何
机器上逐位相同。表 (a) 的误差、表 (c)、(e)、(g)、(i)、(l) 的 bits/字符 和散布来自训练，随 CPU 和种子变；字节只取决于
形状、块大小、片数和 k；表 (l) 的陈旧和时间只取决于 H、--slowest 和步数。演示 2–5、7 的训练在 --jobs 个进程里，
和演示 1 同时开始；几个演示共有的行（每步通信的 AdamW，演示 2、4、5、7 的 DiLoCo，演示 5、7 的全体平均）只训练
一次（演示 1-5：6 + 3 + 3 + 3 次；演示 7 再加 3 次）。用时打印到 stderr。
"""

import sys
import time

try:
    import lecture01  # noqa: F401  the course toolkit, installed by `pip install -r requirements.txt`
except ModuleNotFoundError:
    import _course_path  # noqa: F401  a clone without that install (see that file)

from lecture01.cli_args import (Parser, add_figures_flag, apply_quick, given_flags, float_in, int_in, non_negative_int,  # noqa: E402
                                precision_from_args, run_main)
from lecture01.console import StatusLine, eta_text, print_header, print_wrapped, utf8_output  # noqa: E402
from lecture09.compress import aq_report, training_flags  # noqa: E402
from lecture09.schedule.geo_network import PRESETS  # noqa: E402
from lecture09.schedule.schedule_setup import ScheduleSetup  # noqa: E402

GBPS = float_in(1e-2, 1e5)               # as code 5: 10 Mbit/s .. 100 Tbit/s
MAX_GLOBAL_BATCH = 100_000
MAX_MICRO_BATCHES = 64
# Table (a)'s training, written out so that --help needs no torch.
DEFAULTS = dict(training_flags.DEFAULTS, warm_steps=60, gap_steps=10, block_size=256, sync_every=30, fragments=3,
                overlap=1, alpha=0.0, outer_lr=0.7, outer_momentum=0.9,
                topk_per_chunk=32, chunk=64, sign_lr=6e-3, momentum_decay=0.999,
                sparse_topk=32, ef_decay=0.95, sparse_outer_lr=1.0, slowest=2.0)
MAX_CHUNK = 1024      # a chunk of 1024 x 1024 coefficients: more than any tensor of the tiny GPT
QUICK = dict(warm_steps=4, gap_steps=2, steps=12, sync_every=6)
DEMOS = ("1", "2", "3", "4", "5", "6", "7")
CLASSROOM = ("1", "2", "3", "4", "5")       # the default run; demos 6 and 7 train more (--demo 6, 7 or all)


def wanted(args, demo):
    """Does this run show `demo`?"""
    return args.demo in (demo, "all") or (args.demo == "1-5" and demo in CLASSROOM)


def parse_args(argv=None):
    s = ScheduleSetup()
    p = Parser(description="第 9 讲代码 11：少通信训练的前沿 (lecture 9 code 11: the frontier)",
               epilog="例 example: --global-batch 512；--gap-steps 1；--network aws-world")
    p.add_argument("--demo", choices=DEMOS + ("1-5", "all"), default="1-5",
                   help="跑哪个演示 which demo；1-5 是课堂上的一次运行，all 再加上演示 6、7 (default %(default)s)")
    p.add_argument("--quick", action="store_true",
                   help="更少的训练步（冒烟测试 smoke test）；覆盖 --warm-steps、--gap-steps、--steps、--sync-every")
    add_figures_flag(p)                # fig09_11_frontier.svg: bytes against Δ (demos 2-5)
    ga = p.add_argument_group("表 (a) 小 GPT 的激活 table (a)")
    ga.add_argument("--warm-steps", type=non_negative_int, default=DEFAULTS["warm_steps"],
                    help="训练多少步时第一次见到这批序列 steps before the earlier visit (default %(default)s)")
    ga.add_argument("--gap-steps", type=int_in(1, 10_000), default=DEFAULTS["gap_steps"],
                    help="再过多少步又见到它们 steps between the two visits (default %(default)s)")
    ga.add_argument("--block-size", type=int_in(1, 1 << 20), default=DEFAULTS["block_size"],
                    help="int8 / 4 bit 每块几个值共用一个缩放因子 values per scale (default %(default)s)")
    gb = p.add_argument_group("表 (b) 演示 1 的任务 table (b): demo 1's job")
    gb.add_argument("--network", choices=("random",) + tuple(PRESETS), default=s.network,
                    help="random: 演示 1 的随机 4 地区网络；aws-*: Yuan et al. 实测的 AWS 链路 (default %(default)s)")
    gb.add_argument("--net-seed", type=non_negative_int, default=s.net_seed,
                    help="随机网络的种子 seed of the random network (default %(default)s)")
    gb.add_argument("--intra-gbps", type=GBPS, default=s.intra_gbps, help="地区内带宽 Gbit/s (default %(default)s)")
    gb.add_argument("--global-batch", type=int_in(1, MAX_GLOBAL_BATCH), default=s.global_batch,
                    help="全局 batch（序列数），决定激活流量 (default %(default)s)")
    gb.add_argument("--second-batch", type=int_in(0, MAX_GLOBAL_BATCH), default=s.second_batch,
                    help="第二个 batch，0 = 不算 second batch, 0 = none (default %(default)s)")
    gb.add_argument("--micro-batches", type=int_in(1, MAX_MICRO_BATCHES), default=s.n_micro_batches,
                    help="每个副本的微批次数 M (default %(default)s)")
    gc = p.add_argument_group("演示 2 Streaming DiLoCo（表 (c)、(d)；--model-seed、--data-seed 也用于表 (a)）")
    gc.add_argument("--sync-every", type=int_in(1, 100_000), default=DEFAULTS["sync_every"], metavar="H",
                    help="DiLoCo 每 H 步交换一次；Streaming 每 H/F 步交换一片 sync period (default %(default)s)")
    gc.add_argument("--fragments", type=int_in(1, 64), default=DEFAULTS["fragments"], metavar="F",
                    help="Streaming 把模型切成几片，F 要整除 H fragments (default %(default)s)")
    gc.add_argument("--overlap", type=non_negative_int, default=DEFAULTS["overlap"], metavar="TAU",
                    help="τ：一片发出后再训练几步才用上它，要小于 H/F overlap steps (default %(default)s)")
    gc.add_argument("--alpha", type=float_in(0, 1), default=DEFAULTS["alpha"],
                    help="同步后一片保留自己进度的比例 α，torchft 的 fragment_update_alpha (mixing; default %(default)s)")
    gc.add_argument("--final-sync", action="store_true",
                    help="训练结束后每一片再同步一次再评估（对照：片段到最后有多旧）every fragment syncs once more at the end")
    gc.add_argument("--outer-lr", type=float_in(0, 10, low_open=True), default=DEFAULTS["outer_lr"],
                    help="外层 SGD 的学习率 outer learning rate (default %(default)s)")
    gc.add_argument("--outer-momentum", type=float_in(0, 1, high_open=True), default=DEFAULTS["outer_momentum"],
                    help="外层 Nesterov 动量，0 = 不用动量 (default %(default)s)")
    gd = p.add_argument_group("演示 3 DeMo（表 (e)、(f)；训练的参数和演示 2 共用）")
    gd.add_argument("--topk-per-chunk", type=int_in(1, MAX_CHUNK * MAX_CHUNK), default=DEFAULTS["topk_per_chunk"],
                    metavar="K", help="DCT 之后每块发几个系数 coefficients sent per chunk (default %(default)s)")
    gd.add_argument("--chunk", type=int_in(1, MAX_CHUNK), default=DEFAULTS["chunk"],
                    help="块的边长上限：每一维取不超过它的最大因数 chunk side (default %(default)s)")
    gd.add_argument("--sign-lr", type=float_in(0, 1, low_open=True), default=DEFAULTS["sign_lr"],
                    help="DeMo 的 sign-SGD 峰值学习率 peak learning rate (default %(default)s)")
    gd.add_argument("--momentum-decay", type=float_in(0, 1, high_open=True), default=DEFAULTS["momentum_decay"],
                    help="本地动量的衰减 β local momentum decay (default %(default)s)")
    gs = p.add_argument_group("演示 4 SparseLoCo（表 (g)、(h)；H 用 --sync-every，块用 --chunk）")
    gs.add_argument("--sparse-topk", type=int_in(1, MAX_CHUNK * MAX_CHUNK), default=DEFAULTS["sparse_topk"],
                    metavar="K", help="每块发伪梯度的几个分量 entries sent per chunk (default %(default)s)")
    gs.add_argument("--ef-decay", type=float_in(0, 1), default=DEFAULTS["ef_decay"],
                    help="误差反馈的衰减 β error-feedback decay (default %(default)s)")
    gs.add_argument("--sparse-outer-lr", type=float_in(0, 10, low_open=True), default=DEFAULTS["sparse_outer_lr"],
                    help="SparseLoCo 外层的学习率 α，没有动量 outer learning rate (default %(default)s)")
    g7 = p.add_argument_group("演示 7 异步 local SGD（表 (l)、(m)；也用 --sync-every、--outer-lr 等）")
    g7.add_argument("--slowest", type=float_in(1, 100), default=DEFAULTS["slowest"],
                    help="最慢的工作者一步的时间是最快的几倍，其余均匀分布 slowest worker's step time (default %(default)s)")
    training_flags.add_training_arguments(gc, DEFAULTS)
    aq_report.add_arguments(p)
    args = p.parse_args(argv)
    if args.quick:
        apply_quick(args, dict(QUICK, **aq_report.QUICK) if wanted(args, "6") else QUICK, given_flags(p, argv))
    aq_report.check_arguments(p, args)
    if args.global_batch < s.n_replicas or (args.second_batch and args.second_batch < s.n_replicas):
        p.error(f"a global batch must give each of the {s.n_replicas} replicas at least one sequence")
    if wanted(args, "2"):
        if args.sync_every % args.fragments or args.sync_every < args.fragments:
            p.error(f"--sync-every {args.sync_every} must be a multiple of --fragments {args.fragments}")
        if args.overlap >= args.sync_every // args.fragments:
            p.error(f"--overlap {args.overlap} must be below H / F = {args.sync_every // args.fragments}")
    setup = ScheduleSetup(network=args.network, net_seed=args.net_seed, intra_gbps=args.intra_gbps,
                          global_batch=args.global_batch, second_batch=args.second_batch,
                          n_micro_batches=args.micro_batches)
    return args, setup


def demo1(args, setup):
    """Tables (a) and (b) and their observations; what the tests read."""
    from lecture01.tiny_gpt import TrainConfig
    from lecture09.compress import activation_codes
    from lecture09.lecture_model import MODEL_CONFIG
    from lecture09.schedule import activation_pricing
    from lecture09.schedule.schedule_setup import build_networks

    print_header("演示 1：压缩流水线的激活（AQ-SGD）——演示 1 的最优分配会变吗？")
    status, started, first = StatusLine(), time.perf_counter(), []    # progress with an estimate, on stderr

    def on_step(done, total):
        now = time.perf_counter()
        first[:] = first or [now]
        status.show("训练小 GPT training: " + eta_text(done, total, now - started, now - first[0]), force=done == 1)

    study = activation_codes.study(MODEL_CONFIG, TrainConfig(), model_seed=args.model_seed, data_seed=args.data_seed,
                                   warm_steps=args.warm_steps, gap_steps=args.gap_steps, block_size=args.block_size,
                                   on_step=on_step)
    status.clear()
    activation_codes.print_study(study, args.block_size, print_wrapped)
    print()
    geo, _ = build_networks(setup)
    batches = [setup.global_batch] + ([setup.second_batch] if setup.second_batch else [])
    encodings = {activation_codes.label(c.scheme, args.block_size): c.bytes_per_value for c in study.codes}
    rows = activation_pricing.price_encodings(setup, geo, encodings, batches, step=status.show)
    status.clear()
    activation_pricing.print_pricing(setup, rows, print_wrapped)
    observations = (activation_codes.study_observations(study, args.block_size)
                    + activation_pricing.pricing_observations(setup, rows))
    print_observations(observations)
    return {"study": study, "rows": rows, "observations": observations}


def print_observations(lines):
    print("\n观察 observations：")
    for i, text in enumerate(lines, 1):
        print_wrapped(f"  {i}. {text}" + ("" if text.endswith("。") else "。"))


def train_setup(args):
    from dataclasses import replace
    from lecture09.compress.compressed_dp import TrainSetup
    return replace(TrainSetup().with_steps(args.steps), block_size=args.block_size, outer_lr=args.outer_lr,
                   outer_momentum=args.outer_momentum, fragment_alpha=args.alpha, final_sync=args.final_sync,
                   demo_lr=args.sign_lr, demo_decay=args.momentum_decay, sparseloco_decay=args.ef_decay,
                   sparseloco_lr=args.sparse_outer_lr, precision=precision_from_args(args))


def demo2(args, train, rows, results_iter):
    """Tables (c) and (d) and their observations."""
    from lecture09.compress import streaming_report
    from lecture09.compress.streaming_diloco import fragment_ranges
    from lecture09.lecture_model import MODEL_CONFIG
    from lecture09.schedule import sync_pricing

    print_header("演示 2：Streaming DiLoCo——一片一片地同步，边训练边传")
    table = streaming_report.collect(rows, results_iter, args.seeds)
    streaming_report.print_table_c(train, table, args.seeds, print_wrapped)
    print()
    from lecture01 import tiny_gpt
    n = tiny_gpt.make_model(MODEL_CONFIG).n_params()
    largest = max(b - a for a, b in fragment_ranges([n], args.fragments)) / n
    priced = {}
    for label, (row, results, _) in table.items():
        up = streaming_report.peak_of(results[0])
        whole = row.run.optimizer != "streaming-diloco"
        back = up if row.run.scheme == "none" else 4.0 * (1.0 if whole else largest)
        priced[label] = ((up + back) / 2, row.every, row.overlap)
    prices, setup, plain_s = sync_pricing.price_syncs(priced)
    sync_pricing.print_table_d(list(priced), prices, setup, plain_s, print_wrapped)
    labels = list(priced)
    whole = next(l for l in labels if table[l][0].run.optimizer == "diloco")
    fragment = next(l for l in labels if table[l][0].run.optimizer == "streaming-diloco")
    observations = (streaming_report.table_c_observations(table)
                    + sync_pricing.table_d_observations(labels, prices, whole, fragment, args.fragments))
    print_observations(observations)
    return {"table": table, "prices": prices, "observations": observations}


def demo3(args, train, rows, results_iter):
    """Tables (e) and (f) and their observations."""
    from lecture09.compress import decoupled_report as report
    from lecture09.schedule import sync_pricing

    print_header("演示 3：DeMo——动量留在本地，只发 DCT 之后最大的系数")
    table = report.collect(rows, results_iter, args.seeds)
    report.print_table_e(train, table, args.seeds, print_wrapped)
    print()
    priced, n_xl = report.price_rows(table, args.topk_per_chunk, args.chunk, train.topk_ratio,
                                     ScheduleSetup().n_replicas)        # sync_pricing's job: demo 1's
    prices, setup, plain_s = sync_pricing.price_syncs({label: (c, 1, 0) for label, (c, _) in priced.items()})
    report.print_table_f(priced, prices, setup, plain_s, n_xl, print_wrapped)
    observations = (report.table_e_observations(table, train.n_workers)
                    + report.table_f_observations(priced, prices, plain_s))
    print_observations(observations)
    return {"table": table, "priced": priced, "prices": prices, "observations": observations}


def demo4(args, train, rows, results_iter):
    """Tables (g) and (h) and their observations."""
    from lecture09.compress import sparseloco_report as report
    from lecture09.schedule import sync_pricing

    print_header("演示 4：SparseLoCo——伪梯度只发每块最大的几个，2 bit，误差反馈代替外层动量")
    h = args.sync_every
    table = report.collect(rows, results_iter, args.seeds)
    report.print_table_g(train, table, h, args.chunk, args.seeds, print_wrapped)
    print()
    priced = report.price_rows(table, h, args.sparse_topk, args.chunk, ScheduleSetup().n_replicas)
    prices, setup, plain_s = sync_pricing.price_syncs({label: (c, h, 0) for label, (c, _) in priced.items()})
    report.print_table_h(priced, prices, setup, plain_s, print_wrapped)
    observations = report.table_g_observations(table, h) + report.table_h_observations(priced, prices, plain_s)
    print_observations(observations)
    return {"table": table, "priced": priced, "prices": prices, "observations": observations}


def demo5(args, train, rows, results_iter):
    """Tables (i) and (j) and their observations."""
    from lecture09.compress import gossip_report as report
    from lecture09.schedule import gossip_pricing

    print_header("演示 5：gossip——每次只和一个随机同伴平均，不做全体的 all-reduce")
    h = args.sync_every
    table = report.collect(rows, results_iter, args.seeds)
    report.print_table_i(train, table, h, args.seeds, print_wrapped)
    print()
    price, all_reduce_s, plain_s, setup = gossip_pricing.price_gossip(4.0)
    priced = report.price_rows(price, all_reduce_s, h)
    report.print_table_j(priced, setup, plain_s, print_wrapped)
    observations = (report.table_i_observations(table, train.n_workers, outer_lr=train.outer_lr,
                                                outer_momentum=train.outer_momentum)
                    + report.table_j_observations(priced, price))
    print_observations(observations)
    return {"table": table, "price": price, "priced": priced, "observations": observations}


def demo6(args):
    """Table (k) and its observations: AQ-SGD on the real gloo pipeline."""
    from lecture01 import tiny_gpt
    from lecture09.compress import compressed_dp, pipeline_aq

    print_header("演示 6：AQ-SGD 在真实的 gloo 流水线上——压缩激活，发变化量")
    aq = aq_report.setup_from_args(args, precision_from_args(args))
    rows = pipeline_aq.build_rows(args.aq_backward)
    seeds = [compressed_dp.Seeds(args.model_seed, args.data_seed).shifted(k) for k in range(args.seeds)]
    table = aq_report.collect(pipeline_aq.train_rows(rows, seeds, aq), rows)
    aq_report.print_table_k(aq, table, print_wrapped)
    observations = aq_report.table_k_observations(table, aq, tiny_gpt.make_model(aq.model).n_params())
    print_observations(observations)
    return {"table": table, "setup": aq, "observations": observations}


def demo7(args, train, rows, results_iter):
    """Tables (l) and (m) and their observations."""
    from lecture09.compress import async_report as report
    from lecture09.schedule import gossip_pricing

    print_header("演示 7：异步 local SGD——服务器收到一个伪梯度就更新，谁也不等谁；延迟的 Nesterov")
    h = args.sync_every
    table = report.collect(rows, results_iter, args.seeds)
    report.print_table_l(train, table, h, args.slowest, args.seeds, print_wrapped)
    print()
    price, all_reduce_s, plain_s, setup = gossip_pricing.price_server(4.0)
    priced = report.price_rows(price, all_reduce_s, h)
    report.print_table_m(priced, setup, plain_s, print_wrapped)
    observations = (report.table_l_observations(table, train.steps, args.slowest, train.outer_lr, train.outer_momentum)
                    + report.table_m_observations(priced, price))
    print_observations(observations)
    return {"table": table, "price": price, "priced": priced, "observations": observations}


def main(argv=None):
    utf8_output()                        # UTF-8 through any console or redirect (Windows: cp1252)
    args, setup = parse_args(argv)
    started = time.perf_counter()
    results, pool = {}, None
    trained = {"2": demo2, "3": demo3, "4": demo4, "5": demo5, "7": demo7}
    shown = [d for d in trained if wanted(args, d)]
    if shown:
        from lecture01 import tiny_gpt
        from lecture09.compress import (async_report, compressed_dp, decoupled_report, gossip_report,
                                        sparseloco_report, streaming_report)
        tiny_gpt.use_deterministic_threads()
        train = train_setup(args)
        rows = {"2": lambda: streaming_report.build_rows(args.sync_every, args.fragments, args.overlap),
                "3": lambda: decoupled_report.build_rows(args.topk_per_chunk, args.chunk, train.topk_ratio),
                "4": lambda: sparseloco_report.build_rows(args.sync_every, args.sparse_topk, args.chunk),
                "5": lambda: gossip_report.build_rows(args.sync_every, args.outer_momentum),
                "7": lambda: async_report.build_rows(args.sync_every, args.slowest)}
        rows = {d: rows[d]() for d in shown}
        seeds = [compressed_dp.Seeds(args.model_seed, args.data_seed).shifted(k) for k in range(args.seeds)]
        # a run two demos share (every-step AdamW; demo 2's, 4's and 5's DiLoCo) is trained once
        runs = list(dict.fromkeys(row.run for d in shown for row in rows[d]))
        # training starts first, in worker processes, so it overlaps demo 1
        pool, results_iter = compressed_dp.start_training([(run, s, train) for run in runs for s in seeds],
                                                          args.jobs)
        arrivals = compressed_dp.Arrivals(runs, results_iter, args.seeds)
    try:
        if wanted(args, "1"):
            results["demo1"] = demo1(args, setup)
        for i, d in enumerate(shown):
            if i or wanted(args, "1"):
                print()
            results["demo" + d] = trained[d](args, train, rows[d], arrivals.for_rows(rows[d]))
    finally:
        if pool is not None:
            pool.terminate()
    if wanted(args, "6"):          # its gloo ranks start after the training pool is done (2 cores)
        if results:
            print()
        results["demo6"] = demo6(args)
    if args.figures:
        from lecture09.compress.frontier_figures import draw   # matplotlib only now
        draw(args.figures, args, train if shown else None, results)
    print(f"（总用时 total {time.perf_counter() - started:.1f} 秒）", file=sys.stderr)
    return results


if __name__ == "__main__":
    run_main(main)
