"""The training engine every compressed-gradient run shares: one run's settings (Run,
Seeds, TrainSetup), n simulated workers that each compute, compress and send a gradient,
the optimizer that steps on what arrived, and the RunResult it ends with.

Introduced in lecture 9 (notes §5.6-§5.8). compressed_dp runs it (and the training loops of
their own: onebit_adam, local_sgd, and gloo_dp on real ranks, which build on this module)
and pairs the results; nothing here imports those, so the engine has no import cycle.
"""

import math
import time
from dataclasses import dataclass, replace

import torch

from lecture01 import tiny_gpt
from lecture09.compress import run_progress
from lecture09.compress.compression import SCHEMES, Options, Residuals, parts_bytes
from lecture09.lecture_model import MODEL_CONFIG
from lecture09.compress.powersgd import PowerSGD

OPTIMIZERS = ("adamw", "sgd")

# A paired difference smaller than DELTA_TOLERANCE_BPC (bits per character; verdicts.py) is
# called "about the same". Measured (3 seeds x 2 precisions, notes §5.7): fp16 - none stayed
# within 0.001 and int8 - none within 0.005, while the effects the notes discuss are 0.05 or more.
from lecture09.compress.verdicts import DELTA_TOLERANCE_BPC  # noqa: E402,F401


@dataclass(frozen=True)
class Seeds:
    """What makes one training run differ from another with the same settings."""
    model: int = 0      # tiny_gpt.make_model's seed: the initial weights
    data: int = 1       # the generator that draws batches: the data order

    def shifted(self, k):
        """The k-th seed pair of a --seeds sweep: both seeds moved by k."""
        return Seeds(self.model + k, self.data + k)


@dataclass(frozen=True)
class Run:
    """One row of demo 2: an optimizer, a compression scheme, error feedback or not."""
    label: str
    optimizer: str        # OPTIMIZERS: "adamw" (lecture 1's recipe, clipped) or "sgd" (momentum, no clipping)
    scheme: str           # compression_schemes.SCHEMES or COLLECTIVE_SCHEMES
    error_feedback: bool = False
    param: int = None     # a collective scheme's knob: PowerSGD's rank
    aggregator: str = "mean"   # robust.aggregators.AGGREGATORS: how the receiver combines uploads
    attack: str = "none"       # robust.attacks.ATTACKS: what the liars send
    liars: int = 0             # how many workers lie (the last ones); also the aggregator's f

    @property
    def robust(self):
        """A row of code 08: not today's plain mean of honest workers."""
        return self.aggregator != "mean" or self.liars > 0

    @property
    def key(self):
        """How observations find a row: never by its position in a table."""
        base = (self.optimizer, self.scheme, self.error_feedback)
        base = base if self.param is None else base + (self.param,)
        return base + (self.aggregator, self.attack, self.liars) if self.robust else base

    @property
    def baseline_key(self):
        """The uncompressed run this row is compared with (same optimizer)."""
        return (self.optimizer, "none", False)


@dataclass(frozen=True)
class TrainSetup:
    """Everything a run needs besides its row and its seeds."""
    recipe: tiny_gpt.TrainConfig = tiny_gpt.TrainConfig()   # lecture 1's recipe: steps, global batch
    #                                 (8 sequences per worker), AdamW lr / decay / betas, clipping after aggregation
    model: tiny_gpt.GPTConfig = MODEL_CONFIG
    n_workers: int = 4
    sgd_lr: float = 0.3               # plain SGD: top-k without EF spread 0.03 over 5 seeds here; at 0.5, 0.67; 1.0 diverged
    sgd_momentum: float = 0.0         # no momentum: EF-SGD's setting. With momentum 0.9, error feedback
                                      # hurt top-k (lr 0.1) or the run without it was unstable (lr 0.3): notes §5.7
    topk_ratio: float = 0.01
    block_size: int = Options.block_size   # int8-block: entries per scale
    outer_lr: float = 0.7             # DiLoCo's outer SGD (OpenDiLoCo's values)
    outer_momentum: float = 0.9       # Nesterov; 0 = no momentum (then outer lr 1 is plain model averaging)
    fragment_alpha: float = 0.0       # Streaming DiLoCo: a synced fragment keeps α of the worker's own
                                      # progress (torchft's fragment_update_alpha; its default 0)
    final_sync: bool = False          # Streaming DiLoCo: every fragment syncs once more after the last step
    demo_lr: float = 6e-3             # DeMo's sign-SGD peak lr on lecture 1's schedule: the best of
                                      # {3e-4, 1e-3, 3e-3, 6e-3, 1e-2} at seed pair (0, 1), and of
                                      # {1e-3, 3e-3, 6e-3, 1e-2} at (0, 1) and (1, 2), fp32 (notes §11.4)
    demo_decay: float = 0.999         # DeMo's momentum decay β (demo.py's compression_decay default)
    demo_weight_decay: float = 0.0    # DeMo's decoupled weight decay λ (demo.py's default)
    sparseloco_lr: float = 1.0        # SparseLoCo's outer lr α (θ ← θ − α · mean of what arrived)
    sparseloco_decay: float = 0.95    # SparseLoCo's error-feedback decay β (e ← β e + Δ)
    onebit_warmup: float = 0.2        # 1-bit Adam: fraction of the steps of plain AdamW before v freezes (paper: 15-25%)
    precision: str = "fp32"           # "bf16" or "fp32" forward (tiny_gpt.resolve_precision)
    world_seed: int = 0
    bucket: int = 0                   # code 08: bucketing (s > 1) before the robust aggregator
    cc_tau: float = 1.0               # code 08: centered clipping's radius
    worker_momentum: float = 0.0      # code 08: beta > 0: each worker sends its momentum (Karimireddy et al.
                                      # 2021), and the receiver's AdamW keeps none of its own (beta1 = 0)
    backend: str = "sim"              # "sim": workers simulated in one process; "gloo": real ranks (gloo_dp.py)

    @property
    def steps(self):
        return self.recipe.steps

    def with_steps(self, steps):
        return replace(self, recipe=replace(self.recipe, steps=steps))

    @property
    def options(self):
        return Options(topk_ratio=self.topk_ratio, block_size=self.block_size)


@dataclass(frozen=True)
class RunResult:
    run: Run
    seeds: Seeds
    bpc: float                  # validation bits per character; nan if training diverged
    bytes_per_element: float    # wire bytes per gradient entry, per worker per step (exact)
    zeroed_fraction: float      # entries that reached the receiver as 0 although they were not
    diverged: bool              # a training loss became NaN or infinite
    steps_done: int             # < setup.steps when training stopped at the divergence
    seconds: float
    losses: tuple = ()          # training loss per step (the loss-curve chart)
    peak_bytes_per_element: float = None   # the most one worker sends in one step (streaming_diloco)
    spread: tuple = ()          # the replicas' spread before and after an exchange (gossip)
    timing: tuple = ()          # (time units to the last arrival, mean and largest staleness) (async_local_sgd)


class Diverged(Exception):
    """Raised inside a training step when the loss stops being finite."""


# Rows whose fraction of entries rounded to zero is counted and printed.
ZERO_COUNTED = ("int8", "int8-block")
# Schemes that are a collective of their own rather than one encode per worker:
# name -> make(run, setup), an object with .average(grads, shapes) like WorkerCompression's.
COLLECTIVE_SCHEMES = {"powersgd": lambda run, setup: PowerSGD(rank=run.param, error_feedback=run.error_feedback)}

_WORLD_CACHE = {}


def world_tokens(world_seed):
    """(train, val) token tensors, built once per process."""
    if world_seed not in _WORLD_CACHE:
        _WORLD_CACHE[world_seed] = tiny_gpt.load_world_tokens(world_seed)
    return _WORLD_CACHE[world_seed]


class WorkerCompression:
    """Each worker compresses its own gradient, with its own error-feedback memory if asked
    (compression.Residuals); the receiver averages what it decodes. Any scheme of the
    registry (compression_schemes.SCHEMES) runs through this one class."""

    def __init__(self, scheme, n_workers, error_feedback, options):
        if scheme not in SCHEMES:
            raise ValueError(f"unknown compression scheme {scheme!r}; expected one of {tuple(SCHEMES)}")
        self.scheme, self.options = SCHEMES[scheme], options
        self.memories = [Residuals() for _ in range(n_workers)] if error_feedback else None

    def send(self, worker, grad):
        """(decoded, wire_bytes) for one worker's flat gradient (n,)."""
        if self.memories is None:
            parts = self.scheme.encode(grad, self.options)
            return self.scheme.decode(parts, grad.shape, self.options), parts_bytes(parts)
        memory = self.memories[worker]
        encoded, decoded = memory.propose({"": grad}, self.scheme, self.options)
        memory.commit()
        return decoded[""], parts_bytes(encoded[""])

    def average(self, grads, shapes):
        """grads: one (n,) per worker -> (average (n,), wire bytes per worker, what each sent)."""
        sent = [self.send(w, g) for w, g in enumerate(grads)]
        total = sent[0][0].clone()
        for decoded, _ in sent[1:]:
            total.add_(decoded)
        return total / len(grads), sent[-1][1], [decoded for decoded, _ in sent]


def clip_each(vectors, cap):
    """Each (d,) vector scaled down to L2 norm `cap` if it is longer (the norm in float64)."""
    out = []
    for v in vectors:
        norm = float(v.double().norm())
        out.append(v * (cap / norm) if norm > cap else v)
    return out


class LyingWorkers:
    """Code 08's receiver: every worker compresses its gradient (WorkerCompression); the last
    run.liars of them replace what they send by the attack's vectors; every upload is
    clipped to n_workers x clip_norm, as code 6's server does (so no single upload can be
    more than clip_norm of the mean); then the robust aggregator combines them."""

    def __init__(self, run, setup, seed=0):
        from lecture09.robust import aggregators, attacks
        self.inner = WorkerCompression(run.scheme, setup.n_workers, run.error_feedback, setup.options)
        self.beta, self.momenta = setup.worker_momentum, [None] * setup.n_workers
        self.liars = run.liars
        self.attack = attacks.make(run.attack, seed=seed)
        self.combine = aggregators.make(run.aggregator, f=max(1, run.liars), bucket=setup.bucket,
                                        seed=seed, tau=setup.cc_tau)
        self.cap = setup.n_workers * (setup.recipe.clip_norm or math.inf)

    def momentum(self, worker, grad):
        """What worker sends before compression: its gradient, or with worker momentum beta
        m = beta m + (1 - beta) g (m = g at the first step)."""
        if not self.beta:
            return grad
        m = self.momenta[worker]
        self.momenta[worker] = grad.clone() if m is None else m.mul_(self.beta).add_(grad, alpha=1 - self.beta)
        return self.momenta[worker]

    def average(self, grads, shapes):
        sent = [self.inner.send(w, self.momentum(w, g)) for w, g in enumerate(grads)]
        decoded = [d for d, _ in sent]
        n_honest = len(decoded) - self.liars
        if self.liars:
            decoded = decoded[:n_honest] + self.attack(decoded[n_honest:], decoded[:n_honest])
        return self.combine(clip_each(decoded, self.cap)), sent[-1][1], decoded


def make_aggregator(run, setup):
    """What the workers' gradients go through for this row: a collective scheme of its own
    (COLLECTIVE_SCHEMES, e.g. PowerSGD), liars and a robust aggregator (code 08), or the
    registry's per-worker schemes."""
    if run.scheme in COLLECTIVE_SCHEMES:
        return COLLECTIVE_SCHEMES[run.scheme](run, setup)
    if run.robust or setup.worker_momentum:
        return LyingWorkers(run, setup)
    return WorkerCompression(run.scheme, setup.n_workers, run.error_feedback, setup.options)


def worker_gradients(model, x, y, n_workers, bf16=False):
    """([one (n,) flat gradient per worker], sum of their losses): the batch x, y (B, T)
    split into n_workers equal slices, one backward each.

    One pass per worker is also the cheapest here (issue 43; paired CPU-time medians, one torch
    thread, 2-core Xeon with AMX, shared): torch.func's vmap over the workers with shared
    weights cost +14% (bf16) to +27% (fp32) CPU, and one pass of 32 with per-worker weight
    gradients from hooks +21% to +47%; even a plain pass of 32 (no per-worker gradients at
    all) ran within -21%..+12% of the four passes of 8 from one measurement to the next."""
    params = list(model.parameters())
    per_worker = x.size(0) // n_workers
    grads, loss_sum = [], 0.0
    for w in range(n_workers):
        xs, ys = x[w * per_worker:(w + 1) * per_worker], y[w * per_worker:(w + 1) * per_worker]  # (b, T)
        for p in params:
            p.grad = None
        loss = tiny_gpt.lm_loss(model, xs, ys, bf16=bf16)
        loss.backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in params]))    # (n,) this worker's gradient
        loss_sum += loss.item()
    return grads, loss_sum


def compressed_backward(aggregator, n_workers, stats, bf16=False, count_zeros=False):
    """A `backward` for tiny_gpt.train: the batch is split across n_workers simulated
    workers; each computes its gradient; the aggregator compresses and averages them;
    p.grad becomes that average.

    stats["wire_bytes"] adds up one worker's bytes of every step; with count_zeros, stats also
    counts entries that arrived as exact zeros though the gradient was not zero (int8
    rounds small entries to zero), which costs ~1 ms a step, so only rows that print it
    ask. A non-finite loss raises Diverged: nothing after it would mean anything."""

    def backward(model, x, y):
        params = list(model.parameters())
        shapes = [p.shape for p in params]
        grads, loss_sum = worker_gradients(model, x, y, n_workers, bf16)
        average, wire_bytes, sent = aggregator.average(grads, shapes)   # (n,)
        stats["wire_bytes"] += wire_bytes
        stats["sends"] += 1
        if count_zeros and sent is not None:
            for grad, decoded in zip(grads, sent):
                stats["zeros"] += int((decoded == 0).sum()) - int((grad == 0).sum())
                stats["entries"] += grad.numel()
        if not math.isfinite(loss_sum):
            raise Diverged
        offset = 0
        for p in params:
            p.grad = average[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        return loss_sum / n_workers

    return backward


def make_optimizer(run, setup, model, seeds):
    """(TrainConfig for tiny_gpt.train, optimizer) for the row's optimizer."""
    if run.optimizer == "adamw":
        config = replace(setup.recipe, data_seed=seeds.data)
        if setup.worker_momentum:               # the momentum lives at the workers instead
            config = replace(config, beta1=0.0)
        return config, tiny_gpt.make_adamw(model, config)
    if run.optimizer == "sgd":
        config = replace(setup.recipe, peak_lr=setup.sgd_lr, clip_norm=0, data_seed=seeds.data)
        return config, torch.optim.SGD(model.parameters(), lr=setup.sgd_lr, momentum=setup.sgd_momentum)
    raise ValueError(f"unknown optimizer {run.optimizer!r}; expected one of {OPTIMIZERS}")


def finish_run(run, seeds, model, val_data, started, diverged, wire_bytes, steps_done, zeros=0, entries=0,
               losses=()):
    """The RunResult of a trained (or diverged) model."""
    bpc = float("nan") if diverged else tiny_gpt.bits_per_char(model, val_data)
    diverged = diverged or not math.isfinite(bpc)
    return RunResult(run=run, seeds=seeds, bpc=bpc if not diverged else float("nan"),
                     bytes_per_element=wire_bytes / model.n_params(),
                     zeroed_fraction=zeros / entries if entries else 0.0,
                     diverged=diverged, steps_done=steps_done,
                     seconds=time.perf_counter() - started, losses=tuple(losses))


def train_simulated(run, seeds, setup):
    """Train setup.model from scratch with compressed worker gradients, simulated in this
    process (the optimizers AdamW and SGD); a RunResult."""
    tiny_gpt.use_deterministic_threads()
    started = time.perf_counter()
    train_data, val_data = world_tokens(setup.world_seed)
    model = tiny_gpt.make_model(setup.model, seed=seeds.model)
    config, optimizer = make_optimizer(run, setup, model, seeds)
    stats = {"wire_bytes": 0, "sends": 0, "zeros": 0, "entries": 0}
    backward = compressed_backward(make_aggregator(run, setup), setup.n_workers, stats,
                                   bf16=setup.precision == "bf16", count_zeros=run.scheme in ZERO_COUNTED)
    losses = []
    try:
        tiny_gpt.train(model, train_data, config, optimizer=optimizer, backward=backward,
                       on_step=lambda step, loss: (losses.append(loss), run_progress.step_done(step + 1)))
        diverged = False
    except Diverged:
        diverged = True
    # bytes per step averaged over the steps done (PowerSGD's first steps are uncompressed)
    return finish_run(run, seeds, model, val_data, started, diverged, stats["wire_bytes"] / max(1, stats["sends"]),
                      len(losses), stats["zeros"], stats["entries"], losses)
