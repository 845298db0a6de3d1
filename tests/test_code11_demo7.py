"""Code 11's demo 7 (compress/async_report.py; notes §11.8): a short run prints what it
returns within 100 columns, every cell from its run; the observations on each branch, from
hand-made tables; the demo is opt-in (not in the classroom run); bad flags."""

import re
import subprocess
import sys

import pytest

from conftest import LECTURE09, load_script, main_quietly
from lecture09.compress import async_report as ar
from lecture09.compress import compressed_dp as cdp
from lecture09.compress.async_local_sgd import synchronous_time

FRONTIER = load_script(LECTURE09 / "11_frontier.py")


@pytest.fixture(scope="module")
def short_run():
    # 8 steps, H = 4, 4 workers: 8 rounds each way; one seed, fp32
    return main_quietly(FRONTIER.main, ["--demo", "7", "--steps", "8", "--sync-every", "4", "--fp32", "--jobs", "1"])


def test_a_short_run_prints_what_it_returns(short_run):
    from lecture01.console import display_width
    results, out = short_run
    demo = results["demo7"]
    assert "(l) 小 GPT" in out and "(m) 每 4 步交换一次" in out and "演示 1：" not in out
    assert all(display_width(line) <= 100 for line in out.splitlines())
    table = demo["table"]
    assert len(table) == 6
    for label, (row, runs, deltas) in table.items():
        assert label in out and f"{runs[0].bpc:.4f}" in out
        if row.twin is not None:                      # 4 bytes per arrival: 8 arrivals / 4 workers / 8 steps
            assert runs[0].bytes_per_element == pytest.approx(1.0) and runs[0].peak_bytes_per_element == 4.0
            assert re.search(re.escape(label) + r" +1\.0000/4 ", out)
            assert runs[0].timing[0] < synchronous_time(8, 2.0)
            if row.run.param[1] != "nesterov":        # the observations pair these two with their twins
                pair = runs[0].bpc - table[row.twin][1][0].bpc
                assert f"{pair:+.4f}" in out
    for r in demo["priced"]:
        assert f"{r.exchange_s:.2f}" in out and f"{r.per_step_s:.2f}" in out
    for line in demo["observations"]:
        assert line[:25] in out.replace("\n     ", "")


def test_its_observations_are_recomputed_from_its_table(short_run):
    results, _ = short_run
    demo = results["demo7"]
    assert demo["observations"] == (ar.table_l_observations(demo["table"], 8, 2.0, 0.7, 0.9)
                                    + ar.table_m_observations(demo["priced"], demo["price"]))


def test_the_synchronous_rows_are_demo_5s_runs():
    rows = ar.build_rows(30, 2.0)
    from lecture09.compress import gossip_report
    assert [r.run for r in rows[:3]] == [r.run for r in gossip_report.build_rows(30)[:3]]
    assert [r.twin for r in rows[3:]] == [rows[1].label, rows[1].label, rows[2].label]


def _result(label, bpc, seed=0, timing=()):
    return cdp.RunResult(run=cdp.Run(label, "x", "none"), seeds=cdp.Seeds(seed, seed + 1), bpc=bpc,
                         bytes_per_element=4.0 if label.startswith("AdamW") else 0.1333, zeroed_fraction=0.0, diverged=bpc != bpc, steps_done=300,
                         seconds=1.0, timing=timing)


def _table(bpcs, time=450.0, stale=(2.85, 5)):
    """bpcs: {row mode: [bpc per seed]} for adamw, diloco, average, nesterov, delayed, async-average."""
    rows = ar.build_rows(30, 2.0)
    keys = ("adamw", "diloco", "all", "nesterov", "delayed", "async-all")
    table = {}
    for row, key in zip(rows, keys):
        runs = tuple(_result(row.label, b, seed=k, timing=(time, *stale) if row.twin else ())
                     for k, b in enumerate(bpcs[key]))
        base = table[rows[0].label][1] if table else runs
        table[row.label] = (row, runs, tuple(cdp.paired_deltas(runs, base)))
    return table


def test_observations_when_the_async_rows_finish_sooner_and_momentum_costs_more():
    table = _table({"adamw": [1.6, 1.6], "diloco": [1.9, 1.9], "all": [1.8, 1.8], "nesterov": [6.0, 7.0],
                    "delayed": [2.5, 2.6], "async-all": [1.85, 1.86]})
    lines = ar.table_l_observations(table, 300, 2.0, 0.7, 0.9)
    assert lines[0].startswith("时间：异步的行 450 个时间单位就训练完，同步的行要 600（75%）")
    assert "平均 2.85，最多 5" in lines[0]
    assert "「异步：延迟的 Nesterov」比「异步：Nesterov 每次到达」：-3.9500，各种子 -4.4000..-3.5000（更好）" in lines[1]
    assert "比「同步：DiLoCo，每 30 步」：+0.6500，各种子 +0.6000..+0.7000（更差）" in lines[2]
    assert "「异步：没有动量」比「同步：全体平均，每 30 步」：+0.0550，各种子 +0.0500..+0.0600（更差）" in lines[3]
    assert lines[4] == ("异步的代价：DiLoCo 那一对比没有动量的那一对大 +0.5500..+0.6400（每组种子都大）。两对的外层步差在 "
                        "lr（0.7 和 1）、动量（0.9 和 0），哪一个造成的，这张表分不出来（加 --outer-lr 1，两对就只差动量；"
                        "加 --outer-momentum 0，就只差 lr）")
    only_momentum = ar.table_l_observations(table, 300, 2.0, 1.0, 0.9)[4]
    assert only_momentum.endswith("两对的外层步只差 动量（0.9 和 0），这个差来自它")
    no_momentum = ar.table_l_observations(table, 300, 2.0, 0.7, 0.0)
    assert no_momentum[4].endswith("两对的外层步只差 lr（0.7 和 1），这个差来自它")
    assert no_momentum[1].endswith("没有动量（--outer-momentum 0）时两行是同一个计算：每次到达 θ 都减去 lr/W 倍的 g，只差舍入")
    assert ar.table_l_observations(table, 300, 2.0, 1.0, 0.0)[4].startswith("外层 lr 1、没有动量时，两对的外层步是同一个")


def test_observations_when_the_workers_are_equally_fast_and_the_costs_cannot_be_told_apart():
    table = _table({"adamw": [1.6], "diloco": [1.9], "all": [1.8], "nesterov": [1.91], "delayed": [1.905],
                    "async-all": [1.8]}, time=300.0, stale=(3.0, 3))
    lines = ar.table_l_observations(table, 300, 1.0, 0.7, 0.9)
    assert lines[0].startswith("时间：工作者一样快（--slowest 1），异步不省时间（都是 300 个时间单位），却照样陈旧：平均 3.00")
    assert "-0.0050（差不多）" in lines[1] and "+0.0050（差不多）" in lines[2] and "0.0000（差不多）" in lines[3]
    assert lines[4] == "异步的代价在两对之间分不出大小（差在容差内，或种子之间不一致）"


def test_observations_when_the_asynchronous_rows_take_longer():
    # 6 steps, equally fast workers, but the last rounds fell on few workers: 10 units against 6
    table = _table({"adamw": [1.6], "diloco": [1.9], "all": [1.8], "nesterov": [2.0], "delayed": [1.95],
                    "async-all": [1.85]}, time=10.0, stale=(1.5, 4))
    line = ar.table_l_observations(table, 6, 1.0, 0.7, 0.9)[0]
    assert line.startswith("时间：异步的行要 10 个时间单位，不比同步的 6 少：时间由最后送达的那一轮决定")
    assert line.endswith("陈旧：平均 1.50，最多 4")
    # slower workers, one round each (H beyond the steps): as long as the synchronous run, not "equally fast"
    line = ar.table_l_observations(_table({"adamw": [1.6], "diloco": [1.9], "all": [1.8], "nesterov": [2.0],
                                           "delayed": [1.95], "async-all": [1.85]}, time=6.0), 3, 2.0, 0.7, 0.9)[0]
    assert line.startswith("时间：异步的行要 6 个时间单位，不比同步的 6 少")


def test_observations_when_a_row_diverged_or_momentum_costs_less():
    nan = float("nan")
    table = _table({"adamw": [1.6], "diloco": [1.9], "all": [1.8], "nesterov": [nan], "delayed": [1.8],
                    "async-all": [2.0]})
    lines = ar.table_l_observations(table, 300, 2.0, 0.7, 0.9)
    assert lines[1] == "「异步：延迟的 Nesterov」比「异步：Nesterov 每次到达」：有一行发散了（或它的对照发散了），没有配对差"
    assert lines[4].startswith("异步的代价：DiLoCo 那一对比没有动量的那一对小 +0.3000。")
    table = _table({"adamw": [1.6], "diloco": [nan], "all": [1.8], "nesterov": [2.0], "delayed": [1.8],
                    "async-all": [2.0]})
    lines = ar.table_l_observations(table, 300, 2.0, 0.7, 0.9)
    assert "没有配对差" in lines[2] and len(lines) == 4        # nothing to compare the two costs with


def test_table_m_observations_on_each_branch():
    from lecture09.compress.gossip_report import ExchangePrice
    from lecture09.schedule.gossip_pricing import ServerPrice
    ring = ExchangePrice("ring", 32.0, None, 30)
    lines = ar.table_m_observations([ring, ExchangePrice("own", 14.0, (1.0, 30.0), 30)], ServerPrice(14.0, 1.0, 30.0, 28))
    assert lines[0].startswith("异步时一个副本只等自己的链路：平均 14.00 秒，是环形的 32.00 秒的 44%；最远的副本 30.00 秒，也不比环形慢")
    lines = ar.table_m_observations([ring, ExchangePrice("own", 40.0, (2.0, 50.0), 30)], ServerPrice(40.0, 2.0, 50.0, 28))
    assert "平均 40.00 秒，不比环形的 32.00 秒快；离服务器最远的副本要 50.00 秒，比环形还慢" in lines[0]


def test_demo_7_is_opt_in():
    for demo, shown in (("1-5", False), ("all", True), ("7", True), ("2", False)):
        args, _ = FRONTIER.parse_args(["--demo", demo])
        assert FRONTIER.wanted(args, "7") is shown
    args, _ = FRONTIER.parse_args([])
    assert args.demo == "1-5" and all(FRONTIER.wanted(args, d) for d in "12345")


@pytest.mark.parametrize("argv", [["--slowest", "0.5"], ["--slowest", "101"], ["--slowest", "x"]])
def test_bad_demo_7_flags_are_one_line_and_status_2(argv):
    done = subprocess.run([sys.executable, str(LECTURE09 / "11_frontier.py"), "--demo", "7", *argv],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_table_l_fits_100_columns_with_ten_seeds_and_wide_cells(capsys):
    from lecture01.console import display_width, print_wrapped
    from lecture09.compress.compressed_dp import TrainSetup
    seeds = range(10)
    table = _table({"adamw": [1.6] * 10, "diloco": [1.9] * 10, "all": [1.8] * 10,
                    "nesterov": [16.0 + k for k in seeds], "delayed": [-10.0 - k for k in seeds],
                    "async-all": [1.85] * 10}, time=123456.0, stale=(12.34, 123))
    capsys.readouterr()
    ar.print_table_l(TrainSetup(), table, 30, 100.0, 10, print_wrapped)
    wide = [line for line in capsys.readouterr().out.splitlines() if display_width(line) > 100]
    assert not wide, wide
