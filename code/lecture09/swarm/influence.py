"""One measured round: how far one liar moves the weights, in units of one honest worker
(lecture 9, notes §8; code 08's table (1)).

Train `warm_steps` honest rounds (mean of n workers' compressed gradients, AdamW: the
swarm's setting; lr schedule and data order those of a training run), then take the next
batch and, from that same state each time, one
optimizer step per aggregator x attack. Every upload is clipped to n x clip_norm first,
as code 6's server does. What is measured, in L2 norm over all weights:

    honest unit   |dw(mean of all n honest) - dw(mean of the first n - 1)|: how much one
                  honest worker moves a mean round. Every influence below is in this unit.
    influence     |dw(aggregator of n - f honest + f liars) - dw(aggregator of n honest)|:
                  what replacing f honest workers by liars changes in the step
    kept          cos(dw(aggregator of n honest), dw(mean of n honest)): how much of the
                  honest step an aggregator keeps when nobody lies (1 = all of it)
    nonzero       entries of the aggregated honest gradient that are not 0 (top-k uploads
                  overlap little, so a coordinate-wise median of them is mostly 0)
    bounded       the mean's attacked step with its norm clipped, after the optimizer, to the
                  honest step's own norm: a bound on |dw| that knows the honest answer's size

The control for "AdamW, not the upload, makes the tiny dense upload strong": the same
round from the same weights with the same uploads, stepped by plain SGD (`optimizer="sgd"`,
no momentum, at SGD_LR), which has no per-entry normalisation.
"""

import copy
from dataclasses import dataclass

import torch

from lecture01 import tiny_gpt
from lecture09.compress.training import (WorkerCompression, clip_each, compressed_backward, world_tokens,
                                         worker_gradients)
from lecture09.robust import aggregators, attacks


@dataclass(frozen=True)
class Cell:
    aggregator: str
    attack: str
    influence: float       # in honest units
    picked_liar: object = None   # krum / multi-krum: whether the liars' vector was among those chosen


@dataclass(frozen=True)
class RoundStudy:
    n_workers: int
    liars: int
    scheme: str
    n_params: int
    unit: float                    # |dw| of one honest worker in a mean round
    honest_step: float             # |dw| of the honest mean round
    optimizer: str                 # "adamw" (the swarm's) or "sgd" (the control)
    kept: dict                     # aggregator -> cosine with the honest mean step
    nonzero: dict                  # aggregator -> fraction of nonzero entries, honest inputs
    cells: tuple                   # Cell per aggregator x attack
    bounded: dict = None           # attack -> influence of the mean's step clipped to the honest norm

    def cell(self, aggregator, attack):
        return next(c for c in self.cells if c.aggregator == aggregator and c.attack == attack)


def schedule_steps(setup, warm_steps):
    """The run the measured round belongs to: setup's steps, or one more than the warm-up
    if that is longer. The round is its step number warm_steps, at that step's lr."""
    return max(setup.recipe.steps, warm_steps + 1)


def warmed_up(setup, scheme, warm_steps, seeds):
    """(model, optimizer, train tokens, batch generator) after warm_steps honest mean
    rounds of a run of schedule_steps(...) steps: tiny_gpt.train's loop (its lr schedule,
    clipping and data order), stopped after the warm-up; the generator continues it."""
    tiny_gpt.use_deterministic_threads()
    train_data, _ = world_tokens(setup.world_seed)
    model = tiny_gpt.make_model(setup.model, seed=seeds.model)
    recipe = setup.recipe
    optimizer = tiny_gpt.make_adamw(model, recipe)
    stats = {"wire_bytes": 0, "sends": 0, "zeros": 0, "entries": 0}
    backward = compressed_backward(WorkerCompression(scheme, setup.n_workers, False, setup.options),
                                   setup.n_workers, stats, bf16=setup.precision == "bf16")
    total = schedule_steps(setup, warm_steps)
    gen = torch.Generator().manual_seed(seeds.data)
    params = list(model.parameters())
    model.train()
    for step in range(warm_steps):
        for group in optimizer.param_groups:
            group["lr"] = tiny_gpt.lr_at(step, total, recipe.peak_lr)
        x, y = tiny_gpt.get_batch(train_data, recipe.batch_size, model.config.block_size, gen)
        optimizer.zero_grad(set_to_none=True)
        backward(model, x, y)
        if recipe.clip_norm:
            torch.nn.utils.clip_grad_norm_(params, recipe.clip_norm)
        optimizer.step()
    return model, optimizer, train_data, gen


_WARMED = {}     # (setup, scheme, warm_steps, seeds) -> what warmed_up returned, kept pristine


def warmed_up_once(setup, scheme, warm_steps, seeds):
    """warmed_up, computed once per process for the same arguments (table (1) and its SGD
    control start from the same warm-up); each caller gets its own copy of the state."""
    key = (setup, scheme, warm_steps, seeds)
    if key not in _WARMED:
        model, optimizer, train_data, gen = warmed_up(setup, scheme, warm_steps, seeds)
        _WARMED.clear()                        # one entry: the state is a model's worth of memory
        _WARMED[key] = (model, optimizer, train_data, gen.get_state())
    model, optimizer, train_data, gen_state = _WARMED[key]
    model, optimizer = copy.deepcopy((model, optimizer))
    gen = torch.Generator()
    gen.set_state(gen_state)
    return model, optimizer, train_data, gen


SGD_LR = 0.3    # the control's plain SGD: training.TrainSetup().sgd_lr


def step_delta(model, optimizer, gradient, clip_norm, lr):
    """dw (d,): one step of `optimizer` on a copy of model and optimizer."""
    model2, opt2 = copy.deepcopy((model, optimizer))   # one deepcopy: opt2 steps model2's parameters
    params = list(model2.parameters())
    offset = 0
    for p in params:
        p.grad = gradient[offset:offset + p.numel()].view_as(p).clone()
        offset += p.numel()
    if clip_norm:
        torch.nn.utils.clip_grad_norm_(params, clip_norm)
    for group in opt2.param_groups:
        group["lr"] = lr
    before = torch.cat([p.detach().reshape(-1) for p in params]).clone()
    opt2.step()
    after = torch.cat([p.detach().reshape(-1) for p in params])
    return after - before


def measure_round(setup, scheme="topk", warm_steps=30, liars=1, aggregator_names=None, attack_names=None,
                  seeds=None, optimizer="adamw", on_cell=None):
    """The RoundStudy of one round after warm_steps honest ones (see the module docstring)."""
    from lecture09.compress.training import Seeds
    seeds = seeds or Seeds()
    aggregator_names = aggregator_names or tuple(aggregators.AGGREGATORS)
    # tiny-dense-fixed differs from tiny-dense only from round to round: one round is the same
    attack_names = attack_names or tuple(a for a in attacks.ATTACKS if a not in ("none", "tiny-dense-fixed"))
    model, adamw, train_data, gen = warmed_up_once(setup, scheme, warm_steps, seeds)
    if optimizer == "sgd":
        stepper, lr = torch.optim.SGD(model.parameters(), lr=SGD_LR), SGD_LR
    else:
        stepper = adamw
        lr = tiny_gpt.lr_at(warm_steps, schedule_steps(setup, warm_steps), setup.recipe.peak_lr)
    n = setup.n_workers
    x, y = tiny_gpt.get_batch(train_data, setup.recipe.batch_size, model.config.block_size, gen)
    grads, _ = worker_gradients(model, x, y, n, bf16=setup.precision == "bf16")
    for p in model.parameters():
        p.grad = None
    sender = WorkerCompression(scheme, n, False, setup.options)
    honest = clip_each([sender.send(w, g)[0] for w, g in enumerate(grads)], n * setup.recipe.clip_norm)
    nonzero, last_chosen = {}, [None]

    def delta(vectors, name, record=False, remember=False):
        combine = aggregators.make(name, f=liars, bucket=setup.bucket, tau=setup.cc_tau)
        gradient = combine(vectors)
        if record:
            nonzero[name] = float((gradient != 0).double().mean())
        if remember:
            last_chosen[0] = getattr(combine, "chosen", None)
        return step_delta(model, stepper, gradient, setup.recipe.clip_norm, lr)

    mean_all = delta(honest, "mean")
    mean_without = delta(honest[:n - 1], "mean")
    unit = float((mean_all - mean_without).double().norm())
    kept, cells, bounded = {}, [], {}
    for name in aggregator_names:
        reference = delta(honest, name, record=True)
        kept[name] = float(torch.nn.functional.cosine_similarity(reference.double(), mean_all.double(), dim=0))
        for attack_name in attack_names:
            attack = attacks.make(attack_name)
            if attack_name == "replay":        # the liar replays a round it saw: here, this round's worker 0
                attack.last = honest[0].clone()
            lies = attack(honest[n - liars:], honest[:n - liars])
            sent = honest[:n - liars] + clip_each(lies, n * setup.recipe.clip_norm)
            attacked = delta(sent, name, remember=True)
            if name == "mean":
                ratio = float(reference.double().norm()) / max(float(attacked.double().norm()), 1e-30)
                clipped = attacked * min(1.0, ratio)
                bounded[attack_name] = float((clipped - reference).double().norm()) / unit
            cell = Cell(name, attack_name, float((attacked - reference).double().norm()) / unit,
                        picked_liar=None if last_chosen[0] is None else any(i >= n - liars for i in last_chosen[0]))
            cells.append(cell)
            if on_cell is not None:
                on_cell(cell)
    return RoundStudy(n_workers=n, liars=liars, scheme=scheme, n_params=model.n_params(), unit=unit,
                      honest_step=float(mean_all.double().norm()), optimizer=optimizer,
                      kept=kept, nonzero=nonzero, cells=tuple(cells), bounded=bounded)
