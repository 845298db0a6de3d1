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


def draw_loss_curves(directory, name, panels, title, precision, seeds):
    """panels: [(panel title, {label: training loss per step})], side by side; one line per
    label, averaged over windows of about a fortieth of the run."""
    steps = max((len(v) for _, curves in panels for v in curves.values()), default=1)
    window = max(1, steps // 40)
    with figure(directory, name, size=(5 * len(panels) + 1, 4.8), ncols=len(panels), sharey=True,
                squeeze=False) as (fig, axes):
        for ax, (panel_title, curves) in zip(axes[0], panels):
            for k, (label, losses) in enumerate(curves.items()):
                xs, ys = smoothed(list(losses), window)
                ax.plot(xs, ys, label=label, color=CYCLE[k % len(CYCLE)], linewidth=1.3)
            ax.set_xlabel("训练步 step")
            ax.set_title(panel_title, fontsize=9.5)
            ax.legend(fontsize=7.5)
        axes[0][0].set_ylabel(f"训练 loss（交叉熵，每 {window} 步的平均）" if window > 1 else "训练 loss（交叉熵）")
        seed_text = f"model {seeds.model}, data {seeds.data}"
        fig.suptitle(f"{title}\n{machine_note(precision, None)}；种子 seed {seed_text}", fontsize=10)


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
    panels = [(f"优化器 {name}", curves) for name, curves in by_optimizer.items()]
    draw_loss_curves(directory, "fig09_05_compression_loss.svg", panels,
                     f"梯度压缩 gradient compression：{t.n_workers} 个工作者的数据并行，{t.steps} 步，各压缩方式的训练 loss",
                     t.precision, seeds)


def draw_code7(settings, rows):
    """Code 07: rows [(label, Run, losses)]; every-step schemes on the left, DiLoCo on the
    right, the every-step AdamW baseline (the first row) on both."""
    (base_label, _, base), rest = rows[0], rows[1:]
    every_step = {base_label: base, **{label: losses for label, run, losses in rest if run.optimizer != "diloco"}}
    diloco = {base_label: base, **{label: losses for label, run, losses in rest if run.optimizer == "diloco"}}
    t = settings.train
    draw_loss_curves(settings.figures, "fig09_07_loss_curves.svg",
                     [("每步通信，压缩每一步的梯度", every_step), ("DiLoCo：每 H 步通信一次", diloco)],
                     f"压缩的更多做法 compression beyond demo 2：{t.n_workers} 个工作者，{t.steps} 步",
                     t.precision, settings.seeds)
