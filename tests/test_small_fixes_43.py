"""Issue 43, item 9: the small things a student on a laptop ran into, each tested."""

import pytest

from conftest import LECTURE09, load_script


def test_a_curve_hidden_under_others_is_said_to_be():
    """Code 07's loss chart: a legend line names a curve that never shows its own letter."""
    code7 = load_script(LECTURE09 / "07_compression_beyond.py")
    lines = code7.curve_lines({"base": [3.0, 2.0, 1.0], "same": [3.0, 2.0, 1.0], "other": [3.0, 2.5, 2.4]},
                              width=3, height=5)
    legend = {line[2]: line for line in lines if line.startswith("  ") and line[3:6] == " = "}
    assert "只画成 *" in legend["A"] and "只画成 *" in legend["B"]       # A and B lie on one another
    assert "只画成 *" not in legend["C"]                                 # C leaves them at step 2


def test_code8_echoes_the_settings_that_change_a_result():
    from lecture09.compress.compressed_dp import TrainSetup
    code8 = load_script(LECTURE09 / "08_byzantine.py")
    from dataclasses import replace
    plain = TrainSetup()
    assert code8.changed_settings(plain) == ""
    text = code8.changed_settings(replace(plain, bucket=2, cc_tau=0.5, worker_momentum=0.9))
    assert "分桶 bucketing s = 2（--bucket）" in text and "τ = 0.5" in text
    assert code8.changed_settings(replace(plain, worker_momentum=0.9)) == ""     # the tables' titles say β


@pytest.mark.slow
@pytest.mark.sweep
def test_code8_bucket_run_says_bucketing_was_on():
    code8 = load_script(LECTURE09 / "08_byzantine.py")
    from conftest import main_quietly
    _, out = main_quietly(code8.main, ["--steps", "1", "--warm-steps", "1", "--aggregators", "mean", "--attacks",
                                       "none", "--compressed-aggregators", "mean", "--jobs", "1", "--bucket", "2"])
    assert out.count("分桶 bucketing s = 2") == 3                 # under table (1) and both training tables


def test_an_unbounded_float_says_inf_is_not_allowed():
    import argparse
    from lecture01.cli_args import float_in, positive_float
    with pytest.raises(argparse.ArgumentTypeError, match=r"in \(0, inf\)\), got 'inf'"):
        positive_float("inf")
    with pytest.raises(argparse.ArgumentTypeError, match=r"in \[0, 1\]"):
        float_in(0, 1)("2")


def test_serve_names_per_worker_tokens_and_the_workers_flag():
    from dataclasses import replace
    from lecture09.swarm.swarm_protocol import ServerConfig
    from lecture09.swarm.swarm_serve import token_mode, worker_token_flag
    per_worker = replace(ServerConfig(), token=None, worker_tokens=(("0", "a"), ("1", "b")))
    assert "per-worker tokens (2)" in token_mode(per_worker) and "token off" not in token_mode(per_worker)
    assert worker_token_flag(per_worker) == " --token TOKEN_N"
    shared = replace(ServerConfig(), token="s")
    assert token_mode(shared) == "token on" and worker_token_flag(shared) == " --token ..."
    none = replace(ServerConfig(), token=None)
    assert token_mode(none) == "token off" and worker_token_flag(none) == ""


def test_branch_and_bound_reports_progress_and_the_most_it_can_still_take(monkeypatch):
    """Issue 43, item 6: code 05 --network aws-world spent its branch and bound in silence.
    The search now reports rows priced against its budget; the result does not change."""
    from lecture09.schedule import layout_optimum
    from lecture09.schedule.schedule_setup import ScheduleSetup, build_networks
    s = ScheduleSetup()
    geo, _ = build_networks(s)
    args = (geo, s.n_stages, s.n_replicas, s.stage_param_bytes, s.act_bytes)
    quiet = layout_optimum.optimal_layout(*args, n_micro_batches=s.n_micro_batches)
    seen = []
    monkeypatch.setattr(layout_optimum, "PROGRESS_EVERY", 1)
    loud = layout_optimum.optimal_layout(*args, n_micro_batches=s.n_micro_batches,
                                         on_progress=lambda priced, budget: seen.append((priced, budget)))
    assert loud.cost == quiet.cost and seen
    assert [p for p, _ in seen] == sorted(p for p, _ in seen) and all(b == seen[0][1] for _, b in seen)
    assert layout_optimum.progress_words(2_000_000, 10_000_000, 20.0) == (
        "分支定界 branch and bound：已算 2,000,000 行，上限 10,000,000 行，20 秒；最多还要约 80 秒 (at most)")
