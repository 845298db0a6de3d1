"""Demo 1 executed (lecture09/network/executed.py and executed_report.py, code 5 --demo
executed, §5.12): hand-computed message patterns on the emulated clock, the lockstep
pattern equal to Eq. 1-4, the observations on each branch, the script's flags (extremes
run and fit; bad ones and a network too slow for the budget: one line, status 2)."""

import pytest

from conftest import LECTURE09, SWEEP_TIER, assert_one_line_status_2, load_script, main_quietly
from lecture09.network import executed_report as rep
from lecture09.network.emulator import TimeScale
from lecture09.network.executed import CONTROLS, EXECUTED, LOCKSTEP, Job, Pattern, execute
from lecture09.schedule.geo_network import network_from_matrices, network_from_regions
from lecture09.schedule.layout_cost import LayoutCost, assignment_from_order

code5 = load_script(LECTURE09 / "05_decentralized.py")
ONE = TimeScale(time=1e-3, bytes=1.0)     # bytes as given: no rounding in the hand cases


def flat_network(n, gbps=0.008, ms=2.0):
    """n devices, every link alike: 8 Mbit/s (1000 bytes: 1 ms) and 2 ms."""
    return network_from_matrices([0] * n, [[gbps * 1e9] * n for _ in range(n)], [[ms / 1e3] * n for _ in range(n)])


LAT, T = 0.002, 0.001   # job seconds: latency, and 1000 bytes' serialisation


def test_gpipe_overlap_and_no_overlap_on_three_stages_by_hand():
    """3 stages, 1 replica, M = 4 micro-batches of 1000 bytes: with overlap the last
    micro-batch reaches stage 2 at 2 lat + (M + 1) t; without, at 2 lat + 2 M t; backward
    the same; the model charges each message its latency: 2 cuts x 2 x M (lat + t)."""
    net, job = flat_network(3), Job(3, 1, 4, 0.0, 4000.0)
    layout = assignment_from_order([0, 1, 2], 1)
    assert execute(layout, net, job, EXECUTED, ONE).stamped_seconds == pytest.approx(2 * (2 * LAT + 5 * T))
    no_overlap = Pattern(overlap=False)
    assert execute(layout, net, job, no_overlap, ONE).stamped_seconds == pytest.approx(2 * (2 * LAT + 8 * T))
    model = LayoutCost(net, 3, 1, 0.0, 4000.0, 4)(layout)
    assert model == pytest.approx(2 * 2 * 4 * (LAT + T))
    assert execute(layout, net, job, LOCKSTEP, ONE).stamped_seconds == pytest.approx(model)


def test_eq2_exchange_with_and_without_a_shared_uplink_by_hand():
    """1 stage, 3 replicas, shards of 1000 bytes: a shared uplink sends a device's two
    shards one after another (4 t + 2 lat over both phases), separate links at once
    (2 t + 2 lat); Eq. 2 charges each message its latency: 2 peers x 2 (lat + t)."""
    net, job = flat_network(3), Job(1, 3, 1, 3000.0, 0.0)
    layout = assignment_from_order([0, 1, 2], 3)
    assert execute(layout, net, job, EXECUTED, ONE).stamped_seconds == pytest.approx(4 * T + 2 * LAT)
    assert execute(layout, net, job, CONTROLS["uplink_off"], ONE).stamped_seconds == pytest.approx(2 * T + 2 * LAT)
    model = LayoutCost(net, 1, 3, 3000.0, 0.0)(layout)
    assert model == pytest.approx(4 * (LAT + T))
    assert execute(layout, net, job, LOCKSTEP, ONE).stamped_seconds == pytest.approx(model)
    ring = execute(layout, net, job, CONTROLS["ring"], ONE)       # 2 (n - 1) = 4 steps of (t + lat)
    assert ring.stamped_seconds == pytest.approx(4 * (T + LAT))


def test_lockstep_is_eq_1_to_4_on_an_uneven_network():
    """Two regions with different links, 2 stages x 2 replicas, M = 2: the lockstep
    pattern's emulated time equals the cost model's total, and the bytes metered are
    the pattern's (2 cuts-directions x M x c_PP/M per replica, 2 x (R-1) shards per device)."""
    net = network_from_regions([2, 2], 0.008, 1.0, [[0, 0.004], [0.004, 0]], [[0, 30.0], [30.0, 0]])
    job = Job(2, 2, 2, 2000.0, 4000.0)
    for order in ([0, 1, 2, 3], [0, 2, 1, 3], [3, 0, 1, 2]):
        layout = assignment_from_order(order, 2)
        model = LayoutCost(net, 2, 2, 2000.0, 4000.0, 2)(layout)
        run = execute(layout, net, job, LOCKSTEP, ONE)
        assert run.stamped_seconds == pytest.approx(model, rel=1e-9)
        assert run.bytes_sent == 2 * 2 * 4000.0 + 4 * 2 * 1 * 1000.0


def test_a_random_network_runs_its_seed_and_the_next_a_preset_once():
    from dataclasses import replace
    from lecture09.schedule.schedule_setup import ScheduleSetup
    assert rep.executed_seeds(replace(ScheduleSetup(), net_seed=5)) == (5, 6)
    assert rep.executed_seeds(replace(ScheduleSetup(), network="aws-world")) == (0,)


def result(rows, controls=(), seed=0):
    return rep.SeedResult(seed, tuple(rows), tuple(controls))


def lrow(name, model, executed, lockstep=None):
    return rep.LayoutRow(name, model, model if lockstep is None else lockstep, executed, executed)


def test_fastest_ties_and_rankings_are_read_off_the_table():
    r = result([lrow("optimum", 10, 8), lrow("pipelines_in_regions", 10, 8), lrow("random_1", 50, 20)])
    assert rep.fastest(r)[0] == ["optimum", "pipelines_in_regions"] and rep.ranking_agrees(r) == []
    r = result([lrow("optimum", 10, 9), lrow("random_1", 50, 8)])
    assert rep.fastest(r)[0] == ["random_1"]
    assert rep.ranking_agrees(r) == [("optimum", "random_1")]
    r = result([lrow("optimum", 10, 8, lockstep=10.5), lrow("random_1", 50, 8.5)])   # 5% emulator error
    assert rep.tolerance(r) == pytest.approx(0.05) and rep.fastest(r)[0] == ["optimum", "random_1"]


def crow(layout, name, s, model=10.0):
    return rep.ControlRow(layout, name, s, model, s)


def controls_for(layout, executed, **values):
    names = ["lockstep", "executed"] + list(CONTROLS)
    given = dict(lockstep=10.0, executed=executed, uplink_off=5.0, no_overlap=9.0, stop_and_wait=8.5,
                 dp_after_pipeline=8.0, ring=12.0, **values)
    return [crow(layout, n, given[n]) for n in names]


def test_gap_closed_is_the_share_of_model_minus_executed():
    closed = rep.gap_closed(controls_for("optimum", 8.0), "optimum")
    assert closed == {"no_overlap": pytest.approx(0.5), "stop_and_wait": pytest.approx(0.25),
                      "dp_after_pipeline": pytest.approx(0.0)}
    assert set(rep.gap_closed(controls_for("optimum", 10.0), "optimum").values()) == {None}


def sentences(results):
    lines = []
    rep.observations(results, out=lines.append)
    return "\n".join(lines)


def test_observations_on_each_branch():
    fast = result([lrow("optimum", 10, 8), lrow("random_1", 50, 20)], controls_for("optimum", 8.0))
    slow = result([lrow("optimum", 10, 9), lrow("random_1", 50, 8)], seed=1)
    text = sentences([fast, slow])
    assert "网络种子 0：最优分配执行起来仍然最快（执行 8.00 秒，模型 10.00 秒，比 0.80）" in text
    assert "网络种子 1：最优分配执行起来不是最快：随机 random #1 8.00 秒，比它的 9.00 秒快" in text
    assert "排序在 1 对上相反" in text and "排序和模型一致" in text
    assert "'微批次不重叠'：50%（8.00 → 9.00 秒）" in text and "逐条等到达 25%" in text
    assert "上行不共享时是模型的 0.50 倍；环形交换时是模型的 1.20 倍" in text
    same = result([lrow("optimum", 10, 10)], controls_for("optimum", 10.0))
    assert "执行和模型一样（10.00 秒）" in sentences([same])


def test_the_script_runs_small_and_every_line_fits():
    from lecture01.console import LINE_WIDTH, display_width
    results, out = main_quietly(code5.main, ["--demo", "executed", "--time-scale", "1e-4"])
    seeds = results["executed"]
    assert [s.net_seed for s in seeds] == [0, 1]
    for s in seeds:
        for r in s.rows:   # lockstep is Eq. 1-4 up to whole bytes; the printed ratio is the row's
            assert r.lockstep_s == pytest.approx(r.model_s, rel=1e-3)
            assert f"{r.executed_s:.2f}  " in out and f"{r.ratio:.2f}" in out
    assert "观察 Observations（执行的演示 1）" in out
    assert not [line for line in out.splitlines() if display_width(line) > LINE_WIDTH]


@pytest.mark.parametrize("argv", [
    pytest.param(["--regions", "1"], marks=SWEEP_TIER), pytest.param(["--regions", "8"], marks=SWEEP_TIER),
    pytest.param(["--intra-latency-ms", "0", "--inter-latency-ms", "0", "0"], marks=SWEEP_TIER),
    pytest.param(["--intra-gbps", "100000", "--inter-gbps", "100000", "100000"], marks=SWEEP_TIER),
    pytest.param(["--micro-batches", "1", "--network", "aws-regional"], marks=SWEEP_TIER),
    pytest.param(["--network", "aws-world"], marks=SWEEP_TIER)])
def test_extreme_flags_run_and_fit(argv):
    from lecture01.console import display_width
    _, out = main_quietly(code5.main, ["--demo", "executed", "--time-scale", "1e-4", *argv])
    assert "观察 Observations" in out
    assert not [line for line in out.splitlines() if display_width(line) > 100]


@pytest.mark.parametrize("argv,words", [(["--time-scale", "0"], "--time-scale"), (["--regions", "3"], "--regions"),
                                        (["--inter-gbps", "0.01", "0.01"], "too slow")])
def test_bad_flags_and_a_network_too_slow_for_the_budget(argv, words):
    assert_one_line_status_2(LECTURE09 / "05_decentralized.py", ["--demo", "executed", *argv], words)


@pytest.mark.slow
@pytest.mark.claims
def test_claims_the_executed_demo_at_its_defaults():
    """The default run: on both network seeds the proven optimum is (tied) fastest
    executed, the executed times rank the layouts as the model does, and the optimum's gap
    to the model is closed mostly by putting back 'no overlap across cuts' (§5.12's claims)."""
    results, out = main_quietly(code5.main, ["--demo", "executed"])
    seeds = results["executed"]
    for s in seeds:
        assert "optimum" in rep.fastest(s)[0] and rep.ranking_agrees(s) == []
        assert f"网络种子 {s.net_seed}：最优分配执行起来仍然最快" in out
    closed = rep.gap_closed(seeds[0].controls, "optimum")
    assert max(closed, key=closed.get) == "no_overlap"
    by = {c.name: c for c in seeds[0].controls if c.layout == "optimum"}
    assert by["uplink_off"].measured_s < by["executed"].measured_s < by["lockstep"].measured_s


@pytest.mark.slow
@pytest.mark.sweep
@pytest.mark.parametrize("argv", [["--demo", "executed"], ["--demo", "time", "--steps", "300"]])
def test_ctrl_c_stops_with_one_line_and_leaves_no_process(argv):
    import time
    from conftest import press_ctrl_c, start_in_own_group
    proc = start_in_own_group(LECTURE09 / "05_decentralized.py", *argv)
    time.sleep(4)
    status, _, err, left = press_ctrl_c(proc)
    assert status == 130 and not left
    assert "Traceback" not in err and err.rstrip().splitlines()[-1] == "已中断 interrupted (Ctrl-C)"


def test_one_region_bounds_the_optimum_without_nan():
    """With one region there is no link between regions: its cost is inf, and a bound of
    0 × inf was NaN (numpy's RuntimeWarning), which the branch and bound's sorted order puts
    last and could cut away. The bound of no later cut across regions is 0."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        main_quietly(code5.main, ["--demo", "executed", "--time-scale", "1e-4", "--regions", "1"])
