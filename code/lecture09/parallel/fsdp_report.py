"""Code 03's demo 6: FSDP (ZeRO-3) on real gloo ranks, our own (fsdp.OwnFSDP) and PyTorch's
fully_shard, against plain AdamW in one process; what rank 0 holds at each moment of a
step, its peak against the formula, and the step's traffic against §3.4's 3Ψ. Notes §3.7."""

import sys
import time
from dataclasses import replace

from lecture01.console import print_header, print_table, print_wrapped
from lecture09.ranks import gloo_ranks


def peak_formula(unit_bytes, world_size):
    """Shards (Ψ/p, each unit padded to p equal pieces) + the largest pair of neighbouring
    units gathered (one computing, the next in flight: prefetch)."""
    shards = sum(shard for _, _, shard in unit_bytes)
    pairs = [unit_bytes[i][1] + world_size * unit_bytes[i + 1][2] for i in range(len(unit_bytes) - 1)]
    pairs += [unit_bytes[i + 1][1] + world_size * unit_bytes[i][2] for i in range(len(unit_bytes) - 1)]
    return shards + max(pairs + [max(full for _, full, _ in unit_bytes)])


def traffic_formula(unit_bytes, world_size):
    """(all-gather, reduce-scatter) bytes one rank receives per step: every unit gathered in
    the forward and again in the backward, its gradient reduce-scattered once, (p − 1)/p of the
    padded unit each time: 2Ψ and Ψ of §3.4's 3Ψ."""
    padded = sum(world_size * shard for _, _, shard in unit_bytes)
    return 2 * (world_size - 1) * padded // world_size, (world_size - 1) * padded // world_size


def run_demo6(real, n_layer, timed=True, out=print_wrapped):
    from lecture01 import tiny_gpt
    from lecture09.parallel import fsdp, zero

    run = zero.ZeroRun(steps=real.steps, batch_size=real.batch_size, model_seed=real.model_seed,
                       data_seed=real.data_seed, config=replace(zero.MODEL_CONFIG, n_layer=n_layer))
    print_header(f"演示 6：FSDP（ZeRO-3）——{real.ranks} 个 gloo 进程，{n_layer} 层的小 GPT，{run.steps} 步，和单进程比")
    out("单元 units：词嵌入、每个块、最后的 LayerNorm + 输出层，各自摊平成一个向量、按进程数切成等长的片（不够就补零）。"
        "每个进程只常驻自己那一片和它的 AdamW 状态。前向到一个单元时 all-gather 它（同时先发起下一个单元的 "
        "all-gather：预取 prefetch），算完就把收齐的参数释放；反向再 all-gather 一次，梯度 reduce-scatter 后释放。")
    tokens, _ = tiny_gpt.load_world_tokens(0)
    xs, ys = zero.make_batches(run, tokens)
    t0 = time.perf_counter()
    ranks = gloo_ranks.run_ranks(fsdp.fsdp_worker, real.ranks, args=(run, xs, ys), timeout_s=180 + 2 * real.steps)
    reference, _ = zero.reference_run(run, xs, ys)
    print(f"（演示 6 用时 {time.perf_counter() - t0:.1f} 秒）", file=sys.stderr)
    own = zero.agreement(run, reference, ranks[0]["own"], xs[0])
    torch_fsdp = zero.agreement(run, reference, ranks[0]["torch"], xs[0])
    out(f"{run.steps} 步以后和普通 AdamW（1 个进程、整个 batch）的最大绝对差（logits：第一个 batch 上）：")
    print_table(["实现", "权重（key bias 以外）", "key bias", "logits"],
                [(label, f"{a.max_abs_diff:.1e}", f"{a.key_bias_max_abs_diff:.1e}", f"{a.logits_max_abs_diff:.1e}")
                 for label, a in (("OwnFSDP（自己写的）", own), ("fully_shard（PyTorch FSDP2）", torch_fsdp))])
    r0 = ranks[0]
    print()
    out("(b) 第 1 步里 rank 0 每一刻持有的参数字节（片 + 收齐的单元 + 还在路上的 all-gather 缓冲）：")
    print_table(["ms", "事件", "单元", "持有字节"], [(f"{t * 1e3:.1f}" if timed else "—", event, unit, f"{held:,}")
                                                  for t, event, unit, held in r0["log"]], aligns=[">", "<", "<", ">"])
    units = r0["unit_bytes"]
    peak = max(held for *_, held in r0["log"])
    formula = peak_formula(units, real.ranks)
    gathered, scattered = r0["traffic"]
    f_gather, f_scatter = traffic_formula(units, real.ranks)
    print()
    print_table(["", "实测 measured", "公式 formula"],
                [("峰值参数字节 peak", f"{peak:,}", f"{formula:,}"),
                 ("每步 all-gather 收到", f"{gathered:,}", f"{f_gather:,}"),
                 ("每步 reduce-scatter 收到", f"{scattered:,}", f"{f_scatter:,}")], aligns=["<", ">", ">"])
    out(f"公式：峰值 = 各单元的片（{sum(s for *_, s in units):,}）+ 相邻两个单元同时收齐（一个在算、一个在预取）；"
        f"流量按第 3.4 节 ZeRO-3 的 3Ψ：前向、反向各 all-gather 一次（2Ψ），reduce-scatter 一次（Ψ），每次收 (p − 1)/p，"
        "fp32 每个数 4 字节。" + ("ms 是这台机器的，换一台会变。" if timed else "--quick 不计时。"))
    if timed:
        import statistics
        steps = lambda key: [max(r[key][i] for r in ranks) for i in range(1, run.steps)] or [ranks[0][key][0]]
        timing = (statistics.median(steps("seconds")), statistics.median(steps("seconds_no_prefetch")))
        out(f"[实测 measured] 每步用时的中位数（第 2 步起，取最慢的进程）：预取 {timing[0] * 1e3:.1f} ms，"
            f"不预取 {timing[1] * 1e3:.1f} ms（同样的步、同样的数据；这台机器的数，换一台会变）。")
    else:
        timing = None
    return {"run": run, "own": own, "torch": torch_fsdp, "peak": peak, "peak_formula": formula, "timing": timing,
            "same_without_prefetch": all(bool((r["own"] == r["own_no_prefetch"]).all()) for r in ranks),
            "peak_no_prefetch": r0["peak_no_prefetch"],
            "traffic": (gathered, scattered), "traffic_formula": (f_gather, f_scatter), "units": units,
            "log": r0["log"], "ranks": ranks, "world_size": real.ranks,
            "replicas_equal": all(bool((r["own"] == r0["own"]).all()) for r in ranks)}


def demo6_observations(real, r, out=print_wrapped):
    from lecture09.parallel import zero
    print()
    out("观察 Observations（演示 6）：")
    ok = [label for label, a in (("自己写的 FSDP", r["own"]), ("PyTorch 的 fully_shard", r["torch"])) if a.ok]
    out(f" 1. 和单进程一致（权重差 ≤ {zero.ATOL:g}、logits 差 ≤ {zero.LOGITS_ATOL:g}，和 ZeRO-1 同一个容差）：" +
        ("、".join(ok) if ok else "没有一个") + "。" +
        ("" if len(ok) == 2 else "不一致的见上表。"))
    total = sum(full for _, full, _ in r["units"])
    out(f" 2. 每个进程常驻的只有片：{sum(s for *_, s in r['units']):,} 字节，整个模型是 {total:,}。峰值 {r['peak']:,} 字节"
        + ("，和公式一样" if r["peak"] == r["peak_formula"] else f"，公式是 {r['peak_formula']:,}")
        + "：一个单元在算时，下一个单元的 all-gather 已经在路上，所以同时有两个单元的参数。对照：同样一步不预取，"
        f"峰值是 {r['peak_no_prefetch']:,}（实测）。" + prefetch_time_words(r))
    same = r["traffic"] == r["traffic_formula"]
    out(f" 3. 每步的流量{'正是' if same else '不等于'} 3Ψ 的分账：all-gather 收到 {r['traffic'][0]:,} 字节（前向、反向各一次），"
        f"reduce-scatter {r['traffic'][1]:,}。比 ZeRO-1 多的那一次 all-gather，换来参数也只存 1/p。"
        "最后一个单元前向刚放掉、反向马上又要：表 (b) 里它被收了两次。PyTorch 的 FSDP2 对根模块默认不在前向后放掉参数，"
        "它的文档字符串（fully_shard 的 reshard_after_forward）给的理由正是这个。")


def prefetch_time_words(r):
    """What the control run says about prefetch's time, from its medians (None under --quick)."""
    same = ("不预取训练出的权重和预取的逐位相同：预取只改变什么时候收参数，不改变算什么。"
            if r.get("same_without_prefetch", True) else "不预取训练出的权重和预取的不同（不该如此）。")
    if r.get("timing") is None:
        return same + "--quick 不计时。"
    fast, slow = r["timing"]
    verdict = (f"这台机器上预取每步快 {(slow - fast) * 1e3:.1f} ms（[实测]）" if fast < slow else
               f"这台机器上预取没有更快（[实测] {fast * 1e3:.1f} 对 {slow * 1e3:.1f} ms）")
    return same + verdict + "：多占的那份内存是为了让通信和计算重叠，重叠多少看机器（练习 11）。"
