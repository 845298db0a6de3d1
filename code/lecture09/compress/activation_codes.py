"""Pipeline activations through the scheme registry: bytes per value counted from the
encoded tensors, and the error of sending the activation itself against sending its
change since an earlier visit of the same sequences, AQ-SGD's idea (Wang, Yuan et al.,
NeurIPS 2022, arXiv 2206.01299; lecture 9, §11.1; code 11, demo 1).

What is measured: the tiny GPT's last block output (what a stage boundary after it would
send forward) on one fixed batch, at two moments of one training run: after `warm_steps`
AdamW steps (the earlier visit; both ends keep that activation, exactly) and `gap_steps`
steps later (now). "Direct" sends Q(a_now); "delta" sends Q(a_now - a_then) and the
receiver adds a_then. Both cost the same bytes; the error is ||decoded - a_now|| / ||a_now||.
"""

import math
from dataclasses import dataclass

import torch

from lecture09.compress.compression_schemes import SCHEMES, Options, parts_bytes

ENCODINGS = ("fp16", "int8-block", "int4-block")   # demo 1's fp16 first: the others are priced against it


@dataclass(frozen=True)
class ActivationCode:
    scheme: str
    bytes_per_value: float    # parts_bytes / values, from the encoded tensors
    direct_error: float       # relative error of sending the activation itself
    delta_error: float        # relative error of sending its change since the earlier visit


@dataclass(frozen=True)
class ActivationStudy:
    codes: tuple              # ActivationCode per scheme, in ENCODINGS order
    shape: tuple              # (B, T, C) of the activation tensor
    warm_steps: int
    gap_steps: int
    change: float             # ||a_now - a_then|| / ||a_now||: how far the activation moved


def _relative(decoded, target):
    return float((decoded - target).norm() / target.norm())


def encode_both_ways(a_then, a_now, scheme_name, opts):
    """(bytes per value, direct error, delta error) of one scheme on one pair of tensors."""
    scheme = SCHEMES[scheme_name]
    parts = scheme.encode(a_now, opts)
    direct = scheme.decode(parts, a_now.shape, opts)
    change = a_now - a_then
    delta = a_then + scheme.decode(scheme.encode(change, opts), change.shape, opts)
    return parts_bytes(parts) / a_now.numel(), _relative(direct, a_now), _relative(delta, a_now)


def study(model_config, recipe, world_seed=0, model_seed=0, data_seed=1, batch_size=8, warm_steps=20,
          gap_steps=5, block_size=256, on_step=None):
    """Train the tiny GPT warm_steps + gap_steps steps (fp32, lecture 1's AdamW recipe) and
    encode its last block's output on one held batch at both moments; an ActivationStudy.
    on_step(done, total): called after each training step (the script's progress line)."""
    from lecture01 import tiny_gpt
    from lecture09.compress.training import world_tokens

    if warm_steps < 0 or gap_steps < 1:
        raise ValueError("need warm_steps >= 0 and gap_steps >= 1")
    train_data, _ = world_tokens(world_seed)
    model = tiny_gpt.make_model(model_config, seed=model_seed)
    optimizer = tiny_gpt.make_adamw(model, recipe)
    gen = torch.Generator().manual_seed(data_seed)
    held_x, _ = tiny_gpt.get_batch(train_data, batch_size, model_config.block_size, gen)
    captured = []
    hook = model.blocks[-1].register_forward_hook(lambda module, inputs, output: captured.append(output.detach()))

    def activation():
        captured.clear()
        model.eval()
        with torch.no_grad():
            model(held_x)
        model.train()
        return captured[0].float().clone()

    total = warm_steps + gap_steps
    a_then = activation() if warm_steps == 0 else None
    for step in range(total):
        for group in optimizer.param_groups:
            group["lr"] = tiny_gpt.lr_at(step, total, recipe.peak_lr)
        x, y = tiny_gpt.get_batch(train_data, recipe.batch_size, model_config.block_size, gen)
        optimizer.zero_grad(set_to_none=True)
        tiny_gpt.lm_loss(model, x, y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.clip_norm)
        optimizer.step()
        if step + 1 == warm_steps:
            a_then = activation()
        if on_step is not None:
            on_step(step + 1, total)
    a_now = activation()
    hook.remove()
    opts = Options(block_size=block_size)
    codes = tuple(ActivationCode(name, *encode_both_ways(a_then, a_now, name, opts)) for name in ENCODINGS)
    change = _relative(a_then, a_now)
    if not math.isfinite(change):
        raise ValueError("the activation is not finite")
    return ActivationStudy(codes, tuple(a_now.shape), warm_steps, gap_steps, change)


LABELS = {"fp16": "fp16（演示 1）", "int8-block": "int8，每 {block} 个一块", "int4-block": "4 bit，每 {block} 个一块"}


def label(scheme, block_size):
    return LABELS[scheme].format(block=block_size)


def print_study(result, block_size, out):
    """Table (a): bytes per value and both errors of every encoding."""
    from lecture01.console import print_table
    b, t, c = result.shape
    out(f"(a) 小 GPT 最后一个块的输出（{b} 个序列 × {t} 个位置 × {c} 维 = {b * t * c:,} 个值），训练 "
        f"{result.warm_steps} 步时记下（两端都存着，精确），再训练 {result.gap_steps} 步后发送；"
        f"这 {result.gap_steps} 步里它变了 ‖a_now − a_then‖ / ‖a_now‖ = {result.change:.1%}。"
        "直接发 = 发 Q(a_now)；发变化量（AQ-SGD 的做法）= 发 Q(a_now − a_then)，接收方加回 a_then。"
        "两种发法字节一样，误差都是 ‖解码 − a_now‖ / ‖a_now‖：")
    rows = [(label(code.scheme, block_size), f"{code.bytes_per_value:.4f}",
             f"{2.0 / code.bytes_per_value:.2f}×", f"{code.direct_error:.5f}", f"{code.delta_error:.5f}")
            for code in result.codes]
    print_table(["编码 encoding", "字节/值", "压缩比 fp16÷它", "直接发的误差", "发变化量的误差"], rows)


def study_observations(result, block_size):
    """What table (a) shows, from its numbers: for each compressed encoding, the delta's
    error against the direct one beside how far the activation moved; then what the delta
    needs (AQ-SGD's setting)."""
    def shown(x):
        return float(f"{x:.5f}")                  # as table (a) prints it: ratios of what the student sees

    others = [c for c in result.codes if c.scheme != "fp16"]
    compressed = [c for c in others if shown(c.direct_error) > 0]
    exact = [c for c in others if shown(c.direct_error) == 0]
    lines = []
    if compressed:
        lines.append("、".join(label(c.scheme, block_size) for c in compressed) + "：发变化量的误差是直接发的 "
                     + "、".join(f"{shown(c.delta_error) / shown(c.direct_error):.2f}" for c in compressed)
                     + f" 倍；这 {result.gap_steps} 步里激活本身变了 {result.change:.1%}。按块最大值缩放的量化，"
                     "张量缩小 c 倍，误差也缩小 c 倍（Q(c·x) = c·Q(x)，c > 0）：发变化量，误差看的是变化量有多大")
    if exact:
        lines.append("、".join(label(c.scheme, block_size) for c in exact) + "：两种发法的误差都印成 0.00000"
                     "（小于 0.000005），比不出倍数" + (f"：每 {block_size} 个值一个缩放因子，量化几乎不丢东西"
                                                        if block_size <= 2 else "")
                     + ("，字节却比 fp16 多（见「字节/值」列）" if all(c.bytes_per_value > 2 for c in exact) else ""))
    lines.append("发变化量要两端都存着每个序列上次的激活，而且同一个序列要再被见到：AQ-SGD 的设置是多个 epoch "
                 "的微调 fine-tuning。预训练里每个序列只见一次，只能直接发，误差是上表「直接发」那一列")
    return lines
