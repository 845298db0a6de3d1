"""compressed_dp: the simulated data-parallel step against one process, divergence, and
the paired comparisons demo 2's observations are worded from."""

import math

import pytest
import torch

from lecture09 import compressed_dp as cdp
from lecture01 import tiny_gpt
from lecture09.lecture_model import MODEL_CONFIG


def _grads(model):
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def _batch(batch_size):
    data = torch.randint(0, 44, (5000,), generator=torch.Generator().manual_seed(0))
    return tiny_gpt.get_batch(data, batch_size, 96, torch.Generator().manual_seed(1))


def test_four_uncompressed_workers_equal_one_process():
    """Reference: averaging four workers' gradients (8 sequences each) gives the gradient of
    the whole batch of 32 computed in one process."""
    x, y = _batch(32)
    single = tiny_gpt.make_model(MODEL_CONFIG, seed=0)
    tiny_gpt.plain_backward(bf16=False)(single, x, y)
    workers = tiny_gpt.make_model(MODEL_CONFIG, seed=0)
    stats = {"wire_bytes": 0, "zeros": 0, "entries": 0}
    aggregator = cdp.WorkerCompression("none", 4, False, cdp.TrainSetup().options)
    cdp.compressed_backward(aggregator, 4, stats)(workers, x, y)
    assert torch.allclose(_grads(single), _grads(workers), atol=1e-6, rtol=1e-4)
    assert stats["wire_bytes"] == 4 * workers.n_params()
    assert stats["entries"] == 0                       # zeros are counted only when asked


def test_topk_workers_send_only_their_largest_entries():
    x, y = _batch(8)
    model = tiny_gpt.make_model(MODEL_CONFIG, seed=0)
    stats = {"wire_bytes": 0, "zeros": 0, "entries": 0}
    aggregator = cdp.WorkerCompression("topk", 2, False, cdp.TrainSetup().options)
    cdp.compressed_backward(aggregator, 2, stats, count_zeros=True)(model, x, y)
    n = model.n_params()
    k = int(0.01 * n)
    assert stats["wire_bytes"] == 8 * k
    assert int((_grads(model) != 0).sum()) <= 2 * k   # the average of two sparse vectors
    assert stats["entries"] == 2 * n and stats["zeros"] >= 2 * (n - k) - n // 10


def test_a_diverging_run_stops_and_says_so():
    setup = cdp.TrainSetup(sgd_lr=1e4).with_steps(40)       # far too large: the loss overflows
    result = cdp.train_run(cdp.Run("sgd", "sgd", "none"), cdp.Seeds(), setup)
    assert result.diverged and math.isnan(result.bpc)
    assert result.steps_done < setup.steps


def test_paired_deltas_pair_by_seed():
    def result(seeds, bpc):
        return cdp.RunResult(cdp.Run("x", "adamw", "int8"), seeds, bpc, 1.0, 0.0, math.isnan(bpc), 1, 0.0)
    s0, s1 = cdp.Seeds(0, 1), cdp.Seeds(1, 2)
    rows = [result(s0, 1.6), result(s1, float("nan"))]
    bases = [result(s0, 1.5), result(s1, 1.4)]
    deltas = cdp.paired_deltas(rows, bases)
    assert deltas[0] == pytest.approx(0.1) and deltas[1] == math.inf    # diverged = infinitely worse
    assert math.isnan(cdp.paired_deltas([result(s0, 1.6)], [result(s0, float("nan"))])[0])
    with pytest.raises(ValueError):
        cdp.paired_deltas([result(s0, 1.6)], [result(s1, 1.5)])


@pytest.mark.parametrize("deltas, expected", [
    ([0.004], "same"), ([-0.01], "same"), ([0.02], "worse"), ([-0.5], "better"),
    ([0.003, -0.002, 0.009], "same"), ([0.3, 0.5, math.inf], "worse"),
    ([0.3, -0.2], "unclear"),                 # the seeds disagree
    ([0.3, 0.005], "unclear"),                # worse on one seed, the same on another
    ([math.nan], "unclear"), ([], "unclear"),
])
def test_verdict_needs_every_seed_to_agree(deltas, expected):
    assert cdp.verdict(deltas, tolerance=0.01) == expected


def test_spread_ignores_diverged_runs_but_counts_them():
    s = cdp.Spread.of([1.5, float("nan"), 1.7])
    assert (s.mean, s.low, s.high, s.n, s.n_total) == (pytest.approx(1.6), 1.5, 1.7, 2, 3)
    assert cdp.Spread.of([float("nan")]).n == 0


def test_seed_sweeps_move_both_seeds():
    assert [cdp.Seeds(0, 1).shifted(k) for k in range(3)] == [cdp.Seeds(0, 1), cdp.Seeds(1, 2), cdp.Seeds(2, 3)]
