"""Tensor parallelism: a linear layer split across gloo ranks (lecture 9, code 4).

Introduced in lecture 9, section 4.9 (张量并行 tensor parallelism); imported by
04_pipeline.py and tests/test_pipeline.py. After Megatron-LM (Shoeybi et al. 2019, §4):

- column-parallel linear: W (out, in) is cut by rows, so rank r computes output features
  r·out/t .. (r+1)·out/t of Y = X Wᵀ + b from the whole input. Backward: each rank has
  only its part of dL/dX = dL/dY W, so the parts are summed (all-reduce; Megatron's "f").
- row-parallel linear: W is cut by columns, so rank r multiplies its slice of the input
  features; the partial outputs are summed (all-reduce; Megatron's "g") and the bias is
  added once. Backward needs no communication: dL/dX_r = dL/dY W_r is local.
- a Megatron MLP = column-parallel (no gather) → GELU → row-parallel: one all-reduce in
  the forward, one in the backward; attention the same. So a transformer layer makes
  4 all-reduces of b·s·h values per micro-batch: 2 forward, 2 backward.

Each rank builds the full layer from the same seed and keeps its slice, so the test can
compare with nn.Linear directly. An `AllReduceCounter` given to a layer counts what it
all-reduces.
"""

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class AllReduceCounter:
    """What one rank's layers all-reduce: a layer given a counter records every call."""
    log: list = field(default_factory=list)      # ("forward" | "backward", elements) per call

    def add(self, where, tensor):
        self.log.append((where, tensor.numel()))


def _all_reduce(tensor, where, counter):
    if counter is not None:
        counter.add(where, tensor)
    tensor = tensor.contiguous().clone()       # all_reduce works in place; autograd's tensor must not change
    dist.all_reduce(tensor)
    return tensor


class _CopyToParallel(torch.autograd.Function):
    """Megatron's f: identity forward, all-reduce of the input gradient backward."""

    @staticmethod
    def forward(ctx, x, counter):
        ctx.counter = counter
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad, "backward", ctx.counter), None


class _ReduceFromParallel(torch.autograd.Function):
    """Megatron's g: all-reduce forward (sum the partial outputs), identity backward."""

    @staticmethod
    def forward(ctx, x, counter):
        return _all_reduce(x, "forward", counter)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _GatherFromParallel(torch.autograd.Function):
    """All-gather along the last dim forward; backward keeps this rank's slice."""

    @staticmethod
    def forward(ctx, x):
        world = dist.get_world_size()
        ctx.rank, ctx.width = dist.get_rank(), x.shape[-1]
        pieces = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(pieces, x.contiguous())
        return torch.cat(pieces, dim=-1)                   # (..., world * width)

    @staticmethod
    def backward(ctx, grad):
        return grad[..., ctx.rank * ctx.width:(ctx.rank + 1) * ctx.width]


def _rows(n, rank, world):
    if n % world:
        raise ValueError(f"{n} features do not split evenly over {world} ranks")
    part = n // world
    return slice(rank * part, (rank + 1) * part)


class ColumnParallelLinear(nn.Module):
    """This rank's output features of `full` (an nn.Linear)."""

    def __init__(self, full, rank, world, gather_output=True, counter=None):
        super().__init__()
        self.counter = counter
        mine = _rows(full.out_features, rank, world)
        self.weight = nn.Parameter(full.weight.detach()[mine].clone())           # (out/t, in)
        self.bias = nn.Parameter(full.bias.detach()[mine].clone()) if full.bias is not None else None
        self.gather_output = gather_output

    def forward(self, x):
        y = F.linear(_CopyToParallel.apply(x, self.counter), self.weight, self.bias)   # (..., out/t)
        return _GatherFromParallel.apply(y) if self.gather_output else y


class RowParallelLinear(nn.Module):
    """This rank's input features of `full`; takes this rank's slice of the input."""

    def __init__(self, full, rank, world, counter=None):
        super().__init__()
        self.counter = counter
        self.mine = _rows(full.in_features, rank, world)
        self.weight = nn.Parameter(full.weight.detach()[:, self.mine].clone())   # (out, in/t)
        self.bias = nn.Parameter(full.bias.detach().clone()) if full.bias is not None else None

    def forward(self, x_part):
        y = _ReduceFromParallel.apply(F.linear(x_part, self.weight), self.counter)   # (..., out), summed
        return y + self.bias if self.bias is not None else y


@dataclass(frozen=True)
class TPCase:
    """Shapes and seeds of the check: an MLP h -> ratio·h -> h on a (batch, seq, h) input."""
    hidden: int = 96
    ratio: int = 2
    batch: int = 4
    seq: int = 8
    seed: int = 0


def make_case(case):
    """(fc1, fc2, x, dy_col, h, dy) from one seed: the full layers; the input x of fc1 and an
    upstream gradient for fc1's output; an input h of fc2 alone; an upstream gradient for
    fc2's output (and the MLP's)."""
    gen = torch.Generator().manual_seed(case.seed)
    fc1, fc2 = nn.Linear(case.hidden, case.ratio * case.hidden), nn.Linear(case.ratio * case.hidden, case.hidden)
    with torch.no_grad():
        for p in list(fc1.parameters()) + list(fc2.parameters()):
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    x = torch.randn(case.batch, case.seq, case.hidden, generator=gen)                # (B, T, h)
    dy_col = torch.randn(case.batch, case.seq, case.ratio * case.hidden, generator=gen)
    h = torch.randn(case.batch, case.seq, case.ratio * case.hidden, generator=gen)            # (B, T, ratio·h)
    dy = torch.randn(case.batch, case.seq, case.hidden, generator=gen)
    return fc1, fc2, x, dy_col, h, dy


def _grads(module):
    return {n: p.grad.clone() for n, p in module.named_parameters()}


def reference(case):
    """The single-process answers: column check (fc1 alone), row check (fc2 alone), MLP."""
    fc1, fc2, x, dy_col, h, dy = make_case(case)
    out = {}
    xc = x.clone().requires_grad_()
    y = fc1(xc)
    y.backward(dy_col)
    out["column"] = {"y": y.detach(), "dx": xc.grad, **_grads(fc1)}
    fc1.zero_grad()
    hr = h.clone().requires_grad_()
    y = fc2(hr)
    y.backward(dy)
    out["row"] = {"y": y.detach(), "dx": hr.grad, **_grads(fc2)}
    fc2.zero_grad()
    xm = x.clone().requires_grad_()
    y = fc2(F.gelu(fc1(xm)))
    y.backward(dy)
    out["mlp"] = {"y": y.detach(), "dx": xm.grad, "fc1": _grads(fc1), "fc2": _grads(fc2)}
    return out


def tp_worker(rank, world_size, case):
    """Rank body: the three checks with this rank's slices. Returns per check the output,
    the input gradient (the slice for the row-parallel input), this rank's weight and bias
    gradients, and the all-reduces made (count, elements, per direction)."""
    fc1, fc2, x, dy_col, h, dy = make_case(case)
    out = {}

    counter = AllReduceCounter()
    col = ColumnParallelLinear(fc1, rank, world_size, gather_output=True, counter=counter)
    xc = x.clone().requires_grad_()
    y = col(xc)                                     # (B, T, ratio·h), gathered
    y.backward(dy_col)
    out["column"] = {"y": y.detach(), "dx": xc.grad, "weight": col.weight.grad, "bias": col.bias.grad,
                     "all_reduces": counter.log}

    counter = AllReduceCounter()
    row = RowParallelLinear(fc2, rank, world_size, counter=counter)
    h_part = h[..., row.mine].clone().requires_grad_()          # this rank's input features (B, T, ratio·h/t)
    y = row(h_part)
    y.backward(dy)
    out["row"] = {"y": y.detach(), "dx": h_part.grad, "weight": row.weight.grad, "bias": row.bias.grad,
                  "all_reduces": counter.log}

    counter = AllReduceCounter()
    up = ColumnParallelLinear(fc1, rank, world_size, gather_output=False, counter=counter)
    down = RowParallelLinear(fc2, rank, world_size, counter=counter)
    xm = x.clone().requires_grad_()
    y = down(F.gelu(up(xm)))                        # GELU works feature by feature: no communication
    y.backward(dy)
    out["mlp"] = {"y": y.detach(), "dx": xm.grad, "fc1": {"weight": up.weight.grad, "bias": up.bias.grad},
                  "fc2": {"weight": down.weight.grad, "bias": down.bias.grad}, "all_reduces": counter.log}
    return out


def assemble(results, case):
    """Put the ranks' slices back together in the layout of the full layers."""
    world = len(results)
    col = {"y": results[0]["column"]["y"], "dx": results[0]["column"]["dx"],
           "weight": torch.cat([r["column"]["weight"] for r in results]),          # rows stacked: (out, in)
           "bias": torch.cat([r["column"]["bias"] for r in results])}
    row = {"y": results[0]["row"]["y"], "dx": torch.cat([r["row"]["dx"] for r in results], dim=-1),
           "weight": torch.cat([r["row"]["weight"] for r in results], dim=1),      # columns side by side
           "bias": results[0]["row"]["bias"]}
    mlp = {"y": results[0]["mlp"]["y"], "dx": results[0]["mlp"]["dx"],
           "fc1": {"weight": torch.cat([r["mlp"]["fc1"]["weight"] for r in results]),
                   "bias": torch.cat([r["mlp"]["fc1"]["bias"] for r in results])},
           "fc2": {"weight": torch.cat([r["mlp"]["fc2"]["weight"] for r in results], dim=1),
                   "bias": results[0]["mlp"]["fc2"]["bias"]}}
    same_everywhere = all(torch.equal(r[k]["y"], results[0][k]["y"]) for r in results for k in ("column", "row", "mlp"))
    return {"column": col, "row": row, "mlp": mlp, "world": world, "same_on_every_rank": same_everywhere}
