"""All-to-all from point-to-point messages (lecture 9 §1.5, code 1's demo 6): the schedules
obey the one-link-per-worker rule, the simulation equals the definition for every p
(uneven blocks too), bytes and rounds equal the formulas, and on real gloo ranks both
schedules equal torch.distributed.all_to_all_single element for element."""

import pytest
import torch

from conftest import SWEEP_TIER
from lecture09.ranks import all_to_all as a2a
from lecture09.ranks import gloo_ranks
from lecture09.ranks.collectives import integer_inputs


def test_the_definition_by_hand():
    x = [torch.tensor([0.0, 1, 2]), torch.tensor([10.0, 11, 12]), torch.tensor([20.0, 21, 22])]
    assert [o.tolist() for o in a2a.expected(x)] == [[0, 10, 20], [1, 11, 21], [2, 12, 22]]


@pytest.mark.parametrize("algorithm", a2a.ALGORITHMS)
@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 8, 9, 16])
def test_every_schedule_keeps_the_rule_and_delivers_every_block(algorithm, p):
    rounds = a2a.schedule(algorithm, p)
    a2a.check_rounds(rounds, p)
    for n in (p * 3, p * 3 + 2):                        # equal blocks, and the first two one longer
        inputs = integer_inputs(p, n, seed=p)
        outputs = a2a.simulate(rounds, inputs)
        assert all(torch.equal(o, e) for o, e in zip(outputs, a2a.expected(inputs)))
        assert all(torch.equal(x, y) for x, y in zip(inputs, integer_inputs(p, n, seed=p)))   # untouched


@pytest.mark.parametrize("p", [2, 3, 4, 8, 64])
def test_bytes_and_rounds_equal_the_formulas(p):
    n = 12 * p                                          # elements; 4 bytes each
    for algorithm in a2a.ALGORITHMS:
        stats = a2a.schedule_cost(a2a.schedule(algorithm, p), n, p)
        rounds, path, busiest = a2a.formula(algorithm, 4 * n, p)
        assert (stats.rounds, stats.path_bytes, max(stats.bytes_sent)) == (rounds, path, busiest)
    pair = a2a.schedule_cost(a2a.pairwise(p), n, p)
    assert set(pair.bytes_sent) == {(p - 1) * 48}       # everyone sends (p − 1)/p · n, no one more
    assert a2a.schedule_cost(a2a.naive(p), n, p).bytes_sent[0] == (p - 1) ** 2 * 48   # the root


def test_formula_and_time_by_hand():
    assert a2a.formula("pairwise", 1200, 4) == (3, 900, 900)
    assert a2a.formula("naive", 1200, 4) == (6, 5400, 2700)
    assert a2a.time_s("pairwise", 1200, 4, 1e-3, 1e5) == pytest.approx(3e-3 + 9e-3)
    with pytest.raises(ValueError):
        a2a.formula("pairwise", 10, 4)


def test_a_message_of_blocks_its_sender_does_not_hold_is_refused():
    bad = [(a2a.Message(1, 2, ((0, 2),)),)]             # worker 1 cannot send worker 0's block
    with pytest.raises(ValueError, match="does not hold"):
        a2a.simulate(bad, integer_inputs(3, 6))
    with pytest.raises(ValueError, match="twice"):
        a2a.check_rounds([(a2a.Message(0, 1, ()), a2a.Message(0, 2, ()))], 3)


@pytest.mark.parametrize("p", [2, pytest.param(3, marks=SWEEP_TIER)])
def test_on_real_gloo_ranks_both_equal_torch_distributed_all_to_all_single(p):
    n = 4 * p + 1                                       # uneven blocks: all_to_all_single takes their sizes
    outputs = gloo_ranks.run_ranks(a2a.check_worker, p, args=(n, 5), timeout_s=90)
    want = a2a.expected(integer_inputs(p, n, 5))
    for rank, got in enumerate(outputs):
        for name in ("naive", "pairwise", "torch.distributed"):
            assert torch.equal(got[name], want[rank]), (rank, name)


def test_demo6_observation_follows_the_figures():
    from lecture09.ranks import alpha_beta
    from lecture09.ranks.collectives_report import demo6_observation
    figures = {p: {"pairwise": a2a.formula("pairwise", 1024, p)[2], "naive": a2a.formula("naive", 1024, p)[2],
                   "ring": alpha_beta.all_reduce_bytes_sent("ring", 1024, p), "rounds": p - 1} for p in (2, 8)}
    said = demo6_observation(figures)
    assert "p = 8 时 896 字节" in said and "（1,792）的 0.50 倍" in said and "轮数也是它的 0.50 倍" in said
    assert "根要发 6,272 字节，是成对的 7 倍" in said


def test_quick_run_of_demo_6_fits_a_projector():
    from conftest import LECTURE09, load_script, main_quietly
    from lecture01.console import display_width
    code1 = load_script(LECTURE09 / "01_collectives.py")
    results, out = main_quietly(code1.main, ["--quick", "--demo", "6"])
    assert results["demo6"]["simulated_ok"] and all(results["demo6"]["real_ok"].values())
    assert set(results["demo6"]["real_ok"]) == {2, 3} and "✗" not in out
    assert all(display_width(line) <= 100 for line in out.splitlines())


def _autograd_worker(rank, world_size):
    """AllToAll on a permuted (non-contiguous) input whose gradient also arrives permuted."""
    p = world_size
    base = torch.arange(p * 2 * 3, dtype=torch.float32).view(2, p, 3) + 100 * rank     # (2, p, 3)
    x = base.clone().requires_grad_()
    y = a2a.AllToAll.apply(x.transpose(0, 1))             # (p, 2, 3), blocks along dim 0
    probe = torch.arange(p * 3 * 2, dtype=torch.float32).view(p, 3, 2) + 1000 * rank
    (y * probe.transpose(1, 2)).sum().backward()           # a permuted gradient flows back
    return y.detach(), x.grad


def test_autograd_all_to_all_on_permuted_tensors():
    """Block j of rank i goes to rank j at position i, and the gradient comes back the same
    way. (A version that allocated with the gradient's strides scrambled it: caught here.)"""
    p = 2
    ranks = gloo_ranks.run_ranks(_autograd_worker, p, timeout_s=60)
    for i, (y, x_grad) in enumerate(ranks):
        for j in range(p):
            sent = torch.arange(p * 2 * 3, dtype=torch.float32).view(2, p, 3)[:, i] + 100 * j
            assert torch.equal(y[j], sent)                 # rank j's block i
            probe_j = (torch.arange(p * 3 * 2, dtype=torch.float32).view(p, 3, 2) + 1000 * j).transpose(1, 2)
            assert torch.equal(x_grad[:, j], probe_j[i])   # gradient of what went to rank j
