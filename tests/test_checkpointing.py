"""Lecture 9 code 3, demo 5: activation checkpointing measured (issue 26, item 2). The split
forward equals the tiny GPT's; the saved bytes are Korthikanti's count for the toy's shape
plus exactly the LayerNorm statistics, on several shapes; recomputation changes no
gradient bit; every-k checkpointing holds N/k block inputs; each observation's branches."""

import re
from dataclasses import replace

import pytest
import torch

from conftest import LECTURE09, load_script, main_quietly

from lecture01 import tiny_gpt
from lecture09.parallel import checkpoint_report as report
from lecture09.parallel import checkpointing as ck

code3 = load_script(LECTURE09 / "03_memory_zero.py")
SHAPES = [tiny_gpt.BASE_CONFIG,
          replace(tiny_gpt.BASE_CONFIG, n_layer=3, n_head=2, n_embd=32, mlp_ratio=4, block_size=40),
          replace(tiny_gpt.BASE_CONFIG, n_layer=2, n_head=8, n_embd=64, mlp_ratio=1, block_size=16)]


def data(config, batch=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, config.vocab_size, (batch, config.block_size), generator=g),
            torch.randint(0, config.vocab_size, (batch, config.block_size), generator=g))


@pytest.mark.parametrize("config", SHAPES, ids=lambda c: f"L{c.n_layer}h{c.n_embd}a{c.n_head}r{c.mlp_ratio}")
def test_the_split_forward_is_the_tiny_gpts_and_no_mode_changes_a_gradient_bit(config):
    model = tiny_gpt.make_model(config, seed=1)
    x, y = data(config)
    h = model.tok_emb(x)
    for block in model.blocks:
        assert torch.equal(ck.block_forward(block, h), block(h))
        assert torch.equal(ck.block_forward(block, h, selective=True), block(h))
        h = block(h)
    logits = model(x)
    plain = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))
    assert torch.equal(ck.loss_of(model, x, y), plain)
    _, reference = ck.measure(model, x, y, "none")
    runs = [("selective", 1), ("full", 1)] + [("full", k) for k in range(2, config.n_layer + 1) if config.n_layer % k == 0]
    for mode, every in runs:
        _, grads = ck.measure(model, x, y, mode, every)
        assert all(torch.equal(g, r) for g, r in zip(grads, reference)), (mode, every)


@pytest.mark.parametrize("config", SHAPES, ids=lambda c: f"L{c.n_layer}h{c.n_embd}a{c.n_head}r{c.mlp_ratio}")
def test_saved_bytes_are_the_formula_plus_the_layernorm_statistics(config):
    batch = 4
    model = tiny_gpt.make_model(config, seed=0)
    x, y = data(config, batch)
    ln_stats = 2 * 2 * config.block_size * batch * 4          # two LayerNorms: mean and 1/σ, (b, s, 1) fp32
    for mode in ck.MODES:
        counter, _ = ck.measure(model, x, y, mode)
        for i in range(config.n_layer):
            extra = 0 if mode == "full" else ln_stats
            assert counter.bytes_of(f"block {i}") == ck.formula_bytes(config, batch, config.block_size, mode) + extra


def test_the_toys_count_by_hand():
    """BASE (s 96, b 8, h 96, a 4, r 2): none 16 sbh (12 + scores a·s/h = 4), selective 12,
    full 1; in fp32 bytes, sbh = 96·8·96·4 = 294,912."""
    sbh = 96 * 8 * 96 * 4
    assert ck.formula_bytes(tiny_gpt.BASE_CONFIG, 8, 96, "none") == 16 * sbh
    assert ck.formula_bytes(tiny_gpt.BASE_CONFIG, 8, 96, "selective") == 12 * sbh
    assert ck.formula_bytes(tiny_gpt.BASE_CONFIG, 8, 96, "full") == sbh
    assert ck.elements_formula(tiny_gpt.BASE_CONFIG, 96, "none", dropout=True, mlp_ratio=4) == (17.0, 2.5)  # 34, 5 bytes


def test_every_k_holds_one_block_input_per_segment_and_the_bias_is_kept_only_by_selective():
    config = replace(tiny_gpt.BASE_CONFIG, n_layer=4)
    model = tiny_gpt.make_model(config, seed=0)
    x, y = data(config)
    sbh = 96 * 4 * 96 * 4
    for k in (1, 2, 4):
        counter, _ = ck.measure(model, x, y, "full", every=k)
        held = [counter.bytes_of(f"block {i}") for i in range(4)]
        assert held == [sbh if i % k == 0 else 0 for i in range(4)], k
    assert [len(ck.measure(model, x, y, m)[0].buffers_saved) for m in ck.MODES] == [0, 4, 0]


def run5(*flags):
    results, out = main_quietly(code3.main, ["--demo", "5", *flags])
    assert set(results) == {"demo5"}
    return out


def test_demo5_quick_prints_no_time_and_says_so():
    out = run5("--quick")
    assert "--quick 不计时" in out and "实测和公式只差 LayerNorm 存的均值和 1/σ：每块多 12,288 字节" in out
    assert re.search(r"^1 +4 +4\.00 +16\.04 +20\.04 +—$", out, re.M)
    assert "梯度和不重算逐位相同" in out and "上界最小在 k = 1" in out


def test_demo5_timed_and_the_sqrt_n_placement():
    out = run5("--ckpt-layers", "64", "--ckpt-batch", "1", "--quick")     # quick caps the layers at 4
    assert "4 层" in out
    setup = report.CheckpointSetup(n_layer=16, batch=4, repeats=1)
    result = report.run_demo5(setup, out=lambda line: None)
    assert report.best_k(result["every"]) == 1                           # √(16 / 16) = 1
    lines = []
    report.demo5_observations(setup, result, out=lines.append)
    text = "".join(lines)
    assert "ms（" in text and "2/6 ≈ 33%" in text and "k = √(N / 16.0) = 1.00" in text
    assert "正好是分数的 4 sbh" in text and "实测和公式只差 LayerNorm" in text


def test_at_batch_1_the_layout_differs_and_the_observations_say_only_the_numbers():
    """At batch 1 some of attention's copies are views (measured +1.04 sbh without
    recomputation): observations 1 and 2 take their other branches."""
    setup = report.CheckpointSetup(n_layer=2, batch=1, repeats=0)
    result = report.run_demo5(setup, out=lambda line: None)
    lines = []
    report.demo5_observations(setup, result, out=lines.append)
    assert "实测和公式的差：不重算 none +1.042 sbh" in lines[1]
    assert "其余的差见表 (b)" in lines[2] and "正好是分数" not in lines[2]


def test_observation_1_names_a_gap_that_is_not_the_layernorm_statistics():
    setup = report.CheckpointSetup(n_layer=2, batch=2, repeats=0)
    result = report.run_demo5(setup, out=lambda line: None)
    result["rows"][(2, "selective")]["per_block"] += 4 * 96 * 2 * 96      # pretend one more sbh was saved
    lines = []
    report.demo5_observations(setup, result, out=lines.append)
    assert "实测和公式的差：" in lines[1] and "选择性 selective +1.042 sbh" in lines[1]


def test_bad_flags_get_one_line_and_status_2():
    from conftest import assert_one_line_status_2
    assert_one_line_status_2(LECTURE09 / "03_memory_zero.py", ["--demo", "5", "--ckpt-layers", "0"], "--ckpt-layers")
    assert_one_line_status_2(LECTURE09 / "03_memory_zero.py", ["--demo", "5", "--ckpt-batch", "65"], "--ckpt-batch")
