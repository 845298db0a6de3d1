"""compressed_dp: the simulated data-parallel step against one process, divergence, and
the paired comparisons demo 2's observations are worded from."""

import math

import pytest
import torch

from lecture09.compress import compressed_dp as cdp
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
    stats = {"wire_bytes": 0, "sends": 0, "zeros": 0, "entries": 0}
    aggregator = cdp.WorkerCompression("none", 4, False, cdp.TrainSetup().options)
    cdp.compressed_backward(aggregator, 4, stats)(workers, x, y)
    assert torch.allclose(_grads(single), _grads(workers), atol=1e-6, rtol=1e-4)
    assert stats["wire_bytes"] == 4 * workers.n_params()
    assert stats["entries"] == 0                       # zeros are counted only when asked


def test_topk_workers_send_only_their_largest_entries():
    x, y = _batch(8)
    model = tiny_gpt.make_model(MODEL_CONFIG, seed=0)
    stats = {"wire_bytes": 0, "sends": 0, "zeros": 0, "entries": 0}
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


def test_diloco_with_outer_lr_one_and_no_momentum_is_model_averaging(monkeypatch):
    """Local SGD as the reference: after each round θ_global is the mean of the workers'
    parameters, i.e. training H = steps once equals averaging four independent AdamW runs."""
    from lecture09.compress import local_sgd
    captured = {}
    from lecture09.compress import training
    real_finish = cdp.finish_run

    def finish(run, seeds, model, *rest, **kw):
        captured["theta"] = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
        return real_finish(run, seeds, model, *rest, **kw)

    monkeypatch.setattr(training, "finish_run", finish)
    setup = cdp.replace(cdp.TrainSetup(outer_lr=1.0, outer_momentum=0.0), n_workers=2).with_steps(3)
    result = local_sgd.train(cdp.Run("d", "diloco", "none", param=3), cdp.Seeds(), setup)
    assert result.bytes_per_element == pytest.approx(4.0 / 3)        # one fp32 pseudo-gradient in 3 steps
    # the same two workers trained on their own, then averaged
    train_data, _ = cdp.world_tokens(0)
    models = [tiny_gpt.make_model(MODEL_CONFIG, seed=0) for _ in range(2)]
    opts = [tiny_gpt.make_adamw(m, setup.recipe) for m in models]
    gen = torch.Generator().manual_seed(1)
    for step in range(3):
        lr = tiny_gpt.lr_at(step, 3, setup.recipe.peak_lr)
        x, y = tiny_gpt.get_batch(train_data, setup.recipe.batch_size, MODEL_CONFIG.block_size, gen)
        for w, (m, o) in enumerate(zip(models, opts)):
            for g in o.param_groups:
                g["lr"] = lr
            o.zero_grad(set_to_none=True)
            tiny_gpt.lm_loss(m, x[w * 16:(w + 1) * 16], y[w * 16:(w + 1) * 16]).backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), setup.recipe.clip_norm)
            o.step()
    average = sum(torch.nn.utils.parameters_to_vector(m.parameters()).detach() for m in models) / 2
    assert torch.allclose(captured["theta"], average, atol=1e-6)


def test_powersgd_runs_through_the_engine_and_counts_its_bytes():
    setup = cdp.TrainSetup().with_steps(3)
    result = cdp.train_run(cdp.Run("p", "adamw", "powersgd", True, 1), cdp.Seeds(), setup)
    model = tiny_gpt.make_model(MODEL_CONFIG, 0)
    from lecture09.compress.powersgd import should_compress
    per_step = 0
    for p in model.parameters():
        rows, cols = p.shape[0], p.numel() // p.shape[0]
        per_step += (rows + cols) * 1 * 4 if should_compress(rows, cols, 1) else 4 * p.numel()
    # two plain steps (the hook's start), then PowerSGD; bytes averaged over the run
    assert result.bytes_per_element * model.n_params() == pytest.approx((2 * 4 * model.n_params() + per_step) / 3)
