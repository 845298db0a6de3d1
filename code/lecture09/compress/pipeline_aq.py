"""AQ-SGD on the real gloo pipeline: the tiny GPT trained on p ranks, one stage each (code 4's
cut and 1F1B program), with the activations sent forward and their gradients sent backward
encoded by the scheme registry (lecture 9, code 11, demo 6; notes §11.7).

AQ-SGD (Wang, Yuan et al., NeurIPS 2022, arXiv 2206.01299) as this module runs it:

- Data: a fixed set of D sequences, each with an id; every epoch a seeded permutation of
  the ids, cut into batches of B, so each sequence comes back every D / B steps (multi-epoch
  fine-tuning is the paper's setting; here the model starts from its random init).
- Forward, at every cut: both ends keep m(ξ), the reconstruction of sequence ξ's activation
  at its previous visit (fp32, one (T, C) tensor per id). A micro-batch whose sequences were
  all seen before sends Q(a − m(ξ)); both ends then set m(ξ) ← m(ξ) + decode(Q(a − m(ξ))),
  by the same code on the same bytes, so the two stores stay bit-for-bit equal, and the
  receiver computes on m(ξ). A first visit sends a itself in fp32 and both ends store it
  (the paper's Algorithm 1 and DS3Lab/AC-SGD: full precision the first time).
- Backward: the gradient of the activation is quantized directly (no delta, no state), at
  the row's backward scheme (int8 by default: AC-SGD's runs send 8-bit gradients with 4-bit
  forward deltas).

Where we simplify (said in the notes too): the store is exact fp32 (AC-SGD keeps fp16, or a
compressed copy in its "delta-lowbits" mode); a micro-batch with any unseen sequence is sent
whole in fp32 (with D a multiple of B every micro-batch is all-new in epoch 1, all-seen
after); AC-SGD's code also sends the backward uncompressed during its warm-up epoch, we
quantize it from the first step (the paper's algorithm); no data parallelism.

Messages really travel encoded: the codes (int8, or two 4-bit codes per uint8) and the fp32
scales are sent as tensors, whose shapes follow from the number of values and the block
size (`wire_layout`), so the receiver allocates them before it receives. Bytes are
counted from those tensors (`parts_bytes`). Clipping is global: the ranks all-reduce their
squared gradient norms, so the fp32 pipeline matches single-process training.
"""

import math
import time
from dataclasses import dataclass, field, replace

import torch

from lecture01 import tiny_gpt
from lecture09.compress.compression_schemes import (DENSE_SUFFIX, SCALE_SUFFIX, SCHEMES, VAL_SUFFIX, Options,
                                                    parts_bytes)
from lecture09.compress.training import Seeds, world_tokens
from lecture09.lecture_model import MODEL_CONFIG
from lecture09.parallel.pipeline import _layers, stage_bounds, stage_program

WIRE_SCHEMES = ("none", "int8-block", "int4-block")


@dataclass(frozen=True)
class AQRow:
    """One row of table (k): what crosses a cut forward and backward."""
    label: str
    forward: str = "none"        # WIRE_SCHEMES
    delta: bool = False          # AQ-SGD: send the change since the sequence's previous visit
    backward: str = "none"       # WIRE_SCHEMES, always direct
    first_fp32: bool = False     # a direct row that sends first visits in fp32, as AQ-SGD does (its control)

    @property
    def fp32_first_visit(self):
        """Does a sequence's first visit travel in fp32? Always for AQ-SGD (it needs m(ξ))."""
        return self.delta or self.first_fp32

    @property
    def key(self):
        return (self.forward, self.delta, self.backward, self.fp32_first_visit)


CONTROL_4BIT = "4 bit 直接，首次 fp32"


def build_rows(backward="int8-block"):
    """Table (k)'s rows: the fp32 pipeline (the baseline of Δ), direct int8 / 4 bit, AQ-SGD
    int8 / 4 bit, and AQ-SGD 4 bit's control: direct 4 bit with every first visit in fp32
    (AQ-SGD 4 bit's epoch 1 and bytes, then Q(a) instead of Q(a − m(ξ))). No int8 control:
    AQ-SGD int8 and direct int8 cannot be told apart, so there is no gain to attribute.
    The compressed rows send the gradients back with `backward`."""
    return [AQRow("不压缩 fp32（基准）"),
            AQRow("int8 直接", "int8-block", False, backward),
            AQRow("4 bit 直接", "int4-block", False, backward),
            AQRow("AQ-SGD int8", "int8-block", True, backward),
            AQRow("AQ-SGD 4 bit", "int4-block", True, backward),
            AQRow(CONTROL_4BIT, "int4-block", False, backward, first_fp32=True)]


@dataclass(frozen=True)
class AQSetup:
    epochs: int = 10
    n_sequences: int = 384       # D
    n_stages: int = 2            # p
    n_micro: int = 4             # micro-batches per step (1F1B)
    block_size: int = 256        # values per scale of int8-block / int4-block
    precision: str = "fp32"
    world_seed: int = 0
    model: object = MODEL_CONFIG
    recipe: tiny_gpt.TrainConfig = tiny_gpt.TrainConfig()     # lecture 1's AdamW, lr schedule, clipping, B = 32
    keep: bool = False           # return final weights and stores (the tests)

    @property
    def batch_size(self):
        return self.recipe.batch_size

    @property
    def steps_per_epoch(self):
        return self.n_sequences // self.batch_size

    @property
    def steps(self):
        return self.epochs * self.steps_per_epoch

    def validate(self):
        if self.n_sequences % self.batch_size:
            raise ValueError(f"D = {self.n_sequences} sequences must be a multiple of the batch {self.batch_size}")
        if self.batch_size % self.n_micro:
            raise ValueError(f"the batch {self.batch_size} must split into {self.n_micro} equal micro-batches")
        stage_bounds(len(_layers(tiny_gpt.make_model(self.model))), self.n_stages)   # raises if too many stages


@dataclass(frozen=True)
class AQResult:
    row: AQRow
    seeds: Seeds
    bpc: float                   # validation bits per character of the final model; nan if diverged
    forward_bytes_per_value: float     # over every cut and every step, first visits included
    backward_bytes_per_value: float
    store_bytes_per_end: int     # what one end of one cut keeps (0 without AQ-SGD)
    losses: tuple
    seconds: float
    weights: dict = field(default=None, repr=False)   # name -> tensor (setup.keep)
    stores: list = field(default=None, repr=False)    # per cut: (sender's, receiver's) store (setup.keep)


# ---------------------------------------------------------------------------
# Data: D sequences with ids, a seeded permutation each epoch
# ---------------------------------------------------------------------------

def training_set(train_tokens, setup, data_seed):
    """(sequences (D, T + 1), ids per step (steps, B)): D windows of the toy world's training
    text, and each epoch a permutation of 0..D−1 cut into batches; one generator, data_seed."""
    gen = torch.Generator().manual_seed(data_seed)
    T = setup.model.block_size
    starts = torch.randint(0, train_tokens.numel() - T, (setup.n_sequences,), generator=gen)
    sequences = train_tokens[starts[:, None] + torch.arange(T + 1)]               # (D, T + 1)
    order = torch.cat([torch.randperm(setup.n_sequences, generator=gen) for _ in range(setup.epochs)])
    return sequences, order.view(setup.steps, setup.batch_size)


# ---------------------------------------------------------------------------
# The wire: encoded parts as tensors, their shapes known to the receiver in advance
# ---------------------------------------------------------------------------

def wire_layout(scheme, n, block_size):
    """[(suffix, shape, dtype)] of the tensors `scheme` sends for n values, in send order."""
    n_blocks = -(-n // block_size)
    if scheme == "none":
        return [(DENSE_SUFFIX, (n,), torch.float32)]
    if scheme == "int8-block":
        return [(VAL_SUFFIX, (n,), torch.int8), (SCALE_SUFFIX, (n_blocks,), torch.float32)]
    if scheme == "int4-block":
        return [(VAL_SUFFIX, (-(-n // 2),), torch.uint8), (SCALE_SUFFIX, (n_blocks,), torch.float32)]
    raise ValueError(f"scheme must be one of {WIRE_SCHEMES}, got {scheme!r}")


def encode(scheme, x, opts):
    return SCHEMES[scheme].encode(x.reshape(-1).contiguous(), opts)


def decode(scheme, parts, shape, opts):
    return SCHEMES[scheme].decode(parts, torch.Size(shape), opts)


def send_parts(parts, dst):
    import torch.distributed as dist
    for tensor in parts.values():
        dist.send(tensor.contiguous(), dst=dst)


def recv_parts(scheme, n, opts, src):
    import torch.distributed as dist
    parts = {}
    for suffix, shape, dtype in wire_layout(scheme, n, opts.block_size):
        parts[suffix] = torch.empty(shape, dtype=dtype)
        dist.recv(parts[suffix], src=src)
    return parts


class CutEnd:
    """One end of one cut, for one row: which scheme a micro-batch travels in, which ids
    were seen and, for AQ-SGD, the store m(ξ) (D, T, C); the control row (first visits in
    fp32, then direct) keeps only the seen ids. The sender and the receiver each hold one
    and call the same `rebuild` on the same parts."""

    def __init__(self, row, opts, n_sequences, act_shape):
        self.row, self.opts = row, opts
        self.store = torch.zeros((n_sequences,) + tuple(act_shape)) if row.delta else None
        self.seen = torch.zeros(n_sequences, dtype=torch.bool)

    def scheme(self, ids):
        """The forward scheme of a micro-batch: fp32 for first visits (AQ-SGD and its control)."""
        if self.row.fp32_first_visit and not bool(self.seen[ids].all()):
            return "none"
        return self.row.forward

    def encode(self, a, ids):
        """The sender's parts for activation a (b, T, C) of sequences ids."""
        scheme = self.scheme(ids)
        if self.row.delta and scheme != "none":
            return encode(scheme, a - self.store[ids], self.opts)
        return encode(scheme, a, self.opts)

    def rebuild(self, parts, ids, shape):
        """What the receiver computes on; both ends update their store here."""
        scheme = self.scheme(ids)
        decoded = decode(scheme, parts, shape, self.opts)
        self.seen[ids] = True
        if not self.row.delta:
            return decoded
        out = decoded if scheme == "none" else self.store[ids] + decoded
        self.store[ids] = out
        return out

    @property
    def store_bytes(self):
        return 0 if self.store is None else self.store.numel() * self.store.element_size()


# ---------------------------------------------------------------------------
# One rank: its stage, trained on every job in turn
# ---------------------------------------------------------------------------

def _clip_global(params, clip_norm):
    """torch's clip_grad_norm_ over every stage's parameters: squared norms all-reduced.
    Returns the global norm (nan or inf if the loss was not finite)."""
    import torch.distributed as dist
    norms = [p.grad.norm() for p in params if p.grad is not None]
    squared = torch.stack(norms).pow(2).sum() if norms else torch.zeros(())
    dist.all_reduce(squared)
    total = squared.sqrt()
    if clip_norm:
        coef = torch.clamp(clip_norm / (total + 1e-6), max=1.0)
        for p in params:
            if p.grad is not None:
                p.grad.mul_(coef)
    return float(total)


def train_stage(stage, n_stages, row, seeds, setup, train_tokens, progress=None):
    """Train stage `stage` of one run; returns (model, its stage's modules, stats)."""
    import torch.distributed as dist
    import torch.nn.functional as F

    first, last = stage == 0, stage == n_stages - 1
    model = tiny_gpt.make_model(setup.model, seeds.model)
    pieces = _layers(model)
    start, stop = stage_bounds(len(pieces), n_stages)[stage]
    mine = torch.nn.Sequential(*pieces[start:stop])
    params = list(mine.parameters())
    config = replace(setup.recipe, data_seed=seeds.data)
    optimizer = tiny_gpt.make_adamw(mine, config)
    sequences, order = training_set(train_tokens, setup, seeds.data)
    m, bf16 = setup.n_micro, setup.precision == "bf16"
    b, T, C = setup.batch_size // m, setup.model.block_size, setup.model.n_embd
    opts = Options(block_size=setup.block_size)
    below = None if first else CutEnd(row, opts, setup.n_sequences, (T, C))     # receiver of cut stage − 1
    above = None if last else CutEnd(row, opts, setup.n_sequences, (T, C))      # sender of cut stage
    program = stage_program("1f1b", stage, n_stages, m)
    stats = {"fwd_bytes": 0, "fwd_values": 0, "bwd_bytes": 0, "bwd_values": 0, "losses": [], "diverged": False}
    mine.train()
    for step in range(setup.steps):
        lr = tiny_gpt.lr_at(step, setup.steps, config.peak_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        ids = order[step].chunk(m)                                        # m × (b,) sequence ids
        xs = [sequences[i, :-1] for i in ids]                             # (b, T) inputs
        ys = [sequences[i, 1:] for i in ids]                              # (b, T) targets
        optimizer.zero_grad(set_to_none=True)
        inputs, outputs, grads_in, loss_sum = {}, {}, {}, 0.0
        for op in program:
            i = op.micro_batch
            if op.kind == "recv_fwd":
                parts = recv_parts(below.scheme(ids[i]), b * T * C, opts, stage - 1)
                inputs[i] = below.rebuild(parts, ids[i], (b, T, C)).requires_grad_()
            elif op.kind == "F":
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    out = mine(xs[i] if first else inputs[i])
                if last:
                    logits = out.float()
                    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), ys[i].reshape(-1))
                    loss_sum += loss.item() / m
                    out = loss / m                      # equal micro-batches: the sum is the batch mean
                outputs[i] = out
            elif op.kind == "send_fwd":
                a = outputs[i].detach().float()
                parts = above.encode(a, ids[i])
                above.rebuild(parts, ids[i], a.shape)   # the sender's store follows the same bytes
                send_parts(parts, stage + 1)
                stats["fwd_bytes"] += parts_bytes(parts)
                stats["fwd_values"] += a.numel()
            elif op.kind == "recv_bwd":
                parts = recv_parts(row.backward, b * T * C, opts, stage + 1)
                grads_in[i] = decode(row.backward, parts, (b, T, C), opts)
            elif op.kind == "B":
                outputs.pop(i).backward(None if last else grads_in.pop(i))
            elif op.kind == "send_bwd":
                g = inputs.pop(i).grad
                parts = encode(row.backward, g, opts)
                send_parts(parts, stage - 1)
                stats["bwd_bytes"] += parts_bytes(parts)
                stats["bwd_values"] += g.numel()
        norm = _clip_global(params, config.clip_norm)
        if not math.isfinite(norm):                 # every rank sees the same norm: all stop together
            stats["diverged"] = True
            break
        optimizer.step()
        stats["losses"].append(loss_sum)
        if progress is not None:
            progress(step + 1)
    stats["ends"] = (below, above)
    return model, stats


def _gather_model(model, n_stages):
    """Every rank's copy of the whole model gets each stage's trained weights (broadcast
    from the rank that trained them), so any rank can evaluate it."""
    import torch.distributed as dist
    pieces = _layers(model)
    for s, (start, stop) in enumerate(stage_bounds(len(pieces), n_stages)):
        for piece in pieces[start:stop]:
            for p in piece.parameters():
                dist.broadcast(p.data, src=s)


def aq_worker(rank, world_size, jobs, setup):
    """Rank body: train every (row, seeds) of jobs in turn; job k is evaluated on rank
    k mod p. Returns one dict per job (this rank's share of the counts)."""
    from lecture01.console import StatusLine
    torch.set_flush_denormal(True)
    train_tokens, val_tokens = world_tokens(setup.world_seed)
    status = StatusLine() if rank == 0 else None
    started, out = time.perf_counter(), []
    for k, (row, seeds) in enumerate(jobs):
        began = time.perf_counter()

        def progress(step, k=k):
            if status is not None:
                status.show(f"  演示 6 训练中：第 {k + 1}/{len(jobs)} 个运行，{step}/{setup.steps} 步"
                            f"（已用 {time.perf_counter() - started:.0f} 秒）")

        model, stats = train_stage(rank, world_size, row, seeds, setup, train_tokens, progress)
        _gather_model(model, world_size)
        bpc = None
        if k % world_size == rank:
            bpc = float("nan") if stats["diverged"] else tiny_gpt.bits_per_char(model, val_tokens)
        below, above = stats.pop("ends")
        result = dict(stats, bpc=bpc, store_bytes=max(e.store_bytes for e in (below, above) if e is not None),
                      seconds=time.perf_counter() - began)
        if setup.keep:
            result["weights"] = {n: p.detach().clone() for n, p in model.named_parameters()}
            result["stores"] = (None if below is None else below.store, None if above is None else above.store)
        out.append(result)
    if status is not None:
        status.clear()
    return out


def train_rows(rows, seeds_list, setup, timeout_s=None):
    """Train every row at every seed pair on setup.n_stages gloo ranks; {row label: [AQResult
    per seed pair]}."""
    from lecture09.ranks.gloo_ranks import run_ranks
    setup.validate()
    jobs = [(row, seeds) for row in rows for seeds in seeds_list]
    timeout = timeout_s or 120 + 0.5 * setup.steps * len(jobs)
    per_rank = run_ranks(aq_worker, setup.n_stages, args=(jobs, setup), timeout_s=timeout)
    table = {row.label: [] for row in rows}
    for k, (row, seeds) in enumerate(jobs):
        shares = [per_rank[r][k] for r in range(setup.n_stages)]
        fwd_values = sum(s["fwd_values"] for s in shares)
        bwd_values = sum(s["bwd_values"] for s in shares)
        stores = [(shares[c]["stores"][1], shares[c + 1]["stores"][0]) for c in range(setup.n_stages - 1)] \
            if setup.keep else None
        table[row.label].append(AQResult(
            row=row, seeds=seeds, bpc=shares[k % setup.n_stages]["bpc"],
            forward_bytes_per_value=sum(s["fwd_bytes"] for s in shares) / max(1, fwd_values),
            backward_bytes_per_value=sum(s["bwd_bytes"] for s in shares) / max(1, bwd_values),
            store_bytes_per_end=max(s["store_bytes"] for s in shares), losses=tuple(shares[-1]["losses"]),
            seconds=max(s["seconds"] for s in shares), weights=shares[0].get("weights"), stores=stores))
    return table


def single_process_reference(seeds, setup):
    """The same model, data and recipe in one process, no pipeline: (losses, weights)."""
    train_tokens, _ = world_tokens(setup.world_seed)
    model = tiny_gpt.make_model(setup.model, seeds.model)
    config = replace(setup.recipe, data_seed=seeds.data)
    optimizer = tiny_gpt.make_adamw(model, config)
    sequences, order = training_set(train_tokens, setup, seeds.data)
    params = list(model.parameters())
    losses = []
    for step in range(setup.steps):
        for group in optimizer.param_groups:
            group["lr"] = tiny_gpt.lr_at(step, setup.steps, config.peak_lr)
        batch = sequences[order[step]]
        optimizer.zero_grad(set_to_none=True)
        loss = tiny_gpt.lm_loss(model, batch[:, :-1], batch[:, 1:], bf16=setup.precision == "bf16")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, config.clip_norm)
        optimizer.step()
        losses.append(loss.item())
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}
