"""All-to-all from point-to-point messages: every worker sends a different block to every
other (lecture 9 §1.5; code 1's demo 6). An MoE layer's token dispatch to its experts, and
Ulysses' exchange of attention heads for sequence pieces, are this collective.

Worker i's vector of n elements is cut into p blocks as collectives.chunk_bounds cuts it;
block j is meant for worker j. At the end worker j holds block j of every worker, in the
order of the senders: out_j = cat(x_0[j], x_1[j], ..., x_{p-1}[j]) (what
torch.distributed.all_to_all_single returns, given the blocks' sizes as its splits).

A schedule is a list of rounds, each a tuple of Messages; as in collectives.py, a worker
sends at most one message and receives at most one per round, and a message carries the
blocks its sender holds at the start of the round. Two schedules:

    pairwise   round k = 1 .. p-1: worker i sends its block for (i + k) mod p straight there.
               p - 1 rounds of n/p: each worker sends (p - 1)/p · n.
    naive      through the root 0: every worker sends it the p - 1 blocks it does not keep,
               one worker per round; then the root sends each worker its p - 1 blocks.
               2(p - 1) rounds of (p - 1)/p · n; the root sends (p - 1)^2/p · n.

Checked in tests/test_all_to_all.py: the simulation against the definition, bytes and
rounds against the formulas, and both schedules on real gloo ranks against
torch.distributed.all_to_all_single (element for element).
"""

from dataclasses import dataclass

import torch

from lecture09.ranks.collectives import ScheduleStats, chunk_bounds, integer_inputs

ALGORITHMS = ("naive", "pairwise")


@dataclass(frozen=True)
class Message:
    src: int
    dst: int
    blocks: tuple     # ((origin, target), ...): origin's block meant for target, in this order


def pairwise(p):
    return [tuple(Message(i, (i + k) % p, ((i, (i + k) % p),)) for i in range(p)) for k in range(1, p)]


def naive(p):
    gather = [(Message(k, 0, tuple((k, j) for j in range(p) if j != k)),) for k in range(1, p)]
    scatter = [(Message(0, k, tuple((i, k) for i in range(p) if i != k)),) for k in range(1, p)]
    return gather + scatter


def schedule(algorithm, p):
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown all-to-all algorithm {algorithm!r}; expected one of {ALGORITHMS}")
    return pairwise(p) if algorithm == "pairwise" else naive(p)


def formula(algorithm, n_bytes, p):
    """(rounds, path bytes, bytes the busiest worker sends) for n_bytes a multiple of p."""
    if n_bytes % p:
        raise ValueError(f"the formulas assume n_bytes ({n_bytes}) is a multiple of p ({p})")
    block = n_bytes // p
    if algorithm == "pairwise":
        return p - 1, (p - 1) * block, (p - 1) * block
    return 2 * (p - 1), 2 * (p - 1) * (p - 1) * block, (p - 1) * (p - 1) * block


def time_s(algorithm, n_bytes, p, latency_s, bandwidth_bytes_per_s):
    rounds, path, _ = formula(algorithm, n_bytes, p)
    return rounds * latency_s + path / bandwidth_bytes_per_s


def check_rounds(rounds, p):
    """Raise ValueError unless each worker sends and receives at most once per round."""
    for number, rnd in enumerate(rounds):
        senders, receivers = [m.src for m in rnd], [m.dst for m in rnd]
        if len(set(senders)) < len(senders) or len(set(receivers)) < len(receivers):
            raise ValueError(f"round {number}: a worker sends or receives twice")
        if any(m.src == m.dst or not (0 <= m.src < p and 0 <= m.dst < p) for m in rnd):
            raise ValueError(f"round {number}: a message to itself or outside 0..{p - 1}")


def schedule_cost(rounds, n, p, element_bytes=4):
    """Bytes and messages of a schedule for n-element vectors (block j has chunk j's size)."""
    bounds = chunk_bounds(n, p)
    size = [(bounds[j + 1] - bounds[j]) * element_bytes for j in range(p)]
    sent, messages, path = [0] * p, [0] * p, 0
    for rnd in rounds:
        largest = 0
        for m in rnd:
            nbytes = sum(size[target] for _, target in m.blocks)
            sent[m.src] += nbytes
            messages[m.src] += 1
            largest = max(largest, nbytes)
        path += largest
    return ScheduleStats(len(rounds), path, tuple(sent), tuple(messages))


def expected(inputs):
    """out_j = cat(x_0[j], ..., x_{p-1}[j]): the definition."""
    p = len(inputs)
    bounds = chunk_bounds(inputs[0].numel(), p)
    return [torch.cat([x[bounds[j]:bounds[j + 1]] for x in inputs]) for j in range(p)]


def simulate(rounds, inputs):
    """Run a schedule on p in-process workers; each one's output (inputs untouched).
    A message whose sender does not hold a block it names raises ValueError."""
    p = len(inputs)
    bounds = chunk_bounds(inputs[0].numel(), p)
    held = [{(i, j): inputs[i][bounds[j]:bounds[j + 1]].clone() for j in range(p)} for i in range(p)]
    for number, rnd in enumerate(rounds):
        missing = [(m.src, b) for m in rnd for b in m.blocks if b not in held[m.src]]
        if missing:
            raise ValueError(f"round {number}: worker {missing[0][0]} does not hold block {missing[0][1]}")
        arriving = [(m.dst, {b: held[m.src][b].clone() for b in m.blocks}) for m in rnd]
        for dst, blocks in arriving:
            held[dst].update(blocks)
    return [torch.cat([held[j][(i, j)] for i in range(p)]) for j in range(p)]


def run_gloo(rounds, rank, x):
    """This rank's part of a schedule on torch.distributed (an isend/irecv pair per round,
    as collectives.run_plan_gloo); returns its output."""
    import torch.distributed as dist
    p = dist.get_world_size()
    bounds = chunk_bounds(x.numel(), p)
    held = {(rank, j): x[bounds[j]:bounds[j + 1]].clone() for j in range(p)}
    size = {j: bounds[j + 1] - bounds[j] for j in range(p)}
    for rnd in rounds:
        send = next((m for m in rnd if m.src == rank), None)
        receive = next((m for m in rnd if m.dst == rank), None)
        requests = []
        if send is not None:
            payload = torch.cat([held[b] for b in send.blocks])
            requests.append(dist.isend(payload, send.dst))
        if receive is not None:
            incoming = torch.empty(sum(size[target] for _, target in receive.blocks))
            requests.append(dist.irecv(incoming, receive.src))
        for request in requests:
            request.wait()
        if receive is not None:
            parts = incoming.split([size[target] for _, target in receive.blocks])
            held.update(zip(receive.blocks, parts))
    return torch.cat([held[(i, rank)] for i in range(p)])


def check_worker(rank, world_size, n, seed):
    """Both schedules and torch.distributed.all_to_all_single on the same integer inputs; this
    rank's three outputs {name: tensor}. The parent compares them with expected()."""
    import torch.distributed as dist
    inputs = integer_inputs(world_size, n, seed)
    x = inputs[rank]
    out = {name: run_gloo(schedule(name, world_size), rank, x) for name in ALGORITHMS}
    bounds = chunk_bounds(n, world_size)
    mine = bounds[rank + 1] - bounds[rank]
    received = torch.empty(world_size * mine)
    # all_to_all_single with split sizes: gloo's list form needs blocks of one size
    dist.all_to_all_single(received, x.clone(), output_split_sizes=[mine] * world_size,
                           input_split_sizes=[bounds[j + 1] - bounds[j] for j in range(world_size)])
    out["torch.distributed"] = received
    return out


class AllToAll(torch.autograd.Function):
    """all_to_all_single with equal blocks along dim 0 (dim 0 of size p), differentiable: the
    gradient of such an exchange is the same exchange of the gradient (block j of worker i
    came from block i of worker j, and goes back there). Code 4's expert parallelism and
    Ulysses use it as `AllToAll.apply(x)`."""

    @staticmethod
    def forward(ctx, x):
        import torch.distributed as dist

        x = x.contiguous()
        out = torch.empty_like(x)          # of a contiguous x: empty_like keeps a permuted tensor's strides
        dist.all_to_all_single(out, x)
        return out

    @staticmethod
    def backward(ctx, grad):
        import torch.distributed as dist

        grad = grad.contiguous()           # the gradient of a permute arrives permuted
        out = torch.empty_like(grad)
        dist.all_to_all_single(out, grad)
        return out
