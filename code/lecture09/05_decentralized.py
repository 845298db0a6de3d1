"""
第 9 讲 · 代码 5：去中心化训练——在慢速、异构的网络上分配任务、压缩通信
Lecture 9, code 5: decentralized training — scheduling on a slow, uneven network, and
compressing what workers send.

这个文件回答的问题 (the question)
    GPU 不在同一个数据中心，而是散落在几个地区、用比机房慢几十倍的网络连起来，还能训练基础模型吗？
    两个手段：(1) 聪明地分配任务（scheduling）——把通信量大的任务放在快的链路上；
    (2) 压缩要传的数据（gradient compression）。

    演示 1（demo 1）：32 张卡分在 4 个地区，把 4 个流水线阶段 × 8 个数据并行副本的任务分给它们。
      随机分配、两种手工分配、局部搜索（严格 / 允许持平）、Yuan et al. 的遗传算法，
      以及可以证明的最优分配（proven optimum）：每种方法离最优有多远？比数据中心慢多少？
    演示 2（demo 2）：在第 1 讲的小 GPT 上做 4 个工作者的数据并行，每个工作者的梯度先压缩再"发送"：
      fp16、int8、top-1%、只发符号，有没有误差反馈（error feedback）；配 AdamW + 裁剪，以及普通 SGD；
      每一行和不压缩相比的配对差（paired difference），--seeds N 时给出种子之间的范围。

对应讲义 (notes): lectures/lecture09_distributed_training.md 第 7 节

运行 (run):
    python3 code/lecture09/05_decentralized.py             # 全部，时间见 README（2 核机器，中位数）
    python3 code/lecture09/05_decentralized.py --demo 1    # 只跑演示 1，几秒钟
    python3 code/lecture09/05_decentralized.py --demo 2 --seeds 3     # 每一行 3 组种子：平均和范围
    python3 code/lecture09/05_decentralized.py --demo 2 --topk-ratio 0.05 --steps 600
    python3 code/lecture09/05_decentralized.py --network aws-world   # Yuan et al. 实测的 8 城市网络
    python3 code/lecture09/05_decentralized.py --quick     # 很小的设置，几秒钟（测试用）
    python3 code/lecture09/05_decentralized.py --help      # 所有参数

演示 2 训练 10 个小模型（表 (a) 7 个，表 (b) 3 个；--seeds N 时 10 × N 个），各 300 步，
在 --jobs 个进程里并行（默认 2；每个进程 1 个 torch 线程，结果与进程数无关）。每一行都和同一优化器、
同样种子的不压缩那一行相减（配对差 Δ），观察的措辞由 Δ 和容差 compressed_dp.DELTA_TOLERANCE_BPC 决定。
前向精度 --precision auto：CPU 有 bf16 硬件（AVX512-BF16 或 AMX）就用 bf16 混合精度，否则 fp32。
演示 1 是纯算术，在任何机器上逐位相同；演示 2 的 bits/字符 随 CPU 和种子变（讲义 7.7 节：差多少、为什么）。
用时（elapsed）打印到 stderr。
需要 (needs): numpy、torch；本目录的 dist_sim.py、compression.py、compressed_dp.py；code/lecture01 的
fm_world.py、tiny_gpt.py、console.py、cli_args.py。从随机初始化开始训练，不读也不写第 1 讲的缓存。
"""

import argparse
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

try:
    import lecture09  # noqa: F401  the course toolkit, installed by `pip install -r requirements.txt`
except ModuleNotFoundError:  # a clone without that install: the toolkit is the folder above this one
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from lecture09 import dist_sim
from lecture01.cli_args import (run_main, add_precision_arguments, float_in, int_in, non_negative_int, positive_float,
                      positive_int, precision_from_args, ratio)
from lecture01.console import display_width, histogram_lines, pad, print_header, print_table, print_wrapped

# compressed_dp and tiny_gpt import torch (about 1.5 s), so they are imported on first use,
# after the flags are parsed: --help and a flag error answer at once. _heavy() binds these
# module names; `code5.TABLE_A` and the like from outside go through __getattr__ below.
_LAZY = ("compressed_dp", "tiny_gpt", "Run", "Seeds", "Spread", "TrainSetup", "TABLE_A", "TABLE_B")


def _heavy():
    """Import the torch-backed modules once and bind the names in _LAZY."""
    global compressed_dp, tiny_gpt, Run, Seeds, Spread, TrainSetup, TABLE_A, TABLE_B
    if "TABLE_B" in globals():
        return
    from lecture09 import compressed_dp
    from lecture01 import tiny_gpt
    from lecture09.compressed_dp import Run, Seeds, Spread, TrainSetup
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


def __getattr__(name):
    if name in _LAZY:
        _heavy()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# =============================================================================
# Settings a student may change (flags below override them)
# =============================================================================

@dataclass(frozen=True)
class ScheduleSetup:
    """Demo 1: the job, the network, the search budgets (the draft's parameters)."""
    n_stages: int = 4                 # pipeline stages (流水线阶段)
    n_replicas: int = 8               # data-parallel replicas (数据并行副本)
    n_params: float = 1.3e9           # GPT-3 XL size, as in Yuan et al.'s experiments
    seq_len: int = 2048
    hidden: int = 2048
    global_batch: int = 1024          # sequences per iteration
    network: str = "random"           # "random", or a measured preset: dist_sim.PRESETS
    region_sizes: tuple = (8, 8, 8, 8)
    intra_gbps: float = 10.0          # inside a region
    inter_gbps_range: tuple = (0.3, 1.3)        # Yuan et al.'s world-wide range
    inter_latency_ms_range: tuple = (10.0, 250.0)
    net_seed: int = 0
    datacenter_gbps: float = dist_sim.DATACENTER_GBPS       # reference: one region of 32
    datacenter_latency_ms: float = dist_sim.DATACENTER_LATENCY_MS
    n_random: int = 200               # random layouts
    restarts: int = 5                 # local-search restarts, and genetic-search seeds
    strict_iters: int = 3000          # proposals per strict local search
    sideways_iters: int = 20000       # proposals per sideways local search
    genetic_budget: int = 40000       # evaluations per genetic run: under the 5 x 20000 the sideways restarts use together
    genetic_population: int = 6
    genetic_local_iters: int = 1000
    gpu_peak_flops: float = dist_sim.V100_FP16_PEAK_FLOPS   # V100 fp16 tensor cores
    gpu_utilisation: float = 0.4      # a typical fraction of peak for large-model training
    histogram_bins: int = 16

    @property
    def n_gpus(self):
        return self.n_stages * self.n_replicas

    @property
    def stage_param_bytes(self):
        """One stage's fp16 gradient: what its data-parallel group exchanges."""
        return self.n_params * 2 / self.n_stages

    @property
    def act_bytes(self):
        """fp16 activations one replica sends across one stage cut per iteration."""
        return self.seq_len * self.hidden * 2 * (self.global_batch // self.n_replicas)


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
DEMO2_DEFAULTS = dict(steps=300, topk_ratio=0.01, sgd_lr=0.3, sgd_momentum=0.0, model_seed=0, data_seed=1,
                      seeds=1, jobs=2)
BACKENDS = ("sim", "gloo")       # demo 2's engine: compressed_dp's simulation, or real ranks (gloo_dp.py)
# Flag ranges: wide enough for any real network and job, narrow enough that the
# picosecond arithmetic of dist_sim stays exact (int64) and the searches finish.
GBPS = float_in(1e-2, 1e5)               # 10 Mbit/s .. 100 Tbit/s
LATENCY_MS = float_in(0, 1e4)            # up to 10 s
MAX_GLOBAL_BATCH = 100_000
MAX_SEEDS = 10                   # --seeds: 10 seed pairs x 10 rows = 100 runs, about 8 minutes on 2 cores


# =============================================================================
# Demo 1: scheduling on a heterogeneous network
# =============================================================================

def build_networks(setup):
    """(geo network, data-center reference with the same number of GPUs)."""
    if setup.network == "random":
        geo = dist_sim.make_network(list(setup.region_sizes), intra_gbps=setup.intra_gbps,
                                    inter_gbps_range=setup.inter_gbps_range,
                                    inter_latency_ms_range=setup.inter_latency_ms_range, seed=setup.net_seed)
    else:
        geo = dist_sim.PRESETS[setup.network]()
    n = len(geo["region"])
    dc = dist_sim.make_network([n], intra_gbps=setup.datacenter_gbps,
                               inter_gbps_range=(setup.datacenter_gbps, setup.datacenter_gbps),
                               inter_latency_ms_range=(setup.datacenter_latency_ms, setup.datacenter_latency_ms),
                               seed=0, intra_latency_ms=setup.datacenter_latency_ms)
    return geo, dc


class Progress:
    """Demo 1's search progress, on stderr only (stdout is never touched).

    The rule: progress is written only while demo 1 searches, which is after its network
    table and before its results table, so it never lands between the rows of a table. On
    a terminal it is one status line, rewritten with "\r" and erased (done()) before the
    results print; anywhere else (a pipe, a log file) one line per step.
    """

    def __init__(self, stream=None):
        self.stream = sys.stderr if stream is None else stream
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.shown = 0                  # display width of the status line now on the terminal
        self.started = None             # the clock starts at the first step

    def step(self, text):
        sys.stdout.flush()              # what stdout has printed so far appears first
        if self.started is None:
            self.started = time.perf_counter()
        line = f"  演示 1 搜索中 searching（{time.perf_counter() - self.started:.1f} 秒）：{text}"
        if self.tty:
            width = display_width(line)
            self.stream.write("\r" + line + " " * max(0, self.shown - width))
            self.shown = width
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def done(self):
        if self.tty and self.shown:
            self.stream.write("\r" + " " * self.shown + "\r")
            self.stream.flush()
            self.shown = 0


def multi_start_local_search(cost, setup, n_iters, sideways, on_restart=None):
    """Best of setup.restarts local searches from random layouts; returns (best, costs).

    Restart i shuffles with random.Random(100 + i) and searches with random.Random(200 + i),
    the draft's seeds, so every run of this script gives the same table. on_restart(i), if
    given, is called before restart i (progress).
    """
    runs = []
    for restart in range(setup.restarts):
        if on_restart is not None:
            on_restart(restart)
        start = dist_sim.random_assignment(range(setup.n_gpus), setup.n_stages, setup.n_replicas,
                                           random.Random(100 + restart))
        runs.append(dist_sim.local_search(start, cost, random.Random(200 + restart), n_iters, sideways))
    best = min(runs, key=lambda run: run[1])
    return best, [c for _, c in runs]


def plateau_census(cost, assignment, n_proposals, seed):
    """Try n_proposals random swaps on `assignment` (none applied): how many lower,
    keep or raise the cost? Shows the plateau a strict local search stops on."""
    state = cost.state(assignment)
    rng = random.Random(seed)
    n_slots = len(state.order)
    lower = same = 0
    for _ in range(n_proposals):
        i = rng.randrange(n_slots)
        j = rng.randrange(n_slots - 1)
        total = state.propose(i, j + (j >= i))
        lower += total < state.total
        same += total == state.total
    return lower, same, n_proposals - lower - same


def run_demo1(setup, out=print_wrapped, progress=None):
    """Print demo 1; return its figures (for the observations and the tests). Search
    progress goes to `progress` (a Progress; default: on stderr)."""
    progress = Progress() if progress is None else progress
    geo, dc = build_networks(setup)
    n_gpus = setup.n_gpus
    if len(geo["region"]) != n_gpus:
        raise SystemExit(f"error: the network has {len(geo['region'])} GPUs, the job needs "
                         f"{setup.n_stages} x {setup.n_replicas} = {n_gpus}")
    print_header(f"演示 1：{n_gpus} 张卡、{len(geo['region_sizes'])} 个地区，"
                 f"给 {setup.n_stages} 阶段 × {setup.n_replicas} 副本的训练分配任务（只算通信时间）")
    out(f"模型 {setup.n_params / 1e9:.1f}B 参数，切成 {setup.n_stages} 个流水线阶段（pipeline stages）、"
        f"{setup.n_replicas} 个数据并行副本（data-parallel replicas）；全局 batch {setup.global_batch} 个 "
        f"{setup.seq_len} token 的序列")
    out(f"每个阶段的 fp16 梯度 {setup.stage_param_bytes / 1e9:.3f} GB（数据并行组内交换）；"
        f"每个副本在每个阶段切口每次迭代每个方向传 {setup.act_bytes / 1e9:.3f} GB（前向传激活、反向传激活的梯度）")
    if setup.network == "random":
        out(f"网络：地区内 {setup.intra_gbps:g} Gbit/s、{dist_sim.DATACENTER_LATENCY_MS:g} ms；地区之间每对地区随机抽一个带宽 "
            f"{setup.inter_gbps_range[0]:g}–{setup.inter_gbps_range[1]:g} Gbit/s、延迟 "
            f"{setup.inter_latency_ms_range[0]:g}–{setup.inter_latency_ms_range[1]:g} ms（种子 {setup.net_seed}；"
            f"仿照 Yuan et al. 2022 的全球分布设置）")
    else:
        out(f"网络：{setup.network}，Yuan et al. 2022 在 AWS 上实测的链路（{len(geo['region_sizes'])} 个地点，"
            f"地点内 {dist_sim.GEO_INTRA_GBPS:g} Gbit/s、{dist_sim.GEO_INTRA_LATENCY_MS:g} ms）")
    out(f"对照：同一个数据中心（data center），{n_gpus} 张卡之间都是 {setup.datacenter_gbps:g} Gbit/s、"
        f"{setup.datacenter_latency_ms:g} ms")
    names = geo.get("region_names") or [f"R{k}" for k in range(len(geo["region_sizes"]))]
    bw, lat = geo["region_bandwidth_bps"], geo["region_latency_s"]
    out("地区之间的链路（带宽 Gbit/s / 延迟 ms；对角线是地区内）：")
    print_table(["地区 region"] + list(names),
                [(a,) + tuple(f"{bw[i][j] / 1e9:.2f} / {lat[i][j] * 1e3:.1f}" for j in range(len(names)))
                 for i, a in enumerate(names)])
    out("")

    cost = dist_sim.LayoutCost(geo, setup.n_stages, setup.n_replicas, setup.stage_param_bytes, setup.act_bytes)
    dc_cost = dist_sim.LayoutCost(dc, setup.n_stages, setup.n_replicas, setup.stage_param_bytes,
                                  setup.act_bytes)(dist_sim.assignment_from_order(list(range(n_gpus)),
                                                                                  setup.n_replicas))
    t0 = time.perf_counter()
    hand = {}
    for name, label, make in (("pipelines_in_regions", "按地区放流水线", dist_sim.pipelines_in_regions),
                              ("dp_groups_in_regions", "按地区放数据并行组", dist_sim.dp_groups_in_regions)):
        try:
            layout = make(geo, setup.n_stages, setup.n_replicas)
            hand[name] = (layout, cost(layout))
        except ValueError as why:        # e.g. 8 cities of 4 GPUs cannot hold a DP group of 8
            hand[name] = (None, None)
            out(f"（{label}在这个网络上放不下 does not fit: {why}）")

    # From here to the results table nothing goes to stdout: the progress window (Progress).
    progress.step(f"随机分配 random layouts × {setup.n_random}")
    rng = random.Random(0)
    randoms = [dist_sim.random_assignment(range(n_gpus), setup.n_stages, setup.n_replicas, rng)
               for _ in range(setup.n_random)]
    random_costs = [cost(a) for a in randoms]
    random_stats = [dist_sim.layout_stats(a, geo, setup.n_stages, setup.n_replicas) for a in randoms]

    def restart_step(kind):
        return lambda i: progress.step(f"{kind}，重启 restart {i + 1}/{setup.restarts}")

    (strict_best, strict_runs) = multi_start_local_search(cost, setup, setup.strict_iters, sideways=False,
                                                          on_restart=restart_step("严格局部搜索 strict"))
    (side_best, side_runs) = multi_start_local_search(cost, setup, setup.sideways_iters, sideways=True,
                                                      on_restart=restart_step("持平局部搜索 sideways"))
    genetic = []
    for seed in range(setup.restarts):
        progress.step(f"遗传算法 genetic，种子 seed {seed + 1}/{setup.restarts}")
        genetic.append(dist_sim.genetic_search(cost, seed=seed, population=setup.genetic_population,
                                               max_evaluations=setup.genetic_budget,
                                               local_iters=setup.genetic_local_iters))
    genetic_best = min(genetic, key=lambda g: g.cost)
    progress.step("最优分配 optimum，分支定界 branch and bound")
    optimum = dist_sim.optimal_layout(geo, setup.n_stages, setup.n_replicas, setup.stage_param_bytes,
                                      setup.act_bytes)
    progress.done()
    search_s = time.perf_counter() - t0

    opt_label = "最优（已证明）proven optimum" if optimum.exact else "下界 lower bound"
    gap_header = "离最优 gap" if optimum.exact else "高出下界"

    def gap(c):
        return f"+{(c / optimum.cost - 1) * 100:.1f}%" if c is not None else "—"

    def fmt(c):
        return f"{c:.2f} 秒" if c is not None else "放不下"

    def ratio(c):
        return f"{c / dc_cost:.1f}" if c is not None else "—"

    rows = [(f"随机分配（{setup.n_random} 次的平均）", float(np.mean(random_costs))),
            (f"随机分配（{setup.n_random} 次里最好的）", min(random_costs)),
            ("按地区放流水线（数据并行跨地区）", hand["pipelines_in_regions"][1]),
            ("按地区放数据并行组（流水线跨地区）", hand["dp_groups_in_regions"][1]),
            (f"局部搜索，严格下降（{setup.restarts} 次里最好的）", strict_best[1]),
            (f"局部搜索，允许持平（{setup.restarts} 次里最好的）", side_best[1]),
            (f"遗传算法 genetic（{setup.restarts} 个种子里最好的，各 {setup.genetic_budget // 1000}k 次）", genetic_best.cost)]
    table = [(name, fmt(c), ratio(c), gap(c)) for name, c in rows]
    table.append((opt_label, fmt(optimum.cost), ratio(optimum.cost), "0" if optimum.exact else "—"))
    table.append((f"对照：同一个数据中心（{setup.datacenter_gbps:g} Gbit/s）", fmt(dc_cost), "1.0", ""))
    print_table(["分配方式 layout", "每次迭代的通信时间", "÷ 数据中心", gap_header], table)

    out("\n每次重启 / 每个种子各自的结果（秒）：")
    out(f"  局部搜索，严格下降（各 {setup.strict_iters} 次提议）："
        + "、".join(f"{c:.2f}" for c in strict_runs))
    out(f"  局部搜索，允许持平（各 {setup.sideways_iters} 次提议）："
        + "、".join(f"{c:.2f}" for c in side_runs))
    out(f"  遗传算法（各 {setup.genetic_budget} 次代价计算，种群 {setup.genetic_population}）："
        + "、".join(f"{g.cost:.2f}" for g in genetic))
    if optimum.exact:
        out(f"  最优分配：分支定界（branch and bound）检查了 {optimum.rows_priced:,} 个候选行，证明没有更好的分配")
    else:
        out(f"  这个网络不是'地区内均匀'的，给出的是下界：{optimum.note}")

    # Layout anatomy: what the good layouts keep inside a region.
    candidates = [("按地区放流水线", hand["pipelines_in_regions"][0]),
                  ("按地区放数据并行组", hand["dp_groups_in_regions"][0]),
                  ("局部搜索（允许持平）最好的", side_best[0]),
                  ("遗传算法最好的", genetic_best.assignment),
                  ("最优" if optimum.exact else "下界对应的分配", optimum.assignment)]
    anatomy = []
    details = {}
    for name, layout in candidates:
        if layout is None:
            continue
        b = cost.breakdown(layout)
        st = dist_sim.layout_stats(layout, geo, setup.n_stages, setup.n_replicas)
        details[name] = (b, st)
        anatomy.append((name, f"{b['dp']:.2f}", f"{b['pp']:.2f}", f"{b['total']:.2f}",
                        f"{st['pipeline_links_within_region']}/{st['pipeline_links']}",
                        f"{st['dp_groups_within_region']}/{st['dp_groups']}"))
    out("\n这些分配把什么留在了地区内？（数据并行 dp、流水线 pp 各占多少秒）")
    print_table(["分配 layout", "dp 秒", "pp 秒", "合计", "地区内的流水线边", "整组在一个地区的 DP 组"], anatomy)
    region_names = geo.get("region_names") or [f"地区{k}" for k in range(len(geo["region_sizes"]))]
    out(("最优" if optimum.exact else "下界") + "分配的计数矩阵（每个阶段在每个地区放几个副本）：")
    print_table(["阶段 stage"] + [str(n) for n in region_names],
                [(f"阶段 {s}",) + tuple(str(n) for n in row) for s, row in enumerate(optimum.counts)])

    markers = [("手工：流水线在地区内", hand["pipelines_in_regions"][1]),
               ("手工：DP 组在地区内", hand["dp_groups_in_regions"][1]),
               ("严格局部搜索", strict_best[1]), ("持平局部搜索", side_best[1]),
               ("遗传算法", genetic_best.cost), ("最优" if optimum.exact else "下界", optimum.cost)]
    markers = [(label, c) for label, c in markers if c is not None]
    out(f"\n{setup.n_random} 个随机分配的通信时间分布（秒），各方法的结果标在旁边：")
    for line in histogram_lines(random_costs, n_bins=setup.histogram_bins, markers=markers, width=30,
                                value_format="{:.1f}"):
        out("  " + line)

    flops = 6 * setup.n_params * setup.seq_len * setup.global_batch
    compute_s = flops / (n_gpus * setup.gpu_peak_flops * setup.gpu_utilisation)
    best_heuristic = min(c for _, c in rows if c is not None)
    out(f"\n加上计算：每次迭代 6 × 参数 × token = {flops:.2e} FLOPs，{n_gpus} 张 V100 按 fp16 峰值 "
        f"{setup.gpu_peak_flops / 1e12:.0f} TFLOP/s 的 {setup.gpu_utilisation:.0%} 算 → {compute_s:.1f} 秒（计算和通信不重叠）")
    slow = {
        "dc": compute_s + dc_cost,
        "optimum": compute_s + optimum.cost,
        "best": compute_s + best_heuristic,
        "random": compute_s + float(np.mean(random_costs)),
    }
    print_table(["", "计算 + 通信（秒）", "÷ 数据中心"],
                [("数据中心 data center", f"{slow['dc']:.1f}", "1.0"),
                 ("地理分布，" + ("最优分配" if optimum.exact else "下界"), f"{slow['optimum']:.1f}",
                  f"{slow['optimum'] / slow['dc']:.2f}"),
                 ("地理分布，启发式里最好的", f"{slow['best']:.1f}", f"{slow['best'] / slow['dc']:.2f}"),
                 ("地理分布，随机分配（平均）", f"{slow['random']:.1f}", f"{slow['random'] / slow['dc']:.2f}")])
    print(f"（演示 1 的搜索用时 {search_s:.1f} 秒）", file=sys.stderr)

    return {
        "geo": geo, "cost": cost, "dc_cost": dc_cost, "random_costs": random_costs, "random_stats": random_stats,
        "hand": {k: v[1] for k, v in hand.items()}, "strict_best": strict_best, "strict_runs": strict_runs,
        "side_best": side_best, "side_runs": side_runs, "genetic": genetic, "genetic_best": genetic_best,
        "optimum": optimum, "details": details, "compute_s": compute_s, "slow": slow, "rows": rows,
    }


def demo1_observations(setup, r, out=print_wrapped):
    """Observations whose every number and comparison comes from this run's figures."""
    hand_pp, hand_dp = r["hand"]["pipelines_in_regions"], r["hand"]["dp_groups_in_regions"]
    mean_random = float(np.mean(r["random_costs"]))
    cross_links = statistics.mean(1 - s["pipeline_links_within_region"] / s["pipeline_links"] for s in r["random_stats"])
    cross_groups = statistics.mean(1 - s["dp_groups_within_region"] / s["dp_groups"] for s in r["random_stats"])
    opt = r["optimum"]
    out("\n观察 Observations（演示 1）：")
    out(f" 1. 随机分配平均 {mean_random:.2f} 秒：平均 {cross_links:.0%} 的流水线边、{cross_groups:.0%} 的数据并行组跨了地区，"
        f"每一步都被最慢的跨地区链路拖住（代价取的是最慢的那一组 / 那一条边）。")
    if hand_pp is not None and hand_dp is not None:
        winner, loser = ("流水线", "数据并行") if hand_pp < hand_dp else ("数据并行组", "流水线")
        act_total_gb = setup.act_bytes * 2 * (setup.n_stages - 1) / 1e9
        grad_gb = setup.stage_param_bytes / 1e9
        spread = max(hand_pp, hand_dp) / min(hand_pp, hand_dp)
        how_far = "差很多" if spread >= 1.5 else ("差一些" if spread >= 1.1 else "差不多")
        which = ("两种一样快。" if hand_pp == hand_dp else f"把{winner}留在地区内、让{loser}跨地区更好。")
        out(f" 2. 两种手工分配{how_far}：{hand_pp:.2f} 秒（流水线在地区内）对 {hand_dp:.2f} 秒（数据并行组在地区内）。"
            + which + optimum_versus_hand(setup, r))
        out(f"    流水线每个副本每次迭代要穿过 {setup.n_stages - 1} 个切口、每个切口前向反向各传 {setup.act_bytes / 1e9:.2f} GB"
            f"（一条流水线共 {act_total_gb:.1f} GB，串行相加）；数据并行每个阶段交换 {grad_gb:.2f} GB 梯度，"
            f"但分给 {setup.n_replicas} 个副本各传一份（{grad_gb / setup.n_replicas:.3f} GB）并且各阶段同时进行（取最大）。")
        out("    哪种通信更重取决于 batch、模型大小和切法——所以要用代价模型去算，而不是凭直觉。")
    elif hand_pp is not None or hand_dp is not None:
        only, missing = (("流水线在地区内", "整个数据并行组") if hand_pp is not None else ("数据并行组在地区内", "整条流水线"))
        c = hand_pp if hand_pp is not None else hand_dp
        if opt.exact:
            verdict = ("它就是最优的。" if _reaches(c, opt.cost) else
                       f"它比最优的 {opt.cost:.2f} 秒慢 {(c / opt.cost - 1) * 100:.1f}%。")
        else:
            verdict = f"它比下界 {opt.cost:.2f} 秒高 {(c / opt.cost - 1) * 100:.1f}%。"
        out(f" 2. 这个网络的地区放不下{missing}，只能比较'{only}'这一种手工分配：{c:.2f} 秒；{verdict}")
    else:
        out(" 2. 这个网络的地区既放不下整条流水线，也放不下整个数据并行组：两种手工分配都用不上。")
    strict_beats = sum(c <= min(x for x in (hand_pp, hand_dp) if x is not None) for c in r["strict_runs"]) \
        if hand_pp is not None or hand_dp is not None else 0
    side_beats = sum(c <= min(x for x in (hand_pp, hand_dp) if x is not None) for c in r["side_runs"]) \
        if hand_pp is not None or hand_dp is not None else 0
    lower, same, higher = plateau_census(r["cost"], r["strict_best"][0], 2000, seed=7)
    out(f" 3. 局部搜索不知道'地区'，只会交换两张卡。严格下降的 {setup.restarts} 次重启停在 "
        f"{min(r['strict_runs']):.2f}–{max(r['strict_runs']):.2f} 秒；"
        f"在它最好的那个分配上随机试 2000 个交换：{lower} 个更好，{same} 个代价完全不变，{higher} 个更差。")
    out(("    代价是'最慢的组 + 最慢的边'，大多数交换碰不到最慢的那一个，于是代价纹丝不动——搜索停在平台（plateau）上。"
         if lower == 0 else
         f"    还有 {lower} 个交换能降低代价：这次严格局部搜索是提议次数用完了，并没有真正停住；"
         "但代价不变的交换很多，搜索走得很慢。")
        + f"允许持平（代价不变也接受）后，{setup.restarts} 次重启里有 {side_beats} 次不差于最好的手工分配"
        f"（严格下降：{strict_beats} 次）；最好的一次 {r['side_best'][1]:.2f} 秒。")
    ga = r["genetic"]
    hand_best = min((x for x in (hand_pp, hand_dp) if x is not None), default=None)
    ga_beats = sum(g.cost <= hand_best for g in ga) if hand_best is not None else 0
    out(f" 4. 遗传算法（Yuan et al. 2022 的调度器，仿 Kang & Moon 2000：整组交叉 + 局部搜索）每个种子只用 "
        f"{setup.genetic_budget:,} 次代价计算（持平局部搜索 {setup.restarts} 次重启一共 {setup.restarts * setup.sideways_iters:,} 次），"
        f"{len(ga)} 个种子里有 {ga_beats} 个不差于最好的手工分配，最差的一个 {max(g.cost for g in ga):.2f} 秒。")
    if opt.exact:
        best_h = min(c for _, c in r["rows"] if c is not None)
        reached = [name for name, c in r["rows"] if c is not None and c <= opt.cost * (1 + 1e-12)]
        out(f" 5. 最优分配 {opt.cost:.2f} 秒是证明过的：没有任何分配能更快。同一地区里的卡可以互换，分配只取决于"
            f"'每个阶段在每个地区放几个'和相邻阶段怎么配对，这个空间小到可以穷举（讲义 7.4 节）。"
            + (f"这次达到最优的：{'、'.join(reached)}。" if reached else
               f"启发式里最好的 {best_h:.2f} 秒，离最优还差 {(best_h / opt.cost - 1) * 100:.1f}%。"))
    else:
        out(f" 5. 这个网络不是地区内均匀的，{opt.cost:.2f} 秒只是下界：{opt.note}。")
    slow = r["slow"]
    comm_ratio = (opt.cost if opt.exact else min(c for _, c in r["rows"] if c is not None)) / r["dc_cost"]
    geo_total = slow["optimum" if opt.exact else "best"]

    def slower(x, digits):
        return f"慢 {x:.{digits}f} 倍" if x >= 1 else f"反而快（用时是数据中心的 {x:.{digits}f} 倍）"

    out(f" 6. 只看通信，地理分布的{'最优' if opt.exact else '最好'}分配比数据中心{slower(comm_ratio, 1)}；"
        f"加上每次迭代 {r['compute_s']:.1f} 秒的计算（不和通信重叠）后，{slower(geo_total / slow['dc'], 2)}"
        f"（随机分配{slower(slow['random'] / slow['dc'], 2)}）。")
    random_over_best = slow["random"] / geo_total
    paper = ("比论文大得多：我们的随机基线完全不看网络，而每一条跨地区的边都很慢。" if random_over_best >= 2 * 2.7 else
             "比论文大：我们的随机基线完全不看网络。" if random_over_best > 2.7 else
             "没有超过论文的 2.7 倍：这个网络上随机分配吃的亏没那么大。")
    out(f"    Yuan et al. 2022 报告：去中心化训练只比数据中心慢 1.7–3.5 倍，调度器比随机分配最多快 2.7 倍。"
        f"这里随机分配的端到端时间是{'最优' if opt.exact else '最好'}分配的 {random_over_best:.1f} 倍，" + paper)


def _reaches(c, optimum_cost):
    """Whether a layout's cost equals the optimum (up to float rounding)."""
    return c is not None and c <= optimum_cost * (1 + 1e-12)


def optimum_versus_hand(setup, r):
    """Observation 2's last sentence: is the proven optimum one of the two hand layouts, and if
    not, what does it keep inside a region (its layout statistics) and which hand layout is
    it like? Empty when the cheaper hand layout is optimal (observation 5 names it then)."""
    hand_pp, hand_dp = r["hand"]["pipelines_in_regions"], r["hand"]["dp_groups_in_regions"]
    opt = r["optimum"]
    if not opt.exact:
        return f"{opt.cost:.2f} 秒只是下界，说不出最优分配是不是其中之一。"
    if _reaches(min(hand_pp, hand_dp), opt.cost):
        return ""
    st = dist_sim.layout_stats(opt.assignment, r["geo"], setup.n_stages, setup.n_replicas)
    links_in, links = st["pipeline_links_within_region"], st["pipeline_links"]
    groups_in, groups = st["dp_groups_within_region"], st["dp_groups"]
    text = (f"但两种都不是最优：最优分配 {opt.cost:.2f} 秒，{links_in}/{links} 条流水线边在地区内、"
            f"{groups_in}/{groups} 个数据并行组整组在一个地区")
    b = r["cost"].breakdown(opt.assignment)
    if groups_in == groups and links_in < links:
        like, like_cost, kept = "按地区放数据并行组", hand_dp, "数据并行组"
        hand_b = r["details"]["按地区放数据并行组"][0]
    elif links_in == links and groups_in < groups:
        like, like_cost, kept = "按地区放流水线", hand_pp, "流水线"
        hand_b = r["details"]["按地区放流水线"][0]
    else:
        return text + "，两种手工分配的做法它都不完全是。"
    text += (f"——和'{like}'一样把{kept}留在地区内，只是阶段和地区的搭配不同"
             f"（dp {hand_b['dp']:.2f} → {b['dp']:.2f} 秒，pp {hand_b['pp']:.2f} → {b['pp']:.2f} 秒）")
    if like_cost > min(hand_pp, hand_dp):
        text += "：只比较两种手工分配，会选错把什么留在地区内"
    return text + "。"


# =============================================================================
# Demo 2: gradient compression in data-parallel training
# =============================================================================

# TABLE_A (AdamW) and TABLE_B (SGD), the rows of demo 2, are built by _heavy() (they are
# compressed_dp.Run values).

WORDS = {"same": "和不压缩差不多", "worse": "比不压缩差", "better": "比不压缩好", "unclear": "好坏说不清"}


def seed_list(setup):
    return [setup.seeds.shifted(k) for k in range(setup.n_seeds)]


def training_jobs(setup):
    """(run, seeds, train setup) for every row and seed, row by row: the print order."""
    _heavy()
    return [(run, seeds, setup.train) for run in TABLE_A + TABLE_B for seeds in seed_list(setup)]


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


def _delta_cell(deltas, n_seeds):
    _heavy()
    finite = [d for d in deltas if math.isfinite(d)]
    if len(finite) < len(deltas):
        return "—"
    if n_seeds == 1:
        return _signed(finite[0])
    d = Spread.of(finite)
    return f"{_signed(d.mean)}（{_signed(d.low)}..{_signed(d.high)}）"


@dataclass(frozen=True)
class RowSummary:
    run: "Run"
    results: tuple          # RunResult per seed
    deltas: tuple           # paired Δ per seed against the same optimizer's uncompressed run
    bpc: "Spread"

    @property
    def verdict(self):
        _heavy()
        return compressed_dp.verdict(self.deltas)


def print_demo2(setup, results_iter, started, out=print_wrapped):
    """Print both tables row by row as results arrive; return {Run.key: RowSummary}."""
    _heavy()
    n_seeds = setup.n_seeds
    seeds = seed_list(setup)
    t = setup.train
    print_header(f"演示 2：梯度压缩（{t.n_workers} 个工作者的数据并行，从随机初始化训练 {t.steps} 步，"
                 f"batch {t.recipe.batch_size} = {t.n_workers} × {t.recipe.batch_size // t.n_workers}）")
    out(f"模型：第 1 讲的 BASE_CONFIG（{tiny_gpt.make_model(t.model, 0).n_params():,} 个参数）；"
        f"每步每个工作者发送一个梯度向量；top-k 保留 {t.topk_ratio:.1%}")
    out(f"前向精度 forward precision：{t.precision}（{precision_reason(setup.precision_choice, t.precision)}）；"
        f"验证集 bits/字符越低越好")
    seed_text = "、".join(f"({s.model}, {s.data})" for s in seeds)
    out(f"种子 seeds（模型 model, 数据 data）：{seed_text}。Δ = 这一行 − 同一优化器、同样种子的不压缩那一行"
        "（配对差 paired difference）" + ("" if n_seeds == 1 else "；括号里是各种子的最小–最大"))
    widths = (30, 9, 8, 25 if n_seeds > 1 else 12, 27 if n_seeds > 1 else 12)
    header = (pad("压缩方式", widths[0]) + pad("字节/数", widths[1], ">") + pad("÷ fp32", widths[2], ">")
              + pad("bits/字符", widths[3], ">") + pad("Δ", widths[4], ">"))
    summaries = {}
    for title, runs in ((f"(a) AdamW（lr {t.recipe.peak_lr:g}）+ 聚合后全局裁剪到 {t.recipe.clip_norm:g}（第 1 讲的训练配方）", TABLE_A),
                        (f"(b) {sgd_name(t)}，不裁剪（误差反馈的经典设定）", TABLE_B)):
        out(f"\n{title}")
        out(header)
        out("-" * sum(widths))
        for run in runs:
            results = tuple(next(results_iter) for _ in seeds)
            baseline = summaries.get(run.baseline_key)
            base_results = results if baseline is None else baseline.results
            deltas = tuple(compressed_dp.paired_deltas(results, base_results))
            row = RowSummary(run, results, deltas, Spread.of(r.bpc for r in results))
            summaries[run.key] = row
            bytes_per_element = results[0].bytes_per_element
            out(pad(run.label, widths[0]) + pad(f"{bytes_per_element:.3f}", widths[1], ">")
                + pad(f"{bytes_per_element / 4:.4f}", widths[2], ">")
                + pad(_bpc_cell(row.bpc, n_seeds), widths[3], ">")
                + pad("—" if baseline is None else _delta_cell(deltas, n_seeds), widths[4], ">"))
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
    _heavy()
    t = setup.train
    tol = compressed_dp.DELTA_TOLERANCE_BPC
    n_seeds = setup.n_seeds
    every = "" if n_seeds == 1 else f"（{n_seeds} 个种子都如此才算）"

    def row(optimizer, scheme, ef=False):
        return rows[(optimizer, scheme, ef)]

    def bpc(r):
        return "发散（loss 变成 NaN）" if r.bpc.n == 0 else f"{r.bpc.mean:.4f}"

    def delta(r):
        return "—" if not all(math.isfinite(d) for d in r.deltas) else _signed(statistics.fmean(r.deltas))

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

    def gain_words(g):
        v = compressed_dp.verdict([-x for x in g])     # verdict calls a positive difference "worse"
        words = {"better": "有帮助", "worse": "反而有害", "same": "几乎没有影响", "unclear": "说不清有没有帮助"}[v]
        if any(math.isinf(x) for x in g):
            return words + ("（没有它就发散）" if all(x > 0 for x in g) else "（有一边发散）")
        mean = statistics.fmean(g)
        spread = "" if len(g) == 1 else f"，各种子 {_signed(min(g))}..{_signed(max(g))}"
        return f"{words}（{'好了' if mean >= 0 else '差了'} {abs(mean):.4f}{spread}）"

    base, base_sgd = row("adamw", "none"), row("sgd", "none")
    fp16, int8 = row("adamw", "fp16"), row("adamw", "int8")
    topk, topk_ef = row("adamw", "topk"), row("adamw", "topk", True)
    sign, sign_ef = row("adamw", "sign"), row("adamw", "sign", True)
    topk_sgd, topk_sgd_ef = row("sgd", "topk"), row("sgd", "topk", True)
    out("\n观察 Observations（演示 2）：")
    if n_seeds == 1:
        noise = "bits/字符本身随种子和 CPU 变（讲义 7.7 节；--seeds 3 量一量）"
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
    out(f" 2. top-{t.topk_ratio:.0%}：每步每个工作者只发 {t.topk_ratio:.0%} 的分量，{t.steps} 步里每个分量平均只被发出 "
        f"{sends:g} 次。AdamW：没有误差反馈 {bpc(topk)}、有误差反馈 {bpc(topk_ef)}（不压缩 {bpc(base)}）；"
        f"{sgd_name(t)}：没有误差反馈 {bpc(topk_sgd)}、有误差反馈 {bpc(topk_sgd_ef)}（不压缩 {bpc(base_sgd)}）。")
    gain_adam, gain_sgd = gains(topk, topk_ef), gains(topk_sgd, topk_sgd_ef)
    sgd_minus_adam = [s - a for s, a in zip(gain_sgd, gain_adam)]
    more = compressed_dp.verdict([-x for x in sgd_minus_adam])
    comparison = {"better": "误差反馈对 SGD 帮助更大", "worse": "误差反馈对 AdamW 帮助更大",
                  "same": "误差反馈对两种优化器的作用差不多", "unclear": "说不清误差反馈对哪种优化器帮助更大"}[more]
    diverged_note = ("没有误差反馈的 SGD 这次发散了，" if topk_sgd.bpc.n == 0 else
                     ("没有误差反馈的 SGD 在部分种子上发散了，" if topk_sgd.bpc.n < topk_sgd.bpc.n_total else ""))
    out(f"    误差反馈：对 AdamW {gain_words(gain_adam)}，对 SGD {gain_words(gain_sgd)}。"
        f"{diverged_note}{comparison}{every}。")
    out(f" 3. 只发符号（每个分量 1 bit）：AdamW 下没有误差反馈 {bpc(sign)}（{WORDS[sign.verdict]}，Δ {delta(sign)}），"
        f"有误差反馈 {bpc(sign_ef)}；误差反馈在这里{gain_words(gains(sign, sign_ef))}。")
    out("    Adam 的更新本来就按每个分量的大小归一化，方向主要由符号决定，所以只发符号丢的信息不多；"
        f"误差反馈累积的残差则要先经过聚合后的全局裁剪（把范数压到 {t.recipe.clip_norm:g}）和 Adam 的归一化，"
        "不再是'晚一点发出去'那么简单。")
    out(" 4. 这正是 1-bit Adam（Tang et al. 2021）的出发点：误差反馈对 SGD 这类线性的优化器有效，"
        "对 Adam 这种非线性的优化器不能直接用。他们先用普通 Adam 热身，等方差项稳定后冻结它，再对动量做 1 bit 压缩"
        "（工作者和服务器两边都有误差反馈）：通信量最多少到 1/5，BERT-Large 预训练吞吐最多提高到 3.3 倍。")
    out(" 结论：压缩会和优化器、梯度裁剪互相影响，不能单独设计；这个几百步的玩具实验展示机制，不能决定哪种方法更好。")


# =============================================================================
# Command line
# =============================================================================

def parse_args(argv=None):
    s, d = ScheduleSetup(), DEMO2_DEFAULTS
    p = argparse.ArgumentParser(
        description="第 9 讲代码 5：去中心化训练 (lecture 9 code 5: decentralized training)",
        epilog="例 example: --demo 1 --network aws-world；--demo 2 --topk-ratio 0.05")
    p.add_argument("--demo", choices=("1", "2", "all"), default="all", help="跑哪个演示 (default all)")
    p.add_argument("--quick", action="store_true", help="很小的设置，几秒钟跑完（冒烟测试 smoke test）")
    g1 = p.add_argument_group("演示 1 demo 1")
    g1.add_argument("--net-seed", type=non_negative_int, default=s.net_seed,
                    help="随机网络的种子 seed of the random network (default %(default)s)")
    g1.add_argument("--network", choices=("random",) + tuple(dist_sim.PRESETS), default=s.network,
                    help="random: 随机抽的 4 地区网络；aws-world / aws-regional: Yuan et al. 实测的 AWS 链路")
    g1.add_argument("--intra-gbps", type=GBPS, default=s.intra_gbps, help="地区内带宽 Gbit/s (default %(default)s)")
    g1.add_argument("--inter-gbps", type=GBPS, nargs=2, metavar=("LO", "HI"), default=s.inter_gbps_range,
                    help="地区之间带宽范围 Gbit/s (default 0.3 1.3)")
    g1.add_argument("--inter-latency-ms", type=LATENCY_MS, nargs=2, metavar=("LO", "HI"),
                    default=s.inter_latency_ms_range, help="地区之间延迟范围 ms (default 10 250)")
    g1.add_argument("--global-batch", type=int_in(1, MAX_GLOBAL_BATCH), default=s.global_batch,
                    help="全局 batch（序列数），决定激活流量 (default %(default)s)")
    g1.add_argument("--random-layouts", type=positive_int, default=s.n_random, help="随机分配的个数 (default 200)")
    g1.add_argument("--restarts", type=positive_int, default=s.restarts,
                    help="局部搜索重启次数，也是遗传算法的种子数 (default 5)")
    g1.add_argument("--strict-iters", type=non_negative_int, default=s.strict_iters, help="严格局部搜索每次的提议数 (default 3000)")
    g1.add_argument("--sideways-iters", type=non_negative_int, default=s.sideways_iters, help="持平局部搜索每次的提议数 (default 20000)")
    g1.add_argument("--genetic-budget", type=positive_int, default=s.genetic_budget,
                    help="遗传算法每个种子的代价计算次数 (default 40000)")
    g2 = p.add_argument_group("演示 2 demo 2")
    g2.add_argument("--steps", type=positive_int, default=d["steps"], help="训练步数 (default %(default)s)")
    g2.add_argument("--topk-ratio", type=ratio, default=d["topk_ratio"], help="top-k 保留的比例 (default %(default)s)")
    g2.add_argument("--sgd-lr", type=positive_float, default=d["sgd_lr"],
                    help="表 (b) SGD 的学习率 SGD learning rate (default %(default)s)")
    g2.add_argument("--sgd-momentum", type=float_in(0, 1, high_open=True), default=d["sgd_momentum"],
                    help="表 (b) SGD 的动量 momentum, 0 = 普通 SGD (default %(default)s)")
    g2.add_argument("--model-seed", type=non_negative_int, default=d["model_seed"],
                    help="模型初始化的种子 model init seed (default %(default)s)")
    g2.add_argument("--data-seed", type=non_negative_int, default=d["data_seed"],
                    help="数据顺序的种子 data order seed (default %(default)s)")
    g2.add_argument("--seeds", type=int_in(1, MAX_SEEDS), default=d["seeds"],
                    help="每行训练几组种子，打印平均和范围；第 k 组 = (模型+k, 数据+k) "
                         "(seed pairs per row, default %(default)s)")
    g2.add_argument("--jobs", type=positive_int, default=d["jobs"], help="同时训练的进程数 (default %(default)s)")
    g2.add_argument("--backend", choices=BACKENDS, default=BACKENDS[0],
                    help="sim: 在一个进程里模拟工作者；gloo: 每个工作者一个真的 torch.distributed 进程（DDP + 通信钩子，"
                         "慢得多，--jobs 不再起作用）(default %(default)s)")
    add_precision_arguments(g2)
    args = p.parse_args(argv)
    for name in ("inter_gbps", "inter_latency_ms"):
        lo, hi = getattr(args, name)
        if lo > hi:
            p.error(f"--{name.replace('_', '-')}: LO ({lo:g}) 大于 HI ({hi:g})")
    schedule = replace(s, network=args.network, intra_gbps=args.intra_gbps, inter_gbps_range=tuple(args.inter_gbps),
                       inter_latency_ms_range=tuple(args.inter_latency_ms), net_seed=args.net_seed,
                       global_batch=args.global_batch, n_random=args.random_layouts, restarts=args.restarts,
                       strict_iters=args.strict_iters, sideways_iters=args.sideways_iters,
                       genetic_budget=args.genetic_budget)
    if args.quick:
        schedule = replace(schedule, **QUICK_SCHEDULE)
    if schedule.global_batch < schedule.n_replicas:
        p.error(f"--global-batch 不能小于副本数 {schedule.n_replicas} "
                f"(must be at least the {schedule.n_replicas} replicas)")
    least_budget = schedule.genetic_population * (schedule.genetic_local_iters + 1)
    if schedule.genetic_budget < least_budget:
        p.error(f"--genetic-budget 至少要 {least_budget} (must be at least {least_budget})")
    note = unused_flags_note(args, given_flags(p, argv), {a.dest for a in g1._group_actions},
                             {a.dest for a in g2._group_actions})
    if note:
        print(note, file=sys.stderr)
    # Only now the torch-backed modules: every flag error above came without waiting for them.
    _heavy()
    t = TrainSetup()
    train = replace(t.with_steps(QUICK_STEPS if args.quick else args.steps), topk_ratio=args.topk_ratio,
                    sgd_lr=args.sgd_lr, sgd_momentum=args.sgd_momentum,
                    precision=precision_from_args(args), backend=args.backend)
    compression = CompressionSetup(train=train, seeds=Seeds(args.model_seed, args.data_seed), n_seeds=args.seeds,
                                   precision_choice="fp32" if args.fp32 else args.precision, jobs=args.jobs)
    return args, schedule, compression


def given_flags(parser, argv):
    """The dests of the flags actually on the command line, whatever their values: the
    same (already valid) command line parsed once more with every default suppressed."""
    saved = [(action, action.default) for action in parser._actions]
    try:
        for action, _ in saved:
            action.default = argparse.SUPPRESS
        return set(vars(parser.parse_args(argv)))
    finally:
        for action, default in saved:
            action.default = default


def unused_flags_note(args, given, demo1_dests, demo2_dests):
    """One stderr line naming the given flags this run does not use (None if there are none):
    those of the demo that does not run, and those --quick replaces with its own values.
    The rule everywhere: run anyway, and say so (never refuse)."""
    def names(dests):
        return " ".join("--" + dest.replace("_", "-") for dest in sorted(dests))

    ignored = (demo2_dests if args.demo == "1" else demo1_dests if args.demo == "2" else set()) & given
    overridden = (set(QUICK_OVERRIDES) & given) - ignored if args.quick else set()
    parts = []
    if ignored:
        parts.append(f"--demo {args.demo} 只跑演示 {args.demo}，忽略 {names(ignored)} (ignored)")
    if overridden:
        parts.append(f"--quick 用自己的小设置，覆盖 {names(overridden)} (overridden by --quick)")
    return "注意 note: " + "；".join(parts) if parts else None


def main(argv=None):
    args, schedule, compression = parse_args(argv)
    tiny_gpt.use_deterministic_threads()
    started = time.perf_counter()
    results = {}
    pool = results_iter = None
    if args.demo in ("2", "all"):
        # Training starts first, in worker processes, so it overlaps demo 1's search.
        pool, results_iter = compressed_dp.start_training(training_jobs(compression), compression.jobs)
    try:
        if args.demo in ("1", "all"):
            results["demo1"] = run_demo1(schedule)
            demo1_observations(schedule, results["demo1"])
            print()
        if args.demo in ("2", "all"):
            rows = print_demo2(compression, results_iter, started)
            demo2_observations(compression, rows)
            results["demo2"] = rows
    finally:
        if pool is not None:
            pool.terminate()
    print(f"（总用时 total {time.perf_counter() - started:.1f} 秒）", file=sys.stderr)
    return results


if __name__ == "__main__":
    run_main(main)
