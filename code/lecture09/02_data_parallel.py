"""
第 9 讲 · 代码 2：数据并行——在真的 gloo 进程上训练第 1 讲的小 GPT，梯度同步的四种写法
Lecture 9, code 2: data parallelism on lecture 1's tiny GPT, on real gloo processes.

这个文件回答的问题 (the question)
    W 个工作者（worker）各放一份完整的模型，各算 batch 的 1/W，再把梯度平均（all-reduce）：
    这样走出的每一步，和一个进程算整个 batch 走出的一步一样吗？梯度什么时候发、一次发多少，
    会不会让通信藏到计算后面（overlap）？PyTorch 的 DistributedDataParallel（DDP）替我们做了什么？

    演示 1（demo 1）：四种同步梯度的写法——朴素（naive：每个参数一次 all-reduce）、拼平（flat：一次
      all-reduce 全部梯度）、分桶并和反向重叠（bucketed：梯度一好就异步发出）、DDP——和单进程整批次的
      参考、以及单进程梯度累积（gradient accumulation）比：梯度和 N 步以后的权重一致到多少；
      每种写法每步的计算、通信、暴露出来的通信（exposed）时间，和一步的时间线（timeline）。
    演示 2（demo 2）：DDP 的通信钩子（comm hook）：fp16 压缩和 PowerSGD（低秩压缩），每步发多少字节、
      训练 loss 和验证集 bits/字符，与不压缩并排。

对应讲义 (notes): lectures/lecture09/02_data_parallel.md 第 2 节（第 1 节讲 all-reduce 本身）

运行 (run):
    python3 code/lecture09/02_data_parallel.py                 # 全部：2 个进程，时间见 README
    python3 code/lecture09/02_data_parallel.py --world-size 4  # 4 个进程（比核多：计时会难看）
    python3 code/lecture09/02_data_parallel.py --demo 1 --bucket-kb 16
    python3 code/lecture09/02_data_parallel.py --demo 2 --hook-steps 100 --powersgd-rank 1
    python3 code/lecture09/02_data_parallel.py --quick         # 很小的设置（测试用）
    python3 code/lecture09/02_data_parallel.py --help

一致性（误差多大）和字节数在同一台机器上每次运行都一样；计时标着"实测"，随机器和负载变。
训练用第 1 讲的 AdamW 配方（预热 + 余弦、全局裁剪），前向一律 fp32（为了和单进程逐位比较；gloo 的 bf16 集合通信在 torch 2.13.0 上是好的，
tests/test_gloo_ranks.py 检查过）。
gloo 进程由 gloo_ranks.py 启动和收尾，每个进程一个 torch 线程；Ctrl-C 或某个进程出错都不会留下进程。
需要 (needs): torch；本目录的 data_parallel.py、gloo_ranks.py、alpha_beta.py；code/lecture01 的 tiny_gpt.py、
fm_world.py、console.py、cli_args.py。
"""

import os
import statistics
import sys
import time
from dataclasses import dataclass, replace

try:
    import lecture01  # noqa: F401  the course toolkit, installed by `pip install -r requirements.txt`
except ModuleNotFoundError:
    import _course_path  # noqa: F401  a clone without that install (see that file)

from lecture09.ranks import gloo_ranks  # no torch at import: --help stays fast
from lecture01.cli_args import Parser, add_figures_flag, given_flags, note_quick_overrides, run_main, int_in, positive_float
from lecture01.console import display_width, pad, print_header, print_table, print_wrapped, utf8_output
from lecture09.parallel.data_parallel_report import (  # noqa: F401  (the tests reach the sentences here)
    difference_sentence, loss_sentence, observations, signed)


# =============================================================================
# Settings a student may change (flags below override them)
# =============================================================================

@dataclass(frozen=True)
class Setup:
    world_size: int = 2               # 2 processes on 2 cores; more processes than cores slows every one
    steps: int = 5                    # steps each variant is compared with the reference over
    batch_size: int = 32              # global batch, as in lecture 1 and code 5 (16 sequences per rank)
    bucket_kb: int = 64               # bucketed / DDP bucket size: ~4 buckets for the 334 KB gradient
    hook_steps: int = 40              # demo 2: long enough for the losses to separate
    powersgd_rank: int = 2            # PowerSGD matrix rank (torch's default 1 learned visibly worse)
    timeline_width: int = 56          # columns of the one-step timeline's time axis
    timeout_s: float = 300.0          # gloo_ranks stops every process after this
    port: int = 0                     # 0: a free port picked by gloo_ranks.free_port()


# Why these tolerances (float32, the same weights and data on every path):
# - gradients: the reference takes one mean over all B·T characters, the ranks each take a
#   mean over their B/W·T and then sum and divide by W. Same terms, another order of
#   additions: differences of a few float32 roundings of the largest terms, measured
#   ~1e-7 here; atol 1e-6 / rtol 1e-5 leave a 10x margin.
# - weights after `steps` AdamW steps: Adam divides by sqrt(v) + eps (eps = 1e-8), so for
#   an element whose gradient is near eps a rounding difference of ~1e-10 becomes an
#   update difference of up to lr · 1e-10 / 1e-8 ≈ 3e-5 per step; measured ~2e-5 after 5
#   steps. atol 2e-4 covers 5 such steps at the worst. It does not catch a missing 1/W:
#   AdamW and global clipping ignore the gradient's scale, so a doubled loss (W = 2) moves
#   the weights by 6e-8 after 1 step and 1.1e-4 after 5 (tests/test_data_parallel.py); the
#   gradient check, 2x off, does.
GRAD_ATOL, GRAD_RTOL = 1e-6, 1e-5
WEIGHT_ATOL, WEIGHT_RTOL = 2e-4, 1e-4
MAX_CHECK_STEPS = 5                   # the weight tolerance is argued for at most this many steps
POWERSGD_WARMUP_STEPS = 2             # plain all-reduce first (torch requires > 1: DDP rebuilds its buckets)

QUICK = dict(steps=2, hook_steps=POWERSGD_WARMUP_STEPS + 1)
VARIANT_NAMES = {"naive": "朴素 naive", "flat": "拼平 flat", "bucketed": "分桶重叠 bucketed", "ddp": "DDP"}
HOOK_NAMES = {"none": "DDP 不压缩 none", "fp16": "fp16_compress_hook", "powersgd": "powerSGD_hook"}


def dp_setup(setup):
    from lecture09.parallel import data_parallel
    return data_parallel.DPSetup(steps=setup.steps, batch_size=setup.batch_size, bucket_bytes=setup.bucket_kb * 1024,
                                 powersgd_rank=setup.powersgd_rank, powersgd_start=POWERSGD_WARMUP_STEPS)


# =============================================================================
# Demo 1: four ways to average gradients, against the single-process reference
# =============================================================================

def compare_with_reference(results, reference, accumulation):
    """{variant: (max |Δ grad|, max |Δ weight|, within tolerance)} against the full-batch reference;
    'accumulation' is the single-process gradient accumulation run."""
    import torch
    from lecture09.parallel import data_parallel
    ref_grads, ref_weights, _ = reference
    rows = {}
    candidates = {"accumulation": {"grads": accumulation[0], "weights": accumulation[1]}}
    candidates.update({v: results[0]["variants"][v] for v in results[0]["variants"]})
    for name, r in candidates.items():
        ok = all(torch.allclose(g, h, atol=GRAD_ATOL, rtol=GRAD_RTOL) for g, h in zip(r["grads"], ref_grads)) and \
            all(torch.allclose(w, h, atol=WEIGHT_ATOL, rtol=WEIGHT_RTOL) for w, h in zip(r["weights"], ref_weights))
        rows[name] = (data_parallel.max_abs_difference(r["grads"], ref_grads),
                      data_parallel.max_abs_difference(r["weights"], ref_weights), ok)
    return rows


def median_ms(values):
    return statistics.median(values) * 1e3 if values else float("nan")


def busy_s(intervals):
    """Length of the union of (start, end) intervals: buckets in flight at once count once."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def timing_rows(results, world_size):
    """Per variant: medians over steps 2.. (step 1 warms up) of the slowest rank's phases.

    exposed = the communication still running after backward has finished (the optimizer
    waits for it); comm = the time any all-reduce was in flight (rank 0's timeline);
    hidden = comm − exposed, what ran while backward was still computing. DDP waits inside
    backward(), so its split cannot be read from outside: "—"."""
    compute = [max(times) for times in zip(*(results[r]["compute"] for r in range(world_size)))]
    rows = {}
    for variant in results[0]["variants"]:
        steps = list(zip(*(results[r]["variants"][variant]["timings"] for r in range(world_size))))
        steps = steps[1:] or steps
        fb = median_ms([max(t["forward"] + t["backward"] for t in step) for step in steps])
        after = median_ms([max(t["after_backward"] for t in step) for step in steps])
        step = median_ms([max(t["step"] for t in step) for step in steps])
        timelines = results[0]["variants"][variant]["timelines"]
        timelines = timelines[1:] or timelines
        comm = None if variant == "ddp" else median_ms([busy_s([(a, b) for label, a, b in events
                                                               if label.startswith(("桶", "all-reduce"))])
                                                       for events in timelines])
        rows[variant] = {"fb": fb, "after": after, "step": step, "comm": comm,
                         "calls": results[0]["variants"][variant]["calls"]}
    return median_ms(compute), rows


def timeline_lines(events, width, end_s, label_width):
    """A text Gantt chart of one step: one row per event, a bar from its start to its end,
    on a time axis from 0 to end_s drawn `width` columns wide."""
    lines = [f"{pad('', label_width)} 0{'─' * (width - 1)}{end_s * 1e3:.1f} ms"]
    for label, start, stop in events:
        a = int(start / end_s * width)
        b = max(a + 1, int(round(stop / end_s * width)))
        lines.append(f"{pad(label, label_width)} {' ' * a}{'█' * (b - a)}")
    return lines


def run_ranks(setup, demos):
    """One set of gloo processes for everything asked for: starting them costs seconds."""
    from lecture09.parallel import data_parallel
    W = setup.world_size
    job = data_parallel.DPJob(dp_setup(setup),
                              variants=data_parallel.VARIANTS if "1" in demos else (),
                              timing_steps=max(setup.steps, 3) if "1" in demos else 0,
                              hooks=data_parallel.HOOKS if "2" in demos else (),
                              hook_steps=setup.hook_steps, eval_bpc=True)
    work = (["4 种写法 × " + str(setup.steps) + " 步"] if "1" in demos else []) + \
        ([f"3 个钩子 × {setup.hook_steps} 步"] if "2" in demos else [])
    print(f"（启动 {W} 个 gloo 进程：{'，'.join(work)} starting {W} processes...）", file=sys.stderr, flush=True)
    started = time.perf_counter()
    results = gloo_ranks.run_ranks(data_parallel.dp_worker, W, args=(job,), timeout_s=setup.timeout_s,
                                   port=setup.port or None)
    print(f"（gloo 进程用时 {time.perf_counter() - started:.1f} 秒）", file=sys.stderr)
    return results


def references(setup):
    """The two single-process answers: the whole batch, and W accumulated micro-batches."""
    from lecture09.parallel import data_parallel
    from lecture01 import tiny_gpt
    dps = dp_setup(setup)
    print(f"（单进程参考：整批次和 {setup.world_size} 个微批次的梯度累积 reference runs...）", file=sys.stderr, flush=True)
    train_tokens, _ = tiny_gpt.load_world_tokens(dps.world_seed)
    return (data_parallel.reference_run(dps, train_tokens),
            data_parallel.reference_run(dps, train_tokens, micro_batches=setup.world_size))


def print_demo1(setup, results, reference, accumulation, out=print_wrapped):
    import torch
    from lecture09.parallel import data_parallel
    from lecture01 import tiny_gpt
    from lecture09.lecture_model import MODEL_CONFIG
    dps = dp_setup(setup)
    W = setup.world_size
    print_header(f"演示 1 demo 1：{W} 个 gloo 进程的数据并行，四种同步梯度的写法，对照单进程整批次")
    n_params, n_tensors = data_parallel.n_params(), data_parallel.n_tensors()
    per_rank = setup.batch_size // W
    out(f"模型：第 1 讲的小 GPT，{n_params:,} 个参数（{n_tensors} 个张量），fp32 梯度 {4 * n_params:,} 字节。"
        f"全局 batch {setup.batch_size} 个序列 × {MODEL_CONFIG.block_size} 个字符，每个进程 {per_rank} 个；"
        f"AdamW {setup.steps} 步。")
    diffs = compare_with_reference(results, reference, accumulation)
    rows = [["单进程梯度累积 accumulation", f"{W} 个微批次", f"{diffs['accumulation'][0]:.1e}",
             f"{diffs['accumulation'][1]:.1e}", "✓" if diffs["accumulation"][2] else "✗"]]
    for variant in data_parallel.VARIANTS:
        calls = results[0]["variants"][variant]["calls"]
        rows.append([VARIANT_NAMES[variant], "—" if calls is None else calls, f"{diffs[variant][0]:.1e}",
                     f"{diffs[variant][1]:.1e}", "✓" if diffs[variant][2] else "✗"])
    out(f"\n和单进程整批次参考比（最大绝对差；容差：梯度 atol {GRAD_ATOL:g} / rtol {GRAD_RTOL:g}，"
        f"{setup.steps} 步后的权重 atol {WEIGHT_ATOL:g} / rtol {WEIGHT_RTOL:g}，理由见脚本开头的注释）：")
    print_table(["写法 variant", "all-reduce 次数/步", "第 1 步梯度", f"{setup.steps} 步后权重", "一致"], rows)
    ranks_agree = all(torch.equal(w, v) for variant in results[0]["variants"] for r in results[1:]
                      for w, v in zip(results[0]["variants"][variant]["weights"], r["variants"][variant]["weights"]))
    out(f"{W} 个进程上的权重{'逐位相同' if ranks_agree else '并不逐位相同'}：每个进程拿到同样的平均梯度，走同样的一步。")
    losses = results[0]["variants"]["flat"]["losses"]
    same_losses = all(results[0]["variants"][v]["losses"] == losses for v in results[0]["variants"])
    out(loss_sentence(results[0]["variants"], losses, reference[2]))
    compute_ms, timing = timing_rows(results, W)
    table = []
    for variant, t in timing.items():
        measurable = t["comm"] is not None
        table.append([VARIANT_NAMES[variant], f"{t['fb']:.1f}", f"{t['comm']:.1f}" if measurable else "—",
                      f"{t['after']:.1f}" if measurable else "（在反向里）",
                      f"{max(0.0, t['comm'] - t['after']):.1f}" if measurable else "—", f"{t['step']:.1f}"])
    out(f"\n[实测 measured，随机器和负载变] 每步的中位数（第 2 步起，取最慢的进程），ms。通信 = 有 all-reduce "
        f"在进行的时间；暴露的 exposed = 反向结束后还要等多久（含拼接、拷回梯度）；藏起来的 hidden = 通信 − 暴露的，"
        f"和反向计算同时进行。对照：同样的数据只算不通信，前向 + 反向 {compute_ms:.1f} ms。")
    print_table(["写法", "前向+反向", "通信 comm", "暴露的 exposed", "藏起来的 hidden", "整步 step"], table)
    out("\n[实测] 一步的时间线（第 2 步，rank 0，同一个时间刻度）：先是不重叠的拼平写法，再是分桶重叠的写法。")
    shown = {v: results[0]["variants"][v]["timelines"][min(1, setup.steps - 1)] for v in ("flat", "bucketed")}
    end_s = max(e[2] for events in shown.values() for e in events)
    label_width = max(display_width(e[0]) for events in shown.values() for e in events)
    for variant, events in shown.items():
        out(f"{VARIANT_NAMES[variant]}：")
        for line in timeline_lines(events, setup.timeline_width, end_s, label_width):
            print(line)
    return {"diffs": diffs, "timing": timing, "compute_ms": compute_ms, "n_params": n_params,
            "calls": {v: results[0]["variants"][v]["calls"] for v in results[0]["variants"]},
            "same_losses": same_losses, "ranks_agree": ranks_agree, "buckets": len(data_parallel.make_buckets(
                tiny_gpt.make_model(MODEL_CONFIG).parameters(), dps.bucket_bytes))}


# =============================================================================
# Demo 2: DDP communication hooks
# =============================================================================

def n_matrices_in_model():
    """How many of the model's tensors are matrices (2 or more dimensions), compressible or not."""
    from lecture01 import tiny_gpt
    from lecture09.lecture_model import MODEL_CONFIG
    return sum(p.dim() >= 2 for p in tiny_gpt.make_model(MODEL_CONFIG).parameters())


def print_demo2(setup, results, out=print_wrapped):
    from lecture09.parallel import data_parallel
    W = setup.world_size
    dps = dp_setup(setup)
    print_header(f"演示 2 demo 2：DDP 的通信钩子 comm hooks，{W} 个进程，{setup.hook_steps} 步")
    hooks = results[0]["hooks"]
    base = hooks["none"]
    last = max(1, setup.hook_steps // 4)             # the training loss is noisy: average the last quarter
    rows, figures = [], {}
    for hook in data_parallel.HOOKS:
        h = hooks[hook]
        compressed = [b for b in h["bytes_per_step"][dps.powersgd_start:]] or h["bytes_per_step"]
        per_step = compressed[-1]
        loss = statistics.mean(h["losses"][-last:])
        figures[hook] = {"bytes": per_step, "bpc": h["bpc"], "loss": loss}
        rows.append([HOOK_NAMES[hook], f"{per_step:,}", f"{base['bytes_per_step'][-1] / per_step:.1f}",
                     f"{loss:.4f}", f"{h['bpc']:.4f}", "—" if hook == "none" else signed(h["bpc"] - base["bpc"])])
    compressed, kept, n_matrices, n_vectors = data_parallel.powersgd_elements(dps.powersgd_rank)
    out(f"PowerSGD 秩 {dps.powersgd_rank}：{n_matrices} 个矩阵 M（m × k）各发 P（m × {dps.powersgd_rank}）和 "
        f"Q（k × {dps.powersgd_rank}），共 {compressed:,} 个数；{n_vectors} 个张量原样发（偏置、LayerNorm"
        + (f"，和 {big} 个压了不省的矩阵：(m + k)·r·2 ≥ m·k，PyTorch 钩子的 min_compression_rate = 2）"
           if (big := n_matrices_in_model() - n_matrices) else "）")
        + f"，{kept:,} 个数；({compressed:,} + {kept:,}) × 4 = {4 * (compressed + kept):,} 字节。")
    out(f"每步交给 all-reduce 的字节数（PowerSGD 前 {dps.powersgd_start} 步不压缩，这里是之后每步的数）；"
        f"loss 是最后 {last} 步的平均，bits/字符在验证集上；Δ = 减去不压缩那一行（同样的种子）。")
    print_table(["钩子 hook", "字节/步", "压缩倍数", "训练 loss", "bits/字符", "Δ bits/字符"], rows)
    return figures


# =============================================================================
# Observations
# =============================================================================

# =============================================================================
# Command line and main
# =============================================================================

def parse_args(argv=None):
    s = Setup()
    p = Parser(description="第 9 讲代码 2：数据并行的四种写法与 DDP 通信钩子 "
                                            "(lecture 9, code 2: data parallelism on real gloo processes)")
    p.add_argument("--demo", choices=("1", "2", "3", "all"), default="all", help="跑哪个演示 which demo (default %(default)s)")
    p.add_argument("--quick", action="store_true", help="很小的设置，秒级跑完（测试用）tiny settings for tests")
    add_figures_flag(p)                # fig09_02_overlap_timeline.svg (demo 3)
    p.add_argument("--world-size", type=int_in(1, 8), default=s.world_size,
                   help="gloo 进程数 W，要能整除 --batch-size (default %(default)s)")
    p.add_argument("--batch-size", type=int_in(1, 512), default=s.batch_size,
                   help="全局 batch（序列数）(default %(default)s)")
    p.add_argument("--steps", type=int_in(1, MAX_CHECK_STEPS), default=s.steps,
                   help=f"演示 1 和参考比较的步数，最多 {MAX_CHECK_STEPS} steps compared, at most {MAX_CHECK_STEPS} (default %(default)s)")
    p.add_argument("--bucket-kb", type=int_in(1, 1 << 20), default=s.bucket_kb,
                   help="分桶写法和 DDP 的桶大小 bucket size, KiB (default %(default)s)")
    p.add_argument("--hook-steps", type=int_in(POWERSGD_WARMUP_STEPS + 1, 2000), default=s.hook_steps,
                   help=f"演示 2 每个钩子训练几步，要多于 PowerSGD 的 {POWERSGD_WARMUP_STEPS} 步预热 (default %(default)s)")
    p.add_argument("--powersgd-rank", type=int_in(1, 96), default=s.powersgd_rank,
                   help="PowerSGD 的矩阵秩 (default %(default)s)")
    p.add_argument("--port", type=int_in(0, 65535), default=s.port,
                   help="rank 0 监听的端口；0 = 自动挑一个空闲的 (default %(default)s)")
    p.add_argument("--timeout", type=positive_float, default=s.timeout_s,
                   help="gloo 进程最多运行几秒，超时全部停止 (default %(default)g)")
    p.add_argument("--trace", metavar="FILE", default=None,
                   help="演示 3 把 rank 0 的 Chrome trace 写到这里（Perfetto / chrome://tracing 能打开）write the trace")
    args = p.parse_args(argv)
    if args.trace and not os.access(os.path.dirname(os.path.abspath(args.trace)), os.W_OK):
        p.error("--trace：文件所在的目录不存在或不能写 (its folder is missing or not writable)")
    if args.batch_size % args.world_size:
        p.error(f"--world-size {args.world_size} 不能整除 --batch-size {args.batch_size} "
                f"(the world size must divide the batch)")
    if args.port and not gloo_ranks.port_is_free(args.port):
        p.error(f"--port {args.port} 已被占用 (port in use on 127.0.0.1)")
    setup = replace(s, world_size=args.world_size, batch_size=args.batch_size, steps=args.steps,
                    bucket_kb=args.bucket_kb, hook_steps=args.hook_steps, powersgd_rank=args.powersgd_rank,
                    port=args.port, timeout_s=args.timeout)
    if args.quick:
        note_quick_overrides(QUICK, given_flags(p, argv))
        setup = replace(setup, **QUICK)
    return args, setup


def main(argv=None):
    utf8_output()                        # UTF-8 through any console or redirect (Windows: cp1252)
    args, setup = parse_args(argv)
    from lecture01 import tiny_gpt                      # imports torch: after parsing, so --help and bad flags are fast
    tiny_gpt.use_deterministic_threads()
    started = time.perf_counter()
    demos = ("1", "2", "3") if args.demo == "all" else (args.demo,)
    reference = references(setup) if "1" in demos else None
    ranks = run_ranks(setup, demos) if {"1", "2"} & set(demos) else None
    results = {}
    if "1" in demos:
        results["demo1"] = print_demo1(setup, ranks, *reference)
        print()
    if "2" in demos:
        results["demo2"] = print_demo2(setup, ranks)
    if ranks is not None:
        observations(setup, results)
    if "3" in demos:
        from lecture09.parallel.profile_report import demo3_sentence, run_demo3
        print()
        results["demo3"] = run_demo3(setup, dp_setup(setup), args.trace)
        print_wrapped("\n观察 Observations（演示 3）：")
        print_wrapped(" 1. " + demo3_sentence(results["demo3"]))
    if args.figures:
        from lecture09.parallel.profile_figures import draw   # matplotlib only now
        draw(args.figures, results)
    print(f"（总用时 total {time.perf_counter() - started:.1f} 秒）", file=sys.stderr)
    return results


if __name__ == "__main__":
    run_main(main, failures=gloo_ranks.LAUNCH_FAILURES)
