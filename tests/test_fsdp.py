"""Lecture 9 code 3, demo 6: FSDP (ZeRO-3) on real gloo ranks (issue 26, item 1). Our
FSDP and PyTorch's fully_shard each equal one process on the whole batch (ZeRO-1's
tolerance); the peak and the traffic measured on rank 0 equal the formulas; the log shows
the prefetch; each observation's branches."""

from dataclasses import replace

import pytest

from conftest import LECTURE09, SWEEP_TIER, load_script

from lecture09.parallel import fsdp_report as report

code3 = load_script(LECTURE09 / "03_memory_zero.py")


@pytest.fixture(scope="module", params=[2, pytest.param(3, marks=SWEEP_TIER)], ids=["2 ranks", "3 ranks (padded shards)"])
def demo6(request):
    setup = replace(code3.RealSetup(), ranks=request.param, steps=3, batch_size=6)
    return setup, report.run_demo6(setup, 2, timed=False, out=lambda line: None)


def test_both_fsdps_equal_one_process_and_every_rank_holds_the_same_model(demo6):
    _, r = demo6
    assert r["own"].ok and r["torch"].ok, (r["own"], r["torch"])
    assert r["replicas_equal"] and r["same_without_prefetch"]         # prefetch changes when, not what


def test_peak_and_traffic_measured_equal_the_formulas(demo6):
    setup, r = demo6
    assert r["peak"] == r["peak_formula"] and r["traffic"] == r["traffic_formula"]
    shards = sum(s for *_, s in r["units"])
    assert r["peak_no_prefetch"] == shards + max(full for _, full, _ in r["units"])     # the control
    assert r["traffic"][0] == 2 * r["traffic"][1]                                        # 2Ψ and Ψ of 3Ψ


def test_the_log_shows_the_prefetch_and_every_unit_gathered_twice(demo6):
    _, r = demo6
    events = [(event, unit) for _, event, unit, _ in r["log"]]
    names = [unit for event, unit in events if event == "前向"]
    assert names == ["embedding", "block 0", "block 1", "head"]
    for before, after in zip(names, names[1:]):       # the next unit's gather starts before this one computes
        assert events.index(("all-gather 开始", after)) < events.index(("前向", before))
    for name in names:
        assert events.count(("all-gather 完成", name)) == 2 and events.count(("reduce-scatter 后释放", name)) == 1


def test_formulas_by_hand():
    units = [("a", 40, 20), ("b", 100, 50), ("c", 12, 6)]          # (name, full bytes, shard bytes), p = 2
    assert report.peak_formula(units, 2) == 76 + 100 + 2 * 20      # b computing while a (backward) or c in flight
    assert report.traffic_formula(units, 2) == (152, 76)


def fake(**changes):
    from lecture09.parallel.zero import Agreement
    good = Agreement(1e-7, 1e-6, 1e-6)
    r = dict(own=good, torch=good, units=[("a", 40, 20), ("b", 100, 50)], peak=210, peak_formula=210,
             peak_no_prefetch=170, traffic=(140, 70), traffic_formula=(140, 70))
    r.update(changes)
    lines = []
    report.demo6_observations(None, r, out=lines.append)
    return lines


def test_each_observation_branch():
    from lecture09.parallel.zero import Agreement
    lines = fake()
    assert "自己写的 FSDP、PyTorch 的 fully_shard。" in lines[1] and "和公式一样" in lines[2] and "正是" in lines[3]
    lines = fake(torch=Agreement(1e-3, 1e-3, 1e-2), peak=230, traffic=(150, 70))
    assert "自己写的 FSDP。不一致的见上表" in lines[1] and "公式是 210" in lines[2] and "不等于" in lines[3]
    assert "没有一个" in fake(own=Agreement(1.0, 1.0, 1.0), torch=Agreement(1.0, 1.0, 1.0))[1]


def test_demo6_in_the_quick_run():
    from conftest import shared_quick_run
    results, out = shared_quick_run("03_memory_zero.py")
    assert "demo6" in results and "--quick 不计时" in out and "OwnFSDP" in out


@pytest.mark.slow
@pytest.mark.sweep                  # Ctrl-C on ranks run_ranks started: code 02's test is the one in the main part
def test_ctrl_c_during_the_fsdp_ranks_stops_everything_with_one_line():
    from conftest import interrupt_when_ranks_run
    status, err, left = interrupt_when_ranks_run([str(LECTURE09 / "03_memory_zero.py"), "--demo", "6", "--steps", "500"], 2)
    assert status == 130 and err.strip().splitlines()[-1] == "已中断 interrupted (Ctrl-C)" and not left


def test_the_prefetch_time_words_follow_the_medians():
    base = dict(same_without_prefetch=True)
    assert "--quick 不计时" in report.prefetch_time_words({**base, "timing": None})
    assert "预取每步快 2.0 ms" in report.prefetch_time_words({**base, "timing": (0.010, 0.012)})
    assert "预取没有更快（[实测] 12.0 对 10.0 ms）" in report.prefetch_time_words({**base, "timing": (0.012, 0.010)})
    assert "不该如此" in report.prefetch_time_words({"same_without_prefetch": False, "timing": None})
