"""Code 01's figure (`--figures DIR`, notes §1): all-reduce time against message size under
the α–β model, naive, tree and ring, with the size where ring's latency and bandwidth terms are
equal. Arithmetic (alpha_beta.py's formulas), the same bytes on every machine."""

from lecture01.figures import COLORS, figure
from lecture09.ranks import alpha_beta

NAMES = {"naive": "朴素 naive（全交给一个人）", "tree": "树 tree", "ring": "环 ring"}
COLOR = {"naive": COLORS["grey"], "tree": COLORS["backward"], "ring": COLORS["forward"]}


def draw(directory, model, results):
    """Drawn when demo 4 ran, with its p, α and β."""
    if "demo4" not in results:
        return
    p, alpha, beta = model.size_table_p, model.latency_s, model.bandwidth_bytes_per_s
    sizes = [2 ** e + (-(2 ** e)) % p for e in range(6, 33)]
    with figure(directory, "fig09_01_allreduce_time.svg", size=(8, 4.6)) as (fig, ax):
        for alg in alpha_beta.ALGORITHMS:
            times = [alpha_beta.collective_time_s("all-reduce", alg, n, p, alpha, beta) * 1e3 for n in sizes]
            rounds, _ = alpha_beta.collective_cost("all-reduce", alg, sizes[-1], p)
            ax.plot(sizes, times, color=COLOR[alg], label=f"{NAMES[alg]}：{rounds} 轮")
        crossover = alpha_beta.ring_crossover_bytes(p, alpha, beta)
        ring_at = 2 * 2 * (p - 1) * alpha * 1e3          # there the two terms are equal: twice 2(p−1)·α
        ax.axvline(crossover, color=COLORS["forward"], linestyle=":", linewidth=1)
        ax.annotate(f"n = p·α·β = {alpha_beta.human_bytes(round(crossover))}\n左边受延迟限制 latency-bound，"
                    "\n右边受带宽限制 bandwidth-bound", (crossover, ring_at), xytext=(12, -40),
                    textcoords="offset points", fontsize=8.5, arrowprops={"arrowstyle": "->", "linewidth": 0.8})
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ticks = [2 ** e for e in range(6, 33, 4)]
        ax.set_xticks(ticks, [alpha_beta.human_bytes(n).replace(",", "") for n in ticks])
        ax.set_xlabel("每个工作者的消息大小 n（字节，对数轴）")
        ax.set_ylabel("all-reduce 时间 time（ms，对数轴）")
        ax.set_title(f"α–β 模型：p = {p} 个工作者，α = {alpha * 1e3:g} ms，β = {beta * 8 / 1e9:g} Gbit/s"
                     "（数据中心的一跳）", fontsize=10)
        ax.legend(loc="upper left")
