"""What demo 3's proof leans on (code 5, notes §5.11; issue 47): the pruned enumeration
(Metis' manner, and the proven optimum) against plain brute force on random small worlds,
and its bound, the one thing the pruning trusts, held below every completion it cuts.

Each test here was seen failing with a bug injected (the report of issue 47's last items):
pruning at 0.9 x best instead of best, a doubled PIPELINE term in the bound, a card's memory
ignored by the classes, a split that fills a card exactly refused."""

import itertools
import random

import numpy as np
import pytest

from lecture09.schedule import hetero_search
from lecture09.schedule.device_figures import CARDS
from lecture09.schedule.geo_network import network_from_matrices
from lecture09.schedule.hetero_cost import INFEASIBLE_PS, HeteroCost, layer_bytes
from lecture09.schedule.schedule_setup import ScheduleSetup


def random_world(seed, max_layouts=2500):
    """A small region-uniform world drawn from seed: 1-3 regions, 1-3 stages x 1-3 replicas
    on as many devices or one more, a few card types (some memories cut so a card holds
    1-3 layers; ties of whole capacities with the layer count happen), few enough layouts
    (placements x splits) for brute force."""
    rng = random.Random(seed)
    while True:
        p, r_count = rng.choice([(1, 2), (1, 3), (2, 1), (2, 2), (3, 1), (2, 3), (3, 2)])
        n = p * r_count + rng.choice([0, 0, 1]) if p * r_count < 6 else 6
        layers = p + rng.randrange(0, 4)
        n_regions = rng.randint(1, min(3, n))
        region = sorted(rng.randrange(n_regions) for _ in range(n))
        region = [sorted(set(region)).index(k) for k in region]
        n_regions = max(region) + 1
        gbps = [[10.0 if a == b else 0.0 for b in range(n_regions)] for a in range(n_regions)]
        ms = [[0.1 if a == b else 0.0 for b in range(n_regions)] for a in range(n_regions)]
        for a, b in itertools.combinations(range(n_regions), 2):
            gbps[a][b] = gbps[b][a] = rng.choice([0.2, 0.5, 1.0, 2.0])
            ms[a][b] = ms[b][a] = rng.choice([10, 50, 150])
        bw = np.array([[gbps[a][b] * 1e9 for b in region] for a in region])
        lat = np.array([[ms[a][b] / 1e3 for b in region] for a in region])
        net = network_from_matrices(region, bw, lat)
        kinds = rng.sample(sorted(CARDS), rng.randint(1, 3))
        cards = [rng.choice(kinds) for _ in range(n)]
        setup = ScheduleSetup(n_stages=p, n_replicas=r_count, global_batch=rng.choice([64, 256]))
        per_layer, fixed = layer_bytes(setup, layers, r_count)
        memory = {c: (fixed + rng.randint(1, 3) * per_layer) / 1e9 * 1.0001 for c in kinds if rng.random() < 0.5}
        splits = len(list(itertools.combinations(range(1, layers), p - 1)))
        count = len(list(itertools.permutations(range(n), p * r_count))) * splits ** r_count
        if count <= max_layouts:
            return HeteroCost(net, cards, setup, p, r_count, layers, memory_gb=memory)


def every_layout(cost):
    """(order, partitions, total ps) for every placement of devices in slots and every split
    of the layers per replica: brute force, priced by HeteroCost.total_ps (which
    tests/test_hetero.py holds to the formulas of §5.11)."""
    p, r_count, layers = cost.n_stages, cost.n_replicas, cost.n_layers
    splits = [tuple(b - a for a, b in zip((0,) + c, c + (layers,)))
              for c in itertools.combinations(range(1, layers), p - 1)]
    for order in itertools.permutations(range(len(cost.cards)), p * r_count):
        for parts in itertools.product(splits, repeat=r_count):
            yield order, parts, cost.total_ps(order, parts)


SEEDS = range(24)


@pytest.fixture(scope="module")
def worlds():
    """seed -> (cost, brute-force optimum over any split, over the balancer's split)."""
    out = {}
    for seed in SEEDS:
        cost = random_world(seed)
        layouts = list(every_layout(cost))
        balanced = min(cost.cost_ps(list(order)) for order in {order for order, _, _ in layouts})
        out[seed] = (cost, min(total for _, _, total in layouts), balanced, layouts)
    return out


def test_the_random_worlds_are_varied(worlds):
    """The worlds the tests below draw: several shapes, infeasible ones, binding memory."""
    shapes = {(c.n_stages, c.n_replicas, len(c.cards)) for c, *_ in worlds.values()}
    assert len(shapes) >= 6
    assert any(best == INFEASIBLE_PS for _, best, _, _ in worlds.values())
    assert sum(0 < best < INFEASIBLE_PS for _, best, _, _ in worlds.values()) >= 15
    tight = [c for c, best, *_ in worlds.values() if best < INFEASIBLE_PS and min(c.capacity) < c.n_layers]
    assert len(tight) >= 5   # some card cannot hold a whole replica's layers: memory decides splits


@pytest.mark.parametrize("every_partition", [True, False], ids=["optimum", "metis"])
def test_the_pruned_enumeration_finds_the_brute_force_optimum_and_prunes(worlds, every_partition):
    """Over-pruning (cutting a branch whose bound is below the best found, e.g. at 0.9 x
    best) can cut the optimum away: the result must be brute force's least total, over
    every split (the proven optimum) or over the balancer's split (Metis' manner), on every
    world; and the pruning must have cut something (else this test proves nothing)."""
    pruned = 0
    for seed, (cost, best_any, best_balanced, _) in worlds.items():
        result = hetero_search.enumerate_layouts(cost, every_partition=every_partition)
        assert result.finished
        assert result.total_ps == (best_any if every_partition else best_balanced), seed
        if result.total_ps < INFEASIBLE_PS:
            parts = result.partitions if every_partition else cost.balanced_partitions(result.order)
            assert cost.total_ps(result.order, parts) == result.total_ps
        pruned += result.pruned
    assert pruned >= 20


def _contains(whole, part):
    """whole and part: tuples of class sequences; True when part is a sub-multiset of whole."""
    left = list(whole)
    for seq in part:
        if seq not in left:
            return False
        left.remove(seq)
    return True


@pytest.mark.parametrize("every_partition", [True, False], ids=["optimum", "metis"])
def test_every_bound_the_enumeration_uses_is_at_most_the_best_completion(worlds, every_partition):
    """The proof's invariant: each bound the search compares with its best (a candidate
    pipeline's own, a multiset of pipelines') is at most the least true total of any layout
    that holds those pipelines, found by brute force; at a leaf, the bound of one order and
    split is at most that layout's total. On a complete layout it is compute + PIPELINE exactly (DATAP-COST left out, the only slack), so it is
    the total itself when there is one replica: the bound is tight by design."""
    checked = tight = 0
    for seed, (cost, _, _, layouts) in worlds.items():
        classes = hetero_search.device_classes(cost)
        class_of = {d: k for k, members in enumerate(classes) for d in members}
        least = {}   # the multiset of a layout's pipelines (class sequences) -> least total
        for order, _, total in layouts:
            key = tuple(sorted(tuple(class_of[d] for d in cost.chain(order, r)) for r in range(cost.n_replicas)))
            least[key] = min(least.get(key, INFEASIBLE_PS), total)
        seen = []

        def on_bound(pipelines, bound, layout):
            seen.append((pipelines, bound, layout))

        hetero_search.enumerate_layouts(cost, every_partition=every_partition, on_bound=on_bound)
        for pipelines, bound, layout in seen:
            if layout is None:   # a bound on every layout holding these pipelines
                completion = min((t for key, t in least.items() if _contains(key, pipelines)), default=INFEASIBLE_PS)
                assert bound <= completion, (seed, pipelines, bound, completion)
            else:                # a bound on this layout (its order and its split) alone
                compute, dp, pp = cost.terms_ps(*layout)
                assert bound == compute + pp <= cost.total_ps(*layout), (seed, layout)
                tight += dp == 0 and bound == cost.total_ps(*layout)
            checked += 1
    assert checked >= 200 and tight >= 3
