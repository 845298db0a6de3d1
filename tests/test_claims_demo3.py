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


def test_figure_5_4s_caption_is_the_recorded_runs(section):
    """图 5.4 (fig09_05_demo3_convergence.svg) is drawn from each search run's best so far;
    its caption quotes where those runs reach their bests and stop: the same default run,
    recorded in this process (what --figures records)."""
    from lecture09.schedule.hetero_cost import HeteroSetup
    from lecture09.schedule.hetero_figures import curves
    from lecture09.schedule.hetero_study import study

    r = study(HeteroSetup(record=True))
    caption = flat(section[section.index("**图 5.4**"):].split("\n")[0])

    def runs(inst, name):
        return [c for c in curves(inst.cost) if c.search == name]

    def reached(c):   # the evaluation where the run first had its final best
        return next(n for n, t in c.points if t == c.points[-1][1])

    small, large = r.small, r.large
    opt, = runs(small, "optimum")
    assert flat(f"虚线是证明过的最优 {small.best.total:.2f} 秒") in caption
    assert flat(f"第 {reached(opt)} 次计算找到 {opt.points[-1][1]:.2f} 秒，之后到第 {opt.length} 次") in caption
    enum, = runs(small, "enumeration")
    genetic = runs(small, "genetic")
    assert small.results["enumeration"].finished
    assert len({f"{c.points[-1][1]:.2f}" for c in genetic + [enum]}) == 1
    steps = sorted(reached(c) for c in genetic)
    assert flat(f"剪枝枚举第 {reached(enum)} 次、遗传算法三个种子在第 {steps[0]}–{steps[-1]} 次都到了 "
                f"{enum.points[-1][1]:.2f} 秒") in caption
    after = min(c.length - reached(c) for c in genetic)
    assert 1800 <= after < 1900 and "又算了1,800多次也没变好" in caption
    graph = runs(small, "graph")
    assert {(c.length, f"{c.points[-1][1]:.2f}") for c in graph} == {(20, "69.20")}
    assert "图划分每个种子20次就停在69.20秒" in caption
    enum, = runs(large, "enumeration")
    assert flat(f"虚线是三者里最好的 {large.best.total:.2f} 秒") in caption
    assert flat(f"剪枝枚举第 1 次计算就是 {enum.points[0][1]:.2f} 秒、第 {reached(enum)} 次到 "
                f"{enum.points[-1][1]:.2f} 秒") in caption and enum.points[0][0] == 1
    graph = runs(large, "graph")
    best = f"{large.best.total:.2f}"
    hit = [c for c in graph if f"{c.points[-1][1]:.2f}" == best]
    assert len({c.length for c in graph}) == 1 and len(hit) == 1
    assert flat(f"图划分三个种子各 {graph[0].length} 次，只有一个到了 {best} 秒（第 {reached(hit[0])} 次）") in caption
    genetic = runs(large, "genetic")
    assert min(c.points[0][1] for c in genetic) > 200 and "从200秒以上开始" in caption
    assert all(18_500 <= c.length <= 19_500 for c in genetic)
    ends = sorted(c.points[-1][1] for c in genetic)
    assert flat(f"约 19,000 次以后停在 {ends[0]:.2f}–{ends[-1]:.2f} 秒") in caption
