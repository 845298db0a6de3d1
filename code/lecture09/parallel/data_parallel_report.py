"""Code 02's observations, worded from the numbers they describe: whether the paths agree
and by how much, what one all-reduce sends, whether bucketing hid anything, and what the DDP
comm hooks bought (notes §2). No torch at import."""

from lecture01.console import print_wrapped


def signed(x, digits=4):
    """+0.0123 / −0.0123, and +0.0000 for anything that rounds to zero (never "-0.0000")."""
    x = round(x, digits) + 0.0
    return f"{x:+.{digits}f}".replace("-", "−")


def loss_sentence(variants, losses, reference):
    """Whether every variant's training losses are bit-identical; if not, by how much they
    differ, since four printed decimals can hide it (8 ranks sum in another order)."""
    worst = max(abs(a - b) for v in variants.values() for a, b in zip(v["losses"], losses))
    shown = "，".join(f"{x:.4f}" for x in losses) + f"（参考：{'，'.join(f'{x:.4f}' for x in reference)}）"
    if worst == 0:
        return f"各写法每步的训练 loss 逐位相同：{shown}。"
    return f"各写法每步的训练 loss 只在舍入上不同（最大差 {worst:.1e}，四位小数看不出）：{shown}。"


def difference_sentence(diffs, world_size):
    """Observation 1's last sentence from the measured differences: zero when one process (or
    the same order of additions) gave bit-identical results, else the largest one printed."""
    grad = max(g for g, _, _ in diffs.values())
    weight = max(w for _, w, _ in diffs.values())
    if grad == weight == 0:
        why = "只有 1 个进程，加法的顺序也没变" if world_size == 1 else "这一次加法的顺序没有带来差别"
        return f"这里差为 0（{why}）。"
    return f"差别只在加法的顺序：第 1 步的梯度最大差 {grad:.1e}，几步后的权重最大差 {weight:.1e}（上表）。"


def observations(setup, r, out=print_wrapped):
    out("\n观察 Observations：")
    W = setup.world_size
    if "demo1" in r:
        d = r["demo1"]
        all_ok = all(ok for _, _, ok in d["diffs"].values())
        out(f" 1. 四种写法{'都' if all_ok else '并不都'}和单进程整批次一致（在上面的容差内），单进程梯度累积"
            f"（{W} 个微批次，每个的 loss 除以 {W} 再反向）也一样：数据并行 = 把 batch 切开算、梯度取平均，"
            f"和梯度累积是同一件事，只是微批次分给了不同的进程。" + difference_sentence(d["diffs"], W))
        n_bytes = 4 * d["n_params"]
        ring = 2 * (W - 1) * n_bytes / W
        calls = d["calls"]
        out(f" 2. 每步都要 all-reduce {n_bytes:,} 字节的梯度；环形算法里每个进程发出 2(W−1)/W·n = {ring:,.0f} 字节"
            + ("（第 1 节；只有 1 个进程，没有谁可以交换，all-reduce 什么也不传）。" if W == 1 else "（第 1 节）。")
            + f"朴素写法要 {calls['naive']} 次 all-reduce，每次付一次延迟 α；拼平只要 {calls['flat']} 次；"
            + (f"分桶 {calls['bucketed']} 次，在反向计算的同时进行（上面的时间线）。" if calls["bucketed"] > 1 else
               "分桶这次只有 1 个桶（--bucket-kb 不小于整个梯度），要等反向全部算完才发：和拼平一样，没有重叠。"))
        t = d["timing"]
        hidden = calls["bucketed"] > 1 and t["bucketed"]["after"] < t["flat"]["after"]
        out(f" 3. [实测] 反向结束以后还要等的通信：拼平 {t['flat']['after']:.1f} ms，分桶重叠 {t['bucketed']['after']:.1f} ms，"
            f"DDP {t['ddp']['after']:.1f} ms（DDP 的等待在 backward() 里面）。"
            + ("只有 1 个进程，这些“通信”只是调用 all-reduce 的开销，没有数据在走；重叠要 --world-size 2 以上才看得到。"
               if W == 1 else
               "分桶把大部分通信藏到了反向计算后面：最后一个桶一发出，反向也就结束了。" if hidden else
               "只有 1 个桶，没有可以和反向重叠的通信。" if calls["bucketed"] == 1 else
               "这一次分桶没有少等（一个猜测：机器太忙，后台的通信线程抢不到核；重跑几次看看）。")
            + "在 2 核机器上，通信线程和计算抢同样的核，重叠能省的有限；在 GPU 上通信由网卡和 NCCL 完成，重叠几乎是白送的。")
    if "demo2" in r:
        f = r["demo2"]
        squeezed = f["powersgd"]["bytes"] < f["none"]["bytes"]
        out(f" 4. fp16 钩子把字节数减半（{f['fp16']['bytes']:,} 对 {f['none']['bytes']:,}），bits/字符的差 "
            f"{signed(f['fp16']['bpc'] - f['none']['bpc'])}；"
            + (f"PowerSGD（秩 {setup.powersgd_rank}）只发每个矩阵的两个"
               f"低秩因子 P、Q 和不压缩的向量，每步 {f['powersgd']['bytes']:,} 字节（少 "
               f"{f['none']['bytes'] / f['powersgd']['bytes']:.1f} 倍），代价是 bits/字符 " if squeezed else
               f"PowerSGD（秩 {setup.powersgd_rank}）这次一个矩阵也没压：秩这么大，P、Q 比矩阵本身的一半还大，"
               f"钩子就原样发，每步 {f['powersgd']['bytes']:,} 字节，和不压缩一样；bits/字符的差 ")
            + f"{signed(f['powersgd']['bpc'] - f['none']['bpc'])}（{setup.hook_steps} 步，一组种子）。"
            "PowerSGD 默认带误差反馈（error feedback，第 5.6 节）；差距随秩和步数怎样变，"
            "用 --powersgd-rank 和 --hook-steps 试试（练习）。")
