"""Local SGD / DiLoCo (Douillard et al. 2023; OpenDiLoCo): talk every H steps, not every step.

Introduced in lecture 9 (notes: lectures/lecture09/07_compression_beyond.md §7.4).
Each of W workers keeps its own copy of the model and its own inner AdamW (lecture 1's
recipe, clipping its own gradient) and takes H inner steps on its own slice of every
batch. Then the workers send their pseudo-gradient, the parameter change
Δ_w = θ_global − θ_w, optionally compressed by a scheme of the registry (INTELLECT-1 sent
int8); the average is the gradient of one outer step, SGD with Nesterov momentum
(OpenDiLoCo: lr 0.7, momentum 0.9; compressed_dp.TrainSetup.outer_lr / outer_momentum);
every worker restarts from the new θ_global. With outer lr 1 and no momentum it is plain
local SGD: θ_global becomes the average of the workers' parameters.

Bytes per step = bytes of one encoded pseudo-gradient × syncs / steps (a last, shorter
round syncs at the end when H does not divide the steps).
"""

import copy
import math
import time

import torch

from lecture09.compress.compression import SCHEMES, Residuals, parts_bytes
from lecture09.compress import run_progress
from lecture09.compress import training as engine


class PseudoGradientExchange:
    """DiLoCo's exchange: each worker's pseudo-gradient encoded by a registry scheme (with
    error feedback if the row asks), decoded and averaged. __call__(deltas) takes one flat
    Δ_w per worker and returns (their average as received, bytes one worker sent)."""

    def __init__(self, run, setup):
        self.scheme, self.options = SCHEMES[run.scheme], setup.options
        self.memories = [Residuals() for _ in range(setup.n_workers)] if run.error_feedback else None

    def __call__(self, deltas):
        received = None
        for w, delta in enumerate(deltas):
            if self.memories is None:
                parts = self.scheme.encode(delta, self.options)
                decoded = self.scheme.decode(parts, delta.shape, self.options)
            else:
                encoded, decoded_named = self.memories[w].propose({"": delta}, self.scheme, self.options)
                self.memories[w].commit()
                parts, decoded = encoded[""], decoded_named[""]
            received = decoded if received is None else received + decoded
        return received / len(deltas), parts_bytes(parts)


def inner_step(workers, inner, x, y, lr, clip_norm, bf16):
    """One inner AdamW step of every worker on its own slice of the batch (x, y), each
    clipping its own gradient; the sum of the workers' losses."""
    from lecture01 import tiny_gpt

    per_worker = len(x) // len(workers)
    loss_sum = 0.0
    for w, (model, optimizer) in enumerate(zip(workers, inner)):
        for group in optimizer.param_groups:
            group["lr"] = lr
        model.train()
        optimizer.zero_grad(set_to_none=True)
        loss = tiny_gpt.lm_loss(model, x[w * per_worker:(w + 1) * per_worker],
                                y[w * per_worker:(w + 1) * per_worker], bf16=bf16)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        optimizer.step()
        loss_sum += loss.item()
    return loss_sum


def outer_step(global_params, pseudo_gradient, outer, workers):
    """The outer optimizer's step on the global model from a flat (n,) pseudo-gradient, then
    every worker starts again from the new global weights."""
    offset = 0
    for p in global_params:
        p.grad = pseudo_gradient[offset:offset + p.numel()].view_as(p).clone()
        offset += p.numel()
    outer.step()
    for model in workers:
        with torch.no_grad():
            for p, g in zip(model.parameters(), global_params):
                p.copy_(g)


def train(run, seeds, setup, exchange=None, outer_lr=None, outer_momentum=None, inner_steps=None):
    """Train setup.model with DiLoCo, H = run.param (or inner_steps); a RunResult (bpc of θ_global).
    exchange(deltas) -> (pseudo-gradient, bytes one worker sent) replaces DiLoCo's (SparseLoCo);
    outer_lr, outer_momentum replace setup's (SparseLoCo's outer step has no momentum)."""
    from lecture01 import tiny_gpt

    tiny_gpt.use_deterministic_threads()
    started = time.perf_counter()
    train_data, val_data = engine.world_tokens(setup.world_seed)
    inner_steps, r, n_workers = inner_steps or run.param, setup.recipe, setup.n_workers
    global_model = tiny_gpt.make_model(setup.model, seed=seeds.model)
    global_params = list(global_model.parameters())
    lr_out = setup.outer_lr if outer_lr is None else outer_lr
    momentum = setup.outer_momentum if outer_momentum is None else outer_momentum
    outer = torch.optim.SGD(global_params, lr=lr_out, momentum=momentum,
                            nesterov=momentum > 0)   # OpenDiLoCo: 0.7, 0.9, Nesterov
    workers = [copy.deepcopy(global_model) for _ in range(n_workers)]
    inner = [tiny_gpt.make_adamw(w, r) for w in workers]
    exchange = exchange or PseudoGradientExchange(run, setup)
    gen = torch.Generator().manual_seed(seeds.data)
    losses, total_bytes, diverged = [], 0, False
    for step in range(r.steps):
        lr = tiny_gpt.lr_at(step, r.steps, r.peak_lr)
        x, y = tiny_gpt.get_batch(train_data, r.batch_size, global_model.config.block_size, gen)
        loss_sum = inner_step(workers, inner, x, y, lr, r.clip_norm, setup.precision == "bf16")
        if not math.isfinite(loss_sum):
            diverged = True
            break
        losses.append(loss_sum / n_workers)
        run_progress.step_done(step + 1)
        if (step + 1) % inner_steps and step + 1 < r.steps:
            continue
        theta = torch.nn.utils.parameters_to_vector(global_params).detach()
        deltas = [theta - torch.nn.utils.parameters_to_vector(model.parameters()).detach() for model in workers]
        pseudo_gradient, sent = exchange(deltas)                                  # (n,), bytes
        total_bytes += sent
        outer_step(global_params, pseudo_gradient, outer, workers)
    return engine.finish_run(run, seeds, global_model, val_data, started, diverged,
                          total_bytes / max(1, len(losses)), len(losses), losses=losses)
