"""Data parallelism with compressed gradients, simulated in one process: the engine of
code 5's demo 2, and the paired comparisons that read its results.

Introduced in lecture 9 (notes: lectures/lecture09_distributed_training.md §7.6-§7.8).

One training run (`train_run`) splits each batch across n simulated workers; each worker
computes its own gradient, compresses it (compression.compress_vector, optionally with its
own error-feedback memory) and "sends" it; the optimizer steps on the average of what
arrived. With scheme "none" that average is the gradient of the whole batch.

A trained figure (bits per character) moves with the seed and with the CPU, so a row is
read as a paired difference (配对差 paired difference): its bits per character minus the
uncompressed run of the same optimizer at the same seeds (same initial weights, same data
order), one thing changed. `verdict` turns a row's differences over one or more seeds
into words, against a stated tolerance.
"""

import math
import multiprocessing
import signal
import statistics
import time
from dataclasses import dataclass

import torch

from lecture01 import tiny_gpt
from lecture09.compression import ErrorFeedback, compress_vector

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
    scheme: str           # compression.SCHEMES
    error_feedback: bool = False

    @property
    def key(self):
        """How observations find a row: never by its position in a table."""
        return (self.optimizer, self.scheme, self.error_feedback)

    @property
    def baseline_key(self):
        """The uncompressed run this row is compared with (same optimizer)."""
        return (self.optimizer, "none", False)


@dataclass(frozen=True)
class TrainSetup:
    """Everything a run needs besides its row and its seeds."""
    steps: int = 300
    n_workers: int = 4
    batch_size: int = 32              # global batch: 8 sequences per worker
    adamw_lr: float = 3e-3            # lecture 1's recipe
    weight_decay: float = 0.1
    betas: tuple = (0.9, 0.95)
    clip_norm: float = 1.0            # global clipping after aggregation
    sgd_lr: float = 0.3               # plain SGD: top-k without EF spread 0.03 over 5 seeds here; at 0.5, 0.67; 1.0 diverged
    sgd_momentum: float = 0.0         # no momentum: EF-SGD's setting. With momentum 0.9, error feedback
                                      # hurt top-k (lr 0.1) or the run without it was unstable (lr 0.3): notes §7.7
    topk_ratio: float = 0.01
    precision: str = "fp32"           # "bf16" or "fp32" forward (tiny_gpt.resolve_precision)
    world_seed: int = 0


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


class Diverged(Exception):
    """Raised inside a training step when the loss stops being finite."""


_WORLD_CACHE = {}


def world_tokens(world_seed):
    """(train, val) token tensors, built once per process."""
    if world_seed not in _WORLD_CACHE:
        _WORLD_CACHE[world_seed] = tiny_gpt.load_world_tokens(world_seed)
    return _WORLD_CACHE[world_seed]


def compressed_backward(n_workers, scheme, error_feedback, topk_ratio, stats, bf16=False, count_zeros=False):
    """A `backward` for tiny_gpt.train: the batch is split across n_workers simulated
    workers; each computes its gradient, compresses it (with its own error-feedback memory
    if asked) and sends it; p.grad becomes the average of what was received.

    stats["wire_bytes"] gets one worker's bytes per step; with count_zeros, stats also
    counts entries that arrived as exact zeros though the gradient was not zero (int8
    rounds small entries to zero), which costs ~1 ms a step, so only rows that print it
    ask. A non-finite loss raises Diverged: nothing after it would mean anything."""
    feedback = [ErrorFeedback() for _ in range(n_workers)] if error_feedback else None

    def backward(model, x, y):
        params = list(model.parameters())
        per_worker = x.size(0) // n_workers
        received = None
        loss_sum = 0.0
        for w in range(n_workers):
            xs, ys = x[w * per_worker:(w + 1) * per_worker], y[w * per_worker:(w + 1) * per_worker]  # (b, T)
            for p in params:
                p.grad = None
            loss = tiny_gpt.lm_loss(model, xs, ys, bf16=bf16)
            loss.backward()
            grad = torch.cat([p.grad.reshape(-1) for p in params])           # (n,) this worker's gradient
            if feedback is not None:
                sent, wire_bytes = feedback[w].compress(grad, scheme, topk_ratio)
            else:
                sent, wire_bytes = compress_vector(grad, scheme, topk_ratio)
            received = sent if received is None else received.add_(sent)
            loss_sum += loss.item()
            stats["wire_bytes"] = wire_bytes
            if count_zeros:
                stats["zeros"] += int((sent == 0).sum()) - int((grad == 0).sum())
                stats["entries"] += grad.numel()
        if not math.isfinite(loss_sum):
            raise Diverged
        average = received / n_workers                                           # (n,)
        offset = 0
        for p in params:
            p.grad = average[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        return loss_sum / n_workers

    return backward


def train_run(run, seeds, setup):
    """Train BASE_CONFIG from scratch with compressed worker gradients; a RunResult."""
    tiny_gpt.use_deterministic_threads()
    started = time.perf_counter()
    train_data, val_data = world_tokens(setup.world_seed)
    model = tiny_gpt.make_model(tiny_gpt.BASE_CONFIG, seed=seeds.model)
    if run.optimizer == "adamw":
        config = tiny_gpt.TrainConfig(steps=setup.steps, batch_size=setup.batch_size, peak_lr=setup.adamw_lr,
                                      weight_decay=setup.weight_decay, beta1=setup.betas[0],
                                      beta2=setup.betas[1], clip_norm=setup.clip_norm, data_seed=seeds.data)
        optimizer = tiny_gpt.make_adamw(model, config)
    elif run.optimizer == "sgd":
        config = tiny_gpt.TrainConfig(steps=setup.steps, batch_size=setup.batch_size, peak_lr=setup.sgd_lr,
                                      clip_norm=0, data_seed=seeds.data)
        optimizer = torch.optim.SGD(model.parameters(), lr=setup.sgd_lr, momentum=setup.sgd_momentum)
    else:
        raise ValueError(f"unknown optimizer {run.optimizer!r}; expected one of {OPTIMIZERS}")
    stats = {"wire_bytes": 0, "zeros": 0, "entries": 0}
    backward = compressed_backward(setup.n_workers, run.scheme, run.error_feedback, setup.topk_ratio, stats,
                                   bf16=setup.precision == "bf16", count_zeros=run.scheme == "int8")
    steps_done = []
    try:
        tiny_gpt.train(model, train_data, config, optimizer=optimizer, backward=backward,
                       on_step=lambda step, loss: steps_done.append(step))
        diverged = False
    except Diverged:
        diverged = True
    bpc = float("nan") if diverged else tiny_gpt.bits_per_char(model, val_data)
    diverged = diverged or not math.isfinite(bpc)
    return RunResult(run=run, seeds=seeds, bpc=bpc if not diverged else float("nan"),
                     bytes_per_element=stats["wire_bytes"] / model.n_params(),
                     zeroed_fraction=stats["zeros"] / stats["entries"] if stats["entries"] else 0.0,
                     diverged=diverged, steps_done=len(steps_done),
                     seconds=time.perf_counter() - started)


def _train_job(job):
    run, seeds, setup = job
    return train_run(run, seeds, setup)


def start_training(jobs, n_processes):
    """Train (run, seeds, setup) jobs; an iterator of RunResults in the order of `jobs`.

    With n_processes > 1 they train in that many spawned processes (each starts clean with
    one torch thread); the results do not depend on n_processes. Returns (pool, iterator);
    the caller terminates the pool (None when training in this process)."""
    jobs = list(jobs)
    if n_processes <= 1 or len(jobs) <= 1:
        return None, map(_train_job, jobs)
    # Ctrl-C reaches the whole process group, but only the parent should answer it (one
    # line, then it terminates the pool); a child would print a traceback. An ignored
    # signal stays ignored across exec, so children spawned meanwhile never see it.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        pool = multiprocessing.get_context("spawn").Pool(min(n_processes, len(jobs)))
    finally:
        signal.signal(signal.SIGINT, previous)
    return pool, pool.imap(_train_job, jobs)


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
