"""Code 02's figure (`--figures DIR`, notes §2): demo 3's one-step timeline, read from
torch.profiler's trace of the bucketed data-parallel step on gloo ranks: forward, each backward
operator, each bucket's all-reduce, and how much communication backward hides. Measured: the
milliseconds are this machine's (the title says which)."""

from lecture01.figures import COLORS, figure, machine_note


def draw(directory, results):
    """Drawn when demo 3 ran."""
    if "demo3" not in results:
        return
    r = results["demo3"]
    trace, s = r["trace"], r["summary"]
    reduces = trace["all_reduce"]
    rows = [("前向 forward", [trace["forward"]], COLORS["forward"]),
            ("反向 backward", trace["backward"], COLORS["backward"])]
    rows += [(f"all-reduce 桶 {i}", [iv], COLORS["comm"]) for i, iv in enumerate(reduces)]
    back_end = s["backward_end"]
    with figure(directory, "fig09_02_overlap_timeline.svg", size=(9, 1.6 + 0.36 * len(rows))) as (fig, ax):
        for y, (label, intervals, color) in enumerate(rows):
            ax.broken_barh([(a * 1e3, (b - a) * 1e3) for a, b in intervals], (y - 0.35, 0.7), color=color)
        ax.axvline(back_end * 1e3, color=COLORS["black"], linestyle="--", linewidth=1)
        ax.annotate(f"反向结束 {back_end * 1e3:.1f} ms", (back_end * 1e3, -0.6), xytext=(4, 0),
                    textcoords="offset points", fontsize=8, va="center")
        ax.set_yticks(range(len(rows)), [label for label, _, _ in rows])
        ax.set_ylim(len(rows) - 0.4, -1.0)
        ax.set_xlim(left=0)
        ax.set_xlabel("毫秒 ms（从 rank 0 这一步主线程的第一个事件算起）")
        ax.grid(axis="y", visible=False)
        ax.set_title(f"数据并行的重叠 overlap（分桶，{r['world_size']} 个 gloo 进程，torch.profiler 的 trace）："
                     f"通信 {s['comm'] * 1e3:.1f} ms，其中 {s['hidden'] * 1e3:.1f} ms 藏在反向里，"
                     f"反向后还在通信 {s['exposed'] * 1e3:.1f} ms\n{machine_note()} [实测]，换一台机器会变",
                     fontsize=9)
