"""Code 1's demo 5 (lecture 9, §1.4): the collectives on real gloo ranks, timed against
torch.distributed.all_reduce, and α and β fitted to the measured times. torch is imported
inside the ranks' worker (collectives.timing_worker).
"""

import statistics
import sys
import time

from lecture01.console import print_header, print_table, print_wrapped
from lecture09.ranks import alpha_beta
from lecture09.ranks.alpha_beta import ALGORITHMS
from lecture09.ranks import gloo_ranks


def real_rows(results, real, element_bytes=4):
    """One row per (p, n): medians over repeats of the slowest rank, and the schedule's cost."""
    from lecture09.ranks import collectives
    rows = []
    for p in real.world_sizes:
        for n in real.sizes:
            medians = {}
            for alg in ALGORITHMS + ("gloo",):
                per_repeat = zip(*(results[rank]["times"][(p, n, alg)] for rank in range(p)))
                medians[alg] = statistics.median(max(times) for times in per_repeat)
            costs = {alg: collectives.schedule_cost(collectives.schedule("all-reduce", alg, p), n, p, element_bytes)
                     for alg in ALGORITHMS}
            rows.append({"p": p, "n": n, "bytes": n * element_bytes, "measured_s": medians, "cost": costs})
    return rows


def fit_rows(rows):
    """α, β fitted to every measured (p, n, my algorithm): rounds and path bytes from the schedule."""
    rounds, path, times = [], [], []
    for row in rows:
        for alg in ALGORITHMS:
            rounds.append(row["cost"][alg].rounds)
            path.append(row["cost"][alg].path_bytes)
            times.append(row["measured_s"][alg])
    return alpha_beta.fit_alpha_beta(rounds, path, times)


def run_demo5(real, out=print_wrapped):
    from lecture09.ranks import collectives
    world = max(real.world_sizes)
    print_header(f"演示 5 demo 5：{world} 个真的 gloo 进程（本机回环 loopback），p = "
                 f"{', '.join(map(str, real.world_sizes))}")
    job = collectives.TimingJob(world_sizes=real.world_sizes, sizes=real.sizes, repeats=real.repeats,
                                check_elements=real.check_elements, progress=True)
    print(f"（启动 {world} 个进程并计时，约需十几秒 starting {world} processes...）", file=sys.stderr, flush=True)
    started = time.perf_counter()
    results = gloo_ranks.run_ranks(collectives.timing_worker, world, args=(job,), timeout_s=real.timeout_s)
    print(f"（gloo 进程用时 {time.perf_counter() - started:.1f} 秒）", file=sys.stderr)
    checks = {p: all(results[r]["checks"][p] for r in range(p)) for p in real.world_sizes}
    sums_ok = all(all(results[r]["correct"][key] for r in range(key[0])) for key in results[0]["correct"])
    for p in real.world_sizes:
        out(f"p = {p}：5 种原语 × 3 种算法在真的进程上运行，结果{'都等于' if checks[p] else '并不都等于'}真正的和。")
    out(f"计时的 all-reduce（整数值输入）结果{'都等于' if sums_ok else '并不都等于'}真正的和。")
    rows = real_rows(results, real)
    alpha_s, beta = fit_rows(rows)
    table = []
    for row in rows:
        cells = [row["p"], alpha_beta.human_bytes(row["bytes"])]
        for alg in ALGORITHMS:
            cost = row["cost"][alg]
            model = float(alpha_beta.model_s(cost.rounds, cost.path_bytes, alpha_s, beta))
            cells += [f"{row['measured_s'][alg] * 1e3:.3f}", f"{row['measured_s'][alg] / model:.2f}"]
        table.append(cells + [f"{row['measured_s']['gloo'] * 1e3:.3f}"])
    out("\n实测 measured（随机器、负载而变 machine-dependent）：ms，每格是 "
        f"{real.repeats} 次重复的中位数（每次取最慢的那个 rank）；\"÷模型\" = 实测 ÷ 拟合的 α–β 模型。")
    print_table(["p", "n", "朴素 naive", "÷模型", "树 tree", "÷模型", "环 ring", "÷模型", "gloo 自带"], table)
    out(f"拟合（最小二乘，按相对误差，用朴素、树、环的全部 {3 * len(rows)} 个点）：α ≈ {alpha_s * 1e6:.0f} µs，"
        f"β ≈ {beta / 1e6:.0f} MB/s（{beta * 8 / 1e9:.2f} Gbit/s）。[实测]")
    return {"rows": rows, "alpha_s": alpha_s, "beta": beta, "checks": checks, "sums_ok": sums_ok}


def run_demo6(setup, real, out=print_wrapped):
    """Code 1's demo 6 (§1.5): all-to-all, pairwise and through the root, in the α–β model
    beside ring all-reduce; simulated for every p of check_world_sizes against the
    definition, and on real gloo ranks against torch.distributed.all_to_all_single."""
    from lecture09.ranks import all_to_all as a2a
    from lecture09.ranks.collectives import integer_inputs
    n, alpha, beta = setup.n_bytes, setup.latency_s, setup.bandwidth_bytes_per_s
    print_header(f"演示 6 demo 6：all-to-all（每人给每人不同的一块），每人 n = {n:,} 字节")
    sims = [p for p in setup.check_world_sizes
            if all(all(a.equal(b) for a, b in zip(a2a.simulate(a2a.schedule(alg, p), xs), a2a.expected(xs)))
                   for alg in a2a.ALGORITHMS for xs in [integer_inputs(p, 3 * p + 1, p)])]
    out(f"模拟 p = {', '.join(map(str, setup.check_world_sizes))}：全部 {len(sims)} 个 p 上，"
        f"两种写法的结果都等于定义（out_j = 每个人的第 j 块，按发送者排）。" if len(sims) == len(setup.check_world_sizes)
        else f"模拟：p = {sorted(set(setup.check_world_sizes) - set(sims))} 上结果不等于定义。")
    rows, figures = [], {}
    for p in setup.world_sizes:
        got = {alg: a2a.schedule_cost(a2a.schedule(alg, p), n, p, 1) for alg in a2a.ALGORITHMS}
        same = all((got[alg].rounds, got[alg].path_bytes, max(got[alg].bytes_sent)) == a2a.formula(alg, n, p)
                   for alg in a2a.ALGORITHMS)
        ring_sent = alpha_beta.all_reduce_bytes_sent("ring", n, p)
        times = {alg: a2a.time_s(alg, n, p, alpha, beta) for alg in a2a.ALGORITHMS}
        ring_s = alpha_beta.collective_time_s("all-reduce", "ring", n, p, alpha, beta)
        figures[p] = {"pairwise": max(got["pairwise"].bytes_sent), "naive": max(got["naive"].bytes_sent),
                      "ring": ring_sent, "rounds": got["pairwise"].rounds, "times": times, "ring_s": ring_s}
        rows.append([p, got["pairwise"].rounds, f"{max(got['pairwise'].bytes_sent):,}", got["naive"].rounds,
                     f"{max(got['naive'].bytes_sent):,}", f"{ring_sent:,}", f"{times['pairwise'] * 1e3:.3f}",
                     f"{times['naive'] * 1e3:.3f}", f"{ring_s * 1e3:.3f}", "✓" if same else "✗"])
    print_table(["p", "成对 轮", "成对 每人发", "经根 轮", "经根 根发", "环 all-reduce 发", "成对 ms", "经根 ms",
                 "环 AR ms", "= 公式"], rows)
    out(f"成对 pairwise：第 k 轮工作者 i 把给 (i + k) mod p 的那块直接发过去，p − 1 轮，每人发 (p − 1)/p · n。"
        f"经根 naive：先把每人不留的 p − 1 块交给 0 号，再由它分发，2(p − 1) 轮，根发 (p − 1)²/p · n。"
        f"ms 是 α–β 模型（α = {alpha * 1e3:g} ms，β = {setup.bandwidth_gbps:g} Gbit/s，和演示 3 同一条链路）；"
        f"\"= 公式\"：消息序列数出来的轮数和字节数等于上面的公式。")
    real_ok = {}
    for p in real.world_sizes:
        outputs = gloo_ranks.run_ranks(a2a.check_worker, p, args=(real.check_elements + 1, 0), timeout_s=real.timeout_s)
        want = a2a.expected(integer_inputs(p, real.check_elements + 1, 0))
        real_ok[p] = all(got[name].equal(want[rank]) for rank, got in enumerate(outputs) for name in got)
        out(f"p = {p} 个 gloo 进程：经根、成对两种写法和 torch.distributed.all_to_all_single "
            f"{'逐元素相同' if real_ok[p] else '并不相同'}。")
    return {"figures": figures, "real_ok": real_ok, "simulated_ok": len(sims) == len(setup.check_world_sizes)}


def demo6_observation(figures):
    """The sentence code 1's observations say about demo 6, from its figures at the largest p."""
    p = max(figures)
    f = figures[p]
    return (f"all-to-all 成对地发，每人发 (p−1)/p·n：p = {p} 时 {f['pairwise']:,} 字节，是环形 all-reduce"
            f"（{f['ring']:,}）的 {f['pairwise'] / f['ring']:.2f} 倍，轮数也是它的 {f['rounds'] / (2 * (p - 1)):.2f} 倍；"
            f"和环形 reduce-scatter 发得一样多：每一块只去一个人那里，没有 all-gather 那一半。经根的做法根要发 {f['naive']:,} 字节，"
            f"是成对的 {f['naive'] / f['pairwise']:.0f} 倍。")
