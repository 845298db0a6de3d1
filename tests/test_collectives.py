"""Lecture 9 code 1: the α–β formulas by hand, every collective schedule against the true
sum (simulated for many p; on real gloo ranks through the --quick run), bad flags, and a
--quick smoke run of 01_collectives.py."""

import pytest

from lecture09.ranks import alpha_beta as ab
from lecture09.ranks import collectives as C
from conftest import LECTURE09, load_script, main_quietly, shared_quick_run

MiB = 2**20


# --- the α–β model, by hand --------------------------------------------------------------

def test_point_to_point_time():
    assert ab.alpha_beta_time_s(1000, 1e-3, 1e6) == pytest.approx(1e-3 + 1e-3)     # α + n/β
    assert ab.alpha_beta_time_s(0, 2e-6, 1e9, messages=5) == pytest.approx(1e-5)     # latency only
    assert ab.alpha_beta_time_s(8e9, 0.0, 1e9) == pytest.approx(8.0)                 # bits and bit/s work too


def test_ring_all_reduce_formula_by_hand():
    # p = 4, n = 4 MiB, α = 1 ms, β = 1 MiB/s: 2·3 rounds · 1 ms + 2·3/4 · 4 MiB / (1 MiB/s) = 6 ms + 6 s
    assert ab.ring_all_reduce_time_s(4 * MiB, 4, 1e-3, MiB) == pytest.approx(0.006 + 6.0)
    assert ab.collective_cost("all-reduce", "ring", 4 * MiB, 4) == (6, 6 * MiB)
    # bytes per worker 2(p−1)/p·n: p = 2 sends n, p = 64 sends 126/64·n, never 2n
    assert ab.all_reduce_bytes_sent("ring", MiB, 2) == MiB
    assert ab.all_reduce_bytes_sent("ring", 64 * 1000, 64) == 126 * 1000
    assert ab.all_reduce_bytes_sent("naive", MiB, 64) == 63 * MiB
    assert ab.all_reduce_bytes_sent("tree", MiB, 64) == 6 * MiB
    assert ab.all_reduce_bytes_sent("tree", 5000, 5) == 3 * 5000                    # ⌈log2 5⌉ = 3


def test_one_worker_costs_nothing():
    for collective in ab.COLLECTIVES:
        for algorithm in ab.ALGORITHMS:
            assert ab.collective_cost(collective, algorithm, 1000, 1) == (0, 0)
            assert ab.collective_time_s(collective, algorithm, 1000, 1, 1.0, 1.0) == 0
            assert C.schedule(collective, algorithm, 1) == []


def test_more_bandwidth_never_costs_more_and_tree_depth():
    slow = ab.collective_time_s("all-reduce", "ring", 16 * MiB, 16, 1e-4, 1e9)
    fast = ab.collective_time_s("all-reduce", "ring", 16 * MiB, 16, 1e-4, 1e10)
    assert fast < slow
    assert [ab.tree_depth(p) for p in (1, 2, 3, 4, 5, 8, 9, 64)] == [0, 1, 2, 2, 3, 3, 4, 6]


def test_crossover_by_hand():
    # n = p·α·β: p = 16, α = 0.1 ms, β = 25 Gbit/s = 3.125e9 B/s → 16 · 1e-4 · 3.125e9 = 5e6 bytes
    assert ab.ring_crossover_bytes(16, 1e-4, 3.125e9) == pytest.approx(5e6)
    n = 5_000_000 // 16 * 16
    latency_term = 2 * 15 * 1e-4
    assert ab.ring_all_reduce_time_s(n, 16, 1e-4, 3.125e9) == pytest.approx(2 * latency_term, rel=1e-5)


def test_formulas_refuse_uneven_chunks():
    with pytest.raises(ValueError):
        ab.collective_cost("all-reduce", "ring", 10, 3)
    with pytest.raises(ValueError):
        ab.collective_cost("all-reduce", "bogus", 12, 3)


def test_fit_recovers_a_known_model():
    alpha, beta = 2e-4, 5e8
    rounds = [1, 2, 6, 6, 30, 8]
    path = [64, 1e3, 1e5, 4e6, 2e7, 8e6]
    times = [r * alpha + b / beta for r, b in zip(rounds, path)]
    fitted_alpha, fitted_beta = ab.fit_alpha_beta(rounds, path, times)
    assert fitted_alpha == pytest.approx(alpha, rel=1e-9)
    assert fitted_beta == pytest.approx(beta, rel=1e-9)


# --- schedules ----------------------------------------------------------------------------

def test_ring_reduce_scatter_by_hand_for_three_workers():
    # round 0: worker i sends chunk (i − 1) mod 3 to i + 1
    assert C.ring_reduce_scatter(3)[0] == (C.Transfer(0, 1, 2, 3, True), C.Transfer(1, 2, 0, 1, True),
                                           C.Transfer(2, 0, 1, 2, True))
    x = [C.integer_inputs(3, 3, seed=5)[i] for i in range(3)]
    out = C.simulate(C.ring_reduce_scatter(3), x)
    total = x[0] + x[1] + x[2]
    assert [float(out[i][i]) for i in range(3)] == [float(total[i]) for i in range(3)]


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 7, 8, 9, 16, 33, 64])
def test_every_collective_equals_the_true_sum_simulated(p):
    for key in C.SCHEDULES:
        rounds = C.schedule(*key, p)
        C.check_rounds(rounds, p)
        for n in (p, 3 * p + 2):                      # equal and unequal chunks
            inputs = C.integer_inputs(p, n, seed=p + n)
            assert C.matches(key[0], inputs, C.simulate(rounds, inputs)), (key, p, n)


def test_matches_notices_a_wrong_answer():
    inputs = C.integer_inputs(3, 6, seed=0)
    wrong = C.simulate(C.schedule("all-reduce", "ring", 3), inputs)
    wrong[2][0] += 1
    assert not C.matches("all-reduce", inputs, wrong)


@pytest.mark.parametrize("p", [2, 3, 4, 6, 8, 12, 16, 64])
def test_schedule_cost_equals_the_formula(p):
    n = p * 1024
    for key in C.SCHEDULES:
        stats = C.schedule_cost(C.schedule(*key, p), n, p, element_bytes=1)
        assert (stats.rounds, stats.path_bytes) == ab.collective_cost(*key, n, p), key
        if key[0] == "all-reduce":
            assert max(stats.bytes_sent) == ab.all_reduce_bytes_sent(key[1], n, p)
    ring = C.schedule_cost(C.schedule("all-reduce", "ring", p), n, p, element_bytes=1)
    assert set(ring.bytes_sent) == {2 * (p - 1) * 1024}                # every worker the same


def test_check_rounds_refuses_two_sends_from_one_worker():
    with pytest.raises(ValueError):
        C.check_rounds([(C.Transfer(0, 1, 0, 1, True), C.Transfer(0, 2, 1, 2, True))], 3)


# --- the script ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def script():
    return load_script(LECTURE09 / "01_collectives.py")


@pytest.fixture(scope="module")
def quick_run(script):
    return shared_quick_run("01_collectives.py")              # the golden output's run too


def test_quick_run_collectives_on_real_gloo_ranks_equal_the_sum(quick_run):
    results, _ = quick_run
    assert results["demo5"]["checks"] == {2: True, 3: True}        # 15 schedules each, on real ranks
    assert results["demo5"]["sums_ok"]
    # The fit clips α at 1e-12 s and 1/β at 1e-18 s/byte; on these times neither may be clipped
    # (a clipped coefficient means the measurements did not show that term at all).
    assert results["demo5"]["alpha_s"] > 1e-12 and results["demo5"]["beta"] < 1e18


def test_quick_run_prints_exact_arithmetic(quick_run):
    from lecture01.console import display_width
    results, text = quick_run
    assert results["demo1"]["ok"]
    assert "10 20 30 40" in text                                    # (1+2+3+4) x (1, 2, 3, 4)
    assert results["demo2"]["failures"] == [] and results["demo2"]["formula_mismatches"] == 0
    # p = 8, n = 1 MiB: ring 2·7/8 · 1,048,576 = 1,835,008; naive 7 · 1,048,576 = 7,340,032; tree 3 MiB
    assert results["demo3"][8] == {"naive": 7_340_032, "tree": 3_145_728, "ring": 1_835_008}
    assert "1,835,008" in text
    assert all(display_width(line) <= 100 for line in text.splitlines())


@pytest.mark.parametrize("flags", [["--real-p", "1"], ["--n-bytes", "1000"], ["--repeats", "0"],
                                   ["--latency-us", "-1"], ["--demo", "8"],
                                   ["--links", "10", "0"], ["--links", "20", "100", "--demo", "5"]])
def test_bad_flags_exit_2_with_one_line(script, flags, capsys):
    with pytest.raises(SystemExit) as info:
        script.parse_args(flags)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


def test_help_needs_no_torch():
    """--help parses before torch is imported (torch alone takes seconds to import)."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-X", "importtime", str(LECTURE09 / "01_collectives.py"), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--real-p" in done.stdout
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "numpy" in imported and "torch" not in imported


def test_demo4_sizes_are_multiples_of_p_and_unchanged_for_powers_of_two():
    code1 = load_script(LECTURE09 / "01_collectives.py")
    sizes = (2**10, 2**14, 2**30)
    assert code1.demo4_sizes(sizes, 16) == list(sizes)
    assert code1.demo4_sizes(sizes, 3) == [1026, 16386, 2**30 + 2]       # by hand: the next multiple of 3
    assert all(n % 48 == 0 and 0 <= n - s < 48 for n, s in zip(code1.demo4_sizes(sizes, 48), sizes))


@pytest.mark.parametrize("p", ["3", "12", "48"])
def test_demo4_with_a_p_that_does_not_divide_the_sweep_runs_and_says_so(p, capsys):
    """The crash of issue 21: --p 3 passed the flag check, then demo 4 swept from 1 KiB."""
    code1 = load_script(LECTURE09 / "01_collectives.py")
    results, out = main_quietly(code1.main, ["--demo", "4", "--p", p, "--n-bytes", "3145728"])
    assert f"p = {p} 不整除 2 的幂" in out
    assert results["demo4"]["crossover_bytes"] > 0
