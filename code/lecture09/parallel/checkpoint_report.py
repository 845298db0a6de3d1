"""Code 03's demo 5: activation checkpointing measured on the tiny GPT: the bytes autograd
saves for backward per block under no, selective and full recomputation against
Korthikanti et al. 2022's count, what each saved tensor is, and checkpointing every k
blocks (held bytes, one recomputed segment, time). Notes §3.2."""

import math
from dataclasses import dataclass, replace

from lecture01.console import print_header, print_table, print_wrapped

MODE_WORDS = {"none": "不重算 none", "selective": "选择性 selective", "full": "全重算 full"}


@dataclass(frozen=True)
class CheckpointSetup:
    n_layer: int = 8            # the deeper configuration (the tiny GPT itself has 1 block)
    batch: int = 8
    seed: int = 0
    repeats: int = 5            # timed forward + backward runs per row (median); 0: no timing (--quick)


def _data(config, batch, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, config.vocab_size, (batch, config.block_size), generator=g)
    return x, torch.randint(0, config.vocab_size, (batch, config.block_size), generator=g)


def run_demo5(setup, out=print_wrapped):
    import torch
    from lecture01 import tiny_gpt
    from lecture09.lecture_model import MODEL_CONFIG
    from lecture09.parallel import checkpointing as ck

    base = MODEL_CONFIG
    deep = replace(base, n_layer=setup.n_layer)
    s, b, h, a = base.block_size, setup.batch, base.n_embd, base.n_head
    sbh = s * b * h * 4                                        # fp32 bytes of one (b, s, h) tensor
    print_header(f"演示 5：激活重算，实测 activation checkpointing measured（小 GPT，fp32，batch {b} × {s}）")
    out("saved_tensors_hooks 数出反向要用、前向存下的每一块存储（参数不算，同一块存储只算一次）。单位 sbh = "
        f"s·b·h 个 fp32 数 = {sbh:,} 字节；a·s/h = {a * s / h:g}，所以注意力分数 a·s²·b 是 {a * s / h:g} sbh。")
    rows, result = [], {"sbh": sbh, "rows": {}}
    x, y = _data(base, b, setup.seed)
    for config in (base, deep):
        model = tiny_gpt.make_model(config, seed=setup.seed)
        reference = None
        for mode in ck.MODES:
            counter, grads = ck.measure(model, x, y, mode)
            same = reference is None or all(torch.equal(g, r) for g, r in zip(grads, reference))
            reference = reference or grads
            per_block = counter.bytes_of("block 0")
            formula = ck.formula_bytes(config, b, s, mode)
            seconds = ck.step_seconds(model, x, y, mode, repeats=setup.repeats) if setup.repeats else None
            result["rows"][(config.n_layer, mode)] = dict(per_block=per_block, formula=formula, total=counter.bytes_of(),
                                                          same=same, seconds=seconds, counter=counter)
            rows.append((f"{config.n_layer} 层", MODE_WORDS[mode], f"{per_block / sbh:.3f}", f"{formula / sbh:g}",
                         f"{counter.bytes_of():,}", ms(seconds), "✓" if same else "✗"))
    print_table(["模型", "重算", "每块 实测 sbh", "公式 sbh", "整个模型 字节", "前向+反向 ms", "梯度逐位相同"], rows)
    out(f"公式：Korthikanti et al. 2022 的每层激活，按这个小模型的形状（MLP 宽 {base.mlp_ratio}h、没有 dropout）、"
        "以 fp32 元素计；" + (f"ms 是这台机器上 {setup.repeats} 次的中位数，换一台机器会变。" if setup.repeats
                            else "--quick 不计时。"))
    print()
    for mode in ("none", "selective"):
        counter = result["rows"][(base.n_layer, mode)]["counter"]
        out(f"(b) {MODE_WORDS[mode]}：一个块存下的张量（形状 → sbh）：" + "，".join(
            f"{'×'.join(map(str, shape))} → {n / sbh:.3g}" for shape, n in counter.shapes_of("block 0")))
    saved = {m: len(result["rows"][(base.n_layer, m)]["counter"].buffers_saved) for m in ck.MODES}
    out("每块的 ALiBi 偏置是一个缓冲区（buffer），不是激活，上面没算。被存下的有几个："
        + "，".join(f"{MODE_WORDS[m]} {n}" for m, n in saved.items())
        + ("。选择性重算时 checkpoint 把它当作核心的输入留着：它本来就在，不多占内存。" if saved["selective"] else "。"))
    result["buffers_saved"] = saved
    result["every"] = every_rows(setup, deep, x, y, sbh, result)
    print()
    out(f"(c) {deep.n_layer} 层、每 k 块设一个检查点（checkpoint every k blocks）：前向结束时只存每段的输入；"
        "反向重算一段时，这一段的激活又全部出现。")
    print_table(["k", "段数", "前向后存着 sbh", "重算一段 sbh", "上界 sbh", "前向+反向 ms"],
                [(k, deep.n_layer // k, f"{r['held'] / sbh:.2f}", f"{r['segment'] / sbh:.2f}",
                  f"{(r['held'] + r['segment']) / sbh:.2f}", ms(r["seconds"])) for k, r in result["every"].items()])
    out("上界 = 前向后存着的 + 重算出来的一段，只算激活：后面的段反向完，它们的输入就放掉了；反向时的梯度和临时张量另算。")
    result.update(base=base, deep=deep)
    return result


def every_rows(setup, deep, x, y, sbh, result):
    """{k: held, segment, seconds} for each k dividing the deep model's blocks."""
    from lecture01 import tiny_gpt
    from lecture09.parallel import checkpointing as ck

    model = tiny_gpt.make_model(deep, seed=setup.seed)
    per_block = result["rows"][(deep.n_layer, "none")]["per_block"]
    rows = {}
    for k in (d for d in range(1, deep.n_layer + 1) if deep.n_layer % d == 0):
        counter, _ = ck.measure(model, x, y, "full", every=k)
        held = sum(counter.bytes_of(f"block {i}") for i in range(0, deep.n_layer, k))
        rows[k] = dict(held=held, segment=k * per_block,
                       seconds=ck.step_seconds(model, x, y, "full", every=k, repeats=setup.repeats)
                       if setup.repeats else None)
    return rows


def ms(seconds):
    return "—" if seconds is None else f"{seconds * 1e3:.1f}"


def best_k(every):
    return min(every, key=lambda k: every[k]["held"] + every[k]["segment"])


def demo5_observations(setup, r, out=print_wrapped):
    base, deep, sbh, rows = r["base"], r["deep"], r["sbh"], r["rows"]
    print()
    out("观察 Observations（演示 5）：")
    none, sel, full = (rows[(deep.n_layer, m)] for m in ("none", "selective", "full"))
    gap = [(m, rows[(deep.n_layer, m)]["per_block"] - rows[(deep.n_layer, m)]["formula"]) for m in ("none", "selective")]
    ln_stats = 2 * 2 * base.block_size * setup.batch * 4          # two LayerNorms, mean and 1/σ, fp32
    if all(g == ln_stats for _, g in gap) and full["per_block"] == full["formula"]:
        out(f" 1. 实测和公式只差 LayerNorm 存的均值和 1/σ：每块多 {ln_stats:,} 字节（4·s·b 个数，表 (b) 里的 "
            f"{setup.batch}×{base.block_size}×1），Korthikanti 没算它们；全重算每块正好存 1 sbh，就是块的输入。")
    else:
        out(" 1. 实测和公式的差：" + "，".join(f"{MODE_WORDS[m]} {g / sbh:+.3f} sbh" for m, g in gap) +
            f"；全重算 {(full['per_block'] - full['formula']) / sbh:+.3f} sbh。")
    scores = base.n_head * base.block_size / base.n_embd
    saved = none["per_block"] - sel["per_block"]
    how = (f"少掉的 {saved / sbh:.2f} sbh 正好是分数的 {scores:g} sbh（随 s² 长）：q、k、v 各自的一份拷贝换成了它们"
           "共用的那块 qkv 输出，都是 3 sbh（表 (b)）。" if saved == scores * sbh else
           f"少掉 {saved / sbh:.2f} sbh，分数是 {scores:g} sbh（随 s² 长），其余的差见表 (b)。")
    out(f" 2. 选择性重算只重算注意力的核心（q·kᵀ、softmax、·v）：每块从 {none['per_block'] / sbh:.2f} 降到 "
        f"{sel['per_block'] / sbh:.2f} sbh，" + how + "原式按 fp16、带 dropout、MLP 宽 4h 是每层 17 sbh + 2.5 倍分数；"
        f"这个小模型没有 dropout（少 1 sbh 和 1.5 倍分数），MLP 只宽 {base.mlp_ratio}h（少 {2 * (4 - base.mlp_ratio)} sbh）。")
    if none["seconds"] is None:
        timing = "；--quick 不计时。"
    else:
        timing = (f"，前向+反向从 {none['seconds'] * 1e3:.1f} 变成 {full['seconds'] * 1e3:.1f} ms"
                  f"（{full['seconds'] / none['seconds'] - 1:+.0%}，这台机器）。按 6·N·D 的分账多一次前向是 2/6 ≈ 33%；"
                  "实测和它差多少、差在哪里（逐元素的操作、checkpoint 自己的开销），这里没有拆开（练习 10）。")
    out(f" 3. 全重算在 {deep.n_layer} 层的模型上把存下的字节从 {none['total']:,} 降到 {full['total']:,}"
        f"（{full['total'] / none['total']:.0%}）" + timing + "三种做法的梯度" +
        ("和不重算逐位相同：重算只是把同样的前向再算一遍。" if all(x["same"] for x in rows.values())
         else "有和不重算不同的（见表）。"))
    every = r["every"]
    k = best_k(every)
    a_over_i = none["per_block"] / full["per_block"]
    out(f" 4. 每 k 块一个检查点：存着的按 1/k 降，重算一段的按 k 涨，上界最小在 k = {k}"
        f"（{(every[k]['held'] + every[k]['segment']) / sbh:.2f} sbh）。块内的激活是块输入的 {a_over_i:.1f} 倍时，"
        f"上界 N/k + {a_over_i:.1f}·k 在 k = √(N / {a_over_i:.1f}) = {math.sqrt(deep.n_layer / a_over_i):.2f} 处最小；"
        "两者一样大时 k = √N，就是 Chen et al. 2016 的 √N 放法。")
