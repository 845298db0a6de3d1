"""Demo 1 of code 5, printed: the job and its network, the results table, the anatomy of
the searches, the second instance and the end-to-end iteration (lecture 9, §5.2-§5.5).

run_demo1 makes the searches (schedule_study) and prints every table; the observations
that read these tables are in demo1_observations.py. Pure arithmetic: no torch.
"""

import sys
import time
from dataclasses import dataclass

from lecture01.console import (LINE_WIDTH, StatusLine, display_width, format_table, histogram_lines,
                               print_header, print_table, print_wrapped)
from lecture09.schedule import schedule_study
from lecture09.schedule.geo_network import PRESETS
from lecture09.schedule.hand_layouts import layout_stats
from lecture09.schedule.layout_optimum import optimal_layout
from lecture09.schedule.network_figures import GEO_INTRA_GBPS, GEO_INTRA_LATENCY_MS
from lecture09.schedule.schedule_setup import build_networks, datacenter_comm_s


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
    geo: dict                   # the network (geo_network.Network)
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
            f"地点内 {GEO_INTRA_GBPS:g} Gbit/s、{GEO_INTRA_LATENCY_MS:g} ms）")
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
        st = layout_stats(layout, geo, setup.n_stages, setup.n_replicas)
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
        paper = optimal_layout(paper_geo, setup.n_stages, setup.n_replicas, setup.stage_param_bytes,
                                        setup.act_bytes, n_micro_batches=setup.n_micro_batches)
        for name, make in PRESETS.items():
            net = make()
            if len(net["region"]) == setup.n_gpus:
                best = optimal_layout(net, setup.n_stages, setup.n_replicas, setup.stage_param_bytes,
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
