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
需要 (needs): numpy、torch；本目录的 dist_sim.py（及其各部分 network_figures、geo_network、layout_cost、
hand_layouts、layout_search、layout_optimum）、schedule_setup.py、schedule_study.py、compression.py、compressed_dp.py；code/lecture01 的
fm_world.py、tiny_gpt.py、console.py、cli_args.py。从随机初始化开始训练，不读也不写第 1 讲的缓存。
"""

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass, field, replace

try:
    import lecture01  # noqa: F401  the course toolkit, installed by `pip install -r requirements.txt`
except ModuleNotFoundError:
    import _course_path  # noqa: F401  a clone without that install (see that file)

from lecture09 import dist_sim
from lecture09.ranks import gloo_ranks  # no torch at import: --help stays fast
from lecture09.schedule import schedule_study
from lecture09.compress import training_flags
from lecture09.schedule.schedule_setup import ScheduleSetup, build_networks, datacenter_comm_s
from lecture01.cli_args import (Parser, run_main, float_in, int_in, non_negative_int, positive_float,
                      positive_int, precision_from_args, ratio)
from lecture01.console import (LINE_WIDTH, StatusLine, display_width, format_table, histogram_lines, pad,
                               print_header, print_table, print_wrapped)

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
DEMO2_DEFAULTS = dict(training_flags.DEFAULTS, topk_ratio=0.01, sgd_lr=0.3, sgd_momentum=0.0)
BACKENDS = ("sim", "gloo")       # demo 2's engine: compressed_dp's simulation, or real ranks (gloo_dp.py)
# Flag ranges: wide enough for any real network and job, narrow enough that the
# picosecond arithmetic of dist_sim stays exact (int64) and the searches finish.
GBPS = float_in(1e-2, 1e5)               # 10 Mbit/s .. 100 Tbit/s
LATENCY_MS = float_in(0, 1e4)            # up to 10 s
MAX_GLOBAL_BATCH = 100_000
MAX_MICRO_BATCHES = 64            # each cut then pays the latency 64 times per direction


# =============================================================================
# Demo 1: scheduling on a heterogeneous network
# =============================================================================

class Progress:
    """Demo 1's search progress, on stderr only (stdout is never touched).

    The rule: progress is written only while demo 1 searches, which is after its network
    table and before its results table, so it never lands between the rows of a table. It
    is a console.StatusLine: on a terminal one line, rewritten with "\r" and erased (done())
    before the results print; anywhere else (a pipe, a log file) one line per step.
    """

    def __init__(self, stream=None):
        self.status = StatusLine(stream, min_interval_s=0, log_interval_s=0)   # every step shown
        self.started = None             # the clock starts at the first step

    def step(self, text):
        if self.started is None:
            self.started = time.perf_counter()
        self.status.show(f"  演示 1 搜索中 searching（{time.perf_counter() - self.started:.1f} 秒）：{text}")

    def done(self):
        self.status.clear()


@dataclass(frozen=True)
class EndToEnd:
    """Compute plus communication of one iteration (s), and its ratio to the data center."""
    compute_ideal_s: float      # every GPU busy all the time
    compute_s: float            # with GPipe's bubble: ideal × (M + P − 1) / M
    dc_total_s: float           # data center: compute + communication
    optimum_s: float            # geo: compute + the optimum's (or best heuristic's) communication
    random_s: float             # geo: compute + the random layouts' mean communication
    paper_comm_s: float | None  # the optimum's communication with the paper's setting inside a region
    paper_exact: bool           # (None / False on a measured preset: it has the paper's setting already)
    presets: tuple = ()         # (name, the optimum's communication s, exact) per measured preset

    @property
    def slowdown(self):
        return self.optimum_s / self.dc_total_s

    @property
    def random_slowdown(self):
        return self.random_s / self.dc_total_s

    @property
    def random_over_optimum(self):
        return self.random_s / self.optimum_s

    @property
    def paper_slowdown(self):
        return (self.compute_s + self.paper_comm_s) / self.dc_total_s


@dataclass(frozen=True)
class Demo1Result:
    geo: dict                   # the network (dist_sim.Network)
    dc_comm_s: float            # the data center's communication per iteration (any layout)
    main: "schedule_study.Instance"
    second: "schedule_study.Instance | None"
    end_to_end: EndToEnd


METHOD_LABELS = {   # the results table's row labels, by method name (schedule_study.METHOD_NAMES)
    "random_mean": "随机分配（{n} 次的平均）", "random_best": "随机分配（{n} 次里最好的）",
    "pipelines_in_regions": "按地区放流水线（数据并行跨地区）",
    "dp_groups_in_regions": "按地区放数据并行组（流水线跨地区）",
    "strict": "局部搜索，严格下降（{r} 次里最好的）", "sideways": "局部搜索，允许持平（{r} 次里最好的）",
    "genetic": "遗传算法 genetic（{r} 个种子里最好的）",
    "genetic_blind": "遗传算法，不看地区 region-blind（{r} 个种子）",
}


def method_label(setup, name):
    return METHOD_LABELS[name].format(n=setup.n_random, r=setup.restarts)


def per_device_bytes(setup, act_bytes):
    """Bytes one device sends per iteration: (DP per Eq. 2, PP of a middle stage, PP of one
    replica's whole pipeline). Eq. 2: to each of D − 1 peers 2 × c_DP / D (scatter-reduce and
    all-gather), the bandwidth term of a ring all-reduce."""
    d = setup.n_replicas
    dp = 2 * (d - 1) / d * setup.stage_param_bytes
    return dp, 2 * act_bytes, 2 * (setup.n_stages - 1) * act_bytes


def _fmt(c):
    return f"{c:.2f} 秒" if c is not None else "放不下"


def _pct(x):
    return f"+{x * 100:.1f}%" if x is not None else "—"


def print_job_and_network(setup, geo, out):
    n_gpus = setup.n_gpus
    print_header(f"演示 1：{n_gpus} 张卡、{len(geo['region_sizes'])} 个地区，"
                 f"给 {setup.n_stages} 阶段 × {setup.n_replicas} 副本的训练分配任务（只算通信时间）")
    out(f"模型 {setup.n_params / 1e9:.1f}B 参数，切成 {setup.n_stages} 个流水线阶段（pipeline stages）、"
        f"{setup.n_replicas} 个数据并行副本（data-parallel replicas）；全局 batch {setup.global_batch} 个 "
        f"{setup.seq_len} token 的序列")
    dp_bytes, pp_bytes, chain_bytes = per_device_bytes(setup, setup.act_bytes)
    d = setup.n_replicas
    out(f"每个阶段的 fp16 梯度 {setup.stage_param_bytes / 1e9:.3f} GB（数据并行组内交换）；"
        f"每个副本在每个阶段切口每次迭代每个方向传 {setup.act_bytes / 1e9:.3f} GB（前向传激活、反向传激活的梯度）")
    out(f"每张卡每次迭代发出：数据并行 2 × ({d}−1)/{d} × {setup.stage_param_bytes / 1e9:.3f} = "
        f"{dp_bytes / 1e9:.3f} GB（Eq. 2；和环形 all-reduce 的带宽项相同）；流水线 中间阶段的卡 "
        f"{pp_bytes / 1e9:.3f} GB（前向 + 反向），一个副本 {setup.n_stages - 1} 个切口 × 2 个方向共 "
        f"{chain_bytes / 1e9:.3f} GB，一个接一个")
    m = setup.n_micro_batches
    out(f"微批次 micro-batches：每个副本的 {setup.global_batch // d} 个序列分成 M = {m} 份（GPipe），"
        f"每个切口每个方向发 {m} 条消息、各付一次延迟；气泡 bubble (P−1)/(M+P−1) = "
        f"{setup.n_stages - 1}/{m + setup.n_stages - 1} = {setup.bubble_fraction:.1%}")
    if setup.network == "random":
        out(f"网络：地区内 {setup.intra_gbps:g} Gbit/s、{setup.intra_latency_ms:g} ms；地区之间每对地区随机抽一个带宽 "
            f"{setup.inter_gbps_range[0]:g}–{setup.inter_gbps_range[1]:g} Gbit/s、延迟 "
            f"{setup.inter_latency_ms_range[0]:g}–{setup.inter_latency_ms_range[1]:g} ms（种子 {setup.net_seed}；"
            f"仿照 Yuan et al. 2022 的全球分布设置，他们的地区内是 {setup.paper_intra_gbps:g} Gbit/s、"
            f"{setup.paper_intra_latency_ms:g} ms）")
    else:
        out(f"网络：{setup.network}，Yuan et al. 2022 在 AWS 上实测的链路（{len(geo['region_sizes'])} 个地点，"
            f"地点内 {dist_sim.GEO_INTRA_GBPS:g} Gbit/s、{dist_sim.GEO_INTRA_LATENCY_MS:g} ms）")
    out(f"对照：同一个数据中心（data center），{n_gpus} 张卡之间都是 {setup.datacenter_gbps:g} Gbit/s、"
        f"{setup.datacenter_latency_ms:g} ms")
    print_link_tables(geo, out)
    out("")


def print_link_tables(geo, out):
    """The links between regions: one table of "bandwidth / latency" cells, or, when that
    is wider than a projector's line (8 places of --network aws-world), two tables."""
    names = geo["region_names"]
    bw, lat = geo["region_bandwidth_bps"], geo["region_latency_s"]
    cells = {"both": lambda i, j: f"{bw[i][j] / 1e9:.2f} / {lat[i][j] * 1e3:.1f}",
             "bandwidth": lambda i, j: f"{bw[i][j] / 1e9:.2f}", "latency": lambda i, j: f"{lat[i][j] * 1e3:.1f}"}

    def table(cell):
        return format_table(["地区 region"] + list(names),
                            [(a,) + tuple(cell(i, j) for j in range(len(names))) for i, a in enumerate(names)])
    combined = table(cells["both"])
    if max(map(display_width, combined)) <= LINE_WIDTH:
        out("地区之间的链路（带宽 Gbit/s / 延迟 ms；对角线是地区内）：")
        tables = [combined]
    else:
        out("地区之间的链路：先是带宽 bandwidth（Gbit/s），再是延迟 latency（ms）；对角线是地区内：")
        tables = [table(cells["bandwidth"]), [""], table(cells["latency"])]
    for lines in tables:
        for line in lines:
            print(line)


def print_main_table(setup, inst, dc_comm_s, out):
    opt = inst.optimum
    rows = [(method_label(setup, name), _fmt(m.cost), f"{m.cost / dc_comm_s:.1f}" if m.cost is not None else "—",
             _pct(inst.gap(name))) for name, m in inst.methods.items()]
    rows.append(("最优（已证明）proven optimum" if opt.exact else "下界 lower bound", _fmt(opt.cost),
                 f"{opt.cost / dc_comm_s:.1f}", "0" if opt.exact else "—"))
    rows.append((f"对照：同一个数据中心（{setup.datacenter_gbps:g} Gbit/s）", _fmt(dc_comm_s), "1.0", ""))
    print_table(["分配方式 layout", "每次迭代的通信时间", "÷ 数据中心", "离最优 gap" if opt.exact else "高出下界"],
                rows)
    for name, m in inst.methods.items():
        if m.why_not:
            out(f"（{method_label(setup, name)}在这个网络上放不下 does not fit: {m.why_not}）")
    out("\n每次重启 / 每个种子各自的结果（秒）：")
    runs = inst.methods
    out(f"  局部搜索，严格下降（各 {setup.strict_iters} 次提议）：" + "、".join(f"{c:.2f}" for c in runs["strict"].runs))
    out(f"  局部搜索，允许持平（各 {setup.sideways_iters} 次提议）：" + "、".join(f"{c:.2f}" for c in runs["sideways"].runs))
    for name, what in (("genetic", "遗传算法"), ("genetic_blind", "遗传算法，不看地区")):
        out(f"  {what}（各 {setup.genetic_budget} 次代价计算，种群 {setup.genetic_population}）："
            + "、".join(f"{c:.2f}" for c in runs[name].runs))
    if opt.exact:
        out(f"  最优分配：分支定界（branch and bound）检查了 {opt.rows_priced:,} 个候选行，证明没有更好的分配")
    else:
        out(f"  这个网络不是'地区内均匀'的，给出的是下界：{opt.note}")


def print_local_search_anatomy(setup, inst, out):
    """What stops strict descent and what sideways moves do, measured (issue 10 item 1)."""
    c = inst.census
    strict = inst.methods["strict"]
    out(f"\n严格下降停在哪里：它最好的分配（{strict.cost:.2f} 秒）上的全部 {c.n_swaps} 个交换（一个也不执行）：")
    out(f"  同一地区内 {sum(c.same_region)} 个：{c.same_region[0]} 个更好、{c.same_region[1]} 个不变、"
        f"{c.same_region[2]} 个更差；跨地区 {sum(c.cross_region)} 个：{c.cross_region[0]} 个更好、"
        f"{c.cross_region[1]} 个不变、{c.cross_region[2]} 个更差")
    out(f"  给严格下降和持平一样多的提议（各 {setup.sideways_iters} 次，同样的起点）："
        + "、".join(f"{x:.2f}" for x in inst.strict_long_runs) + " 秒")
    t = inst.sideways_traces
    out(f"  允许持平的 {len(t)} 次重启：共 {sum(x.improvements for x in t)} 次下降，其中 "
        f"{sum(x.improvements_after_ties for x in t)} 次紧跟在跨地区的持平交换之后；接受了 "
        f"{sum(x.ties_cross_region for x in t)} 个跨地区、{sum(x.ties_same_region for x in t)} 个地区内的持平交换")


def print_anatomy(setup, inst, geo, out):
    candidates = [("按地区放流水线", "pipelines_in_regions"), ("按地区放数据并行组", "dp_groups_in_regions"),
                  ("局部搜索（允许持平）最好的", "sideways"), ("遗传算法最好的", "genetic")]
    layouts = [(label, inst.methods[name].layout) for label, name in candidates]
    layouts.append(("最优" if inst.optimum.exact else "下界对应的分配", inst.optimum.assignment))
    rows = []
    for label, layout in layouts:
        if layout is None:
            continue
        b = inst.cost.breakdown(layout)
        st = dist_sim.layout_stats(layout, geo, setup.n_stages, setup.n_replicas)
        rows.append((label, f"{b['dp']:.2f}", f"{b['pp']:.2f}", f"{b['total']:.2f}",
                     f"{st['pipeline_links_within_region']}/{st['pipeline_links']}",
                     f"{st['dp_groups_within_region']}/{st['dp_groups']}"))
    out("\n这些分配把什么留在了地区内？（数据并行 dp、流水线 pp 各占多少秒）")
    print_table(["分配 layout", "dp 秒", "pp 秒", "合计", "地区内的流水线边", "整组在一个地区的 DP 组"], rows)
    print_count_matrix(inst, geo, out)


def print_count_matrix(inst, geo, out):
    out(("最优" if inst.optimum.exact else "下界") + "分配的计数矩阵（每个阶段在每个地区放几个副本）：")
    print_table(["阶段 stage"] + [str(n) for n in geo["region_names"]],
                [(f"阶段 {s}",) + tuple(str(n) for n in row) for s, row in enumerate(inst.optimum.counts)])


def print_histogram(setup, inst, out):
    names = ("pipelines_in_regions", "dp_groups_in_regions", "strict", "sideways", "genetic")
    short = {"pipelines_in_regions": "手工：流水线在地区内", "dp_groups_in_regions": "手工：DP 组在地区内",
             "strict": "严格局部搜索", "sideways": "持平局部搜索", "genetic": "遗传算法"}
    markers = [(short[n], inst.methods[n].cost) for n in names if inst.methods[n].cost is not None]
    markers.append(("最优" if inst.optimum.exact else "下界", inst.optimum.cost))
    out(f"\n{setup.n_random} 个随机分配的通信时间分布（秒），各方法的结果标在旁边：")
    for line in histogram_lines(list(inst.random_costs), n_bins=setup.histogram_bins, markers=markers, width=30,
                                value_format="{:.1f}"):
        out("  " + line)


def print_second_instance(setup, main, second, geo, out):
    out(f"\n第二个实例：全局 batch {second.global_batch}（网络和其他设置不变；每个副本在每个切口每个方向传 "
        f"{second.act_bytes / 1e9:.3f} GB）。每种方法离最优多远：")
    rows = []
    for name in second.methods:
        rows.append((method_label(setup, name), _fmt(main.methods[name].cost), _pct(main.gap(name)),
                     _fmt(second.methods[name].cost), _pct(second.gap(name))))
    rows.append(("最优（已证明）" if second.optimum.exact else "下界", _fmt(main.optimum.cost), "0",
                 _fmt(second.optimum.cost), "0"))
    print_table(["分配方式 layout", f"batch {main.global_batch}", "离最优", f"batch {second.global_batch}", "离最优"],
                rows)
    if second.optimum.exact:
        out(f"  batch {second.global_batch} 的最优分配：分支定界检查了 {second.optimum.rows_priced:,} 个候选行")
    print_count_matrix(second, geo, out)


def end_to_end(setup, main, dc_comm_s):
    """EndToEnd of the main instance, and the paper's setting inside a region beside ours."""
    ideal, compute = setup.compute_ideal_s, setup.compute_s
    opt = main.optimum
    comm = opt.cost if opt.exact else min(m.cost for m in main.methods.values() if m.cost is not None)
    paper, presets = None, []
    if setup.network == "random":   # the paper's setting and the measured networks beside ours
        paper_geo, _ = build_networks(setup, intra=(setup.paper_intra_gbps, setup.paper_intra_latency_ms))
        paper = dist_sim.optimal_layout(paper_geo, setup.n_stages, setup.n_replicas, setup.stage_param_bytes,
                                        setup.act_bytes, n_micro_batches=setup.n_micro_batches)
        for name, make in dist_sim.PRESETS.items():
            net = make()
            if len(net["region"]) == setup.n_gpus:
                best = dist_sim.optimal_layout(net, setup.n_stages, setup.n_replicas, setup.stage_param_bytes,
                                               setup.act_bytes, n_micro_batches=setup.n_micro_batches)
                presets.append((name, best.cost, best.exact))
    return EndToEnd(ideal, compute, compute + dc_comm_s, compute + comm,
                    compute + main.methods["random_mean"].cost, paper and paper.cost, bool(paper and paper.exact),
                    tuple(presets))


def print_end_to_end(setup, e, exact, out):
    flops = setup.flops_per_iteration
    m, p = setup.n_micro_batches, setup.n_stages
    out(f"\n加上计算：每次迭代 6 × 参数 × token = {flops:.2e} FLOPs，{setup.n_gpus} 张 V100 按 fp16 峰值 "
        f"{setup.gpu_peak_flops / 1e12:.0f} TFLOP/s 的 {setup.gpu_utilisation:.0%} 算，每张卡都不停时 "
        f"{e.compute_ideal_s:.1f} 秒；GPipe 气泡让它变成 × (M+P−1)/M = {m + p - 1}/{m} → {e.compute_s:.1f} 秒"
        "（计算和通信直接相加，不重叠）")
    which = "最优分配" if exact else "启发式里最好的"
    rows = [("数据中心 data center", f"{e.dc_total_s:.1f}", "1.00"),
            (f"地理分布，{which}", f"{e.optimum_s:.1f}", f"{e.slowdown:.2f}"),
            ("地理分布，随机分配（平均）", f"{e.random_s:.1f}", f"{e.random_slowdown:.2f}")]
    if setup.network == "random":
        rows.append((f"地区内用论文的 {setup.paper_intra_gbps:g} Gbit/s、{setup.paper_intra_latency_ms:g} ms，"
                     + ("最优" if e.paper_exact else "下界"),
                     f"{e.compute_s + e.paper_comm_s:.1f}", f"{e.paper_slowdown:.2f}"))
    for name, comm_s, exact in e.presets:
        rows.append((f"实测网络 --network {name}，" + ("最优" if exact else "下界"),
                     f"{e.compute_s + comm_s:.1f}", f"{(e.compute_s + comm_s) / e.dc_total_s:.2f}"))
    print_table(["", "计算 + 通信（秒）", "÷ 数据中心"], rows)
    if e.presets:
        print_wrapped("实测网络（Yuan et al. 在 AWS 上量的链路，地点内 2 Gbit/s、5 ms）上最优分配的通信："
                      + "；".join(f"{name} {comm_s:.2f} 秒" for name, comm_s, _ in e.presets))


def run_demo1(setup, out=print_wrapped, progress=None):
    """Print demo 1; return a Demo1Result (for the observations and the tests). Search
    progress goes to `progress` (a Progress; default: on stderr)."""
    progress = Progress() if progress is None else progress
    geo, dc = build_networks(setup)
    n_gpus = setup.n_gpus
    if len(geo["region"]) != n_gpus:
        raise SystemExit(f"error: the network has {len(geo['region'])} GPUs, the job needs "
                         f"{setup.n_stages} x {setup.n_replicas} = {n_gpus}")
    print_job_and_network(setup, geo, out)
    dc_comm_s = datacenter_comm_s(setup, dc)
    t0 = time.perf_counter()
    # From here to the results table nothing goes to stdout: the progress window (Progress).
    main = schedule_study.study_instance(setup, geo, setup.global_batch, progress.step)
    second = None
    if setup.second_batch and setup.second_batch != setup.global_batch:
        second = schedule_study.study_instance(setup, geo, setup.second_batch, progress.step)
    progress.step("论文的设置和实测网络 the paper's setting, measured networks")
    e2e = end_to_end(setup, main, dc_comm_s)
    progress.done()
    search_s = time.perf_counter() - t0
    print_main_table(setup, main, dc_comm_s, out)
    print_local_search_anatomy(setup, main, out)
    print_anatomy(setup, main, geo, out)
    print_histogram(setup, main, out)
    if second is not None:
        print_second_instance(setup, main, second, geo, out)
    print_end_to_end(setup, e2e, main.optimum.exact, out)
    for inst in (main, second):
        if inst is not None:
            print(f"（batch {inst.global_batch} 的分支定界 branch and bound：{inst.optimum.rows_priced:,} 个候选行，"
                  f"{inst.optimum_s:.2f} 秒）", file=sys.stderr)
    print(f"（演示 1 的搜索用时 {search_s:.1f} 秒）", file=sys.stderr)
    return Demo1Result(geo, dc_comm_s, main, second, e2e)


def _hand_best(inst):
    """(name, cost) of the cheaper hand layout that fits, or (None, None)."""
    fits = [(inst.methods[n].cost, n) for n in schedule_study.HAND_LAYOUTS if inst.methods[n].cost is not None]
    return (min(fits)[1], min(fits)[0]) if fits else (None, None)


def _count_hits(inst, name):
    return sum(inst.reaches_optimum(c) for c in inst.methods[name].runs)


def demo1_observations(setup, r, out=print_wrapped):
    """Observations whose every number and comparison comes from this run's figures (r: a
    Demo1Result); methods are found by name."""
    main, opt = r.main, r.main.optimum
    m = main.methods
    hand_pp, hand_dp = m["pipelines_in_regions"].cost, m["dp_groups_in_regions"].cost
    cross_links = statistics.mean(1 - s["pipeline_links_within_region"] / s["pipeline_links"] for s in main.random_stats)
    cross_groups = statistics.mean(1 - s["dp_groups_within_region"] / s["dp_groups"] for s in main.random_stats)
    out("\n观察 Observations（演示 1）：")
    out(f" 1. 随机分配平均 {m['random_mean'].cost:.2f} 秒：平均 {cross_links:.0%} 的流水线边、{cross_groups:.0%} 的数据并行组跨了地区，"
        f"每一步都被最慢的跨地区链路拖住（代价取的是最慢的那一组 / 那一条边）。")
    dp_bytes, pp_bytes, chain_bytes = per_device_bytes(setup, setup.act_bytes)
    grad, act = setup.stage_param_bytes, setup.act_bytes
    if hand_pp is not None and hand_dp is not None:
        winner, loser = ("流水线", "数据并行") if hand_pp < hand_dp else ("数据并行组", "流水线")
        spread = max(hand_pp, hand_dp) / min(hand_pp, hand_dp)
        how_far = "差很多" if spread >= 1.5 else ("差一些" if spread >= 1.1 else "差不多")
        which = ("两种一样快。" if hand_pp == hand_dp else f"把{winner}留在地区内、让{loser}跨地区更好。")
        out(f" 2. 两种手工分配{how_far}：{hand_pp:.2f} 秒（流水线在地区内）对 {hand_dp:.2f} 秒（数据并行组在地区内）。"
            + which + optimum_versus_hand(setup, main, r.geo))
    elif hand_pp is not None or hand_dp is not None:
        only, missing = (("流水线在地区内", "整个数据并行组") if hand_pp is not None else ("数据并行组在地区内", "整条流水线"))
        c = hand_pp if hand_pp is not None else hand_dp
        if opt.exact:
            verdict = ("它就是最优的。" if main.reaches_optimum(c) else
                       f"它比最优的 {opt.cost:.2f} 秒慢 {(c / opt.cost - 1) * 100:.1f}%。")
        else:
            verdict = f"它比下界 {opt.cost:.2f} 秒高 {(c / opt.cost - 1) * 100:.1f}%。"
        out(f" 2. 这个网络的地区放不下{missing}，只能比较'{only}'这一种手工分配：{c:.2f} 秒；{verdict}")
    else:
        out(" 2. 这个网络的地区既放不下整条流水线，也放不下整个数据并行组：两种手工分配都用不上。")
    heavier = "流水线" if pp_bytes > dp_bytes else "数据并行"
    out(f"    每张卡每次迭代发出的字节：数据并行 {dp_bytes / 1e9:.2f} GB（Eq. 2：给 {setup.n_replicas - 1} 个同伴"
        f"各发两次 1/{setup.n_replicas} 份梯度，2 × {setup.n_replicas - 1}/{setup.n_replicas} × {grad / 1e9:.2f} GB），"
        f"流水线中间阶段的卡 {pp_bytes / 1e9:.2f} GB——{heavier}更多。一个副本在一个切口的激活（{act / 1e9:.2f} GB）"
        f"{'比' if act > grad else '不比'}一个阶段的梯度（{grad / 1e9:.2f} GB）大；而且一个副本的 "
        f"{setup.n_stages - 1} 个切口 × 2 个方向一个接一个相加（{chain_bytes / 1e9:.1f} GB），"
        f"{setup.n_stages} 个数据并行组却同时进行（取最大）。")
    out("    哪种通信更重取决于 batch、模型大小和切法——所以要用代价模型去算，而不是凭直觉。")
    local_search_observation(setup, main, out)
    genetic_observation(setup, r, out)
    optimum_observation(setup, r, out)
    end_to_end_observation(setup, r, out)


def local_search_observation(setup, main, out):
    m, c = main.methods, main.census
    strict, sideways = m["strict"], m["sideways"]
    lower, equal, higher = c.cross_region
    out(f" 3. 局部搜索不知道'地区'，只会交换两张卡。严格下降的 {setup.restarts} 次重启停在 "
        f"{min(strict.runs):.2f}–{max(strict.runs):.2f} 秒。在它最好的那个分配上把全部 {c.n_swaps} 个交换都试一遍："
        f"同一地区内的 {sum(c.same_region)} 个" + ("代价全都不变——同一地区的卡可以互换，这种交换什么也没改"
                                                 if c.same_region[0] == c.same_region[2] == 0 else
                                                 f"里 {c.same_region[0]} 个更好、{c.same_region[2]} 个更差")
        + f"；跨地区的 {sum(c.cross_region)} 个：{lower} 个更好、{equal} 个不变、{higher} 个更差。")
    if lower == 0 and equal == 0:
        stop = "所以严格下降停在一个真正的局部最小（local minimum）上：没有平台，每一个真正改变分配的交换都更差。"
    elif lower == 0:
        stop = f"所以严格下降停在局部最小的平台上：没有更好的交换，只有 {equal} 个跨地区的交换持平。"
    else:
        stop = f"还有 {lower} 个跨地区交换能降低代价：严格下降是提议次数用完了，并没有真正停住。"
    same_budget = all(a == b for a, b in zip(main.strict_long_runs, strict.runs))
    budget = (f"两种局部搜索的预算不同：严格每次 {setup.strict_iters:,} 次提议、持平每次 {setup.sideways_iters:,} 次；"
              f"给严格下降同样 {setup.sideways_iters:,} 次，" +
              ("结果一个也没变，多给预算没有用。" if same_budget else
               f"最好的一次是 {min(main.strict_long_runs):.2f} 秒（原来 {strict.cost:.2f} 秒）。"))
    t = main.sideways_traces
    improvements, after_ties = sum(x.improvements for x in t), sum(x.improvements_after_ties for x in t)
    hand_name, hand_cost = _hand_best(main)
    beats = (lambda runs: sum(x <= hand_cost for x in runs)) if hand_cost is not None else (lambda runs: 0)
    out(f"    {stop}{budget}")
    out(f"    持平帮的是下降途中：几项并列最慢时，先持平地挪开其中一项，下一步才降得下来。{len(t)} 次持平重启的 "
        f"{improvements} 次下降里，有 {after_ties} 次紧跟在跨地区的持平交换之后。最好的一次 {sideways.cost:.2f} 秒；"
        f"{setup.restarts} 次里有 {beats(sideways.runs)} 次不差于最好的手工分配（严格下降：{beats(strict.runs)} 次）。")


def genetic_observation(setup, r, out):
    main, second = r.main, r.second
    hits = [(main, _count_hits(main, "genetic"), _count_hits(main, "genetic_blind"))]
    if second is not None:
        hits.append((second, _count_hits(second, "genetic"), _count_hits(second, "genetic_blind")))
    n = setup.restarts
    if main.optimum.exact:
        counted = "；".join(f"batch {inst.global_batch}：{aware}/{n} 个种子到了最优（不看地区：{blind}/{n}）"
                           for inst, aware, blind in hits)
    else:
        counted = "没有证明过的最优可比"
    total_sideways = setup.restarts * setup.sideways_iters
    out(f" 4. 遗传算法（Yuan et al. 2022 的调度器，仿 Kang & Moon 2000：整组交叉 + 局部搜索）每个种子 "
        f"{setup.genetic_budget:,} 次代价计算（持平局部搜索 {setup.restarts} 次重启一共 {total_sideways:,} 次）。"
        f"它知道局部搜索不知道的'地区'：交叉后修补冲突时挑同一地区的卡，变异时把数据并行组整组搬进它多数卡所在的地区。"
        f"{counted}。")
    aware_total = sum(a for _, a, _ in hits)
    blind_total = sum(b for _, _, b in hits)
    if main.optimum.exact:
        out("    " + ("地区知识正是它比局部搜索强的原因：不看地区的版本到最优的次数少得多。" if aware_total > blind_total
                      else "这次不看地区的版本到最优的次数不比它少：地区知识在这里没有带来好处。"))


def optimum_observation(setup, r, out):
    main, opt = r.main, r.main.optimum
    if opt.exact:
        reached = [method_label(setup, name) for name, m in main.methods.items() if main.reaches_optimum(m.cost)]
        best_h = min(m.cost for m in main.methods.values() if m.cost is not None)
        out(f" 5. 最优分配 {opt.cost:.2f} 秒是证明过的：没有任何分配能更快。同一地区里的卡可以互换，分配只取决于"
            f"'每个阶段在每个地区放几个'和相邻阶段怎么配对，这个空间小到可以穷举（讲义 7.4 节）。"
            + (f"这次达到最优的：{'、'.join(reached)}。" if reached else
               f"启发式里最好的 {best_h:.2f} 秒，离最优还差 {(best_h / opt.cost - 1) * 100:.1f}%。"))
    else:
        out(f" 5. 这个网络不是地区内均匀的，{opt.cost:.2f} 秒只是下界：{opt.note}。")
    second = r.second
    if second is None:
        return
    s_opt, sm = second.optimum, second.methods
    name, hand_cost = _hand_best(second)
    if not s_opt.exact or hand_cost is None:
        return
    if second.reaches_optimum(hand_cost):
        what = f"最好的手工分配（{method_label(setup, name)}）就是最优"
    else:
        st = dist_sim.layout_stats(s_opt.assignment, r.geo, setup.n_stages, setup.n_replicas)
        what = (f"两种手工分配都不是最优（最好的 {hand_cost:.2f} 秒，高出 {second.gap(name) * 100:.1f}%）："
                f"最优分配 {st['pipeline_links_within_region']}/{st['pipeline_links']} 条流水线边在地区内、"
                f"{st['dp_groups_within_region']}/{st['dp_groups']} 个数据并行组整组在一个地区")
        if st["dp_groups_within_region"] == st["dp_groups"]:
            order = [next(k for k, n in enumerate(row) if n) for row in s_opt.counts]
            what += (f"，阶段依次经过 {' → '.join(r.geo['region_names'][k] for k in order)}"
                     "（Yuan et al. 把这个顺序写成开放路径的旅行商问题 open-loop TSP）")
    gaps = "、".join(f"{label} {_pct(second.gap(key))}" for key, label in
                    (("strict", "严格"), ("sideways", "持平"), ("genetic", "遗传"), ("genetic_blind", "不看地区的遗传")))
    if second.reaches_optimum(sm["genetic"].cost) and not second.reaches_optimum(sm["genetic_blind"].cost):
        verdict = "手工分配和'不看地区'的搜索在这里都不够；要有证明过的最优，才知道谁到了、谁还差多少。"
    elif second.reaches_optimum(sm["genetic"].cost):
        verdict = "要有证明过的最优，才知道谁到了、谁还差多少。"
    else:
        verdict = "这里连遗传算法也没到；没有证明过的最优，就不会知道还差多少。"
    out(f"    第二个实例 batch {second.global_batch}：最优 {s_opt.cost:.2f} 秒，{what}。各方法离最优：{gaps}。"
        + verdict)


def end_to_end_observation(setup, r, out):
    e, opt = r.end_to_end, r.main.optimum
    comm_ratio = (e.optimum_s - e.compute_s) / r.dc_comm_s
    which = "最优" if opt.exact else "最好"

    def slower(x, digits):
        return f"慢 {x:.{digits}f} 倍" if x >= 1 else f"反而快（用时是数据中心的 {x:.{digits}f} 倍）"

    out(f" 6. 只看通信，地理分布的{which}分配比数据中心{slower(comm_ratio, 1)}；加上每次迭代 {e.compute_s:.1f} 秒的计算"
        f"（含 {setup.bubble_fraction:.1%} 的气泡，M = {setup.n_micro_batches}）后，{slower(e.slowdown, 2)}"
        f"（随机分配{slower(e.random_slowdown, 2)}）。")
    if setup.network == "random":
        inside = ("落在" if 1.7 <= e.slowdown <= 3.5 else "不在")
        paper_inside = ("落在" if 1.7 <= e.paper_slowdown <= 3.5 else "不在")
        out(f"    Yuan et al. 2022 报告：去中心化训练只比数据中心慢 1.7–3.5 倍。我们的 {e.slowdown:.2f} 倍{inside}这个区间里；"
            f"但他们的地区内是 {setup.paper_intra_gbps:g} Gbit/s、{setup.paper_intra_latency_ms:g} ms，我们是 "
            f"{setup.intra_gbps:g} Gbit/s、{setup.intra_latency_ms:g} ms。用论文的设置，最优分配的通信 "
            f"{e.paper_comm_s:.2f} 秒，慢 {e.paper_slowdown:.2f} 倍，{paper_inside}区间里。")
    ratio = e.random_over_optimum
    paper = ("比论文大得多：我们的随机基线完全不看网络，而每一条跨地区的边都很慢。" if ratio >= 2 * 2.7 else
             "比论文大：我们的随机基线完全不看网络。" if ratio > 2.7 else
             "没有超过论文的 2.7 倍：这个网络上随机分配吃的亏没那么大。")
    out(f"    论文说调度器比随机分配最多快 2.7 倍，比的是'随机 ÷ 调度后'的端到端时间；这里随机分配是{which}分配的 "
        f"{ratio:.1f} 倍，{paper}这个模型把计算和通信直接相加：真实系统边算边传（重叠 overlap），"
        "慢的倍数会更小。")


def optimum_versus_hand(setup, inst, geo):
    """Observation 2's last sentence: is the proven optimum one of the two hand layouts, and if
    not, what does it keep inside a region (its layout statistics) and which hand layout is
    it like? Empty when the cheaper hand layout is optimal (observation 5 names it then)."""
    m, opt = inst.methods, inst.optimum
    hand_pp, hand_dp = m["pipelines_in_regions"].cost, m["dp_groups_in_regions"].cost
    if not opt.exact:
        return f"{opt.cost:.2f} 秒只是下界，说不出最优分配是不是其中之一。"
    if inst.reaches_optimum(min(hand_pp, hand_dp)):
        return ""
    st = dist_sim.layout_stats(opt.assignment, geo, setup.n_stages, setup.n_replicas)
    links_in, links = st["pipeline_links_within_region"], st["pipeline_links"]
    groups_in, groups = st["dp_groups_within_region"], st["dp_groups"]
    text = (f"但两种都不是最优：最优分配 {opt.cost:.2f} 秒，{links_in}/{links} 条流水线边在地区内、"
            f"{groups_in}/{groups} 个数据并行组整组在一个地区")
    b = inst.cost.breakdown(opt.assignment)
    if groups_in == groups and links_in < links:
        like, like_name, kept = "按地区放数据并行组", "dp_groups_in_regions", "数据并行组"
    elif links_in == links and groups_in < groups:
        like, like_name, kept = "按地区放流水线", "pipelines_in_regions", "流水线"
    else:
        return text + "，两种手工分配的做法它都不完全是。"
    hand_b = inst.cost.breakdown(m[like_name].layout)
    text += (f"——和'{like}'一样把{kept}留在地区内，只是阶段和地区的搭配不同"
             f"（dp {hand_b['dp']:.2f} → {b['dp']:.2f} 秒，pp {hand_b['pp']:.2f} → {b['pp']:.2f} 秒）")
    if m[like_name].cost > min(hand_pp, hand_dp):
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
    out(f"模型：第 1 讲的小 GPT（lecture_model.MODEL_CONFIG，{tiny_gpt.make_model(t.model, 0).n_params():,} 个参数）；"
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
    p = Parser(
        description="第 9 讲代码 5：去中心化训练 (lecture 9 code 5: decentralized training)",
        epilog="例 example: --demo 1 --network aws-world；--demo 2 --topk-ratio 0.05")
    p.add_argument("--demo", choices=("1", "2", "all"), default="all", help="跑哪个演示 (default all)")
    p.add_argument("--quick", action="store_true", help="很小的设置，几秒钟跑完（冒烟测试 smoke test）")
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
                    default=s.inter_latency_ms_range, help="地区之间延迟范围 ms (default %(default)s)")
    g1.add_argument("--global-batch", type=int_in(1, MAX_GLOBAL_BATCH), default=s.global_batch,
                    help="全局 batch（序列数），决定激活流量 (default %(default)s)")
    g1.add_argument("--second-batch", type=int_in(0, MAX_GLOBAL_BATCH), default=s.second_batch,
                    help="第二个实例的全局 batch，0 = 不算 (second instance; default %(default)s)")
    g1.add_argument("--micro-batches", type=int_in(1, MAX_MICRO_BATCHES), default=s.n_micro_batches,
                    help="每个副本的 batch 分成几个微批次 M：气泡 (P-1)/(M+P-1)，每个切口 M 次延迟 "
                         "(default %(default)s)")
    g1.add_argument("--random-layouts", type=positive_int, default=s.n_random,
                    help="随机分配的个数 (default %(default)s)")
    g1.add_argument("--restarts", type=positive_int, default=s.restarts,
                    help="局部搜索重启次数，也是遗传算法的种子数 (default %(default)s)")
    g1.add_argument("--strict-iters", type=non_negative_int, default=s.strict_iters,
                    help="严格局部搜索每次的提议数 (default %(default)s)")
    g1.add_argument("--sideways-iters", type=non_negative_int, default=s.sideways_iters,
                    help="持平局部搜索每次的提议数 (default %(default)s)")
    g1.add_argument("--genetic-budget", type=positive_int, default=s.genetic_budget,
                    help="遗传算法每个种子的代价计算次数 (default %(default)s)")
    g2 = p.add_argument_group("演示 2 demo 2")
    training_flags.add_training_arguments(g2, d)
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
    if args.quick:
        schedule = replace(schedule, **QUICK_SCHEDULE)
    if schedule.global_batch < schedule.n_replicas:
        p.error(f"--global-batch 不能小于副本数 {schedule.n_replicas} "
                f"(must be at least the {schedule.n_replicas} replicas)")
    if 0 < schedule.second_batch < schedule.n_replicas:
        p.error(f"--second-batch 不能小于副本数 {schedule.n_replicas}，或者用 0 表示不算 "
                f"(must be 0 or at least the {schedule.n_replicas} replicas)")
    for batch, flag in ((schedule.global_batch, "--global-batch"), (schedule.second_batch, "--second-batch")):
        if batch and batch // schedule.n_replicas < schedule.n_micro_batches:
            p.error(f"--micro-batches {schedule.n_micro_batches} 大于 {flag} 给每个副本的序列数 "
                    f"{batch // schedule.n_replicas} (more micro-batches than sequences per replica)")
    least_budget = schedule.genetic_population * (schedule.genetic_local_iters + 1)
    if schedule.genetic_budget < least_budget:
        p.error(f"--genetic-budget 至少要 {least_budget} (must be at least {least_budget})")
    note = unused_flags_note(args, given_flags(p, argv), {a.dest for a in g1._group_actions},
                             {a.dest for a in g2._group_actions})
    if note:
        print(note, file=sys.stderr)
    if args.demo == "1":   # pure arithmetic: no torch to import (about 1.5 s saved)
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
    started = time.perf_counter()
    results = {}
    pool = results_iter = None
    if args.demo in ("2", "all"):
        tiny_gpt.use_deterministic_threads()
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
    run_main(main, failures=gloo_ranks.LAUNCH_FAILURES)
