"""Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512): DiLoCo's exchange cut into
fragments that take turns, each overlapped with τ inner steps (lecture 9, §11.3; code 11,
demo 2). With one fragment and τ = 0 it is local_sgd's DiLoCo.

The schedule is torchft's (torchft/local_sgd.py, class DiLoCo, version 0.2.0), which
tests/test_streaming_diloco.py checks sync by sync against torchft itself:

  - H inner steps make one round; with F fragments one fragment syncs every h = H / F
    steps (F divides H), fragment k at the k-th sync, in turn (k mod F);
  - τ steps before its sync (local step h − τ) a fragment's pseudo-gradient
    Δ_w = θ_global − θ_w is taken and sent (optionally encoded by a registry scheme);
    the workers go on with τ more inner steps while it travels;
  - at the sync the fragment's θ_global takes one outer step (SGD, Nesterov, the outer
    momentum kept per fragment) on the average Δ, and each worker's fragment becomes
    θ_global + α (θ_w − θ_global): α = 0 (torchft's default) throws away the τ steps of
    local progress on that fragment, α = 1 keeps the worker's own values.

Fragments are ranges of the flat parameter vector: equal slices (the peak is exactly
1/F of the model), or whole tensors in order (what torchft can split: modules).
Training stops after the last step with every fragment at its last synced θ_global
(torchft's state then), and bits per character are those of that θ_global; with
setup.final_sync every fragment then takes one more outer step on what the workers have
done since its last sync (as local_sgd's last round): the control for how much the
fragments' staleness at the end costs. Its bytes are not counted: it is a measurement's
control, not part of the schedule. Bytes are
counted from the encoded tensors: the mean per step, and the peak, the most one worker
sends in one step.
"""

import copy
import math
import time

import torch

from lecture09.compress.compression import SCHEMES, parts_bytes
from lecture09.compress import local_sgd, run_progress
from lecture09.compress import training as engine


def check_schedule(h_total, n_fragments, delay):
    """h = H / F inner steps between two syncs; ValueError where torchft refuses too."""
    if n_fragments < 1 or h_total < n_fragments or h_total % n_fragments:
        raise ValueError(f"H = {h_total} must be a multiple of the {n_fragments} fragments")
    h = h_total // n_fragments
    if not 0 <= delay < h:
        raise ValueError(f"the overlap τ = {delay} must be below H / F = {h} (a fragment syncs before it is sent again)")
    return h


def sync_events(steps, h_total, n_fragments, delay):
    """[(send_step, sync_step, fragment)] (1-based steps) of a run of `steps` inner steps,
    in torchft's order; a fragment sent in the last τ steps never syncs and is dropped."""
    h = check_schedule(h_total, n_fragments, delay)
    events, k = [], 0
    for sync_step in range(h, steps + 1, h):
        events.append((sync_step - delay, sync_step, k % n_fragments))
        k += 1
    return events


def fragment_ranges(sizes, n_fragments, whole_tensors=False):
    """[(start, stop)] of the flat vector of tensors with `sizes` (numel, in order): F equal
    slices, or F groups of whole tensors cut where the running total first reaches k n / F."""
    n = sum(sizes)
    if not 1 <= n_fragments <= (len(sizes) if whole_tensors else n):
        raise ValueError(f"cannot cut {len(sizes)} tensors ({n} values) into {n_fragments} fragments")
    if not whole_tensors:
        bounds = [round(k * n / n_fragments) for k in range(n_fragments + 1)]
        return list(zip(bounds[:-1], bounds[1:]))
    ends, total = [], 0
    for i, size in enumerate(sizes):
        total += size
        wanted = len(ends) + 1
        left_tensors, left_cuts = len(sizes) - i - 1, n_fragments - wanted
        if wanted < n_fragments and (total >= wanted * n / n_fragments or left_tensors == left_cuts):
            ends.append(total)
    ends.append(n)
    starts = [0] + ends[:-1]
    return list(zip(starts, ends))


def train(run, seeds, setup, whole_tensors=False, record=None, timer=None):
    """Train setup.model with Streaming DiLoCo, run.param = (H, F, τ), outer lr / momentum
    and α = setup.fragment_alpha; a RunResult with the peak bytes too. record: a list that
    gets a copy of the flat θ_global after every sync (for the reference test). timer: an
    object told what happens and when, never changing it (compress/slow_network_lowcomm.py):
    .computed(real s of one worker's inner step), .send(sync step, every worker's encoded
    tensors, real s one worker spent encoding), .wait(sync step) before a fragment is
    applied, .step_done(step, fragments) after every step."""
    from lecture01 import tiny_gpt

    h_total, n_fragments, delay = run.param
    tiny_gpt.use_deterministic_threads()
    started = time.perf_counter()
    train_data, val_data = engine.world_tokens(setup.world_seed)
    r, n_workers, alpha = setup.recipe, setup.n_workers, setup.fragment_alpha
    global_model = tiny_gpt.make_model(setup.model, seed=seeds.model)
    workers = [copy.deepcopy(global_model) for _ in range(n_workers)]
    inner = [tiny_gpt.make_adamw(w, r) for w in workers]
    sizes = [p.numel() for p in global_model.parameters()]
    ranges = fragment_ranges(sizes, n_fragments, whole_tensors)
    theta = torch.nn.utils.parameters_to_vector(global_model.parameters()).detach().clone()
    fragments = [torch.nn.Parameter(theta[a:b].clone()) for a, b in ranges]   # each fragment's θ_global
    outer = torch.optim.SGD(fragments, lr=setup.outer_lr, momentum=setup.outer_momentum,
                            nesterov=setup.outer_momentum > 0)
    scheme, options = SCHEMES[run.scheme], setup.options
    events = {send: (sync, k) for send, sync, k in sync_events(r.steps, h_total, n_fragments, delay)}
    syncs_at = {sync: k for _, (sync, k) in events.items()}
    in_flight = {}                        # sync step -> the average decoded pseudo-gradient
    gen = torch.Generator().manual_seed(seeds.data)
    losses, total_bytes, peak_bytes, diverged = [], 0, 0, False
    for step in range(r.steps):
        lr = tiny_gpt.lr_at(step, r.steps, r.peak_lr)
        x, y = tiny_gpt.get_batch(train_data, r.batch_size, global_model.config.block_size, gen)
        started_step = time.perf_counter()
        loss_sum = local_sgd.inner_step(workers, inner, x, y, lr, r.clip_norm, setup.precision == "bf16")
        if timer is not None:             # the workers run one after another: one worker's share
            timer.computed((time.perf_counter() - started_step) / n_workers)
        if not math.isfinite(loss_sum):
            diverged = True
            break
        losses.append(loss_sum / n_workers)
        run_progress.step_done(step + 1)
        done = step + 1
        if done in events:                # send fragment k's pseudo-gradient; it lands τ steps later
            sync, k = events[done]
            a, b = ranges[k]
            received, sent, every_parts = None, 0, []
            started_send = time.perf_counter()
            for model in workers:
                local = torch.nn.utils.parameters_to_vector(model.parameters()).detach()[a:b]
                delta = fragments[k].detach() - local
                parts = scheme.encode(delta, options)
                decoded = scheme.decode(parts, delta.shape, options)
                received = decoded if received is None else received + decoded
                sent = parts_bytes(parts)
                every_parts.append(parts)
            if timer is not None:
                timer.send(sync, every_parts, (time.perf_counter() - started_send) / n_workers)
            total_bytes += sent
            peak_bytes = max(peak_bytes, sent)
            in_flight[sync] = received / n_workers
        if done in syncs_at:
            k = syncs_at[done]
            a, b = ranges[k]
            if timer is not None:
                timer.wait(done)
            outer.zero_grad(set_to_none=True)
            fragments[k].grad = in_flight.pop(done)
            outer.step()
            new_global = fragments[k].detach()
            for model in workers:
                flat = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
                flat[a:b] = torch.lerp(new_global, flat[a:b], alpha)   # new + α (own − new), as torchft rounds it
                torch.nn.utils.vector_to_parameters(flat, model.parameters())
            if record is not None:
                record.append(torch.cat([f.detach() for f in fragments]).clone())
        if timer is not None:
            timer.step_done(done, fragments)
    if setup.final_sync and not diverged:
        last = {k: sync for _, sync, k in sync_events(r.steps, h_total, n_fragments, delay)}
        for k, (a, b) in enumerate(ranges):
            if last.get(k) == r.steps:
                continue                  # synced at the very last step: nothing left to send
            received = None
            for model in workers:
                delta = fragments[k].detach() - torch.nn.utils.parameters_to_vector(model.parameters()).detach()[a:b]
                decoded = scheme.decode(scheme.encode(delta, options), delta.shape, options)
                received = decoded if received is None else received + decoded
            outer.zero_grad(set_to_none=True)
            fragments[k].grad = received / n_workers
            outer.step()
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(torch.cat([f.detach() for f in fragments]), global_model.parameters())
    n = global_model.n_params()
    result = engine.finish_run(run, seeds, global_model, val_data, started, diverged,
                               total_bytes / max(1, len(losses)), len(losses), losses=losses)
    return engine.replace(result, peak_bytes_per_element=peak_bytes / n)
