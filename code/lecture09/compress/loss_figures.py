"""Loss curves of trained runs (`--figures DIR`): code 05's demo 2 (gradient compression,
notes §5.6-§5.10) and code 07 (compression beyond it, §7). Trained figures: they move with
the CPU, the precision and the seed, and each title says which drew it (machine_note)."""

import math

from lecture01.figures import CYCLE, figure, machine_note


def smoothed(values, window):
    """Mean of each run of `window` steps (the last run may be shorter): (x, y) lists, x at
    the run's last step (counted from 1). Non-finite losses (a diverged run) end the curve."""
    xs, ys = [], []
    for start in range(0, len(values), window):
        chunk = values[start:start + window]
        if not all(math.isfinite(v) for v in chunk):
            break
        xs.append(start + len(chunk))
        ys.append(sum(chunk) / len(chunk))
    return xs, ys


def draw_loss_curves(directory, name, curves, title, precision, seeds, styles=None):
    """curves: {label: training loss per step}; one line each, averaged over windows of about
    a fortieth of the run. styles: {label: matplotlib line keywords} for some labels."""
    steps = max((len(v) for v in curves.values()), default=1)
    window = max(1, steps // 40)
    with figure(directory, name, size=(8.5, 4.8)) as (fig, ax):
        for k, (label, losses) in enumerate(curves.items()):
            xs, ys = smoothed(list(losses), window)
            style = {"color": CYCLE[k % len(CYCLE)], "linewidth": 1.4, **(styles or {}).get(label, {})}
            ax.plot(xs, ys, label=label, **style)
        ax.set_xlabel("训练步 step")
        ax.set_ylabel(f"训练 loss（交叉熵 cross-entropy，每 {window} 步的平均）" if window > 1 else "训练 loss（交叉熵 cross-entropy）")
        seed_text = f"model {seeds.model}, data {seeds.data}"
        ax.set_title(f"{title}\n{machine_note(precision, None)}；种子 seed {seed_text}", fontsize=9.5)
        ax.legend(fontsize=8)


def draw_demo2(directory, compression, rows):
    """Code 05 demo 2: the first seed's curve of every row of tables (a) and (b)."""
    from lecture09.compress import demo2_report

    if not rows:
        return
    t = compression.train
    seeds = demo2_report.seed_list(compression)[0]
    by_optimizer = {}
    for summary in rows.values():
        by_optimizer.setdefault(summary.run.optimizer, {})[summary.run.label] = summary.results[0].losses
    for optimizer, curves in by_optimizer.items():
        draw_loss_curves(directory, f"fig09_05_compression_loss_{optimizer}.svg", curves,
                         f"梯度压缩 gradient compression（{optimizer}，{t.n_workers} 个工作者，{t.steps} 步）："
                         "各压缩方式的训练 loss", t.precision, seeds)
