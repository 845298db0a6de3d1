"""Gossip local SGD: every H steps each worker averages its model with one random peer, not
with everyone (NoLoCo's communication pattern, Kolehmainen et al. 2025; lecture 9, §11.6;
code 11, demo 5).

Each of W workers keeps its own model and its own inner AdamW and takes H inner steps on
its own slice of every batch (local_sgd.inner_step, as DiLoCo). Then, with mode

  "all"     every worker's model becomes the mean of all W (one all-reduce: local SGD,
            DiLoCo with outer lr 1 and no momentum), and
  "gossip"  a random perfect matching pairs the workers (one left alone when W is odd) and
            each pair's two models become their mean: θ_a, θ_b ← (θ_a + θ_b) / 2.

There is no outer optimizer in either mode: NoLoCo's own outer step (a Nesterov variant
with a term that keeps the replicas from drifting apart) is not reproduced here. With W = 2 the one pair is
everyone, and the two modes are the same computation (a test checks it bit for bit).

The model evaluated at the end is the mean of the W replicas (in "all" they are equal after
the last exchange; in "gossip" taking the mean is one more all-reduce, not counted in the
bytes). How far the replicas are apart is their relative spread
sqrt(mean_w ||θ_w − θ̄||²) / ||θ̄||, measured just before and just after every exchange.

Bytes per step are counted as DiLoCo's rows count theirs (local_sgd; code 7's table (c)):
one encoded fp32 copy per worker per exchange, its whole model, 4 bytes per parameter, in
either mode; / H, with one more exchange at the end when H does not divide the steps (as
local_sgd). What differs is how that copy travels: gossip sends it to one peer; an
all-reduce on a ring makes every worker send 2(W − 1)/W of it, for the full average and
DiLoCo alike (ring_bytes_per_exchange; table (j) prices both on demo 1's network).
"""

import copy
import dataclasses
import math
import time

import torch

from lecture09.compress import run_progress
from lecture09.compress import training as engine
from lecture09.compress.local_sgd import inner_step

FP32 = 4
MODES = ("all", "gossip")


def matching(n_workers, generator):
    """A random perfect matching of range(n_workers): a list of pairs (a, b); with an odd
    number of workers, one of them is in no pair."""
    order = torch.randperm(n_workers, generator=generator).tolist()
    return [(order[i], order[i + 1]) for i in range(0, n_workers - 1, 2)]


def spread(vectors):
    """sqrt(mean_w ||v_w − v̄||²) / ||v̄||: 0 when every replica is the same."""
    mean = _mean(vectors)
    square = sum(float((v - mean).pow(2).sum()) for v in vectors) / len(vectors)
    return math.sqrt(square) / float(mean.norm())


def _mean(vectors):
    total = vectors[0].clone()
    for v in vectors[1:]:
        total += v
    return total / len(vectors)


@torch.no_grad()
def _load(model, vector):
    """Copy a flat vector into the model's parameters (into their own storage: PyTorch's
    vector_to_parameters would make them views of the vector, and a pair sharing one mean
    would then share its parameters)."""
    offset = 0
    for p in model.parameters():
        p.copy_(vector[offset:offset + p.numel()].view_as(p))
        offset += p.numel()


def exchange(vectors, mode, generator):
    """The vectors after one exchange (new tensors; the inputs are left alone)."""
    if mode == "all":
        mean = _mean(vectors)
        return [mean.clone() for _ in vectors]
    out = [v.clone() for v in vectors]
    for a, b in matching(len(vectors), generator):
        out[a] = out[b] = _mean([vectors[a], vectors[b]])
    return out


def bytes_per_exchange(mode):
    """Bytes per parameter of one worker's message in one exchange: its model in fp32, in
    either mode (DiLoCo's rows count one encoded pseudo-gradient the same way)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return FP32


def ring_bytes_per_exchange(n_workers):
    """Bytes per parameter each worker sends when that message is all-reduced on a ring
    (§1): 2(W − 1)/W × 4; a gossip pair sends its message once."""
    return 2 * (n_workers - 1) / n_workers * FP32


def train(run, seeds, setup):
    """Train setup.model with run.param = (H, mode); a RunResult whose spread is (mean spread
    just before an exchange, mean spread just after), over the exchanges."""
    from lecture01 import tiny_gpt

    tiny_gpt.use_deterministic_threads()
    started = time.perf_counter()
    h, mode = run.param
    train_data, val_data = engine.world_tokens(setup.world_seed)
    r, n_workers = setup.recipe, setup.n_workers
    first = tiny_gpt.make_model(setup.model, seed=seeds.model)
    workers = [copy.deepcopy(first) for _ in range(n_workers)]
    inner = [tiny_gpt.make_adamw(w, r) for w in workers]
    gen = torch.Generator().manual_seed(seeds.data)
    pairs_gen = torch.Generator().manual_seed(seeds.data + 1)     # the matchings: their own stream
    losses, exchanges, before, after, diverged = [], 0, [], [], False
    for step in range(r.steps):
        lr = tiny_gpt.lr_at(step, r.steps, r.peak_lr)
        x, y = tiny_gpt.get_batch(train_data, r.batch_size, first.config.block_size, gen)
        loss_sum = inner_step(workers, inner, x, y, lr, r.clip_norm, setup.precision == "bf16")
        if not math.isfinite(loss_sum):
            diverged = True
            break
        losses.append(loss_sum / n_workers)
        run_progress.step_done(step + 1)
        if (step + 1) % h and step + 1 < r.steps:
            continue
        vectors = [torch.nn.utils.parameters_to_vector(m.parameters()).detach() for m in workers]
        before.append(spread(vectors))
        vectors = exchange(vectors, mode, pairs_gen)
        after.append(spread(vectors))
        exchanges += 1
        for model, v in zip(workers, vectors):
            _load(model, v)
    final = copy.deepcopy(workers[0])
    _load(final, _mean([torch.nn.utils.parameters_to_vector(m.parameters()).detach() for m in workers]))
    n = final.n_params()
    result = engine.finish_run(run, seeds, final, val_data, started, diverged,
                               bytes_per_exchange(mode) * n * exchanges / max(1, len(losses)),
                               len(losses), losses=losses)
    mean = (lambda xs: sum(xs) / len(xs) if xs else float("nan"))
    return dataclasses.replace(result, spread=(mean(before), mean(after)))
