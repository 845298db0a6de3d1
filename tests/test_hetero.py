"""Code 5's demo 3 (mixed cards, uneven stages; notes §5.11): the cost against demo 1's
Eq. 1-4 and §3's bytes, the layer load balancer against every split, the proven optimum
against an independent brute force, each search's evaluations and gaps as arithmetic, the
observations on each of their branches, and the refusals."""

import itertools
import math
import random
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import LECTURE09, ROOT
from lecture09.parallel import memory_model
from lecture09.schedule import hetero_search
from lecture09.schedule.device_figures import CARDS, UTILISATION, parse_mix
from lecture09.schedule.geo_network import network_from_matrices
from lecture09.schedule.hetero_cost import HeteroCost, HeteroSetup, layer_bytes, max_layers
from lecture09.schedule.hetero_study import small_world, study
from lecture09.schedule.layout_cost import assignment_from_order, iteration_cost
from lecture09.schedule.schedule_setup import ScheduleSetup, build_networks

SCRIPT = LECTURE09 / "05_decentralized.py"


@pytest.fixture(scope="module")
def world():
    hetero = HeteroSetup()
    net, _ = build_networks(hetero.base)
    return hetero, net


def test_equal_cards_and_even_stages_give_demo_1s_eq_2_to_4_and_its_compute(world):
    """With every card demo 1's V100 and 6 layers per stage: DATAP and PIPELINE are
    iteration_cost's (Eq. 1-4, within the rounding of one ps per layer term), compute is
    ScheduleSetup.compute_s (ideal x (M+P-1)/M)."""
    hetero, net = world
    s = hetero.base
    cost = HeteroCost(net, ["v100"] * 32, s, 4, 8, 24)
    for seed in range(3):
        order = list(range(32))
        random.Random(seed).shuffle(order)
        b = cost.breakdown(order)
        assert b.partitions == ((6, 6, 6, 6),) * 8
        ref = iteration_cost(assignment_from_order(order, 8), net, 4, 8, s.stage_param_bytes, s.act_bytes, 4)
        assert abs(b.dp - ref["dp"]) < 1e-10 and b.pp == ref["pp"]
        assert math.isclose(b.compute, s.compute_s, rel_tol=1e-12)


def test_layer_bytes_are_section_3s_zero_1_and_recomputation_formulas():
    s = ScheduleSetup()
    for layers, replicas in ((24, 8), (4, 3), (12, 1)):
        per_layer, fixed = layer_bytes(s, layers, replicas)
        b = s.global_batch // (replicas * s.n_micro_batches)
        states = memory_model.zero_bytes_per_gpu(s.n_params / layers, replicas, 1)
        inputs = s.n_micro_batches * memory_model.activation_bytes_per_layer(s.seq_len, b, s.hidden, 24,
                                                                              recompute="full")
        assert math.isclose(per_layer, states + inputs, rel_tol=1e-12)
        assert math.isclose(fixed, memory_model.activation_bytes_per_layer(s.seq_len, b, s.hidden, 24,
                                                                           recompute="selective"), rel_tol=1e-12)
    # a T4 at demo 1's size: (16 GB - 4.56) / 1.37 GB per layer = 8 layers
    assert max_layers(s, 24, 8, 16.0) == 8 and max_layers(s, 24, 8, 5.9) == 0 and max_layers(s, 24, 8, 6.0) == 1


def test_the_balancer_gives_the_smallest_slowest_stage_of_every_split_that_fits(world):
    hetero, net = world
    cards = list(CARDS)
    rng = random.Random(0)
    memory = {"t4": 8.0, "v100-16": 7.5}   # capacities 2 and 2: memory binds
    every = [tuple(b - a for a, b in zip((0,) + c, c + (24,))) for c in itertools.combinations(range(1, 24), 3)]
    for _ in range(60):
        chain_cards = [rng.choice(cards) for _ in range(4)]
        cost = HeteroCost(net, chain_cards + ["t4"] * 28, hetero.base, 4, 8, 24, memory_gb=memory)
        chain = [0, 1, 2, 3]
        got = cost.balance(chain)
        splits = [p for p in every if all(n <= cost.capacity[d] for n, d in zip(p, chain))]
        if not splits:
            assert got is None
            continue
        best = min(max(n * cost.layer_ps[d] for n, d in zip(p, chain)) for p in splits)
        assert max(n * cost.layer_ps[d] for n, d in zip(got, chain)) == best, (chain_cards, got)


# ---------------------------------------------------------------------------------------
# The proven optimum against a brute force written from the formulas, not from hetero_cost
# ---------------------------------------------------------------------------------------

def brute_force(net, cards, setup, p, r_count, layers, memory_gb=None):
    """The least total (s) over every placement of devices in slots and every split of the
    layers, each priced straight from the formulas of §5.11 (floats, plain loops)."""
    memory_gb = memory_gb or {}
    bw, lat, m = net["bandwidth_bps"], net["latency_s"], setup.n_micro_batches
    flops = 6 * setup.n_params * setup.seq_len * setup.global_batch / (layers * r_count)
    t_layer = [flops / (CARDS[c].peak_tflops * 1e12 * UTILISATION) for c in cards]
    b = setup.global_batch // (r_count * m)
    per_layer = memory_model.zero_bytes_per_gpu(setup.n_params / layers, r_count, 1) + m * 2 * setup.seq_len * b * setup.hidden
    fixed = 34 * setup.seq_len * b * setup.hidden
    cap = [math.floor((memory_gb.get(c, CARDS[c].memory_gb) * 1e9 - fixed) / per_layer) for c in cards]
    act_bits = setup.seq_len * setup.hidden * 2 * (setup.global_batch // r_count) * 8
    grad_bits = setup.n_params * 2 / layers * 8
    splits = [tuple(bb - a for a, bb in zip((0,) + c, c + (layers,)))
              for c in itertools.combinations(range(1, layers), p - 1)]
    best = math.inf
    for order in itertools.permutations(range(len(cards)), p * r_count):
        slot = lambda s, r: order[s * r_count + r]   # noqa: E731
        pp = sum(max(2 * m * (lat[slot(s - 1, r)][slot(s, r)] + act_bits / m / bw[slot(s - 1, r)][slot(s, r)])
                     for r in range(r_count)) for s in range(1, p))
        for parts in itertools.product(splits, repeat=r_count):
            if any(parts[r][s] > cap[slot(s, r)] for r in range(r_count) for s in range(p)):
                continue
            compute = max(max(parts[r][s] * t_layer[slot(s, r)] for s in range(p)) for r in range(r_count))
            compute *= (m + p - 1) / m
            holder = {}   # layer -> devices holding it
            for r in range(r_count):
                layer = 0
                for s in range(p):
                    for _ in range(parts[r][s]):
                        holder.setdefault(layer, []).append(slot(s, r))
                        layer += 1
            dp = 0.0
            for d in order:
                shared = {}
                for group in holder.values():
                    if d in group:
                        for e in group:
                            if e != d:
                                shared[e] = shared.get(e, 0) + 1
                dp = max(dp, sum(2 * (lat[d][e] + k * grad_bits / (r_count * bw[d][e])) for e, k in shared.items()))
            best = min(best, compute + dp + pp)
    return best


def _three_region_net(sizes, gbps, ms):
    region = [k for k, n in enumerate(sizes) for _ in range(n)]
    bw = np.array([[gbps[a][b] * 1e9 for b in region] for a in region])
    lat = np.array([[ms[a][b] / 1e3 for b in region] for a in region])
    return network_from_matrices(region, bw, lat)


def test_the_proven_optimum_equals_an_independent_brute_force_on_demo_3s_small_instance(world):
    hetero, net = world
    s_net, cards, setup = small_world(hetero, net)
    cost = HeteroCost(s_net, cards, setup, 2, 3, hetero.small_layers)
    optimum = hetero_search.enumerate_layouts(cost, every_partition=True)
    assert optimum.finished
    assert cost.total_ps(optimum.order, optimum.partitions) == optimum.total_ps
    assert math.isclose(optimum.total, brute_force(s_net, cards, setup, 2, 3, hetero.small_layers), rel_tol=1e-9)


@pytest.mark.parametrize("cards, memory", [
    (["a100", "t4", "t4", "rtx3090", "v100-16"], {"t4": 9.0}),       # one device left over; a T4 holds 1 layer
    (["rtx4090", "rtx4090", "t4", "a100", "v100"], {}),
])
def test_the_proven_optimum_equals_the_brute_force_with_a_spare_device_and_tight_memory(cards, memory):
    net = _three_region_net([2, 2, 1], [[10, 0.5, 1.2], [0.5, 10, 0.3], [1.2, 0.3, 10]],
                            [[0.1, 80, 30], [80, 0.1, 150], [30, 150, 0.1]])
    setup = ScheduleSetup(n_stages=2, n_replicas=2, global_batch=256)
    cost = HeteroCost(net, cards, setup, 2, 2, 5, memory_gb=memory)
    optimum = hetero_search.enumerate_layouts(cost, every_partition=True)
    assert optimum.finished and optimum.order is not None
    assert math.isclose(optimum.total, brute_force(net, cards, setup, 2, 2, 5, memory), rel_tol=1e-9)


def test_the_proven_optimum_equals_the_brute_force_when_two_replicas_take_the_same_classes():
    """Pairs of identical cards per region: the enumeration's classes hold two devices, so
    two replicas may be the same class sequence (the multiset must allow repeats)."""
    net = _three_region_net([2, 2, 2], [[10, 1.0, 0.8], [1.0, 10, 0.6], [0.8, 0.6, 10]],
                            [[0.1, 20, 40], [20, 0.1, 30], [40, 30, 0.1]])
    cards = ["a100", "a100", "t4", "t4", "rtx3090", "rtx3090"]
    setup = ScheduleSetup(n_stages=2, n_replicas=2, global_batch=256)
    cost = HeteroCost(net, cards, setup, 2, 2, 5)
    optimum = hetero_search.enumerate_layouts(cost, every_partition=True)
    chains = [tuple(cost._kind[d] for d in cost.chain(optimum.order, r)) for r in range(2)]
    assert chains[0] == chains[1]   # the case this test is for: both replicas the same classes
    assert math.isclose(optimum.total, brute_force(net, cards, setup, 2, 2, 5), rel_tol=1e-9)


def test_dp_with_misaligned_layers_by_hand():
    """2 replicas x 2 stages, 4 layers; replica 0 splits 1+3, replica 1 splits 3+1. Slots:
    (0,0)=dev0 (0,1)=dev1 (1,0)=dev2 (1,1)=dev3. Layer 0: {0, 1}; layers 1-2: {2, 1};
    layer 3: {2, 3}. Device 1 shares 1 layer with 0 and 2 with 2; device 2 shares 2 with
    1 and 1 with 3. All links: latency 10 ms, 1 Gbit/s; a layer's gradient c bits:
    T_1 = 2(0.01 + c/(2e9)) + 2(0.01 + 2c/(2e9)) = T_2, the largest."""
    net = _three_region_net([4], [[1]], [[10]])
    setup = ScheduleSetup(n_stages=2, n_replicas=2, global_batch=64)
    cost = HeteroCost(net, ["v100"] * 4, setup, 2, 2, 4)
    c = setup.n_params * 2 / 4 * 8
    expected = 2 * (0.01 + c / 2e9) + 2 * (0.01 + 2 * c / 2e9)
    assert abs(cost.breakdown([0, 1, 2, 3], [(1, 3), (3, 1)]).dp - expected) < 1e-9
    aligned = 2 * (0.01 + 3 * c / 2e9)   # both 1+3: device 2 shares 3 layers with device 3 only
    assert abs(cost.breakdown([0, 1, 2, 3], [(1, 3), (1, 3)]).dp - aligned) < 1e-9


# ---------------------------------------------------------------------------------------
# The searches' evaluations and gaps, and the observations on each branch
# ---------------------------------------------------------------------------------------

QUICK = dict(budget=700, small_budget=600, seeds=2)


def quick(mix=None, **more):
    base = ScheduleSetup(n_random=20, restarts=2, genetic_population=3, genetic_local_iters=100)
    hetero = HeteroSetup(base=base, **QUICK, **more)
    return hetero if mix is None else HeteroSetup(base=base, mix=parse_mix(mix), **QUICK, **more)


@pytest.fixture(scope="module")
def default_run():
    return study(quick())


@pytest.fixture(scope="module")
def all_fast_run():
    return study(quick("a100=8,t4=24"))


def test_each_search_reports_the_costs_it_computed(world):
    hetero, net = world
    cost = HeteroCost(net, hetero.cards, hetero.base, 4, 8, 24)
    for run in (lambda: hetero_search.genetic(cost, 700, 2, 3, 100),
                lambda: hetero_search.graph_partition(cost, 700, 2),
                lambda: hetero_search.enumerate_layouts(cost, 300, max_nodes=5000)):
        before = cost.calls
        result = run()
        assert result.evaluations == cost.calls - before > 0
        assert cost.cost_ps(list(result.order)) == result.total_ps   # the total is the order's own cost
    assert hetero_search.genetic(cost, 700, 2, 3, 100).evaluations <= 2 * 700


def test_gaps_are_the_printed_totals_arithmetic(default_run):
    for inst in (default_run.small, default_run.large):
        ref = inst.best.total_ps
        for name, result in inst.results.items():
            if name != "optimum":
                assert inst.gap(name) == result.total_ps / ref - 1 >= 0
        assert min(inst.gap(n) for n in ("genetic", "graph", "enumeration")) >= 0
    assert default_run.small.best is default_run.small.results["optimum"]


def test_printed_gap_equals_the_printed_totals(capsys):
    """In the printed tables (d) and (e): 离最优 / 离最好 = 合计 / reference - 1, to the printed digits."""
    from lecture09.schedule.demo3_tables import print_demo3
    print_demo3(study(quick()))
    out = capsys.readouterr().out
    for table in ("表 (d)", "表 (e)"):
        block = out[out.index(table):].split("\n\n")[0]
        rows = re.findall(r"^\S.*?\s([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+\+([\d.]+)%", block, re.M)
        totals = [float(r[3]) for r in rows]
        ref = min(totals)
        for r in rows:
            assert abs(float(r[4]) - (float(r[3]) / ref - 1) * 100) <= 0.06 + 100 * 0.005 / ref, (table, r)


def test_observations_on_the_default_mix(default_run):
    from lecture09.schedule.demo3_observations import demo3_observations
    text = "\n".join(demo3_observations(default_run))
    small, ctl = default_run.small, default_run.control.rows
    opt = small.results["optimum"]
    assert f"证明过的最优 {opt.total:.2f} 秒" in text and "没到的" in text and "只改切层就差" in text
    from lecture09.schedule.demo3_tables import optimum_with_balancer
    diff = optimum_with_balancer(small).total - opt.total
    assert f"只改切层就差 {diff:.2f} 秒" in text
    assert "反而更慢" in text and ctl["homo_balanced"].mixed.total > ctl["homo_even"].mixed.total
    more = ctl["homo_even"].mixed.total - ctl["mixed_best"].mixed.total
    assert (f"多 {more:.2f} 秒" in text) if more > 0 else ("就是找到的最好" in text)
    assert "'流水线待在地区内'也成立" in text   # 24/24 in both rows


def test_observations_on_a_mix_where_every_search_reaches_the_optimum(all_fast_run):
    from lecture09.schedule.demo3_observations import demo3_observations
    text = "\n".join(demo3_observations(all_fast_run))
    small = all_fast_run.small
    assert all(small.gap(n) == 0 for n in ("genetic", "graph", "enumeration"))
    assert "到了最优的：遗传算法、图划分、剪枝枚举" in text and "没到的" not in text
    assert "最优的放法配上负载均衡器的切层也一样快" in text
    ctl = all_fast_run.control.rows
    if ctl["homo_even"].mixed.total == ctl["mixed_best"].mixed.total:
        assert "就是找到的最好" in text
    if ctl["homo_balanced"].mixed.total == ctl["homo_even"].mixed.total:
        assert "一样快（负载均衡器给这些流水线的也是均分）" in text


def test_observations_when_the_best_layout_leaves_regions():
    """A mix where the best found pipeline crosses regions: the 'inside regions' sentence turns."""
    from lecture09.schedule.demo3_observations import control_observation
    from lecture09.schedule.hetero_study import Control, ControlRow
    from lecture09.schedule.hetero_cost import Breakdown

    def b(total, compute=1.0, dp=1.0):
        return Breakdown(compute, dp, total - compute - dp, total, True, ())

    class R:
        control = Control(None, (), {"homo_even": ControlRow(b(40.0), b(60.0), 24, 24),
                                     "homo_balanced": ControlRow(b(40.0), b(58.0, 2.0), 24, 24),
                                     "mixed_best": ControlRow(b(45.5), b(50.0), 18, 24)})
    text = control_observation(R)
    R.control.rows["homo_even"] = ControlRow(b(40.0), b(47.5), 24, 24)   # even stages beat the searches
    assert "反而比三种搜索找到的最好还快 2.50 秒" in control_observation(R)
    assert "找到的最好分配 18/24——'流水线待在地区内'不再成立" in text
    assert "多 10.00 秒（+20.0%）" in text and "多 5.50 秒：它为了迁就卡的速度和显存付出的通信" in text
    assert "按卡速切层 58.00 秒" in text or "按卡速重切层 58.00 秒" in text


# ---------------------------------------------------------------------------------------
# Flags: the legal extremes run, the rest are refused in one line before torch is imported
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, words", [
    (["--memory-gb", "t4=4"], "放不下一层"), (["--mix", "a100=4"], "任务要 32 张"),
    (["--mix", "h100=32"], "不是 卡=张数"), (["--mix", "t4=16,t4=16"], "出现了两次"),
    (["--mix", "t4=32", "--memory-gb", "t4=7"], "所有卡加起来放不下"), (["--memory-gb", "a100=0"], "超出范围"),
    (["--memory-gb", "rtx3060=8"], "要写成 卡=GB"), (["--mix", "t4=32", "--memory-gb", "a100=40"], "不在 --mix 里"),
    (["--hetero-budget", "100"], "至少要"),
])
def test_refusals_are_one_line_status_2_within_100_columns_and_before_torch(argv, words):
    from lecture01.console import display_width
    probe = ("import sys, runpy; sys.argv = ['05_decentralized.py', '--demo', '3'] + sys.argv[1:]\n"
             "try:\n    runpy.run_path(%r, run_name='__main__')\n"
             "except SystemExit as e:\n    print('torch' in sys.modules, file=sys.stderr); raise\n" % str(SCRIPT))
    done = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=60,
                          cwd=str(ROOT.parent))
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and done.stdout == "" and len(lines) == 2, done.stderr
    assert words in lines[0] and display_width(lines[0]) <= 100 and lines[1] == "False", lines


@pytest.mark.parametrize("argv", [["--mix", "v100=32"], ["--mix", "t4=32"], ["--memory-gb", "t4=6"],
                                  ["--mix", "a100=31,t4=1"], ["--global-batch", "64", "--second-batch", "0"]])
def test_legal_extremes_run_and_print_within_100_columns(argv):
    from lecture01.console import display_width
    done = subprocess.run([sys.executable, str(SCRIPT), "--demo", "3", "--quick", *argv], capture_output=True,
                          text=True, timeout=300, cwd=str(ROOT.parent))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "观察 Observations（演示 3）" in done.stdout and "Traceback" not in done.stderr
    assert all(display_width(line) <= 100 for line in done.stdout.splitlines())


def _fake_instance(totals, finished=True, n_stages=4, n_replicas=8, optimum=None):
    """An Instance of made-up search results (observations read only totals, counts, flags)."""
    from types import SimpleNamespace
    from lecture09.schedule.hetero_search import SearchResult
    from lecture09.schedule.hetero_study import Instance
    results = {name: SearchResult(name, (), round(t * 1e12), n, (t,), finished if name == "enumeration" else True)
               for (name, (t, n)) in totals.items()}
    if optimum is not None:
        results["optimum"] = SearchResult("optimum", (), round(optimum * 1e12), 10)
    return Instance(SimpleNamespace(n_stages=n_stages, n_replicas=n_replicas), results)


def test_large_observation_on_each_branch():
    from types import SimpleNamespace
    from lecture09.schedule.demo3_observations import large_observation
    inst = _fake_instance({"genetic": (60.0, 900), "graph": (50.0, 100), "enumeration": (50.0, 40)}, finished=False)
    text = large_observation(SimpleNamespace(large=inst))
    assert "三者里最好的 50.00 秒来自图划分（100 次）、剪枝枚举（40 次）" in text
    assert "遗传算法 60.00 秒、+20.0%（900 次）" in text and "没有走完，它的结果不是证明" in text
    inst = _fake_instance({"genetic": (50.0, 900), "graph": (50.0, 100), "enumeration": (50.0, 40)})
    text = large_observation(SimpleNamespace(large=inst))
    assert "其余" not in text and "它证明了没有更好的" in text


def test_small_observation_when_nothing_fits_and_the_infeasible_run():
    from types import SimpleNamespace
    from lecture09.schedule.demo3_observations import demo3_observations, small_observation
    from lecture09.schedule.hetero_cost import INFEASIBLE_PS
    assert "小实例没有放得下的分配" in small_observation(SimpleNamespace(small=None))
    nothing = _fake_instance({n: (INFEASIBLE_PS / 1e12, 5) for n in ("genetic", "graph", "enumeration")})
    lines = demo3_observations(SimpleNamespace(small=None, large=nothing))
    assert len(lines) == 3 and "都没有找到放得下的分配" in lines[-1]


@pytest.mark.parametrize("mix", [None, "a100=31,t4=1"])
def test_the_bottleneck_sentence_is_its_rows_arithmetic(mix):
    """Observation 3: layers x seconds per layer x (M+P-1)/M is the printed compute, and the
    count of tied stages is the count of stages that slow."""
    from lecture09.schedule.demo3_observations import bottleneck_observation
    r = study(quick(mix))
    cost, best = r.large.cost, r.large.best
    b = cost.breakdown(best.order, best.partitions)
    text = bottleneck_observation(r)
    m = re.search(r"计算 ([\d.]+) 秒来自最慢的阶段（(?:共 (\d+) 个一样慢，例如)?副本 (\d+) 的阶段 (\d+)）：(\S+) 上 (\d+) 层", text)
    assert m and float(m.group(1)) == round(b.compute, 2)
    rep, s, n = int(m.group(3)), int(m.group(4)), int(m.group(6))
    d = cost.chain(best.order, rep)[s]
    assert m.group(5) == cost.cards[d] and b.partitions[rep][s] == n
    assert round(n * cost.layer_ps[d] * cost.bubble) == round(b.compute * 1e12)
    times = [k * cost.layer_ps[cost.chain(best.order, r_)[s_]] for r_, parts in enumerate(b.partitions)
             for s_, k in enumerate(parts)]
    assert int(m.group(2) or 1) == times.count(max(times))


@pytest.mark.parametrize("with_balancer, words", [(50.0, "这个实例上切层不是搜索差的原因"), (58.0, "只改切层就差 8.00 秒")])
def test_small_observation_when_a_search_misses_with_or_without_the_split_to_blame(with_balancer, words):
    from types import SimpleNamespace
    from lecture09.schedule.demo3_observations import small_observation
    from lecture09.schedule.hetero_cost import Breakdown
    from lecture09.schedule.hetero_study import Instance
    inst = _fake_instance({"genetic": (55.0, 900), "graph": (50.0, 60), "enumeration": (50.0, 40)}, optimum=50.0)
    cost = SimpleNamespace(breakdown=lambda order, partitions=None: Breakdown(20.0, with_balancer - 25.0, 5.0,
                                                                               with_balancer, True, ()))
    text = small_observation(SimpleNamespace(small=Instance(cost, inst.results)))
    assert "到了最优的：图划分、剪枝枚举。" in text and "没到的：遗传算法 +10.0%（900 次）" in text and words in text
