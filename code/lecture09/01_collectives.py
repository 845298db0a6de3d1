"""
第 9 讲 · 代码 1：通信原语——用点对点消息写出 broadcast、reduce、all-reduce、reduce-scatter、all-gather
Lecture 9, code 1: collectives written from point-to-point messages, and what they cost.

这个文件回答的问题 (the question)
    数据并行每一步都要把所有工作者（worker）的梯度加起来再发回去（all-reduce）。
    同样是"加起来"，三种做法——朴素（naive：全交给一个人加，再发回）、树（tree）、环（ring）——
    各要发多少字节、多少轮消息？α–β 模型（延迟 + 带宽）预测的时间和真实进程上量出来的差多少？

    演示 1（demo 1）：4 个工作者的环形 all-reduce，一轮一轮地看每个人手里的数。
    演示 2（demo 2）：5 种原语 × 3 种算法，在本进程里模拟 p = 1…64 个工作者，检查结果等于真正的和；
      每种算法的轮数和关键路径字节数，和 alpha_beta.py 的公式对照。
    演示 3（demo 3）：每个工作者要发多少字节，随 p 怎样变（环形 2(p−1)/p·n 几乎不变，朴素随 p 线性增长）。
    演示 4（demo 4）：α–β 模型下时间随消息大小怎样变：小消息受延迟限制（latency-bound），大消息受带宽限制。
    演示 5（demo 5）：在本机回环网络（loopback）上起 p = 2…4 个真的 gloo 进程，运行同样的消息序列，
      和 torch.distributed.all_reduce 对比计时，用最小二乘拟合 α 和 β，列出模型和实测不一致的地方。
    演示 6（demo 6）：all-to-all（每人给每人不同的一块，MoE 分发 token 用的就是它）：成对交换和经根两种写法，
      字节、轮数和 α–β 时间，和环形 all-reduce 并列；在真的 gloo 进程上和 torch.distributed.all_to_all_single 对照。
    演示 7（demo 7，只在 --links 或 --demo 7 时跑）：5 种原语 × 3 种算法在真的 gloo 进程上，每条消息走一条模拟链路
      （network/gloo_links.py），实测时间和同一个 α、β 的模型并列，按轮同步的对照说明两者为什么不同。

对应讲义 (notes): lectures/lecture09/01_collectives.md 第 1 节（第 2 节和第 5 节引用它）

运行 (run):
    python3 code/lecture09/01_collectives.py               # 全部，2 核机器上十几秒（见 README）
    python3 code/lecture09/01_collectives.py --demo 1      # 只看环形 all-reduce 的例子，瞬间
    python3 code/lecture09/01_collectives.py --demo 4 --latency-us 10 --bandwidth-gbps 100
    python3 code/lecture09/01_collectives.py --real-p 3 --repeats 9
    python3 code/lecture09/01_collectives.py --links 20 100   # 演示 7，13.2 s（README）
    python3 code/lecture09/01_collectives.py --quick       # 很小的设置（测试用）
    python3 code/lecture09/01_collectives.py --help

演示 1–4 是纯算术，在任何机器上逐位相同；演示 5 的计时随机器、负载变（标着"实测"），只有"结果等于真正的和"
是确定的。gloo 进程由 gloo_ranks.py 启动和收尾（Ctrl-C 也不会留下进程），每个进程一个 torch 线程。
需要 (needs): numpy、torch；ranks/ 的 alpha_beta.py、collectives.py、gloo_ranks.py、collectives_report.py
（演示 5），dist_sim.py（数据中心链路的数字）；code/lecture01 的 console.py、cli_args.py。
"""

import sys
import time
from dataclasses import dataclass, replace

try:
    import lecture01  # noqa: F401  the course toolkit, installed by `pip install -r requirements.txt`
except ModuleNotFoundError:
    import _course_path  # noqa: F401  a clone without that install (see that file)

from lecture09.ranks import alpha_beta
from lecture09 import dist_sim  # only its FIGURES table: the data-center link
from lecture09.ranks import gloo_ranks  # no torch at import: --help stays fast
from lecture09.ranks.alpha_beta import ALGORITHMS, COLLECTIVES
from lecture09.ranks.collectives_report import demo6_observation, run_demo5, run_demo6
from lecture09.network import collectives_links  # demo 7; no torch at import
from lecture01.cli_args import (Parser, add_figures_flag, given_flags, note_quick_overrides, run_main, int_in,
                                float_in, positive_float)
from lecture01.console import print_header, print_table, print_wrapped, utf8_output


# =============================================================================
# Settings a student may change (flags below override them)
# =============================================================================

@dataclass(frozen=True)
class ModelSetup:
    """Demos 2-4: the α–β model on a data-center link (dist_sim.FIGURES, the same as §5)."""
    n_bytes: int = 2**20              # 1 MiB per worker: a multiple of every p below, so every formula is exact
    world_sizes: tuple = (2, 4, 8, 16, 32, 64)
    check_world_sizes: tuple = tuple(range(1, 18)) + (31, 32, 33, 64)   # powers of two and their neighbours
    size_table_p: int = 16            # demo 4's number of workers
    sizes_bytes: tuple = tuple(2**k for k in range(10, 31, 4))          # 1 KiB ... 1 GiB
    latency_s: float = dist_sim.DATACENTER_LATENCY_MS / 1e3             # α: 0.1 ms, one data-center hop
    bandwidth_gbps: float = dist_sim.DATACENTER_GBPS                    # β: 25 Gbit/s (Yuan et al.'s data center)

    @property
    def bandwidth_bytes_per_s(self):
        return self.bandwidth_gbps * 1e9 / 8


@dataclass(frozen=True)
class RealSetup:
    """Demo 5: real gloo processes on loopback."""
    world_sizes: tuple = (2, 3, 4)    # 4 processes on 2 cores is already oversubscribed
    sizes: tuple = (16, 256, 4096, 65536, 262144, 1048576)   # fp32 elements: 64 B ... 4 MiB
    repeats: int = 5                  # median of 5 after one warm-up: one slow repeat does not move it
    check_elements: int = 10          # small integer vectors for the 15 correctness checks per p
    timeout_s: float = 120.0          # gloo_ranks stops every process after this
    disagree_factor: float = 1.5      # "the model is off" when measured/model is outside [1/1.5, 1.5]


QUICK_MODEL = dict(world_sizes=(2, 4, 8), check_world_sizes=(1, 2, 3, 4, 5, 8), size_table_p=8,
                   sizes_bytes=(2**10, 2**20, 2**30))
QUICK_REAL = dict(world_sizes=(2, 3), sizes=(16, 4096, 65536), repeats=2)
WORKED_P = 4                          # demo 1: four workers, one number per chunk
DEFAULT_LINK = (20.0, 100.0)          # demo 7: α = 20 ms, 100 Mbit/s (ring beats tree above 200 kB)
QUICK_LINKS = dict(keys=(("all-reduce", "tree"), ("all-reduce", "ring")))


# =============================================================================
# Demo 1: ring all-reduce, round by round
# =============================================================================

def worked_inputs(p):
    """Worker i holds (i+1) x (1, 2, ..., p): the sum is (1 + ... + p) x (1, ..., p)."""
    import torch
    return [torch.arange(1, p + 1, dtype=torch.float32) * (i + 1) for i in range(p)]


def run_demo1(p=WORKED_P, out=print_wrapped):
    from lecture09.ranks import collectives
    inputs = worked_inputs(p)
    print_header(f"演示 1 demo 1：{p} 个工作者的环形 all-reduce（ring all-reduce），每人 {p} 个数 = {p} 块（chunk）")
    out(f"工作者 w_i 把向量切成 {p} 块，每轮把一块发给右边的邻居 w_(i+1 mod {p})。"
        f"前 {p - 1} 轮 reduce-scatter（收到的块加到自己的块上），后 {p - 1} 轮 all-gather（收到的块直接覆盖）。")
    state = [x.clone() for x in inputs]
    rows = [["开始 start", "—"] + [" ".join(f"{v:g}" for v in x.tolist()) for x in state]]
    phases = [("RS", collectives.ring_reduce_scatter(p)), ("AG", collectives.ring_all_gather(p))]
    for name, rounds in phases:
        for number, rnd in enumerate(rounds, 1):
            state = collectives.simulate([rnd], state)
            sent = " ".join(str(t.lo) for t in sorted(rnd, key=lambda t: t.src))
            rows.append([f"{name} 第 {number} 轮", sent] + [" ".join(f"{v:g}" for v in x.tolist()) for x in state])
    print_table(["轮 round", "w0..w3 发的块"] + [f"w{i}" for i in range(p)], rows)
    total = sum(x for x in inputs)
    ok = all(bool((x == total).all()) for x in state)
    out(f"（RS = reduce-scatter，AG = all-gather；\"发的块\"是 w0、w1、… 这一轮各自发出的块号。）"
        f"RS 结束时 w_i 的第 i 块已经是全体的和；AG 把这些和传一圈。最后每人都是 "
        f"{' '.join(f'{v:g}' for v in total.tolist())}：{'等于' if ok else '不等于'}真正的和。")
    per_worker = 2 * (p - 1)
    out(f"每个工作者发了 {per_worker} 次、每次 1 块（n/{p}）：共 2(p−1)/p·n = {per_worker}/{p}·n，"
        f"不管 p 多大都不到 2n。")
    return {"state": state, "ok": ok}


# =============================================================================
# Demo 2: every collective x algorithm, simulated, against the formulas
# =============================================================================

def run_demo2(setup, out=print_wrapped):
    from lecture09.ranks import collectives
    print_header("演示 2 demo 2：5 种原语 × 3 种算法，本进程模拟，结果和公式都检查")
    checked, failures = 0, []
    for p in setup.check_world_sizes:
        for key in collectives.SCHEDULES:
            rounds = collectives.schedule(*key, p)
            collectives.check_rounds(rounds, p)
            for n in (3 * p, 3 * p + 2):                 # chunks of equal and of unequal length
                inputs = collectives.integer_inputs(p, n, seed=p)
                checked += 1
                if not collectives.matches(key[0], inputs, collectives.simulate(rounds, inputs)):
                    failures.append((key, p, n))
    ps = ", ".join(str(p) for p in setup.check_world_sizes)
    out(f"p = {ps}：{checked} 次模拟，{checked - len(failures)} 次结果等于真正的和"
        f"（整数值的 fp32，和的顺序不影响结果，所以用 torch.equal 逐位比较）。")
    p, n = setup.size_table_p, setup.n_bytes
    rows, mismatches = [], 0
    for collective in COLLECTIVES:
        for algorithm in ALGORITHMS:
            stats = collectives.schedule_cost(collectives.schedule(collective, algorithm, p), n, p, element_bytes=1)
            rounds, path = alpha_beta.collective_cost(collective, algorithm, n, p)
            same = (stats.rounds, stats.path_bytes) == (rounds, path)
            mismatches += not same
            rows.append([collective, algorithm, stats.rounds, f"{stats.path_bytes:,}", f"{max(stats.bytes_sent):,}",
                         "✓" if same else "✗"])
    out(f"\np = {p}，每个工作者 n = {n:,} 字节（{alpha_beta.human_bytes(n)}）。关键路径字节数（path bytes）= 每轮最大"
        f"那条消息之和，时间 = 轮数·α + 关键路径字节数/β；\"= 公式\"对照 alpha_beta.collective_cost：")
    print_table(["原语 collective", "算法", "轮数 rounds", "关键路径字节", "最忙者发出字节", "= 公式"], rows)
    return {"checked": checked, "failures": failures, "formula_mismatches": mismatches}


# =============================================================================
# Demo 3: bytes per worker against p
# =============================================================================

def run_demo3(setup, out=print_wrapped):
    from lecture09.ranks import collectives
    n = setup.n_bytes
    print_header(f"演示 3 demo 3：一次 all-reduce（每人 n = {n:,} 字节），最忙的工作者发多少字节")
    rows, figures = [], {}
    for p in setup.world_sizes:
        sent = {alg: max(collectives.schedule_cost(collectives.schedule("all-reduce", alg, p), n, p, 1).bytes_sent)
                for alg in ALGORITHMS}
        figures[p] = sent
        times = {alg: alpha_beta.collective_time_s("all-reduce", alg, n, p, setup.latency_s,
                                                   setup.bandwidth_bytes_per_s) for alg in ALGORITHMS}
        rows.append([p, f"{sent['naive']:,}", f"{sent['tree']:,}", f"{sent['ring']:,}", f"{sent['ring'] / n:.4f}",
                     f"{times['naive'] * 1e3:.3f}", f"{times['tree'] * 1e3:.3f}", f"{times['ring'] * 1e3:.3f}"])
    print_table(["p", "朴素 naive", "树 tree", "环 ring", "环 ÷ n", "朴素 ms", "树 ms", "环 ms"], rows)
    out(f"字节数来自消息序列本身（collectives.schedule_cost）；ms 列是 α–β 模型在数据中心链路上的时间："
        f"α = {setup.latency_s * 1e3:g} ms，β = {setup.bandwidth_gbps:g} Gbit/s（dist_sim.FIGURES，和第 5 节同一张表）。")
    p = setup.size_table_p if setup.size_table_p in setup.world_sizes else max(setup.world_sizes)
    beta = setup.bandwidth_bytes_per_s
    parts = []
    for alg in ("ring", "tree"):
        rounds, path = alpha_beta.collective_cost("all-reduce", alg, n, p)
        parts.append(f"{alg} {rounds} 轮 × {setup.latency_s * 1e3:g} ms = {rounds * setup.latency_s * 1e3:.3f} ms，"
                     f"{path:,} 字节 ÷ {f'{beta:.4g}'.replace('e+0', 'e').replace('e+', 'e')} 字节/秒 = "
                     f"{path / beta * 1e3:.3f} ms，"
                     f"共 {alpha_beta.collective_time_s('all-reduce', alg, n, p, setup.latency_s, beta) * 1e3:.3f} ms")
    out(f"手算 p = {p} 这一行：" + "；".join(parts) + "。")
    return figures


# =============================================================================
# Demo 4: time against message size
# =============================================================================

def crossover_bytes(setup, p, fast_small, fast_large):
    """n at which algorithm fast_large's α–β time falls below fast_small's (times are linear in n)."""
    probe = p * 2**20                                 # any multiple of p: path bytes are proportional to n
    (r_small, b_small) = alpha_beta.collective_cost("all-reduce", fast_small, probe, p)
    (r_large, b_large) = alpha_beta.collective_cost("all-reduce", fast_large, probe, p)
    slope_gap = (b_small - b_large) / probe           # bytes on the path per byte of n
    if slope_gap <= 0:
        return None
    return (r_large - r_small) * setup.latency_s * setup.bandwidth_bytes_per_s / slope_gap


def demo4_sizes(sizes, p):
    """The message sizes of demo 4 for p workers: each size, rounded up to a multiple of p
    (the formulas cut n into p equal chunks); unchanged when p divides it (p a power of 2)."""
    return [n + (-n) % p for n in sizes]


def run_demo4(setup, out=print_wrapped):
    p = setup.size_table_p
    alpha, beta = setup.latency_s, setup.bandwidth_bytes_per_s
    print_header(f"演示 4 demo 4：p = {p} 个工作者的 all-reduce，时间随消息大小 n 怎样变（α–β 模型）")
    sizes = demo4_sizes(setup.sizes_bytes, p)
    if sizes != list(setup.sizes_bytes):
        out(f"p = {p} 不整除 2 的幂：每个 n 取不小于它的、{p} 的最小倍数（公式把 n 切成 {p} 块一样大的）。")
    rows = []
    for n in sizes:
        times = {alg: alpha_beta.collective_time_s("all-reduce", alg, n, p, alpha, beta) for alg in ALGORITHMS}
        best = min(ALGORITHMS, key=times.get)
        latency_part = 2 * (p - 1) * alpha / times["ring"]
        rows.append([alpha_beta.human_bytes(n)] + [f"{times[a] * 1e3:,.3f}" for a in ALGORITHMS]
                    + [best, f"{latency_part:.1%}"])
    print_table(["n", "朴素 naive ms", "树 tree ms", "环 ring ms", "最快", "环的延迟占比"], rows)
    crossover = alpha_beta.ring_crossover_bytes(p, alpha, beta)
    ring_beats_tree = crossover_bytes(setup, p, "tree", "ring")
    out(f"环形的延迟项 2(p−1)·α 和带宽项 2(p−1)/p·n/β 在 n = p·α·β = {crossover:,.0f} 字节处相等："
        f"比它小的消息受延迟限制（latency-bound：{2 * (p - 1)} 轮、每轮付一次 α），比它大的受带宽限制"
        f"（bandwidth-bound：时间和 n 成正比）。树只要 {2 * alpha_beta.tree_depth(p)} 轮，但每轮传整个 n；"
        f"n 大于 {ring_beats_tree:,.0f} 字节时环形更快。")
    return {"crossover_bytes": crossover, "ring_beats_tree_bytes": ring_beats_tree}


# =============================================================================
# Demo 5: real gloo processes
# =============================================================================


# =============================================================================
# Observations
# =============================================================================

def observations(setup, real, r, out=print_wrapped):
    out("\n观察 Observations：")
    n = setup.n_bytes
    if "demo3" in r:
        figures = r["demo3"]
        p_small, p_big = min(figures), max(figures)
        ring_big = figures[p_big]["ring"]
        out(f" 1. 环形 all-reduce 每个工作者发 2(p−1)/p·n：p = {p_small} 时 {figures[p_small]['ring']:,} 字节，"
            f"p = {p_big} 时 {ring_big:,} 字节（不到 2n = {2 * n:,}）。朴素的做法里根（root）要把和发给每一个人，"
            f"(p−1)·n：p = {p_big} 时 {figures[p_big]['naive']:,} 字节，是环形的 "
            f"{figures[p_big]['naive'] / ring_big:.0f} 倍；树的根发 ⌈log2 p⌉·n = {figures[p_big]['tree']:,} 字节。")
    if "demo4" in r:
        d4 = r["demo4"]
        out(f" 2. 小消息看轮数，大消息看字节：p = {setup.size_table_p} 时 n 小于 {d4['ring_beats_tree_bytes']:,.0f} 字节"
            f"树形更快（{2 * alpha_beta.tree_depth(setup.size_table_p)} 轮对 {2 * (setup.size_table_p - 1)} 轮），"
            f"更大时环形更快。NCCL 也是按消息大小在树和环之间选。")
    if "demo5" in r:
        d5 = r["demo5"]
        rows = d5["rows"]
        off = []
        for row in rows:
            for alg in ALGORITHMS:
                cost = row["cost"][alg]
                ratio = row["measured_s"][alg] / float(alpha_beta.model_s(cost.rounds, cost.path_bytes,
                                                                          d5["alpha_s"], d5["beta"]))
                if not (1 / real.disagree_factor <= ratio <= real.disagree_factor):
                    off.append((ratio, row, alg))
        total = len(rows) * len(ALGORITHMS)
        out(f" 3. [实测] 拟合出的 α ≈ {d5['alpha_s'] * 1e6:.0f} µs 比数据中心的一跳（100 µs）"
            f"{'小' if d5['alpha_s'] < 1e-4 else '大'}：回环上没有网线，一条消息的代价是系统调用、"
            f"gloo 的握手和 Python 的开销。{total} 个点里有 {len(off)} 个和模型差 {real.disagree_factor:g} 倍以上"
            + ("：" + "；".join(f"p = {row['p']}、{alpha_beta.human_bytes(row['bytes'])}、{alg} 实测÷模型 = {ratio:.2f}"
                               for ratio, row, alg in sorted(off, key=lambda o: -abs(o[0] - 1))[:4])
               if off else "") + "。")
        big = [row for row in rows if row["n"] == max(real.sizes)]
        comparisons = []
        for row in big:
            m, c = row["measured_s"], row["cost"]
            predicted = float(alpha_beta.model_s(c["naive"].rounds, c["naive"].path_bytes, d5["alpha_s"], d5["beta"])
                              / alpha_beta.model_s(c["ring"].rounds, c["ring"].path_bytes, d5["alpha_s"], d5["beta"]))
            comparisons.append(f"p = {row['p']}：模型说环形快 {predicted:.2f} 倍，实测 {m['naive'] / m['ring']:.2f} 倍")
        out(f" 4. [实测] 最大的消息（{alpha_beta.human_bytes(big[0]['bytes'])}）上朴素 ÷ 环形："
            + "；".join(comparisons) + "。α–β 模型假设每个工作者有自己的一条全双工链路；在回环上所有\"链路\""
            "共用同样的 CPU 和内存带宽，环形每轮所有人同时发、同时收（还要做加法），并不能真的同时进行；"
            "进程比核多时（4 个进程、2 个核）还要排队。模型在这里给的是量级，不是精确时间。")
    if "demo6" in r:
        out(" 5. " + demo6_observation(r["demo6"]["figures"]))


# =============================================================================
# Command line and main
# =============================================================================

def parse_args(argv=None):
    m, real = ModelSetup(), RealSetup()
    p = Parser(description="第 9 讲代码 1：通信原语的朴素、树、环形实现与 α–β 模型 "
                                            "(lecture 9, code 1: collectives from point-to-point messages)")
    p.add_argument("--demo", choices=("1", "2", "3", "4", "5", "6", "7", "all"), default="all",
                   help="跑哪个演示 which demo; all = 1-6 (default %(default)s)")
    p.add_argument("--links", nargs=2, type=float_in(0, 1e6), metavar=("LATENCY_MS", "MBIT_S"),
                   help="演示 7：每条链路的延迟 ms 和带宽 Mbit/s；只给它就只跑演示 7 emulated links "
                        f"(default for --demo 7: {DEFAULT_LINK[0]:g} {DEFAULT_LINK[1]:g})")
    p.add_argument("--quick", action="store_true", help="很小的设置，秒级跑完（测试用）tiny settings for tests")
    add_figures_flag(p)                 # fig09_01_allreduce_time.svg (demo 4)
    p.add_argument("--n-bytes", type=int_in(1, 2**34), default=m.n_bytes,
                   help="演示 2、3、6 每个工作者的字节数 bytes per worker (default %(default)s = 1 MiB)")
    p.add_argument("--latency-us", type=positive_float, default=m.latency_s * 1e6,
                   help="演示 2-4、6 的 α：一条消息的延迟 latency per message, µs (default %(default)g)")
    p.add_argument("--bandwidth-gbps", type=positive_float, default=m.bandwidth_gbps,
                   help="演示 2-4、6 的 β：带宽 Gbit/s (default %(default)g)")
    p.add_argument("--p", type=int_in(2, 1024), default=m.size_table_p, dest="size_table_p",
                   help="演示 2、4 的工作者数 workers p (default %(default)s)")
    p.add_argument("--real-p", type=int_in(2, 8), default=max(real.world_sizes),
                   help="演示 5、6 最多起几个 gloo 进程，p = 2..REAL_P (default %(default)s)")
    p.add_argument("--repeats", type=int_in(1, 100), default=real.repeats,
                   help="演示 5 每个点重复几次取中位数 repeats per point (default %(default)s)")
    p.add_argument("--timeout", type=positive_float, default=real.timeout_s,
                   help="演示 5、6 的进程最多运行几秒，超时全部停止 timeout, s (default %(default)g)")
    args = p.parse_args(argv)
    model = replace(m, latency_s=args.latency_us / 1e6, bandwidth_gbps=args.bandwidth_gbps,
                    size_table_p=args.size_table_p)
    real = replace(real, world_sizes=tuple(range(2, args.real_p + 1)), repeats=args.repeats, timeout_s=args.timeout)
    if args.quick:
        note_quick_overrides(("size_table_p", "repeats"), given_flags(p, argv))
        model = replace(model, **QUICK_MODEL)
        real = replace(real, **{**QUICK_REAL, "world_sizes": tuple(w for w in QUICK_REAL["world_sizes"]
                                                                   if w <= args.real_p)})
    model = replace(model, n_bytes=args.n_bytes)
    given = given_flags(p, argv)
    if args.links is not None and "demo" not in given:
        args.demo = "7"
    if args.links is not None and args.demo != "7":
        p.error(f"--links 只用于演示 7 (only for demo 7), not --demo {args.demo}")
    latency_ms, mbit = args.links or DEFAULT_LINK
    if mbit <= 0:
        p.error(f"--links 的带宽要大于 0 (bandwidth must be > 0 Mbit/s), got {mbit:g}")
    args.links_job = collectives_links.LinksJob(latency_ms / 1e3, mbit * 1e6, **(QUICK_LINKS if args.quick else {}))
    planned = collectives_links.planned_seconds(args.real_p, args.links_job)
    if args.demo == "7" and planned > collectives_links.MAX_EMULATED_S:
        p.error(f"--links {latency_ms:g} {mbit:g}：要模拟约 {planned:.3g} 秒 > "
                f"{collectives_links.MAX_EMULATED_S:g} 秒 (too slow a link)")
    bad = [q for q in model.world_sizes + (model.size_table_p,) if model.n_bytes % q]
    if bad:
        p.error(f"--n-bytes {model.n_bytes} 要是每个 p 的倍数 (a multiple of every p: "
                f"{', '.join(map(str, sorted(set(model.world_sizes + (model.size_table_p,)))))})")
    return args, model, real


def main(argv=None):
    utf8_output()                        # UTF-8 through any console or redirect (Windows: cp1252)
    args, model, real = parse_args(argv)
    import torch                         # after parsing: --help and bad flags do not wait for torch
    torch.set_num_threads(1)
    started = time.perf_counter()
    results = {}
    wanted = (lambda d: args.demo in (d, "all"))
    if wanted("1"):
        results["demo1"] = run_demo1()
        print()
    if wanted("2"):
        results["demo2"] = run_demo2(model)
        print()
    if wanted("3"):
        results["demo3"] = run_demo3(model)
        print()
    if wanted("4"):
        results["demo4"] = run_demo4(model)
        print()
    if wanted("5"):
        results["demo5"] = run_demo5(real)
    if wanted("6"):
        print()
        results["demo6"] = run_demo6(model, real)
    if args.demo == "7":
        results["demo7"] = collectives_links.run_demo7(args.links_job, args.real_p, real.timeout_s)
    if args.demo == "all":
        observations(model, real, results)
    if args.figures:
        from lecture09.ranks.collectives_figures import draw   # matplotlib only now
        draw(args.figures, model, results)
    print(f"（总用时 total {time.perf_counter() - started:.1f} 秒）", file=sys.stderr)
    return results


if __name__ == "__main__":
    run_main(main, failures=gloo_ranks.LAUNCH_FAILURES)
