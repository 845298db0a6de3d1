"""Pipeline schedules beyond 1F1B: interleaved 1F1B and zero-bubble ZB-H1 (lecture 9, code 4,
demo 5; notes §4.7).

Introduced in lecture 9, §4.7 (比 1F1B 更少的气泡); imported by pipeline_beyond_report.py,
pipeline_real.py and tests/test_pipeline_schedules.py.

- Interleaved 1F1B (Narayanan et al. 2021, §2.2): each of the p ranks holds v model chunks
  ("virtual stages"), so the model is cut into p·v pieces and piece g lives on rank g mod p.
  A chunk's forward takes t_f/v and its backward t_b/v. The bubble shrinks by v:
  bubble time / ideal time = (p − 1)/(v·m), against 1F1B's (p − 1)/m, and each micro-batch
  crosses p·v − 1 cuts in each direction instead of p − 1. The order is Megatron-LM's: the
  forwards go through the chunks in groups of p micro-batches, rank r warms up with
  2(p − r − 1) + (v − 1)·p chunk forwards, then alternates one forward and one backward.
  It needs m to be a multiple of p (Megatron-LM's condition).
- ZB-H1 (Qi et al., ICLR 2024): the backward is split into B, the gradient of the input
  (which the rank below waits for), and W, the gradient of the weights (which nobody waits
  for). Rank r runs 1F1B's order with B in place of the full backward, and from its r-th
  steady-state step on appends the oldest pending W; the W's left at the end follow. With
  T_F = T_B = T_W and m ≥ p the bubble is (p − 1)(T_F + T_B − T_W), a third of 1F1B's
  (p − 1)(T_F + T_B + T_W), and no rank holds more than p micro-batches (1F1B's stage 0).

A program here is a rank's ordered compute ops Op(kind, chunk, micro_batch), kind "F", "B"
(the full backward, or B alone in ZB-H1) or "W". The transfers are implied: a forward of
piece g > 0 receives from piece g − 1, a backward of piece g < p·v − 1 receives from g + 1.
`simulate` runs the programs with the dependencies F(g−1, i) → F(g, i) → B(g, i),
B(g+1, i) → B(g, i) → W(g, i); the real ranks (`pipeline_real.py`) run the same lists.
"""

from collections import namedtuple
from dataclasses import dataclass

SCHEDULES = ("1f1b", "interleaved", "zb-h1")
SCHEDULE_NAMES = {"1f1b": "1F1B", "interleaved": "交错 1F1B（interleaved）", "zb-h1": "ZB-H1（B、W 拆开）"}

Op = namedtuple("Op", "kind chunk micro_batch")


def _check(n_stages, n_micro, n_virtual=1, rank=0):
    if n_stages < 1 or n_micro < 1 or n_virtual < 1:
        raise ValueError(f"need p, m, v >= 1, got p={n_stages}, m={n_micro}, v={n_virtual}")
    if not 0 <= rank < n_stages:
        raise ValueError(f"rank must be in [0, {n_stages}), got {rank}")


def check_interleaved(n_stages, n_micro, n_virtual):
    """Interleaving (v > 1) needs m to be a multiple of p; ValueError otherwise."""
    _check(n_stages, n_micro, n_virtual)
    if n_virtual > 1 and n_micro % n_stages:
        raise ValueError(f"interleaved 1F1B needs the micro-batches m = {n_micro} to be a multiple of "
                         f"the stages p = {n_stages}")


def interleaved_warmup(rank, n_stages, n_micro, n_virtual):
    """Chunk forwards before rank `rank`'s first backward (v = 1: 1F1B's p − r − 1)."""
    if n_virtual == 1:
        return min(n_stages - rank - 1, n_micro)
    return min(2 * (n_stages - rank - 1) + (n_virtual - 1) * n_stages, n_micro * n_virtual)


def interleaved_program(rank, n_stages, n_micro, n_virtual):
    """Rank `rank`'s compute ops under interleaved 1F1B (v = 1: exactly 1F1B's)."""
    check_interleaved(n_stages, n_micro, n_virtual)
    _check(n_stages, n_micro, n_virtual, rank)
    p, v, total = n_stages, n_virtual, n_micro * n_virtual

    def forward(k):                       # k-th chunk forward of this rank
        if v == 1:
            return Op("F", 0, k)
        return Op("F", (k // p) % v, (k // (p * v)) * p + k % p)

    def backward(k):                      # chunks in reverse: the last chunk's backward comes first
        if v == 1:
            return Op("B", 0, k)
        chunk, micro = (k // p) % v, (k // (p * v)) * p + k % p
        return Op("B", v - 1 - chunk, micro)

    warmup = interleaved_warmup(rank, p, n_micro, v)
    ops = [forward(k) for k in range(warmup)]
    for k in range(total - warmup):
        ops += [forward(warmup + k), backward(k)]
    ops += [backward(k) for k in range(total - warmup, total)]
    return ops


def zb_h1_program(rank, n_stages, n_micro):
    """Rank `rank`'s compute ops under ZB-H1 (one chunk per rank)."""
    _check(n_stages, n_micro, 1, rank)
    warmup = min(n_stages - rank - 1, n_micro)
    ops = [Op("F", 0, i) for i in range(warmup)]
    pending = 0                           # the oldest micro-batch whose W has not run

    def backward(step, i):
        nonlocal pending
        ops.append(Op("B", 0, i))
        if step >= rank:                  # rank r holds its first r weight gradients back
            ops.append(Op("W", 0, pending))
            pending += 1

    for step in range(n_micro - warmup):
        ops.append(Op("F", 0, warmup + step))
        backward(step, step)
    for step in range(n_micro - warmup, n_micro):
        backward(step, step)
    ops += [Op("W", 0, i) for i in range(pending, n_micro)]
    return ops


def programs(schedule, n_stages, n_micro, n_virtual=1):
    if schedule == "1f1b":
        return [interleaved_program(r, n_stages, n_micro, 1) for r in range(n_stages)]
    if schedule == "interleaved":
        return [interleaved_program(r, n_stages, n_micro, n_virtual) for r in range(n_stages)]
    if schedule == "zb-h1":
        return [zb_h1_program(r, n_stages, n_micro) for r in range(n_stages)]
    raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")


def op_times(schedule, n_virtual, t_forward, t_b, t_w):
    """Time of one op of each kind. 1F1B and interleaved run B and W as one backward
    (t_b + t_w); a chunk takes 1/v of a whole stage's time."""
    v = n_virtual if schedule == "interleaved" else 1
    if schedule == "zb-h1":
        return {"F": t_forward, "B": t_b, "W": t_w}
    return {"F": t_forward / v, "B": (t_b + t_w) / v}


# ---------------------------------------------------------------------------
# Timeline
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Timeline:
    schedule: str
    n_stages: int
    n_micro: int
    n_virtual: int
    times: dict                 # op kind -> duration
    spans: tuple                # per rank: tuple of (start, end, Op) in execution order

    @property
    def total_time(self):
        return max(end for rank in self.spans for _, end, _ in rank)

    @property
    def ideal_time(self):
        """One rank's compute: m micro-batches through its share of the model."""
        return sum(end - start for start, end, _ in self.spans[0])

    @property
    def bubble_time(self):
        return self.total_time - self.ideal_time

    @property
    def bubble_ratio(self):
        """Bubble time over ideal time, the papers' measure ((p − 1)/m for 1F1B)."""
        return self.bubble_time / self.ideal_time

    @property
    def idle_share(self):
        """Idle share of the step, demo 1's measure ((p − 1)/(m + p − 1) for 1F1B)."""
        return self.bubble_time / self.total_time


def simulate(schedule, n_stages, n_micro, n_virtual=1, t_forward=1.0, t_b=1.0, t_w=1.0):
    """Run every rank's program in order, each op as soon as its inputs exist. Transfers take
    no time. Raises RuntimeError if the programs cannot finish."""
    progs = programs(schedule, n_stages, n_micro, n_virtual)
    v = n_virtual if schedule == "interleaved" else 1
    n_pieces, times = n_stages * v, op_times(schedule, n_virtual, t_forward, t_b, t_w)
    done = {}                                            # (kind, piece, i) -> end time
    position, free_at = [0] * n_stages, [0.0] * n_stages
    spans = [[] for _ in range(n_stages)]
    remaining = sum(len(p) for p in progs)
    while remaining:
        progressed = False
        for r in range(n_stages):
            if position[r] == len(progs[r]):
                continue
            op = progs[r][position[r]]
            g, i = op.chunk * n_stages + r, op.micro_batch
            if op.kind == "F":
                need = [("F", g - 1, i)] if g > 0 else []
            elif op.kind == "B":
                need = [("F", g, i)] + ([("B", g + 1, i)] if g < n_pieces - 1 else [])
            else:
                need = [("B", g, i)]
            if not all(n in done for n in need):
                continue
            start = max([free_at[r]] + [done[n] for n in need])
            end = start + times[op.kind]
            done[(op.kind, g, i)] = free_at[r] = end
            spans[r].append((start, end, op))
            position[r] += 1
            remaining -= 1
            progressed = True
        if not progressed:
            raise RuntimeError("schedule cannot make progress")
    return Timeline(schedule, n_stages, n_micro, v, times, tuple(tuple(s) for s in spans))


# ---------------------------------------------------------------------------
# The papers' formulas
# ---------------------------------------------------------------------------

def bubble_ratio_formula(schedule, n_stages, n_micro, n_virtual=1):
    """Bubble time / ideal time with T_F : T_B : T_W = 1 : 1 : 1 (m ≥ p for ZB-H1):
    1F1B (p − 1)/m; interleaved (p − 1)/(v·m); ZB-H1 (p − 1)/(3m), a third of 1F1B's."""
    _check(n_stages, n_micro, n_virtual)
    p, m = n_stages, n_micro
    if schedule == "1f1b":
        return (p - 1) / m
    if schedule == "interleaved":
        return (p - 1) / (n_virtual * m)
    if schedule == "zb-h1":
        if m < p:
            raise ValueError(f"ZB-H1's formula assumes m >= p, got m={m}, p={p}")
        return (p - 1) / (3 * m)
    raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")


def zb_h1_bubble_time(n_stages, t_forward, t_b, t_w):
    """Qi et al.'s ZB-H1 bubble, (p − 1)(T_F + T_B − T_W); 1F1B's is (p − 1)(T_F + T_B + T_W)."""
    return (n_stages - 1) * (t_forward + t_b - t_w)


def peak_held(program):
    """Most chunk micro-batches whose forward is done and whose last backward op (W where
    there is one, else B) is not."""
    releases = "W" if any(op.kind == "W" for op in program) else "B"
    held = peak = 0
    for op in program:
        held += 1 if op.kind == "F" else -1 if op.kind == releases else 0
        peak = max(peak, held)
    return peak


def peak_held_formula(schedule, rank, n_stages, n_micro, n_virtual=1):
    """Chunk micro-batches rank r holds at its peak: 1F1B min(p − r, m); interleaved
    min(2(p − r − 1) + (v − 1)p + 1, v·m), each 1/v of a stage; ZB-H1 min(p, m) on every rank."""
    _check(n_stages, n_micro, n_virtual, rank)
    if schedule == "1f1b":
        return min(n_stages - rank, n_micro)
    if schedule == "interleaved":
        if n_virtual == 1:
            return min(n_stages - rank, n_micro)
        return min(2 * (n_stages - rank - 1) + (n_virtual - 1) * n_stages + 1, n_micro * n_virtual)
    if schedule == "zb-h1":
        return min(n_stages, n_micro)
    raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")


def messages_per_micro_batch(n_stages, n_virtual=1):
    """Point-to-point messages one micro-batch causes in each direction: the p·v − 1 cuts,
    each between two ranks when p >= 2 (neighbouring pieces sit on neighbouring ranks); with
    p = 1 every piece is on the one rank and nothing is sent."""
    return n_stages * n_virtual - 1 if n_stages > 1 else 0


# ---------------------------------------------------------------------------
# Console timeline
# ---------------------------------------------------------------------------

def _label(op, width):
    """F3 / B3 / W3 (micro-batch 3, counted from 1); the second chunk of a rank is lower case."""
    kind = op.kind if op.chunk % 2 == 0 else op.kind.lower()
    return f"{kind}{op.micro_batch + 1}".ljust(width)[:width]


def timeline_cells(timeline):
    """One list of cells per rank; a cell is the shortest op's time. An op shows its label in
    its first cell and "--" in the rest; idle cells show " .". Returns (rows, cell width)."""
    unit = min(timeline.times.values())
    width = 1 + len(str(timeline.n_micro))
    n_units = round(timeline.total_time / unit)
    rows = []
    for spans in timeline.spans:
        cells = [".".rjust(width)] * n_units
        for start, end, op in spans:
            first = round(start / unit)
            for k in range(first, round(end / unit)):
                cells[k] = _label(op, width) if k == first else "-" * width
        rows.append(cells)
    return rows, width


def timeline_blocks(timeline, prefix_width, max_width):
    """The timeline cut into blocks of whole cells that fit `max_width` columns after a
    prefix of `prefix_width`: a list of blocks, each a list of one string per rank."""
    rows, width = timeline_cells(timeline)
    per_block = max(1, (max_width - prefix_width) // width)
    n_cells = len(rows[0])
    return [["".join(row[k:k + per_block]).rstrip() for row in rows] for k in range(0, n_cells, per_block)]


# ---------------------------------------------------------------------------
# The field's version: PyTorch's torch.distributed.pipelining
# ---------------------------------------------------------------------------

def torch_program(schedule, rank, n_stages, n_micro, n_virtual=1):
    """Rank `rank`'s compute ops as PyTorch 2.13 orders them: ScheduleInterleaved1F1B for
    "interleaved" (v >= 2), ScheduleInterleavedZeroBubble with one stage per rank for
    "zb-h1". Read from the schedule's rank-order builder (a private method of the pinned
    torch) without building stages; its stage index g is chunk·p + rank, as here. 1F1B has no
    such builder in PyTorch (Schedule1F1B runs its loop directly; ScheduleInterleaved1F1B
    with v = 1 warms up with 2(p − r − 1) forwards, not 1F1B's p − r − 1), so it is not here."""
    from torch.distributed.pipelining import schedules as S

    if schedule == "zb-h1":
        cls, v = S.ScheduleInterleavedZeroBubble, 1
    elif schedule == "interleaved" and n_virtual >= 2:
        cls, v = S.ScheduleInterleaved1F1B, n_virtual
    else:
        raise ValueError(f"PyTorch's order is read for 'interleaved' with v >= 2 and 'zb-h1', got {schedule!r}, "
                         f"v={n_virtual}")
    plan = object.__new__(cls)
    plan.pp_group_size, plan.n_local_stages, plan._n_microbatches, plan.rank = n_stages, v, n_micro, rank
    plan.number_of_rounds = max(1, n_micro // n_stages)
    plan.microbatches_per_round = n_micro // plan.number_of_rounds
    kinds = {S._ComputationType.FORWARD: "F", S._ComputationType.FULL_BACKWARD: "B",
             S._ComputationType.BACKWARD_INPUT: "B", S._ComputationType.BACKWARD_WEIGHT: "W"}
    return [Op(kinds[a.computation_type], a.stage_index // n_stages, a.microbatch_index)
            for a in plan._calculate_single_rank_operations(rank) if a is not None]
