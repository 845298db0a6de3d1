"""Code 02's demo 3, printed: the console timeline drawn from the profiler's trace, and the
exposed communication by the trace beside the script's own clock (notes §2.5)."""

import sys
import time

from lecture01.console import pad, print_header, print_table, print_wrapped

TIMELINE_WIDTH = 60


def segment_lines(rows, end_s, width=TIMELINE_WIDTH, label_width=22):
    """A text Gantt chart: one row per (label, [(start, end), ...]), a bar per interval."""
    lines = [f"{pad('', label_width)} 0{'─' * (width - 1)}{end_s * 1e3:.1f} ms"]
    for label, intervals in rows:
        cells = [" "] * width
        for start, stop in intervals:
            a = min(width - 1, int(start / end_s * width))
            b = max(a + 1, min(width, int(round(stop / end_s * width))))
            cells[a:b] = "█" * (b - a)
        lines.append(f"{pad(label, label_width)} {''.join(cells).rstrip()}")
    return lines


def run_demo3(setup, dps, trace_path=None, out=print_wrapped):
    from lecture09.parallel import profile_overlap
    from lecture09.ranks import gloo_ranks

    print_header(f"演示 3：profiler 看重叠——分桶写法在 {setup.world_size} 个 gloo 进程上，torch.profiler 记下第 {dps.steps} 步")
    print(f"（启动 {setup.world_size} 个 gloo 进程 profiling...）", file=sys.stderr, flush=True)
    started = time.perf_counter()
    ranks = gloo_ranks.run_ranks(profile_overlap.profile_worker, setup.world_size, args=(dps, trace_path),
                                 timeout_s=setup.timeout_s, port=setup.port or None)
    print(f"（用时 {time.perf_counter() - started:.1f} 秒）", file=sys.stderr)
    r = ranks[0]
    trace, s, own = r["trace"], r["summary"], r["own"]
    out(f"[实测 measured] rank 0 的 trace 有 {trace['n_events']:,} 个事件"
        + (f"，写在 {trace_path}（用 Perfetto 或 chrome://tracing 打开）" if trace_path else "（加 --trace FILE 存下来）")
        + f"。下面的时间线是从 trace 里的事件画的：反向 = autograd 引擎执行的每个反向算子（"
        f"{profile_overlap.BACKWARD}…），all-reduce = gloo 工作线程上的 {profile_overlap.ALL_REDUCE}。")
    end = max([b for _, b in trace["all_reduce"]] + [trace["backward"][-1][1]])
    rows = [("前向 forward", [trace["forward"]]), ("反向 backward", trace["backward"])]
    rows += [(f"all-reduce {i}", [iv]) for i, iv in enumerate(trace["all_reduce"])]
    for line in segment_lines(rows, end):
        print(line)
    print()
    print_table(["", "trace（profiler）", "脚本自己的计时"],
                [("all-reduce 个数", f"{len(trace['all_reduce'])}", f"{r['n_buckets']}（桶）"),
                 ("反向结束 ms", f"{s['backward_end'] * 1e3:.2f}", f"{(own['forward'] + own['backward']) * 1e3:.2f}"),
                 ("通信在进行 ms", f"{s['comm'] * 1e3:.2f}", "—"),
                 ("其中藏在反向里 hidden ms", f"{s['hidden'] * 1e3:.2f}", "—"),
                 ("反向后还在通信 ms", f"{s['exposed'] * 1e3:.2f}", "—"),
                 ("反向后主线程还忙 exposed ms", f"{s['after_backward'] * 1e3:.2f}", f"{own['exposed'] * 1e3:.2f}")],
                aligns=["<", ">", ">"])
    out("[实测 measured] trace 的时间从这一步 rank 0 主线程的第一个事件算起。脚本的 exposed 是 finish() 的用时（等最后几个桶、除以 W、"
        "拷回梯度）；trace 里对应的是反向结束后主线程上还有的事件。"
        "ms 是这台机器的，换一台会变；profiler 本身也有开销。")
    return {"trace": trace, "summary": s, "own": own, "n_buckets": r["n_buckets"], "path": trace_path,
            "world_size": setup.world_size}


def demo3_sentence(r):
    """Demo 3's observation from the two tables' numbers."""
    s, own, n = r["summary"], r["own"], len(r["trace"]["all_reduce"])
    counted = (f"trace 里有 {n} 次 gloo:all_reduce，正是 {r['n_buckets']} 个桶" if n == r["n_buckets"]
               else f"trace 里有 {n} 次 gloo:all_reduce，桶却是 {r['n_buckets']} 个")
    share = s["hidden"] / s["comm"] if s["comm"] else 0.0
    alone = "只有 1 个进程：all-reduce 不传数据，这里的“通信”只是调用的开销。" if r["world_size"] == 1 else ""
    return (f"[实测] {counted}。{alone}通信在进行的 {s['comm'] * 1e3:.2f} ms 里有 {share:.0%} 和反向算子同时在跑（藏起来的），"
            f"反向结束后还在通信的有 {s['exposed'] * 1e3:.2f} ms。反向结束后主线程还忙了 {s['after_backward'] * 1e3:.2f} ms"
            f"（trace），脚本自己的钟量的是 {own['exposed'] * 1e3:.2f} ms"
            + ("：两种量法都说通信几乎全藏起来了。" if s["exposed"] <= 0.1 * s["comm"] else "。"))
