"""Data parallelism with compressed gradients: runs the training engine (training.py) for
code 5's demo 2 and code 7, in worker processes, and pairs the results it returns.

Introduced in lecture 9 (notes: lectures/lecture09/05_decentralized.md §5.6-§5.8).

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
import statistics
from dataclasses import dataclass, replace  # noqa: F401  (replace: re-exported, scripts build setups with it)

from lecture01.cli_args import sigint_ignored
from lecture09.compress import (async_local_sgd, decoupled_momentum, gloo_dp, gossip, local_sgd, onebit_adam,
                                run_progress, sparseloco, streaming_diloco)
from lecture09.compress.verdicts import verdict  # noqa: F401  (re-exported: one import for the scripts)
from lecture09.compress.training import (  # noqa: F401  (re-exported: one import for the scripts)
    OPTIMIZERS, DELTA_TOLERANCE_BPC, Seeds, Run, TrainSetup, RunResult, Diverged, ZERO_COUNTED,
    COLLECTIVE_SCHEMES, world_tokens, WorkerCompression, make_aggregator, worker_gradients,
    compressed_backward, make_optimizer, finish_run, train_simulated)

# Training loops of their own (the optimizer itself talks less): Run.optimizer -> train.
VARIANTS = {"onebit-adam": lambda run, seeds, setup: onebit_adam.train(run, seeds, setup, compress=True),
            "adamw-frozen-v": lambda run, seeds, setup: onebit_adam.train(run, seeds, setup, compress=False),
            "adamw-frozen-v-avgclip": lambda run, seeds, setup: onebit_adam.train(run, seeds, setup, compress=False,
                                                                                   clip_average=True),
            "diloco": local_sgd.train,
            # DiLoCo with setup's outer lr and no outer momentum: the one-change step between
            # DiLoCo and the full average (code 11's table (i))
            "diloco-no-momentum": lambda run, seeds, setup: local_sgd.train(run, seeds, setup, outer_momentum=0.0),
            "streaming-diloco": streaming_diloco.train,      # Run.param = (H, fragments, τ)
            "demo": decoupled_momentum.train,                # Run.param = (top-k per chunk, chunk)
            "sparseloco": sparseloco.train,                  # Run.param = (H, top-k per chunk, chunk, bits)
            "gossip": gossip.train,                          # Run.param = (H, "all" or "gossip")
            "async-local-sgd": async_local_sgd.train}        # Run.param = (H, "nesterov" or "delayed", slowest)


def train_run(run, seeds, setup):
    """Train setup.model from scratch with compressed worker gradients; a RunResult: on real
    gloo ranks (setup.backend "gloo"), in a loop of its own (VARIANTS), or simulated here."""
    if setup.backend == "gloo":
        return gloo_dp.train_run(run, seeds, setup)
    return VARIANTS.get(run.optimizer, train_simulated)(run, seeds, setup)


def _train_job(job):
    slot, run, seeds, setup = job
    run_progress.start_run(slot)
    return train_run(run, seeds, setup)


# Training workers run at the parent's CPU priority. They once ran at niceness +10 so that
# demo 1's search (code 05) stayed in front (7.5 s instead of 11-12 s on 2 cores), but then
# any normal program beside them (a browser, the projector's software) takes a whole core
# from them: with one process spinning on one core, code 05's default run (then 300 steps)
# took 105.9 s at +10 and 70.4 s at the parent's priority; idle, 47.2 s and 45.7 s (medians of
# 3, whole process, 2-core Intel Xeon with AMX; README).


def _start_worker(steps_done):
    """Pool initializer: report progress into `steps_done`."""
    run_progress.attach(steps_done)


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
    context = multiprocessing.get_context("spawn")
    steps_done = context.Array("i", len(jobs), lock=False)     # one slot per run; progress only
    with sigint_ignored():   # only the parent answers Ctrl-C; it terminates the pool
        pool = context.Pool(min(n_processes, len(jobs)), initializer=_start_worker, initargs=(steps_done,))
    return pool, run_progress.ShownProgress(pool.imap(_train_job, jobs), steps_done, steps_per_run, polled=True)


class Arrivals:
    """Several demos' rows trained once each: `runs` in the order they were started (each
    once), `results` the iterator start_training returned (n_seeds results per run, in that
    order). for_rows(rows) yields the results of each row's run in row order, n_seeds per
    row, waiting only for what it needs; a run two demos share is trained once and both get
    the same tuple of results."""

    def __init__(self, runs, results, n_seeds):
        self.order, self.results, self.n_seeds, self.arrived = list(runs), results, n_seeds, {}
        if len(set(self.order)) != len(self.order):
            raise ValueError("every run is started once")

    def of(self, run):
        while run not in self.arrived:
            if len(self.arrived) == len(self.order):
                raise KeyError(f"run {run.label!r} was never started")
            nxt = self.order[len(self.arrived)]
            self.arrived[nxt] = tuple(next(self.results) for _ in range(self.n_seeds))
        return self.arrived[run]

    def for_rows(self, rows):
        for row in rows:
            yield from self.of(row.run)


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


def printed_mean_delta(results, baselines, digits=4):
    """The mean paired Δ a table prints beside the two rows' mean bits per char. The mean over
    seeds of (row − baseline) is mean(row) − mean(baseline), so it is computed from those two
    means as printed (lecture01.console.printed_difference): a calculator on the printed
    numbers gives the same last digit. nan when a seed diverged on either side (the means then
    stand on different seeds, and no Δ is printed)."""
    from lecture01.console import printed_difference
    if any(r.diverged for r in results) or any(b.diverged for b in baselines):
        return math.nan
    return printed_difference(statistics.fmean(r.bpc for r in results),
                              statistics.fmean(b.bpc for b in baselines), digits)


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
