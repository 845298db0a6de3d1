"""Code 5's demo-3 figure (`--demo 3 --figures DIR`, notes §5.11): how each search's best
total falls with the cost evaluations it spends, on the small instance beside its proven
optimum and at demo 1's size beside the best found. Arithmetic (seeded searches on a fixed
network), the same bytes on every machine. The runs are recorded by HeteroCost only when
--figures is given (HeteroSetup.record), so demo 3's default run does no extra work.
"""

from dataclasses import dataclass

from lecture01.figures import COLORS, CYCLE, figure
from lecture09.schedule.hetero_cost import INFEASIBLE_PS
from lecture09.schedule.layout_cost import PS_PER_S

FILE = "fig09_05_demo3_convergence.svg"
LABELS = {"genetic": "遗传算法 genetic", "graph": "图划分 graph partitioning",
          "enumeration": "剪枝枚举 pruned enumeration", "optimum": "证明最优的枚举 the proof"}
COLOR = {"genetic": CYCLE[0], "graph": CYCLE[1], "enumeration": CYCLE[2], "optimum": COLORS["black"]}


@dataclass(frozen=True)
class Curve:
    search: str        # genetic, graph, enumeration, optimum
    run: int           # which run of that search (its seed), from 0
    points: tuple      # (evaluations so far, best total so far in s), each a new best; feasible only
    length: int        # evaluations the run spent


def curves(cost):
    """Each recorded run of the searches on this cost as a Curve (empty when not recorded)."""
    out, count = [], {}
    for name, _, points, length in cost.runs or ():
        run = count[name] = count.get(name, -1) + 1
        out.append(Curve(name, run, tuple((n, t / PS_PER_S) for n, t in points if t < INFEASIBLE_PS), length or 0))
    return out


def _panel(ax, inst, reference, words, legend_at):
    seen = set()
    for c in curves(inst.cost):
        if not c.points:
            continue
        xs = [n for n, _ in c.points] + [max(c.length, c.points[-1][0])]
        ys = [t for _, t in c.points] + [c.points[-1][1]]
        label = None if c.search in seen else LABELS[c.search]
        seen.add(c.search)
        ax.step(xs, ys, where="post", color=COLOR[c.search], label=label,
                linewidth=2.2 if c.search == "optimum" else 1.3, alpha=0.9)
        ax.plot([xs[-1]], [ys[-1]], marker="o" if c.search == "optimum" else "|", color=COLOR[c.search],
                markersize=7)
    ax.axhline(reference, color=COLORS["grey"], linestyle="--", linewidth=1.2, label=f"{words} {reference:.2f} 秒")
    ax.set_xscale("log")
    ax.set_ylim(reference * 0.95, reference * 1.9)
    ax.set_xlabel("代价计算次数 cost evaluations（对数轴）")
    ax.legend(fontsize=7.5, loc=legend_at)


def draw_convergence(directory, r):
    """The figure from a Demo3Result whose costs recorded their runs."""
    panels = [(r.small, "小实例", "证明过的最优", "upper right")] if r.small is not None else []
    panels.append((r.large, "演示 1 的规模", "三种搜索找到的最好", "upper left"))
    with figure(directory, FILE, size=(9.5, 4.2), ncols=len(panels)) as (fig, axes):
        axes = axes if len(panels) > 1 else [axes]
        for ax, (inst, title, words, legend_at) in zip(axes, panels):
            cost = inst.cost
            _panel(ax, inst, inst.best.total, words, legend_at)
            ax.set_title(f"{title}：{cost.n_stages} 阶段 × {cost.n_replicas} 副本，{cost.n_layers} 层", fontsize=9.5)
        axes[0].set_ylabel("到此为止最好的合计 best total so far（秒/迭代）")
        fig.suptitle("演示 3：每种搜索每个种子一条线，竖线或圆点是这次运行停下的地方", fontsize=10)


def draw(directory, results):
    """Drawn when demo 3 ran."""
    if "demo3" in results:
        draw_convergence(directory, results["demo3"])
