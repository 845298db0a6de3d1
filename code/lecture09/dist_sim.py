"""A simulator for scheduling training on slow, uneven networks (lecture 9, code 5).

Introduced in lecture 9, section 7 (去中心化训练 decentralized training), and imported by
05_decentralized.py. It answers one question: given GPUs scattered over regions joined
by slow links, which GPU should hold which piece of the training job?

The job is D_PP pipeline stages (流水线并行 pipeline parallelism) x D_DP replicas
(数据并行 data parallelism): the tasklet (stage s, replica r) runs on one device. The cost
model is Yuan et al., "Decentralized Training of Foundation Models in Heterogeneous
Environments" (NeurIPS 2022, arXiv 2206.01288), Eq. 1-4:

    COMM = DATAP-COST + PIPELINEP-COST                                     (Eq. 1)
    DP(C_s)  = max_{d in C_s} sum_{d' in C_s, d' != d}
               2 * (latency[d][d'] + c_DP / (D_DP * bandwidth[d][d']))      (Eq. 2)
    DATAP-COST = max_s DP(C_s)
    PIPELINEP-COST = sum over the D_PP - 1 cuts of the slowest replica link
               max_r 2 * (latency + c_PP / bandwidth)                       (Eq. 3-4)

c_DP is one stage's gradient in bits (sharded parameter server: each device owns
c_DP / D_DP of it; scatter-reduce plus all-gather gives the 2), c_PP one replica's
activations across one cut (forward activations plus backward gradients give the 2).

Naive first, better second (STYLE habit 4): random layouts, hand layouts, local search
(`local_search`), Yuan et al.'s hybrid genetic algorithm (`genetic_search`), and the
proven optimum of a region-uniform network (`optimal_layout`).

Times inside the evaluators are whole picoseconds (Python ints). Integer sums are exact,
so an incremental swap update gives bit-for-bit the total of a full recomputation, and a
tie ("the cost did not rise") means a real tie. Each link term is rounded once, to the
nearest ps.
"""

import functools
import itertools
import math
import operator
import random
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from lecture09.alpha_beta import alpha_beta_time_s   # the one α–β formula, shared with §5's collectives


# =============================================================================
# Hardware and network figures, with their sources (STYLE habit 7)
# =============================================================================

@dataclass(frozen=True)
class Figure:
    """One hardware or network figure with its unit and where it comes from."""
    value: float
    unit: str
    source: str


FIGURES = {
    "datacenter_gbps": Figure(25.0, "Gbit/s", "Yuan et al. 2022, scenario 1 (data center, across nodes)"),
    "datacenter_latency_ms": Figure(0.1, "ms", "our choice: one data-center hop is 10-100 us; DT-FM's "
                                    "simulated data center uses 0 ms, we keep a small non-zero figure"),
    "spot_gbps": Figure(10.0, "Gbit/s", "Yuan et al. 2022, scenario 2 (spot instances)"),
    "geo_intra_gbps": Figure(2.0, "Gbit/s", "Yuan et al. 2022, scenarios 4-5: within a region"),
    "geo_intra_latency_ms": Figure(5.0, "ms", "Yuan et al. 2022, scenarios 4-5: within a region"),
    "world_inter_gbps_range": Figure((0.3, 1.3), "Gbit/s", "Yuan et al. 2022, scenario 5 (world-wide)"),
    "world_inter_latency_ms_range": Figure((10.0, 250.0), "ms", "Yuan et al. 2022, scenario 5"),
    "v100_fp16_peak_tflops": Figure(125.0, "TFLOP/s", "NVIDIA Tesla V100 (SXM2) datasheet, tensor-core fp16"),
}
DATACENTER_GBPS = FIGURES["datacenter_gbps"].value
DATACENTER_LATENCY_MS = FIGURES["datacenter_latency_ms"].value
GEO_INTRA_GBPS = FIGURES["geo_intra_gbps"].value
GEO_INTRA_LATENCY_MS = FIGURES["geo_intra_latency_ms"].value
V100_FP16_PEAK_FLOPS = FIGURES["v100_fp16_peak_tflops"].value * 1e12

# Measured AWS links (latency ms, bandwidth Gbit/s) from DT-FM (github.com/DS3Lab/DT-FM),
# scheduler/heuristic_evolutionary_solver/config.py, the code of Yuan et al. 2022.
AWS_WORLD_CITIES = ("Oregon", "Virginia", "Ohio", "Tokyo", "Seoul", "London", "Frankfurt", "Ireland")
AWS_WORLD_LINKS = {
    ("Oregon", "Virginia"): (67, 0.79), ("Oregon", "Ohio"): (49, 1.10), ("Oregon", "Tokyo"): (96, 0.523),
    ("Oregon", "Seoul"): (124, 0.46), ("Oregon", "London"): (136, 0.42),
    ("Oregon", "Frankfurt"): (143, 0.404), ("Oregon", "Ireland"): (124, 0.482),
    ("Virginia", "Ohio"): (11, 1.12), ("Virginia", "Tokyo"): (143, 0.524),
    ("Virginia", "Seoul"): (172, 0.500),
    ("Virginia", "London"): (76, 1.16), ("Virginia", "Frankfurt"): (90, 1.02),
    ("Virginia", "Ireland"): (67, 1.05), ("Ohio", "Tokyo"): (130, 0.694), ("Ohio", "Seoul"): (159, 0.529),
    ("Ohio", "London"): (86, 1.05), ("Ohio", "Frankfurt"): (99, 0.799), ("Ohio", "Ireland"): (77, 1.14),
    ("Tokyo", "Seoul"): (34, 1.10), ("Tokyo", "London"): (210, 0.366), ("Tokyo", "Frankfurt"): (223, 0.36),
    ("Tokyo", "Ireland"): (199, 0.465), ("Seoul", "London"): (238, 0.342),
    ("Seoul", "Frankfurt"): (235, 0.358), ("Seoul", "Ireland"): (228, 0.335),
    ("London", "Frankfurt"): (14, 1.14), ("London", "Ireland"): (12, 1.09),
    ("Frankfurt", "Ireland"): (24, 1.08),
}
AWS_REGIONAL_REGIONS = ("California", "Ohio", "Oregon", "Virginia")
AWS_REGIONAL_LINKS = {   # Yuan et al. 2022 scenario 4, same DT-FM file
    ("Virginia", "Oregon"): (67, 1.15), ("Virginia", "California"): (59, 1.05),
    ("Virginia", "Ohio"): (11, 1.12), ("Oregon", "California"): (12, 1.25),
    ("Oregon", "Ohio"): (49, 1.10), ("California", "Ohio"): (52, 1.02),
}

PS_PER_S = 10**12   # evaluator time unit: picoseconds, kept as exact Python ints


# =============================================================================
# Networks
# =============================================================================

class Network(dict):
    """A network of devices, readable like a dict (the draft's `net["region"][device]`).

    Keys: "region" (region index of each device), "region_sizes", "region_names",
    "bandwidth_bps" and "latency_s" (N x N, symmetric, read-only; the diagonal is never
    used since a device does not send to itself), "region_uniform" (every link depends
    only on the two regions), and for region-built networks "region_bandwidth_bps" and
    "region_latency_s" (K x K) and "link_source" (where each region pair's figure came from).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._cost_tables = {}   # (n_replicas, c_DP, c_PP) -> per-device-pair costs, see _cost_tables

    @property
    def n_devices(self):
        return len(self["region"])


def _check_sizes(region_sizes):
    sizes = list(region_sizes)
    if not sizes:
        raise ValueError("region_sizes is empty: a network needs at least one region")
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"every region size must be a positive integer, got {region_sizes!r}")
    return [int(s) for s in sizes]


def _check_range(name, bounds, positive):
    try:
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair (low, high), got {bounds!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi or lo < 0 or (positive and lo <= 0):
        need = "0 < low <= high" if positive else "0 <= low <= high"
        raise ValueError(f"{name} must satisfy {need} (finite), got {bounds!r}")
    return lo, hi


def _check_links(name, values, positive):
    values = np.asarray(values, dtype=float)
    bad = ~np.isfinite(values) | ((values <= 0) if positive else (values < 0))
    if bad.any():
        raise ValueError(f"{name} must be finite and {'> 0' if positive else '>= 0'}, got {values.tolist()}")
    if not np.array_equal(values, values.T):
        raise ValueError(f"{name} must be symmetric")
    return values


def _is_region_uniform(region, bandwidth_bps, latency_s):
    """True when every off-diagonal link depends only on the regions of its two ends."""
    region = np.asarray(region)
    off_diagonal = ~np.eye(len(region), dtype=bool)
    for a in np.unique(region):
        for b in np.unique(region):
            mask = np.outer(region == a, region == b) & off_diagonal
            for table in (bandwidth_bps, latency_s):
                values = table[mask]
                if values.size and (values != values[0]).any():
                    return False
    return True


def network_from_matrices(region, bandwidth_bps, latency_s, region_names=None):
    """A network from per-device tables (bit/s and s); for tests and hand-made networks."""
    region = [int(r) for r in region]
    if region and min(region) < 0:
        raise ValueError("region numbers must be 0, 1, 2, ...")
    n_regions = max(region) + 1 if region else 0
    sizes = [region.count(r) for r in range(n_regions)]
    _check_sizes(sizes)   # also rejects an empty network and unused region numbers
    bandwidth_bps = _check_links("bandwidth_bps", bandwidth_bps, positive=True)
    latency_s = _check_links("latency_s", latency_s, positive=False)
    if bandwidth_bps.shape != (len(region),) * 2 or latency_s.shape != bandwidth_bps.shape:
        raise ValueError(f"link tables must be {len(region)} x {len(region)}")
    for table in (bandwidth_bps, latency_s):
        table.setflags(write=False)   # the cost tables cached on the network assume they never change
    names = list(region_names) if region_names is not None else [f"R{r}" for r in range(n_regions)]
    if len(names) != n_regions:
        raise ValueError(f"{len(names)} region names for {n_regions} regions")
    return Network(region=region, region_sizes=sizes, region_names=names,
                   bandwidth_bps=bandwidth_bps, latency_s=latency_s,
                   region_uniform=_is_region_uniform(region, bandwidth_bps, latency_s))


def network_from_regions(region_sizes, intra_gbps, intra_latency_ms, region_gbps, region_latency_ms,
                         region_names=None, link_source=None):
    """A region-uniform network from K x K tables of region-pair links (Gbit/s, ms).

    Devices are numbered region by region. Off-diagonal entries give the link between
    two regions; the diagonal is ignored: links inside a region get intra_gbps and
    intra_latency_ms.
    """
    sizes = _check_sizes(region_sizes)
    k = len(sizes)
    gbps = np.array(region_gbps, dtype=float)
    ms = np.array(region_latency_ms, dtype=float)
    if gbps.shape != (k, k) or ms.shape != (k, k):
        raise ValueError(f"region tables must be {k} x {k} for {k} regions")
    _check_range("intra_gbps", (intra_gbps, intra_gbps), positive=True)
    _check_range("intra_latency_ms", (intra_latency_ms, intra_latency_ms), positive=False)
    np.fill_diagonal(gbps, intra_gbps)
    np.fill_diagonal(ms, intra_latency_ms)
    region_bps = _check_links("region_gbps", gbps, positive=True) * 1e9
    region_s = _check_links("region_latency_ms", ms, positive=False) / 1e3
    region = np.repeat(np.arange(k), sizes)
    net = network_from_matrices(region, region_bps[np.ix_(region, region)],
                                region_s[np.ix_(region, region)], region_names)
    net.update(region_bandwidth_bps=region_bps, region_latency_s=region_s, link_source=link_source)
    return net


def make_network(region_sizes, intra_gbps, inter_gbps_range, inter_latency_ms_range, seed,
                 intra_latency_ms=DATACENTER_LATENCY_MS):
    """A random geo-distributed network (the draft's demo 1 network).

    Each pair of regions (0,1), (0,2), ..., (K-2,K-1) draws one bandwidth, then each draws
    one latency, uniformly from the ranges with numpy.random.default_rng(seed). Links
    inside a region get intra_gbps and intra_latency_ms; the default 0.1 ms is a data-
    center figure (FIGURES), so geo scenarios should pass GEO_INTRA_LATENCY_MS (5 ms).
    """
    sizes = _check_sizes(region_sizes)
    gbps_lo, gbps_hi = _check_range("inter_gbps_range", inter_gbps_range, positive=True)
    ms_lo, ms_hi = _check_range("inter_latency_ms_range", inter_latency_ms_range, positive=False)
    k = len(sizes)
    pairs = list(itertools.combinations(range(k), 2))
    rng = np.random.default_rng(seed)
    drawn_gbps = rng.uniform(gbps_lo, gbps_hi, size=len(pairs))
    drawn_ms = rng.uniform(ms_lo, ms_hi, size=len(pairs))
    gbps, ms = np.zeros((k, k)), np.zeros((k, k))
    for (a, b), g, m in zip(pairs, drawn_gbps, drawn_ms):
        gbps[a, b] = gbps[b, a] = g
        ms[a, b] = ms[b, a] = m
    source = {pair: f"drawn with seed {seed}" for pair in pairs}
    return network_from_regions(sizes, intra_gbps, intra_latency_ms, gbps, ms, link_source=source)


def _preset(names, links, gpus_per_region, what):
    k = len(names)
    gbps, ms = np.zeros((k, k)), np.zeros((k, k))
    for (a, b), (latency_ms, bandwidth_gbps) in links.items():
        i, j = names.index(a), names.index(b)
        gbps[i, j] = gbps[j, i] = bandwidth_gbps
        ms[i, j] = ms[j, i] = latency_ms
    source = {tuple(sorted((names.index(a), names.index(b)))): what for a, b in links}
    return network_from_regions([gpus_per_region] * k, GEO_INTRA_GBPS, GEO_INTRA_LATENCY_MS,
                                gbps, ms, region_names=names, link_source=source)


def aws_world_network(gpus_per_city=4):
    """Yuan et al.'s world-wide scenario: 8 AWS cities, all 28 city pairs measured."""
    return _preset(AWS_WORLD_CITIES, AWS_WORLD_LINKS, gpus_per_city, "measured (DT-FM config.py)")


def aws_regional_network(gpus_per_region=8):
    """Yuan et al.'s regional scenario: 4 US AWS regions, all 6 pairs measured."""
    return _preset(AWS_REGIONAL_REGIONS, AWS_REGIONAL_LINKS, gpus_per_region, "measured (DT-FM config.py)")


PRESETS = {"aws-world": aws_world_network, "aws-regional": aws_regional_network}


# =============================================================================
# The cost of one layout (Yuan et al. 2022, Eq. 1-4)
# =============================================================================

def _cost_tables(net, n_replicas, stage_param_bytes, act_bytes):
    """Per-device-pair link costs in ps: (dp_rows, pp_rows), nested lists of ints.

    dp_rows[d][e] = 2 * (latency + c_DP / (D_DP * bandwidth)) (Eq. 2's term; each bracket is
    alpha_beta.alpha_beta_time_s, the α–β formula of §5),
    pp_rows[d][e] = 2 * (latency + c_PP / bandwidth) (Eq. 3-4's term); diagonals are 0.
    Cached on the network, keyed by the sizes: the draft evaluates 115,000 layouts.
    """
    if n_replicas < 1 or not (stage_param_bytes >= 0 and act_bytes >= 0):
        raise ValueError("need n_replicas >= 1 and non-negative byte counts")
    key = (n_replicas, float(stage_param_bytes), float(act_bytes))
    bandwidth_bps, latency_s = net["bandwidth_bps"], net["latency_s"]
    cache = getattr(net, "_cost_tables", {})
    hit = cache.get(key)
    if hit is not None and hit[0] is bandwidth_bps and hit[1] is latency_s:
        return hit[2]
    tables = []
    for bits_per_link in (stage_param_bytes * 8 / n_replicas, act_bytes * 8):
        cost_ps = np.rint(2 * alpha_beta_time_s(bits_per_link, latency_s, bandwidth_bps) * PS_PER_S).astype(np.int64)
        np.fill_diagonal(cost_ps, 0)
        tables.append(cost_ps.tolist())   # plain lists: indexing them beats numpy for 8-element groups
    if isinstance(net, Network):
        cache[key] = (bandwidth_bps, latency_s, tuple(tables))
    return tuple(tables)


def _layout_cost_ps(order, dp_rows, pp_rows, n_stages, n_replicas):
    """(DATAP-COST, PIPELINEP-COST) in ps of a layout given as a flat order (see below)."""
    dp = pp = 0
    for s in range(n_stages):
        group = order[s * n_replicas:(s + 1) * n_replicas]
        if n_replicas > 1:   # a group of one has no peers and costs nothing
            peers_of = operator.itemgetter(*group)
            dp = max(dp, max([sum(peers_of(dp_rows[d])) for d in group]))   # the diagonal adds 0
        if s:
            pp += max([pp_rows[d][e] for d, e in zip(previous, group)])
        previous = group
    return dp, pp


def assignment_from_order(order, n_replicas):
    """order[k] is the device of slot (stage k // n_replicas, replica k % n_replicas)."""
    if n_replicas < 1 or len(order) % n_replicas:
        raise ValueError(f"an order of {len(order)} devices does not fill whole stages of {n_replicas}")
    return {(k // n_replicas, k % n_replicas): device for k, device in enumerate(order)}


@functools.lru_cache(maxsize=64)
def _slots(n_stages, n_replicas):
    return tuple((s, r) for s in range(n_stages) for r in range(n_replicas))


@functools.lru_cache(maxsize=64)
def _device_set(n_devices):
    return frozenset(range(n_devices))


def _checked_order(layout, n_stages, n_replicas, n_devices):
    """The flat order of an assignment (dict) or order (sequence); ValueError if malformed."""
    slots = _slots(n_stages, n_replicas)
    if isinstance(layout, Mapping):
        try:
            order = list(map(layout.__getitem__, slots))
        except KeyError as missing:
            raise ValueError(f"assignment has no device for slot {missing.args[0]}") from None
        if len(layout) != len(slots):
            extra = sorted(set(layout) - set(slots))
            raise ValueError(f"assignment has slots outside {n_stages} stages x {n_replicas} replicas: "
                             f"{extra}")
    else:
        order = list(layout)
        if len(order) != len(slots):
            raise ValueError(f"an order needs {len(slots)} devices, got {len(order)}")
    if set(map(type, order)) != {int}:   # numpy integers are fine, 1.0 or "1" are not
        try:
            order = list(map(operator.index, order))
        except TypeError:
            raise ValueError(f"devices must be integers, got {layout!r}") from None
    devices = set(order)
    if len(devices) != len(order):
        raise ValueError("a device is used by two slots")
    if not devices <= _device_set(n_devices):
        raise ValueError(f"unknown devices {sorted(devices - _device_set(n_devices))}: the network has "
                         f"devices 0..{n_devices - 1}")
    return order


def iteration_cost(assignment, net, n_stages, n_replicas, stage_param_bytes, act_bytes):
    """Communication seconds of one iteration: {"dp": s, "pp": s, "total": s}.

    Yuan et al. 2022, Eq. 1-4 (module docstring): "dp" is the slowest stage's
    data-parallel exchange, "pp" the sum over cuts of the slowest replica's activation
    link, total = dp + pp. assignment maps (stage, replica) -> device; a missing or extra
    slot, an unknown device or a device used twice raises ValueError.
    """
    if n_stages < 1:
        raise ValueError("need n_stages >= 1")
    dp_rows, pp_rows = _cost_tables(net, n_replicas, stage_param_bytes, act_bytes)
    order = _checked_order(assignment, n_stages, n_replicas, len(dp_rows))
    dp, pp = _layout_cost_ps(order, dp_rows, pp_rows, n_stages, n_replicas)
    return {"dp": dp / PS_PER_S, "pp": pp / PS_PER_S, "total": (dp + pp) / PS_PER_S}


# =============================================================================
# A fast evaluator: full cost, and the cost after swapping two slots
# =============================================================================

class LayoutCost:
    """Callable cost of a layout (an assignment dict or a flat order), in seconds.

    Gives the same totals as iteration_cost (same integer tables). Its `state(order)`
    evaluates swaps incrementally: swapping two slots changes at most two stages' DP
    groups and at most four pipeline links (two replicas, each at most two cuts), so a
    proposal costs O(D_DP + D_PP) instead of O(D_PP * D_DP^2). local_search and
    genetic_search use it when given one; `evaluations` counts every cost computed.
    """

    def __init__(self, net, n_stages, n_replicas, stage_param_bytes, act_bytes):
        if n_stages < 1:
            raise ValueError("need n_stages >= 1")
        self.net, self.n_stages, self.n_replicas = net, n_stages, n_replicas
        self.stage_param_bytes, self.act_bytes = stage_param_bytes, act_bytes
        self.dp_rows, self.pp_rows = _cost_tables(net, n_replicas, stage_param_bytes, act_bytes)
        if n_stages * n_replicas > len(self.dp_rows):
            raise ValueError(f"{n_stages} x {n_replicas} slots need more than {len(self.dp_rows)} devices")
        self.evaluations = 0

    def order_of(self, layout):
        return _checked_order(layout, self.n_stages, self.n_replicas, len(self.dp_rows))

    def breakdown(self, layout):
        """Like iteration_cost, plus "dp_per_stage" and "pp_per_cut" (seconds)."""
        state = self.state(layout)
        return {"dp": max(state.stage_dp) / PS_PER_S, "pp": sum(state.cut_pp) / PS_PER_S,
                "total": state.total / PS_PER_S,
                "dp_per_stage": [t / PS_PER_S for t in state.stage_dp],
                "pp_per_cut": [t / PS_PER_S for t in state.cut_pp]}

    def __call__(self, layout):
        self.evaluations += 1
        dp, pp = _layout_cost_ps(self.order_of(layout), self.dp_rows, self.pp_rows,
                                 self.n_stages, self.n_replicas)
        return (dp + pp) / PS_PER_S

    def state(self, layout):
        return SwapState(self, self.order_of(layout))


class SwapState:
    """One layout with its partial sums, ready to price and apply swaps of two slots.

    member_sums[s][r]: the Eq. 2 sum of the device in slot (s, r) over its DP peers;
    stage_dp[s] = max(member_sums[s]); links[c][r]: replica r's link across cut c
    (stage c to c + 1); cut_pp[c] = max(links[c]); total = max(stage_dp) + sum(cut_pp) (ps).
    """

    def __init__(self, cost, order):
        self.cost, self.order = cost, list(order)
        n_r, dp_rows, pp_rows = cost.n_replicas, cost.dp_rows, cost.pp_rows
        groups = [self.order[s * n_r:(s + 1) * n_r] for s in range(cost.n_stages)]
        self.member_sums = [[sum(map(dp_rows[d].__getitem__, g)) for d in g] for g in groups]
        self.stage_dp = [max(sums) for sums in self.member_sums]
        self.links = [[pp_rows[d][e] for d, e in zip(g, h)] for g, h in zip(groups, groups[1:])]
        self.cut_pp = [max(links) for links in self.links]
        self.total = max(self.stage_dp) + sum(self.cut_pp)
        self._pending = None

    def _group_after(self, stage, replica, new):
        """member_sums of `stage` after slot (stage, replica) gets device `new` (O(D_DP))."""
        group = self.order[stage * self.cost.n_replicas:(stage + 1) * self.cost.n_replicas]
        old = group[replica]
        row_old, row_new = self.cost.dp_rows[old], self.cost.dp_rows[new]
        peers_of = operator.itemgetter(*group)
        sums = [t - o + n for t, o, n in zip(self.member_sums[stage], peers_of(row_old), peers_of(row_new))]
        sums[replica] = sum(peers_of(row_new)) - row_new[old]
        return sums

    def propose(self, i, j):
        """Total (ps) if slots i and j swapped devices; remembered for accept()."""
        n_r, order, pp_rows = self.cost.n_replicas, self.order, self.cost.pp_rows
        (s1, r1), (s2, r2) = divmod(i, n_r), divmod(j, n_r)
        stage_dp, new_groups = self.stage_dp, ()
        if s1 != s2 and n_r > 1:   # within one stage a swap keeps the group's devices and cost
            group1, group2 = self._group_after(s1, r1, order[j]), self._group_after(s2, r2, order[i])
            new_groups = ((s1, group1), (s2, group2))
            stage_dp = list(stage_dp)
            stage_dp[s1], stage_dp[s2] = max(group1), max(group2)
        order[i], order[j] = order[j], order[i]   # read the new links off the swapped order
        cut_pp, new_links = list(self.cut_pp), []
        for cut in {s1 - 1, s1, s2 - 1, s2}:   # the cuts on either side of both slots
            if 0 <= cut < len(cut_pp):
                links = list(self.links[cut])
                for r in (r1, r2):   # only these two replicas' links can change
                    k = cut * n_r + r
                    links[r] = pp_rows[order[k]][order[k + n_r]]
                new_links.append((cut, links))
                cut_pp[cut] = max(links)
        order[i], order[j] = order[j], order[i]
        total = max(stage_dp) + sum(cut_pp)
        self._pending = (i, j, new_groups, stage_dp, new_links, cut_pp, total)
        return total

    def accept(self):
        """Apply the last proposed swap."""
        i, j, new_groups, stage_dp, new_links, cut_pp, total = self._pending
        self.order[i], self.order[j] = self.order[j], self.order[i]
        (s1, r1), (s2, r2) = divmod(i, self.cost.n_replicas), divmod(j, self.cost.n_replicas)
        if s1 == s2:   # same group, two members trade places
            sums = self.member_sums[s1]
            sums[r1], sums[r2] = sums[r2], sums[r1]
        for s, sums in new_groups:
            self.member_sums[s] = sums
        for cut, links in new_links:
            self.links[cut] = links
        self.stage_dp, self.cut_pp, self.total = stage_dp, cut_pp, total
        self._pending = None


# =============================================================================
# Local search (swap two slots; strict or sideways)
# =============================================================================

def _two_slots(rng, n_slots):
    """Two different slot indices; both search paths draw them the same way."""
    i = rng.randrange(n_slots)
    j = rng.randrange(n_slots - 1)
    return i, j + (j >= i)


def _swap_search(state, rng, n_iters, sideways):
    """The fast path of local_search on a SwapState; returns the number of proposals."""
    n_slots = len(state.order)
    if n_slots < 2:
        return 0
    current = state.total / PS_PER_S
    for _ in range(n_iters):
        candidate = state.propose(*_two_slots(rng, n_slots)) / PS_PER_S
        if candidate < current or (sideways and candidate == current):
            state.accept()
            current = candidate
    return n_iters


def local_search(assignment, cost_fn, rng, n_iters, sideways=False):
    """Swap the devices of two random slots; keep the swap if the cost falls.

    strict (sideways=False): accept only a lower cost; sideways: also accept an equal
    cost, so the search can walk across the plateaus a max-of-groups cost is full of.
    cost_fn: any callable on an assignment dict (the draft passes a closure over
    iteration_cost), or a LayoutCost, which takes the incremental fast path; both paths
    propose the same swaps for the same rng (a random.Random), so they give identical
    results. Returns (best_assignment, best_cost); never worse than the start.
    """
    if isinstance(cost_fn, LayoutCost):
        state = cost_fn.state(assignment)
        cost_fn.evaluations += 1 + _swap_search(state, rng, n_iters, sideways)
        return assignment_from_order(state.order, cost_fn.n_replicas), state.total / PS_PER_S
    slots = sorted(assignment)
    current, current_cost = dict(assignment), cost_fn(assignment)
    for _ in range(n_iters if len(slots) >= 2 else 0):
        i, j = _two_slots(rng, len(slots))
        candidate = dict(current)
        candidate[slots[i]], candidate[slots[j]] = current[slots[j]], current[slots[i]]
        cost = cost_fn(candidate)
        if cost < current_cost or (sideways and cost == current_cost):
            current, current_cost = candidate, cost
    return current, current_cost


# =============================================================================
# The hybrid genetic algorithm (Yuan et al. 2022, after Kang & Moon 2000)
# =============================================================================

@dataclass(frozen=True)
class GeneticResult:
    assignment: dict      # the best layout found
    cost: float           # its total (s)
    evaluations: int      # cost evaluations used (full ones and swap proposals)
    offspring: int        # children bred
    history: tuple        # (evaluations, best cost in s) each time the best improved


def _crossover(order_a, order_b, n_stages, n_replicas, region, rng):
    """A child that inherits whole stages (DP groups) or whole replicas (pipelines).

    A coin picks the unit: stages or replicas. Each unit comes whole from parent A or
    from parent B (at least one from each). B's units keep B's devices except those A's
    units already use; such a slot takes a free device from the same region as B's
    device if there is one (regions are what a layout's cost is made of), else any.
    """
    n_slots = n_stages * n_replicas
    stages = [range(s * n_replicas, (s + 1) * n_replicas) for s in range(n_stages)]   # a DP group's slots
    replicas = [range(r, n_slots, n_replicas) for r in range(n_replicas)]            # a pipeline's slots
    choices = [units for units in (stages, replicas) if len(units) > 1]
    if not choices:
        return list(order_a)
    units = rng.choice(choices)
    from_a = rng.sample(range(len(units)), rng.randint(1, len(units) - 1))
    child = [None] * n_slots
    for u in from_a:
        for k in units[u]:
            child[k] = order_a[k]
    used, clashes = set(d for d in child if d is not None), []
    for k in range(n_slots):
        if child[k] is None:
            if order_b[k] in used:
                clashes.append(k)
            else:
                child[k] = order_b[k]
                used.add(order_b[k])
    free = [d for d in dict.fromkeys(order_a + order_b) if d not in used]
    rng.shuffle(free)
    for k in clashes:
        same_region = [d for d in free if region[d] == region[order_b[k]]]
        child[k] = (same_region or free)[0]
        free.remove(child[k])
    return child


def genetic_search(cost, seed, population=6, max_evaluations=100_000, local_iters=1000):
    """Yuan et al.'s scheduler in small: a hybrid genetic algorithm after Kang & Moon (2000).

    cost: a LayoutCost (the incremental swap evaluator). A population of random layouts,
    each improved by sideways local search; then, until the evaluation budget is spent:
    pick two parents (the better of two random members, twice), breed a child with
    _crossover (whole stages or whole pipelines), improve it by local_iters steps of
    sideways local search, and let it replace the worse parent if it is no worse, or
    else the worst member if it is better. Returns a GeneticResult.
    Simplified from DT-FM: there the crossover is five-point on balanced partitions
    followed by rebalancing, and the local search moves devices by a custom gain; here
    units stay whole by construction and the local search is local_search's swap.
    The search only permutes the devices it starts with (the demo uses every device).
    """
    if population < 2 or local_iters < 0 or max_evaluations < population * (local_iters + 1):
        raise ValueError("need population >= 2 and a budget for at least the first population")
    rng = random.Random(seed)
    n_slots, region = cost.n_stages * cost.n_replicas, cost.net["region"]
    used, history, members = 0, [], []   # members: [total_ps, order]

    def improve(order):
        nonlocal used
        state = cost.state(order)
        used += 1 + _swap_search(state, rng, local_iters, sideways=True)
        if not history or state.total < history[-1][1]:
            history.append((used, state.total))
        return [state.total, state.order]

    def tournament():   # the better of two random members
        m1, m2 = rng.sample(range(population), 2)
        return m1 if members[m1][0] <= members[m2][0] else m2

    for _ in range(population):
        members.append(improve(rng.sample(range(len(region)), n_slots)))
    bred = 0
    while used + local_iters + 1 <= max_evaluations:
        pa, pb = tournament(), tournament()
        if pa == pb:
            continue
        child = improve(_crossover(members[pa][1], members[pb][1], cost.n_stages, cost.n_replicas,
                                   region, rng))
        bred += 1
        if any(child[1] == m[1] for m in members):
            continue   # a copy adds nothing but takes a place
        worse = max(pa, pb, key=lambda m: members[m][0])
        worst = max(range(population), key=lambda m: members[m][0])
        if child[0] <= members[worse][0]:
            members[worse] = child
        elif child[0] < members[worst][0]:
            members[worst] = child
    cost.evaluations += used
    best_total, best_order = min(members)
    return GeneticResult(assignment_from_order(best_order, cost.n_replicas), best_total / PS_PER_S,
                         used, bred,
                         tuple((n, t / PS_PER_S) for n, t in history))


# =============================================================================
# Hand layouts and layout statistics
# =============================================================================

def random_assignment(devices, n_stages, n_replicas, rng):
    """A uniformly random layout on `devices` (rng: random.Random)."""
    order = list(devices)
    if len(order) < n_stages * n_replicas:
        raise ValueError(f"{n_stages} x {n_replicas} slots need {n_stages * n_replicas} devices, "
                         f"got {len(order)}")
    rng.shuffle(order)
    return assignment_from_order(order[:n_stages * n_replicas], n_replicas)


def _devices_by_region(net):
    return [[d for d, r in enumerate(net["region"]) if r == region]
            for region in range(len(net["region_sizes"]))]


def _whole_units_in_regions(net, n_units, unit_size, what):
    """Fill regions one after another with whole units of unit_size devices each."""
    units = []
    for devices in _devices_by_region(net):
        for start in range(0, len(devices) - unit_size + 1, unit_size):
            units.append(devices[start:start + unit_size])
    if len(units) < n_units:
        raise ValueError(f"regions of sizes {net['region_sizes']} hold only {len(units)} whole {what} "
                         f"of {unit_size} devices, {n_units} needed")
    return units[:n_units]


def pipelines_in_regions(net, n_stages, n_replicas):
    """Every replica's whole pipeline inside one region; data parallelism crosses regions."""
    units = _whole_units_in_regions(net, n_replicas, n_stages, "pipelines")
    return {(s, r): units[r][s] for s in range(n_stages) for r in range(n_replicas)}


def dp_groups_in_regions(net, n_stages, n_replicas):
    """Every stage's whole DP group inside one region; pipelines cross regions."""
    units = _whole_units_in_regions(net, n_stages, n_replicas, "DP groups")
    return {(s, r): units[s][r] for s in range(n_stages) for r in range(n_replicas)}


def count_matrix(assignment, net, n_stages, n_replicas):
    """counts[s][k]: how many of stage s's slots sit in region k."""
    counts = [[0] * len(net["region_sizes"]) for _ in range(n_stages)]
    for (s, _), device in assignment.items():
        counts[s][net["region"][device]] += 1
    return counts


def layout_stats(assignment, net, n_stages, n_replicas):
    """Pipeline links inside one region, and DP groups wholly inside one region."""
    region = net["region"]
    same_region_links = sum(region[assignment[(s, r)]] == region[assignment[(s + 1, r)]]
                            for s in range(n_stages - 1) for r in range(n_replicas))
    whole_groups = sum(len({region[assignment[(s, r)]] for r in range(n_replicas)}) == 1
                       for s in range(n_stages))
    return {"pipeline_links_within_region": same_region_links, "pipeline_links": (n_stages - 1) * n_replicas,
            "dp_groups_within_region": whole_groups, "dp_groups": n_stages}


# =============================================================================
# The proven optimum of a region-uniform network
# =============================================================================

@dataclass(frozen=True)
class OptimumResult:
    kind: str             # "optimum" (proven) or "lower bound"
    exact: bool
    cost: float           # s: the optimal total, or a lower bound on every layout's total
    dp: float             # s: DATAP-COST of `counts` (region-level costs)
    pp: float             # s: PIPELINEP-COST of `counts` (region-level costs)
    counts: tuple         # counts[s][k]: slots of stage s in region k, the best found
    assignment: dict      # a concrete layout with these counts
    assignment_cost: float   # s: iteration_cost of `assignment`; equals cost when exact
    rows_priced: int      # candidate rows the branch and bound priced (its effort)
    note: str             # why the result is a bound, when it is one


class _SearchBudgetSpent(Exception):
    """optimal_layout priced its max_rows_priced candidate rows without finishing."""


def _compositions(total, caps):
    """Every row (n_0, ..., n_{K-1}) with sum `total` and n_k <= caps[k]."""
    if len(caps) == 1:
        return [(total,)] if total <= caps[0] else []
    return [(first,) + rest for first in range(min(total, caps[0]) + 1)
            for rest in _compositions(total - first, caps[1:])]


class _CountMatrixSearch:
    """Branch and bound over count matrices, one row (stage) at a time; see optimal_layout.

    Costs are region-level and in ps, held in float64 arrays (exact for integers below
    2**53, and inf marks a region pair without two distinct devices).
    """

    def __init__(self, dp_cost, pp_cost, sizes, n_stages, n_replicas):
        self.pp_cost, self.sizes, self.n_stages = pp_cost, np.array(sizes), n_stages
        self.rows = np.array(_compositions(n_replicas, sizes))   # (M, K): every possible stage row
        # Eq. 2 for a row: a device in region a has rows[a] - 1 peers at home, rows[b] in region b.
        dp_cost = np.where(np.isinf(dp_cost), 0.0, dp_cost)   # a 1-device region has no home peer
        member_sums = self.rows @ dp_cost.T - np.diag(dp_cost)   # (M, K)
        self.row_dp = np.where(self.rows > 0, member_sums, 0.0).max(axis=1)   # (M,)
        self.cheapest_link = pp_cost.min()
        off_diagonal = pp_cost[~np.eye(len(sizes), dtype=bool)]
        self.cheapest_move = off_diagonal.min() if off_diagonal.size else math.inf
        self.all_devices_used = sum(sizes) == n_stages * n_replicas
        self._reach, self._repeat = {}, {}

    def bottlenecks(self, x, ys):
        """For each row y of ys (M, K): the smallest T such that x's replicas can move to y's
        slots over links costing <= T. By Hall's theorem that holds iff every set X of
        regions x uses reaches, over such links, regions holding at least x(X) slots of y."""
        worst = np.zeros(len(ys))
        support = np.flatnonzero(x)
        for n_members in range(1, len(support) + 1):
            for members in itertools.combinations(support, n_members):
                if members not in self._reach:   # regions sorted by their cheapest link from X
                    reach_cost = self.pp_cost[list(members)].min(axis=0)
                    order = np.argsort(reach_cost, kind="stable")
                    self._reach[members] = (reach_cost[order], order)
                costs, order = self._reach[members]
                covered = np.cumsum(ys[:, order], axis=1) >= x[list(members)].sum()   # (M, K)
                np.maximum(worst, costs[covered.argmax(axis=1)], out=worst)
        return worst

    def later_cuts_bound(self, ys, left, later_cuts):
        """Lower bounds on the cuts after each row of ys: either every later row repeats it
        (possible only if the capacity left allows), or some cut moves a replica."""
        if later_cuts == 0:
            return np.zeros(len(ys))
        bound = np.full(len(ys), (later_cuts - 1) * self.cheapest_link + self.cheapest_move)
        repeats = later_cuts * ys == left if self.all_devices_used else later_cuts * ys <= left
        for i in np.flatnonzero(repeats.all(axis=1)):
            key = tuple(ys[i])
            if key not in self._repeat:
                self._repeat[key] = self.bottlenecks(ys[i], ys[i:i + 1])[0]
            bound[i] = min(bound[i], later_cuts * self._repeat[key])
        return bound

    def run(self, budget):
        """(best total, its rows, finished, lower bound) after at most `budget` priced rows."""
        self.best, self.best_rows, self.priced = math.inf, None, 0
        for i in np.flatnonzero((self.n_stages * self.rows <= self.sizes).all(axis=1)):
            # a first upper bound: every stage alike, so every pipeline stays in its region
            stay = self.bottlenecks(self.rows[i], self.rows[i:i + 1])[0]
            total = self.row_dp[i] + (self.n_stages - 1) * stay
            if total < self.best:
                self.best, self.best_rows = total, [self.rows[i]] * self.n_stages
        # path: for each node on the current path, (bound of its next unexplored sibling, its bound)
        self.path = [(math.inf, self.row_dp.min() + (self.n_stages - 1) * self.cheapest_link)]
        try:
            self._extend([], self.sizes, 0.0, 0.0, budget)
            return self.best, self.best_rows, True, self.best
        except _SearchBudgetSpent:
            # A layout not yet ruled out lies below an unexplored sibling of a node on the
            # path, or below the deepest node: the smallest of their bounds bounds the optimum.
            lower = min([self.best, self.path[-1][1]] + [later for later, _ in self.path])
            return self.best, self.best_rows, False, lower

    def _extend(self, chosen, capacity, dp, pp, budget):
        if len(chosen) == self.n_stages:
            if dp + pp < self.best:
                self.best, self.best_rows = dp + pp, list(chosen)
            return
        fitting = np.flatnonzero((self.rows <= capacity).all(axis=1))
        self.priced += len(fitting)
        if self.priced > budget:
            raise _SearchBudgetSpent
        ys = self.rows[fitting]
        new_dp = np.maximum(self.row_dp[fitting], dp)
        new_pp = pp + (self.bottlenecks(chosen[-1], ys) if chosen else np.zeros(len(ys)))
        bound = (np.maximum(new_dp, self.row_dp.min()) + new_pp
                 + self.later_cuts_bound(ys, capacity - ys, self.n_stages - 1 - len(chosen)))
        order = np.argsort(bound, kind="stable")
        for rank, i in enumerate(order):
            if bound[i] >= self.best:
                break
            self.path.append((bound[order[rank + 1]] if rank + 1 < len(order) else math.inf, bound[i]))
            self._extend(chosen + [ys[i]], capacity - ys[i], new_dp[i], new_pp[i], budget)
            self.path.pop()

    def chains(self, counts):
        """Each replica's region at every stage, for a count matrix: cut by cut, send each
        replica over a link within the cut's bottleneck so that the rest stays feasible."""
        chain = [[a for a, n in enumerate(counts[0]) for _ in range(n)]]
        for x, y in zip(counts, counts[1:]):
            limit, x, y, step = self.bottlenecks(x, y[None])[0], x.copy(), y.copy(), []
            for a in chain[-1]:
                x[a] -= 1
                options = [b for b in range(len(y)) if y[b] and self.pp_cost[a][b] <= limit]
                rests = np.array([y - np.eye(len(y), dtype=y.dtype)[b] for b in options])   # (B, K)
                feasible = self.bottlenecks(x, rests) <= limit if x.any() else [True] * len(options)
                b = options[int(np.argmax(feasible))]
                y[b] -= 1
                step.append(b)
            chain.append(step)
        return chain


def optimal_layout(net, n_stages, n_replicas, stage_param_bytes, act_bytes, max_rows_priced=3_000_000):
    """The best layout of a region-uniform network, proven by exhaustive search.

    Why the search space is small: when every link depends only on its two regions,
    devices of one region are interchangeable. A layout then reduces to (1) the count
    matrix counts[s][k], slots of stage s in region k (rows sum to n_replicas, columns
    to at most the region sizes), and (2) for every cut a matching of stage-s slots to
    stage-(s+1) slots. Eq. 2's DP cost of stage s depends only on row s. Matchings at
    different cuts compose into replica chains whatever they are, so each cut is chosen
    alone: its cost is the bottleneck transportation problem between rows s and s+1 (the
    smallest threshold T such that a matching uses only region pairs costing <= T). So
        total = max_s DP(row s) + sum over cuts of bottleneck(row s, row s+1),
    minimised by branch and bound over the rows (Yuan et al. 2022, Eq. 1-4). A concrete
    layout is rebuilt from the counts and checked against iteration_cost.
    Two cases give a lower bound instead (kind "lower bound", exact False, `note` says
    why, `assignment_cost` is then an upper bound): a network that is not region-uniform,
    where each region pair takes its cheapest device-pair link (every term can only
    fall); and a search stopped after max_rows_priced candidate rows.
    """
    dp_rows, pp_rows = _cost_tables(net, n_replicas, stage_param_bytes, act_bytes)
    sizes, region = net["region_sizes"], np.asarray(net["region"])
    if n_stages < 1 or n_stages * n_replicas > len(region):
        raise ValueError(f"{n_stages} x {n_replicas} slots do not fit {len(region)} devices")
    uniform = _is_region_uniform(region, net["bandwidth_bps"], net["latency_s"])
    in_region = [region == k for k in range(len(sizes))]
    off_diagonal = ~np.eye(len(region), dtype=bool)
    region_costs = []   # (K, K) per term: the cheapest device pair of each region pair (ps)
    for rows in (dp_rows, pp_rows):
        table = np.asarray(rows, dtype=float)
        region_costs.append(np.array([[np.min(table[np.outer(a, b) & off_diagonal], initial=np.inf)
                                       for b in in_region] for a in in_region]))
    search = _CountMatrixSearch(*region_costs, sizes, n_stages, n_replicas)
    total, counts, finished, lower = search.run(max(max_rows_priced, n_stages * len(search.rows)))
    dp = max(search.row_dp[(search.rows == row).all(axis=1)][0] for row in counts)
    total, dp = int(total), int(dp)
    pools = _devices_by_region(net)
    chain = search.chains(counts)
    assignment = {(s, r): pools[chain[s][r]].pop(0) for s in range(n_stages) for r in range(n_replicas)}
    real_dp, real_pp = _layout_cost_ps(_checked_order(assignment, n_stages, n_replicas, len(region)),
                                       dp_rows, pp_rows, n_stages, n_replicas)
    if uniform:
        assert (real_dp, real_pp) == (dp, total - dp), "rebuilt layout does not have its computed cost"
    notes = []
    if not uniform:
        notes.append("network not region-uniform: each region pair took its cheapest device link")
    if not finished:
        notes.append(f"search stopped after {search.priced} candidate rows: cost is the smallest bound "
                     "left unexplored, assignment the best layout found")
    exact = uniform and finished
    return OptimumResult("optimum" if exact else "lower bound", exact, (total if exact else lower) / PS_PER_S,
                         dp / PS_PER_S, (total - dp) / PS_PER_S,
                         tuple(tuple(int(n) for n in row) for row in counts),
                         assignment, (real_dp + real_pp) / PS_PER_S, search.priced,
                         "; ".join(notes) or "proven optimum")
