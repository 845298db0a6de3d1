"""Data parallelism with compressed gradients, simulated in one process: the engine of
code 5's demo 2, and the paired comparisons that read its results.

Introduced in lecture 9 (notes: lectures/lecture09_distributed_training.md §7.6-§7.8).

One training run (`train_run`) splits each batch across n simulated workers; each worker
computes its own gradient, compresses it (a scheme of compression_schemes.SCHEMES, optionally
with its own error-feedback memory) and "sends" it; the optimizer steps on the average of what
arrived. With scheme "none" that average is the gradient of the whole batch.

A trained figure (bits per character) moves with the seed and with the CPU, so a row is
read as a paired difference (配对差 paired difference): its bits per character minus the
uncompressed run of the same optimizer at the same seeds (same initial weights, same data
order), one thing changed. `verdict` turns a row's differences over one or more seeds
into words, against a stated tolerance.
"""

import math
import multiprocessing
import os
import signal
import statistics
import time
from dataclasses import dataclass, replace

import torch

from lecture01 import tiny_gpt
from lecture09.compress import run_progress
from lecture09.compress.compression import SCHEMES, Options, Residuals, parts_bytes
from lecture09.lecture_model import MODEL_CONFIG
from lecture09.compress.powersgd import PowerSGD

OPTIMIZERS = ("adamw", "sgd")

# A paired difference smaller than this (bits per character) is called "about the same".
# Measured (3 seeds x 2 precisions, notes §7.7): fp16 - none stayed within 0.001 and
# int8 - none within 0.005, while the effects the notes discuss are 0.05 or more.
DELTA_TOLERANCE_BPC = 0.01


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

    @property
    def key(self):
        """How observations find a row: never by its position in a table."""
        base = (self.optimizer, self.scheme, self.error_feedback)
        return base if self.param is None else base + (self.param,)

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
                                      # hurt top-k (lr 0.1) or the run without it was unstable (lr 0.3): notes §7.7
    topk_ratio: float = 0.01
    block_size: int = Options.block_size   # int8-block: entries per scale
    outer_lr: float = 0.7             # DiLoCo's outer SGD (OpenDiLoCo's values)
    outer_momentum: float = 0.9       # Nesterov; 0 = no momentum (then outer lr 1 is plain model averaging)
    onebit_warmup: float = 0.2        # 1-bit Adam: fraction of the steps of plain AdamW before v freezes (paper: 15-25%)
    precision: str = "fp32"           # "bf16" or "fp32" forward (tiny_gpt.resolve_precision)
    world_seed: int = 0
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


def make_aggregator(run, setup):
    """What the workers' gradients go through for this row: a collective scheme of its own
    (COLLECTIVE_SCHEMES, e.g. PowerSGD) or the registry's per-worker schemes."""
    if run.scheme in COLLECTIVE_SCHEMES:
        return COLLECTIVE_SCHEMES[run.scheme](run, setup)
    return WorkerCompression(run.scheme, setup.n_workers, run.error_feedback, setup.options)


def worker_gradients(model, x, y, n_workers, bf16=False):
    """([one (n,) flat gradient per worker], sum of their losses): the batch x, y (B, T)
    split into n_workers equal slices, one backward each."""
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


def _variant(name):
    """Training loops of their own (the optimizer itself talks less): Run.optimizer -> train."""
    from lecture09.compress import local_sgd, onebit_adam
    return {"onebit-adam": lambda run, seeds, setup: onebit_adam.train(run, seeds, setup, compress=True),
            "adamw-frozen-v": lambda run, seeds, setup: onebit_adam.train(run, seeds, setup, compress=False),
            "diloco": local_sgd.train}.get(name)


def train_run(run, seeds, setup):
    """Train setup.model from scratch with compressed worker gradients; a RunResult."""
    if setup.backend == "gloo":
        from lecture09.compress import gloo_dp
        return gloo_dp.train_run(run, seeds, setup)
    variant = _variant(run.optimizer)
    if variant is not None:
        return variant(run, seeds, setup)
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


def _train_job(job):
    slot, run, seeds, setup = job
    run_progress.start_run(slot)
    return train_run(run, seeds, setup)


# Training workers run at a lower CPU priority (Unix niceness +10). A script that trains
# in the background while it computes something the class is reading now (05: demo 1's
# search) keeps that in front: on 2 cores, with two workers beside it, demo 1's search took
# 11-12 s instead of 7.5 s. The training itself loses nothing once the parent waits.
WORKER_NICENESS = 10


def _start_worker(steps_done):
    """Pool initializer: report progress into `steps_done`, at a lower CPU priority."""
    run_progress.attach(steps_done)
    if hasattr(os, "nice"):   # not on Windows; there the workers keep normal priority
        os.nice(WORKER_NICENESS)


def start_training(jobs, n_processes):
    """Train (run, seeds, setup) jobs; an iterator of RunResults in the order of `jobs`.

    With n_processes > 1 they train in that many spawned processes (each starts clean with
    one torch thread); the results do not depend on n_processes. Returns (pool, iterator);
    the caller terminates the pool (None when training in this process)."""
    jobs = [(slot, *job) for slot, job in enumerate(jobs)]
    steps_per_run = max(setup.recipe.steps for _, _, _, setup in jobs) if jobs else 0
    # gloo ranks are processes of their own, which a pool's (daemonic) worker may not start
    if n_processes <= 1 or len(jobs) <= 1 or any(setup.backend == "gloo" for _, _, _, setup in jobs):
        steps_done = [0] * len(jobs)
        return None, run_progress.ShownProgress(map(_train_job, jobs), steps_done, steps_per_run, polled=False)
    # Ctrl-C reaches the whole process group, but only the parent should answer it (one
    # line, then it terminates the pool); a child would print a traceback. An ignored
    # signal stays ignored across exec, so children spawned meanwhile never see it.
    context = multiprocessing.get_context("spawn")
    steps_done = context.Array("i", len(jobs), lock=False)     # one slot per run; progress only
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        pool = context.Pool(min(n_processes, len(jobs)), initializer=_start_worker, initargs=(steps_done,))
    finally:
        signal.signal(signal.SIGINT, previous)
    return pool, run_progress.ShownProgress(pool.imap(_train_job, jobs), steps_done, steps_per_run, polled=True)


# ---------------------------------------------------------------------------
# Reading the results: paired differences over seeds
# ---------------------------------------------------------------------------

def paired_deltas(results, baselines):
    """Per seed, bits per char of a row minus its baseline's at the same seeds.

    results, baselines: lists of RunResult in the same seed order. A diverged row gives
    +inf (infinitely worse); a diverged baseline gives nan (nothing to compare with)."""
    deltas = []
    for r, b in zip(results, baselines, strict=True):
        if r.seeds != b.seeds:
            raise ValueError(f"unpaired results: seeds {r.seeds} vs {b.seeds}")
        if b.diverged:
            deltas.append(float("nan"))
        else:
            deltas.append(math.inf if r.diverged else r.bpc - b.bpc)
    return deltas


def verdict(deltas, tolerance=DELTA_TOLERANCE_BPC):
    """Words for paired differences over one or more seeds (positive = worse).

    "same": every |Δ| <= tolerance; "worse" / "better": every Δ beyond the tolerance on
    the same side; "unclear": the seeds disagree, or a baseline diverged. With one seed
    this is the tolerance test; with more, a claim must hold on every seed."""
    if not deltas or any(math.isnan(d) for d in deltas):
        return "unclear"
    if all(abs(d) <= tolerance for d in deltas):
        return "same"
    if all(d > tolerance for d in deltas):
        return "worse"
    if all(d < -tolerance for d in deltas):
        return "better"
    return "unclear"


@dataclass(frozen=True)
class Spread:
    """Mean and range of a figure over seeds (finite values only)."""
    mean: float
    low: float
    high: float
    n: int          # finite values behind the figures
    n_total: int

    @classmethod
    def of(cls, values):
        values = list(values)
        finite = [v for v in values if math.isfinite(v)]
        if not finite:
            return cls(math.nan, math.nan, math.nan, 0, len(values))
        return cls(statistics.fmean(finite), min(finite), max(finite), len(finite), len(values))
