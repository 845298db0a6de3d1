"""
第 9 讲 · 代码 5：去中心化训练——在慢速、异构的网络上分配任务、压缩通信
Lecture 9, code 5: decentralized training — scheduling on a slow, uneven network, and
compressing what workers send.

这个文件回答的问题 (the question)
    GPU 不在同一个数据中心，而是散落在几个地区、用比机房慢几十倍的网络连起来，还能训练基础模型吗？
    两个手段：(1) 聪明地分配任务（scheduling）——把通信量大的任务放在快的链路上；
    (2) 压缩要传的数据（gradient compression）。

    演示 1（demo 1）：32 张卡分在 4 个地区，把 4 个流水线阶段 × 8 个数据并行副本的任务分给它们。
      随机分配、两种手工分配、局部搜索（严格 / 允许持平）、Yuan et al. 的遗传算法（看地区 / 不看地区），
      以及可以证明的最优分配（proven optimum）：每种方法离最优有多远？比数据中心慢多少？
      两个实例：全局 batch 1024（--global-batch）和 256（--second-batch）。
    演示 2（demo 2）：在第 1 讲的小 GPT 上做 4 个工作者的数据并行，每个工作者的梯度先压缩再"发送"：
      fp16、int8、top-1%、只发符号，有没有误差反馈（error feedback）；配 AdamW + 裁剪，以及普通 SGD；
      每一行和不压缩相比的配对差（paired difference），--seeds N 时给出种子之间的范围。
    演示 3（demo 3，只在 --demo 3 时跑）：卡也不一样（算力、显存），阶段的层数不均匀；遗传算法、图划分
      （HexiScale 式）、剪枝枚举（Metis 式）三种搜索，小实例上和证明过的最优比，另有"每张卡都一样"的对照。

对应讲义 (notes): lectures/lecture09/05_decentralized.md 第 5 节

运行 (run):
    python3 code/lecture09/05_decentralized.py             # 全部，时间见 README（2 核机器，中位数）
    python3 code/lecture09/05_decentralized.py --demo 1    # 只跑演示 1，5.4 s（README）
    python3 code/lecture09/05_decentralized.py --demo 3 --mix a100=8,t4=24   # 异构的卡（讲义 5.11 节）
    python3 code/lecture09/05_decentralized.py --demo 2 --seeds 3     # 每一行 3 组种子：平均和范围
    python3 code/lecture09/05_decentralized.py --demo 2 --topk-ratio 0.05 --steps 600
    python3 code/lecture09/05_decentralized.py --network aws-world   # Yuan et al. 实测的 8 城市网络
    python3 code/lecture09/05_decentralized.py --quick     # 很小的设置，6.4 s（测试用）
    python3 code/lecture09/05_decentralized.py --demo executed   # 演示 1 的分配在模拟链路上真的跑（讲义 5.12）
    python3 code/lecture09/05_decentralized.py --demo emulator   # 链路模拟器自己的误差（讲义 5.12）
    python3 code/lecture09/05_decentralized.py --demo time --seeds 2   # 慢网络上到目标 bpc 的秒数（5.12）
    python3 code/lecture09/05_decentralized.py --help      # 所有参数

演示 2 训练 10 个小模型（表 (a) 7 个，表 (b) 3 个；--seeds N 时 10 × N 个），各 240 步，
在 --jobs 个进程里并行（默认 2；每个进程 1 个 torch 线程，结果与进程数无关）。每一行都和同一优化器、
同样种子的不压缩那一行相减（配对差 Δ），观察的措辞由 Δ 和容差 compressed_dp.DELTA_TOLERANCE_BPC 决定。
前向精度 --precision auto：CPU 有 bf16 硬件（AVX512-BF16 或 AMX）就用 bf16 混合精度，否则 fp32。
演示 1 是纯算术，在任何机器上逐位相同；演示 2 的 bits/字符 随 CPU 和种子变（讲义 5.7 节：差多少、为什么）。
用时（elapsed）打印到 stderr。
需要 (needs): numpy、torch；演示 1 在 schedule/（demo1_tables.py 打印表格，demo1_observations.py 写观察），
演示 2 在 compress/（demo2_report.py 打印，compressed_dp.py 训练）；code/lecture01 的
fm_world.py、tiny_gpt.py、console.py、cli_args.py。从随机初始化开始训练，不读也不写第 1 讲的缓存。
"""

import argparse
import sys
import time
from dataclasses import dataclass, field, replace

try:
    import lecture01  # noqa: F401  the course toolkit, installed by `pip install -r requirements.txt`
except ModuleNotFoundError:
    import _course_path  # noqa: F401  a clone without that install (see that file)

from lecture09 import dist_sim
from lecture09.ranks import gloo_ranks  # no torch at import: --help stays fast
from lecture09.schedule import schedule_study  # noqa: F401  (the tests reach it here)
from lecture09.compress import training_flags
from lecture09.schedule.demo1_observations import demo1_observations
from lecture09.schedule.demo1_tables import Progress, run_demo1  # noqa: F401  (Progress: the tests')
from lecture09.schedule import demo3_flags
from lecture09.schedule.schedule_setup import ScheduleSetup
from lecture01.cli_args import (Parser, add_figures_flag, given_flags, run_main, float_in, int_in, non_negative_int, positive_float,
                      positive_int, precision_from_args, ratio)
from lecture01.console import utf8_output

# compressed_dp and tiny_gpt import torch (about 1.5 s), so they are imported on first use,
# after the flags are parsed: --help and a flag error answer at once. _heavy() binds these
# module names; `code5.TABLE_A` and the like from outside go through __getattr__ below.
_LAZY = ("compressed_dp", "tiny_gpt", "Run", "Seeds", "Spread", "TrainSetup", "TABLE_A", "TABLE_B")


def _heavy():
    """Import the torch-backed modules once and bind the names in _LAZY."""
    global compressed_dp, tiny_gpt, Run, Seeds, Spread, TrainSetup, TABLE_A, TABLE_B
    if "TABLE_B" in globals():
        return
    from lecture09.compress import compressed_dp
    from lecture01 import tiny_gpt
    from lecture09.compress.compressed_dp import Run, Seeds, Spread, TrainSetup
    from lecture09.compress.demo2_report import TABLE_A, TABLE_B


def __getattr__(name):
    if name in _LAZY:
        _heavy()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# =============================================================================
# Settings a student may change (flags below override them). Demo 1's job and network
# are lecture09/schedule_setup.py's ScheduleSetup (code 7's table (d) prices the same job).
# =============================================================================

@dataclass(frozen=True)
class CompressionSetup:
    """Demo 2: data parallelism on the lecture 1 model, gradients compressed per worker."""
    train: "TrainSetup" = field(default_factory=lambda: _heavy() or TrainSetup())
    #                                 ^ steps, workers, optimizers, top-k ratio (compressed_dp.TrainSetup)
    seeds: "Seeds" = field(default_factory=lambda: _heavy() or Seeds())   # the first seed pair: model 0, data 1
    n_seeds: int = 1                  # --seeds: every row over this many seed pairs (mean and range)
    precision_choice: str = "auto"    # --precision; train.precision holds what it resolved to
    jobs: int = 2                     # training processes at once (2 cores)


QUICK_SCHEDULE = dict(n_random=20, restarts=2, strict_iters=200, sideways_iters=600, genetic_budget=600,
                      genetic_population=3, genetic_local_iters=100)
QUICK_STEPS = 12
# --quick replaces these flags (argparse dest -> the ScheduleSetup / TrainSetup field it sets).
QUICK_OVERRIDES = {"steps": "steps", "random_layouts": "n_random", "restarts": "restarts",
                   "strict_iters": "strict_iters", "sideways_iters": "sideways_iters",
                   "genetic_budget": "genetic_budget"}
# Demo 2's flag defaults: compressed_dp.TrainSetup's and Seeds' defaults and CompressionSetup's,
# written out so that --help needs no torch (tests/test_decentralized.py checks they agree).
# Steps: demo 2 is the class run's training and trains 240 steps, not lecture 9's usual 300
# (compressed_dp.TrainSetup, codes 7 and 11): the run must fit about a minute on a busy 2-core
# laptop (issue 43), and every claim of §5.7 was checked at 240 on 5 seed pairs in fp32 and
# bf16. --demo time keeps 300, the steps its table 5.10 and TARGET_BPC were measured with.
CLASS_STEPS = 240
TIME_STEPS = training_flags.DEFAULTS["steps"]
DEMO2_DEFAULTS = dict(training_flags.DEFAULTS, steps=CLASS_STEPS, topk_ratio=0.01, sgd_lr=0.3, sgd_momentum=0.0)
BACKENDS = ("sim", "gloo")       # demo 2's engine: compressed_dp's simulation, or real ranks (gloo_dp.py)
# Flag ranges: wide enough for any real network and job, narrow enough that the
# picosecond arithmetic of dist_sim stays exact (int64) and the searches finish.
GBPS = float_in(1e-2, 1e5)               # 10 Mbit/s .. 100 Tbit/s
LATENCY_MS = float_in(0, 1e4)            # up to 10 s
MAX_GLOBAL_BATCH = 100_000
MAX_MICRO_BATCHES = 64            # each cut then pays the latency 64 times per direction
# --demo executed / emulator (lecture09/network, §5.12): opt-in, never part of "all".
NETWORK_DEMOS = ("executed", "emulator", "time")
EXECUTED_BUDGET_S = 60.0          # real seconds the executed demo may take; more: refused (exit 2)
REGION_CHOICES = (1, 2, 4, 8)     # --regions: 32 devices in this many equal regions
TARGET_BPC = 2.5                  # --demo time: a validation bpc every scheme's fp32 twin passes in 300 steps


# =============================================================================
# Demo 1: scheduling on a heterogeneous network
# =============================================================================


# =============================================================================
# Demo 2: gradient compression in data-parallel training
# =============================================================================

# TABLE_A (AdamW) and TABLE_B (SGD), the rows of demo 2, are built by _heavy() (they are
# compressed_dp.Run values).


# =============================================================================
# Command line
# =============================================================================

def parse_args(argv=None):
    s, d = ScheduleSetup(), DEMO2_DEFAULTS
    p = Parser(
        description="第 9 讲代码 5：去中心化训练 (lecture 9 code 5: decentralized training)",
        epilog="例 example: --demo 1 --network aws-world；--demo 2 --topk-ratio 0.05")
    p.add_argument("--demo", choices=("1", "2", "3", "all") + NETWORK_DEMOS, default="all",
                   help="跑哪个演示 which demo；all = 1 和 2；3、executed、emulator、time 只在点名时跑 (default all)")
    p.add_argument("--quick", action="store_true", help="很小的设置，秒级跑完（冒烟测试 smoke test）")
    add_figures_flag(p)                 # fig09_05_*.svg (demos 1, 2 and 3)
    g1 = p.add_argument_group("演示 1 demo 1")
    g1.add_argument("--net-seed", type=non_negative_int, default=s.net_seed,
                    help="随机网络的种子 seed of the random network (default %(default)s)")
    g1.add_argument("--network", choices=("random",) + tuple(dist_sim.PRESETS), default=s.network,
                    help="random: 随机抽的 4 地区网络；aws-world / aws-regional: Yuan et al. 实测的 AWS 链路 "
                         "(default %(default)s)")
    g1.add_argument("--intra-gbps", type=GBPS, default=s.intra_gbps, help="地区内带宽 Gbit/s (default %(default)s)")
    g1.add_argument("--intra-latency-ms", type=LATENCY_MS, default=s.intra_latency_ms,
                    help="地区内延迟 ms；Yuan et al. 的地理分布场景是 %s (default %%(default)s)"
                         % f"{s.paper_intra_latency_ms:g}")
    g1.add_argument("--inter-gbps", type=GBPS, nargs=2, metavar=("LO", "HI"), default=s.inter_gbps_range,
                    help="地区之间带宽范围 Gbit/s (default %(default)s)")
    g1.add_argument("--inter-latency-ms", type=LATENCY_MS, nargs=2, metavar=("LO", "HI"),
                    default=s.inter_latency_ms_range, help="地区之间延迟范围 latency between regions, ms (default %(default)s)")
    g1.add_argument("--global-batch", type=int_in(1, MAX_GLOBAL_BATCH), default=s.global_batch,
                    help="全局 batch（序列数），决定激活流量 (default %(default)s)")
    g1.add_argument("--second-batch", type=int_in(0, MAX_GLOBAL_BATCH), default=s.second_batch,
                    help="第二个实例的全局 batch，0 = 不算 (second instance; default %(default)s)")
    g1.add_argument("--micro-batches", type=int_in(1, MAX_MICRO_BATCHES), default=s.n_micro_batches,
                    help="每个副本的 batch 分成几个微批次 M：气泡 (P-1)/(M+P-1)，每个切口 M 次延迟 "
                         "(default %(default)s)")
    g1.add_argument("--random-layouts", type=positive_int, default=s.n_random,
                    help="随机分配的个数 random layouts (default %(default)s)")
    g1.add_argument("--restarts", type=positive_int, default=s.restarts,
                    help="局部搜索重启次数，也是遗传算法的种子数 restarts, and genetic seeds (default %(default)s)")
    g1.add_argument("--strict-iters", type=non_negative_int, default=s.strict_iters,
                    help="严格局部搜索每次的提议数 proposals per strict search (default %(default)s)")
    g1.add_argument("--sideways-iters", type=non_negative_int, default=s.sideways_iters,
                    help="持平局部搜索每次的提议数 proposals per sideways search (default %(default)s)")
    g1.add_argument("--genetic-budget", type=positive_int, default=s.genetic_budget,
                    help="遗传算法每个种子的代价计算次数 (default %(default)s)")
    g3 = demo3_flags.add_arguments(p)
    g4 = p.add_argument_group("模拟链路 emulated links (--demo executed)")
    g4.add_argument("--time-scale", type=float_in(1e-4, 1), default=5e-3,
                    help="任务的 1 秒跑成几秒 real seconds per job second (default %(default)s)")
    g4.add_argument("--regions", type=int, choices=REGION_CHOICES, default=len(s.region_sizes),
                    help="32 张卡平分到几个地区 regions (default %(default)s)")
    g4.add_argument("--target-bpc", type=float_in(0.5, 6), default=TARGET_BPC,
                    help="--demo time 的目标：验证 bits/字符 (default %(default)s)")
    g2 = p.add_argument_group("演示 2 demo 2")
    training_flags.add_training_arguments(
        g2, d, steps_help=f"训练步数 training steps (default：演示 2 {CLASS_STEPS}，--demo time {TIME_STEPS})")
    g2.add_argument("--topk-ratio", type=ratio, default=d["topk_ratio"], help="top-k 保留的比例 (default %(default)s)")
    g2.add_argument("--sgd-lr", type=positive_float, default=d["sgd_lr"],
                    help="表 (b) SGD 的学习率 SGD learning rate (default %(default)s)")
    g2.add_argument("--sgd-momentum", type=float_in(0, 1, high_open=True), default=d["sgd_momentum"],
                    help="表 (b) SGD 的动量 momentum, 0 = 普通 SGD (default %(default)s)")
    g2.add_argument("--backend", choices=BACKENDS, default=BACKENDS[0],
                    help="sim: 在一个进程里模拟工作者；gloo: 每个工作者一个真的 torch.distributed 进程（DDP + 通信钩子，"
                         "慢得多，--jobs 不再起作用）(default %(default)s)")
    args = p.parse_args(argv)
    for name in ("inter_gbps", "inter_latency_ms"):
        lo, hi = getattr(args, name)
        if lo > hi:
            p.error(f"--{name.replace('_', '-')}: LO ({lo:g}) 大于 HI ({hi:g})")
    schedule = replace(s, network=args.network, intra_gbps=args.intra_gbps, intra_latency_ms=args.intra_latency_ms,
                       second_batch=args.second_batch, n_micro_batches=args.micro_batches,
                       inter_gbps_range=tuple(args.inter_gbps),
                       inter_latency_ms_range=tuple(args.inter_latency_ms), net_seed=args.net_seed,
                       global_batch=args.global_batch, n_random=args.random_layouts, restarts=args.restarts,
                       strict_iters=args.strict_iters, sideways_iters=args.sideways_iters,
                       genetic_budget=args.genetic_budget)
    if args.regions != len(s.region_sizes) and args.demo in NETWORK_DEMOS:   # other demos: ignored (note)
        schedule = replace(schedule, region_sizes=(s.n_gpus // args.regions,) * args.regions)
    if args.quick:
        schedule = replace(schedule, **QUICK_SCHEDULE)
    if schedule.global_batch < schedule.n_replicas:
        p.error(f"--global-batch 不能小于副本数 {schedule.n_replicas} "
                f"(must be at least the {schedule.n_replicas} replicas)")
    if 0 < schedule.second_batch < schedule.n_replicas:
        p.error(f"--second-batch 要么是 0（不算），要么不小于副本数 (0, or >= the {schedule.n_replicas} replicas)")
    for batch, flag in ((schedule.global_batch, "--global-batch"), (schedule.second_batch, "--second-batch")):
        if batch and batch // schedule.n_replicas < schedule.n_micro_batches:
            p.error(f"--micro-batches {schedule.n_micro_batches} 大于 {flag} 给每个副本的序列数 "
                    f"{batch // schedule.n_replicas} (more micro-batches than sequences per replica)")
    least_budget = schedule.genetic_population * (schedule.genetic_local_iters + 1)
    if schedule.genetic_budget < least_budget:
        p.error(f"--genetic-budget 至少要 {least_budget} (must be at least {least_budget})")
    given = given_flags(p, argv)
    if args.demo == "time" and "steps" not in given:
        args.steps = TIME_STEPS
    note = unused_flags_note(args, given, {a.dest for a in g1._group_actions},
                             {a.dest for a in g2._group_actions}, {a.dest for a in g4._group_actions})
    if note:
        print(note, file=sys.stderr)
    args.hetero = demo3_flags.hetero_setup(p, args, schedule, given, {a.dest for a in g3._group_actions})
    if args.demo == "executed":
        _check_executed_budget(p, schedule, args.time_scale)
    if args.demo in ("1", "3", "executed", "emulator"):   # arithmetic or threads: no torch (about 1.5 s saved)
        return args, schedule, None
    # Only now the torch-backed modules: every flag error above came without waiting for them.
    _heavy()
    t = TrainSetup()
    train = replace(t.with_steps(QUICK_STEPS if args.quick else args.steps), topk_ratio=args.topk_ratio,
                    sgd_lr=args.sgd_lr, sgd_momentum=args.sgd_momentum,
                    precision=precision_from_args(args), backend=args.backend)
    compression = CompressionSetup(train=train, seeds=Seeds(args.model_seed, args.data_seed), n_seeds=args.seeds,
                                   precision_choice="fp32" if args.fp32 else args.precision, jobs=args.jobs)
    return args, schedule, compression


def _check_executed_budget(p, schedule, time_scale):
    """Refuse (exit 2, one line) a network so slow that the executed demo would not end within
    EXECUTED_BUDGET_S real seconds: its runs priced by the cost model, times the scale."""
    from lecture09.network.executed_report import planned_model_seconds
    real_s = planned_model_seconds(schedule) * time_scale
    if real_s > EXECUTED_BUDGET_S:
        p.error(f"网络太慢：要 {real_s:.3g} 秒 > {EXECUTED_BUDGET_S:.0f} 秒 (too slow)")


def unused_flags_note(args, given, demo1_dests, demo2_dests, network_dests=frozenset()):
    """One stderr line naming the given flags this run does not use (None if there are none):
    those of the demo that does not run, and those --quick replaces with its own values.
    The rule everywhere: run anyway, and say so (never refuse)."""
    def names(dests):
        return " ".join("--" + dest.replace("_", "-") for dest in sorted(dests))

    network_dests = set(network_dests) - demo1_dests
    if args.demo in NETWORK_DEMOS:   # the executed demo reads demo 1's network flags, not its search budgets
        searches = {"random_layouts", "restarts", "strict_iters", "sideways_iters", "genetic_budget",
                    "second_batch"}
        unused = (demo2_dests - ({"steps", "seeds", "model_seed", "data_seed"} if args.demo == "time" else set())
                  if args.demo != "emulator" else demo2_dests | demo1_dests | network_dests)
        unused |= {"time_scale"} if args.demo == "time" else {"target_bpc"} if args.demo == "executed" else set()
        ignored = (unused | searches) & given
    else:
        ignored = (demo2_dests if args.demo in ("1", "3") else demo1_dests if args.demo == "2" else set()) & given
        ignored |= network_dests & given
    overridden = (set(QUICK_OVERRIDES) & given) - ignored if args.quick else set()
    parts = []
    if ignored:
        parts.append(f"--demo {args.demo} 只跑演示 {args.demo}，忽略 {names(ignored)} (ignored)")
    if overridden:
        parts.append(f"--quick 用自己的小设置，覆盖 {names(overridden)} (overridden by --quick)")
    return "注意 note: " + "；".join(parts) if parts else None


def main(argv=None):
    utf8_output()                        # UTF-8 through any console or redirect (Windows: cp1252)
    args, schedule, compression = parse_args(argv)
    started = time.perf_counter()
    results = {}
    pool = results_iter = None
    if args.demo in ("2", "all"):
        from lecture09.compress import demo2_report   # imports torch: only when demo 2 runs
        tiny_gpt.use_deterministic_threads()
        # Training starts first, in worker processes, so it overlaps demo 1's search.
        pool, results_iter = compressed_dp.start_training(demo2_report.training_jobs(compression), compression.jobs)
    try:
        if args.demo == "emulator":
            from lecture09.network.accuracy import print_accuracy
            results["emulator"] = print_accuracy()
        if args.demo == "executed":
            from lecture09.network.executed_report import run_executed
            from lecture09.network.emulator import TimeScale
            from lecture01.console import StatusLine
            status = StatusLine(sys.stderr, min_interval_s=0, log_interval_s=0)
            results["executed"] = run_executed(schedule, TimeScale(time=args.time_scale),
                                               step=lambda text: status.show(f"  执行中 running：{text}"))
            status.clear()
        if args.demo == "time":
            from lecture09.compress.slow_network_report import print_time_demo
            from lecture09.compress.demo2_report import seed_list
            from lecture01.console import StatusLine
            status = StatusLine(sys.stderr, min_interval_s=0, log_interval_s=0)
            results["time"] = print_time_demo(compression.train, schedule, seed_list(compression), args.target_bpc,
                                              step=lambda text: status.show(f"  训练中 training：{text}"))
            status.clear()
        if args.demo in ("1", "all"):
            results["demo1"] = run_demo1(schedule)
            demo1_observations(schedule, results["demo1"])
            print()
        if args.demo == "3":
            results["demo3"] = demo3_flags.run_demo3(args.hetero)
        if args.demo in ("2", "all"):
            rows = demo2_report.print_demo2(compression, results_iter, started)
            demo2_report.demo2_observations(compression, rows)
            results["demo2"] = rows
    finally:
        if pool is not None:
            pool.terminate()
    if args.figures:
        from lecture09.schedule.layout_figures import draw   # matplotlib only now
        from lecture09.compress.loss_figures import draw_demo2
        draw(args.figures, schedule, results)
        draw_demo2(args.figures, compression, results.get("demo2", {}))
    print(f"（总用时 total {time.perf_counter() - started:.1f} 秒）", file=sys.stderr)
    return results


if __name__ == "__main__":
    run_main(main, failures=gloo_ranks.LAUNCH_FAILURES)
