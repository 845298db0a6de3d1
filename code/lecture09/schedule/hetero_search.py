"""Three ways the field searches layouts on mixed cards, and a proven optimum to hold them
against (lecture 9, §5.11; code 5's demo 3). Every search prices layouts with
hetero_cost.HeteroCost and reports how many costs it computed.

- genetic: demo 1's genetic search (layout_search.genetic_search) unchanged, on a cost
  whose partitions come from the layer load balancer (the balancer decodes each genome).
- graph partitioning, in HexiScale's manner (Yuan's group; formerly FlashFlex): the device
  graph (edge weight: bandwidth) is bisected recursively with networkx's
  kernighan_lin_bisection into D_DP pipelines (or D_PP data-parallel groups), each
  pipeline's stage order is then chosen, and cards are traded inside a region (which leaves
  every link as it was) while that lowers the cost. networkx is a real library and comes
  with torch (torch 2.13.0 requires it on Linux, macOS and Windows: no new install).
- pruned enumeration, in Metis' manner: pipelines as sequences of device classes (same
  region, same card), enumerated cheapest first, pruned by a bound (slowest pipeline's
  compute + each cut's slowest link), each complete layout's layers by the balancer.
- proven optimum: the same enumeration, exhaustive, with every partition of the layers
  tried at each leaf (not only the balancer's), on an instance small enough to finish.
"""

import itertools
import random
from dataclasses import dataclass

from lecture09.schedule.hetero_cost import INFEASIBLE_PS
from lecture09.schedule.layout_cost import PS_PER_S
from lecture09.schedule.layout_search import genetic_search


@dataclass(frozen=True)
class SearchResult:
    name: str
    order: tuple          # device of slot (s, r) at s * D_DP + r
    total_ps: int         # best total found (INFEASIBLE_PS: nothing fits)
    evaluations: int      # costs computed (HeteroCost.calls), all runs together
    runs: tuple = ()      # per seed: total (s)
    finished: bool = True   # enumerations: searched everything their bound allows
    nodes: int = 0        # enumerations: candidate pipelines bounded (their effort beside evaluations)
    partitions: tuple = None   # layers per stage per replica; None: the balancer's
    pruned: int = 0       # enumerations: branches cut by the bound (what the pruning saved)

    @property
    def total(self):
        return self.total_ps / PS_PER_S


def _calls(cost, run):
    before = cost.calls
    result = run()
    return result, cost.calls - before


def genetic(cost, budget, seeds, population=6, local_iters=1000):
    """Demo 1's hybrid genetic search, region-aware, `seeds` runs of `budget` evaluations."""
    runs, used = [], 0
    for seed in range(seeds):
        cost.begin_run("genetic")
        result, n = _calls(cost, lambda: genetic_search(cost, seed, population=population,
                                                         max_evaluations=budget, local_iters=local_iters))
        cost.end_run()
        order = tuple(result.assignment[(k // cost.n_replicas, k % cost.n_replicas)]
                      for k in range(cost.n_stages * cost.n_replicas))
        runs.append((round(result.cost * PS_PER_S), order))
        used += n
    best = min(runs)
    return SearchResult("genetic", best[1], best[0], used, tuple(t / PS_PER_S for t, _ in runs))


# =============================================================================
# Graph partitioning (HexiScale's manner)
# =============================================================================

def _bisect_into(graph, nodes, n_groups, size, rng, kernighan_lin_bisection):
    """Recursive bisection of `nodes` into n_groups groups of `size` (Kernighan-Lin keeps the
    sizes of the start it is given: a random split of the right sizes)."""
    if n_groups == 1:
        return [sorted(nodes)]
    left = n_groups // 2
    nodes = list(nodes)
    rng.shuffle(nodes)
    halves = kernighan_lin_bisection(graph.subgraph(nodes), partition=(set(nodes[:left * size]),
                                     set(nodes[left * size:])), weight="weight")
    a, b = sorted(halves, key=lambda half: len(half) != left * size)   # it returns the sides in its own order
    return (_bisect_into(graph, a, left, size, rng, kernighan_lin_bisection)
            + _bisect_into(graph, b, n_groups - left, size, rng, kernighan_lin_bisection))


def _best_stage_orders(cost, order):
    """Each pipeline in turn takes the order of its stages (all P! of them) that costs least."""
    p, r_count = cost.n_stages, cost.n_replicas
    order, best = list(order), cost.cost_ps(order)
    for r in range(r_count):
        chain = cost.chain(order, r)
        for perm in itertools.permutations(chain):
            trial = list(order)
            for s, d in enumerate(perm):
                trial[s * r_count + r] = d
            total = cost.cost_ps(trial)
            if total < best:
                order, best = trial, total
    return order, best


def _trade_inside_regions(cost, order, best, budget_left):
    """Swap two cards of one region held by different pipelines while that lowers the total:
    on a region-uniform network every link keeps its cost, only compute and memory move."""
    region, r_count = cost.net["region"], cost.n_replicas
    slots = range(len(order))
    improved = True
    while improved and budget_left > 0:
        improved = False
        for i, j in itertools.combinations(slots, 2):
            if region[order[i]] != region[order[j]] or i % r_count == j % r_count:
                continue
            if budget_left <= 0:
                break
            order[i], order[j] = order[j], order[i]
            total = cost.cost_ps(order)
            budget_left -= 1
            if total < best:
                best, improved = total, True
            else:
                order[i], order[j] = order[j], order[i]
    return order, best


def graph_partition(cost, budget, seeds):
    """HexiScale's manner: the device graph cut with Kernighan-Lin (networkx), then stage
    orders, then trades inside regions. Both hierarchies are tried each seed: D_DP groups
    as pipelines, and D_PP groups as data-parallel stages."""
    import networkx as nx   # imported here: --help and the other demos stay fast
    from networkx.algorithms.community import kernighan_lin_bisection
    p, r_count, n = cost.n_stages, cost.n_replicas, len(cost.net["region"])
    if p * r_count != n:
        raise ValueError("graph partitioning here places every device: slots must equal devices")
    bandwidth = cost.net["bandwidth_bps"]
    graph = nx.Graph()
    graph.add_weighted_edges_from((d, e, bandwidth[d][e] / 1e9) for d, e in itertools.combinations(range(n), 2))
    nothing = (INFEASIBLE_PS + 1, None)   # worse than any layout, feasible or not
    runs, used, best = [], 0, nothing
    for seed in range(seeds):
        rng = random.Random(seed)
        seed_best = nothing
        cost.begin_run("graph")
        for groups_are in ("pipelines", "stages"):
            start = cost.calls
            if groups_are == "pipelines":   # D_DP groups of D_PP cards: each group one pipeline
                groups = _bisect_into(graph, range(n), r_count, p, rng, kernighan_lin_bisection)
                order = [groups[r][s] for s in range(p) for r in range(r_count)]
            else:                           # D_PP groups of D_DP cards: each group one stage's DP group
                groups = _bisect_into(graph, range(n), p, r_count, rng, kernighan_lin_bisection)
                order = [d for group in groups for d in group]
            order, total = _best_stage_orders(cost, order)
            order, total = _trade_inside_regions(cost, order, total, budget // 2 - (cost.calls - start))
            used += cost.calls - start
            seed_best = min(seed_best, (total, tuple(order)))
        cost.end_run()
        runs.append(min(seed_best[0], INFEASIBLE_PS) / PS_PER_S)
        best = min(best, seed_best)
    return SearchResult("graph", best[1], min(best[0], INFEASIBLE_PS), used, tuple(runs))


# =============================================================================
# Pruned enumeration (Metis' manner) and the proven optimum
# =============================================================================

class _BudgetSpent(Exception):
    pass


def device_classes(cost):
    """Groups of interchangeable devices: same region and same card (speed and memory) on a
    region-uniform network; each device alone otherwise."""
    if not cost.net["region_uniform"]:
        return [[d] for d in range(len(cost.cards))]
    classes = {}
    for d, kind in enumerate(cost._kind):
        classes.setdefault((cost.net["region"][d], kind), []).append(d)
    return [classes[k] for k in sorted(classes)]


def _pipeline_candidates(cost, classes):
    """Every sequence of P classes the devices allow: (bound, compute ps, cut links ps, classes)
    sorted by bound = compute + links, infeasible ones (no split fits memory) dropped."""
    candidates = []
    for combo in itertools.product(range(len(classes)), repeat=cost.n_stages):
        need = {c: combo.count(c) for c in combo}
        if any(n > len(classes[c]) for c, n in need.items()):
            continue
        taken, chain = {c: 0 for c in need}, []
        for c in combo:
            chain.append(classes[c][taken[c]])
            taken[c] += 1
        parts = cost.balance(chain)
        if parts is None:
            continue
        compute = round(max(n * cost.layer_ps[d] for n, d in zip(parts, chain)) * cost.bubble)
        links = tuple(cost.pp_rows[a][b] for a, b in zip(chain, chain[1:]))
        candidates.append((compute + sum(links), compute, links, combo))
    candidates.sort()
    return candidates


def _partitions(cost, chain):
    """Every split of the layers over this chain that fits memory, cheapest slowest stage first."""
    splits = []
    for cuts in itertools.combinations(range(1, cost.n_layers), cost.n_stages - 1):
        parts = tuple(b - a for a, b in zip((0,) + cuts, cuts + (cost.n_layers,)))
        if all(n <= cost.capacity[d] for n, d in zip(parts, chain)):
            splits.append((max(n * cost.layer_ps[d] for n, d in zip(parts, chain)), parts))
    return sorted(splits)


def enumerate_layouts(cost, budget=None, every_partition=False, max_nodes=None, on_bound=None):
    """Pipelines chosen one replica at a time, as a multiset (replicas are interchangeable)
    of class sequences, cheapest first, pruned by a bound no completion can beat: the
    slowest chosen pipeline's compute (the balancer's, the least any split gives) plus each
    cut's slowest chosen link (DATAP-COST >= 0). At a leaf the devices are placed and the
    layers split by the balancer (Metis' manner), or, with every_partition, in every way
    that fits memory (the proven optimum). Stops after `budget` evaluations or `max_nodes`
    candidates bounded (finished=False: the best found, not proven).
    on_bound(pipelines, bound, layout): every bound the search compares with its best, for
    the tests' invariant: pipelines, the class sequences it holds for; layout, (order,
    partitions) when the bound is of one complete layout (compute + PIPELINE exactly)."""
    classes = device_classes(cost)
    candidates = _pipeline_candidates(cost, classes)
    p, r_count = cost.n_stages, cost.n_replicas
    start = cost.calls
    best = [INFEASIBLE_PS, None, None]
    left = [len(c) for c in classes]
    nodes, pruned = [0], [0]
    seqs = lambda chosen: tuple(candidates[k][3] for k in chosen)   # noqa: E731
    cost.begin_run("optimum" if every_partition else "enumeration")

    def price(chosen):
        pools = [list(c) for c in classes]
        chains = [[pools[c].pop(0) for c in candidates[k][3]] for k in chosen]
        order = [chains[r][s] for s in range(p) for r in range(r_count)]
        if not every_partition:
            options = [[(0, cost.balance(chain))] for chain in chains]
        else:
            options = [_partitions(cost, chain) for chain in chains]
        pp = sum(max(candidates[k][2][c] for k in chosen) for c in range(p - 1))
        if on_bound is not None and not every_partition:
            parts = tuple(option[0][1] for option in options)
            slowest = max(n * cost.layer_ps[d] for chain, split in zip(chains, parts) for n, d in zip(split, chain))
            on_bound(seqs(chosen), round(slowest * cost.bubble) + pp, (tuple(order), parts))
        for combo in itertools.product(*options):
            if every_partition:
                bound = round(max(t for t, _ in combo) * cost.bubble) + pp
                if on_bound is not None:
                    on_bound(seqs(chosen), bound, (tuple(order), tuple(parts for _, parts in combo)))
                if bound >= best[0]:
                    pruned[0] += 1
                    continue
            if budget is not None and cost.calls - start >= budget:
                raise _BudgetSpent
            total = cost.total_ps(order, [parts for _, parts in combo])
            if total < best[0]:
                best[:] = [total, tuple(order), tuple(parts for _, parts in combo)]

    def extend(chosen, compute, cuts):
        if len(chosen) == r_count:
            price(chosen)
            return
        for k in range(chosen[-1] if chosen else 0, len(candidates)):
            own, c_ps, links, combo = candidates[k]
            if on_bound is not None:
                on_bound((combo,), own, None)
            if own >= best[0]:
                pruned[0] += 1
                break   # every later candidate's own bound is at least this one's
            nodes[0] += 1
            if max_nodes is not None and nodes[0] > max_nodes:
                raise _BudgetSpent
            new_compute = max(compute, c_ps)
            new_cuts = [max(a, b) for a, b in zip(cuts, links)] if cuts else list(links)
            bound = new_compute + sum(new_cuts)
            if on_bound is not None:
                on_bound(seqs(chosen + [k]), bound, None)
            if bound >= best[0]:
                pruned[0] += 1
                continue
            if any(left[c] < combo.count(c) for c in set(combo)):
                continue
            for c in combo:
                left[c] -= 1
            extend(chosen + [k], new_compute, new_cuts)
            for c in combo:
                left[c] += 1

    finished = True
    try:
        extend([], 0, [])
    except _BudgetSpent:
        finished = False
    cost.end_run()
    name = "optimum" if every_partition else "enumeration"
    if best[1] is None:   # nothing fits: any order stands for "infeasible"
        best[1] = tuple(range(p * r_count))
    return SearchResult(name, best[1], best[0], cost.calls - start, (best[0] / PS_PER_S,), finished,
                        min(nodes[0], max_nodes or nodes[0]), best[2] if every_partition else None, pruned[0])
