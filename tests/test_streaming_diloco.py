"""Streaming DiLoCo (compress/streaming_diloco.py): the schedule and the fragments by hand,
one fragment with τ = 0 bit-equal to local_sgd's DiLoCo, bytes counted against the
formula, and the whole run against torchft's own DiLoCo class sync by sync (its replicas
as threads of this process, averaging through a stand-in for torchft's Manager)."""

import threading

import pytest
import torch

from lecture09.compress import local_sgd
from lecture09.compress import streaming_diloco as sd
from lecture09.compress.training import Run, Seeds, TrainSetup


def test_the_schedule_is_torchfts_by_hand():
    # H = 6, F = 3: one fragment every 2 steps, in turn; τ = 1 sends one step before the sync
    assert sd.sync_events(12, 6, 3, 1) == [(1, 2, 0), (3, 4, 1), (5, 6, 2), (7, 8, 0), (9, 10, 1), (11, 12, 2)]
    assert sd.sync_events(5, 4, 1, 0) == [(4, 4, 0)]                 # plain DiLoCo: every H steps
    for bad in ((6, 4, 0), (3, 6, 0), (6, 3, 2), (6, 3, -1)):
        with pytest.raises(ValueError):
            sd.check_schedule(*bad)


def test_fragments_by_hand():
    assert sd.fragment_ranges([10], 3) == [(0, 3), (3, 7), (7, 10)]
    assert sd.fragment_ranges([4, 4, 1, 1, 6], 2, whole_tensors=True) == [(0, 8), (8, 16)]
    assert sd.fragment_ranges([1, 1, 20], 3, whole_tensors=True) == [(0, 1), (1, 2), (2, 22)]   # never empty
    with pytest.raises(ValueError):
        sd.fragment_ranges([5, 5], 3, whole_tensors=True)


SETUP = TrainSetup().with_steps(12)


def test_one_fragment_without_overlap_is_local_sgds_diloco_bit_for_bit():
    plain = local_sgd.train(Run("d", "diloco", "none", param=6), Seeds(), SETUP)
    streaming = sd.train(Run("s", "streaming-diloco", "none", param=(6, 1, 0)), Seeds(), SETUP)
    assert streaming.bpc == plain.bpc and streaming.bytes_per_element == plain.bytes_per_element


@pytest.mark.parametrize("scheme,bytes_of", [("none", lambda n: 4 * n),
                                             ("int4-block", lambda n: -(-n // 2) + 4 * -(-n // 256))])
def test_mean_and_peak_bytes_are_the_encoded_fragments(scheme, bytes_of):
    result = sd.train(Run("s", "streaming-diloco", scheme, param=(6, 3, 1)), Seeds(), SETUP)
    n = 83_468
    ranges = sd.fragment_ranges([n], 3)
    sizes = [b - a for a, b in ranges]
    assert result.peak_bytes_per_element == max(bytes_of(s) for s in sizes) / n
    sent = [bytes_of(sizes[k]) for _, _, k in sd.sync_events(12, 6, 3, 1)]
    assert result.bytes_per_element == pytest.approx(sum(sent) / 12 / n, rel=1e-12)


# --- against torchft ---------------------------------------------------------------

class _Hub:
    """What the replicas' allreduces meet at: each call, every replica's tensor, averaged."""

    def __init__(self, n):
        self.n, self.barrier, self.slots, self.lock = n, threading.Barrier(n, timeout=60), {}, threading.Lock()


class _Work:
    def __init__(self, hub, key, tensor):
        self.hub, self.key, self.tensor = hub, key, tensor

    def wait(self, timeout=None):
        self.hub.barrier.wait()
        by_replica = self.hub.slots[self.key]
        total = by_replica[0]
        for w in range(1, self.hub.n):          # replica order, as the simulation adds its workers
            total = total + by_replica[w]
        self.tensor.copy_(total / self.hub.n)
        return True


class _Manager:
    """The part of torchft.Manager that torchft.local_sgd.DiLoCo calls, for replicas that
    never fail: every quorum has all of them and every step commits."""
    _use_async_quorum = False

    def __init__(self, hub, replica):
        self.hub, self.replica, self.step, self.calls = hub, replica, 0, 0

    def start_quorum(self, *args, **kwargs):
        pass

    def current_step(self):
        return self.step

    def should_commit(self, *args, **kwargs):
        self.step += 1
        return True

    def num_participants(self):
        return self.hub.n

    def allreduce(self, tensor, should_quantize=False, **kwargs):
        key, self.calls = self.calls, self.calls + 1
        with self.hub.lock:
            self.hub.slots.setdefault(key, {})[self.replica] = tensor.detach().clone()
        return _Work(self.hub, key, tensor)

    def register_state_dict_fn(self, *args, **kwargs):
        pass

    def allow_state_dict_read(self):
        pass

    def disallow_state_dict_read(self):
        pass


def _torchft_replica(w, setup, h_total, n_fragments, delay, seeds, hub, out):
    from torchft.local_sgd import DiLoCo
    from lecture01 import tiny_gpt
    from lecture09.compress.training import world_tokens

    r = setup.recipe
    train_data, _ = world_tokens(setup.world_seed)
    model = tiny_gpt.make_model(setup.model, seed=seeds.model)
    params = list(model.parameters())
    ranges = sd.fragment_ranges([p.numel() for p in params], n_fragments, whole_tensors=True)
    fragments, start = [], 0
    for a, b in ranges:
        holder = torch.nn.Module()
        while start < len(params) and sum(p.numel() for p in params[:start]) < b:
            holder.register_parameter(f"p{start}", params[start])
            start += 1
        fragments.append(holder)
    inner = tiny_gpt.make_adamw(model, r)
    # one outer optimizer per fragment, as code 9 does: a single one over the whole model would
    # also step the other fragments with the inner gradients still on them at each sync
    outer = [torch.optim.SGD(f.parameters(), lr=setup.outer_lr, momentum=setup.outer_momentum,
                             nesterov=setup.outer_momentum > 0) for f in fragments]
    manager = _Manager(hub, w)
    gen = torch.Generator().manual_seed(seeds.data)
    per = r.batch_size // setup.n_workers
    record = []
    with DiLoCo(manager, fragments, inner, outer, sync_every=h_total, fragment_sync_delay=delay,
                fragment_update_alpha=setup.fragment_alpha) as diloco:
        for step in range(r.steps):
            for group in inner.param_groups:
                group["lr"] = tiny_gpt.lr_at(step, r.steps, r.peak_lr)
            x, y = tiny_gpt.get_batch(train_data, r.batch_size, setup.model.block_size, gen)
            inner.zero_grad(set_to_none=True)
            tiny_gpt.lm_loss(model, x[w * per:(w + 1) * per], y[w * per:(w + 1) * per]).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), r.clip_norm)
            before = manager.step
            inner.step()                                  # DiLoCo's hook sends and syncs in here
            if manager.step != before:
                record.append(torch.cat([t.reshape(-1) for f in diloco._fragments
                                         for t in f.original_parameters.values()]).clone())
    out[w] = record


@pytest.mark.parametrize("h_total,n_fragments,delay,alpha", [(6, 2, 0, 0.0), (6, 3, 1, 0.0), (6, 2, 1, 0.5)])
def test_every_sync_equals_torchfts_diloco(h_total, n_fragments, delay, alpha):
    pytest.importorskip("torchft", reason="torchft ships wheels for Linux only (requirements.txt)")
    from dataclasses import replace
    setup = replace(TrainSetup(), fragment_alpha=alpha).with_steps(12)
    ours = []
    sd.train(Run("s", "streaming-diloco", "none", param=(h_total, n_fragments, delay)), Seeds(), setup,
             whole_tensors=True, record=ours)
    hub, out = _Hub(setup.n_workers), {}
    threads = [threading.Thread(target=_torchft_replica, args=(w, setup, h_total, n_fragments, delay, Seeds(),
                                                              hub, out)) for w in range(setup.n_workers)]
    threads_before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        torch.set_num_threads(threads_before)
    assert len(out) == setup.n_workers, "a torchft replica thread did not finish"
    for w in range(setup.n_workers):
        assert len(out[w]) == len(ours) == 12 // (h_total // n_fragments)
        for theirs, mine in zip(out[w], ours):
            # bit-equal: the same additions in the same order (replica order, torch.lerp for α)
            torch.testing.assert_close(theirs, mine, atol=0, rtol=0)
