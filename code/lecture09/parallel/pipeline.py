"""Pipeline parallelism: schedules, their bubble and memory, and a real pipeline on gloo
(lecture 9, code 4).

Introduced in lecture 9, section 4 (流水线并行 pipeline parallelism); imported by
04_pipeline.py, parallel_plan.py and tests/test_pipeline.py.

The model is cut into p stages, one per rank; a batch is cut into m micro-batches.
Two schedules (the names of Huang et al. 2019 and Narayanan et al. 2019/2021):

- GPipe, all-forward-all-backward (AFAB): every stage runs the m forwards, then the m
  backwards. Stage s holds the activations of all m micro-batches at its peak.
- 1F1B: stage s runs p - s - 1 forwards (warm-up), then alternates one forward and one
  backward (steady state), then runs the remaining backwards (cool-down). A micro-batch's
  activations are freed as soon as its backward is done, so stage s holds at most p - s.

Both take (m + p - 1)·(t_f + t_b) time units, of which each stage computes m·(t_f + t_b):
the bubble (idle share) is (p - 1)/(m + p - 1) for both. 1F1B saves memory, not time.

One program per stage (`stage_program`) is the single source of truth: a list of ops
("F", i) forward of micro-batch i, ("B", i) backward, and the transfers ("send_fwd", i),
("recv_fwd", i), ("send_bwd", i), ("recv_bwd", i). The same list drives the timeline
(`simulate`), the deadlock check (`check_rendezvous`) and the real ranks (`pipeline_worker`).

Blocking send/recv on gloo is a rendezvous: a send of a large tensor returns only once
the receiver has posted the matching recv (two ranks that both send first wait forever;
measured with 4 MB tensors). So where two neighbours exchange one tensor each way (1F1B's
steady state: activations go up, gradients come down), the lower stage sends first and
the upper stage receives first. `check_rendezvous` proves the programs never deadlock.
"""

from collections import namedtuple
from dataclasses import dataclass

SCHEDULES = ("gpipe", "1f1b")
SCHEDULE_NAMES = {"gpipe": "GPipe（全前向-全反向 AFAB）", "1f1b": "1F1B"}

Op = namedtuple("Op", "kind micro_batch")
COMPUTE = ("F", "B")


def _check(n_stages, n_micro, stage=0):
    if n_stages < 1 or n_micro < 1:
        raise ValueError(f"need at least 1 stage and 1 micro-batch, got p={n_stages}, m={n_micro}")
    if not 0 <= stage < n_stages:
        raise ValueError(f"stage must be in [0, {n_stages}), got {stage}")


def stage_program(schedule, stage, n_stages, n_micro):
    """The ordered ops of one stage (see the module docstring)."""
    _check(n_stages, n_micro, stage)
    first, last = stage == 0, stage == n_stages - 1
    ops = []

    def forward(i, receive=True, send=True):
        if receive and not first:
            ops.append(Op("recv_fwd", i))
        ops.append(Op("F", i))
        if send and not last:
            ops.append(Op("send_fwd", i))

    def backward(j, receive=True, send=True):
        if receive and not last:
            ops.append(Op("recv_bwd", j))
        ops.append(Op("B", j))
        if send and not first:
            ops.append(Op("send_bwd", j))

    if schedule == "gpipe":
        for i in range(n_micro):
            forward(i)
        for j in range(n_micro):
            backward(j)
        return ops
    if schedule != "1f1b":
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    n_warmup = min(n_stages - stage - 1, n_micro)
    n_steady = n_micro - n_warmup
    # Warmup: fill the pipeline; stage s runs ahead of stage s + 1 by one micro-batch.
    for i in range(n_warmup):
        forward(i)
    # Steady state: one forward, one backward. Each forward's output goes up while the
    # oldest micro-batch's gradient comes down; a neighbour pair swaps them lower-first.
    if n_steady and not first:
        ops.append(Op("recv_fwd", n_warmup))
    for k in range(n_steady):
        i, j = n_warmup + k, k
        forward(i, receive=False, send=False)
        if not last:
            ops += [Op("send_fwd", i), Op("recv_bwd", j)]       # with stage + 1: we are the lower
        backward(j, receive=False, send=False)
        if not first:
            if k < n_steady - 1:
                ops.append(Op("recv_fwd", i + 1))               # with stage - 1: we are the upper
            ops.append(Op("send_bwd", j))
    # Cooldown: drain the backwards of the warm-up micro-batches.
    for j in range(n_steady, n_micro):
        backward(j)
    return ops


def programs(schedule, n_stages, n_micro):
    return [stage_program(schedule, s, n_stages, n_micro) for s in range(n_stages)]


def compute_order(program):
    return [op for op in program if op.kind in COMPUTE]


# ---------------------------------------------------------------------------
# Timeline, bubble and memory
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Timeline:
    n_stages: int
    n_micro: int
    t_forward: float
    t_backward: float
    spans: tuple            # per stage: tuple of (start, end, Op) in execution order

    @property
    def total_time(self):
        return max(end for stage in self.spans for _, end, _ in stage)

    def busy_time(self, stage):
        return sum(end - start for start, end, _ in self.spans[stage])

    @property
    def bubble_fraction(self):
        """Idle share of p stages x total time (the same on every stage for these schedules)."""
        busy = sum(self.busy_time(s) for s in range(self.n_stages))
        return 1 - busy / (self.n_stages * self.total_time)


def simulate(schedule, n_stages, n_micro, t_forward=1.0, t_backward=2.0):
    """Run every stage's compute ops in program order, each as soon as its input exists:
    F(s, i) after F(s-1, i); B(s, i) after B(s+1, i) (and F(s, i)). Transfers take no time."""
    _check(n_stages, n_micro)
    orders = [compute_order(p) for p in programs(schedule, n_stages, n_micro)]
    done = {}                                 # (kind, stage, i) -> end time
    position = [0] * n_stages
    free_at = [0.0] * n_stages
    spans = [[] for _ in range(n_stages)]
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(n_stages):
            if position[s] == len(orders[s]):
                continue
            op = orders[s][position[s]]
            if op.kind == "F":
                need = [("F", s - 1, op.micro_batch)] if s > 0 else []
            else:
                need = [("F", s, op.micro_batch)] + ([("B", s + 1, op.micro_batch)] if s < n_stages - 1 else [])
            if not all(n in done for n in need):
                continue
            start = max([free_at[s]] + [done[n] for n in need])
            end = start + (t_forward if op.kind == "F" else t_backward)
            done[(op.kind, s, op.micro_batch)] = end
            free_at[s] = end
            spans[s].append((start, end, op))
            position[s] += 1
            remaining -= 1
            progressed = True
        if not progressed:
            raise RuntimeError("schedule cannot make progress")     # an op waits for one that never runs
    return Timeline(n_stages, n_micro, t_forward, t_backward, tuple(tuple(s) for s in spans))


def bubble_fraction(n_stages, n_micro):
    """(p - 1)/(m + p - 1): GPipe's and 1F1B's idle share (Huang et al. 2019)."""
    _check(n_stages, n_micro)
    return (n_stages - 1) / (n_micro + n_stages - 1)


def peak_activations(program):
    """Most micro-batches whose forward is done and backward is not, at any moment."""
    held = peak = 0
    for op in compute_order(program):
        held += 1 if op.kind == "F" else -1
        peak = max(peak, held)
    return peak


def peak_activations_formula(schedule, stage, n_stages, n_micro):
    """GPipe: m on every stage; 1F1B: min(p - s, m) on stage s."""
    _check(n_stages, n_micro, stage)
    return n_micro if schedule == "gpipe" else min(n_stages - stage, n_micro)


def timeline_rows(timeline, cell=3):
    """Text rows of a timeline, one per stage: every time unit is `cell` columns wide,
    a forward shows "F3" (micro-batch 3, counted from 1) and a backward "B3" in its first
    unit; the remaining units of a longer op show "--", idle units " ."."""
    unit = min(timeline.t_forward, timeline.t_backward)
    n_units = round(timeline.total_time / unit)
    rows = []
    for spans in timeline.spans:
        cells = [".".rjust(cell - 1).ljust(cell)] * n_units
        for start, end, op in spans:
            first = round(start / unit)
            for k in range(first, round(end / unit)):
                text = f"{op.kind}{op.micro_batch + 1}" if k == first else "--"
                cells[k] = text.ljust(cell)
        rows.append("".join(cells).rstrip())
    return rows


# ---------------------------------------------------------------------------
# Deadlock check: blocking sends and receives meet in pairs
# ---------------------------------------------------------------------------

PEER = {"send_fwd": 1, "recv_fwd": -1, "send_bwd": -1, "recv_bwd": 1}
MATCH = {"send_fwd": "recv_fwd", "send_bwd": "recv_bwd"}


def check_rendezvous(progs):
    """Run the programs with rendezvous semantics (a send completes only together with the
    peer's matching recv, the strictest blocking behaviour). Raises RuntimeError on a
    deadlock or when a receiver expects another micro-batch than the sender sends;
    returns the number of transfers."""
    position = [0] * len(progs)
    transfers = 0

    def head(s):
        while position[s] < len(progs[s]) and progs[s][position[s]].kind in COMPUTE:
            position[s] += 1                  # compute never blocks
        return progs[s][position[s]] if position[s] < len(progs[s]) else None

    while True:
        heads = [head(s) for s in range(len(progs))]
        if all(h is None for h in heads):
            return transfers
        for s, op in enumerate(heads):
            if op is None or op.kind not in MATCH:
                continue
            peer = s + PEER[op.kind]
            other = heads[peer]
            if other is not None and other.kind == MATCH[op.kind]:
                if other.micro_batch != op.micro_batch:
                    raise RuntimeError(f"stage {s} sends micro-batch {op.micro_batch}, stage {peer} expects "
                                       f"{other.micro_batch}")
                position[s] += 1
                position[peer] += 1
                transfers += 1
                break
        else:
            raise RuntimeError(f"deadlock: stages wait at {heads}")


# ---------------------------------------------------------------------------
# A real pipeline of the tiny GPT on gloo ranks
# ---------------------------------------------------------------------------

def _layers(model):
    """The model as a list of pieces a pipeline can cut between: embedding, blocks, head."""
    import torch.nn as nn

    class Embed(nn.Module):
        def __init__(self, tok_emb):
            super().__init__()
            self.tok_emb = tok_emb

        def forward(self, idx):
            return self.tok_emb(idx)                 # (b, T, C)

    class Head(nn.Module):
        def __init__(self, ln_f, head):
            super().__init__()
            self.ln_f, self.head = ln_f, head

        def forward(self, x):
            return self.head(self.ln_f(x))           # (b, T, vocab)

    return [Embed(model.tok_emb)] + list(model.blocks) + [Head(model.ln_f, model.head)]


def stage_bounds(n_pieces, n_stages):
    """Contiguous [start, stop) of pieces per stage, as even as possible (earlier stages
    take the extra piece)."""
    if not 1 <= n_stages <= n_pieces:
        raise ValueError(f"cannot cut {n_pieces} pieces into {n_stages} stages")
    base, extra = divmod(n_pieces, n_stages)
    bounds, start = [], 0
    for s in range(n_stages):
        stop = start + base + (s < extra)
        bounds.append((start, stop))
        start = stop
    return bounds


def stage_param_names(model, n_stages, stage):
    """Names (as in model.named_parameters()) of the parameters stage `stage` holds."""
    pieces = _layers(model)
    start, stop = stage_bounds(len(pieces), n_stages)[stage]
    mine = {id(p) for piece in pieces[start:stop] for p in piece.parameters()}
    return [name for name, p in model.named_parameters() if id(p) in mine]


@dataclass(frozen=True)
class PipelineRun:
    config: object               # tiny_gpt.GPTConfig
    model_seed: int = 0
    n_micro: int = 8


def pipeline_worker(rank, world_size, run, x, y, schedules=SCHEDULES):
    """Rank body: stage `rank` of the tiny GPT. For each schedule, one forward-backward of
    the batch x, y (B, T) split into run.n_micro micro-batches; returns {schedule:
    {"grads": {name: grad}, "loss": float (last stage), "peak": micro-batches held}}."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from lecture01 import tiny_gpt

    n_stages, stage = world_size, rank
    first, last = stage == 0, stage == n_stages - 1
    results = {}
    for schedule in schedules:
        model = tiny_gpt.make_model(run.config, run.model_seed)
        pieces = _layers(model)
        start, stop = stage_bounds(len(pieces), n_stages)[stage]
        mine = torch.nn.Sequential(*pieces[start:stop])
        xs, ys = x.chunk(run.n_micro), y.chunk(run.n_micro)           # m tensors of (b, T)
        act_shape = (xs[0].shape[0], xs[0].shape[1], run.config.n_embd)   # what crosses a cut: (b, T, C)
        inputs, outputs, grads_in = {}, {}, {}
        loss_sum, peak = 0.0, 0
        for op in stage_program(schedule, stage, n_stages, run.n_micro):
            i = op.micro_batch
            if op.kind == "recv_fwd":
                buf = torch.empty(act_shape)
                dist.recv(buf, src=stage - 1)
                inputs[i] = buf.requires_grad_()
            elif op.kind == "F":
                out = mine(xs[i] if first else inputs[i])
                if last:
                    logits = out.reshape(-1, out.size(-1))             # (b, T, vocab) -> (b·T, vocab)
                    loss = F.cross_entropy(logits, ys[i].reshape(-1))  # targets (b, T) -> (b·T,)
                    loss_sum += loss.item() / run.n_micro
                    out = loss / run.n_micro       # equal micro-batches: the sum of these is the batch mean
                outputs[i] = out
                peak = max(peak, len(outputs))
            elif op.kind == "send_fwd":
                dist.send(outputs[i].detach().contiguous(), dst=stage + 1)
            elif op.kind == "recv_bwd":
                grads_in[i] = torch.empty(act_shape)
                dist.recv(grads_in[i], src=stage + 1)
            elif op.kind == "B":
                out = outputs.pop(i)               # its activations are freed after this backward
                out.backward(None if last else grads_in.pop(i))
            elif op.kind == "send_bwd":
                dist.send(inputs.pop(i).grad.contiguous(), dst=stage - 1)
        names = set(stage_param_names(model, n_stages, stage))
        results[schedule] = {"grads": {n: p.grad.clone() for n, p in model.named_parameters() if n in names},
                             "loss": loss_sum if last else None, "peak": peak}
    return results


def unsplit_gradients(run, x, y):
    """The reference: the whole model, the whole batch, one backward. (loss, {name: grad})."""
    from lecture01 import tiny_gpt

    model = tiny_gpt.make_model(run.config, run.model_seed)
    loss = tiny_gpt.lm_loss(model, x, y)
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}
