"""Searching for a good layout: local search (strict or sideways) and Yuan et al.'s hybrid
genetic algorithm (lecture 9, §5.3). Naive first, better second (STYLE habit 4).

Both move devices between the slots of a layout and price each move with
layout_cost.LayoutCost's incremental swap evaluator.
"""

import itertools
import math
import random
from dataclasses import dataclass

from lecture09.schedule.layout_cost import PS_PER_S, LayoutCost, assignment_from_order


def _two_slots(rng, n_slots):
    """Two different slot indices; both search paths draw them the same way."""
    i = rng.randrange(n_slots)
    j = rng.randrange(n_slots - 1)
    return i, j + (j >= i)


@dataclass
class SearchTrace:
    """What one local search did (filled in when passed to local_search).

    region: the network's region of every device, to tell a swap inside one region
    (which changes nothing on a region-uniform network) from one across regions.
    """
    region: list
    improvements: int = 0            # accepted swaps that lowered the total
    ties_same_region: int = 0        # accepted equal-cost swaps inside one region
    ties_cross_region: int = 0       # accepted equal-cost swaps across regions
    improvements_after_ties: int = 0  # improvements right after >= 1 cross-region tie
    _ties_since = 0

    def record(self, state, i, j, lowered):
        if lowered:
            self.improvements += 1
            self.improvements_after_ties += self._ties_since > 0
            self._ties_since = 0
        elif self.region[state.order[i]] == self.region[state.order[j]]:
            self.ties_same_region += 1
        else:
            self.ties_cross_region += 1
            self._ties_since += 1


def _swap_search(state, rng, n_iters, sideways, guided=False, trace=None):
    """The fast path of local_search on a SwapState; returns the number of proposals.
    guided: a tie in the total is accepted only if the sum of all terms does not rise."""
    n_slots = len(state.order)
    if n_slots < 2:
        return 0
    current = state.total
    for _ in range(n_iters):
        i, j = _two_slots(rng, n_slots)
        candidate = state.propose(i, j)
        if candidate < current or (sideways and candidate == current
                                   and (not guided or state.proposed_all_terms() <= state.all_terms)):
            if trace is not None:
                trace.record(state, i, j, candidate < current)
            state.accept()
            current = candidate
    return n_iters


def local_search(assignment, cost_fn, rng, n_iters, sideways=False, trace=None):
    """Swap the devices of two random slots; keep the swap if the cost falls.

    strict (sideways=False): accept only a lower cost; sideways: also accept an equal
    cost, so the search can walk across the plateaus a max-of-groups cost is full of.
    cost_fn: any callable on an assignment dict (the draft passes a closure over
    iteration_cost), or a LayoutCost, which takes the incremental fast path; both paths
    propose the same swaps for the same rng (a random.Random), so they give identical
    results. Returns (best_assignment, best_cost); never worse than the start.
    trace: a SearchTrace to fill in (fast path only).
    """
    if isinstance(cost_fn, LayoutCost):
        state = cost_fn.state(assignment)
        cost_fn.evaluations += 1 + _swap_search(state, rng, n_iters, sideways, trace=trace)
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


def _crossover(order_a, order_b, n_stages, n_replicas, region, rng, region_aware=True):
    """A child that inherits whole stages (DP groups) or whole replicas (pipelines).

    A coin picks the unit: stages or replicas. Each unit comes whole from parent A or
    from parent B (at least one from each). B's units keep B's devices except those A's
    units already use; such a slot takes a free device: region_aware, one from the same
    region as B's device if there is one (so the child keeps B's regions), else any.
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
        same_region = [d for d in free if region[d] == region[order_b[k]]] if region_aware else []
        child[k] = (same_region or free)[0]
        free.remove(child[k])
    return child


def _gather(order, stage, n_replicas, region, rng):
    """Mutation (region-aware): move one stage's DP group wholly into the region most of it
    is in, swapping with that region's devices in other stages (as far as they go)."""
    order = list(order)
    slots = range(stage * n_replicas, (stage + 1) * n_replicas)
    counts = {}
    for k in slots:
        counts[region[order[k]]] = counts.get(region[order[k]], 0) + 1
    most = max(counts.values())
    home = rng.choice(sorted(r for r, n in counts.items() if n == most))
    outside = [k for k in range(len(order)) if k not in slots and region[order[k]] == home]
    rng.shuffle(outside)
    for k in slots:
        if region[order[k]] != home and outside:
            j = outside.pop()
            order[k], order[j] = order[j], order[k]
    return order


def _stage_order_search(state, cost):
    """Exchange two whole stages (their DP groups) while that lowers the total: the order
    in which every pipeline visits the groups. Region-blind. Returns the evaluations used."""
    n_r, used, improved = cost.n_replicas, 0, True
    while improved:
        improved = False
        for s1, s2 in itertools.combinations(range(cost.n_stages), 2):
            order = list(state.order)
            a, b = slice(s1 * n_r, (s1 + 1) * n_r), slice(s2 * n_r, (s2 + 1) * n_r)
            order[a], order[b] = order[b], order[a]
            trial = cost.state(order)
            used += 1
            if trial.total < state.total:
                state, improved = trial, True
    return state, used


def genetic_search(cost, seed, population=6, max_evaluations=100_000, local_iters=1000,
                   region_aware=True, gather_rate=0.2):
    """Yuan et al.'s scheduler in small: a hybrid genetic algorithm after Kang & Moon (2000).

    cost: a LayoutCost (the incremental swap evaluator). A population of random layouts,
    each improved; then, until the evaluation budget is spent: pick two parents (the
    better of two random members, twice), breed a child with _crossover (whole stages or
    whole pipelines), improve it, and let it replace the worse parent if it is no worse,
    or else the worst member if it is better. Returns a GeneticResult.
    Improving a layout: local_iters swaps of sideways local search in which a tie is
    taken only if the sum of all group and link terms does not rise (a tie-break that
    sees progress the maxima hide; DT-FM designs its own gain for the same reason), then
    exchanges of whole stages while they lower the total (the order of the groups).
    region_aware (what the local search is never told): the crossover repairs a clash
    with a device of the same region, and before improving, with probability
    gather_rate, some stages' DP groups are gathered into their majority region
    (_gather, a group move like DT-FM's multi-device moves). region_aware=False drops
    both: the same algorithm knowing only costs.
    Simplified from DT-FM: there the crossover is five-point on balanced partitions
    followed by rebalancing, and the local search moves devices by a custom gain; here
    units stay whole by construction. It only permutes the devices it starts with.
    """
    if population < 2 or local_iters < 0 or max_evaluations < population * (local_iters + 1):
        raise ValueError("need population >= 2 and a budget for at least the first population")
    rng = random.Random(seed)
    n_slots, region = cost.n_stages * cost.n_replicas, cost.net["region"]
    used, history, members = 0, [], []   # members: [total_ps, order]

    def improve(order):
        nonlocal used
        if region_aware and rng.random() < gather_rate:
            for stage in rng.sample(range(cost.n_stages), rng.randint(1, cost.n_stages)):
                order = _gather(order, stage, cost.n_replicas, region, rng)
        state = cost.state(order)
        used += 1 + _swap_search(state, rng, local_iters, sideways=True, guided=True)
        state, reordering = _stage_order_search(state, cost)
        used += reordering
        if not history or state.total < history[-1][1]:
            history.append((used, state.total))
        return [state.total, state.order]

    def tournament():   # the better of two random members
        m1, m2 = rng.sample(range(population), 2)
        return m1 if members[m1][0] <= members[m2][0] else m2

    for _ in range(population):
        members.append(improve(rng.sample(range(len(region)), n_slots)))
    bred = 0
    # each child costs about local_iters + 1 evaluations, plus its stage exchanges
    reserve = local_iters + 1 + 2 * math.comb(cost.n_stages, 2)
    while used + reserve <= max_evaluations:
        pa, pb = tournament(), tournament()
        if pa == pb:
            continue
        child = improve(_crossover(members[pa][1], members[pb][1], cost.n_stages, cost.n_replicas,
                                   region, rng, region_aware))
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
