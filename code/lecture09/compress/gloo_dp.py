"""Demo 2 on real torch.distributed ranks: DDP with communication hooks, gloo on loopback.

Introduced in lecture 9 (notes: lectures/lecture09/07_compression_beyond.md §7.5).
`compressed_dp.train_run` simulates W workers in one process; with TrainSetup.backend
"gloo" it calls `train_run` here instead: W real processes (lecture09.ranks.gloo_ranks: a free
port picked in the parent), each wraps the same model in DistributedDataParallel and
trains on its slice of every global batch. Gradients are averaged by DDP through a
communication hook:
    fp16        PyTorch's default_hooks.fp16_compress_hook
    powersgd    PyTorch's powerSGD_hook (error feedback, warm start, as powersgd.py)
    the rest    `registry_hook`: the registry's scheme on this rank's bucket (with its own
                error-feedback memory), then all-reduce SUM of what it decoded, divided
                by W (the same arithmetic as every other variant). That all-reduce moves dense
                fp32, so the compression's arithmetic is real but its bytes are counted,
                not saved: top-k cannot be all-reduced at all (two ranks keep different
                indices), a real system all-gathers the (index, value) pairs.
No bf16 tensor ever reaches a collective (gloo has none): the forward's bf16 autocast
leaves gradients in fp32.
"""

import math
import time

import torch

from lecture09.compress.compression import SCHEMES, Residuals, parts_bytes
from lecture09.ranks.gloo_ranks import run_ranks
from lecture09.compress.powersgd import HOOK_RANDOM_SEED, MIN_COMPRESSION_RATE, START_STEP
from lecture09.compress import training as engine


class HookState:
    """What registry_hook keeps between steps on one rank."""

    def __init__(self, scheme, options, error_feedback, world_size, count_zeros, params):
        self.scheme, self.options, self.world_size = SCHEMES[scheme], options, world_size
        self.memory = Residuals() if error_feedback else None
        self.count_zeros = count_zeros
        self.index_of = {id(p): i for i, p in enumerate(params)}   # parameter -> its place in the model
        self.wire_bytes = self.zeros = self.entries = 0


def registry_hook(state, bucket):
    """Compress this rank's gradient in the model's parameter order (the simulation's flat
    vector), not the bucket's: DDP rebuilds its buckets in another order after the first
    step, and a residual or a block must keep meaning the same entries."""
    import torch.distributed as dist

    pairs = sorted(zip(bucket.parameters(), bucket.gradients()), key=lambda pg: state.index_of[id(pg[0])])
    grad = torch.cat([g.reshape(-1) for _, g in pairs])       # (bucket numel,) fp32, model order
    if state.memory is None:
        parts = state.scheme.encode(grad, state.options)
        decoded = state.scheme.decode(parts, grad.shape, state.options)
    else:
        key = str(bucket.index())
        encoded, named = state.memory.propose({key: grad}, state.scheme, state.options)
        state.memory.commit()
        parts, decoded = encoded[key], named[key]
    state.wire_bytes += parts_bytes(parts)
    if state.count_zeros:
        state.zeros += int((decoded == 0).sum()) - int((grad == 0).sum())
        state.entries += grad.numel()
    offset = 0
    for _, g in pairs:                                        # back into the bucket's own layout
        g.copy_(decoded[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
    buffer = bucket.buffer()
    future = dist.all_reduce(buffer, op=dist.ReduceOp.SUM, async_op=True).get_future()
    return future.then(lambda f: f.value()[0].div_(state.world_size))


def _register(ddp, run, setup, world_size, count_zeros):
    """Attach the row's hook; returns a function giving (wire bytes so far, zeros, entries)."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    n = sum(p.numel() for p in ddp.module.parameters())
    if run.scheme == "fp16" and not run.error_feedback:
        ddp.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
        return lambda steps: (2 * n * steps, 0, 0)
    if run.scheme == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=dist.group.WORLD, matrix_approximation_rank=run.param,
                                            start_powerSGD_iter=START_STEP, min_compression_rate=MIN_COMPRESSION_RATE,
                                            use_error_feedback=run.error_feedback, warm_start=True,
                                            random_seed=HOOK_RANDOM_SEED)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return None                                          # bytes: the simulation counts them (powersgd.py)
    state = HookState(run.scheme, setup.options, run.error_feedback, world_size, count_zeros,
                      list(ddp.module.parameters()))
    ddp.register_comm_hook(state, registry_hook)
    return lambda steps: (state.wire_bytes, state.zeros, state.entries)


def rank_worker(rank, world_size, run, seeds, setup, keep_weights=False):
    """One rank's training; rank 0 returns (bpc, losses, wire bytes per step, zeros, entries):
    bytes and zeros are rank 0's own (the simulation averages the zero fraction over workers).
    keep_weights: every rank returns its trained weights instead, (n_params,) fp32."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from lecture01 import tiny_gpt

    train_data, val_data = engine.world_tokens(setup.world_seed)
    model = tiny_gpt.make_model(setup.model, seed=seeds.model)
    config, optimizer = engine.make_optimizer(run, setup, model, seeds)
    ddp = DistributedDataParallel(model)
    counted = _register(ddp, run, setup, world_size, run.scheme in engine.ZERO_COUNTED)
    bf16 = setup.precision == "bf16"

    def backward(module, x, y):          # x, y: the global batch (B, T); this rank takes its slice
        per_rank = x.size(0) // world_size
        xs, ys = x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]
        loss = tiny_gpt.lm_loss(ddp, xs, ys, bf16=bf16)
        loss.backward()                                      # DDP's hook averages the gradients here
        total = loss.detach().clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)         # every rank sees the same sum: one decision
        if not math.isfinite(float(total)):
            raise engine.Diverged
        return float(total) / world_size

    losses = []
    try:
        tiny_gpt.train(model, train_data, config, optimizer=optimizer, backward=backward,
                       on_step=lambda step, loss: losses.append(loss))
        diverged = False
    except engine.Diverged:
        diverged = True
    if keep_weights:
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    if rank:
        return None
    bpc = math.nan if diverged else tiny_gpt.bits_per_char(model, val_data)
    wire = counted(len(losses)) if counted else (math.nan, 0, 0)
    return bpc, losses, wire[0] / max(1, len(losses)), wire[1], wire[2]


def train_run(run, seeds, setup, timeout_s=3600):
    """compressed_dp.train_run with setup.n_workers real gloo ranks; a RunResult."""
    if run.optimizer not in engine.OPTIMIZERS:
        raise ValueError(f"--backend gloo runs the per-step optimizers {engine.OPTIMIZERS}, not {run.optimizer!r}")
    started = time.perf_counter()
    bpc, losses, wire_bytes, zeros, entries = run_ranks(rank_worker, setup.n_workers,
                                                        args=(run, seeds, setup), timeout_s=timeout_s)[0]
    diverged = not math.isfinite(bpc)
    n_params = sum(p.numel() for p in _model_shapes(setup))
    return engine.RunResult(run=run, seeds=seeds, bpc=bpc, bytes_per_element=wire_bytes / n_params,
                            zeroed_fraction=zeros / entries if entries else 0.0, diverged=diverged,
                            steps_done=len(losses), seconds=time.perf_counter() - started, losses=tuple(losses))


def trained_weights(run, seeds, setup, timeout_s=600):
    """Each rank's weights after training, flat in the model's parameter order: the check
    that real DDP ranks stay identical and hold what the simulation computes."""
    return run_ranks(rank_worker, setup.n_workers, args=(run, seeds, setup, True), timeout_s=timeout_s)


def _model_shapes(setup):
    from lecture01 import tiny_gpt
    return list(tiny_gpt.make_model(setup.model, seed=0).parameters())


def _bucket_order_worker(rank, world_size, setup, steps):
    """The parameter indices (model order) of every DDP bucket the comm hook saw, per step."""
    import torch.distributed as dist  # noqa: F401  (the ranks' process group is up)
    from torch.nn.parallel import DistributedDataParallel

    from lecture01 import tiny_gpt

    tiny_gpt.use_deterministic_threads()
    model = tiny_gpt.make_model(setup.model, seed=0)
    index_of = {id(p): i for i, p in enumerate(model.parameters())}
    ddp = DistributedDataParallel(model)
    seen = []

    def hook(state, bucket):
        seen.append([index_of[id(p)] for p in bucket.parameters()])
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer())          # nothing averaged: only the order is wanted
        return fut

    ddp.register_comm_hook(None, hook)
    train, _ = engine.world_tokens(setup.world_seed)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x, y = tiny_gpt.get_batch(train, 2, setup.model.block_size, gen)
        tiny_gpt.lm_loss(ddp, x, y).backward()
        ddp.zero_grad()
    return seen


def bucket_orders(setup, steps, timeout_s=120):
    """What DDP's buckets held, in order, at each of `steps` steps on 2 ranks (rank 0's view):
    DDP fills them in model order at the first step and rebuilds them in gradient-ready order."""
    return run_ranks(_bucket_order_worker, 2, args=(setup, steps), timeout_s=timeout_s)[0]

