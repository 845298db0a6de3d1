"""The α–β model of communication time (延迟–带宽模型 latency–bandwidth model).

Introduced in lecture 9 §1 (code 1, 01_collectives.py). One formula prices every message
in this lecture: dist_sim (§5, code 5) prices each link of Yuan et al.'s cost model with
the same `alpha_beta_time_s`, and 01_collectives.py and 02_data_parallel.py price
collectives with it.

    T = m·α + n / β        m messages one after another, n bytes (or bits) in all

α is the latency of one message in seconds (start-up: system call, wire, handshake),
β the bandwidth (bytes/s, or bit/s if n is in bits). One message is m = 1 (Hockney,
"The communication challenge for MPP", Parallel Computing 20, 1994).

A collective algorithm runs in rounds: in a round every worker sends at most one message
and receives at most one, all at once, so a round costs α + (its largest message) / β.
With `rounds` rounds and `path_bytes` = the sum over rounds of the largest message, the
whole collective costs rounds·α + path_bytes/β. COLLECTIVE_COSTS gives both for each
algorithm (Thakur, Rabenseifner & Gropp, "Optimization of collective communication
operations in MPICH", Int. J. High Perf. Computing Applications 19(1), 2005, §4; the ring
all-reduce: Patarasuk & Yuan, J. Parallel Distrib. Comput. 69(2), 2009), for p workers
that each hold n bytes, split into p equal chunks (n divisible by p), root 0:

    all-reduce, ring:  2(p−1) rounds of n/p    2(p−1)·α + 2(p−1)/p · n/β
    all-reduce, tree:  2⌈log2 p⌉ rounds of n   (binomial reduce, then binomial broadcast)
    all-reduce, naive: 2(p−1) rounds of n      (gather to root one at a time, send back)

One worker (p = 1) sends nothing and costs nothing.
"""

import numpy as np

COLLECTIVES = ("broadcast", "reduce", "all-reduce", "reduce-scatter", "all-gather")
ALGORITHMS = ("naive", "tree", "ring")


def alpha_beta_time_s(size, latency_s, bandwidth, messages=1):
    """messages·α + size/β: `messages` messages sent one after another, `size` in all.

    size and bandwidth in the same unit (bytes and bytes/s, or bits and bit/s); works
    elementwise on numpy arrays (dist_sim prices a whole table of links at once).
    """
    return messages * latency_s + size / bandwidth


def tree_depth(p):
    """⌈log2 p⌉: rounds of a binomial tree over p workers (0 for one worker)."""
    if p < 1:
        raise ValueError(f"need at least one worker, got p = {p}")
    return (p - 1).bit_length()


def _chunk(n_bytes, p):
    if p < 1:
        raise ValueError(f"need at least one worker, got p = {p}")
    if n_bytes < 0 or n_bytes % p:
        raise ValueError(f"the formulas assume n_bytes ({n_bytes}) is a multiple of p ({p})")
    return n_bytes // p


def collective_cost(collective, algorithm, n_bytes, p):
    """(rounds, path_bytes) of one collective: time = rounds·α + path_bytes/β.

    n_bytes: what each worker holds (the whole vector); p workers; root 0.
    Building blocks: naive = one worker at a time to or from the root; tree = binomial
    tree (round k pairs workers 2^k apart); ring = each worker sends one chunk to its
    right-hand neighbour per round. broadcast-ring is scatter + ring all-gather, reduce-
    ring is ring reduce-scatter + gather (the large-message algorithms of Thakur et al.).
    """
    chunk = _chunk(n_bytes, p)
    steps, depth = p - 1, tree_depth(p)
    gather_bytes = steps * chunk                 # (p−1)/p · n: every chunk but the root's, once
    table = {
        ("broadcast", "naive"): (steps, steps * n_bytes),
        ("broadcast", "tree"): (depth, depth * n_bytes),
        ("broadcast", "ring"): (2 * steps, 2 * gather_bytes),
        ("reduce", "naive"): (steps, steps * n_bytes),
        ("reduce", "tree"): (depth, depth * n_bytes),
        ("reduce", "ring"): (2 * steps, 2 * gather_bytes),
        ("all-reduce", "naive"): (2 * steps, 2 * steps * n_bytes),
        ("all-reduce", "tree"): (2 * depth, 2 * depth * n_bytes),
        ("all-reduce", "ring"): (2 * steps, 2 * gather_bytes),
        ("reduce-scatter", "naive"): (2 * steps, steps * n_bytes + gather_bytes),
        ("reduce-scatter", "tree"): (2 * depth, depth * n_bytes + gather_bytes),
        ("reduce-scatter", "ring"): (steps, gather_bytes),
        ("all-gather", "naive"): (2 * steps, gather_bytes + steps * n_bytes),
        ("all-gather", "tree"): (2 * depth, gather_bytes + depth * n_bytes),
        ("all-gather", "ring"): (steps, gather_bytes),
    }
    try:
        return table[(collective, algorithm)]
    except KeyError:
        raise ValueError(f"unknown collective/algorithm {collective!r}/{algorithm!r}") from None


def collective_time_s(collective, algorithm, n_bytes, p, latency_s, bandwidth_bytes_per_s):
    """α–β time of one collective (see collective_cost)."""
    rounds, path_bytes = collective_cost(collective, algorithm, n_bytes, p)
    return alpha_beta_time_s(path_bytes, latency_s, bandwidth_bytes_per_s, messages=rounds)


def ring_all_reduce_time_s(n_bytes, p, latency_s, bandwidth_bytes_per_s):
    """2(p−1)·α + 2(p−1)/p · n/β (Patarasuk & Yuan 2009): the formula §1 and §2 quote."""
    return collective_time_s("all-reduce", "ring", n_bytes, p, latency_s, bandwidth_bytes_per_s)


def all_reduce_bytes_sent(algorithm, n_bytes, p):
    """Bytes the busiest worker sends in one all-reduce of n_bytes.

    ring: every worker 2(p−1)/p · n (flat in p: below 2n however many workers);
    tree: the root (and every worker with as many children) ⌈log2 p⌉ · n;
    naive: the root sends the sum to each of the others, (p−1) · n.
    """
    chunk = _chunk(n_bytes, p)
    if algorithm == "ring":
        return 2 * (p - 1) * chunk
    if algorithm == "tree":
        return tree_depth(p) * n_bytes
    if algorithm == "naive":
        return (p - 1) * n_bytes
    raise ValueError(f"unknown algorithm {algorithm!r}")


def ring_crossover_bytes(p, latency_s, bandwidth_bytes_per_s):
    """The n at which ring all-reduce's latency term equals its bandwidth term:
    2(p−1)·α = 2(p−1)/p · n/β  →  n = p·α·β. Below it the ring is latency-bound."""
    return p * latency_s * bandwidth_bytes_per_s


def fit_alpha_beta(rounds, path_bytes, times_s):
    """(α in s, β in bytes/s) fitted to measured times: time ≈ rounds·α + path_bytes·(1/β).

    Least squares on the relative error (each equation divided by its measured time):
    measurements span microseconds to tens of milliseconds, and plain least squares
    would fit only the largest. Coefficients are clipped at a tiny positive floor so a
    noisy fit still gives a usable model (a negative latency means nothing).
    """
    rounds = np.asarray(rounds, dtype=float)
    path_bytes = np.asarray(path_bytes, dtype=float)
    times_s = np.asarray(times_s, dtype=float)
    if not (len(rounds) == len(path_bytes) == len(times_s) >= 2):
        raise ValueError("need at least two measurements, as many rounds as bytes as times")
    if (times_s <= 0).any():
        raise ValueError("measured times must be positive")
    design = np.stack([rounds, path_bytes], axis=1) / times_s[:, None]    # (m, 2)
    (alpha_s, inverse_beta), *_ = np.linalg.lstsq(design, np.ones_like(times_s), rcond=None)
    alpha_s = max(float(alpha_s), 1e-12)
    inverse_beta = max(float(inverse_beta), 1e-18)
    return alpha_s, 1.0 / inverse_beta


def model_s(rounds, path_bytes, latency_s, bandwidth_bytes_per_s):
    """The fitted model's time for a (rounds, path_bytes) pair (arrays work too)."""
    return alpha_beta_time_s(np.asarray(path_bytes, dtype=float), latency_s, bandwidth_bytes_per_s,
                             messages=np.asarray(rounds, dtype=float))


def human_bytes(n_bytes):
    """1 KiB = 1024 bytes ... : '1 KiB', '4 MiB', '333,872 B' (exact: powers of two only get a unit)."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= size and n_bytes % size == 0:
            return f"{n_bytes // size} {unit}"
    return f"{n_bytes:,} B"

