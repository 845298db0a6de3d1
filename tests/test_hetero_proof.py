"""What demo 3's proof leans on (code 5, notes §5.11; issue 47): the pruned enumeration
(Metis' manner, and the proven optimum) against plain brute force on random small worlds,
and its bound, the one thing the pruning trusts, held below every completion it cuts.

Each test here was seen failing with a bug injected, then passing without it (issue 47's
last items): pruning at 0.9 x best (a candidate's own bound, a node's, a leaf's); the
PIPELINE term doubled in each of those three bounds; the balancer refusing a chain whose
cards hold exactly the layers, the splits refusing a full card, the classes merging cards of
one speed and different memories, the cost ignoring memory; the splits missing some, the
balancer's priority one layer off (either push)."""

import itertools
import random

import numpy as np
import pytest

from lecture09.schedule import hetero_search
from lecture09.schedule.device_figures import CARDS
from lecture09.schedule.geo_network import network_from_matrices
from lecture09.schedule.hetero_cost import INFEASIBLE_PS, HeteroCost, layer_bytes
from lecture09.schedule.schedule_setup import ScheduleSetup


def random_world(seed, max_layouts=1200):
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
            ms[a][b] = ms[b][a] = rng.choice([5, 50, 150, 300])
        bw = np.array([[gbps[a][b] * 1e9 for b in region] for a in region])
        lat = np.array([[ms[a][b] / 1e3 for b in region] for a in region])
        net = network_from_matrices(region, bw, lat)
        kinds = rng.sample(sorted(CARDS), rng.randint(1, 3))
        if rng.random() < 0.3:   # two cards of one speed, their memories apart
            kinds = ["v100", "v100-16"] + [k for k in kinds if not k.startswith("v100")][:1]
        cards = [rng.choice(kinds) for _ in range(n)]
        setup = ScheduleSetup(n_stages=p, n_replicas=r_count, global_batch=rng.choice([64, 256, 1024]),
                              n_params=rng.choice([0.3e9, 1.3e9, 2.6e9]))
        per_layer, fixed = layer_bytes(setup, layers, r_count)
        memory = {c: (fixed + rng.randint(1, 3) * per_layer) / 1e9 * 1.0001 for c in kinds if rng.random() < 0.5}
        splits = len(list(itertools.combinations(range(1, layers), p - 1)))
        count = len(list(itertools.permutations(range(n), p * r_count))) * splits ** r_count
        if count <= max_layouts:
            return HeteroCost(net, cards, setup, p, r_count, layers, memory_gb=memory)


def hand_world(region, cards, p, r_count, layers, gbps, ms, capacity=None, **setup):
    """A world built for one case: one link between regions (gbps, ms), 10 Gbit/s and 0.1 ms
    inside; capacity {card: layers} cuts a card's memory to hold that many layers."""
    bw = np.array([[10e9 if a == b else gbps * 1e9 for b in region] for a in region])
    lat = np.array([[1e-4 if a == b else ms / 1e3 for b in region] for a in region])
    setup = ScheduleSetup(n_stages=p, n_replicas=r_count, **setup)
    per_layer, fixed = layer_bytes(setup, layers, r_count)
    memory = {c: (fixed + k * per_layer) / 1e9 * 1.0001 for c, k in (capacity or {}).items()}
    return HeteroCost(network_from_matrices(region, bw, lat), cards, setup, p, r_count, layers, memory_gb=memory)


HAND_WORLDS = {
    # traps for over-pruning: compute dominates, the first layout priced (its bound the least)
    # is not the optimum, and the optimum's bound is above 0.9 x that first layout's total
    "trap, one stage": lambda: hand_world([0, 1, 1], ["t4"] * 3, 1, 2, 2, 3.0, 20, n_params=0.3e9, global_batch=256),
    "trap, two stages": lambda: hand_world([0, 0, 1, 1], ["t4"] * 4, 2, 2, 4, 5.0, 50, global_batch=64),
    # two cards of one speed in one region, one too small for a replica's layers: a class
    # that ignored memory would take the small one for both
    "memory twins": lambda: hand_world([0, 0, 0], ["v100-16", "v100", "rtx3090"], 1, 2, 2, 1.0, 10,
                                       {"v100-16": 1}, n_params=0.3e9, global_batch=64),
}


def first_priced_and_optimum(cost):
    """(total of the first layout the Metis-manner enumeration prices, its result)."""
    leaves = []
    result = hetero_search.enumerate_layouts(
        cost, on_bound=lambda pipelines, bound, layout: layout is None or leaves.append(cost.total_ps(*layout)))
    return (leaves[0] if leaves else INFEASIBLE_PS), result


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


SEEDS = range(32)


@pytest.fixture(scope="module")
def worlds():
    """seed -> (cost, brute-force optimum over any split, over the balancer's split)."""
    out = {}
    for seed in [*SEEDS, *HAND_WORLDS]:
        cost = random_world(seed) if seed in SEEDS else HAND_WORLDS[seed]()
        layouts = list(every_layout(cost))
        balanced = min(cost.cost_ps(list(order)) for order in {order for order, _, _ in layouts})
        out[seed] = (cost, min(total for _, _, total in layouts), balanced, layouts)
    return out


def test_the_random_worlds_are_varied(worlds):
    """The worlds the tests below draw: several shapes, infeasible ones, binding memory."""
    worlds = {seed: w for seed, w in worlds.items() if seed in SEEDS}
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
    world; and the pruning must have cut something (else this test proves nothing), and
    some worlds must be traps for pruning at 0.9 x best (the optimum's bound at least 0.9
    x the total of a worse layout priced first), or a wrong cut could pass unseen."""
    traps = sum(first > result.total_ps and (lambda b: b.compute + b.pp)(cost.breakdown(result.order)) * 1e12
                >= 0.9 * first for cost, *_ in worlds.values() for first, result in [first_priced_and_optimum(cost)])
    assert traps >= 2
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
    split is at most that layout's total. On a complete layout it is compute + PIPELINE
    exactly (DATAP-COST left out, the only slack), so it is the total itself when there is
    one replica: the bound is tight by design."""
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


def test_the_balancer_is_the_least_slowest_stage_with_few_layers_too():
    """The bound takes a pipeline's compute from the balancer as the least any split gives
    (tests/test_hetero.py checks 24 layers on 4 stages); with few layers a stage given its
    second layer too early costs the optimum (times 1 and 1.9, 4 layers: 3 + 1, not 2 + 2).
    Random chains of 2-3 cards (some memories cut), every layer count up to 7, against every split."""
    rng = random.Random(5)
    checked = 0
    for _ in range(6):
        for p in (2, 3):
            for layers in range(p, 8):
                setup = ScheduleSetup(n_stages=p, n_replicas=1, global_batch=64)
                cards = [rng.choice(sorted(CARDS)) for _ in range(p)]
                per_layer, fixed = layer_bytes(setup, layers, 1)
                memory = {c: (fixed + rng.randint(1, layers) * per_layer) / 1e9 * 1.0001
                          for c in cards if rng.random() < 0.4}
                net = network_from_matrices([0] * p, np.full((p, p), 1e10), np.full((p, p), 1e-4))
                cost = HeteroCost(net, cards, setup, p, 1, layers, memory_gb=memory)
                chain = list(range(p))
                splits = [s for s in (tuple(b - a for a, b in zip((0,) + c, c + (layers,)))
                                      for c in itertools.combinations(range(1, layers), p - 1))
                          if all(n <= cost.capacity[d] for n, d in zip(s, chain))]
                got = cost.balance(chain)
                if not splits:
                    assert got is None, (cards, layers)
                    continue
                assert sum(got) == layers and all(1 <= n <= cost.capacity[d] for n, d in zip(got, chain))
                least = min(max(n * cost.layer_ps[d] for n, d in zip(s, chain)) for s in splits)
                assert max(n * cost.layer_ps[d] for n, d in zip(got, chain)) == least, (cards, layers, got)
                checked += 1
    assert checked >= 40
