"""Lecture 9 code 3: memory formulas by hand, the tiny GPT's real bytes, ZeRO-1 on gloo
against plain AdamW, flags, a quick run and Ctrl-C."""

import math
import re
import subprocess
import sys

import pytest

from conftest import LECTURE09, interrupt_when_ranks_run, load_script, main_quietly, shared_quick_run

from lecture09.parallel import memory_model as mm

code3 = load_script(LECTURE09 / "03_memory_zero.py")


# ---------------------------------------------------------------------------
# Formulas, hand-computed
# ---------------------------------------------------------------------------

def test_zero_paper_figure_1_example():
    """Ψ = 7.5B on 64 GPUs, K = 12 (Rajbhandari et al. 2020, Figure 1): 120 GB, 31.4, 16.6, 1.9.
    By hand: 16 × 7.5 = 120; 4 × 7.5 + 12 × 7.5/64 = 30 + 1.40625; 2 × 7.5 + 14 × 7.5/64 =
    15 + 1.640625; 120/64 = 1.875 (GB = 1e9 bytes)."""
    got = [mm.zero_bytes_per_gpu(7.5e9, 64, stage) / 1e9 for stage in (0, 1, 2, 3)]
    assert got == pytest.approx([120.0, 31.40625, 16.640625, 1.875], rel=1e-12)
    assert [f"{g:.1f}" for g in got] == ["120.0", "31.4", "16.6", "1.9"]


def test_model_states_are_16_bytes_per_parameter():
    assert mm.model_state_bytes(1e9) == (2e9, 2e9, 12e9)
    assert mm.model_state_bytes(1e9, k=4) == (2e9, 2e9, 4e9)


def test_one_gpu_shards_nothing_and_more_gpus_never_cost_more():
    for stage in mm.ZERO_STAGES:
        assert mm.zero_bytes_per_gpu(1e9, 1, stage) == pytest.approx(16e9)
    for n in (2, 8, 1024):
        per_stage = [mm.zero_bytes_per_gpu(1e9, n, stage) for stage in mm.ZERO_STAGES]
        assert per_stage == sorted(per_stage, reverse=True)
        assert mm.zero_bytes_per_gpu(1e9, 2 * n, 3) == pytest.approx(mm.zero_bytes_per_gpu(1e9, n, 3) / 2)
    with pytest.raises(ValueError):
        mm.zero_bytes_per_gpu(1e9, 8, 4)
    with pytest.raises(ValueError):
        mm.zero_bytes_per_gpu(1e9, 0, 1)


def test_zero_communication():
    """ZeRO §5: stages 0-2 move 2Ψ elements, stage 3 moves 3Ψ. Ring: each Ψ-collective sends
    (N-1)/N of it: 2 × 1e9 × 63/64 × 2 bytes = 3.9375e9."""
    assert [mm.zero_comm_elements(1e9, s) for s in mm.ZERO_STAGES] == [2e9, 2e9, 2e9, 3e9]
    assert mm.zero_sent_bytes_per_gpu(1e9, 64, 0) == pytest.approx(3.9375e9)
    assert mm.zero_sent_bytes_per_gpu(1e9, 1, 3) == 0
    # α–β: stage 0 is one ring all-reduce: 2(p-1)α + 2(p-1)/p · n/β with n = 2 bytes × Ψ
    t = code3.zero_comm_time_s(1e9, 4, 0, latency_s=1e-5, bandwidth=1e10)
    assert t == pytest.approx(6 * 1e-5 + 1.5 * 2e9 / 1e10)
    # stage 3: reduce-scatter + 2 all-gathers, each (p-1)α + (p-1)/p · n/β
    t3 = code3.zero_comm_time_s(1e9, 4, 3, latency_s=1e-5, bandwidth=1e10)
    assert t3 == pytest.approx(3 * (3 * 1e-5 + 0.75 * 2e9 / 1e10))


def test_activation_formula_korthikanti():
    """s = 2048, b = 1, h = 12288, a = 96: sbh = 25,165,824; 34 + 5·96·2048/12288 = 34 + 80."""
    sbh = 2048 * 12288
    assert mm.activation_bytes_per_layer(2048, 1, 12288, 96) == sbh * 114
    assert mm.activation_bytes_per_layer(2048, 1, 12288, 96, recompute="selective") == sbh * 34
    assert mm.activation_bytes_per_layer(2048, 1, 12288, 96, recompute="full") == sbh * 2
    assert mm.activation_bytes_per_layer(2048, 1, 12288, 96, tp=8) == sbh * (10 + 3 + 10)   # 24/8, 80/8
    assert mm.activation_bytes_per_layer(2048, 2, 12288, 96) == 2 * sbh * 114                 # linear in b
    with pytest.raises(ValueError):
        mm.activation_bytes_per_layer(2048, 1, 12288, 96, recompute="some")


def test_flops_and_time():
    assert mm.training_flops(175e9, 300e9) == pytest.approx(3.15e23)
    assert mm.compute_seconds(312e12 * 0.4, 1) == pytest.approx(1.0)
    assert mm.compute_seconds(312e12 * 0.4 * 8, 8) == pytest.approx(1.0)
    # 1 + s/(6h) = 1 + 2048/73728 = 37/36
    assert mm.layer_flops(2048, 1, 12288) == pytest.approx(72 * 2048 * 12288 ** 2 * 37 / 36)
    assert mm.gpus_to_hold(112e9) == 2 and mm.gpus_to_hold(80e9) == 1


def test_model_table_batches():
    assert mm.MODELS["175B"].batch_tokens == 1536 * 2048 == 3_145_728
    assert mm.MODELS["1.3B"].batch_tokens == 2 ** 20


# ---------------------------------------------------------------------------
# The tiny GPT's real bytes, and ZeRO-1 pieces
# ---------------------------------------------------------------------------

def test_tiny_gpt_bytes_equal_the_formula():
    """fp32 AdamW: 4 + 4 + 8 bytes per parameter, plus one 4-byte step counter per tensor."""
    c = code3.count_tiny_gpt(code3.RealSetup(batch_size=2))
    n = c["n_params"]
    assert (c["params"], c["grads"], c["moments"]) == (4 * n, 4 * n, 8 * n)
    assert c["steps"] == 4 * c["n_tensors"]
    assert c["dtypes"] == ["torch.float32"]


def test_shard_bounds_cover_the_vector_once():
    from lecture09.parallel import zero

    assert [zero.shard_bounds(10, 4, r) for r in range(4)] == [(0, 3, 3), (3, 6, 3), (6, 9, 3), (9, 10, 3)]
    assert [zero.shard_bounds(2, 4, r)[:2] for r in range(4)] == [(0, 1), (1, 2), (2, 2), (2, 2)]


def test_key_bias_mask_marks_the_middle_third_of_qkv_bias():
    from lecture01 import tiny_gpt
    from lecture09.parallel import zero

    model = tiny_gpt.make_model()
    mask = zero.key_bias_mask(model)
    assert mask.numel() == model.n_params() and int(mask.sum()) == model.config.n_embd * model.config.n_layer
    offset = 0
    for name, p in model.named_parameters():
        if name.endswith("attn.qkv.bias"):
            c = model.config.n_embd
            assert mask[offset:offset + c].sum() == 0 and mask[offset + c:offset + 2 * c].all()
            assert mask[offset + 2 * c:offset + 3 * c].sum() == 0
        offset += p.numel()


def test_key_bias_cannot_change_the_logits():
    """The reason the ZeRO comparison checks the key bias through the logits."""
    import torch

    from lecture01 import tiny_gpt
    from lecture09.parallel import zero

    model = tiny_gpt.make_model()
    x = torch.randint(0, model.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    flat = zero.flat_params(model)
    moved = flat + zero.key_bias_mask(model).float() * 0.5
    with torch.no_grad():
        before = model(x)
        after = zero.load_flat(model, moved)(x)
    assert (after - before).abs().max().item() < 1e-5
    assert not torch.equal(moved, flat)


# ---------------------------------------------------------------------------
# The quick run: ZeRO-1 on 2 gloo ranks against plain AdamW
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def quick():
    return shared_quick_run("03_memory_zero.py")


def test_quick_run_prints_every_demo(quick):
    _, text = quick
    for title in ("演示 1", "演示 2", "演示 3", "演示 4", "演示 5", "演示 6"):
        assert title in text
    assert "120.0 → 31.4 → 16.6 → 1.9 GB" in text          # Figure 1, computed
    assert quick[0]["demo2"]["figure1_bytes"] == pytest.approx([120e9, 31.40625e9, 16.640625e9, 1.875e9])
    assert text.count("观察 Observations") == 6


def test_quick_output_fits_a_projector(quick):
    from lecture01.console import LINE_WIDTH, display_width
    wide = [line for line in quick[1].splitlines() if display_width(line) > LINE_WIDTH]
    assert not wide, wide[:3]


def test_zero1_weights_equal_plain_adamw(quick):
    from lecture09.parallel import zero

    r = quick[0]["demo4"]
    for agree in (r["own"], r["torch"]):
        assert agree.max_abs_diff <= zero.ATOL
        assert agree.logits_max_abs_diff <= zero.LOGITS_ATOL
        assert agree.ok
    assert r["replicas_equal"]                  # after the all-gather every rank holds the same model


def test_zero1_shards_the_optimizer_states(quick):
    r = quick[0]["demo4"]
    plain = r["reference_moments"]
    own = [x["own_state_bytes"] for x in r["ranks"]]
    torch_zero = [x["torch_state_bytes"] for x in r["ranks"]]
    assert sum(own) == plain and sum(torch_zero) == plain          # each moment lives on exactly one rank
    assert max(own) - min(own) <= 8 * (len(own) - 1)               # flat shards: equal but for the padding
    assert all(b < plain for b in own + torch_zero)
    shards = [x["own_shard"] for x in r["ranks"]]
    assert shards[0][0] == 0 and all(a[1] == b[0] for a, b in zip(shards, shards[1:]))


# ---------------------------------------------------------------------------
# Flags, --help, Ctrl-C
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["--ranks", "5"], ["--ranks", "1"], ["--batch-size", "5"], ["--k", "-1"],
                                  ["--gpus", "0"], ["--gpus"], ["--psi-b", "nan"], ["--psi-b", "0"], ["--demo", "7"],
                                  ["--utilisation", "0"], ["--utilisation", "1.5"], ["--steps", "0"],
                                  ["--model-seed", "x"], ["--cluster-gpus", "-3"], ["--bogus"]])
def test_nonsense_flags_exit_with_status_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        code3.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error" in err and "Traceback" not in err


def test_help_does_not_need_torch():
    """Importing the script (what --help runs before parsing) loads no torch."""
    code = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('s', sys.argv[1]); "
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); print('torch' in sys.modules)")
    for script in ("03_memory_zero.py", "04_pipeline.py"):
        done = subprocess.run([sys.executable, "-c", code, str(LECTURE09 / script)], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "False", script


@pytest.mark.slow
@pytest.mark.sweep                  # Ctrl-C on ranks run_ranks started: code 02's test is the one in the main part
def test_ctrl_c_stops_with_one_line_and_no_process_left():
    status, err, left = interrupt_when_ranks_run([str(LECTURE09 / "03_memory_zero.py"), "--demo", "4", "--ranks", "2",
                                                  "--steps", "500"], 2)
    assert status == 130
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "已中断 interrupted (Ctrl-C)"
    assert not left, f"processes left behind: {left}"


def test_units_in_the_hardware_table():
    assert mm.INFINIBAND_BYTES_PER_S == pytest.approx(25e9)          # 200 Gbit/s / 8
    assert mm.A100_PEAK_FLOPS == 312e12
    assert all(f.source for f in mm.HARDWARE.values())
    assert math.isclose(mm.GB, 1e9)


def test_the_tolerance_would_catch_a_missing_weight_decay():
    """ATOL is loose enough for rounding, tight enough for a real mistake."""
    from dataclasses import replace

    from lecture01 import tiny_gpt
    from lecture09.parallel import zero

    run = zero.ZeroRun(steps=3, batch_size=4)
    tokens, _ = tiny_gpt.load_world_tokens(0)
    xs, ys = zero.make_batches(run, tokens)
    good, _ = zero.reference_run(run, xs, ys)
    no_decay, _ = zero.reference_run(replace(run, train=replace(run.train, weight_decay=0.0)), xs, ys)
    assert (good - no_decay).abs().max().item() > 2 * zero.ATOL


# --- observations that follow the flags (issue 21, 6) ----------------------------------------

def test_optimizer_state_words_name_adam_only_for_k_12():
    assert "各 4 字节，K = 12" in code3.optimizer_state_words(12)
    assert code3.optimizer_state_words(8).startswith("K = 8 字节/参数；默认的 12")


def test_demo2_calls_its_example_the_papers_only_with_the_papers_numbers():
    _, out = main_quietly(code3.main, ["--demo", "2"])
    assert "论文图 1 的例子 Ψ = 7.5B" in out
    _, out = main_quietly(code3.main, ["--demo", "2", "--psi-b", "1000"])
    assert "论文图 1 的例子" not in out and "不是论文图 1 的" in out


def test_one_gpu_cluster_is_one_column_and_no_also():
    _, out = main_quietly(code3.main, ["--demo", "1", "--cluster-gpus", "1"])
    header = next(line for line in out.splitlines() if line.startswith("模型  batch"))
    assert header.count("1 张卡") == 1
    assert "1 张卡也要" not in out.replace("\n", "").replace(" ", "")


def test_demo4_names_every_tensor_once_on_the_rank_that_owns_it():
    """Exercise 5 (which tensor is the biggest, who holds it) needs the names per rank."""
    from lecture01 import tiny_gpt
    from lecture09.lecture_model import MODEL_CONFIG
    results, out = shared_quick_run("03_memory_zero.py")            # demo 4 is part of it
    ranks = results["demo4"]["ranks"]
    names = [n for x in ranks for n in x["torch_tensor_names"]]
    expected = [n for n, _ in tiny_gpt.make_model(MODEL_CONFIG, 0).named_parameters()]
    assert sorted(names) == sorted(expected)                      # each tensor on exactly one rank
    assert [len(x["torch_tensor_names"]) for x in ranks] == [x["torch_tensors_owned"] for x in ranks]
    assert "PyTorch 的 rank 0：" in out and "blocks.0.attn.qkv.weight" in out


def test_mixed_precision_accounts_by_hand():
    """ZeRO §3.1: 2 + 2 + 12; Megatron-Core's distributed-optimizer table: 20 / 4 + 16/d,
    18 / 6 + 12/d, 16 / 8 + 8/d. ZeRO-1's bytes per GPU are the first row's at every d."""
    rows = {a.name: a for a in mm.PRECISION_ACCOUNTS}
    assert [a.bytes_per_param() for a in mm.PRECISION_ACCOUNTS] == [16, 20, 18, 16]
    assert [a.bytes_per_param(64) for a in mm.PRECISION_ACCOUNTS] == [4 + 12 / 64, 4 + 16 / 64, 6 + 12 / 64, 8 + 8 / 64]
    assert rows["Megatron：bf16 参数、fp32 主梯度"].bytes_per_param(64) == 6.1875
    for d in (1, 8, 64, 1024):
        assert mm.PRECISION_ACCOUNTS[0].bytes_per_param(d) * 7.5e9 == pytest.approx(mm.zero_bytes_per_gpu(7.5e9, d, 1))


def test_demo2_prints_the_accounts_and_follows_k():
    _, out = main_quietly(code3.main, ["--demo", "2"])
    assert re.search(r"^Megatron：bf16 参数、fp32 主梯度 +18 +6 \+ 12/d +6\.19 +46\.4 ", out, re.M)
    assert re.search(r"^ZeRO：fp16，K = 12 +16 +4 \+ 12/d +4\.19 +31\.4 ", out, re.M)
    flat = re.sub(r"\n\s*", "", out)
    assert "每个参数 18 字节，ZeRO 的记账 16 字节；分优化器以后（d = 64）是 6.19 对 4.19" in flat
    _, out = main_quietly(code3.main, ["--demo", "2", "--k", "8", "--psi-gpus", "8"])
    assert re.search(r"^ZeRO：fp16，K = 8 +12 +4 \+ 8/d +5\.00 ", out, re.M)
    flat = re.sub(r"\n\s*", "", out)
    assert "ZeRO 的记账 12 字节；分优化器以后（d = 8）是 7.50 对 5.00" in flat and "差越接近 2 字节" in flat
