"""Claims tests for code 11's demo 6 and notes §11.7. Slow (a default run per precision,
~35 s each): the notes' table (k) quotes 5-seed ranges; the default run trains the first
of those seed pairs, so its Δ and its paired differences (the clean control of the delta
among them) lie in each row's range of its precision (with a margin for another CPU), and
the qualitative claims of the 读法 hold on it."""

import pytest

from conftest import (ROOT, assert_deltas_in_notes_ranges, frontier_default_run, notes_range, notes_row,
                      notes_section)
from lecture09.compress import aq_report
from lecture09.compress.pipeline_aq import CONTROL_4BIT as CONTROL
from notes_book import LECTURE09_BOOK

NOTES = LECTURE09_BOOK
PAIRS = (("AQ-SGD int8", "int8 直接"), ("AQ-SGD 4 bit", "4 bit 直接"),
         ("AQ-SGD 4 bit", CONTROL), (CONTROL, "4 bit 直接"))
MACHINE_TOL = 0.005       # another CPU moves these Δ; the 5-seed ranges are ~0.005 wide
TOL = 0.01                # aq_report.TOLERANCE

pytestmark = [pytest.mark.slow, pytest.mark.claims]


@pytest.fixture(scope="module", params=["fp32", "bf16"])
def default_demo_6(request):
    return request.param, frontier_default_run(6, request.param)


def _section():
    return notes_section(NOTES, "### 11.7 ")


def test_each_rows_delta_lies_in_the_notes_range_of_its_precision(default_demo_6):
    precision, table = default_demo_6
    assert_deltas_in_notes_ranges(_section(), precision, table, 5, MACHINE_TOL)


def test_the_paired_differences_lie_in_the_notes_ranges(default_demo_6):
    precision, table = default_demo_6
    for aq, direct in PAIRS:
        d = table[aq][1][0].bpc - table[direct][1][0].bpc
        low, high = notes_range(notes_row(_section(), f"{aq} 减 {direct}")[f"{precision}（5 组种子）"])
        assert low - MACHINE_TOL <= d <= high + MACHINE_TOL, (precision, aq, d)


def test_the_claims_of_the_reading_hold(default_demo_6):
    _, table = default_demo_6
    delta = {label: deltas[0] for label, (_, _, deltas) in table.items()}
    assert abs(delta["int8 直接"]) < 0.001 and abs(delta["AQ-SGD int8"]) < 0.001
    assert delta["4 bit 直接"] > 2 * TOL
    assert 0 < delta["AQ-SGD 4 bit"] <= TOL
    assert delta["AQ-SGD 4 bit"] - delta["4 bit 直接"] < -2 * TOL
    assert delta[CONTROL] > TOL
    clean, first = delta["AQ-SGD 4 bit"] - delta[CONTROL], delta[CONTROL] - delta["4 bit 直接"]
    assert clean < -TOL and first < -TOL                  # both halves of the gain beyond the tolerance
    words = aq_report.control_words(table, "AQ-SGD 4 bit", "4 bit 直接", CONTROL, TOL)
    assert words[-1].startswith("所以是变化量在帮忙")
    section = _section()
    for label, (_, results, _) in table.items():
        row = notes_row(section, label)
        assert row["前向 字节/值"] == f"{results[0].forward_bytes_per_value:.4f}"
        assert row["反向 字节/值"] == f"{results[0].backward_bytes_per_value:.4f}"
    assert table[CONTROL][1][0].forward_bytes_per_value == table["AQ-SGD 4 bit"][1][0].forward_bytes_per_value
    assert notes_row(section, CONTROL)["前向 字节/值"] == "0.8641"
