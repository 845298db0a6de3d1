"""Code 4's demos 1-4, run and printed (lecture 9, §4, §4.9, §4.15; demo 5 is in pipeline_beyond_report.py): pipeline schedules on a
timeline (demo 1), the tiny GPT as a real pipeline on gloo ranks (demo 2), tensor-parallel
layers against nn.Linear (demo 3), and the 3D-parallelism planner (demo 4), each with
observations worded from its own numbers. The script holds the settings and the flags.
torch is imported inside the functions that need it.
"""

import sys
import time
from dataclasses import replace

from lecture01.console import LINE_WIDTH, display_width, print_header, print_table, print_wrapped
from lecture09.parallel import memory_model as mm
from lecture09.parallel import parallel_plan
from lecture09.parallel import pipeline
from lecture09.ranks import alpha_beta
from lecture09.ranks import gloo_ranks


GRAD_ATOL = 1e-6                       # see check_pipeline


TP_ATOL = 1e-5                         # see check_tensor_parallel


def phases(stage, n_stages, n_micro):
    """1F1B's (warm-up forwards, steady 1F1B pairs, cool-down backwards) on one stage."""
    warmup = min(n_stages - stage - 1, n_micro)
    return warmup, n_micro - warmup, warmup


def never_deadlocks(schedule, n_stages, n_micro):
    try:
        pipeline.check_rendezvous(pipeline.programs(schedule, n_stages, n_micro))
    except RuntimeError:
        return False
    return True


def run_demo1(setup, out=print_wrapped):
    p, m = setup.n_stages, setup.n_micro
    print_header(f"演示 1：{p} 个阶段 × {m} 个 micro-batch 的两种流水线调度（前向 {setup.t_forward}、"
                 f"反向 {setup.t_backward} 个时间单位）")
    timelines = {s: pipeline.simulate(s, p, m, setup.t_forward, setup.t_backward) for s in pipeline.SCHEDULES}
    for schedule, timeline in timelines.items():
        print()
        out(f"{pipeline.SCHEDULE_NAMES[schedule]}：共 {timeline.total_time:g} 个时间单位，气泡 bubble "
            f"{timeline.bubble_fraction:.1%}（F3 = 第 3 个 micro-batch 的前向，B3 = 它的反向，-- 同一个操作还在算，. 空闲）")
        rows = pipeline.timeline_rows(timeline)
        lines = [f"阶段 {s} │ {row}" for s, row in enumerate(rows)]
        if max(display_width(line) for line in lines) > LINE_WIDTH:
            out(f"（时间线超过 {LINE_WIDTH} 列，不画了：用更小的 --stages / --micro-batches）")
        else:
            for line in lines:
                print(line)
    print()
    out("1F1B 每个阶段的三段（程序里的 # Warmup / # Steady state / # Cooldown）和最多存几个 micro-batch 的激活：")
    rows = []
    programs = {s: pipeline.programs(s, p, m) for s in pipeline.SCHEDULES}
    for stage in range(p):
        warm, steady, cool = phases(stage, p, m)
        rows.append((f"阶段 {stage}", f"{warm} 个前向", f"{steady} 对 1F+1B", f"{cool} 个反向",
                     pipeline.peak_activations(programs["gpipe"][stage]),
                     pipeline.peak_activations(programs["1f1b"][stage])))
    print_table(["", "热身 warm-up", "稳定 steady", "收尾 cooldown", "GPipe 最多存", "1F1B 最多存"], rows)

    print()
    out("气泡 (p − 1)/(m + p − 1)（公式；每一格都用 simulate 在两种调度、前向:反向 = 1:1 和 1:2 下核对）：")
    checked, worst = 0, 0.0
    table = []
    for n_stages in setup.table_stages:
        cells = []
        for n_micro in setup.table_micro:
            formula = pipeline.bubble_fraction(n_stages, n_micro)
            for schedule in pipeline.SCHEDULES:
                for t_b in (1, 2):
                    simulated = pipeline.simulate(schedule, n_stages, n_micro, 1, t_b).bubble_fraction
                    worst = max(worst, abs(simulated - formula))
                    checked += 1
            cells.append(f"{formula:.1%}")
        table.append((f"p = {n_stages}", *cells))
    print_table(["阶段数"] + [f"m = {n}" for n in setup.table_micro], table)
    out(f"  {checked} 个模拟和公式的最大差 {worst:.1e}。")
    print()
    out("阶段 0 最多存几个 micro-batch 的激活（GPipe / 1F1B）：")
    peaks = []
    for n_stages in setup.table_stages:
        cells = []
        for n_micro in setup.table_micro:
            g = pipeline.peak_activations(pipeline.stage_program("gpipe", 0, n_stages, n_micro))
            f = pipeline.peak_activations(pipeline.stage_program("1f1b", 0, n_stages, n_micro))
            cells.append(f"{g} / {f}")
        peaks.append((f"p = {n_stages}", *cells))
    print_table(["阶段数"] + [f"m = {n}" for n in setup.table_micro], peaks)
    deadlock_free = all(never_deadlocks(s, n_stages, n_micro) for s in pipeline.SCHEDULES
                        for n_stages in setup.table_stages for n_micro in setup.table_micro)
    return {"timelines": timelines, "worst": worst, "checked": checked, "deadlock_free": deadlock_free}


def memory_sentence(p, m, gpipe_peak, ofob_peak):
    """Demo 1's memory observation: GPipe holds all m micro-batches at stage 0, 1F1B at most
    min(p, m); with m <= p the two hold the same number."""
    if ofob_peak < gpipe_peak:
        return (f"差别在显存：GPipe 的阶段 0 要存全部 {gpipe_peak} 个 micro-batch 的激活，1F1B 只存 {ofob_peak} 个"
                f"（= min(p, m) = min({p}, {m})），做完一个反向就放掉一个。")
    return (f"这次显存也一样：m = {m} 不比 p = {p} 大，GPipe 和 1F1B 的阶段 0 都存 {ofob_peak} 个 micro-batch 的激活"
            f"（= min(p, m)）；m 比 p 大时 1F1B 才省（试试 --micro-batches {2 * p}）。")


def demo1_observations(setup, r, out=print_wrapped):
    p, m = setup.n_stages, setup.n_micro
    g, f = r["timelines"]["gpipe"], r["timelines"]["1f1b"]
    gpipe_peak = pipeline.peak_activations(pipeline.stage_program("gpipe", 0, p, m))
    ofob_peak = pipeline.peak_activations(pipeline.stage_program("1f1b", 0, p, m))
    big_m = max(setup.table_micro)
    print()
    out("观察 Observations（演示 1）：")
    out(f" 1. 两种调度一样长（{g.total_time:g} 和 {f.total_time:g} 个时间单位），气泡都是 (p−1)/(m+p−1) = "
        f"{pipeline.bubble_fraction(p, m):.1%}：开头要等流水线灌满，结尾要等它排空，每个阶段都空等 p − 1 = {p - 1} "
        f"次前向加反向的时间。")
    out(" 2. " + memory_sentence(p, m, gpipe_peak, ofob_peak) + "所以 1F1B 可以用很多 micro-batch 把气泡压小而不多占显存："
        f"p = {max(setup.table_stages)}、m = {big_m} 时气泡 {pipeline.bubble_fraction(max(setup.table_stages), big_m):.1%}。")
    out(f" 3. 阻塞的 send/recv 要两边同时到才完成（rendezvous）：两个相邻阶段在稳定段要互相交换一个张量，"
        f"下面的阶段先发后收、上面的先收后发，否则两边都卡在发送上。表里的 {len(setup.table_stages) * len(setup.table_micro) * 2} "
        f"个 (p, m, 调度) 程序{'都' if r['deadlock_free'] else '没有都'}通过了不死锁检查（pipeline.check_rendezvous）。"
        "交错 1F1B（interleaved，Narayanan et al. 2021）让每张卡放 v 段不相邻的层，把气泡再降到 1/v（演示 5）。")


def check_pipeline(real):
    """Run both schedules on real ranks; compare with the unsplit model.

    Tolerance GRAD_ATOL: the pipeline sums the m micro-batch gradients one by one where
    the unsplit model sums the whole batch at once; float32 addition in another order
    differs by ~1e-7 on gradients of size ~0.1 (measured 9e-8). A missing micro-batch or
    a gradient sent to the wrong stage changes them by ~1e-2."""
    import torch

    from lecture01 import tiny_gpt
    from lecture09.lecture_model import MODEL_CONFIG

    config = replace(MODEL_CONFIG, n_layer=real.n_layer)
    run = pipeline.PipelineRun(config, real.model_seed, real.pipe_micro)
    tokens, _ = tiny_gpt.load_world_tokens(0)
    x, y = tiny_gpt.get_batch(tokens, real.batch_size, config.block_size, torch.Generator().manual_seed(real.data_seed))
    t0 = time.perf_counter()
    ranks = gloo_ranks.run_ranks(pipeline.pipeline_worker, real.pipe_ranks, args=(run, x, y),
                                 timeout_s=120 + real.batch_size / 10)
    print(f"（演示 2 的 {real.pipe_ranks} 个进程用时 {time.perf_counter() - t0:.1f} 秒）", file=sys.stderr)
    loss, reference = pipeline.unsplit_gradients(run, x, y)
    out = {"loss": loss, "n_params": sum(g.numel() for g in reference.values()), "config": config}
    for schedule in pipeline.SCHEDULES:
        grads = {}
        for r in ranks:
            grads.update(r[schedule]["grads"])
        same_names = set(grads) == set(reference)
        diff = max((grads[n] - reference[n]).abs().max().item() for n in reference) if same_names else float("inf")
        out[schedule] = {"max_abs_diff": diff, "complete": same_names, "loss": ranks[-1][schedule]["loss"],
                         "peaks": [r[schedule]["peak"] for r in ranks],
                         "names_per_stage": [sorted(r[schedule]["grads"]) for r in ranks]}
    return out


def run_demo2(real, out=print_wrapped):
    p, m = real.pipe_ranks, real.pipe_micro
    print_header(f"演示 2：小 GPT 真的切成 {p} 个阶段（{p} 个 gloo 进程，阻塞 send/recv），"
                 f"batch {real.batch_size} = {m} 个 micro-batch × {real.batch_size // m}")
    r = check_pipeline(real)
    pieces = ["词嵌入 embedding"] + [f"块 block {i}" for i in range(real.n_layer)] + ["ln_f + head"]
    bounds = pipeline.stage_bounds(len(pieces), p)
    out(f"模型：MODEL_CONFIG 改成 {real.n_layer} 个块（{r['n_params']:,} 个参数），切法："
        + "；".join(f"阶段 {s} = {' + '.join(pieces[a:b])}" for s, (a, b) in enumerate(bounds)))
    out("每个 micro-batch 的 loss 除以 m 再反向，m 个梯度加起来正好是整个 batch 的平均梯度；对照：不切开的模型一次算整个 batch。")
    rows = []
    for schedule in pipeline.SCHEDULES:
        s = r[schedule]
        formula = [pipeline.peak_activations_formula(schedule, stage, p, m) for stage in range(p)]
        rows.append((pipeline.SCHEDULE_NAMES[schedule], f"{s['max_abs_diff']:.1e}", f"{abs(s['loss'] - r['loss']):.1e}",
                     " / ".join(map(str, s["peaks"])), " / ".join(map(str, formula))))
    print_table(["调度", "梯度最大差", "loss 差", "各阶段实际最多存", "公式"], rows)
    return r


def demo2_observations(real, r, out=print_wrapped):
    ok = all(r[s]["complete"] and r[s]["max_abs_diff"] <= GRAD_ATOL for s in pipeline.SCHEDULES)
    worst = max(r[s]["max_abs_diff"] for s in pipeline.SCHEDULES)
    print()
    out("观察 Observations（演示 2）：")
    out(f" 1. 两种调度的梯度{'都和' if ok else '没有都和'}不切开的模型一致（最大差 {worst:.1e}，容差 {GRAD_ATOL:g}："
        "只是 m 个 micro-batch 一个一个加、和整个 batch 一起加的舍入不同）。调度只改变计算的顺序，不改变结果。")
    out(f" 2. 各阶段实际存的 micro-batch 数就是公式：GPipe 每个阶段 {real.pipe_micro} 个，1F1B 从阶段 0 的 "
        f"{min(real.pipe_ranks, real.pipe_micro)} 个递减到最后一个阶段的 1 个。")


def check_tensor_parallel(real):
    """Column / row / MLP on real ranks against nn.Linear.

    Tolerance TP_ATOL: a split layer sums each output over the input features in two (or
    more) partial sums and then adds them, where nn.Linear sums in one go; values of size
    ~1 after ~100-200 products differ by float32 rounding, ~1e-6 (measured 3e-6)."""
    from lecture09.parallel import tensor_parallel as tp

    case = tp.TPCase()
    reference = tp.reference(case)
    t0 = time.perf_counter()
    ranks = gloo_ranks.run_ranks(tp.tp_worker, real.tp_ranks, args=(case,), timeout_s=120)
    print(f"（演示 3 的 {real.tp_ranks} 个进程用时 {time.perf_counter() - t0:.1f} 秒）", file=sys.stderr)
    got = tp.assemble(ranks, case)

    def diff(a, b):
        return (a - b).abs().max().item()

    checks = {}
    for kind in ("column", "row"):
        checks[kind] = {k: diff(got[kind][k], reference[kind][k]) for k in ("y", "dx", "weight", "bias")}
    mlp = got["mlp"]
    checks["mlp"] = {"y": diff(mlp["y"], reference["mlp"]["y"]), "dx": diff(mlp["dx"], reference["mlp"]["dx"]),
                     "weight": max(diff(mlp[l]["weight"], reference["mlp"][l]["weight"]) for l in ("fc1", "fc2")),
                     "bias": max(diff(mlp[l]["bias"], reference["mlp"][l]["bias"]) for l in ("fc1", "fc2"))}
    all_reduces = {kind: ranks[0][kind]["all_reduces"] for kind in ("column", "row", "mlp")}
    return {"case": case, "checks": checks, "all_reduces": all_reduces, "same_on_every_rank": got["same_on_every_rank"]}


def tp_traffic(model, tp_size, micro_batch=1, cluster=parallel_plan.Cluster()):
    """Per transformer layer and micro-batch: (all-reduce payload bytes, bytes each GPU
    sends, seconds over NVLink, seconds over InfiniBand, compute seconds per GPU)."""
    payload = micro_batch * model.seq_len * model.hidden * mm.FP16_BYTES      # one (b, s, h) fp16 tensor
    n_calls = 4                                                                # 2 forward + 2 backward
    padded = -(-payload // tp_size) * tp_size
    sent = n_calls * alpha_beta.all_reduce_bytes_sent("ring", padded, tp_size)
    nvlink = n_calls * alpha_beta.ring_all_reduce_time_s(padded, tp_size, cluster.latency_s, cluster.nvlink_bytes_per_s)
    ib = n_calls * alpha_beta.ring_all_reduce_time_s(padded, tp_size, cluster.latency_s, cluster.infiniband_bytes_per_s)
    compute = mm.compute_seconds(mm.layer_flops(model.seq_len, micro_batch, model.hidden) / tp_size, 1,
                                 cluster.peak_flops, cluster.utilisation)
    return payload, sent, nvlink, ib, compute


def fmt_diff(x):
    """A maximum difference: "0" when the two agree bit for bit."""
    return "0" if x == 0 else f"{x:.1e}"


def run_demo3(real, out=print_wrapped):
    print_header(f"演示 3：张量并行 tensor parallelism——按列切、按行切的线性层在 {real.tp_ranks} 个 gloo 进程上和 nn.Linear 比")
    r = check_tensor_parallel(real)
    c = r["case"]
    out(f"层：nn.Linear({c.hidden}, {c.ratio * c.hidden}) 和 nn.Linear({c.ratio * c.hidden}, {c.hidden})，输入 "
        f"({c.batch}, {c.seq}, {c.hidden})；每个 rank 从同一个种子建整层、只留自己那一片。")
    out("按列切 column-parallel：输出特征分到各 rank，最后 all-gather 拼起来；按行切 row-parallel：输入特征分到各 rank，"
        "部分和 all-reduce；MLP（Megatron）：按列切 → GELU → 按行切，中间不拼。")
    names = {"column": "按列切 column-parallel", "row": "按行切 row-parallel", "mlp": "MLP：列切 → GELU → 行切"}
    rows = []
    for kind, label in names.items():
        ch = r["checks"][kind]
        forward = sum(1 for where, _ in r["all_reduces"][kind] if where == "forward")
        backward = sum(1 for where, _ in r["all_reduces"][kind] if where == "backward")
        rows.append((label, *(fmt_diff(ch[k]) for k in ("y", "dx", "weight", "bias")), f"{forward} / {backward}"))
    print_table(["最大差 vs nn.Linear", "输出", "输入梯度", "权重梯度", "偏置梯度", "all-reduce 前向/反向"], rows)

    cluster = parallel_plan.Cluster()
    t = real.tp_size
    print()
    out(f"真实模型每个 transformer 层、每个 micro-batch（b = 1）的张量并行通信：TP = {t}，每层 4 次 all-reduce"
        f"（前向 2、反向 2），每次 b·s·h 个 fp16 数；环形 all-reduce 按 α–β 模型（alpha_beta.py）：NVLink "
        f"{cluster.nvlink_bytes_per_s / 1e9:g} GB/s（一台机器里），InfiniBand {cluster.infiniband_bytes_per_s / 1e9:g} GB/s"
        f"（机器之间），α = {cluster.latency_s * 1e6:g} µs；计算按 72·b·s·h²·(1 + s/6h) / TP FLOPs、峰值的 "
        f"{cluster.utilisation:.0%}")
    rows, traffic = [], {}
    for name in ("1.3B", "7B", "175B"):
        model = mm.MODELS[name]
        payload, sent, nvlink, ib, compute = tp_traffic(model, t, 1, cluster)
        traffic[name] = (payload, sent, nvlink, ib, compute)
        fits = t <= cluster.gpus_per_node        # a ring of more GPUs than one machine has crosses InfiniBand
        rows.append((name, f"{payload / mm.MB:.1f}", f"{sent / mm.MB:.1f}", f"{nvlink * 1e3:.2f}" if fits else "—",
                     f"{ib * 1e3:.2f}", f"{compute * 1e3:.2f}", f"{nvlink / compute:.0%}" if fits else "—",
                     f"{ib / compute:.0%}"))
    print_table(["模型", "每次 MB", "每层每卡发 MB", "NVLink ms", "IB ms", "计算 ms", "NVLink ÷ 计算", "IB ÷ 计算"], rows)
    if t > cluster.gpus_per_node:
        out(f"TP = {t} 超过一台机器的 {cluster.gpus_per_node} 张卡：环里至少有一段走 InfiniBand，环形 all-reduce 的速度由最慢的"
            "那一段决定，所以 NVLink 两列不适用（—），只看 IB 两列。")
    r["traffic"] = traffic
    return r


def demo3_observations(real, r, out=print_wrapped):
    worst = max(v for ch in r["checks"].values() for v in ch.values())
    mlp = r["all_reduces"]["mlp"]
    ib_ratio = {name: v[3] / v[4] for name, v in r["traffic"].items()}
    nv_ratio = {name: v[2] / v[4] for name, v in r["traffic"].items()}
    print()
    out("观察 Observations（演示 3）：")
    out(f" 1. 切开的层和 nn.Linear 一致：输出和三种梯度的最大差 {worst:.1e}（容差 {TP_ATOL:g}：一个输出分成几段部分和"
        "再相加，舍入不同）。按列切的输入梯度和按行切的输出都要 all-reduce，因为每个 rank 只有一部分和。")
    out(f" 2. MLP 把两种切法接起来，中间的 GELU 逐个特征算、不用通信：整个 MLP 前向 "
        f"{sum(1 for w, _ in mlp if w == 'forward')} 次、反向 {sum(1 for w, _ in mlp if w == 'backward')} 次 all-reduce，"
        f"每次 {mlp[0][1]:,} 个数 = batch × 序列 × 隐藏维，和层的参数量无关。")
    slower = [name for name, x in ib_ratio.items() if x > 1]
    fits = real.tp_size <= parallel_plan.Cluster().gpus_per_node
    where = (f"TP = {real.tp_size} 时通信在 NVLink 上是计算时间的 {min(nv_ratio.values()):.0%}–{max(nv_ratio.values()):.0%}，"
             "换到 InfiniBand 上是 " if fits else
             f"TP = {real.tp_size} 放不进一台机器，环要走 InfiniBand，通信是计算时间的 ")
    out(f" 3. 每层、每个 micro-batch 都要通信，而且在关键路径上（下一层要等它的结果）：{where}"
        f"{min(ib_ratio.values()):.0%}–{max(ib_ratio.values()):.0%}"
        + (f"，{'、'.join(slower)} 的通信比计算还慢" if slower else "")
        + "。h 越大越划算：计算 ∝ h²，通信 ∝ h。"
        "所以张量并行放在一台机器的 NVLink 里，跨机器用流水线和数据并行。")
