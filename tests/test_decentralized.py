"""Lecture 9 code 5: the simulated data-parallel step, a quick smoke run, flag checking."""

import pytest

from conftest import LECTURE09, load_script

code5 = load_script(LECTURE09 / "05_decentralized.py")


def test_quick_run_of_both_demos(capsys):
    results = code5.main(["--quick", "--jobs", "1"])
    out = capsys.readouterr().out
    assert "演示 1" in out and "演示 2" in out and out.count("观察 Observations") == 2
    d1 = results["demo1"]
    opt = d1["optimum"]
    assert opt.exact
    heuristics = [c for _, c in d1["rows"] if c is not None]
    assert all(opt.cost <= c + 1e-9 for c in heuristics)     # nothing beats the proven optimum
    assert len(d1["random_costs"]) == code5.QUICK_SCHEDULE["n_random"]
    rows = results["demo2"]
    assert list(rows) == [run.key for run in code5.TABLE_A + code5.TABLE_B]
    assert rows[("adamw", "fp16", False)].results[0].bytes_per_element == 2.0
    assert all(r.bpc.mean < 5.0 for r in rows.values())       # 12 steps already beat uniform guessing
    assert rows[("adamw", "none", False)].deltas == (0.0,)     # the baseline is its own pair


def test_seeds_flag_prints_ranges_and_pairs_every_seed(capsys):
    results = code5.main(["--quick", "--jobs", "1", "--demo", "2", "--seeds", "2", "--model-seed", "3"])
    out = capsys.readouterr().out
    assert "(3, 1)、(4, 2)" in out                              # seed pairs (model + k, data + k)
    int8 = results["demo2"][("adamw", "int8", False)]
    base = results["demo2"][("adamw", "none", False)]
    assert [r.seeds for r in int8.results] == [r.seeds for r in base.results]
    assert int8.deltas == tuple(r.bpc - b.bpc for r, b in zip(int8.results, base.results))
    assert f"{int8.bpc.low:.4f}–{int8.bpc.high:.4f}" in out


def test_quick_run_is_deterministic(capsys):
    code5.main(["--quick", "--jobs", "1", "--demo", "1"])
    first = capsys.readouterr().out
    code5.main(["--quick", "--jobs", "1", "--demo", "1"])
    assert capsys.readouterr().out == first


def test_measured_network_preset_runs(capsys):
    results = code5.main(["--quick", "--demo", "1", "--network", "aws-world"])
    assert "aws-world" in capsys.readouterr().out
    assert results["demo1"]["hand"]["dp_groups_in_regions"] is None   # 8 cities of 4 cannot hold a DP group of 8


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--topk-ratio", "0"], ["--topk-ratio", "1.5"],
                                  ["--inter-gbps", "2", "1"], ["--inter-gbps", "-1", "1"], ["--demo", "3"],
                                  ["--network", "mars"], ["--jobs", "0"], ["--model-seed", "x"],
                                  ["--seeds", "0"], ["--seeds", "11"], ["--precision", "fp16"], ["--net-seed", "-1"],
                                  ["--global-batch", "30000000"], ["--inter-gbps", "1e300", "1e300"],
                                  ["--intra-gbps", "1e-300"], ["--inter-latency-ms", "1e308", "1e308"],
                                  ["--sgd-momentum", "1"],
                                  ["--inter-latency-ms", "5", "nan"], ["--genetic-budget", "10"]])
def test_nonsense_flags_exit_with_status_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        code5.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error" in err and "Traceback" not in err


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
    import os
    import signal
    import subprocess
    import sys
    import time
    proc = subprocess.Popen([sys.executable, str(LECTURE09 / "05_decentralized.py"), "--quick"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(4)                       # the pool has started and is training
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "已中断 interrupted (Ctrl-C)"
    deadline = time.time() + 10
    while time.time() < deadline:
        left = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
        if not left:
            break
        time.sleep(0.2)
    assert not left, f"processes left behind: {left}"


def test_quick_output_fits_a_projector():
    from conftest import run_script
    from console import LINE_WIDTH, display_width
    out = run_script(LECTURE09 / "05_decentralized.py", "--quick", "--seeds", "2")
    wide = [line for line in out.splitlines() if display_width(line) > LINE_WIDTH]
    assert not wide, wide[:3]


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
