"""Code 11's figure (`--figures DIR`, notes §11): the frontier, bytes against Δ. Every row of
demos 2-5 (tables (c), (e), (g), (i)) is one point: the bytes a worker sends per parameter per
step (the mean over the run, counted from the encoded tensors) and its Δ, the paired difference
in validation bits per character against every-step AdamW. A trained figure: its title says
which machine, precision and seeds drew it."""

import math
import statistics

from lecture01.figures import CYCLE, figure, machine_note

DEMOS = (("demo2", "演示 2 Streaming DiLoCo", "o"), ("demo3", "演示 3 DeMo", "s"),
         ("demo4", "演示 4 SparseLoCo", "^"), ("demo5", "演示 5 gossip", "D"))


def frontier_points(results):
    """[(demo label, marker, row label, bytes per parameter per step, mean Δ)] of every row
    whose runs did not diverge; AdamW's own row (Δ = 0 by definition) once."""
    points, seen = [], set()
    for key, demo_label, marker in DEMOS:
        for label, (row, runs, deltas) in results.get(key, {}).get("table", {}).items():
            finite = [d for d in deltas if math.isfinite(d)]
            if not finite or label in seen:
                continue
            seen.add(label)
            points.append((demo_label, marker, label, runs[0].bytes_per_element, statistics.fmean(finite)))
    return points


def draw(directory, args, train, results):
    points = frontier_points(results)
    if train is None or not points:
        return
    with figure(directory, "fig09_11_frontier.svg", size=(11, 5.6), ncols=2,
                width_ratios=(2.1, 1)) as (fig, (ax, key)):
        shown = set()
        colors = {demo_label: CYCLE[k] for k, (_, demo_label, _) in enumerate(DEMOS)}
        lines = []
        for number, (demo_label, marker, label, x, y) in enumerate(points, start=1):
            ax.scatter([x], [y], marker=marker, s=40, color=colors[demo_label],
                       label=None if demo_label in shown else demo_label, zorder=3)
            shown.add(demo_label)
            ax.annotate(str(number), (x, y), xytext=(4, 2 + 7 * (number % 2)), textcoords="offset points",
                        fontsize=7, color=colors[demo_label])
            lines.append(f"{number:>2}  {label}：{x:.3g} 字节，Δ {y:+.4f}")
        ax.axhline(0, color="#555555", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("每个工作者每步每个参数发送的字节（全程平均，对数轴）bytes per parameter per step")
        ax.set_ylabel("Δ 验证集 bits/字符，对每步通信的 AdamW（配对差）")
        ax.legend(loc="upper right", fontsize=8)
        key.axis("off")
        key.text(0, 1, "\n".join(lines), va="top", ha="left", fontsize=7, linespacing=1.5, transform=key.transAxes)
        seeds = f"model {args.model_seed}, data {args.data_seed}" + (f"（共 {args.seeds} 对）" if args.seeds > 1 else "")
        fig.suptitle(f"低通信训练的前沿 the frontier：字节越少越靠左，越差越靠上（{train.n_workers} 个工作者，"
                     f"{train.steps} 步）\n{machine_note(train.precision, None)}；种子 seed {seeds}", fontsize=10)
