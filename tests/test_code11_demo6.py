"""Code 11's demo 6 (compress/pipeline_aq.py, compress/aq_report.py; notes §11.7): AQ-SGD on the
real gloo pipeline of the tiny GPT.

- the fp32 pipeline trained S steps is single-process training (losses, final weights);
- AQ-SGD with a lossless code is the fp32 pipeline; the two ends' stores stay bit-for-bit equal;
- bytes per value counted by hand; what the receiver allocates is what encode sends;
- the delta's error is smaller than direct's at the same bytes once a sequence comes back;
- the control row (direct 4 bit, first visits in fp32) sends AQ-SGD 4 bit's bytes, keeps no store;
- every branch of the observations; the --quick run and a bad flag as a student meets them.
"""

import math
import subprocess
import sys

import pytest
import torch

from conftest import LECTURE09, ROOT, SWEEP_TIER, assert_one_line_status_2, load_script
from lecture01 import tiny_gpt
from lecture01.console import display_width
from lecture09.compress import aq_report
from lecture09.compress import pipeline_aq as aq
from lecture09.compress.compression_schemes import Options, parts_bytes
from lecture09.compress.training import Seeds
from lecture09.lecture_model import MODEL_CONFIG

SCRIPT = LECTURE09 / "11_frontier.py"
LOSS_ATOL = 1e-5      # fp32: the pipeline sums the same micro-batch losses in another order
WEIGHT_ATOL = 2e-4    # after 6 AdamW steps; early Adam steps divide by a tiny sqrt(v), which magnifies 1e-7 differences


@pytest.fixture(scope="module")
def trained():
    """One gloo run (2 ranks, 6 steps, fp32): the fp32 pipeline, AQ-SGD with a lossless code,
    AQ-SGD 4 bit and its control, with final weights and stores kept; and the single-process
    reference."""
    setup = aq.AQSetup(epochs=3, n_sequences=64, keep=True)
    rows = [aq.AQRow("fp32"), aq.AQRow("aq-lossless", "none", True, "none"),
            aq.AQRow("aq-4bit", "int4-block", True, "int8-block"),
            aq.AQRow("control", "int4-block", False, "int8-block", first_fp32=True)]
    table = aq.train_rows(rows, [Seeds(0, 1)], setup)
    return setup, table, aq.single_process_reference(Seeds(0, 1), setup)


def test_the_fp32_pipeline_is_single_process_training(trained):
    setup, table, (losses, weights) = trained
    run = table["fp32"][0]
    assert len(run.losses) == len(losses) == setup.steps == 6
    assert max(abs(a - b) for a, b in zip(run.losses, losses)) <= LOSS_ATOL
    assert set(run.weights) == set(weights)
    assert all(torch.allclose(run.weights[n], weights[n], rtol=0, atol=WEIGHT_ATOL) for n in weights)
    assert run.forward_bytes_per_value == run.backward_bytes_per_value == 4.0


def test_aq_sgd_with_a_lossless_code_is_the_fp32_pipeline(trained):
    _, table, _ = trained
    base, lossless = table["fp32"][0], table["aq-lossless"][0]
    assert max(abs(a - b) for a, b in zip(base.losses, lossless.losses)) <= LOSS_ATOL
    assert all(torch.allclose(base.weights[n], lossless.weights[n], rtol=0, atol=WEIGHT_ATOL) for n in base.weights)
    assert abs(base.bpc - lossless.bpc) <= 1e-4


def test_both_ends_keep_the_same_store_bit_for_bit(trained):
    setup, table, _ = trained
    for label in ("aq-lossless", "aq-4bit"):
        run = table[label][0]
        (sender, receiver), = run.stores                       # 2 stages: one cut
        assert torch.equal(sender, receiver) and sender.abs().sum() > 0
        assert run.store_bytes_per_end == setup.n_sequences * MODEL_CONFIG.block_size * MODEL_CONFIG.n_embd * 4
    # 3 epochs, the first in fp32 (4 bytes), then 4-bit deltas: (4 + 2 x 0.515625) / 3
    assert table["aq-4bit"][0].forward_bytes_per_value == pytest.approx((4 + 2 * (0.5 + 4 / 256)) / 3)


def test_the_control_row_sends_aq_sgd_4_bit_s_bytes_and_keeps_no_store(trained):
    _, table, _ = trained
    control, aq_4bit = table["control"][0], table["aq-4bit"][0]
    assert control.forward_bytes_per_value == aq_4bit.forward_bytes_per_value == (4 + 2 * 0.515625) / 3
    assert control.backward_bytes_per_value == aq_4bit.backward_bytes_per_value
    assert control.store_bytes_per_end == 0 and control.stores == [(None, None)]
    assert control.bpc != aq_4bit.bpc                          # Q(a) after epoch 1, not Q(a − m(ξ))


def test_at_the_defaults_the_control_s_bytes_are_aq_sgd_4_bit_s_0_8641():
    """Both rows' CutEnds driven over the default run's order (D = 384, E = 10, 4 micro-batches
    a step); each sequence carries 256 values (one block), so bytes per value are the default's."""
    setup = aq.AQSetup()
    _, order = aq.training_set(tiny_gpt.load_world_tokens(0)[0], setup, data_seed=1)
    rows = {r.label: r for r in aq.build_rows()}
    sent = {}
    for label in ("AQ-SGD 4 bit", aq.CONTROL_4BIT):
        sender, receiver = _ends(rows[label], setup.n_sequences, (1, 256), block_size=256)
        a = torch.randn(setup.batch_size // setup.n_micro, 1, 256, generator=torch.Generator().manual_seed(0))
        sent[label] = sum(_send(sender, receiver, a, ids)[1] for step in order for ids in step.chunk(setup.n_micro))
        sent[label] /= a.numel() * setup.n_micro * setup.steps
    E = setup.epochs
    assert sent["AQ-SGD 4 bit"] == sent[aq.CONTROL_4BIT] == (4 + (E - 1) * 0.515625) / E
    assert f"{sent[aq.CONTROL_4BIT]:.4f}" == "0.8641"


def test_bytes_per_value_by_hand():
    opts = Options(block_size=256)
    x = torch.randn(2, 3, 101)                                  # 606 values: 3 blocks of 256, the last short
    n = x.numel()
    by_hand = {"none": 4 * n, "int8-block": n + 4 * 3, "int4-block": 303 + 4 * 3}
    for scheme, expected in by_hand.items():
        parts = aq.encode(scheme, x, opts)
        assert parts_bytes(parts) == expected
        layout = aq.wire_layout(scheme, n, opts.block_size)      # what the receiver allocates
        assert [(k, tuple(v.shape), v.dtype) for k, v in parts.items()] == layout
        assert aq.decode(scheme, parts, x.shape, opts).shape == x.shape
    x = torch.randn(7)                                          # odd count: the last byte holds one 4-bit code
    assert [tuple(s) for _, s, _ in aq.wire_layout("int4-block", 7, 4)] == [(4,), (2,)]
    assert parts_bytes(aq.encode("int4-block", x, Options(block_size=4))) == 4 + 8


def _ends(row, n_sequences=4, shape=(3, 8), block_size=8):
    opts = Options(block_size=block_size)
    return aq.CutEnd(row, opts, n_sequences, shape), aq.CutEnd(row, opts, n_sequences, shape)


def _send(sender, receiver, a, ids):
    parts = sender.encode(a, ids)
    sender.rebuild(parts, ids, a.shape)
    return receiver.rebuild(parts, ids, a.shape), parts_bytes(parts)


def test_the_delta_beats_direct_at_the_same_bytes_once_a_sequence_comes_back():
    gen = torch.Generator().manual_seed(0)
    ids = torch.tensor([2, 0])
    a_then = torch.randn(2, 3, 8, generator=gen)
    a_now = a_then + 0.05 * torch.randn(2, 3, 8, generator=gen)     # the activation moved 5%
    errors, sizes = {}, {}
    for delta in (False, True):
        sender, receiver = _ends(aq.AQRow("r", "int4-block", delta, "int8-block"))
        first, first_bytes = _send(sender, receiver, a_then, ids)
        if delta:                                               # a first visit travels in fp32, exactly
            assert torch.equal(first, a_then) and first_bytes == 4 * a_then.numel()
        got, sizes[delta] = _send(sender, receiver, a_now, ids)
        errors[delta] = float((got - a_now).norm() / a_now.norm())
        assert torch.equal(sender.store, receiver.store) if delta else sender.store is None
    assert sizes[True] == sizes[False] == 24 + 4 * 6                 # 48 codes in 24 bytes, 6 scales
    assert errors[True] < 0.2 * errors[False]


def test_only_sequences_seen_before_travel_as_a_delta():
    sender, _ = _ends(aq.AQRow("r", "int8-block", True, "int8-block"))
    a = torch.randn(2, 3, 8)
    assert sender.scheme(torch.tensor([0, 1])) == "none"
    sender.rebuild(sender.encode(a, torch.tensor([0, 1])), torch.tensor([0, 1]), a.shape)
    assert sender.scheme(torch.tensor([1, 0])) == "int8-block"
    assert sender.scheme(torch.tensor([1, 2])) == "none"               # one new sequence: the micro-batch in fp32


def test_the_control_sends_a_first_visit_in_fp32_then_exactly_what_direct_sends():
    gen = torch.Generator().manual_seed(0)
    ids = torch.tensor([2, 0])
    a_then, a_now = torch.randn(2, 3, 8, generator=gen), torch.randn(2, 3, 8, generator=gen)
    sender, receiver = _ends(aq.AQRow("c", "int4-block", False, "int8-block", first_fp32=True))
    direct_sender, direct_receiver = _ends(aq.AQRow("d", "int4-block", False, "int8-block"))
    first, first_bytes = _send(sender, receiver, a_then, ids)
    assert torch.equal(first, a_then) and first_bytes == 4 * a_then.numel()
    assert sender.store is None and receiver.store is None and sender.store_bytes == 0
    got, size = _send(sender, receiver, a_now, ids)
    direct, direct_size = _send(direct_sender, direct_receiver, a_now, ids)
    assert torch.equal(got, direct) and size == direct_size == 24 + 4 * 6
    assert sender.scheme(torch.tensor([0, 1])) == "none"               # sequence 1 is new


def test_each_epoch_is_a_permutation_of_the_ids():
    setup = aq.AQSetup(epochs=3, n_sequences=64)
    train, _ = tiny_gpt.load_world_tokens(0)
    sequences, order = aq.training_set(train, setup, data_seed=5)
    assert sequences.shape == (64, MODEL_CONFIG.block_size + 1) and order.shape == (6, 32)
    for e in range(3):
        assert sorted(order[2 * e:2 * e + 2].reshape(-1).tolist()) == list(range(64))
    assert not torch.equal(order[:2], order[2:4])


def test_the_flag_defaults_written_out_are_the_code_s():
    s = aq.AQSetup()
    d = aq_report.DEFAULTS
    assert (d["aq_sequences"], d["aq_epochs"], d["aq_stages"], d["aq_micro_batches"]) == \
        (s.n_sequences, s.epochs, s.n_stages, s.n_micro)
    assert aq_report.BATCH == tiny_gpt.TrainConfig().batch_size
    assert aq_report.MAX_PIECES == MODEL_CONFIG.n_layer + 2
    assert [r.backward for r in aq.build_rows(d["aq_backward"])[1:]] == ["int8-block"] * 5


# --- observations: one fake table per branch ---------------------------------------------

def _table(bpcs, setup=aq.AQSetup(), n_rows=6):
    """bpcs: {row index: [bpc per seed]} for build_rows' first n_rows rows (5: no control)."""
    rows = aq.build_rows()[:n_rows]
    results = {}
    for k, row in enumerate(rows):
        fwd = {"none": 4.0, "int8-block": 1.015625, "int4-block": 0.515625}[row.forward]
        if row.fp32_first_visit:
            fwd = (4.0 + (setup.epochs - 1) * fwd) / setup.epochs
        store = 384 * 96 * 96 * 4 if row.delta else 0
        results[row.label] = [aq.AQResult(row, Seeds(i, i + 1), b, fwd, 1.015625, store, (), 0.0)
                              for i, b in enumerate(bpcs[k])]
    return aq_report.collect(results, rows)


def _observe(bpcs, n_rows=6):
    return aq_report.table_k_observations(_table(bpcs, n_rows=n_rows), aq.AQSetup(), 83_468)


CONTROL = f"「{aq.CONTROL_4BIT}」"


def test_observations_one_seed_pair_says_it_has_no_range():
    lines = _observe({0: [2.0], 1: [2.001], 2: [2.03], 3: [2.0], 4: [2.004], 5: [2.025]})
    assert "「int8 直接」比「不压缩 fp32（基准）」+0.0010：分不出来" in lines[0]
    assert "+0.0300：更差" in lines[1] and "只有一组种子" in lines[1]
    assert "同样 4 bit" in lines[6] and "-0.0260：更好" in lines[6] and "不是干净的对照" in lines[6]
    assert "干净的对照：「AQ-SGD 4 bit」比" + CONTROL + "-0.0210：更好" in lines[7]
    assert "只看第 1 个 epoch：" + CONTROL + "比「4 bit 直接」-0.0050：分不出来" in lines[8]
    assert "所以是变化量在帮忙" in lines[9] and "这 1 组种子上" in lines[9] and "--seeds 5 再确认" in lines[9]
    assert "多 0.3484" in lines[10] and "10 个 epoch 里第 1 个发 fp32" in lines[10]
    assert CONTROL + "0.8641，一样" in lines[10]
    assert "一端 14.16 MB" in lines[11] and "42 倍" in lines[11]


def test_observations_several_seeds_need_every_seed_on_one_side():
    base = [2.0, 2.1, 2.2]
    lines = _observe({0: base, 1: base, 2: [b + 0.03 for b in base], 3: base,
                      4: [2.005, 2.1 + 0.02, 2.2 - 0.02], 5: [b + 0.03 for b in base]})
    assert "+0.0300（+0.0300..+0.0300）：更差" in lines[1] and "3 组种子都在同一边" in lines[1]
    assert "种子之间不一致，分不出来" in lines[3]
    assert "分不出来（|差| ≤ 0.01" in lines[5]                  # AQ int8 - direct int8 = 0 on every seed


def test_observations_credit_the_delta_when_the_clean_pair_is_better_on_every_seed():
    base = [2.0, 2.1, 2.2]
    lines = _observe({0: base, 1: base, 2: [b + 0.03 for b in base], 3: base,
                      4: [b + 0.005 for b in base], 5: [b + 0.025 for b in base]})
    assert "干净的对照" in lines[7] and "-0.0200（-0.0200..-0.0200）：更好" in lines[7]
    assert "只看第 1 个 epoch" in lines[8] and "-0.0050（-0.0050..-0.0050）：分不出来" in lines[8]
    assert "所以是变化量在帮忙" in lines[9] and "3 组种子上都比" + CONTROL + "好 0.01 以上" in lines[9]
    assert "再确认" not in lines[9]


def test_observations_cannot_tell_the_delta_apart_when_the_clean_pair_is_within_tolerance():
    base = [2.0, 2.1, 2.2]                                      # all of the gain is epoch 1's fp32
    lines = _observe({0: base, 1: base, 2: [b + 0.03 for b in base], 3: base,
                      4: [b + 0.005 for b in base], 5: [b + 0.008 for b in base]})
    assert "-0.0030（-0.0030..-0.0030）：分不出来" in lines[7]
    assert "只看第 1 个 epoch" in lines[8] and "-0.0220（-0.0220..-0.0220）：更好" in lines[8]
    assert "分不出变化量本身有没有帮忙（cannot be told apart）：干净的对照里，配对差 3 组种子上都在 ±0.01 以内" in lines[9]
    assert "「AQ-SGD 4 bit」和「4 bit 直接」的差别不能算在变化量头上" in lines[9]


def test_observations_cannot_tell_the_delta_apart_when_the_seeds_disagree():
    base = [2.0, 2.1, 2.2]                                      # better beyond 0.01 on two seeds only
    lines = _observe({0: base, 1: base, 2: [b + 0.03 for b in base], 3: base,
                      4: [b + 0.005 for b in base], 5: [2.025, 2.125, 2.21]})
    assert "种子之间不一致，分不出来" in lines[7]
    assert "cannot be told apart）：干净的对照里，配对差在种子之间不一致" in lines[9]


def test_observations_say_when_the_delta_is_worse_than_its_control():
    lines = _observe({0: [2.0], 1: [2.0], 2: [2.03], 3: [2.0], 4: [2.05], 5: [2.03]})
    assert "+0.0200：更差" in lines[7] and "所以变化量没有帮忙，反而更差" in lines[9]


def test_observations_a_diverged_run_has_no_paired_difference():
    lines = _observe({0: [2.0], 1: [math.nan], 2: [2.03], 3: [2.0], 4: [2.0], 5: [2.0]})
    assert "有一行发散了" in lines[0] and "有一行发散了" in lines[5]
    assert "发散" == aq_report.delta_cell([math.nan])
    lines = _observe({0: [2.0], 1: [2.0], 2: [2.03], 3: [2.0], 4: [2.0], 5: [math.nan]})
    assert "有一行发散了" in lines[7] and "有一行发散了" in lines[8]
    assert "cannot be told apart）：干净的对照里有一行发散了" in lines[9]


def test_observations_without_the_control_row_keep_the_unclean_pair_only():
    lines = _observe({0: [2.0], 1: [2.001], 2: [2.03], 3: [2.0], 4: [2.004]}, n_rows=5)
    assert len(lines) == 4 + 2 + 2 and "不是干净的对照" in lines[5]
    assert not any("干净的对照：「" in line or "变化量在帮忙" in line for line in lines)
    assert lines[6].endswith("之后才发变化量")


def test_table_k_fits_100_columns_even_at_the_largest_store(capsys):
    from dataclasses import replace
    largest = 100_000 * MODEL_CONFIG.block_size * MODEL_CONFIG.n_embd * 4      # --aq-sequences 100000
    table = {label: (row, [replace(r, store_bytes_per_end=largest if r.store_bytes_per_end else 0)
                           for r in results], deltas)
             for label, (row, results, deltas) in _table({k: [2.0, 2.1] for k in range(6)}).items()}
    aq_report.print_table_k(aq.AQSetup(), table, print)
    lines = capsys.readouterr().out.splitlines()
    assert any("3686 MB" in line for line in lines)
    assert max(display_width(line) for line in lines if not line.startswith("(k)")) <= 100


# --- as a student runs it ---------------------------------------------------------------

@SWEEP_TIER[0]
@SWEEP_TIER[1]
def test_quick_run_of_demo_6_exits_0_within_100_columns():
    """~8 s (a subprocess starting 2 ranks): the sweep tier."""
    done = subprocess.run([sys.executable, str(SCRIPT), "--demo", "6", "--quick", "--fp32"], capture_output=True,
                          text=True, cwd=str(ROOT.parent), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert all(display_width(line) <= 100 for line in lines)
    assert any(line.startswith("(k) ") for line in lines) and "观察 observations：" in done.stdout
    for label in ("不压缩 fp32（基准）", "int8 直接", "4 bit 直接", "AQ-SGD int8", "AQ-SGD 4 bit", aq.CONTROL_4BIT):
        assert any(line.startswith(label) for line in lines), label


@pytest.mark.parametrize("argv, words", [(["--demo", "6", "--aq-sequences", "40"], "--aq-sequences"),
                                         (["--demo", "6", "--aq-stages", "4"], "--aq-stages"),
                                         (["--demo", "6", "--aq-micro-batches", "3"], "--aq-micro-batches"),
                                         (["--demo", "8"], "--demo")])
def test_a_bad_flag_is_one_line_and_status_2(argv, words):
    assert_one_line_status_2(SCRIPT, argv, words)


def test_the_default_demo_set_does_not_run_demo_6():
    code11 = load_script(SCRIPT)
    args, _ = code11.parse_args([])
    assert args.demo == "1-5" and not code11.wanted(args, "6")
    assert args.aq_sequences == aq_report.DEFAULTS["aq_sequences"]
