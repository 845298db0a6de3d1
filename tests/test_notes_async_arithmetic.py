"""Notes §11.8 against the code, for what is arithmetic there and so the same on every
machine: table (l)'s bytes, staleness and time cells come from the event loop and the byte
count (no training needed: arrival times do not depend on the model); the prose's figures
about time; table (m)'s seconds from demo 1's network."""

import re

import pytest

from conftest import ROOT, notes_row, notes_section
from lecture09.compress import async_local_sgd as als
from lecture09.compress.compressed_dp import TrainSetup
from lecture09.schedule import gossip_pricing
from notes_book import LECTURE09_BOOK

NOTES = LECTURE09_BOOK
H, SLOWEST = 30, 2.0          # code 11's defaults (tests/test_notes_flag_tables.py checks the flags' own)


def _section():
    return notes_section(NOTES, "### 11.8 ")


def _arrivals(setup=TrainSetup()):
    return als.simulate(setup.n_workers, H, SLOWEST, setup.steps * setup.n_workers, lambda *a: None, lambda w: None)


def test_the_notes_defaults_are_code_11s():
    import importlib.util
    from conftest import LECTURE09
    spec = importlib.util.spec_from_file_location("code11", LECTURE09 / "11_frontier.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args, _ = module.parse_args(["--demo", "7"])
    assert (args.sync_every, args.slowest, args.steps) == (H, SLOWEST, TrainSetup().steps)


@pytest.mark.parametrize("label,asynchronous", [("同步：DiLoCo，每 30 步", False), ("同步：全体平均，每 30 步", False),
                                                ("异步：Nesterov 每次到达", True), ("异步：延迟的 Nesterov", True),
                                                ("异步：没有动量", True)])
def test_table_l_arithmetic_cells_are_the_codes(label, asynchronous):
    setup = TrainSetup()
    row = notes_row(_section(), label)
    arrivals = _arrivals(setup)
    exchanges = len(arrivals) if asynchronous else setup.steps // H * setup.n_workers
    assert row["字节（平均/峰值）"] == f"{als.FP32 * exchanges / setup.n_workers / setup.steps:.4f}/{als.FP32}"
    if asynchronous:
        stale = [a.staleness for a in arrivals]
        assert row["陈旧（平均/最多）"] == f"{sum(stale) / len(stale):.2f}/{max(stale)}"
        assert row["时间"] == f"{arrivals[-1].time:g}"
    else:
        assert row["陈旧（平均/最多）"] == "0"
        assert row["时间"] == f"{als.synchronous_time(setup.steps, SLOWEST):g}"


def test_the_prose_about_time_is_the_event_loops():
    setup, text = TrainSetup(), _section()
    arrivals = _arrivals(setup)
    times = als.step_times(setup.n_workers, SLOWEST)
    rate = sum(1 / t for t in times)
    assert "1、1.33、1.67、2 个时间单位" in text and [f"{t:.3g}" for t in times] == ["1", "1.33", "1.67", "2"]
    assert f"1 + 0.75 + 0.6 + 0.5 = {rate:.2f} 步" in text
    assert f"1200 步要 {setup.steps * setup.n_workers / rate:.0f} 个单位" in text
    assert f"收尾到 {arrivals[-1].time:g}" in text
    assert f"（{arrivals[-1].time / als.synchronous_time(setup.steps, SLOWEST):.0%}）" in text
    assert f"一共 300 × 4 / 30 = {len(arrivals)} 次到达" in text
    equal = als.simulate(4, H, 1.0, 1200, lambda *a: None, lambda w: None)
    assert f"陈旧平均还是 {sum(a.staleness for a in equal) / len(equal):.2f}" in text


def test_table_m_seconds_are_the_pricing():
    price, ring_s, plain_s, _ = gossip_pricing.price_server(4.0)
    text = re.sub(r"\s+", "", _section())
    for figure in (ring_s, price.mean_s, price.min_s, price.max_s, ring_s / H, price.mean_s / H,
                   plain_s + ring_s / H, plain_s + price.mean_s / H):
        assert f"{figure:.2f}" in text, figure
    assert f"（{price.mean_s / ring_s:.0%}）" in text
