"""Asynchronous local SGD with the delayed Nesterov outer step (Liu et al. 2024, "Asynchronous
Local-SGD Training for Language Modeling", arXiv 2401.09135; lecture 9, §11.8; code 11, demo 7).

DiLoCo (local_sgd.py) is synchronous: after H inner steps every worker waits for the
slowest, then one outer step uses the mean of the W pseudo-gradients. Here nobody waits.
Worker w takes one inner step in t_w time units (step_times: evenly from 1 for worker 0 to
`slowest` for worker W − 1). After H inner steps from the global model it pulled, it sends
its pseudo-gradient g = θ_pulled − θ_w; the server applies it at once, and the worker pulls
the new θ_global and goes on (its inner AdamW keeps its state, as in DiLoCo). The
pseudo-gradients that arrived between a worker's pull and its push are its staleness.

The server's step on each arrival, DelayedNesterov (Liu et al.'s delayed Nesterov update,
as utnslab/halos implements it in src/halos/opt.py, the code of HALoS, ICML 2025, which
cites the paper; tests/test_async_local_sgd.py compares the two step by step when given that
file), with buffer size N, momentum β and momentum activation c:

    Δ ← Δ + g
    every N-th arrival:  m ← β m + Δ / N;   θ ← θ − lr ((1 − cN + c) β m + g / N);   Δ ← 0
    any other arrival:   θ ← θ − lr (c β m + g / N)

With N = 1 and c = 0 it is SGD with Nesterov momentum (torch.optim.SGD(nesterov=True); a
test checks it): the naive row, one Nesterov step per arrival. With β = 0 it is SGD with
lr / N per arrival (the row without momentum). With N = W the momentum moves
once per W arrivals, on their mean, as DiLoCo's does once per round; in between, each
arrival moves θ by plain SGD with lr / N. Fed one synchronous round (W pseudo-gradients of
the same θ), N = W is DiLoCo's outer step on their mean (a test checks that too). The
paper's other idea, dynamic local updates (DyLU: a slower worker takes fewer inner steps),
is not reproduced here.

Budget and schedule, so that a row is comparable with DiLoCo's: the workers take steps × W
inner steps in all (DiLoCo's compute), in rounds of min(H, steps) (the last one shorter),
each on batch / W sequences drawn from one seeded
stream in the order the rounds start. The inner lr of a round's i-th step follows lecture
1's schedule at step ⌊u·H / W⌋ + i, u = pseudo-gradients applied when the round started
(in a synchronous round that is DiLoCo's step). Bytes are counted as DiLoCo's rows count
them: one fp32 pseudo-gradient per arrival, 4 bytes per parameter, per worker per step.
"""

import copy
import dataclasses
import heapq
import math
import time

import torch

from lecture09.compress import run_progress
from lecture09.compress import training as engine

FP32 = 4
MODES = ("nesterov", "delayed", "average")     # see outer_step


def step_times(n_workers, slowest):
    """Time units of one inner step per worker: evenly from 1 to `slowest`."""
    if n_workers < 1 or not slowest >= 1:
        raise ValueError(f"need at least 1 worker and slowest >= 1, got {n_workers}, {slowest}")
    if n_workers == 1:
        return [1.0]
    return [1.0 + (slowest - 1.0) * w / (n_workers - 1) for w in range(n_workers)]


class DelayedNesterov:
    """The server's outer step (module docstring) on a flat parameter vector θ, in place."""

    def __init__(self, theta, lr, beta, buffer_size, c=0.0):
        if buffer_size < 1 or not 0 <= c <= 1.0 / buffer_size:
            raise ValueError(f"need buffer_size >= 1 and 0 <= c <= 1 / buffer_size, got {buffer_size}, {c}")
        self.theta, self.lr, self.beta, self.n, self.c = theta, lr, beta, buffer_size, c
        self.m = torch.zeros_like(theta)
        self.delta = torch.zeros_like(theta)
        self.arrivals = 0

    @torch.no_grad()
    def step(self, g):
        self.delta += g
        self.arrivals += 1
        if self.arrivals % self.n == 0:
            self.m.mul_(self.beta).add_(self.delta, alpha=1.0 / self.n)
            self.theta.sub_(self.lr * ((1 - self.c * self.n + self.c) * self.beta * self.m + g / self.n))
            self.delta.zero_()
        else:
            self.theta.sub_(self.lr * (self.c * self.beta * self.m + g / self.n))


def outer_step(mode, theta, setup):
    """The server of a row. "nesterov": one Nesterov step per arrival with lr / W, so that W
    arrivals move θ as far as one of DiLoCo's outer steps; "delayed": N = W with DiLoCo's lr
    and momentum; "average": no momentum, lr 1, so each arrival moves θ by g / W, the
    asynchronous twin of local SGD with a full average (gossip.py's "all")."""
    w, lr, beta = setup.n_workers, setup.outer_lr, setup.outer_momentum
    if mode == "nesterov":
        return DelayedNesterov(theta, lr / w, beta, 1)
    if mode == "delayed":
        return DelayedNesterov(theta, lr, beta, w)
    if mode == "average":
        return DelayedNesterov(theta, 1.0, 0.0, w)
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


@dataclasses.dataclass(frozen=True)
class Arrival:
    time: float          # time units when the pseudo-gradient reached the server
    worker: int
    staleness: int       # pseudo-gradients applied between this worker's pull and its push


def _round(model, optimizer, data, gen, n_steps, first_lr_step, setup, bf16):
    """n_steps inner AdamW steps of one worker (its own clipping); the sum of its losses."""
    from lecture01 import tiny_gpt

    r = setup.recipe
    loss_sum = 0.0
    for i in range(n_steps):
        for group in optimizer.param_groups:
            group["lr"] = tiny_gpt.lr_at(min(r.steps - 1, first_lr_step + i), r.steps, r.peak_lr)
        x, y = tiny_gpt.get_batch(data, r.batch_size // setup.n_workers, model.config.block_size, gen)
        model.train()
        optimizer.zero_grad(set_to_none=True)
        loss = tiny_gpt.lm_loss(model, x, y, bf16=bf16)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), r.clip_norm)
        optimizer.step()
        loss_sum += loss.item()
    return loss_sum


def simulate(n_workers, h, slowest, budget, start_round, apply):
    """The event loop, without the model: start_round(worker, n_steps, applied) begins a
    round when that worker pulls; apply(worker) is called when its pseudo-gradient arrives,
    in order of arrival time (ties: the lower worker first). Each worker starts rounds of
    min(H, budget / W, what is left of the budget of inner steps) until the budget is used:
    no round is longer than a synchronous worker's whole run (else, with H beyond the steps,
    the first worker would take the whole budget alone); a list of Arrival."""
    times = step_times(n_workers, slowest)
    longest = max(1, budget // n_workers)
    started, applied, arrivals, queue = 0, 0, [], []
    pulled = {}

    def launch(w, now):
        nonlocal started
        n = min(h, longest, budget - started)
        if n <= 0:
            return
        started += n
        pulled[w] = applied
        start_round(w, n, applied)
        heapq.heappush(queue, (now + n * times[w], w))

    for w in range(n_workers):
        launch(w, 0.0)
    while queue:
        now, w = heapq.heappop(queue)
        apply(w)
        arrivals.append(Arrival(now, w, applied - pulled[w]))
        applied += 1
        launch(w, now)
    return arrivals


def synchronous_time(steps, slowest):
    """Time units DiLoCo (and every-step AdamW) take for the same budget: every step waits
    for the slowest worker, whatever H is."""
    return steps * max(1.0, slowest)


def train(run, seeds, setup):
    """Train setup.model with run.param = (H, mode, slowest); a RunResult whose `timing` is
    (time units to the last arrival, mean staleness, largest staleness)."""
    from lecture01 import tiny_gpt

    tiny_gpt.use_deterministic_threads()
    started = time.perf_counter()
    h, mode, slowest = run.param
    train_data, val_data = engine.world_tokens(setup.world_seed)
    r, n_workers, bf16 = setup.recipe, setup.n_workers, setup.precision == "bf16"
    global_model = tiny_gpt.make_model(setup.model, seed=seeds.model)
    theta = torch.nn.utils.parameters_to_vector(global_model.parameters()).detach().clone()
    server = outer_step(mode, theta, setup)
    workers = [copy.deepcopy(global_model) for _ in range(n_workers)]
    inner = [tiny_gpt.make_adamw(w, r) for w in workers]
    gen = torch.Generator().manual_seed(seeds.data)
    state = {"losses": [], "diverged": False, "done": 0, "pulled": [None] * n_workers}   # losses: per round

    def start_round(w, n_steps, applied):
        if state["diverged"]:
            return
        torch.nn.utils.vector_to_parameters(theta.clone(), workers[w].parameters())
        state["pulled"][w] = theta.clone()
        loss_sum = _round(workers[w], inner[w], train_data, gen, n_steps, applied * h // n_workers, setup, bf16)
        state["done"] += n_steps
        if not math.isfinite(loss_sum):
            state["diverged"] = True
            return
        state["losses"].append(loss_sum / n_steps)
        run_progress.step_done(state["done"] // n_workers)

    def apply(w):
        if not state["diverged"]:
            server.step(state["pulled"][w] - torch.nn.utils.parameters_to_vector(workers[w].parameters()).detach())

    arrivals = simulate(n_workers, h, slowest, r.steps * n_workers, start_round, apply)
    torch.nn.utils.vector_to_parameters(theta, global_model.parameters())
    n = global_model.n_params()
    steps_done = state["done"] // n_workers
    result = engine.finish_run(run, seeds, global_model, val_data, started, state["diverged"],
                               FP32 * n * len(arrivals) / n_workers / max(1, steps_done), steps_done,
                               losses=state["losses"])
    stale = [a.staleness for a in arrivals]
    timing = (arrivals[-1].time if arrivals else 0.0, sum(stale) / max(1, len(stale)), max(stale, default=0))
    return dataclasses.replace(result, peak_bytes_per_element=float(FP32), timing=timing)
