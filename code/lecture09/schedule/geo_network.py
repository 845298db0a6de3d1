"""Networks of devices in regions: built from tables, drawn at random, or a measured preset
(lecture 9, §5.2; used by layout_cost, layout_search and layout_optimum).

A network is a dict (the draft reads `net["region"][device]`) of per-device link tables
(bandwidth bit/s, latency s) and the region of every device. `make_network` draws the
demo's random geo-distributed network; `PRESETS` builds Yuan et al.'s measured AWS
networks, one per row of network_figures.PRESET_ROWS.
"""

import functools
import itertools
import math

import numpy as np

from lecture09.schedule.network_figures import (DATACENTER_LATENCY_MS, GEO_INTRA_GBPS, GEO_INTRA_LATENCY_MS,
                                       PRESET_ROWS)


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
        self._cost_tables = {}   # (n_replicas, c_DP, c_PP, M) -> per-device-pair costs, see _cost_tables

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



def preset_network(name, gpus_per_region=None):
    """The measured network of PRESET_ROWS[name]; links inside a region get Yuan et al.'s
    within-region figures (2 Gbit/s, 5 ms)."""
    names, links, default_gpus, source = PRESET_ROWS[name]
    k = len(names)
    gbps, ms = np.zeros((k, k)), np.zeros((k, k))
    for (a, b), (latency_ms, bandwidth_gbps) in links.items():
        i, j = names.index(a), names.index(b)
        gbps[i, j] = gbps[j, i] = bandwidth_gbps
        ms[i, j] = ms[j, i] = latency_ms
    link_source = {tuple(sorted((names.index(a), names.index(b)))): source for a, b in links}
    return network_from_regions([gpus_per_region or default_gpus] * k, GEO_INTRA_GBPS, GEO_INTRA_LATENCY_MS,
                                gbps, ms, region_names=names, link_source=link_source)


def aws_world_network(gpus_per_city=4):
    """Yuan et al.'s world-wide scenario: 8 AWS cities, all 28 city pairs measured."""
    return preset_network("aws-world", gpus_per_city)


def aws_regional_network(gpus_per_region=8):
    """Yuan et al.'s regional scenario: 4 US AWS regions, all 6 pairs measured."""
    return preset_network("aws-regional", gpus_per_region)


# name -> a function building that network (the script's --network choices)
PRESETS = {name: functools.partial(preset_network, name) for name in PRESET_ROWS}
