"""Claims tests for code 5's demo 3 (mixed cards; notes §5.11): run it as a student would
and check what the notes quote. Demo 3 is pure arithmetic on fixed seeds (networkx pinned
in requirements.txt), so every figure is checked exactly; the notes' differences are
checked as differences of the printed figures."""

import re

import pytest

from conftest import LECTURE09, notes_section, run_script
from notes_book import LECTURE09_BOOK

pytestmark = [pytest.mark.slow, pytest.mark.claims]

SCRIPT = LECTURE09 / "05_decentralized.py"


@pytest.fixture(scope="module")
def output():
    return run_script(SCRIPT, "--demo", "3")


@pytest.fixture(scope="module")
def section():
    return notes_section(LECTURE09_BOOK, "### 5.11")


def flat(text):
    return re.sub(r"\s+", "", text)


def printed_row(output, label, after=""):
    """The figures of the first printed row, after the text `after`, whose label starts with `label`."""
    line = next(line for line in output[output.index(after):].splitlines() if line.startswith(label))
    return re.findall(r"\d+/\d+|[+-]?[\d,]+\.?\d*%?", line[len(label):])


def test_every_row_of_the_notes_tables_d_e_f_is_printed(output, section):
    printed = [flat(line) for line in output.splitlines()]
    checked = 0
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or line.startswith("|---") or not any(re.search(r"\d\.\d", c) for c in cells):
            continue
        figures = flat("".join(c for c in cells[1:] if re.search(r"\d", c)))
        assert any(figures in row for row in printed), cells
        checked += 1
    assert checked == 4 + 3 + 3


def test_the_prose_figures_are_the_runs(output, section):
    for phrase in ("最优的切层是 22、31、13", "合计 67.55 秒", "dp 从 22.17 涨到 36.32", "77.00、84.08、95.07",
                   "6 层 × 3.00 秒 × 7/4"):
        assert phrase in section, phrase
    assert "最优 22 31 13" in output and "遗传算法 31 31 22" in output
    assert flat("配上负载均衡器的切层 67.55（计算 19.34、dp 36.32") in flat(output)
    assert "各次 77.00、84.08、95.07" in output
    assert flat("rtx3090 上 6 层 × 3.00 秒") in flat(output)


def test_the_notes_differences_are_differences_of_printed_figures(output, section):
    even = printed_row(output, "同卡最优 + 均分层数")
    balanced = printed_row(output, "同卡最优 + 按卡速切层")
    best = printed_row(output, "混合卡上找到的最好")
    total, compute, dp = 4, 1, 2   # columns: V100 world, compute, dp, pp, total, gap, links
    assert f"只多 {float(even[total]) - float(best[total]):.2f} 秒（{even[5]}）" in section
    assert f"反而慢了 {float(balanced[total]) - float(even[total]):.2f} 秒" in section
    assert f"计算省了 {float(even[compute]) - float(balanced[compute]):.2f} 秒" in section
    assert f"dp 多了 {float(balanced[dp]) - float(even[dp]):.2f} 秒" in section
    assert best[-1] == "24/24" and "找到的最好分配 24/24 条流水线边都在地区内" in section


def test_the_other_mixes_the_notes_quote():
    other = run_script(SCRIPT, "--demo", "3", "--mix", "a100=8,t4=24")
    genetic = printed_row(other, "遗传算法 genetic（演示 1）", after="表 (e)")
    assert genetic[0] == "17.92" and genetic[2] == "50.91" and genetic[-1] == "0/24"
    small = run_script(SCRIPT, "--demo", "3", "--memory-gb", "t4=6")
    assert printed_row(small, "混合卡上找到的最好")[-1] == "0/24"
