"""Demo 1's study of one scheduling instance: every method of §5.3 on one job and one
network, with the proven optimum beside them (lecture 9, §5.3-5.5; used by code 5).

An instance is the job (D_PP stages x D_DP replicas, one global batch, M micro-batches)
on one network. `study_instance` runs, in this order: random layouts, the two hand
layouts, strict and sideways local search (with a SearchTrace per restart), the genetic
search region-aware and region-blind, the swap census of the strict search's best
layout, and the branch and bound. Everything is pure arithmetic on fixed seeds, so an
instance's figures are the same on every machine. Results are dataclasses; methods are
found by name (METHOD_NAMES), never by position.
"""

import random
import statistics
import time
from dataclasses import dataclass

from lecture09.schedule.hand_layouts import (SwapCensus, dp_groups_in_regions, layout_stats, pipelines_in_regions,
                                            random_assignment, swap_census)
from lecture09.schedule.layout_cost import LayoutCost, PS_PER_S
from lecture09.schedule.layout_optimum import OptimumResult, optimal_layout, progress_words
from lecture09.schedule.layout_search import SearchTrace, genetic_search, local_search

# The methods of the results table, in table order (the keys of Instance.methods).
METHOD_NAMES = ("random_mean", "random_best", "pipelines_in_regions", "dp_groups_in_regions",
                "strict", "sideways", "genetic", "genetic_blind")
HAND_LAYOUTS = {"pipelines_in_regions": pipelines_in_regions,
                "dp_groups_in_regions": dp_groups_in_regions}


@dataclass(frozen=True)
class Method:
    """One row of the results table."""
    cost: float | None        # communication s per iteration; None: the hand layout does not fit
    layout: dict | None       # the (best) layout; None for the random mean or a misfit
    runs: tuple = ()          # per restart / seed: costs (s)
    why_not: str = ""         # why a hand layout does not fit


@dataclass(frozen=True)
class Instance:
    global_batch: int
    act_bytes: float            # one replica's activations across one cut (bytes)
    cost: "LayoutCost"
    methods: dict               # name (METHOD_NAMES) -> Method
    random_stats: tuple         # layout_stats of every random layout
    random_costs: tuple         # s, every random layout
    strict_traces: tuple        # SearchTrace per strict restart
    sideways_traces: tuple      # SearchTrace per sideways restart
    strict_long_runs: tuple     # s: strict restarts given the sideways budget (same starts)
    census: "SwapCensus"   # every swap of the strict search's best layout
    optimum: "OptimumResult"
    optimum_s: float            # wall-clock seconds of the branch and bound (varies; stderr only)

    def gap(self, name):
        """How much a method's cost exceeds the optimum (or the lower bound), as a fraction."""
        cost = self.methods[name].cost
        return None if cost is None else cost / self.optimum.cost - 1

    def reaches_optimum(self, cost):
        """Whether a cost equals the proven optimum (whole picoseconds, so exactly)."""
        return cost is not None and self.optimum.exact and round(cost * PS_PER_S) == round(
            self.optimum.cost * PS_PER_S)


def _restarts(cost, setup, n_iters, sideways, traces, on_restart):
    """Restart i starts from random.Random(100 + i)'s shuffle and searches with
    random.Random(200 + i) (the draft's seeds): the same table on every run."""
    runs = []
    for restart in range(setup.restarts):
        if on_restart is not None:
            on_restart(restart)
        start = random_assignment(range(setup.n_gpus), setup.n_stages, setup.n_replicas,
                                           random.Random(100 + restart))
        trace = SearchTrace(cost.net["region"])
        rng = random.Random(200 + restart)
        runs.append(local_search(start, cost, rng, n_iters, sideways, trace=trace) + (rng,))
        traces.append(trace)
    return runs


def _continued(cost, runs, more_iters):
    """Strict runs continued with their own random streams for more_iters proposals: the
    same as giving them the larger budget from the start. A run that stopped on a local
    minimum (no swap lowers it, by its census) can never move again, so it is not rerun."""
    costs = []
    for layout, total, rng in runs:
        census = swap_census(cost, layout)
        if census.cross_region[0] + census.same_region[0] == 0:
            costs.append(total)
        else:
            costs.append(local_search(layout, cost, rng, more_iters, False)[1])
    return tuple(costs)


def _best_of(runs):
    best = min(runs, key=lambda run: run[1])
    return Method(best[1], best[0], tuple(run[1] for run in runs))


def study_instance(setup, net, global_batch, step=lambda text: None):
    """Every method of §5.3 on one instance; `setup` gives the job and the budgets (a
    schedule_setup.ScheduleSetup), `step(text)` reports progress (stderr in code 5)."""
    act_bytes = setup.act_bytes_at(global_batch)
    cost = LayoutCost(net, setup.n_stages, setup.n_replicas, setup.stage_param_bytes, act_bytes,
                               setup.n_micro_batches)
    methods = {}
    step(f"batch {global_batch}：随机分配 random layouts × {setup.n_random}")
    rng = random.Random(0)
    randoms = [random_assignment(range(setup.n_gpus), setup.n_stages, setup.n_replicas, rng)
               for _ in range(setup.n_random)]
    random_costs = tuple(cost(a) for a in randoms)
    best = min(range(len(randoms)), key=random_costs.__getitem__)
    methods["random_mean"] = Method(statistics.fmean(random_costs), None, random_costs)
    methods["random_best"] = Method(random_costs[best], randoms[best])
    for name, make in HAND_LAYOUTS.items():
        try:
            layout = make(net, setup.n_stages, setup.n_replicas)
            methods[name] = Method(cost(layout), layout)
        except ValueError as why:        # e.g. 8 cities of 4 GPUs cannot hold a DP group of 8
            methods[name] = Method(None, None, why_not=str(why))

    def restart_step(kind):
        return lambda i: step(f"batch {global_batch}：{kind}，重启 restart {i + 1}/{setup.restarts}")

    strict_traces, sideways_traces = [], []
    strict_runs = _restarts(cost, setup, setup.strict_iters, False, strict_traces, restart_step("严格局部搜索 strict"))
    methods["strict"] = _best_of(strict_runs)
    methods["sideways"] = _best_of(_restarts(cost, setup, setup.sideways_iters, True, sideways_traces,
                                             restart_step("持平局部搜索 sideways")))
    strict_long = _continued(cost, strict_runs, max(0, setup.sideways_iters - setup.strict_iters))
    for name, region_aware in (("genetic", True), ("genetic_blind", False)):
        results = []
        for seed in range(setup.restarts):
            step(f"batch {global_batch}：遗传算法 genetic{'' if region_aware else '（不看地区）'}，"
                 f"种子 seed {seed + 1}/{setup.restarts}")
            results.append(genetic_search(cost, seed=seed, population=setup.genetic_population,
                                                   max_evaluations=setup.genetic_budget,
                                                   local_iters=setup.genetic_local_iters,
                                                   region_aware=region_aware))
        best = min(results, key=lambda g: g.cost)
        methods[name] = Method(best.cost, best.assignment, tuple(g.cost for g in results))
    step(f"batch {global_batch}：所有交换 every swap、最优分配 optimum")
    census = swap_census(cost, methods["strict"].layout)
    started = time.perf_counter()
    optimum = optimal_layout(net, setup.n_stages, setup.n_replicas, setup.stage_param_bytes, act_bytes,
                             n_micro_batches=setup.n_micro_batches,
                             on_progress=lambda priced, budget: step(
                                 f"batch {global_batch}：" + progress_words(priced, budget, time.perf_counter() - started)))
    return Instance(global_batch, act_bytes, cost, methods,
                    tuple(layout_stats(a, net, setup.n_stages, setup.n_replicas) for a in randoms),
                    random_costs, tuple(strict_traces), tuple(sideways_traces), strict_long,
                    census, optimum, time.perf_counter() - started)
