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
