"""
第 9 讲 · 代码 5：去中心化训练——在慢速、异构的网络上分配任务、压缩通信
Lecture 9, code 5: decentralized training — scheduling on a slow, uneven network, and
compressing what workers send.

这个文件回答的问题 (the question)
    GPU 不在同一个数据中心，而是散落在几个地区、用比机房慢几十倍的网络连起来，还能训练基础模型吗？
    两个手段：(1) 聪明地分配任务（scheduling）——把通信量大的任务放在快的链路上；
    (2) 压缩要传的数据（gradient compression）。

    演示 1（demo 1）：32 张卡分在 4 个地区，把 4 个流水线阶段 × 8 个数据并行副本的任务分给它们。
      随机分配、两种手工分配、局部搜索（严格 / 允许平移）、Yuan et al. 的遗传算法，
      以及可以证明的最优分配（proven optimum）：每种方法离最优有多远？比数据中心慢多少？
    演示 2（demo 2）：在第 1 讲的小 GPT 上做 4 个工作者的数据并行，每个工作者的梯度先压缩再"发送"：
      fp16、int8、top-1%、只发符号，有没有误差反馈（error feedback）；配 AdamW + 裁剪，以及带动量的 SGD。

对应讲义 (notes): lectures/lecture09_distributed_training.md 第 7 节

运行 (run):
    python3 code/lecture09/05_decentralized.py             # 全部，约 50 秒（2 核机器，中位数）
    python3 code/lecture09/05_decentralized.py --demo 1    # 只跑演示 1，约 4 秒
    python3 code/lecture09/05_decentralized.py --demo 2 --topk-ratio 0.05 --steps 600
    python3 code/lecture09/05_decentralized.py --network aws-world   # Yuan et al. 实测的 8 城市网络
    python3 code/lecture09/05_decentralized.py --quick     # 很小的设置，几秒钟（测试用）
    python3 code/lecture09/05_decentralized.py --help      # 所有参数

演示 2 训练 10 个小模型（表 (a) 7 个，表 (b) 3 个；--control 再加一个换了数据顺序的对照），各 300 步，
每个约 10 秒；在 --jobs 个进程里并行（默认 2；每个进程 1 个 torch 线程，结果与进程数无关）。
前向计算用 bf16 混合精度（--fp32 关掉）。
表格每次运行都一样；用时（elapsed）打印到 stderr。
需要 (needs): numpy、torch；本目录的 dist_sim.py、compression.py；code/lecture01 的
fm_world.py、tiny_gpt.py、console.py。从随机初始化开始训练，不读也不写第 1 讲的缓存。
"""

import argparse
import functools
import math
import multiprocessing
import random
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "lecture01"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import dist_sim  # noqa: E402
import tiny_gpt  # noqa: E402
from cli_args import non_negative_float, non_negative_int, positive_float, positive_int, ratio  # noqa: E402
from compression import ErrorFeedback, compress_vector  # noqa: E402
from console import histogram_lines, pad, print_header, print_table  # noqa: E402


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
    steps: int = 300
    n_workers: int = 4
    batch_size: int = 32              # global batch: 8 sequences per worker
    adamw_lr: float = 3e-3            # lecture 1's recipe
    weight_decay: float = 0.1
    betas: tuple = (0.9, 0.95)
    clip_norm: float = 1.0            # global clipping after aggregation
    sgd_lr: float = 0.3               # table (b): plain momentum SGD, the setting error feedback was designed for
    sgd_momentum: float = 0.9
    topk_ratio: float = 0.01          # top-1%
    model_seed: int = 0
    data_seed: int = 1
    control: bool = False             # one extra uncompressed run with another data order (--control): the noise floor
    bf16: bool = True                 # mixed-precision forward passes (tiny_gpt.lm_loss); --fp32 turns it off
    world_seed: int = 0
    jobs: int = 2                     # training processes at once (2 cores)


QUICK_SCHEDULE = dict(n_random=20, restarts=2, strict_iters=200, sideways_iters=600, genetic_budget=600,
                      genetic_population=3, genetic_local_iters=100)
QUICK_COMPRESSION = dict(steps=12)


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


def multi_start_local_search(cost, setup, n_iters, sideways):
    """Best of setup.restarts local searches from random layouts; returns (best, costs).

    Restart i shuffles with random.Random(100 + i) and searches with random.Random(200 + i),
    the draft's seeds, so every run of this script gives the same table.
    """
    runs = []
    for restart in range(setup.restarts):
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


def run_demo1(setup, out=print):
    """Print demo 1; return its figures (for the observations and the tests)."""
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
    rng = random.Random(0)
    randoms = [dist_sim.random_assignment(range(n_gpus), setup.n_stages, setup.n_replicas, rng)
               for _ in range(setup.n_random)]
    random_costs = [cost(a) for a in randoms]
    random_stats = [dist_sim.layout_stats(a, geo, setup.n_stages, setup.n_replicas) for a in randoms]

    hand = {}
    for name, label, make in (("pipelines_in_regions", "按地区放流水线", dist_sim.pipelines_in_regions),
                              ("dp_groups_in_regions", "按地区放数据并行组", dist_sim.dp_groups_in_regions)):
        try:
            layout = make(geo, setup.n_stages, setup.n_replicas)
            hand[name] = (layout, cost(layout))
        except ValueError as why:        # e.g. 8 cities of 4 GPUs cannot hold a DP group of 8
            hand[name] = (None, None)
            out(f"（{label}在这个网络上放不下 does not fit: {why}）")

    (strict_best, strict_runs) = multi_start_local_search(cost, setup, setup.strict_iters, sideways=False)
    (side_best, side_runs) = multi_start_local_search(cost, setup, setup.sideways_iters, sideways=True)
    genetic = [dist_sim.genetic_search(cost, seed=seed, population=setup.genetic_population,
                                       max_evaluations=setup.genetic_budget,
                                       local_iters=setup.genetic_local_iters)
               for seed in range(setup.restarts)]
    genetic_best = min(genetic, key=lambda g: g.cost)
    optimum = dist_sim.optimal_layout(geo, setup.n_stages, setup.n_replicas, setup.stage_param_bytes,
                                      setup.act_bytes)
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
            (f"局部搜索，允许平移（{setup.restarts} 次里最好的）", side_best[1]),
            (f"遗传算法 genetic（{setup.restarts} 个种子里最好的，各 {setup.genetic_budget // 1000}k 次）", genetic_best.cost)]
    table = [(name, fmt(c), ratio(c), gap(c)) for name, c in rows]
    table.append((opt_label, fmt(optimum.cost), ratio(optimum.cost), "0" if optimum.exact else "—"))
    table.append((f"对照：同一个数据中心（{setup.datacenter_gbps:g} Gbit/s）", fmt(dc_cost), "1.0", ""))
    print_table(["分配方式 layout", "每次迭代的通信时间", "÷ 数据中心", gap_header], table)

    out("\n每次重启 / 每个种子各自的结果（秒）：")
    out(f"  局部搜索，严格下降（各 {setup.strict_iters} 次提议）："
        + "、".join(f"{c:.2f}" for c in strict_runs))
    out(f"  局部搜索，允许平移（各 {setup.sideways_iters} 次提议）："
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
                  ("局部搜索（允许平移）最好的", side_best[0]),
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
               ("严格局部搜索", strict_best[1]), ("平移局部搜索", side_best[1]),
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


def demo1_observations(setup, r, out=print):
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
        out(f" 2. 两种手工分配{how_far}：{hand_pp:.2f} 秒（流水线在地区内）对 {hand_dp:.2f} 秒（数据并行组在地区内）。"
            f"把{winner}留在地区内、让{loser}跨地区更好。")
        out(f"    流水线每个副本每次迭代要穿过 {setup.n_stages - 1} 个切口、每个切口前向反向各传 {setup.act_bytes / 1e9:.2f} GB"
            f"（一条流水线共 {act_total_gb:.1f} GB，串行相加）；数据并行每个阶段交换 {grad_gb:.2f} GB 梯度，"
            f"但分给 {setup.n_replicas} 个副本各传一份（{grad_gb / setup.n_replicas:.3f} GB）并且各阶段同时进行（取最大）。")
        out("    哪种通信更重取决于 batch、模型大小和切法——所以要用代价模型去算，而不是凭直觉。")
    else:
        out(" 2. 这个网络的地区放不下整个数据并行组，只能比较'流水线在地区内'这一种手工分配。")
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
        + f"允许平移（代价不变也接受）后，{setup.restarts} 次重启里有 {side_beats} 次不差于最好的手工分配"
        f"（严格下降：{strict_beats} 次）；最好的一次 {r['side_best'][1]:.2f} 秒。")
    ga = r["genetic"]
    hand_best = min((x for x in (hand_pp, hand_dp) if x is not None), default=None)
    ga_beats = sum(g.cost <= hand_best for g in ga) if hand_best is not None else 0
    out(f" 4. 遗传算法（Yuan et al. 2022 的调度器，仿 Kang & Moon 2000：整组交叉 + 局部搜索）每个种子只用 "
        f"{setup.genetic_budget:,} 次代价计算（平移局部搜索 {setup.restarts} 次重启一共 {setup.restarts * setup.sideways_iters:,} 次），"
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
    out(f" 6. 只看通信，地理分布的{'最优' if opt.exact else '最好'}分配比数据中心慢 {comm_ratio:.1f} 倍；"
        f"加上每次迭代 {r['compute_s']:.1f} 秒的计算（不和通信重叠）后，慢 {geo_total / slow['dc']:.2f} 倍"
        f"（随机分配慢 {slow['random'] / slow['dc']:.2f} 倍）。")
    out(f"    Yuan et al. 2022 报告：去中心化训练只比数据中心慢 1.7–3.5 倍，调度器比随机分配最多快 2.7 倍。"
        f"这里随机分配的端到端时间是{'最优' if opt.exact else '最好'}分配的 {slow['random'] / geo_total:.1f} 倍，"
        "比论文大得多：我们的随机基线完全不看网络，而每一条跨地区的边都很慢。")


# =============================================================================
# Demo 2: gradient compression in data-parallel training
# =============================================================================

@dataclass(frozen=True)
class CompressionRun:
    label: str
    optimizer: str        # "adamw" (with clipping) or "sgd" (momentum, no clipping)
    scheme: str           # compression.SCHEMES
    error_feedback: bool
    data_seed_override: int = -1   # >= 0 for the control run only


TABLE_A = (CompressionRun("不压缩（fp32）", "adamw", "none", False),
           CompressionRun("fp16", "adamw", "fp16", False),
           CompressionRun("int8（整个向量一个缩放因子）", "adamw", "int8", False),
           CompressionRun("top-k，没有误差反馈", "adamw", "topk", False),
           CompressionRun("top-k，有误差反馈", "adamw", "topk", True),
           CompressionRun("只发符号，没有误差反馈", "adamw", "sign", False),
           CompressionRun("只发符号，有误差反馈", "adamw", "sign", True))
CONTROL_RUN = CompressionRun("（对照）不压缩，换一个数据顺序", "adamw", "none", False, data_seed_override=2)
# Differences smaller than this (bits per character) are not called better or worse. The
# --control run measures how much a different data order alone moves the result; at the
# defaults it moved it by about 0.01 (see the notes), so we leave twice that.
NOISE_TOLERANCE_BPC = 0.02
TABLE_B = (CompressionRun("不压缩（fp32）", "sgd", "none", False),
           CompressionRun("top-k，没有误差反馈", "sgd", "topk", False),
           CompressionRun("top-k，有误差反馈", "sgd", "topk", True))


@functools.lru_cache(maxsize=2)
def world_tokens(world_seed):
    """(train, val) token tensors, built once per process."""
    return tiny_gpt.load_world_tokens(world_seed)


def compressed_backward(n_workers, scheme, error_feedback, topk_ratio, stats, bf16=True):
    """A `backward` for tiny_gpt.train: the batch is split across n_workers simulated
    workers; each computes its own gradient, compresses it (with its own error-feedback
    memory if asked) and 'sends' it; p.grad becomes the average of what was received.
    stats collects wire bytes per worker per step and how many entries reached the receiver
    as exact zeros (int8 rounds small entries to zero)."""
    feedback = [ErrorFeedback() for _ in range(n_workers)] if error_feedback else None

    def backward(model, x, y):
        params = list(model.parameters())
        per_worker = x.size(0) // n_workers
        received = None
        losses = []
        for w in range(n_workers):
            xs, ys = x[w * per_worker:(w + 1) * per_worker], y[w * per_worker:(w + 1) * per_worker]  # (b, T)
            for p in params:
                p.grad = None
            loss = tiny_gpt.lm_loss(model, xs, ys, bf16=bf16)
            loss.backward()
            grad = torch.cat([p.grad.reshape(-1) for p in params])           # (n,) this worker's gradient
            if feedback is not None:
                sent, wire_bytes = feedback[w].compress(grad, scheme, topk_ratio)
            else:
                sent, wire_bytes = compress_vector(grad, scheme, topk_ratio)
            received = sent if received is None else received + sent
            losses.append(loss.item())
            stats["wire_bytes"] = wire_bytes
            stats["zeros"] += int((sent == 0).sum()) - int((grad == 0).sum())
            stats["entries"] += grad.numel()
        average = received / n_workers                                           # (n,)
        offset = 0
        for p in params:
            p.grad = average[offset:offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        return sum(losses) / n_workers

    return backward


def train_compressed(run, setup):
    """Train BASE_CONFIG from scratch with compressed worker gradients; return figures.

    The worker's view is exact: with scheme "none" the average of the four worker
    gradients equals the gradient of the whole batch (tests check this)."""
    tiny_gpt.use_deterministic_threads()
    started = time.perf_counter()
    train_data, val_data = world_tokens(setup.world_seed)
    model = tiny_gpt.make_model(tiny_gpt.BASE_CONFIG, seed=setup.model_seed)
    data_seed = run.data_seed_override if run.data_seed_override >= 0 else setup.data_seed
    if run.optimizer == "adamw":
        config = tiny_gpt.TrainConfig(steps=setup.steps, batch_size=setup.batch_size, peak_lr=setup.adamw_lr,
                                      weight_decay=setup.weight_decay, beta1=setup.betas[0],
                                      beta2=setup.betas[1], clip_norm=setup.clip_norm, data_seed=data_seed)
        optimizer = tiny_gpt.make_adamw(model, config)
    else:
        config = tiny_gpt.TrainConfig(steps=setup.steps, batch_size=setup.batch_size, peak_lr=setup.sgd_lr,
                                      clip_norm=0, data_seed=data_seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=setup.sgd_lr, momentum=setup.sgd_momentum)
    stats = {"wire_bytes": 0, "zeros": 0, "entries": 0}
    backward = compressed_backward(setup.n_workers, run.scheme, run.error_feedback, setup.topk_ratio, stats,
                                   bf16=setup.bf16)
    losses = tiny_gpt.train(model, train_data, config, optimizer=optimizer, backward=backward)
    n = model.n_params()
    return {"label": run.label, "bpc": tiny_gpt.bits_per_char(model, val_data),
            "bytes_per_element": stats["wire_bytes"] / n, "n_params": n,
            "zeroed_fraction": stats["zeros"] / stats["entries"],
            "final_train_bits": sum(losses[-10:]) / min(10, len(losses)) / math.log(2),
            "diverged": not all(math.isfinite(l) for l in losses),
            "seconds": time.perf_counter() - started}


def _train_job(args):
    run, setup = args
    return train_compressed(run, setup)


def start_training(setup, runs):
    """An iterator of results in the order of `runs`; with setup.jobs > 1 the runs train in
    that many worker processes (spawn: each process starts clean with one torch thread)."""
    jobs = [(run, setup) for run in runs]
    if setup.jobs <= 1:
        return None, map(_train_job, jobs)
    pool = multiprocessing.get_context("spawn").Pool(min(setup.jobs, len(jobs)))
    return pool, pool.imap(_train_job, jobs)


def print_demo2(setup, results_iter, runs_a, runs_b, started, out=print):
    """Print the two tables row by row as results arrive; return results by table."""
    print_header(f"演示 2：梯度压缩（{setup.n_workers} 个工作者的数据并行，从随机初始化训练 {setup.steps} 步，"
                 f"batch {setup.batch_size} = {setup.n_workers} × {setup.batch_size // setup.n_workers}）")
    out(f"模型：第 1 讲的 BASE_CONFIG（{tiny_gpt.make_model(tiny_gpt.BASE_CONFIG, 0).n_params():,} 个参数）；"
        f"每步每个工作者发送一个梯度向量；top-k 保留 {setup.topk_ratio:.1%}；验证集 bits/字符越低越好")
    widths = (36, 16, 16, 18)
    header = (pad("压缩方式", widths[0]) + pad("每个数平均字节", widths[1], ">")
              + pad("通信量 ÷ fp32", widths[2], ">") + pad("验证集 bits/字符", widths[3], ">"))
    tables = {}
    for key, title, runs in (("a", f"(a) AdamW（lr {setup.adamw_lr:g}）+ 聚合后全局裁剪到 {setup.clip_norm:g}（第 1 讲的训练配方）", runs_a),
                             ("b", f"(b) 带动量的 SGD（lr {setup.sgd_lr:g}，动量 {setup.sgd_momentum:g}），不裁剪（误差反馈的经典设定）", runs_b)):
        out(f"\n{title}")
        out(header)
        out("-" * sum(widths))
        tables[key] = []
        for run in runs:
            r = next(results_iter)
            tables[key].append(r)
            bpc = f"{r['bpc']:.4f}" if math.isfinite(r["bpc"]) else "发散 diverged"
            out(pad(run.label, widths[0]) + pad(f"{r['bytes_per_element']:.3f}", widths[1], ">")
                + pad(f"{r['bytes_per_element'] / 4:.4f}", widths[2], ">") + pad(bpc, widths[3], ">"))
            sys.stdout.flush()
            print(f"    （已用 elapsed {time.perf_counter() - started:.0f} 秒）", file=sys.stderr)
    return tables


def demo2_observations(setup, tables, out=print):
    a = {r["label"]: r for r in tables["a"]}
    b = {r["label"]: r for r in tables["b"]}
    base = a[TABLE_A[0].label]
    control = a.get(CONTROL_RUN.label)
    tolerance = NOISE_TOLERANCE_BPC
    if control is not None:
        tolerance = max(tolerance, abs(control["bpc"] - base["bpc"]))

    def signed(d):
        return f"{d:+.4f}" if round(d, 4) != 0 else "0.0000"   # never print "-0.0000"

    def compare(x, ref):
        d = x - ref
        if abs(d) <= tolerance:
            return f"和不压缩差不多（{x:.4f} 对 {ref:.4f}，差 {signed(d)}，在 ±{tolerance:.4f} 之内）"
        return f"{'更差' if d > 0 else '更好'}（{x:.4f} 对 {ref:.4f}，差 {signed(d)}）"

    fp16, int8 = a[TABLE_A[1].label], a[TABLE_A[2].label]
    topk_a, topk_a_ef = a[TABLE_A[3].label], a[TABLE_A[4].label]
    sign_a, sign_a_ef = a[TABLE_A[5].label], a[TABLE_A[6].label]
    sgd, topk_b, topk_b_ef = (b[r.label] for r in TABLE_B)
    sends = setup.steps * setup.topk_ratio
    out("\n观察 Observations（演示 2）：")
    if control is not None:
        out(f" 0. 先量一量'噪声'：只换数据顺序（不压缩），bits/字符从 {base['bpc']:.4f} 变成 {control['bpc']:.4f}"
            f"（差 {abs(control['bpc'] - base['bpc']):.4f}）。比 ±{tolerance:.4f} 还小的差别，这个小实验说不清。")
    else:
        out(f" 0. 比 ±{tolerance:.2f} bits 还小的差别，这个 {setup.steps} 步的小实验说不清（加 --control 再训练一个"
            "只换了数据顺序的对照，量一量噪声有多大）。")
    out(f" 1. fp16：通信量减半，结果{compare(fp16['bpc'], base['bpc'])}。int8（整个向量一个缩放因子）：通信量 1/4，"
        f"结果{compare(int8['bpc'], base['bpc'])}；缩放因子由最大的那个梯度决定，平均 {int8['zeroed_fraction']:.0%} "
        "的分量被舍入成 0。实际系统按块（block-wise，如 bitsandbytes 每 4096 个一块）各用一个缩放因子。")
    def shown(r):
        return "发散（loss 变成 NaN）" if not math.isfinite(r["bpc"]) else f"{r['bpc']:.4f}"

    out(f" 2. top-{setup.topk_ratio:.0%}：每步每个工作者只发 {setup.topk_ratio:.0%} 的分量，{setup.steps} 步里每个分量平均只被发出 "
        f"{sends:g} 次。AdamW 下没有误差反馈 {shown(topk_a)}、有误差反馈 {shown(topk_a_ef)}（不压缩 {shown(base)}）；"
        f"带动量的 SGD 下没有误差反馈 {shown(topk_b)}、有误差反馈 {shown(topk_b_ef)}（不压缩 {shown(sgd)}）。")
    gain_adam = topk_a["bpc"] - topk_a_ef["bpc"]
    adam_text = f"让 AdamW {'好了' if gain_adam > 0 else '差了'} {abs(gain_adam):.4f}"
    if not math.isfinite(topk_b["bpc"]) and math.isfinite(topk_b_ef["bpc"]):
        out(f"    没有误差反馈时，其余 {1 - setup.topk_ratio:.0%} 的分量这一步的梯度直接丢掉，这次 SGD（lr {setup.sgd_lr:g}）"
            f"训练发散了；误差反馈把丢掉的部分攒起来以后再发，同样的设置能训练到 {topk_b_ef['bpc']:.4f}。"
            f"误差反馈{adam_text}：对 SGD 帮助更大。")
    else:
        gain_sgd = topk_b["bpc"] - topk_b_ef["bpc"]
        out(f"    误差反馈让 SGD {'好了' if gain_sgd > 0 else '差了'} {abs(gain_sgd):.4f}，{adam_text}"
            + ("：对 SGD 帮助更大。" if gain_sgd > gain_adam else "：这次对 AdamW 的帮助不比 SGD 小。"))
    sign_better = "不用" if sign_a["bpc"] < sign_a_ef["bpc"] else "用"
    out(f" 3. 只发符号（每个分量 1 bit）：AdamW 下没有误差反馈 {sign_a['bpc']:.4f}，有误差反馈 {sign_a_ef['bpc']:.4f}"
        f"——这次{sign_better}误差反馈更好。Adam 的更新本来就按每个分量的大小归一化，方向主要由符号决定，所以只发符号丢的信息不多；"
        "误差反馈累积的残差则要先经过聚合后的全局裁剪（把范数压到 "
        f"{setup.clip_norm:g}）和 Adam 的归一化，不再是'晚一点发出去'那么简单。")
    out(" 4. 这正是 1-bit Adam（Tang et al. 2021）的出发点：带误差补偿的压缩对 SGD 这类线性的优化器有效，"
        "对 Adam 这种非线性的优化器不能直接用。他们先用普通 Adam 热身，等方差项稳定后冻结它，再对动量做 1 bit 压缩"
        "（工作者和服务器两边都有误差反馈）：通信量最多少到 1/5，BERT-Large 预训练吞吐最多提高到 3.3 倍。")
    out(" 结论：压缩会和优化器、梯度裁剪互相影响，不能单独设计；这个几百步的玩具实验展示机制，不能决定哪种方法更好。")


# =============================================================================
# Command line
# =============================================================================

def parse_args(argv=None):
    s, c = ScheduleSetup(), CompressionSetup()
    p = argparse.ArgumentParser(
        description="第 9 讲代码 5：去中心化训练 (lecture 9 code 5: decentralized training)",
        epilog="例 example: --demo 1 --network aws-world；--demo 2 --topk-ratio 0.05")
    p.add_argument("--demo", choices=("1", "2", "all"), default="all", help="跑哪个演示 (default all)")
    p.add_argument("--quick", action="store_true", help="很小的设置，几秒钟跑完（冒烟测试 smoke test）")
    p.add_argument("--seed", type=non_negative_int, default=s.net_seed,
                   help="演示 1 随机网络的种子，也是演示 2 模型初始化的种子 (default 0)")
    g1 = p.add_argument_group("演示 1 demo 1")
    g1.add_argument("--network", choices=("random",) + tuple(dist_sim.PRESETS), default=s.network,
                    help="random: 随机抽的 4 地区网络；aws-world / aws-regional: Yuan et al. 实测的 AWS 链路")
    g1.add_argument("--intra-gbps", type=positive_float, default=s.intra_gbps, help="地区内带宽 Gbit/s (default 10)")
    g1.add_argument("--inter-gbps", type=positive_float, nargs=2, metavar=("LO", "HI"), default=s.inter_gbps_range,
                    help="地区之间带宽范围 Gbit/s (default 0.3 1.3)")
    g1.add_argument("--inter-latency-ms", type=non_negative_float, nargs=2, metavar=("LO", "HI"),
                    default=s.inter_latency_ms_range, help="地区之间延迟范围 ms (default 10 250)")
    g1.add_argument("--global-batch", type=positive_int, default=s.global_batch,
                    help="全局 batch（序列数），决定激活流量 (default 1024)")
    g1.add_argument("--random-layouts", type=positive_int, default=s.n_random, help="随机分配的个数 (default 200)")
    g1.add_argument("--restarts", type=positive_int, default=s.restarts,
                    help="局部搜索重启次数，也是遗传算法的种子数 (default 5)")
    g1.add_argument("--strict-iters", type=non_negative_int, default=s.strict_iters, help="严格局部搜索每次的提议数 (default 3000)")
    g1.add_argument("--sideways-iters", type=non_negative_int, default=s.sideways_iters, help="平移局部搜索每次的提议数 (default 20000)")
    g1.add_argument("--genetic-budget", type=positive_int, default=s.genetic_budget,
                    help="遗传算法每个种子的代价计算次数 (default 40000)")
    g2 = p.add_argument_group("演示 2 demo 2")
    g2.add_argument("--steps", type=positive_int, default=c.steps, help="训练步数 (default 300)")
    g2.add_argument("--topk-ratio", type=ratio, default=c.topk_ratio, help="top-k 保留的比例 (default 0.01)")
    g2.add_argument("--jobs", type=positive_int, default=c.jobs, help="同时训练的进程数 (default 2)")
    g2.add_argument("--control", action="store_true",
                    help="多训练一个只换数据顺序的不压缩对照，量一量噪声 (one more run: the noise floor)")
    g2.add_argument("--fp32", action="store_true",
                    help="前向不用 bf16 混合精度（没有 AVX512-BF16 的 CPU 上可能更快）pure fp32 forward")
    args = p.parse_args(argv)
    for name in ("inter_gbps", "inter_latency_ms"):
        lo, hi = getattr(args, name)
        if lo > hi:
            p.error(f"--{name.replace('_', '-')}: LO ({lo:g}) 大于 HI ({hi:g})")
    schedule = replace(s, network=args.network, intra_gbps=args.intra_gbps, inter_gbps_range=tuple(args.inter_gbps),
                       inter_latency_ms_range=tuple(args.inter_latency_ms), net_seed=args.seed,
                       global_batch=args.global_batch, n_random=args.random_layouts, restarts=args.restarts,
                       strict_iters=args.strict_iters, sideways_iters=args.sideways_iters,
                       genetic_budget=args.genetic_budget)
    compression = replace(c, steps=args.steps, topk_ratio=args.topk_ratio, jobs=args.jobs, model_seed=args.seed,
                          control=args.control, bf16=not args.fp32)
    if args.quick:
        schedule = replace(schedule, **QUICK_SCHEDULE)
        compression = replace(compression, **QUICK_COMPRESSION)
    if schedule.global_batch < schedule.n_replicas:
        p.error(f"--global-batch must be at least the {schedule.n_replicas} replicas")
    if schedule.genetic_budget < schedule.genetic_population * (schedule.genetic_local_iters + 1):
        p.error(f"--genetic-budget must be at least {schedule.genetic_population * (schedule.genetic_local_iters + 1)}")
    return args, schedule, compression


def main(argv=None):
    args, schedule, compression = parse_args(argv)
    tiny_gpt.use_deterministic_threads()
    started = time.perf_counter()
    results = {}
    pool = results_iter = None
    runs_a = TABLE_A + ((CONTROL_RUN,) if compression.control else ())
    runs_b = TABLE_B
    if args.demo in ("2", "all"):
        # Training starts first, in worker processes, so it overlaps demo 1's search.
        pool, results_iter = start_training(compression, runs_a + runs_b)
    try:
        if args.demo in ("1", "all"):
            results["demo1"] = run_demo1(schedule)
            demo1_observations(schedule, results["demo1"])
            print()
        if args.demo in ("2", "all"):
            tables = print_demo2(compression, results_iter, runs_a, runs_b, started)
            demo2_observations(compression, tables)
            results["demo2"] = tables
    finally:
        if pool is not None:
            pool.terminate()
    print(f"（总用时 total {time.perf_counter() - started:.1f} 秒）", file=sys.stderr)
    return results


if __name__ == "__main__":
    main()
