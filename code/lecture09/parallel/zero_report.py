"""Code 3's demos on the tiny GPT (lecture 9, §3.5-§3.6): its real bytes counted against
memory_model's formula (demo 3), and ZeRO-1 on real gloo ranks, ours and PyTorch's, against
plain AdamW (demo 4), with observations worded from the run. torch is imported inside.
"""

import sys
import time

from lecture01.console import print_header, print_table, print_wrapped
from lecture09.ranks import gloo_ranks

MAX_RANKS = 4                     # 2 shared cores: more ranks only wait for each other


def count_tiny_gpt(real):
    """Build the lecture 1 model and AdamW, take one step, count every byte."""
    import torch

    from lecture01 import tiny_gpt
    from lecture09.lecture_model import MODEL_CONFIG
    from lecture09.parallel import zero

    model = tiny_gpt.make_model(MODEL_CONFIG, real.model_seed)
    optimizer = tiny_gpt.make_adamw(model, tiny_gpt.TrainConfig())
    tokens, _ = tiny_gpt.load_world_tokens(0)
    x, y = tiny_gpt.get_batch(tokens, real.batch_size, model.config.block_size,
                              torch.Generator().manual_seed(real.data_seed))
    tiny_gpt.lm_loss(model, x, y).backward()
    optimizer.step()
    params = list(model.parameters())
    moments, steps = zero.optimizer_state_bytes(optimizer)
    return {"n_params": model.n_params(), "n_tensors": len(params),
            "params": zero.tensor_bytes(params), "grads": zero.tensor_bytes([p.grad for p in params]),
            "moments": moments, "steps": steps,
            "dtypes": sorted({str(p.dtype) for p in params})}


def run_demo3(real, out=print_wrapped):
    print_header("演示 3：在第 1 讲的小 GPT 上数真实的字节（fp32：参数 4 + 梯度 4 + Adam 的 m、v 各 4 字节）")
    c = count_tiny_gpt(real)
    n = c["n_params"]
    out(f"MODEL_CONFIG（lecture_model.py）：{n:,} 个参数，{c['n_tensors']} 个参数张量，dtype {', '.join(c['dtypes'])}；"
        "AdamW（tiny_gpt.make_adamw）走一步以后数：")
    rows = [("参数 parameters", f"{c['params']:,}", f"4Ψ = {4 * n:,}", c["params"] == 4 * n),
            ("梯度 .grad", f"{c['grads']:,}", f"4Ψ = {4 * n:,}", c["grads"] == 4 * n),
            ("Adam 的 exp_avg + exp_avg_sq", f"{c['moments']:,}", f"8Ψ = {8 * n:,}", c["moments"] == 8 * n),
            ("Adam 的 step 计数（每个张量一个 fp32 标量）", f"{c['steps']:,}", f"4 × {c['n_tensors']} = {4 * c['n_tensors']}",
             c["steps"] == 4 * c["n_tensors"])]
    total = c["params"] + c["grads"] + c["moments"]
    rows.append(("合计（不含 step）", f"{total:,}", f"16Ψ = {16 * n:,}", total == 16 * n))
    print_table(["项目", "实测字节", "公式", "相等"], [(a, b, f, "✓" if ok else "✗") for a, b, f, ok in rows])
    print()
    out("观察 Observations（演示 3）：")
    out(f" 1. 实测和公式{'逐字节相等' if all(r[3] for r in rows) else '不相等'}。fp32 训练每个参数也是 4 + 4 + 8 = 16 字节，"
        "和混合精度的 2 + 2 + 12 一样多：混合精度省的是激活和计算时间，不是模型状态。")
    out(f" 2. 公式之外的只有 {c['n_tensors']} 个 step 计数器（{c['steps']} 字节）：torch 的 AdamW 给每个参数张量存一个 "
        "fp32 标量的步数，和参数个数无关。")
    return c


def run_demo4(real, out=print_wrapped):
    from lecture01 import tiny_gpt
    from lecture09.parallel import zero

    run = zero.ZeroRun(steps=real.steps, batch_size=real.batch_size, model_seed=real.model_seed,
                       data_seed=real.data_seed)
    print_header(f"演示 4：真的 ZeRO-1——{real.ranks} 个 gloo 进程分片 AdamW 的状态，训练 {run.steps} 步，"
                 f"和单进程的普通 AdamW 比")
    out(f"小 GPT（MODEL_CONFIG），batch {run.batch_size} = {real.ranks} × {run.batch_size // real.ranks}，"
        f"学习率按 tiny_gpt.lr_at（峰值 {run.train.peak_lr:g}），全局裁剪到 {run.train.clip_norm:g}，fp32。每一步：")
    out("  ShardedAdamW（自己写的）：all-reduce 梯度后各取自己那一片（= reduce-scatter）→ 只更新自己那一片"
        "（m、v 只有这一片那么长）→ all-gather 各片拼回整个模型")
    out("  ZeroRedundancyOptimizer（PyTorch）：先 all-reduce 梯度，再按整个张量把参数分给各 rank，各自更新后广播")
    tokens, _ = tiny_gpt.load_world_tokens(0)
    xs, ys = zero.make_batches(run, tokens)
    t0 = time.perf_counter()
    ranks = gloo_ranks.run_ranks(zero.zero1_worker, real.ranks, args=(run, xs, ys), timeout_s=180 + real.steps)
    reference, (ref_moments, ref_steps) = zero.reference_run(run, xs, ys)
    print(f"（演示 4 用时 {time.perf_counter() - t0:.1f} 秒）", file=sys.stderr)
    own = zero.agreement(run, reference, ranks[0]["own"], xs[0])
    torch_zero = zero.agreement(run, reference, ranks[0]["torch"], xs[0])
    replicas_equal = all(bool((r["own"] == ranks[0]["own"]).all()) and bool((r["torch"] == ranks[0]["torch"]).all())
                         for r in ranks)
    rows = [("普通 AdamW（1 个进程）", f"{ref_moments:,}", "1.00")]
    diffs = []
    for label, key, agree in (("ShardedAdamW（自己写的）", "own_state_bytes", own),
                              ("ZeroRedundancyOptimizer", "torch_state_bytes", torch_zero)):
        per_rank = [r[key] for r in ranks]
        rows.append((label, " / ".join(f"{b:,}" for b in per_rank), f"{max(per_rank) / ref_moments:.2f}"))
        diffs.append((label, f"{agree.max_abs_diff:.1e}", f"{agree.key_bias_max_abs_diff:.1e}",
                      f"{agree.logits_max_abs_diff:.1e}"))
    print_table(["优化器", "每个 rank 的 m + v 字节", "最多 ÷ 普通"], rows)
    print()
    out(f"{run.steps} 步以后和普通 AdamW 的最大绝对差（logits：在第一个 batch 上）：")
    print_table(["优化器", "权重（key bias 以外）", "key bias", "logits"], diffs)
    result = {"reference_moments": ref_moments, "ranks": ranks, "own": own, "torch": torch_zero,
              "replicas_equal": replicas_equal, "run": run}
    return result


def demo4_observations(real, r, out=print_wrapped):
    from lecture09.parallel import zero

    own_bytes = [x["own_state_bytes"] for x in r["ranks"]]
    torch_bytes = [x["torch_state_bytes"] for x in r["ranks"]]
    print()
    out("观察 Observations（演示 4）：")
    ok = r["own"].ok and r["torch"].ok
    out(f" 1. 两种 ZeRO-1 的权重{'都和' if ok else '没有都和'}普通 AdamW 一致：key bias 以外每个权重的差 ≤ "
        f"{max(r['own'].max_abs_diff, r['torch'].max_abs_diff):.1e}（容差 {zero.ATOL:g}：只是求和顺序不同带来的 fp32 舍入），"
        f"每个 rank 上的模型{'逐位相同' if r['replicas_equal'] else '不完全相同'}。")
    out(f" 2. key bias 是例外，差到 {max(r['own'].key_bias_max_abs_diff, r['torch'].key_bias_max_abs_diff):.1e}：给一个 query 的"
        "所有注意力分数加同一个数，softmax 不变，所以它的精确梯度是 0，收到的只是舍入噪声；Adam 把每个分量除以它自己的大小，"
        "把噪声放大成一整步。它改变不了输出：logits 最多差 "
        f"{max(r['own'].logits_max_abs_diff, r['torch'].logits_max_abs_diff):.1e}。")
    spread = max(torch_bytes) / min(torch_bytes) - 1
    tensors = [x["torch_tensors_owned"] for x in r["ranks"]]
    out(f" 3. 优化器状态：普通 AdamW 每个进程 {r['reference_moments']:,} 字节；自己写的按一条扁平向量平均切，每个 rank "
        f"{max(own_bytes):,} 字节（1/{len(own_bytes)}）；PyTorch 按整个张量分（各 rank 分到 "
        f"{' / '.join(map(str, tensors))} 个张量），最多的 rank {max(torch_bytes):,}、最少的 {min(torch_bytes):,} 字节，"
        f"差 {spread:.1%}" + ("：张量有大有小，整个整个地分，就分不匀。" if spread >= 0.05 else
                            "，这次分得几乎一样匀；但张量有大有小，rank 多了、张量少了就分不匀"
                            + ("（试试 --ranks 4）。" if len(own_bytes) < MAX_RANKS else "。")))
    for rank, x in enumerate(r["ranks"]):          # which tensors: exercise 5 asks which one is the biggest
        out(f"    PyTorch 的 rank {rank}：" + "、".join(x["torch_tensor_names"]))
