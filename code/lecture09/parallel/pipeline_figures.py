"""Code 04's figures (`--figures DIR`, notes §4): the four pipeline schedules as timelines, and
the bubble against the number of micro-batches. Both are arithmetic (the simulations of
pipeline.py and pipeline_schedules.py), the same bytes on every machine."""

from lecture01.figures import COLORS, figure
from lecture09.parallel import pipeline
from lecture09.parallel import pipeline_schedules as ps

KIND_COLOR = {"F": COLORS["forward"], "B": COLORS["backward"], "W": COLORS["weight"]}
KIND_NAME = {"F": "前向 F", "B": "反向 B（ZB-H1 里只算输入的梯度）", "W": "权重的梯度 W"}


def schedule_timelines(p, m, v):
    """(title, spans per stage, total, bubble time, ideal time) of GPipe, 1F1B, interleaved
    1F1B and ZB-H1 with T_F = T_B = T_W = 1 (1F1B's and GPipe's backward is B + W = 2)."""
    gpipe = pipeline.simulate("gpipe", p, m, 1.0, 2.0)
    rows = [("GPipe（全前向-全反向 AFAB）", [[(a, b, op.kind, 0, op.micro_batch) for a, b, op in s] for s in gpipe.spans],
             gpipe.total_time, gpipe.total_time - gpipe.busy_time(0), gpipe.busy_time(0))]
    for name in ps.SCHEDULES:
        if name == "interleaved" and m % p:
            continue
        t = ps.simulate(name, p, m, v)
        title = {"1f1b": "1F1B", "interleaved": f"交错 1F1B interleaved（每张卡 v = {v} 段）",
                 "zb-h1": "ZB-H1（反向拆成 B 和 W）"}[name]
        rows.append((title, [[(a, b, op.kind, op.chunk, op.micro_batch) for a, b, op in s] for s in t.spans],
                     t.total_time, t.bubble_time, t.ideal_time))
    return rows


def draw_schedules(directory, p, m, v):
    rows = schedule_timelines(p, m, v)
    horizon = max(total for _, _, total, _, _ in rows)
    with figure(directory, "fig09_04_schedules.svg", size=(9, 1.0 + 0.42 * p * len(rows)),
                nrows=len(rows), sharex=True) as (fig, axes):
        for ax, (title, spans, total, bubble, ideal) in zip(axes, rows):
            for stage, ops in enumerate(spans):
                for start, end, kind, chunk, micro in ops:
                    ax.barh(stage, end - start, left=start, height=0.8, color=KIND_COLOR[kind],
                            edgecolor="white", linewidth=0.6, hatch="//" if chunk % 2 else None)
                    if end - start >= 0.5:
                        ax.text((start + end) / 2, stage, str(micro + 1), ha="center", va="center",
                                fontsize=7, color="white")
            ax.set_title(f"{title}：共 {total:g} 个时间单位，气泡 {bubble:g} = 计算的 {bubble / ideal:.1%}",
                         fontsize=9.5, loc="left")
            ax.set_yticks(range(p), [f"卡 {s}" for s in range(p)])
            ax.set_ylim(p - 0.5, -0.5)
            ax.set_xlim(0, horizon)
            ax.grid(axis="y", visible=False)
        axes[-1].set_xlabel("时间 time（单位：一个阶段的一次前向 T_F；T_B = T_W = T_F）")
        from matplotlib.patches import Patch
        handles = [Patch(color=KIND_COLOR[k], label=KIND_NAME[k]) for k in ("F", "B", "W")]
        handles.append(Patch(facecolor="white", edgecolor=COLORS["grey"], hatch="//", label="交错：每张卡的第 2 段"))
        fig.legend(handles=handles, loc="outside lower center", ncols=4, frameon=False)
        fig.suptitle(f"四种流水线调度 pipeline schedules，p = {p} 张卡、m = {m} 个 micro-batch"
                     "（格子里的数字是第几个 micro-batch；空白是气泡 bubble）", fontsize=10.5)


def draw_bubble(directory, p, v):
    micro = list(range(p, 8 * p + 1, p))
    with figure(directory, "fig09_04_bubble.svg", size=(7, 4)) as (fig, ax):
        curves = [("GPipe = 1F1B：(p−1)/m", [ps.bubble_ratio_formula("1f1b", p, m) for m in micro], COLORS["forward"]),
                  (f"交错 1F1B（v = {v}）：(p−1)/(v·m)", [ps.bubble_ratio_formula("interleaved", p, m, v) for m in micro],
                   COLORS["comm"]),
                  ("ZB-H1：(p−1)/(3m)", [ps.bubble_ratio_formula("zb-h1", p, m) for m in micro], COLORS["weight"])]
        for label, values, color in curves:
            ax.plot(micro, [100 * x for x in values], marker="o", color=color, label=label)
        simulated = [100 * ps.simulate(s, p, m, v).bubble_ratio for s in ps.SCHEDULES for m in micro]
        ax.plot([m for _ in ps.SCHEDULES for m in micro], simulated, linestyle="none", marker="x", color="black",
                label="模拟 simulate（每一点都落在公式上）")
        ax.set_xlabel("micro-batch 数 m")
        ax.set_ylabel("气泡 ÷ 一张卡的计算 bubble ratio（%）")
        ax.set_xticks(micro)
        ax.set_ylim(bottom=0)
        ax.set_title(f"p = {p} 张卡：气泡随 m 变小，交错除以 v，ZB-H1 是 1F1B 的三分之一（T_F = T_B = T_W）",
                     fontsize=10)
        ax.legend()


def draw(directory, beyond, results):
    """Code 04's figures from demo 1's or demo 5's settings (p, m, v): both are arithmetic."""
    if "demo1" in results or "demo5" in results:
        draw_schedules(directory, beyond.n_stages, beyond.n_micro, beyond.n_virtual)
        draw_bubble(directory, beyond.n_stages, beyond.n_virtual)
