"""Demo 3's runs: the world of mixed cards, the three searches on a small instance (beside
its proven optimum) and at demo 1's size (beside each other), and the control with every
card made equal (lecture 9, §5.11). Pure arithmetic on fixed seeds: no torch.
"""

from dataclasses import dataclass, replace

from lecture09.schedule import hetero_search
from lecture09.schedule.device_figures import EQUAL_CARD
from lecture09.schedule.geo_network import network_from_matrices
from lecture09.schedule.hand_layouts import layout_stats
from lecture09.schedule.hetero_cost import INFEASIBLE_PS, HeteroCost, layer_bytes, max_layers
from lecture09.schedule.layout_cost import assignment_from_order
from lecture09.schedule.layout_optimum import optimal_layout
from lecture09.schedule.schedule_setup import build_networks

SEARCHES = ("genetic", "graph", "enumeration")


@dataclass(frozen=True)
class Instance:
    cost: HeteroCost
    results: dict          # name (SEARCHES, and "optimum" on the small instance) -> SearchResult

    @property
    def best(self):
        """The reference: the proven optimum when there is one, else the best search."""
        if "optimum" in self.results:
            return self.results["optimum"]
        return min((self.results[n] for n in SEARCHES), key=lambda r: r.total_ps)

    def gap(self, name):
        """How far a search's total is above the reference, as a fraction."""
        return self.results[name].total_ps / self.best.total_ps - 1


@dataclass(frozen=True)
class ControlRow:
    equal: object              # hetero_cost.Breakdown with every card EQUAL_CARD
    mixed: object              # the same layout on the mix
    inside: int                # pipeline links inside one region
    links: int


@dataclass(frozen=True)
class Control:
    """The same network with every card made EQUAL_CARD, and what its optimum does on the mix."""
    equal_cost: HeteroCost
    homo_order: tuple          # demo 1's proven optimum of the communication (equal cards)
    rows: dict                 # label -> ControlRow


@dataclass(frozen=True)
class Demo3Result:
    hetero: object             # hetero_cost.HeteroSetup
    world: dict                # the network (demo 1's)
    max_layers: dict           # card -> layers it holds at demo 1's size
    small: Instance | None     # None: no layout of the small instance fits (memory)
    large: Instance
    control: Control


def refusal(hetero):
    """The one-line reason the cards cannot run the job, or None (checked before any search)."""
    setup = hetero.base
    if len(hetero.cards) != setup.n_gpus:
        return f"--mix 共 {len(hetero.cards)} 张卡，任务要 {setup.n_gpus} 张"
    fits = {c: max_layers(setup, hetero.n_layers, setup.n_replicas, hetero.memory_of(c)) for c in set(hetero.cards)}
    for card, n in sorted(fits.items()):
        if n < 1:
            need = sum(layer_bytes(setup, hetero.n_layers, setup.n_replicas)) / 1e9
            return f"{card} 的 {hetero.memory_of(card):g} GB 放不下一层（要 {need:.2f} GB）"
    if sum(min(fits[c], hetero.n_layers) for c in hetero.cards) < setup.n_replicas * hetero.n_layers:
        return f"所有卡加起来放不下 {setup.n_replicas} 份 {hetero.n_layers} 层"
    return None


def _order_of(assignment, n_stages, n_replicas):
    return tuple(assignment[(k // n_replicas, k % n_replicas)] for k in range(n_stages * n_replicas))


def small_world(hetero, net):
    """The instance small enough to prove: the first and last card of regions 0, 1 and the
    last region (so the old cards are in it), demo 1's links between them, 2 stages x 3
    replicas, hetero.small_layers layers, demo 1's second batch."""
    regions = sorted({0, min(1, len(net["region_sizes"]) - 1), len(net["region_sizes"]) - 1})
    devices = []
    for k in regions:
        members = [d for d, r in enumerate(net["region"]) if r == k]
        devices += [members[0], members[-1]] if len(members) > 1 else members
    region = [regions.index(net["region"][d]) for d in devices]
    sub = network_from_matrices(region, net["bandwidth_bps"][devices][:, devices],
                                net["latency_s"][devices][:, devices],
                                [net["region_names"][k] for k in regions])
    setup = replace(hetero.base, n_stages=hetero.small_stages, n_replicas=len(devices) // hetero.small_stages,
                    global_batch=hetero.base.second_batch or hetero.base.global_batch)
    cards = [hetero.cards[d] for d in devices]
    return sub, cards, setup


def _cost(hetero, net, cards, setup, n_layers):
    cost = HeteroCost(net, cards, setup, setup.n_stages, setup.n_replicas, n_layers, hetero.utilisation,
                      dict(hetero.memory_gb))
    cost.runs = [] if hetero.record else None   # --figures: each run's best so far
    return cost


def _searches(hetero, cost, budget, population, local_iters):
    return {"genetic": hetero_search.genetic(cost, budget, hetero.seeds, population, local_iters),
            "graph": hetero_search.graph_partition(cost, budget, hetero.seeds),
            "enumeration": hetero_search.enumerate_layouts(cost, budget, max_nodes=20 * budget)}


def control(hetero, net, mixed_cost, best_order, best_partitions=None):
    """Item 4: every card EQUAL_CARD. Its optimum (demo 1's branch and bound on the links;
    equal cards get even stages, so compute is the same for every layout) placed on the mix
    with even stages (device speed ignored) and with the balancer's stages; beside it the
    best layout found on the mix, priced in both worlds."""
    setup = hetero.base
    p, r_count = setup.n_stages, setup.n_replicas
    equal = _cost(replace(hetero, memory_gb=()), net, [EQUAL_CARD] * len(hetero.cards), setup, hetero.n_layers)
    homo = optimal_layout(net, p, r_count, setup.stage_param_bytes, setup.act_bytes,
                          n_micro_batches=setup.n_micro_batches)
    homo_order = _order_of(homo.assignment, p, r_count)
    even = ((tuple(hetero.n_layers // p + (s < hetero.n_layers % p) for s in range(p)),) * r_count)

    def row(order, partitions=None):
        stats = layout_stats(assignment_from_order(list(order), r_count), net, p, r_count)
        return ControlRow(equal.breakdown(order, even), mixed_cost.breakdown(order, partitions),
                          stats["pipeline_links_within_region"], stats["pipeline_links"])

    rows = {"homo_even": row(homo_order, even), "homo_balanced": row(homo_order),
            "mixed_best": row(best_order, best_partitions)}
    return Control(equal, homo_order, rows)


def study(hetero, step=lambda text: None):
    """Every run of demo 3 (a Demo3Result)."""
    setup = hetero.base
    net, _ = build_networks(setup)
    step("小实例 small instance：三种搜索和已证明的最优")
    s_net, s_cards, s_setup = small_world(hetero, net)
    s_cost = _cost(hetero, s_net, s_cards, s_setup, hetero.small_layers)
    small = _searches(hetero, s_cost, hetero.small_budget, 4, 100)
    small["optimum"] = hetero_search.enumerate_layouts(s_cost, every_partition=True)
    small = Instance(s_cost, small) if small["optimum"].total_ps < INFEASIBLE_PS else None   # None: nothing fits
    step(f"演示 1 的规模 demo 1's size：{setup.n_stages} × {setup.n_replicas}，三种搜索")
    cost = _cost(hetero, net, hetero.cards, setup, hetero.n_layers)
    base = hetero.base
    large = Instance(cost, _searches(hetero, cost, hetero.budget, base.genetic_population, base.genetic_local_iters))
    step("对照 control：每张卡都一样")
    ctrl = control(hetero, net, cost, large.best.order, large.best.partitions)
    fits = {c: max_layers(setup, hetero.n_layers, setup.n_replicas, hetero.memory_of(c))
            for c in dict.fromkeys(hetero.cards)}
    return Demo3Result(hetero, net, fits, small, large, ctrl)
