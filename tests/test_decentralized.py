"""Lecture 9 code 5: the simulated data-parallel step, a quick smoke run, flag checking."""

import re
from dataclasses import replace

import pytest

from conftest import LECTURE09, SWEEP_TIER, load_script, main_quietly

code5 = load_script(LECTURE09 / "05_decentralized.py")


def test_quick_run_of_both_demos(capsys):
    results = code5.main(["--quick", "--jobs", "1"])
    out = capsys.readouterr().out
    assert "演示 1" in out and "演示 2" in out and out.count("观察 Observations") == 2
    d1 = results["demo1"]
    for inst in (d1.main, d1.second):
        opt = inst.optimum
        assert opt.exact
        heuristics = [m.cost for m in inst.methods.values() if m.cost is not None]
        assert all(opt.cost <= c + 1e-9 for c in heuristics)     # nothing beats the proven optimum
        assert len(inst.random_costs) == code5.QUICK_SCHEDULE["n_random"]
    assert list(d1.main.methods) == list(code5.schedule_study.METHOD_NAMES)
    rows = results["demo2"]
    assert list(rows) == [run.key for run in code5.TABLE_A + code5.TABLE_B]
    assert rows[("adamw", "fp16", False)].results[0].bytes_per_element == 2.0
    assert all(r.bpc.mean < 5.0 for r in rows.values())       # 12 steps already beat uniform guessing
    assert rows[("adamw", "none", False)].deltas == (0.0,)     # the baseline is its own pair


@pytest.mark.slow
@pytest.mark.sweep                  # --seeds: a further case
def test_seeds_flag_prints_ranges_and_pairs_every_seed(capsys):
    results = code5.main(["--quick", "--jobs", "1", "--demo", "2", "--seeds", "2", "--model-seed", "3"])
    out = capsys.readouterr().out
    assert "(3, 1)、(4, 2)" in out                              # seed pairs (model + k, data + k)
    int8 = results["demo2"][("adamw", "int8", False)]
    base = results["demo2"][("adamw", "none", False)]
    assert [r.seeds for r in int8.results] == [r.seeds for r in base.results]
    assert int8.deltas == tuple(r.bpc - b.bpc for r, b in zip(int8.results, base.results))
    assert f"{int8.bpc.low:.4f}–{int8.bpc.high:.4f}" in out
    from lecture01.console import LINE_WIDTH, display_width     # ranges widen the table: it still fits
    assert not [line for line in out.splitlines() if display_width(line) > LINE_WIDTH]


def test_quick_run_is_deterministic(capsys):
    code5.main(["--quick", "--jobs", "1", "--demo", "1"])
    first = capsys.readouterr().out
    code5.main(["--quick", "--jobs", "1", "--demo", "1"])
    assert capsys.readouterr().out == first


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--topk-ratio", "0"], ["--topk-ratio", "1.5"],
                                  ["--inter-gbps", "2", "1"], ["--inter-gbps", "-1", "1"], ["--demo", "4"],
                                  ["--network", "mars"], ["--jobs", "0"], ["--model-seed", "x"],
                                  ["--seeds", "0"], ["--seeds", "11"], ["--precision", "fp16"], ["--net-seed", "-1"],
                                  ["--global-batch", "30000000"], ["--inter-gbps", "1e300", "1e300"],
                                  ["--intra-gbps", "1e-300"], ["--inter-latency-ms", "1e308", "1e308"],
                                  ["--sgd-momentum", "1"], ["--second-batch", "3"], ["--micro-batches", "0"],
                                  ["--micro-batches", "65"], ["--intra-latency-ms", "-1"], ["--global-batch", "16"],
                                  ["--inter-latency-ms", "5", "nan"], ["--genetic-budget", "10"]])
def test_nonsense_flags_exit_with_status_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        code5.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error" in err and "Traceback" not in err


@pytest.mark.slow
@pytest.mark.sweep                  # --jobs 1 against 2: a further case
def test_results_do_not_depend_on_how_many_processes_train():
    """Demo 2 in one process and in two worker processes prints the same tables."""
    from conftest import run_script
    one = run_script(LECTURE09 / "05_decentralized.py", "--quick", "--demo", "2", "--jobs", "1")
    two = run_script(LECTURE09 / "05_decentralized.py", "--quick", "--demo", "2", "--jobs", "2")
    assert one == two
    assert "演示 2" in one


def test_ctrl_c_stops_with_one_line_and_no_process_left():
    """Ctrl-C reaches the whole process group (as in a terminal): the script answers with one
    line and status 130, and its training processes are gone."""
    from conftest import press_ctrl_c, start_in_own_group, wait_until_group_has
    proc = start_in_own_group(LECTURE09 / "05_decentralized.py", "--quick")
    wait_until_group_has(proc, 3)       # the script and its two training processes
    status, _, err, left = press_ctrl_c(proc)
    assert status == 130
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "已中断 interrupted (Ctrl-C)"
    assert not left, f"processes left behind: {left}"


@pytest.mark.parametrize("network", ["aws-regional"])
def test_demo1_on_the_measured_networks_fits_a_projector(network):
    """On aws-regional the "bandwidth / latency" table is one table (aws-world's 8 places
    split it in two: test_demo1_observation_2_follows_the_printed_numbers checks that run)."""
    from conftest import run_script
    from lecture01.console import LINE_WIDTH, display_width
    out = run_script(LECTURE09 / "05_decentralized.py", "--quick", "--demo", "1", "--network", network)
    wide = [line for line in out.splitlines() if display_width(line) > LINE_WIDTH]
    assert not wide, wide[:3]
    assert ("先是带宽 bandwidth" in out) == (network == "aws-world")


def test_the_extremes_of_every_demo1_range_run_cleanly():
    """The slowest, largest job the flags allow, and the fastest network: exact integer
    picoseconds must not overflow, and the optimum must still be proven."""
    import subprocess
    import sys
    for extreme in (["--global-batch", "100000", "--inter-gbps", "0.01", "0.01", "--intra-gbps", "0.01",
                     "--inter-latency-ms", "10000", "10000"],
                    ["--inter-gbps", "100000", "100000", "--intra-gbps", "100000", "--inter-latency-ms", "0", "0"]):
        done = subprocess.run([sys.executable, str(LECTURE09 / "05_decentralized.py"), "--quick", "--demo", "1",
                               *extreme], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "Warning" not in done.stderr and "Traceback" not in done.stderr
        assert "最优（已证明）proven optimum" in done.stdout


# ----------------------------------------------------------------------------------
# Issue 11: progress, words under exercise flags, unused flags, fast --help
# ----------------------------------------------------------------------------------

def _schedule(*argv):
    return code5.parse_args(["--quick", "--demo", "1", *argv])[1]


def test_progress_goes_to_stderr_and_leaves_stdout_unchanged(capsys):
    """Demo 1's stdout is the same with progress written to a log stream, to a terminal
    (one status line, erased at the end) and to stderr; the progress itself names each search."""
    import io

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    setup = _schedule()
    outputs = []
    log, terminal = io.StringIO(), Terminal()
    for progress in (code5.Progress(log), code5.Progress(terminal), None):
        code5.run_demo1(setup, progress=progress)
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] == outputs[2]
    lines = log.getvalue().splitlines()
    for search in ("随机分配", "严格局部搜索", "持平局部搜索", "遗传算法", "最优分配"):
        assert any(search in line for line in lines), search
    assert sum("重启 restart" in line for line in lines) == 2 * 2 * setup.restarts   # two searches, two instances
    assert "\n" not in terminal.getvalue() and terminal.getvalue().endswith("\r")
    assert terminal.getvalue().rsplit("\r", 2)[-2].strip() == ""          # the status line is erased
    assert not any("搜索中" in line for line in outputs[0].splitlines())


def _table_costs(out):
    rows = {}
    for line in out.splitlines():
        m = re.match(r"^(\S.*?)\s+(\d+\.\d+) 秒\s+(\d+\.\d)\s", line)
        if m:
            rows[m.group(1)] = float(m.group(2))
    return rows



@pytest.mark.parametrize("argv", [[], pytest.param(["--inter-gbps", "5", "10"], marks=SWEEP_TIER), ["--intra-gbps", "2"],
                                  pytest.param(["--global-batch", "64"], marks=SWEEP_TIER),
                                  pytest.param(["--global-batch", "256"], marks=SWEEP_TIER),
                                  pytest.param(["--network", "aws-world"], marks=SWEEP_TIER)])
def test_demo1_observation_2_follows_the_printed_numbers(argv, capsys):
    """Which hand layout is cheaper, and whether the proven optimum is one of them, read
    from the printed table; the observations must say the same. On the measured aws-world
    network (8 places) the run also fits a projector, its bandwidth / latency table split in
    two, and no DP group of 8 fits in its 4-card cities."""
    from lecture01.console import LINE_WIDTH, display_width
    result = code5.main(["--quick", "--demo", "1", *argv])["demo1"]
    out = capsys.readouterr().out
    if "aws-world" in argv:
        assert "aws-world" in out and "先是带宽 bandwidth" in out
        assert not [line for line in out.splitlines() if display_width(line) > LINE_WIDTH]
        assert result.main.methods["dp_groups_in_regions"].cost is None
    flat = re.sub(r"\s+", "", out)
    rows = _table_costs(out)
    optimum = rows["最优（已证明）proven optimum"]
    hand_pp = rows.get("按地区放流水线（数据并行跨地区）")
    hand_dp = rows.get("按地区放数据并行组（流水线跨地区）")
    reached = re.search(r"这次达到最优的：(.*?)。", flat)
    reached = reached.group(1).split("、") if reached else []
    if hand_pp is not None and hand_dp is not None:
        if hand_pp < hand_dp:
            assert "把流水线留在地区内、让数据并行跨地区更好" in flat
            assert "把数据并行组留在地区内、让流水线跨地区更好" not in flat
        else:
            assert hand_pp > hand_dp
            assert "把数据并行组留在地区内、让流水线跨地区更好" in flat
            assert "把流水线留在地区内、让数据并行跨地区更好" not in flat
        best_hand = min(hand_pp, hand_dp)
        if best_hand <= optimum:                        # printed to 2 decimals: equal means optimal
            assert "两种都不是最优" not in flat
            winner = "按地区放流水线（数据并行跨地区）" if hand_pp < hand_dp else "按地区放数据并行组（流水线跨地区）"
            assert winner in reached
        else:
            assert "但两种都不是最优" in flat and f"最优分配{optimum:.2f}秒" in flat
            stats = code5.dist_sim.layout_stats(result.main.optimum.assignment, result.geo, 4, 8)
            assert (f"{stats['pipeline_links_within_region']}/{stats['pipeline_links']}条流水线边在地区内、"
                    f"{stats['dp_groups_within_region']}/{stats['dp_groups']}个数据并行组整组在一个地区") in flat
            like_dp = stats["dp_groups_within_region"] == stats["dp_groups"]
            assert ("和'按地区放数据并行组'一样" in flat) == like_dp
            wrong_pick = like_dp and hand_pp < hand_dp
            assert ("会选错把什么留在地区内" in flat) == wrong_pick
            assert not any(name.startswith("按地区") for name in reached)
    else:
        assert hand_pp is not None and hand_dp is None          # aws-world: cities of 4 cannot hold a DP group
        assert ("它就是最优的" in flat) == (hand_pp <= optimum)
    assert "。。" not in flat


def test_inter_gbps_5_10_says_the_optimum_keeps_data_parallel_groups_together(capsys):
    """The issue's case: the cheaper hand layout keeps pipelines in regions, the optimum
    keeps every data-parallel group in one region; the observation says so."""
    code5.main(["--quick", "--demo", "1", "--inter-gbps", "5", "10", "--micro-batches", "1"])   # one message per cut
    flat = re.sub(r"\s+", "", capsys.readouterr().out)
    assert "把流水线留在地区内、让数据并行跨地区更好。但两种都不是最优" in flat
    assert "4/4个数据并行组整组在一个地区" in flat and "会选错把什么留在地区内" in flat


def test_demo1_stdout_does_not_depend_on_the_unused_flag_note(capsys):
    code5.main(["--quick", "--demo", "1"])
    plain = capsys.readouterr()
    code5.main(["--quick", "--demo", "1", "--steps", "7", "--restarts", "9", "--topk-ratio", "0.5"])
    noted = capsys.readouterr()
    assert noted.out == plain.out
    assert "注意 note" not in plain.err


@pytest.mark.parametrize("argv, ignored, overridden", [
    (["--quick", "--steps", "7", "--restarts", "9"], [], ["--restarts", "--steps"]),
    (["--demo", "1", "--topk-ratio", "0.5", "--fp32", "--steps", "20"], ["--fp32", "--steps", "--topk-ratio"], []),
    (["--demo", "2", "--quick", "--network", "aws-world", "--restarts", "3", "--steps", "4"],
     ["--network", "--restarts"], ["--steps"]),
    (["--demo", "2", "--steps", "300", "--jobs", "1"], [], []),     # a default value given by hand is still used
    (["--quick", "--demo", "1", "--global-batch", "64"], [], []),
])
def test_flags_that_are_ignored_or_overridden_are_named_on_one_stderr_line(argv, ignored, overridden, capsys):
    code5.parse_args(argv)
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if line.startswith("注意 note")]
    if not ignored and not overridden:
        assert notes == []
        return
    assert len(notes) == 1
    note = notes[0]
    if ignored:
        assert "忽略 " + " ".join(ignored) + " (ignored)" in note
    if overridden:
        assert "覆盖 " + " ".join(overridden) + " (overridden by --quick)" in note
    assert ("忽略" in note) == bool(ignored) and ("覆盖" in note) == bool(overridden)


@pytest.mark.parametrize("argv, chinese", [(["--global-batch", "4"], "不能小于副本数 8"),
                                           (["--genetic-budget", "10"], "至少要 6006")])
def test_cross_flag_errors_are_bilingual_and_one_line(argv, chinese, capsys):
    with pytest.raises(SystemExit) as exit_info:
        code5.parse_args(argv)
    assert exit_info.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert chinese in last and "must be at least" in last
    assert last.index(chinese) < last.index("must be at least")         # Chinese first


def test_demo2_flag_defaults_written_out_agree_with_compressed_dp():
    t, seeds = code5.compressed_dp.TrainSetup(), code5.compressed_dp.Seeds()
    c = code5.CompressionSetup()
    assert code5.DEMO2_DEFAULTS == dict(steps=code5.CLASS_STEPS, topk_ratio=t.topk_ratio, sgd_lr=t.sgd_lr,
                                        sgd_momentum=t.sgd_momentum, model_seed=seeds.model, data_seed=seeds.data,
                                        seeds=c.n_seeds, jobs=c.jobs)
    args, _, compression = code5.parse_args([])
    assert replace(compression.train, precision=t.precision) == t.with_steps(code5.CLASS_STEPS)
    assert compression.seeds == seeds


@pytest.mark.parametrize("argv, steps", [([], 240), (["--demo", "2"], 240), (["--demo", "time"], 300),
                                         (["--demo", "time", "--steps", "240"], 240),
                                         (["--demo", "2", "--steps", "300"], 300)])
def test_demo2_trains_240_steps_and_the_time_demo_300_unless_steps_is_given(argv, steps):
    """The class run's 240 (issue 43) and --demo time's 300 (table 5.10): a given --steps wins."""
    assert (code5.CLASS_STEPS, code5.TIME_STEPS) == (240, code5.compressed_dp.TrainSetup().steps) == (240, 300)
    _, _, compression = code5.parse_args(argv)
    assert compression.train.steps == steps


@pytest.mark.parametrize("script, argv", [(LECTURE09 / "05_decentralized.py", ["--help"]),
                                          (LECTURE09 / "05_decentralized.py", ["--global-batch", "4"]),
                                          (LECTURE09 / "05_decentralized.py", ["--steps", "0"])])
def test_help_and_flag_errors_do_not_import_torch(script, argv):
    """--help and a flag error answer before torch is imported (it takes ~1.5 s)."""
    import subprocess
    import sys
    probe = ("import runpy, sys\n"
             f"sys.argv = [{str(script)!r}] + {argv!r}\n"
             "try:\n"
             f"    runpy.run_path({str(script)!r}, run_name='__main__')\n"
             "except SystemExit as e:\n"
             "    print('exit', e.code, 'torch' in sys.modules, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    last = done.stderr.strip().splitlines()[-1]
    expected = 0 if argv == ["--help"] else 2
    assert last == f"exit {expected} False", done.stderr[-2000:]
    assert "Traceback" not in done.stderr


# --- observations that follow the flags (issue 21, 5) ----------------------------------------

def _flat(text):
    return "".join(text.split())


def test_percent_shows_a_small_share_with_enough_digits():
    from lecture09.compress.demo2_report import percent
    assert [percent(0.01, 0), percent(0.01, 1), percent(0.05, 0)] == ["1%", "1.0%", "5%"]
    assert [percent(0.0001, 0), percent(0.00123, 0), percent(0.0, 0)] == ["0.01%", "0.12%", "0%"]


def test_zero_search_budgets_are_not_said_to_differ():
    _, out = main_quietly(code5.main, ["--demo", "1", "--strict-iters", "0", "--sideways-iters", "0", "--genetic-budget", "6006"])
    out = _flat(out)
    assert "不比较多给预算的效果" in out and "多给预算没有用" not in out and "预算不同" not in out


@pytest.mark.slow
@pytest.mark.sweep                  # a second instance
def test_second_instance_verdict_names_which_genetic_search_reached_the_optimum():
    """--net-seed 12345: the region-blind search reaches batch 256's optimum, the other does not."""
    results, out = main_quietly(code5.main, ["--demo", "1", "--net-seed", "12345"])
    second = results["demo1"].second
    blind, aware = (second.reaches_optimum(second.methods[k].cost) for k in ("genetic_blind", "genetic"))
    out = _flat(out)
    if blind and not aware:
        assert "不看地区的反而到了" in out
    assert ("两种遗传算法都没到" in out) == (not blind and not aware)
    assert "连遗传算法也没到" not in out


def test_region_knowledge_is_credited_only_where_the_blind_control_falls_short():
    """Issue 20, 9: the region-blind genetic search is the control; it beat local search on
    both default instances, so region knowledge is not 'why it beats local search'."""
    from types import SimpleNamespace as NS
    from lecture09.schedule.demo1_observations import region_knowledge_sentence
    methods = {"genetic_blind": NS(cost=22.17), "strict": NS(cost=40.0), "sideways": NS(cost=37.53)}
    main = NS(global_batch=1024, methods=methods)
    text = region_knowledge_sentence(main, [(NS(global_batch=1024), 4, 5), (NS(global_batch=256), 5, 0)])
    assert "batch 256 上看地区的版本到最优的次数更多" in text and "batch 1024 上反而是不看地区的" in text
    assert "不只靠地区知识" in text and "22.17" in text and "37.53" in text
    methods["genetic_blind"] = NS(cost=50.0)
    text = region_knowledge_sentence(main, [(NS(global_batch=1024), 3, 3)])
    assert "两个版本到最优的次数一样" in text and "来自地区知识" in text
