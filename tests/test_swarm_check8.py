"""Check 8 measured with the notes' own unit (issue 45, item 2). §8's unit is one honest
worker's share of a round: |mean of n − mean of the first n−1|, both stepped **from the
same state**. The earlier test built its n−1 reference on a server that had also warmed up
on n−1 workers, so it divided by the gap between two histories (1.48; from the same state,
on that test's data, 8.57).

Here: 4 workers, three realistic warm rounds (each worker its own batches, at the server's
current weights, through its own error feedback), then one measured round stepped from one
copy of that state: 4 honest uploads; 3 honest + a liar. A liar in the swarm's format sends
top-k's count of ±1e-4 per tensor, at random places or aimed at the entries where AdamW's v
is smallest (a white-box upper bound: a real member sees no v). The controls remove check 8
only: the dense ±1e-4 upload, and 5x top-k's count, on a server that takes any format.

[measured, seeds 0-4] random 2.54-3.08, smallest v 2.58-3.13, own top-k flipped 1.13-1.22;
without check 8: dense 23.4-29.1, 5x count 5.32-6.56; median and trimmed mean against the
smallest-v liar 1.12-1.41. So check 8 cuts the tiny liar by about 9x but does not keep it
within 2 honest units; the notes (§6.3 check 8, §8.6) quote these ranges.
"""

import copy
from dataclasses import replace

import pytest
import torch

from conftest import SWEEP_TIER
from lecture01.tiny_gpt import get_batch, lm_loss, load_world_tokens, make_model
from lecture09.compress import compression as c
from lecture09.compress.compression_schemes import topk_count
from lecture09.lecture_model import MODEL_CONFIG
from lecture09.swarm.swarm_protocol import ServerConfig, Upload
from lecture09.swarm.swarm_server import ParameterServer

N, WARM, RATIO = 4, 3, 0.01
SWARM = ServerConfig(steps=100, compression="topk", topk_ratio=RATIO)   # code 6's defaults: mean, top-k 0.01
OLD_CLAIM_UNITS = 2.0         # what the notes said check 8 kept a liar within
QUOTED_MAX_UNITS = 3.13       # the largest of the 5 seeds, as the notes quote it
TOLERANCE = 0.5               # CPU and torch versions move these figures a little


@pytest.fixture(scope="module")
def train_tokens():
    return load_world_tokens()[0]


def flat(server):
    return torch.cat([p.detach().reshape(-1).clone() for p in server.params.values()])


def grads_at(server, gen, train):
    model = make_model(MODEL_CONFIG, seed=0)
    model.load_state_dict({name: p.detach() for name, p in server.params.items()})
    x, y = get_batch(train, 8, MODEL_CONFIG.block_size, gen)
    lm_loss(model, x, y).backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def warmed(seed, config, train):
    """A server after WARM realistic rounds, and the N honest bodies of the measured round."""
    server = ParameterServer(replace(config, world_size=N))
    gens = [torch.Generator().manual_seed(seed * 100 + k) for k in range(N)]
    feedback = [c.PayloadErrorFeedback() for _ in range(N)]
    for _ in range(WARM):
        for k in range(N):
            body = c.payload_to_bytes(feedback[k].propose(grads_at(server, gens[k], train), "topk", RATIO))
            feedback[k].commit()
            server.submit(Upload(f"w{k}", server.version, "topk", 3.0), body)
    honest = []
    for k in range(N):
        honest.append(c.payload_to_bytes(feedback[k].propose(grads_at(server, gens[k], train), "topk", RATIO)))
        feedback[k].rollback()
    server.close()
    return server, honest


def stepped(state, config, bodies, last_mode="topk"):
    """Weights after one round of `bodies` minus before it, from a copy of `state`'s weights,
    AdamW state and version: every measured round starts from the same state."""
    server = ParameterServer(replace(config, world_size=len(bodies)))
    with torch.no_grad():
        for name, p in server.params.items():
            p.copy_(state.params[name])
    server.optimizer.load_state_dict(copy.deepcopy(state.optimizer.state_dict()))
    server.version = state.version
    server.seen = {f"w{k}": server.version for k in range(len(bodies))}   # the round waits for all
    before = flat(server)
    for k, body in enumerate(bodies):
        server.submit(Upload(f"w{k}", server.version, last_mode if k == len(bodies) - 1 else "topk", 3.0), body)
    server.close()
    assert server.round == {} and server.version == state.version + 1
    return flat(server) - before


def liar_body(state, kind, seed):
    gen = torch.Generator().manual_seed(7 + seed)
    payload = {}
    for name, shape in state.shapes.items():
        if kind == "dense":
            payload[name] = (torch.randint(0, 2, shape, generator=gen).float() * 2 - 1) * 1e-4
            continue
        k = topk_count(shape.numel(), 5 * RATIO if kind == "random-5x" else RATIO)
        if kind == "smallest-v":   # where AdamW divides by the smallest sqrt(v)
            v = state.optimizer.state[state.params[name]]["exp_avg_sq"].reshape(-1)
            index = torch.argsort(v)[:k]
        else:
            index = torch.randperm(shape.numel(), generator=gen)[:k]
        payload[name + "::idx"] = index.to(torch.int64)
        payload[name + "::val"] = (torch.randint(0, 2, (k,), generator=gen).float() * 2 - 1) * 1e-4
    return c.payload_to_bytes(payload)


def influences(seed, train):
    state, honest = warmed(seed, SWARM, train)
    full = stepped(state, SWARM, honest)
    unit = float((full - stepped(state, SWARM, honest[:N - 1])).double().norm())   # the notes' unit
    out = {}
    for kind in ("random", "smallest-v"):
        out[kind] = float((stepped(state, SWARM, honest[:N - 1] + [liar_body(state, kind, seed)])
                           - full).double().norm()) / unit
    any_format = replace(SWARM, compression=None)     # the control: check 8 removed, nothing else
    for kind, mode in (("dense", "none"), ("random-5x", "topk")):
        out[kind] = float((stepped(state, any_format, honest[:N - 1] + [liar_body(state, kind, seed)], mode)
                           - full).double().norm()) / unit
    median = replace(SWARM, aggregator="median", byzantine=1)
    out["median"] = float((stepped(state, median, honest[:N - 1] + [liar_body(state, "smallest-v", seed)])
                           - stepped(state, median, honest)).double().norm()) / unit
    return out


@pytest.mark.parametrize("seed", [0] + [pytest.param(s, marks=SWEEP_TIER) for s in (1, 2, 3, 4)])
def test_check_8_in_the_notes_unit_from_the_same_state(train_tokens, seed):
    got = influences(seed, train_tokens)
    # the old claim does not hold: an aimed liar passes check 8 and moves more than 2 units
    assert got["smallest-v"] > OLD_CLAIM_UNITS, got
    assert got["smallest-v"] < QUOTED_MAX_UNITS + TOLERANCE and got["random"] < QUOTED_MAX_UNITS + TOLERANCE, got
    # what check 8 buys: the same liar with every entry, or 5x the entries, moves far more
    assert got["dense"] > 5 * got["smallest-v"] and got["random-5x"] > 1.5 * got["random"], got
    # median holds the aimed liar near one unit
    assert got["median"] <= OLD_CLAIM_UNITS, got


def test_the_earlier_figure_on_its_own_data_from_the_same_state():
    """The earlier test's data (5 bodies at the first weights, three identical warm rounds):
    1.48 with its unit, 8.57 with the notes' unit from the same state (quoted in §8.6)."""
    from test_swarm_byzantine import honest_bodies, tiny_topk_body
    honest = honest_bodies(5)
    server = ParameterServer(replace(SWARM, world_size=N))
    for _ in range(WARM):
        for k, body in enumerate(honest[:N]):
            server.submit(Upload(f"w{k}", server.version, "topk", 3.0), body)
    server.close()
    full = stepped(server, SWARM, honest[:N])
    unit = float((full - stepped(server, SWARM, honest[:N - 1])).double().norm())
    attacked = stepped(server, SWARM, honest[:N - 1] + [tiny_topk_body(server.shapes, RATIO)])
    assert float((attacked - full).double().norm()) / unit == pytest.approx(8.57, abs=TOLERANCE)
