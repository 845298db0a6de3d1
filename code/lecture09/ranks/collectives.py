"""Collectives built from point-to-point messages: naive, tree and ring (lecture 9 §1).

Introduced in lecture 9, code 1 (01_collectives.py), which imports this module: a
numbered script cannot be imported, and the worker functions that gloo_ranks runs on
real ranks must live in an importable module.

An algorithm is a *schedule*: a list of rounds, each a tuple of Transfers. In a round a
worker sends at most one message and receives at most one; every send reads the state at
the start of the round, and receives are applied at its end. Each worker's vector of n
elements is cut into p chunks (sizes as torch.tensor_split: the first n mod p chunks one
element longer), and a Transfer moves the chunks [lo, hi) from src to dst, which either
adds them (reduce) or overwrites its own (copy). The same schedule runs two ways:

- simulate(): p workers in this process, tensors in a list (any p), counting bytes;
- run_schedule_gloo(): on real torch.distributed ranks, one isend/irecv pair per round.

Root 0 throughout. The α–β formulas for these schedules are in alpha_beta.py; the tests
check that schedule_cost() of every schedule equals alpha_beta.collective_cost().
"""

import sys
import time
from dataclasses import dataclass

import torch

from lecture09.ranks.alpha_beta import ALGORITHMS, COLLECTIVES, tree_depth


@dataclass(frozen=True)
class Transfer:
    src: int
    dst: int
    lo: int          # first chunk sent
    hi: int          # one past the last chunk sent
    reduce: bool     # True: dst adds what arrives (reduce); False: dst overwrites (copy)


# =============================================================================
# Building blocks (root 0)
# =============================================================================

def naive_reduce(p):
    """Everyone sends the whole vector to the root, one per round (the root has one link)."""
    return [(Transfer(i, 0, 0, p, True),) for i in range(1, p)]


def naive_broadcast(p):
    return [(Transfer(0, i, 0, p, False),) for i in range(1, p)]


def naive_scatter(p):
    """The root sends chunk i to worker i."""
    return [(Transfer(0, i, i, i + 1, False),) for i in range(1, p)]


def naive_gather(p):
    """Worker i sends its chunk i to the root."""
    return [(Transfer(i, 0, i, i + 1, False),) for i in range(1, p)]


def tree_reduce(p):
    """Binomial tree: in round k, worker r (r mod 2^(k+1) = 2^k) sends its partial sum to r − 2^k."""
    return [tuple(Transfer(r, r - 2**k, 0, p, True) for r in range(2**k, p, 2**(k + 1)))
            for k in range(tree_depth(p))]


def tree_broadcast(p):
    """tree_reduce backwards: the number of workers that have the vector doubles each round."""
    return [tuple(Transfer(r, r + 2**k, 0, p, False) for r in range(0, p, 2**(k + 1)) if r + 2**k < p)
            for k in reversed(range(tree_depth(p)))]


def tree_scatter(p):
    """Like tree_broadcast, but each child gets only the chunks of its subtree [c, c + 2^k)."""
    return [tuple(Transfer(r, r + 2**k, r + 2**k, min(r + 2**(k + 1), p), False)
                  for r in range(0, p, 2**(k + 1)) if r + 2**k < p)
            for k in reversed(range(tree_depth(p)))]


def tree_gather(p):
    """tree_scatter backwards: each worker passes up the chunks its subtree has gathered."""
    return [tuple(Transfer(r, r - 2**k, r, min(r + 2**k, p), False) for r in range(2**k, p, 2**(k + 1)))
            for k in range(tree_depth(p))]


def ring_reduce_scatter(p):
    """p − 1 rounds; in round s worker i sends chunk (i − s − 1) mod p to worker i + 1, which
    adds it. Chunk c starts at worker c + 1 and picks up one more worker's share per hop,
    so after p − 1 hops it arrives, complete, at worker c: worker i owns the sum of chunk i."""
    return [tuple(Transfer(i, (i + 1) % p, (i - s - 1) % p, (i - s - 1) % p + 1, True) for i in range(p))
            for s in range(p - 1)]


def ring_all_gather(p):
    """p − 1 rounds; in round s worker i passes chunk (i − s) mod p on to worker i + 1."""
    return [tuple(Transfer(i, (i + 1) % p, (i - s) % p, (i - s) % p + 1, False) for i in range(p))
            for s in range(p - 1)]


SCHEDULES = {
    ("broadcast", "naive"): lambda p: naive_broadcast(p),
    ("broadcast", "tree"): lambda p: tree_broadcast(p),
    ("broadcast", "ring"): lambda p: naive_scatter(p) + ring_all_gather(p),
    ("reduce", "naive"): lambda p: naive_reduce(p),
    ("reduce", "tree"): lambda p: tree_reduce(p),
    ("reduce", "ring"): lambda p: ring_reduce_scatter(p) + naive_gather(p),
    ("all-reduce", "naive"): lambda p: naive_reduce(p) + naive_broadcast(p),
    ("all-reduce", "tree"): lambda p: tree_reduce(p) + tree_broadcast(p),
    ("all-reduce", "ring"): lambda p: ring_reduce_scatter(p) + ring_all_gather(p),
    ("reduce-scatter", "naive"): lambda p: naive_reduce(p) + naive_scatter(p),
    ("reduce-scatter", "tree"): lambda p: tree_reduce(p) + tree_scatter(p),
    ("reduce-scatter", "ring"): lambda p: ring_reduce_scatter(p),
    ("all-gather", "naive"): lambda p: naive_gather(p) + naive_broadcast(p),
    ("all-gather", "tree"): lambda p: tree_gather(p) + tree_broadcast(p),
    ("all-gather", "ring"): lambda p: ring_all_gather(p),
}
assert set(SCHEDULES) == {(c, a) for c in COLLECTIVES for a in ALGORITHMS}


def schedule(collective, algorithm, p):
    """The rounds of one collective on p workers (an empty list for p = 1)."""
    if p < 1:
        raise ValueError(f"need at least one worker, got p = {p}")
    try:
        return SCHEDULES[(collective, algorithm)](p)
    except KeyError:
        raise ValueError(f"unknown collective/algorithm {collective!r}/{algorithm!r}") from None


# =============================================================================
# What each collective must produce
# =============================================================================

def chunk_bounds(n, p):
    """Offsets of the p chunks of an n-element vector: chunk c is [bounds[c], bounds[c+1])."""
    sizes = [n // p + (c < n % p) for c in range(p)]
    bounds = [0]
    for size in sizes:
        bounds.append(bounds[-1] + size)
    return bounds


def expected(collective, inputs):
    """Per worker: (expected vector, mask of the elements the collective defines there).

    broadcast: everyone gets the root's vector; reduce: the root gets the sum;
    all-reduce: everyone gets the sum; reduce-scatter: worker i gets chunk i of the sum;
    all-gather: worker i contributes its chunk i, everyone gets all the chunks.
    """
    p, n = len(inputs), inputs[0].numel()
    bounds = chunk_bounds(n, p)
    total = torch.stack(inputs).sum(dim=0)
    gathered = torch.cat([inputs[i][bounds[i]:bounds[i + 1]] for i in range(p)])
    everywhere = torch.ones(n, dtype=torch.bool)
    out = []
    for i in range(p):
        if collective == "broadcast":
            out.append((inputs[0], everywhere))
        elif collective == "reduce":
            out.append((total, everywhere if i == 0 else torch.zeros(n, dtype=torch.bool)))
        elif collective == "all-reduce":
            out.append((total, everywhere))
        elif collective == "reduce-scatter":
            mask = torch.zeros(n, dtype=torch.bool)
            mask[bounds[i]:bounds[i + 1]] = True
            out.append((total, mask))
        elif collective == "all-gather":
            out.append((gathered, everywhere))
        else:
            raise ValueError(f"unknown collective {collective!r}")
    return out


def matches(collective, inputs, outputs):
    """True if every worker holds exactly what the collective defines (torch.equal)."""
    return all(torch.equal(out[mask], want[mask])
               for out, (want, mask) in zip(outputs, expected(collective, inputs)))


def integer_inputs(p, n, seed=0):
    """Small integers stored as float32: every sum is exact in any order, so a result can
    be compared with torch.equal, not within a tolerance."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(-8, 9, (n,), generator=gen).float() for _ in range(p)]


# =============================================================================
# Running a schedule: simulated, and on real ranks
# =============================================================================

@dataclass(frozen=True)
class ScheduleStats:
    rounds: int
    path_bytes: int               # sum over rounds of the largest message: the α–β bandwidth term
    bytes_sent: tuple             # per worker
    messages_sent: tuple          # per worker


def schedule_cost(rounds, n, p, element_bytes=4):
    """Bytes and messages of a schedule for an n-element vector (no data moved)."""
    bounds = chunk_bounds(n, p)
    sent, messages = [0] * p, [0] * p
    path = 0
    for rnd in rounds:
        largest = 0
        for t in rnd:
            size = (bounds[t.hi] - bounds[t.lo]) * element_bytes
            sent[t.src] += size
            messages[t.src] += 1
            largest = max(largest, size)
        path += largest
    return ScheduleStats(len(rounds), path, tuple(sent), tuple(messages))


def check_rounds(rounds, p):
    """Raise ValueError unless every worker sends at most one and receives at most one
    message per round (the α–β round model assumes one link per worker)."""
    for number, rnd in enumerate(rounds):
        senders = [t.src for t in rnd]
        receivers = [t.dst for t in rnd]
        if len(set(senders)) < len(senders) or len(set(receivers)) < len(receivers):
            raise ValueError(f"round {number}: a worker sends or receives twice")
        if any(not (0 <= w < p) for w in senders + receivers) or any(t.src == t.dst for t in rnd):
            raise ValueError(f"round {number}: a transfer to itself or outside 0..{p - 1}")


def simulate(rounds, inputs):
    """Run a schedule on p in-process workers; returns their final vectors (inputs untouched)."""
    p = len(inputs)
    bounds = chunk_bounds(inputs[0].numel(), p)
    state = [x.clone() for x in inputs]
    for rnd in rounds:
        arriving = [(t, state[t.src][bounds[t.lo]:bounds[t.hi]].clone()) for t in rnd]   # snapshot first
        for t, data in arriving:
            target = state[t.dst][bounds[t.lo]:bounds[t.hi]]
            if t.reduce:
                target += data
            else:
                target.copy_(data)
    return state


def rank_plan(rounds, rank, bounds):
    """One rank's part of a schedule: per round (send (dst, a, b) or None, receive (src, a, b, reduce) or None)."""
    plan = []
    for rnd in rounds:
        send = receive = None
        for t in rnd:
            if t.src == rank:
                send = (t.dst, bounds[t.lo], bounds[t.hi])
            if t.dst == rank:
                receive = (t.src, bounds[t.lo], bounds[t.hi], t.reduce)
        plan.append((send, receive))
    return plan


def run_plan_gloo(plan, buf, group=None):
    """Execute one rank's plan on torch.distributed: an isend/irecv pair per round, then wait.

    (Not batch_isend_irecv: with gloo it can hang. Peers are global ranks; the groups
    01_collectives.py uses are ranks 0..p−1, where group and global ranks coincide.)"""
    import torch.distributed as dist

    for send, receive in plan:
        requests = []
        if send is not None:
            dst, a, b = send
            requests.append(dist.isend(buf[a:b], dst, group=group))      # a view: 1-D slices are contiguous
        if receive is not None:
            src, a, b, _ = receive
            incoming = torch.empty(b - a, dtype=buf.dtype)
            requests.append(dist.irecv(incoming, src, group=group))
        for request in requests:
            request.wait()
        if receive is not None:
            if receive[3]:
                buf[a:b] += incoming
            else:
                buf[a:b] = incoming
    return buf


# =============================================================================
# Workers for gloo_ranks.run_ranks (module level: spawn pickles them by name)
# =============================================================================

def check_worker(rank, world_size, n, seed):
    """Every collective x algorithm on world_size real ranks, on integer inputs; returns this
    rank's outputs {(collective, algorithm): tensor}. The parent compares them with expected()."""
    inputs = integer_inputs(world_size, n, seed)
    bounds = chunk_bounds(n, world_size)
    out = {}
    for key in SCHEDULES:
        plan = rank_plan(schedule(*key, world_size), rank, bounds)
        out[key] = run_plan_gloo(plan, inputs[rank].clone())
    return out


@dataclass(frozen=True)
class TimingJob:
    """What timing_worker measures: every p in world_sizes (groups 0..p−1 of the ranks
    started), every size, my three all-reduce algorithms and torch.distributed.all_reduce."""
    world_sizes: tuple
    sizes: tuple                  # elements (fp32) per all-reduce
    repeats: int
    check_elements: int = 10      # first, every collective x algorithm once on this many integers
    warmup: int = 1
    progress: bool = False        # rank 0 prints a line on stderr after each p
    algorithms: tuple = ALGORITHMS + ("gloo",)


def timing_worker(rank, world_size, job):
    """Seconds per repeat of every (p, size, algorithm) for this rank, and correctness flags:
    {"times": {(p, n, alg): [s, ...]}, "correct": {(p, alg): bool} (the timed all-reduces),
    "checks": {p: bool} (all 15 collective x algorithm schedules on integer inputs)}.

    Every rank calls new_group for every p (torch requires it), but only ranks < p take part
    in p's measurements; the others wait at the next global barrier.
    """
    import torch.distributed as dist

    groups = {p: dist.new_group(list(range(p))) for p in job.world_sizes}
    times, correct, checks = {}, {}, {}
    for p in job.world_sizes:
        group = groups[p]
        if rank < p:
            inputs = integer_inputs(p, job.check_elements, seed=p)
            bounds = chunk_bounds(job.check_elements, p)
            checks[p] = True
            for key in SCHEDULES:
                got = run_plan_gloo(rank_plan(schedule(*key, p), rank, bounds), inputs[rank].clone(), group=group)
                want, mask = expected(key[0], inputs)[rank]
                checks[p] = checks[p] and torch.equal(got[mask], want[mask])
            for n in job.sizes:
                inputs = integer_inputs(p, n, seed=p * 1000 + n % 997)
                want = torch.stack(inputs).sum(dim=0)
                plans = {alg: rank_plan(schedule("all-reduce", alg, p), rank, chunk_bounds(n, p))
                         for alg in job.algorithms if alg != "gloo"}
                samples = {alg: [] for alg in job.algorithms}
                # Algorithms take turns within each repeat: a burst of load from elsewhere on the
                # machine then slows all of them, not just the one that happened to be running.
                for repeat in range(job.warmup + job.repeats):
                    for alg in job.algorithms:
                        buf = inputs[rank].clone()
                        dist.barrier(group=group)
                        started = time.perf_counter()
                        if alg == "gloo":
                            dist.all_reduce(buf, group=group)     # SUM; gloo's own algorithm
                        else:
                            run_plan_gloo(plans[alg], buf, group=group)
                        elapsed = time.perf_counter() - started
                        if repeat >= job.warmup:
                            samples[alg].append(elapsed)
                        correct[(p, alg)] = correct.get((p, alg), True) and torch.equal(buf, want)
                for alg in job.algorithms:
                    times[(p, n, alg)] = samples[alg]
            if rank == 0 and job.progress:
                print(f"（p = {p} 测完 measured）", file=sys.stderr, flush=True)
        dist.barrier()
    return {"times": times, "correct": correct, "checks": checks}
