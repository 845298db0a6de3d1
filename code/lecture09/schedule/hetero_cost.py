"""The cost of a layout when the cards differ: compute, memory and Yuan et al.'s
communication, with uneven stages (lecture 9, §5.11; code 5's demo 3).

Demo 1 prices communication only, on identical cards. Here a layout is a device order
(slot (stage s, replica r) at order[s * D_DP + r], as in layout_cost) and, per replica, its
layers per stage (a partition: HexiScale's and Metis' asymmetric stages). One iteration:

    compute  = (M + P - 1) / M x max_r max_s n[r][s] x F / v(device of (s, r))
               (a pipeline runs at its slowest stage with demo 1's GPipe bubble; data
               parallelism waits for the slowest replica). F: one layer's FLOPs for one
               replica's batch (6 N D / (L D_DP)); v: the card's peak x UTILISATION.
    DATAP    = max_d sum over peers e sharing a layer with d of
               2 x (latency[d][e] + shared_layers(d, e) x c_layer / (D_DP x bandwidth[d][e]))
               Eq. 2 with layers: a layer's replicas all-reduce it; a device pays each peer's
               latency once. With equal stages this is Eq. 2 exactly (tests check).
    PIPELINE = Eq. 3-4 unchanged (layout_cost's tables: M micro-batches per cut).
    total    = compute + DATAP + PIPELINE (no overlap, as demo 1).
    memory   = n x (ZeRO-1 states + M held layer inputs) + one layer rebuilt in the backward;
               a device holding more than its card can is infeasible.

The bytes are §3's: ZeRO-1 over the D_DP replicas of a layer, 2 + 2 + 12 / D_DP bytes per
parameter (Rajbhandari et al. 2020); full recomputation keeps each layer's input, 2 s b h
bytes per micro-batch, and rebuilds one layer at a time, (10 + 24) s b h bytes (Korthikanti
et al. 2022, selective). schedule may not import parallel (ARCHITECTURE.md), so these two
lines are restated here; tests/test_hetero.py holds them equal to memory_model's functions.
Times are whole picoseconds (ints), as in layout_cost.
"""

import heapq
from dataclasses import dataclass, field

import numpy as np

from lecture09.schedule.device_figures import CARDS, DEFAULT_MIX, UTILISATION, world_cards
from lecture09.schedule.layout_cost import PS_PER_S, _cost_tables
from lecture09.schedule.schedule_setup import ScheduleSetup

INFEASIBLE_PS = 10**21   # a layout that does not fit in memory: costs more than any that does


@dataclass(frozen=True)
class HeteroSetup:
    """Demo 3: demo 1's job and network (base), its layers, the cards and the search budgets."""
    base: ScheduleSetup = field(default_factory=ScheduleSetup)
    n_layers: int = 24                # GPT-3 XL's 24 layers (Brown et al. 2020, Table 2.1)
    mix: tuple = DEFAULT_MIX          # ((card, count), ...): regions filled in this order
    memory_gb: tuple = ()             # ((card, GB), ...): a card's memory replaced (--memory-gb)
    utilisation: float = UTILISATION
    budget: int = 20000               # cost evaluations per search run: demo 1's genetic budget
    record: bool = False              # keep each search run's best so far (--figures: the convergence)
    seeds: int = 3                    # runs per search (genetic and graph partitioning)
    small_budget: int = 2000          # the same on the small instance
    small_layers: int = 4             # the instance small enough to prove: 2 stages x 3 replicas,
    small_stages: int = 2             # 2 cards in each of 3 regions, this many layers
    small_replicas: int = 3

    @property
    def cards(self):
        return world_cards(self.mix)

    def memory_of(self, name):
        return dict(self.memory_gb).get(name, CARDS[name].memory_gb)


def layer_bytes(setup, n_layers, n_replicas):
    """(bytes each held layer costs, fixed bytes of the layer being rebuilt) on one device."""
    b = setup.global_batch // (n_replicas * setup.n_micro_batches)   # sequences per micro-batch
    params = setup.n_params / n_layers
    states = params * (2 + 2 + 12 / n_replicas)                      # ZeRO-1 (§3)
    inputs = setup.n_micro_batches * 2 * setup.seq_len * b * setup.hidden   # full recomputation
    return states + inputs, 34 * setup.seq_len * b * setup.hidden


def max_layers(setup, n_layers, n_replicas, memory_gb):
    """How many layers a card of memory_gb holds (0: not even one)."""
    per_layer, fixed = layer_bytes(setup, n_layers, n_replicas)
    return max(0, int((memory_gb * 1e9 - fixed) // per_layer))


@dataclass(frozen=True)
class Breakdown:
    compute: float        # s
    dp: float
    pp: float
    total: float          # inf when infeasible
    feasible: bool
    partitions: tuple     # layers per stage, per replica


class HeteroCost:
    """The cost of a layout on mixed cards. `cost_ps(order)` prices a device order with
    each replica's layers placed by the layer load balancer (`balance`); `evaluate(order,
    partitions)` prices any partitions. `calls` counts every cost computed."""

    def __init__(self, net, cards, setup, n_stages, n_replicas, n_layers, utilisation=UTILISATION,
                 memory_gb=None):
        if n_layers < n_stages:
            raise ValueError(f"{n_layers} layers cannot fill {n_stages} stages")
        if len(cards) != len(net["region"]) or n_stages * n_replicas > len(cards):
            raise ValueError(f"{len(cards)} cards for {len(net['region'])} devices and "
                             f"{n_stages} x {n_replicas} slots")
        memory_gb = memory_gb or {}
        self.net, self.cards, self.n_stages, self.n_replicas, self.n_layers = net, list(cards), n_stages, n_replicas, n_layers
        m = setup.n_micro_batches
        self.bubble = (m + n_stages - 1) / m
        act = setup.act_bytes_at(setup.global_batch)
        layer_grad = setup.n_params * 2 / n_layers
        self.pp_rows = _cost_tables(net, n_replicas, 0.0, act, m)[1]
        latency_rows = _cost_tables(net, n_replicas, 0.0, act, m)[0]
        self.dp_latency = np.array(latency_rows, dtype=np.int64)        # 2 x latency (ps)
        self.dp_per_layer = np.array(_cost_tables(net, n_replicas, layer_grad, act, m)[0], dtype=np.int64) \
            - self.dp_latency                                              # 2 x c_layer / (D_DP bw)
        flops = setup.flops_per_iteration / (n_layers * n_replicas)   # one layer, one replica's batch
        self.layer_flops = flops
        self.layer_ps = [round(flops / (CARDS[c].peak_tflops * 1e12 * utilisation) * PS_PER_S) for c in cards]
        self.capacity = [max_layers(setup, n_layers, n_replicas, memory_gb.get(c, CARDS[c].memory_gb))
                         for c in cards]
        kinds = sorted(set(zip(self.layer_ps, self.capacity)))
        self._kind = [kinds.index(k) for k in zip(self.layer_ps, self.capacity)]   # cards alike to the balancer
        self._kinds = kinds
        self._balanced, self._shared = {}, {}
        self.calls = 0
        self.evaluations = 0   # what genetic_search adds its count to
        self.runs = None       # a list when recording: [name, first call, [(evaluations, best ps)], length]
        #                        (length None while the run goes on)

    # --- each search run's best so far (the convergence figure; off unless asked) ---------
    def begin_run(self, name):
        if self.runs is not None:
            self.runs.append([name, self.calls, [], None])

    def end_run(self):
        if self.runs:
            self.runs[-1][3] = self.calls - self.runs[-1][1]

    def _seen(self, total):
        name, first, points, length = self.runs[-1]
        if length is None and (not points or total < points[-1][1]):
            points.append((self.calls - first, total))

    # --- the layer load balancer (Metis' and HexiScale's uneven stages) ------------------
    def balance(self, chain):
        """Layers per stage for a pipeline of these devices: the smallest slowest stage that
        fits in memory (None if no split fits). Greedy: every stage starts with one layer and
        each further layer goes to the stage that is then fastest (ties: the earlier stage);
        optimal for a min-max of n_s x t_s (tests check it against every split)."""
        key = tuple(self._kind[d] for d in chain)
        if key not in self._balanced:
            times, caps = [self._kinds[k][0] for k in key], [self._kinds[k][1] for k in key]
            if min(caps) < 1 or sum(caps) < self.n_layers:
                self._balanced[key] = None
            else:
                n = [1] * len(chain)
                heap = [(2 * t, s) for s, t in enumerate(times) if caps[s] > 1]
                heapq.heapify(heap)
                for _ in range(self.n_layers - len(chain)):
                    _, s = heapq.heappop(heap)
                    n[s] += 1
                    if n[s] < caps[s]:
                        heapq.heappush(heap, ((n[s] + 1) * times[s], s))
                self._balanced[key] = tuple(n)
        return self._balanced[key]

    def chain(self, order, r):
        return [order[s * self.n_replicas + r] for s in range(self.n_stages)]

    def balanced_partitions(self, order):
        return tuple(self.balance(self.chain(order, r)) for r in range(self.n_replicas))

    # --- the cost -------------------------------------------------------------------------
    def terms_ps(self, order, partitions, spread=None):
        """(compute, dp, pp) in ps, or None when a partition does not fit a device.
        spread: a list that receives the sum of every term, not only the slowest (every
        replica's compute, every link, every device's DP): the genetic search's tie-break."""
        self.calls += 1
        p, r_count = self.n_stages, self.n_replicas
        slowest = []
        for r, parts in enumerate(partitions):
            if parts is None or len(parts) != p or sum(parts) != self.n_layers:
                return None
            stage_max = 0
            for s, n in enumerate(parts):
                d = order[s * r_count + r]
                if not 1 <= n <= self.capacity[d]:
                    return None
                stage_max = max(stage_max, n * self.layer_ps[d])
            slowest.append(stage_max)
        compute = round(max(slowest) * self.bubble)
        rows, pp, all_links = self.pp_rows, 0, 0
        for k in range(r_count, p * r_count, r_count):   # Eq. 3-4: each cut's slowest replica link
            links = [rows[order[k + r - r_count]][order[k + r]] for r in range(r_count)]
            pp += max(links)
            all_links += sum(links)
        per_device = self.dp_per_device(order, partitions)
        if spread is not None:
            spread.append(round(sum(slowest) * self.bubble) + all_links + int(per_device.sum()))
        return compute, int(per_device.max()), pp

    def dp_per_device(self, order, partitions):
        """Each slot's device's DP time with layers (module docstring; DATAP-COST is the
        largest), in slot space: shared[i][j], the layers slots i and j both hold, depends on
        the partitions only (cached), then the links of the slots' devices are read off the order."""
        if self.n_replicas == 1:
            return np.zeros(len(order), dtype=np.int64)
        shared = self._shared.get(partitions)
        if shared is None:
            p, r_count = self.n_stages, self.n_replicas
            stage_of = np.repeat(np.arange(p)[None, :].repeat(r_count, 0).ravel(),
                                 np.asarray(partitions).ravel()).reshape(r_count, self.n_layers)
            held = np.zeros((self.n_layers, p * r_count), dtype=np.int64)   # layer x slot
            held[np.arange(self.n_layers)[:, None], stage_of.T * r_count + np.arange(r_count)] = 1
            shared = held.T @ held
            np.fill_diagonal(shared, 0)
            shared = self._shared[partitions] = (shared, shared > 0)
        ix = np.ix_(order, order)
        return (shared[1] * self.dp_latency[ix] + shared[0] * self.dp_per_layer[ix]).sum(axis=1)

    def total_ps(self, order, partitions):
        terms = self.terms_ps(order, tuple(map(tuple, partitions)))
        total = INFEASIBLE_PS if terms is None else sum(terms)
        if self.runs:
            self._seen(total)
        return total

    def cost_ps(self, order, spread=None):
        """The searches' objective: the order priced with the balancer's partitions."""
        terms = self.terms_ps(order, self.balanced_partitions(order), spread)
        if terms is None and spread is not None:
            spread.append(INFEASIBLE_PS)
        total = INFEASIBLE_PS if terms is None else sum(terms)
        if self.runs:
            self._seen(total)
        return total

    def breakdown(self, order, partitions=None):
        partitions = self.balanced_partitions(order) if partitions is None else tuple(map(tuple, partitions))
        terms = self.terms_ps(order, partitions)
        if terms is None:
            return Breakdown(float("inf"), float("inf"), float("inf"), float("inf"), False, partitions)
        c, d, p = (t / PS_PER_S for t in terms)
        return Breakdown(c, d, p, sum(terms) / PS_PER_S, True, partitions)

    def state(self, order):
        return HeteroState(self, order)


class HeteroState:
    """A layout for demo 1's genetic_search (layout_search): the interface of
    layout_cost.SwapState (total, order, propose, accept, all_terms), each proposal priced
    in full with the balancer's partitions; all_terms is HeteroCost's spread."""

    def __init__(self, cost, order):
        self.cost, self.order = cost, list(order)
        spread = []
        self.total = cost.cost_ps(self.order, spread)
        self.all_terms, self._pending = spread[0], None

    def proposed_all_terms(self):
        return self._pending[3]

    def propose(self, i, j):
        order, spread = self.order, []
        order[i], order[j] = order[j], order[i]
        total = self.cost.cost_ps(order, spread)
        order[i], order[j] = order[j], order[i]
        self._pending = (i, j, total, spread[0])
        return total

    def accept(self):
        i, j, total, spread = self._pending
        self.order[i], self.order[j] = self.order[j], self.order[i]
        self.total, self.all_terms, self._pending = total, spread, None
