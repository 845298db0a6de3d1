"""Lecture 9 code 2, demo 3: the profiler's view of overlap (issue 26, item 3). The trace is
read by hand-made cases first (no timing is asserted anywhere); then a real run writes a
Chrome trace that loads as JSON and holds one gloo:all_reduce per bucket, and the console
timeline has a row for each of them."""

import json

import pytest

from conftest import LECTURE09, assert_one_line_status_2, load_script, main_quietly

from lecture09.parallel import profile_overlap as po
from lecture09.parallel import profile_report as report

code2 = load_script(LECTURE09 / "02_data_parallel.py")


def event(name, ts, dur, tid=1):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "tid": tid, "pid": 1}


def write(tmp_path, events):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events + [{"ph": "M", "name": "process_name"}]}))
    return path


def test_reading_a_hand_made_trace(tmp_path):
    """Main thread: forward ops 1000-1400 µs, backward ops 1400-1600 and 1650-2000, a copy
    at 2000-2300; gloo's thread: all-reduces at 1500-1700 and 1900-2200."""
    events = [event("aten::linear", 1000, 400), event(po.BACKWARD + "AddmmBackward0", 1400, 200),
              event(po.BACKWARD + "MulBackward0", 1650, 350), event("aten::copy_", 2000, 300),
              event(po.ALL_REDUCE, 1500, 200, tid=7), event(po.ALL_REDUCE, 1900, 300, tid=7)]
    trace = po.read_trace(write(tmp_path, events))
    assert trace["forward"] == (0.0, pytest.approx(4e-4))
    assert trace["backward"] == [(pytest.approx(4e-4), pytest.approx(6e-4)), (pytest.approx(6.5e-4), pytest.approx(1e-3))]
    assert len(trace["all_reduce"]) == 2 and trace["main_end"] == pytest.approx(1.3e-3)
    s = po.summary(trace)
    assert s["backward_end"] == pytest.approx(1e-3) and s["comm"] == pytest.approx(5e-4)
    # hidden = what ran before backward's end (code 2's comm − exposed): 1500-1700 and 1900-2000
    assert s["hidden"] == pytest.approx(2e-4 + 1e-4)
    assert s["exposed"] == pytest.approx(2e-4) and s["after_backward"] == pytest.approx(3e-4)


def test_merged_and_overlap_by_hand():
    assert po.merged([(3, 4), (0, 1), (0.5, 2)]) == [(0, 2), (3, 4)]
    assert po.overlap([(0, 2), (1, 3)], (1.5, 5)) == pytest.approx(1.5)


def test_segment_lines_draw_each_interval():
    lines = report.segment_lines([("a", [(0.0, 0.5)]), ("b", [(0.0, 0.1), (0.9, 1.0)])], 1.0, width=10, label_width=2)
    assert lines[0] == "   0─────────1000.0 ms"
    assert lines[1] == "a  █████" and lines[2] == "b  █        █"


def fake(n=4, buckets=4, exposed=0.0, world_size=2):
    return {"trace": {"all_reduce": [(0, 1)] * n}, "n_buckets": buckets, "world_size": world_size,
            "summary": {"comm": 0.01, "hidden": 0.01 - exposed, "exposed": exposed, "after_backward": 0.002},
            "own": {"exposed": 0.0019}}


def test_the_sentence_on_each_branch():
    text = report.demo3_sentence(fake())
    assert "正是 4 个桶" in text and "100% 和反向算子同时在跑" in text and "几乎全藏起来了" in text
    text = report.demo3_sentence(fake(n=3, exposed=0.004))
    assert "桶却是 4 个" in text and "几乎全藏" not in text and "60%" in text
    assert "只有 1 个进程" in report.demo3_sentence(fake(world_size=1))


def test_a_real_run_writes_a_trace_with_one_all_reduce_per_bucket(tmp_path):
    path = tmp_path / "step.json"
    results, out = main_quietly(code2.main, ["--demo", "3", "--quick", "--trace", str(path)])
    r = results["demo3"]
    events = json.loads(path.read_text())["traceEvents"]
    assert sum(1 for e in events if e.get("name") == po.ALL_REDUCE) == r["n_buckets"] == len(r["trace"]["all_reduce"])
    assert any(e.get("name", "").startswith(po.BACKWARD) for e in events)
    assert [f"all-reduce {i}" in out for i in range(r["n_buckets"])] == [True] * r["n_buckets"]
    s = r["summary"]
    assert 0 <= s["hidden"] <= s["comm"] + 1e-9 and s["exposed"] >= 0
    assert str(path) in out.replace("\n", "")


def test_a_trace_path_that_cannot_be_written_is_one_line_and_status_2(tmp_path):
    assert_one_line_status_2(LECTURE09 / "02_data_parallel.py", ["--demo", "3", "--trace", str(tmp_path / "no" / "t.json")],
                             "--trace")

