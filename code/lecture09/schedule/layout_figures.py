"""Code 05's demo-1 figures (`--figures DIR`, notes §5.1-§5.5): the four regions with the
proven-optimum layout, and the histogram of the random layouts' costs with every method marked.
Arithmetic (the network is drawn from a seed, the searches are seeded), the same bytes on every
machine."""

from lecture01.figures import COLORS, CYCLE, figure

STAGE_COLORS = (COLORS["forward"], COLORS["backward"], COLORS["weight"], COLORS["other"],
                COLORS["compute"], COLORS["comm"], COLORS["yellow"], COLORS["grey"])
CORNERS = ((0.0, 1.0), (1.0, 1.0), (0.0, 0.0), (1.0, 0.0))   # regions 0-3 on a square
MARKED = (("pipelines_in_regions", "手工：流水线在地区内"), ("dp_groups_in_regions", "手工：DP 组在地区内"),
          ("strict", "严格局部搜索"), ("sideways", "持平局部搜索"), ("genetic", "遗传算法"))


def region_places(n_regions):
    if n_regions <= 4:
        return CORNERS[:n_regions]
    import math
    return [(0.5 + 0.5 * math.cos(2 * math.pi * k / n_regions), 0.5 + 0.5 * math.sin(2 * math.pi * k / n_regions))
            for k in range(n_regions)]


def draw_regions(directory, setup, geo, inst):
    from matplotlib.patches import FancyBboxPatch, Patch, Rectangle

    regions, names = geo["region"], geo["region_names"]
    places = region_places(len(names))
    device_of = {device: stage_replica for stage_replica, device in inst.optimum.assignment.items()}
    word = "最优" if inst.optimum.exact else "下界对应的"
    with figure(directory, "fig09_05_regions_optimum.svg", size=(8.5, 7)) as (fig, ax):
        box_w, box_h = 0.56, 0.34
        for a in range(len(names)):
            for b in range(a + 1, len(names)):
                (xa, ya), (xb, yb) = places[a], places[b]
                ax.plot([xa, xb], [ya, yb], color=COLORS["grey"], linewidth=1, zorder=0)
                gbps = geo["region_bandwidth_bps"][a][b] / 1e9
                ms = geo["region_latency_s"][a][b] * 1e3
                t = 0.5 if (xa == xb or ya == yb) else (0.32 if a == 0 else 0.68)
                ax.text(xa + t * (xb - xa), ya + t * (yb - ya), f"{gbps:.2f} Gbit/s\n{ms:.0f} ms", ha="center",
                        va="center", fontsize=8, bbox={"boxstyle": "round", "fc": "white", "ec": "none"}, zorder=1)
        for k, (x, y) in enumerate(places):
            ax.add_patch(FancyBboxPatch((x - box_w / 2, y - box_h / 2), box_w, box_h, boxstyle="round,pad=0.02",
                                        fc="#F7F7F7", ec="#555555", zorder=2))
            devices = [d for d in range(len(regions)) if regions[d] == k]
            ax.text(x, y + box_h / 2 - 0.035, f"地区 {names[k]}（{len(devices)} 张卡，内部 {setup.intra_gbps:g} Gbit/s）",
                    ha="center", va="center", fontsize=8.5, zorder=3)
            per_row = 4
            for i, d in enumerate(devices):
                cx = x - box_w / 2 + 0.04 + (i % per_row) * 0.125
                cy = y + box_h / 2 - 0.16 - (i // per_row) * 0.11
                stage, replica = device_of.get(d, (None, None))
                color = STAGE_COLORS[stage % len(STAGE_COLORS)] if stage is not None else "white"
                ax.add_patch(Rectangle((cx, cy), 0.105, 0.085, fc=color, ec="white", zorder=3))
                ax.text(cx + 0.0525, cy + 0.0425, "空" if stage is None else f"S{stage}\nr{replica}", ha="center",
                        va="center", fontsize=7, color="white" if stage is not None else "black", zorder=4)
        ax.set_xlim(-0.35, 1.35)
        ax.set_ylim(-0.25, 1.25)
        ax.set_aspect("equal")
        ax.axis("off")
        handles = [Patch(color=STAGE_COLORS[s % len(STAGE_COLORS)], label=f"流水线阶段 stage {s}")
                   for s in range(setup.n_stages)]
        ax.legend(handles=handles, loc="lower center", ncols=setup.n_stages, bbox_to_anchor=(0.5, -0.06), frameon=False)
        ax.set_title(f"{word}分配 {inst.optimum.kind}：{setup.n_stages} 个阶段 × {setup.n_replicas} 个副本放进 "
                     f"{len(names)} 个地区，每次迭代通信 {inst.optimum.cost:.2f} 秒（batch {inst.global_batch}）\n"
                     "S = 阶段 stage，r = 副本 replica；线上是地区之间的带宽和延迟", fontsize=10)


def draw_histogram(directory, setup, inst):
    costs = list(inst.random_costs)
    with figure(directory, "fig09_05_random_layouts.svg", size=(8.5, 4.4)) as (fig, ax):
        ax.hist(costs, bins=setup.histogram_bins, color=COLORS["idle"], edgecolor=COLORS["grey"],
                label=f"{len(costs)} 个随机分配 random layouts")
        marks = [(label, inst.methods[name].cost) for name, label in MARKED if inst.methods[name].cost is not None]
        marks.append(("最优 optimum" if inst.optimum.exact else "下界 lower bound", inst.optimum.cost))
        top = ax.get_ylim()[1]
        for k, (label, cost) in enumerate(marks):
            color = CYCLE[k % len(CYCLE)]
            ax.axvline(cost, color=color, linewidth=1.6, linestyle="-" if k == len(marks) - 1 else "--",
                       label=f"{label}：{cost:.2f} 秒")
        ax.set_ylim(0, top * 1.05)
        ax.set_xlim(left=0)
        ax.set_xlabel("每次迭代的通信时间 communication per iteration（秒，Yuan et al. 的代价模型）")
        ax.set_ylabel("随机分配的个数")
        ax.set_title(f"batch {inst.global_batch}：随机分配的通信时间分布，各方法的结果标成竖线", fontsize=10)
        ax.legend(fontsize=8, loc="upper right")


def draw(directory, setup, results):
    """Drawn when demo 1 ran: the main instance (the flags' --batch); demo 3's when it ran."""
    from lecture09.schedule import hetero_figures
    hetero_figures.draw(directory, results)
    if "demo1" not in results:
        return
    r = results["demo1"]
    draw_regions(directory, setup, r.geo, r.main)
    draw_histogram(directory, setup, r.main)
