"""Data parallelism on lecture 1's tiny GPT, four ways, on real gloo ranks (lecture 9 §2).

Introduced in lecture 9, code 2 (02_data_parallel.py), which imports this module; the
worker functions gloo_ranks runs must live in an importable module.

Every rank holds a full copy of the model, draws the same global batch (the same seeded
generator) and keeps its own slice of B / W sequences; after backward the ranks average
their gradients, so every copy takes the same optimizer step as one process on the whole
batch would. The variants differ only in how the gradients are averaged (naive first,
better second, as picotron ships DataParallelNaive beside its bucketed version):

    naive     one blocking all-reduce per parameter tensor, after backward      (17 calls)
    flat      one all-reduce of all gradients concatenated, after backward      (1 call)
    bucketed  gradients grouped into buckets in the order backward produces them; a
              bucket's all-reduce starts (async_op=True) as soon as its last gradient is
              accumulated (register_post_accumulate_grad_hook), while backward goes on
              computing earlier layers; wait for all of them before the optimizer step
    ddp       torch.nn.parallel.DistributedDataParallel, which does the bucketed version
              in C++ (Li et al., "PyTorch Distributed", VLDB 2020)

and, for communication hooks, DDP with torch's fp16_compress_hook and powerSGD_hook
(Vogels et al., "PowerSGD", NeurIPS 2019). Every variant here sums and divides by W, so all
do the same arithmetic (ReduceOp.AVG gives the same on torch 2.13.0: tests/test_gloo_ranks.py).
"""

import time
from dataclasses import dataclass, replace

import torch

from lecture09.lecture_model import MODEL_CONFIG
from lecture01 import tiny_gpt

VARIANTS = ("naive", "flat", "bucketed", "ddp")
HOOKS = ("none", "fp16", "powersgd")


@dataclass(frozen=True)
class DPSetup:
    """One data-parallel run: the batch, the steps, the optimizer, the buckets."""
    steps: int = 5                    # optimizer steps compared with the reference
    batch_size: int = 32              # global batch (sequences); each of W ranks gets batch_size / W
    model_seed: int = 0
    data_seed: int = 1
    world_seed: int = 0               # the toy world the text comes from (fm_world)
    peak_lr: float = 3e-3             # lecture 1's AdamW recipe (tiny_gpt.TrainConfig), warm-up + cosine
    clip_norm: float = 1.0            # global clipping, after the gradients are averaged
    bucket_bytes: int = 64 * 1024     # 64 KiB: about 4 buckets for the 334 KB gradient, so overlap has room
    powersgd_rank: int = 2            # PowerSGD's matrix rank; 1 (torch's default) learned visibly worse here
    powersgd_start: int = 2           # vanilla all-reduce for the first steps (torch requires > 1)
    fail_rank: int = -1               # tests only: this rank raises at its first step (-1: none)

    @property
    def train_config(self):
        return tiny_gpt.TrainConfig(steps=self.steps, batch_size=self.batch_size, peak_lr=self.peak_lr,
                                    clip_norm=self.clip_norm, data_seed=self.data_seed, bf16=False)


def shard(x, rank, world_size):
    """This rank's slice of the global batch: rows [rank·B/W, (rank+1)·B/W)."""
    per_rank = x.shape[0] // world_size
    return x[rank * per_rank:(rank + 1) * per_rank]          # (B/W, T)


def make_model_and_optimizer(setup):
    model = tiny_gpt.make_model(MODEL_CONFIG, seed=setup.model_seed)
    return model, tiny_gpt.make_adamw(model, setup.train_config)


def optimizer_step(model, optimizer, setup, step):
    """Clip, set the scheduled learning rate, step: identical in every variant and the reference."""
    lr = tiny_gpt.lr_at(step, setup.steps, setup.peak_lr)
    for group in optimizer.param_groups:
        group["lr"] = lr
    if setup.clip_norm:
        torch.nn.utils.clip_grad_norm_(model.parameters(), setup.clip_norm)
    optimizer.step()


# =============================================================================
# Single-process references
# =============================================================================

def reference_run(setup, train_tokens, micro_batches=1):
    """The single-process answer: `steps` AdamW steps on the whole batch. With micro_batches
    = k, each step accumulates the gradients of k slices (loss / k each: 梯度累积 gradient
    accumulation), which must give the same gradient. Returns (first step's gradients,
    final weights, losses)."""
    if setup.batch_size % micro_batches:
        raise ValueError(f"{micro_batches} micro-batches do not divide the batch of {setup.batch_size}")
    model, optimizer = make_model_and_optimizer(setup)
    gen = torch.Generator().manual_seed(setup.data_seed)
    first_grads, losses = None, []
    for step in range(setup.steps):
        x, y = tiny_gpt.get_batch(train_tokens, setup.batch_size, model.config.block_size, gen)   # (B, T)
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for k in range(micro_batches):
            loss = tiny_gpt.lm_loss(model, shard(x, k, micro_batches), shard(y, k, micro_batches)) / micro_batches
            loss.backward()                  # gradients add up in p.grad across micro-batches
            total += loss.item()
        if first_grads is None:
            first_grads = [p.grad.clone() for p in model.parameters()]
        losses.append(total)
        optimizer_step(model, optimizer, setup, step)
    return first_grads, [p.detach().clone() for p in model.parameters()], losses


# =============================================================================
# Gradient synchronisation, four ways
# =============================================================================

class Timeline:
    """(label, start_s, end_s) events of one step, relative to its start."""

    def __init__(self):
        self.origin = time.perf_counter()
        self.events = []

    def now(self):
        return time.perf_counter() - self.origin

    def add(self, label, start, end):
        self.events.append((label, start, end))


def sync_naive(model, world_size, timeline):
    """One blocking all-reduce per parameter tensor."""
    import torch.distributed as dist
    start = timeline.now()
    for p in model.parameters():
        dist.all_reduce(p.grad)              # SUM
        p.grad /= world_size
    timeline.add(f"all-reduce × {len(list(model.parameters()))}", start, timeline.now())
    return len(list(model.parameters()))


def sync_flat(model, world_size, timeline):
    """One all-reduce of every gradient concatenated, then copied back."""
    import torch.distributed as dist
    start = timeline.now()
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])            # (n_params,)
    dist.all_reduce(flat)
    flat /= world_size
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
    timeline.add("all-reduce × 1", start, timeline.now())
    return 1


def make_buckets(params, bucket_bytes):
    """Parameters in reverse order (the order backward produces their gradients, roughly),
    cut into buckets of at least bucket_bytes (the last may be smaller)."""
    buckets, current, size = [], [], 0
    for p in reversed(list(params)):
        current.append(p)
        size += p.numel() * p.element_size()
        if size >= bucket_bytes:
            buckets.append(current)
            current, size = [], 0
    if current:
        buckets.append(current)
    return buckets


class BucketedSync:
    """Overlap communication with backward: each bucket's all-reduce starts (async) the
    moment its last gradient has been accumulated, while backward computes earlier layers.

    Buckets start in index order on every rank (a bucket that is ready early waits for the
    ones before it), because gloo matches collectives by the order they are issued."""

    def __init__(self, model, world_size, bucket_bytes):
        self.world_size = world_size
        self.buckets = make_buckets(model.parameters(), bucket_bytes)
        self.bucket_of = {id(p): b for b, bucket in enumerate(self.buckets) for p in bucket}
        self.handles = []
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(self._grad_ready)
        self.reset(None)

    def reset(self, timeline):
        self.timeline = timeline
        self.missing = [len(bucket) for bucket in self.buckets]
        self.next_to_start = 0
        self.in_flight = []                  # (bucket index, flat tensor, work)

    def _grad_ready(self, param):
        import torch.distributed as dist
        self.missing[self.bucket_of[id(param)]] -= 1
        while self.next_to_start < len(self.buckets) and self.missing[self.next_to_start] == 0:
            b = self.next_to_start
            flat = torch.cat([p.grad.reshape(-1) for p in self.buckets[b]])       # (bucket elements,)
            start = self.timeline.now()
            work = dist.all_reduce(flat, async_op=True)
            label = f"桶 bucket {b}"
            work.get_future().then(lambda _, label=label, start=start: self.timeline.add(label, start, self.timeline.now()))
            self.in_flight.append((b, flat, work))
            self.next_to_start += 1

    def finish(self):
        """Wait for every bucket (the exposed part of communication), copy the averages back."""
        start = self.timeline.now()
        for b, flat, work in self.in_flight:
            work.wait()
            flat /= self.world_size
            offset = 0
            for p in self.buckets[b]:
                p.grad.copy_(flat[offset:offset + p.numel()].view_as(p.grad))
                offset += p.numel()
        self.timeline.add("等待 wait", start, self.timeline.now())
        if self.next_to_start != len(self.buckets):
            raise RuntimeError("backward finished but not every bucket was sent")
        return len(self.buckets)


def powersgd_state(setup):
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    return powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=setup.powersgd_rank,
                                       start_powerSGD_iter=setup.powersgd_start, random_seed=setup.model_seed)


def wrap_ddp(model, setup, hook, own_buckets):
    """DDP, optionally with a communication hook (通信钩子 comm hook).

    own_buckets: our bucket size, so DDP's buckets resemble BucketedSync's (the variants).
    The hook runs (and their uncompressed baseline) keep DDP's default instead (25 MB:
    this 334 KB gradient is one bucket), because
    PowerSGD issues its second all-reduce from the first one's completion callback, and
    with several buckets in flight on gloo those callbacks race: the ranks issue their
    collectives in different orders ("Received data size doesn't match expected size").
    A hook receives the bucket's local gradients, not yet divided by W, and must return the
    average: fp16_compress_hook divides before sending, PowerSGD after.
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel
    ddp = DistributedDataParallel(model, bucket_cap_mb=setup.bucket_bytes / 2**20) if own_buckets \
        else DistributedDataParallel(model)
    state = None
    if hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook == "powersgd":
        state = powersgd_state(setup)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    return ddp, state


def powersgd_elements(rank, min_compression_rate=2, config=MODEL_CONFIG):
    """What PowerSGD sends per step for lecture 1's model, by torch's own rule
    (powerSGD_hook._should_compress): each tensor viewed as a matrix (first dim x the
    rest) is compressed when (rows + cols)·r·min_compression_rate < rows·cols, and then
    sends P (rows x r) and Q (cols x r); the rest (biases, LayerNorm gains) go as they are.
    Returns (compressed elements sent, uncompressed elements, matrices, other tensors)."""
    compressed = kept = n_matrices = n_other = 0
    for p in tiny_gpt.make_model(config).parameters():
        rows, cols = p.shape[0], p.numel() // p.shape[0]
        r = min(rows, cols, rank)
        if (rows + cols) * r * min_compression_rate < rows * cols:
            compressed += (rows + cols) * r
            n_matrices += 1
        else:
            kept += p.numel()
            n_other += 1
    return compressed, kept, n_matrices, n_other


def payload_bytes(hook, n_params, state, before):
    """Bytes handed to all-reduce in one step (what each rank's gradient becomes on the wire
    before the ring splits it): fp32 4 per element, fp16 2; PowerSGD counts its own elements
    (torch's PowerSGDState.total_numel_after_compression), P and Q plus the uncompressed vectors."""
    if hook == "none":
        return 4 * n_params
    if hook == "fp16":
        return 2 * n_params
    after = state.total_numel_after_compression
    if after == before:                      # a warm-up step: vanilla all-reduce
        return 4 * n_params
    return 4 * (after - before)


# =============================================================================
# The worker gloo_ranks runs on every rank
# =============================================================================

def train_variant(rank, world_size, setup, train_tokens, variant, hook=None, steps=None):
    """Train one variant for `steps` steps on this rank; hook: None for the variants
    (ddp with our buckets), or one of HOOKS (ddp with its default buckets and that comm
    hook, "none" = no hook). Returns its first-step gradients,
    final weights, per-step losses (the global batch's, averaged over ranks), per-step
    timings and one step's timeline, all-reduce calls and bytes per step."""
    import torch.distributed as dist
    steps = setup.steps if steps is None else steps
    setup = replace(setup, steps=steps)
    model, optimizer = make_model_and_optimizer(setup)
    sync = BucketedSync(model, world_size, setup.bucket_bytes) if variant == "bucketed" else None
    ddp, state = wrap_ddp(model, setup, hook or "none", own_buckets=hook is None) if variant == "ddp" \
        else (None, None)
    forward_model = ddp if ddp is not None else model
    gen = torch.Generator().manual_seed(setup.data_seed)
    n_params = sum(p.numel() for p in model.parameters())
    first_grads, losses, timings, timelines, calls, sent = None, [], [], [], 0, []
    for step in range(steps):
        if step == 0 and rank == setup.fail_rank:
            raise RuntimeError(f"rank {rank} fails on purpose (DPSetup.fail_rank)")
        x, y = tiny_gpt.get_batch(train_tokens, setup.batch_size, model.config.block_size, gen)   # (B, T)
        x, y = shard(x, rank, world_size), shard(y, rank, world_size)                          # (B/W, T)
        dist.barrier()                       # every rank starts the step together: timings comparable
        timeline = Timeline()
        if sync is not None:
            sync.reset(timeline)
        optimizer.zero_grad(set_to_none=True)
        before = state.total_numel_after_compression if state is not None else 0
        t0 = timeline.now()
        loss = tiny_gpt.lm_loss(forward_model, x, y)
        t1 = timeline.now()
        timeline.add("前向 forward", t0, t1)
        loss.backward()                      # ddp and bucketed communicate in here
        t2 = timeline.now()
        timeline.add("反向 backward", t1, t2)
        if variant == "naive":
            calls = sync_naive(model, world_size, timeline)
        elif variant == "flat":
            calls = sync_flat(model, world_size, timeline)
        elif variant == "bucketed":
            calls = sync.finish()
        t3 = timeline.now()
        if first_grads is None:
            first_grads = [p.grad.clone() for p in model.parameters()]
        sent.append(payload_bytes(hook or "none", n_params, state, before))
        optimizer_step(model, optimizer, setup, step)
        t4 = timeline.now()
        timeline.add("优化器 step", t3, t4)
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)           # for the printout only, outside the timed step
        losses.append(mean_loss.item() / world_size)
        timings.append({"forward": t1 - t0, "backward": t2 - t1, "after_backward": t3 - t2, "step": t4 - t0})
        timelines.append(sorted(timeline.events, key=lambda e: e[1]))
    if ddp is not None:
        calls = None                         # DDP's buckets are its own business (bucket_cap_mb is ours)
    return {"grads": first_grads, "weights": [p.detach().clone() for p in model.parameters()], "losses": losses,
            "timings": timings, "timelines": timelines, "calls": calls, "bytes_per_step": sent}


def local_compute(rank, world_size, setup, train_tokens, steps):
    """The same forward + backward on this rank's slice with no communication at all: the
    compute time the variants are compared with."""
    model, _ = make_model_and_optimizer(setup)
    gen = torch.Generator().manual_seed(setup.data_seed)
    import torch.distributed as dist
    times = []
    for _ in range(steps):
        x, y = tiny_gpt.get_batch(train_tokens, setup.batch_size, model.config.block_size, gen)
        x, y = shard(x, rank, world_size), shard(y, rank, world_size)
        dist.barrier()
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        tiny_gpt.lm_loss(model, x, y).backward()
        times.append(time.perf_counter() - t0)
    return times


@dataclass(frozen=True)
class DPJob:
    """What dp_worker runs: the variants checked against the reference, the hooks, how long."""
    setup: DPSetup
    variants: tuple = VARIANTS
    hooks: tuple = ()                 # DDP comm hooks to train for hook_steps each ("none" = plain DDP)
    hook_steps: int = 0
    timing_steps: int = 0             # extra local-compute steps for the compute baseline
    eval_bpc: bool = False            # bits per character of each hook run at the end (rank 0)


def dp_worker(rank, world_size, job):
    """Every variant (and hook run) of `job` on this rank; see train_variant for the fields."""
    tiny_gpt.use_deterministic_threads()
    train_tokens, val_tokens = tiny_gpt.load_world_tokens(job.setup.world_seed)
    out = {"variants": {}, "hooks": {}}
    for variant in job.variants:
        out["variants"][variant] = train_variant(rank, world_size, job.setup, train_tokens, variant)
    for hook in job.hooks:
        result = train_variant(rank, world_size, job.setup, train_tokens, "ddp", hook=hook, steps=job.hook_steps)
        if job.eval_bpc and rank == 0:
            model = tiny_gpt.make_model(MODEL_CONFIG, seed=job.setup.model_seed)
            with torch.no_grad():
                for p, w in zip(model.parameters(), result["weights"]):
                    p.copy_(w)
            result["bpc"] = tiny_gpt.bits_per_char(model, val_tokens)
        result = {**result, "grads": None, "weights": None}
        out["hooks"][hook] = result
    out["compute"] = local_compute(rank, world_size, job.setup, train_tokens, job.timing_steps) \
        if job.timing_steps else []
    return out


def max_abs_difference(tensors_a, tensors_b):
    return max(float((a - b).abs().max()) for a, b in zip(tensors_a, tensors_b))


def n_params():
    """Parameters of lecture 9's model (lecture_model.MODEL_CONFIG; 83,468 by default)."""
    return sum(p.numel() for p in tiny_gpt.make_model(MODEL_CONFIG).parameters())


def n_tensors():
    """Parameter tensors of lecture 1's model: what the naive variant all-reduces one by one."""
    return len(list(tiny_gpt.make_model(MODEL_CONFIG).parameters()))

