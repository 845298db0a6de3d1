"""Asynchronous local SGD (compress/async_local_sgd.py; notes §11.8): the delayed Nesterov
step by hand and against PyTorch's Nesterov SGD; the event loop's arrivals by hand; with one
worker, asynchronous local SGD is DiLoCo; the bytes by hand; table (m)'s server by hand."""

from dataclasses import replace

import pytest
import torch

from lecture09.compress import async_local_sgd as als
from lecture09.compress import compressed_dp as cdp
from lecture09.schedule import gossip_pricing


def test_step_times_run_evenly_from_1_to_the_slowest():
    assert als.step_times(4, 2.0) == [1.0, 1.0 + 1 / 3, 1.0 + 2 / 3, 2.0]
    assert als.step_times(1, 5.0) == [1.0]
    assert als.step_times(3, 1.0) == [1.0, 1.0, 1.0]
    for bad in ((0, 2.0), (2, 0.5)):
        with pytest.raises(ValueError):
            als.step_times(*bad)


def _feed(server, gradients):
    for g in gradients:
        server.step(torch.tensor([float(g)]))
    return server.theta.item()


def test_delayed_nesterov_by_hand():
    # N = 2, β = 0.5, lr 1, c = 0: g = 1 → θ = -0.5 (g/N only); g = 1 → Δ = 2, m = 1,
    # θ = -0.5 - (0.5·1 + 0.5) = -1.5; g = 2 → θ = -2.5; g = 0 → Δ = 2, m = 0.5 + 1 = 1.5, θ = -3.25
    server = als.DelayedNesterov(torch.zeros(1), lr=1.0, beta=0.5, buffer_size=2)
    assert [_feed(server, [g]) for g in (1, 1, 2, 0)] == [-0.5, -1.5, -2.5, -3.25]
    # c = 0.25: between momentum updates θ also takes c β m; at one, (1 - cN + c) β m = 0.75 β m
    server = als.DelayedNesterov(torch.zeros(1), lr=1.0, beta=0.5, buffer_size=2, c=0.25)
    assert [_feed(server, [g]) for g in (1, 1, 2)] == [-0.5, -1.375, -2.5]


def test_delayed_nesterov_refuses_what_it_cannot_do():
    for n, c in ((0, 0.0), (2, 0.6), (1, -0.1)):
        with pytest.raises(ValueError):
            als.DelayedNesterov(torch.zeros(1), 1.0, 0.9, n, c)


def _torch_nesterov(theta, gradients, lr, beta):
    p = torch.nn.Parameter(theta.clone())
    opt = torch.optim.SGD([p], lr=lr, momentum=beta, nesterov=True)
    for g in gradients:
        p.grad = g.clone()
        opt.step()
    return p.detach()


def test_with_a_buffer_of_one_it_is_pytorchs_nesterov_sgd():
    gen = torch.Generator().manual_seed(0)
    theta = torch.randn(50, generator=gen)
    gradients = [torch.randn(50, generator=gen) for _ in range(12)]
    server = als.DelayedNesterov(theta.clone(), lr=0.3, beta=0.9, buffer_size=1)
    for g in gradients:
        server.step(g)
    torch.testing.assert_close(server.theta, _torch_nesterov(theta, gradients, 0.3, 0.9), rtol=0, atol=1e-6)


def test_fed_synchronous_rounds_a_buffer_of_w_is_diloco_s_outer_step_on_the_mean():
    gen, w = torch.Generator().manual_seed(1), 4
    theta = torch.randn(30, generator=gen)
    rounds = [[torch.randn(30, generator=gen) for _ in range(w)] for _ in range(5)]
    server = als.DelayedNesterov(theta.clone(), lr=0.7, beta=0.9, buffer_size=w)
    for round_ in rounds:
        for g in round_:
            server.step(g)
    means = [sum(r) / w for r in rounds]
    torch.testing.assert_close(server.theta, _torch_nesterov(theta, means, 0.7, 0.9), rtol=0, atol=1e-5)


def test_the_momentum_weights_of_one_buffer_sum_to_one():
    # between updates c β m each; at the update (1 - cN + c) β m: (N - 1) c + 1 - cN + c = 1
    for n, c in ((1, 0.0), (4, 0.0), (4, 0.25), (3, 0.1)):
        assert (n - 1) * c + (1 - c * n + c) == pytest.approx(1.0)


def test_the_event_loop_by_hand():
    # 2 workers taking 1 and 2 units a step, H = 2, a budget of 8 inner steps: worker 0 arrives
    # at 2 and at 4 (first: equal times go to the lower worker), worker 1 at 4 (two arrivals
    # after its pull: staleness 2), worker 0 at 6; worker 1 finds the budget used up
    starts = []
    arrivals = als.simulate(2, 2, 2.0, 8, lambda w, n, applied: starts.append((w, n, applied)), lambda w: None)
    assert [(a.time, a.worker, a.staleness) for a in arrivals] == [(2.0, 0, 0), (4.0, 0, 0), (4.0, 1, 2),
                                                                     (6.0, 0, 1)]
    assert starts == [(0, 2, 0), (1, 2, 0), (0, 2, 1), (0, 2, 2)]
    assert als.synchronous_time(4, 2.0) == 8.0
    # a last, shorter round when H does not divide the budget
    starts.clear()
    arrivals = als.simulate(1, 3, 1.0, 7, lambda w, n, applied: starts.append(n), lambda w: None)
    assert starts == [3, 3, 1] and arrivals[-1].time == 7.0


def test_no_round_is_longer_than_a_synchronous_workers_whole_run():
    # H = 64 beyond 3 steps: each of the 4 workers takes one round of 3 (not the first one all 12),
    # so the slowest worker's round is the whole time, as in the synchronous run
    starts = []
    arrivals = als.simulate(4, 64, 2.0, 12, lambda w, n, applied: starts.append((w, n)), lambda w: None)
    assert starts == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert arrivals[-1].time == als.synchronous_time(3, 2.0) == 6.0


def _setup(n_workers, steps=8):
    return replace(cdp.TrainSetup().with_steps(steps), n_workers=n_workers, precision="fp32")


@pytest.mark.parametrize("mode", ["delayed", "nesterov"])
def test_with_one_worker_asynchronous_local_sgd_is_diloco(mode):
    # one worker: nobody else's pseudo-gradient can arrive in between, the batches, the inner
    # lr and the outer step (N = 1, lr / 1) are DiLoCo's; only the outer step's rounding differs
    setup, seeds = _setup(1), cdp.Seeds(0, 1)
    a = cdp.train_run(cdp.Run("a", "async-local-sgd", "none", param=(3, mode, 2.0)), seeds, setup)
    d = cdp.train_run(cdp.Run("d", "diloco", "none", param=3), seeds, setup)
    assert a.bpc == pytest.approx(d.bpc, abs=1e-5)
    assert a.timing == (8.0, 0.0, 0) and a.bytes_per_element == d.bytes_per_element


def test_bytes_staleness_and_time_of_a_run_by_hand():
    # 4 workers, 6 steps, H = 4: a budget of 24 inner steps is 6 rounds of 4; each arrival sends
    # one fp32 pseudo-gradient: 4 × 6 / 4 workers / 6 steps = 1 byte per parameter per step
    setup, seeds = _setup(4, steps=6), cdp.Seeds(0, 1)
    r = cdp.train_run(cdp.Run("a", "async-local-sgd", "none", param=(4, "average", 2.0)), seeds, setup)
    assert r.bytes_per_element == pytest.approx(1.0) and r.steps_done == 6
    expected = als.simulate(4, 4, 2.0, 24, lambda *a: None, lambda w: None)
    stale = [x.staleness for x in expected]
    assert r.timing == (expected[-1].time, sum(stale) / len(stale), max(stale))
    assert r.timing[0] < als.synchronous_time(6, 2.0)


def test_the_server_sits_where_its_group_waits_least_by_hand():
    # devices 0, 1, 2 with swaps of 1 (0-1), 2 (0-2), 4 (1-2) seconds: a server on 0 waits
    # (1 + 2)/2, on 1 (1 + 4)/2, on 2 (2 + 4)/2; on 0 the others wait 1 and 2
    price = gossip_pricing.price_servers([{(0, 1): 1.0, (0, 2): 2.0, (1, 2): 4.0}])
    assert price == gossip_pricing.ServerPrice(1.5, 1.0, 2.0, 2)
    # a tie goes to the lower device; two groups pool their links
    tie = gossip_pricing.price_servers([{(0, 1): 3.0}, {(2, 3): 1.0, (2, 4): 1.0, (3, 4): 1.0}])
    assert tie == gossip_pricing.ServerPrice((3.0 + 1.0 + 1.0) / 3, 1.0, 3.0, 3)
    with pytest.raises(ValueError):
        gossip_pricing.price_servers([{}])


def test_on_demo_1s_network_the_server_is_priced_on_the_gossip_links():
    price, ring_s, plain_s, setup = gossip_pricing.price_server(4.0)
    gossip, ring_g, plain_g, _ = gossip_pricing.price_gossip(4.0)
    assert (ring_s, plain_s) == (ring_g, plain_g)
    assert price.n_links == setup.n_stages * (setup.n_replicas - 1)
    assert gossip.own_min_s <= price.min_s <= price.mean_s <= price.max_s <= gossip.own_max_s


# --- against HALoS's DelayedNesterovOptimizer ---------------------------------------------

def _load_halos():
    import importlib.util
    import os
    path = os.environ.get("HALOS_OPT_REFERENCE")
    if not path:
        pytest.skip("set HALOS_OPT_REFERENCE to a copy of utnslab/halos's src/halos/opt.py to compare with it")
    spec = importlib.util.spec_from_file_location("halos_opt", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("buffer_size,c", [(1, 0.0), (4, 0.0), (4, 0.2), (3, 1 / 3)])
def test_equals_halos_delayed_nesterov_step_by_step(buffer_size, c):
    reference = _load_halos()
    gen = torch.Generator().manual_seed(2)
    theta = torch.randn(40, generator=gen)
    gradients = [torch.randn(40, generator=gen) for _ in range(11)]
    ours = als.DelayedNesterov(theta.clone(), lr=0.7, beta=0.9, buffer_size=buffer_size, c=c)
    p = torch.nn.Parameter(theta.clone())
    theirs = reference.DelayedNesterovOptimizer([p], lr=0.7, beta=0.9, c=c, buffer_size=buffer_size)
    for g in gradients:
        ours.step(g)
        p.grad = g.clone()
        theirs.step()
        torch.testing.assert_close(ours.theta, p.detach(), rtol=0, atol=1e-6)
