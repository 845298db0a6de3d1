"""Layouts made by hand or at random, and what a layout keeps inside a region
(lecture 9, §5.3): random_assignment, the two hand layouts, count matrices, statistics.
"""

import itertools
from dataclasses import dataclass

from lecture09.schedule.layout_cost import assignment_from_order


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




@dataclass(frozen=True)
class SwapCensus:
    """Every swap of two slots of one layout, priced and none applied: (lower, equal,
    higher) than the layout's total, for swaps inside one region and across regions."""
    same_region: tuple
    cross_region: tuple

    @property
    def n_swaps(self):
        return sum(self.same_region) + sum(self.cross_region)


def swap_census(cost, layout):
    """SwapCensus of `layout` under `cost` (a LayoutCost): all n(n-1)/2 swaps. On a
    region-uniform network a swap inside one region changes nothing (its devices are
    interchangeable), so only the cross-region swaps tell whether a strict local search
    can still descend."""
    state = cost.state(layout)
    region = cost.net["region"]
    counts = {True: [0, 0, 0], False: [0, 0, 0]}
    for i, j in itertools.combinations(range(len(state.order)), 2):
        total = state.propose(i, j)
        side = (total > state.total) - (total < state.total) + 1   # 0 lower, 1 equal, 2 higher
        counts[region[state.order[i]] == region[state.order[j]]][side] += 1
    return SwapCensus(tuple(counts[True]), tuple(counts[False]))
