"""The proven optimum of a region-uniform network, by branch and bound over count
matrices (lecture 9, §5.4). On a network that is not region-uniform, a lower bound.
"""

import itertools
import math
from dataclasses import dataclass

import numpy as np

from lecture09.schedule.geo_network import _is_region_uniform
from lecture09.schedule.hand_layouts import _devices_by_region
from lecture09.schedule.layout_cost import PS_PER_S, _checked_order, _cost_tables, _layout_cost_ps

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


MAX_CAPACITY_TABLE = 4_000_000   # entries of _CountMatrixSearch's min-DP tables (8 cities of 4: 9 x 390,625)


PROGRESS_EVERY = 200_000      # rows priced between two progress reports (on_progress)


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
        self.on_progress, self._next_report = None, PROGRESS_EVERY   # (priced, budget), now and then
        # Eq. 2 for a row: a device in region a has rows[a] - 1 peers at home, rows[b] in region b.
        dp_cost = np.where(np.isinf(dp_cost), 0.0, dp_cost)   # a 1-device region has no home peer
        member_sums = self.rows @ dp_cost.T - np.diag(dp_cost)   # (M, K)
        self.row_dp = np.where(self.rows > 0, member_sums, 0.0).max(axis=1)   # (M,)
        self.cheapest_link = pp_cost.min()
        off_diagonal = pp_cost[~np.eye(len(sizes), dtype=bool)]
        self.cheapest_move = off_diagonal.min() if off_diagonal.size else math.inf
        self.all_devices_used = sum(sizes) == n_stages * n_replicas
        self._reach, self._repeat = {}, {}
        self._tables = self._downward_min_dp()

    def _downward_min_dp(self):
        """Tables for later_dp_bound, or None when they would be too large. table[a][c] = the
        cheapest DP of a row that fits capacity c and uses region a (table[K][c]: any row),
        for every capacity vector c <= sizes, flattened in mixed radix sizes + 1: the rows'
        DP costs, then a running minimum along each region's axis."""
        radix = self.sizes + 1
        k = len(radix)
        if (k + 1) * np.prod(radix, dtype=float) > MAX_CAPACITY_TABLE:
            return None
        self._strides = np.cumprod(np.concatenate(([1], radix[:0:-1])))[::-1]   # (K,): C-order strides
        index = self.rows @ self._strides
        tables = np.full((k + 1, int(np.prod(radix))), np.inf)
        for a in range(k + 1):
            use = self.rows[:, a] > 0 if a < k else np.ones(len(self.rows), dtype=bool)
            np.minimum.at(tables[a], index[use], self.row_dp[use])
            table = tables[a].reshape(radix)
            for axis in range(k):
                np.minimum.accumulate(table, axis=axis, out=table)
        return tables

    def later_dp_bound(self, left):
        """(M,) lower bounds on the DP of the stages still to choose, for capacities left (M, K).
        When every device is used, every slot left must go into some later row: a region
        with capacity left needs a row that uses it, so the bound is the largest over those
        regions of the cheapest such row. Otherwise: the cheapest row that fits."""
        if self._tables is None:
            return np.full(len(left), self.row_dp.min())
        index = left @ self._strides
        if not self.all_devices_used:
            return self._tables[-1][index]
        per_region = self._tables[:-1][:, index].T   # (M, K)
        return np.where(left > 0, per_region, 0.0).max(axis=1)

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
        """Lower bounds on the later_cuts cuts after each row y of ys (M, K), capacity `left`.

        A cut costs only about cheapest_link when its two rows are equal (no replica changes
        region), else at least cheapest_move. So count the moves the capacity forces: y can
        repeat at most t times (t * y fits `left`), any later row z at most R times in a run
        (R * z fits); the rows after y's run then need ceil((later_cuts - t) / R) runs, one
        move before each. If y can repeat to the end, that costs later_cuts x its own stay
        (or a move instead). And the next cut must reach regions with capacity left."""
        if later_cuts == 0:
            return np.zeros(len(ys))
        cl, cm = self.cheapest_link, self.cheapest_move
        # The next cut: a replica in region a must go to a region with capacity left.
        reach = np.where(left[:, None, :] > 0, self.pp_cost[None, :, :], np.inf).min(axis=2)   # (M, K)
        forced = np.where(ys > 0, reach, 0.0).max(axis=1) + (later_cuts - 1) * cl
        repeats = np.where(ys > 0, left // np.maximum(ys, 1), later_cuts).min(axis=1)   # t per row
        if self.all_devices_used:   # repeating to the end must fill what is left exactly
            to_end = (later_cuts * ys == left).all(axis=1)
        else:
            to_end = repeats >= later_cuts
        repeats = np.where(to_end, later_cuts, np.minimum(repeats, later_cuts - 1))
        run = np.ones(len(ys))
        if self._tables is not None:
            for times in range(2, later_cuts + 1):   # a row fits `times` times into what is left
                fits = np.isfinite(self._tables[-1][(left // times) @ self._strides])
                run = np.where(fits, times, run)
        else:
            run[:] = later_cuts
        moves = np.ceil((later_cuts - repeats) / run)
        stays = later_cuts - moves                   # cuts priced at cl; 0 × inf is 0 here, not NaN
        with np.errstate(invalid="ignore"):            # the products np.where then drops
            bound = np.where(stays > 0, stays * cl, 0.0) + np.where(moves > 0, moves * cm, 0.0)
        for i in np.flatnonzero(to_end):
            key = tuple(ys[i])
            if key not in self._repeat:
                self._repeat[key] = self.bottlenecks(ys[i], ys[i:i + 1])[0]
            bound[i] = min(later_cuts * self._repeat[key], (later_cuts - 1) * cl + cm)
        return np.maximum(bound, forced)

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
        if self.on_progress is not None and self.priced >= self._next_report:
            self._next_report = self.priced + PROGRESS_EVERY
            self.on_progress(self.priced, budget)
        ys = self.rows[fitting]
        new_dp = np.maximum(self.row_dp[fitting], dp)
        new_pp = pp + (self.bottlenecks(chosen[-1], ys) if chosen else np.zeros(len(ys)))
        later = self.n_stages - 1 - len(chosen)
        bound = (np.maximum(new_dp, self.later_dp_bound(capacity - ys) if later else 0.0) + new_pp
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


def progress_words(priced, budget, elapsed_s):
    """The search's progress line: rows priced of its budget, and the most it can still take
    at the rate so far (an upper bound: branch and bound usually proves the optimum earlier)."""
    most = elapsed_s / priced * (budget - priced) if priced else 0.0
    return (f"分支定界 branch and bound：已算 {priced:,} 行，上限 {budget:,} 行，{elapsed_s:.0f} 秒；"
            f"最多还要约 {most:.0f} 秒 (at most)")


def optimal_layout(net, n_stages, n_replicas, stage_param_bytes, act_bytes, max_rows_priced=10_000_000,
                   n_micro_batches=1, on_progress=None):
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
    dp_rows, pp_rows = _cost_tables(net, n_replicas, stage_param_bytes, act_bytes, n_micro_batches)
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
    search.on_progress = on_progress
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
