"""The communication cost of one layout: Yuan et al. 2022, Eq. 1-4 (lecture 9, §5.2).

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

Times inside the evaluators are whole picoseconds (Python ints). Integer sums are exact,
so an incremental swap update gives bit-for-bit the total of a full recomputation, and a
tie ("the cost did not rise") means a real tie. Each link term is rounded once, to the
nearest ps.
"""

import functools
import operator
from collections.abc import Mapping

import numpy as np

from lecture09.ranks.alpha_beta import alpha_beta_time_s   # the one α–β formula, shared with §1's collectives
from lecture09.schedule.geo_network import Network

PS_PER_S = 10**12   # evaluator time unit: picoseconds, kept as exact Python ints


def _cost_tables(net, n_replicas, stage_param_bytes, act_bytes, n_micro_batches=1):
    """Per-device-pair link costs in ps: (dp_rows, pp_rows), nested lists of ints.

    dp_rows[d][e] = 2 * (latency + c_DP / (D_DP * bandwidth)) (Eq. 2's term; each bracket is
    alpha_beta.alpha_beta_time_s, the α–β formula of §1),
    pp_rows[d][e] = 2 * n_micro_batches * (latency + c_PP / (n_micro_batches * bandwidth)):
    Eq. 3-4's term when the replica's batch crosses the cut as M micro-batches, each one
    message paying the latency once (M = 1 is the paper's formula); diagonals are 0.
    Cached on the network, keyed by the sizes: the draft evaluates 115,000 layouts.
    """
    if n_replicas < 1 or not (stage_param_bytes >= 0 and act_bytes >= 0):
        raise ValueError("need n_replicas >= 1 and non-negative byte counts")
    if isinstance(n_micro_batches, bool) or not isinstance(n_micro_batches, int) or n_micro_batches < 1:
        raise ValueError(f"n_micro_batches must be a positive integer, got {n_micro_batches!r}")
    key = (n_replicas, float(stage_param_bytes), float(act_bytes), n_micro_batches)
    bandwidth_bps, latency_s = net["bandwidth_bps"], net["latency_s"]
    cache = getattr(net, "_cost_tables", {})
    hit = cache.get(key)
    if hit is not None and hit[0] is bandwidth_bps and hit[1] is latency_s:
        return hit[2]
    tables = []
    for messages, bits_per_message in ((1, stage_param_bytes * 8 / n_replicas),
                                       (n_micro_batches, act_bytes * 8 / n_micro_batches)):
        seconds = 2 * messages * alpha_beta_time_s(bits_per_message, latency_s, bandwidth_bps)
        cost_ps = np.rint(seconds * PS_PER_S).astype(np.int64)
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


def iteration_cost(assignment, net, n_stages, n_replicas, stage_param_bytes, act_bytes, n_micro_batches=1):
    """Communication seconds of one iteration: {"dp": s, "pp": s, "total": s}.

    Yuan et al. 2022, Eq. 1-4 (module docstring): "dp" is the slowest stage's
    data-parallel exchange, "pp" the sum over cuts of the slowest replica's activation
    link, total = dp + pp. assignment maps (stage, replica) -> device; a missing or extra
    slot, an unknown device or a device used twice raises ValueError.
    """
    if n_stages < 1:
        raise ValueError("need n_stages >= 1")
    dp_rows, pp_rows = _cost_tables(net, n_replicas, stage_param_bytes, act_bytes, n_micro_batches)
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

    def __init__(self, net, n_stages, n_replicas, stage_param_bytes, act_bytes, n_micro_batches=1):
        if n_stages < 1:
            raise ValueError("need n_stages >= 1")
        self.net, self.n_stages, self.n_replicas = net, n_stages, n_replicas
        self.stage_param_bytes, self.act_bytes = stage_param_bytes, act_bytes
        self.n_micro_batches = n_micro_batches
        self.dp_rows, self.pp_rows = _cost_tables(net, n_replicas, stage_param_bytes, act_bytes, n_micro_batches)
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

    @property
    def all_terms(self):
        """Every member's and every link's cost summed, not only the slowest (ps): a
        tie-break that sees progress the maxima hide (a group whose members get cheaper
        while another group is the slowest)."""
        return sum(map(sum, self.member_sums)) + sum(map(sum, self.links))

    def proposed_all_terms(self):
        """all_terms after the last proposed swap (computed only when asked: on ties)."""
        _, _, new_groups, _, new_links, _, _ = self._pending
        change = sum(sum(sums) - sum(self.member_sums[s]) for s, sums in new_groups)
        change += sum(sum(links) - sum(self.links[cut]) for cut, links in new_links)
        return self.all_terms + change

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
                for r in {r1, r2}:   # only these two replicas' links can change
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


