"""Claims tests for code 5's demo 1 (scheduling; notes §5.2-5.5): run it as a student would
and check what the notes say about it. Demo 1 is pure arithmetic on fixed seeds, so every
figure is checked exactly: the notes' tables and quoted numbers appear verbatim in the run.
Slow (a default demo-1 run and a 20-seed hit-rate count), like the other claims tests.
"""

import re

import pytest

from conftest import LECTURE09, ROOT, notes_section, run_script
from notes_book import LECTURE09_BOOK

LECTURE09_NOTES = LECTURE09_BOOK

pytestmark = [pytest.mark.slow, pytest.mark.claims]


@pytest.fixture(scope="module")
def demo1_output():
    return run_script(LECTURE09 / "05_decentralized.py", "--demo", "1")


def flat(text):
    """Text with every space and line break removed: console.wrap may break a line anywhere."""
    return re.sub(r"\s+", "", text)


def says(output, phrase):
    return flat(phrase) in flat(output)


def notes_tables(section):
    return [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("|") and not line.startswith("|---")]


def test_every_table_row_of_section_5_5_is_printed(demo1_output):
    """Each row of §5.5's three tables: its figures, in order, on one printed row."""
    section = notes_section(LECTURE09_NOTES, "### 5.5")
    printed_rows = [flat(line) for line in demo1_output.splitlines()]
    checked = 0
    for cells in notes_tables(section):
        figures = [c for c in cells[1:] if re.search(r"\d", c)]
        if cells[0] == "分配方式" or not figures:   # a header row
            continue
        assert any(flat("".join(figures)) in row for row in printed_rows), cells
        checked += 1
    assert checked == 10 + 7 + 6


def test_local_search_census_and_traces(demo1_output):
    """§5.3: what stops strict descent (all 496 swaps), the budgets, what sideways moves do."""
    assert says(demo1_output, "上的全部 496 个交换")
    assert says(demo1_output, "同一地区内 112 个：0 个更好、112 个不变、0 个更差；跨地区 384 个：0 个更好、0 个不变、384 个更差")
    strict = re.search(r"局部搜索，严格下降（各 3000 次提议）：(.*)", demo1_output).group(1)
    longer = re.search(r"给严格下降和持平一样多的提议（各 20000 次，同样的起点）：(.*) 秒", demo1_output).group(1)
    assert strict == longer == "72.61、52.80、69.35、71.63、149.03"
    assert says(demo1_output, "所以严格下降停在一个真正的局部最小（local minimum）上")
    assert says(demo1_output, "共 89 次下降，其中 55 次紧跟在跨地区的持平交换之后；接受了 228 个跨地区、22637 个地区内的持平交换")
    assert says(demo1_output, "最好的一次 37.53 秒")


def test_genetic_search_and_the_second_instance(demo1_output):
    """§5.3 and §5.5: the region-aware search reaches the optimum on >= 4 of 5 seeds on both
    instances within a fifth of the sideways budget; the blind one does not at batch 256."""
    assert says(demo1_output, "遗传算法（各 20000 次代价计算，种群 6）：22.17、36.52、22.17、22.17、22.17")
    assert says(demo1_output, "batch 1024：4/5 个种子到了最优（不看地区：5/5）；batch 256：5/5 个种子到了最优（不看地区：0/5）")
    assert says(demo1_output, "每个种子 20,000 次代价计算（持平局部搜索 5 次重启一共 100,000 次）")
    assert says(demo1_output, "第二个实例 batch 256：最优 15.87 秒，两种手工分配都不是最优（最好的 18.31 秒，高出 15.4%）")
    assert says(demo1_output, "阶段依次经过 R2 → R3 → R1 → R0")
    assert says(demo1_output, "手工分配和'不看地区'的搜索在这里都不够")
    assert says(demo1_output, "检查了 165 个候选行") and says(demo1_output, "检查了 1,768 个候选行")


def test_traffic_per_device_and_the_paper_settings(demo1_output):
    """§5.2 and §5.5: bytes per device per Eq. 2, the bubble, the paper's setting, the presets."""
    assert says(demo1_output, "数据并行 2 × (8−1)/8 × 0.650 = 1.137 GB")
    assert says(demo1_output, "流水线 中间阶段的卡 2.147 GB（前向 + 反向），一个副本 3 个切口 × 2 个方向共 6.442 GB")
    assert says(demo1_output, "气泡 bubble (P−1)/(M+P−1) = 3/7 = 42.9%")
    assert says(demo1_output, "每张卡都不停时 10.2 秒；GPipe 气泡让它变成 × (M+P−1)/M = 7/4 → 17.9 秒")
    assert says(demo1_output, "用论文的设置，最优分配的通信 43.44 秒，慢 3.02 倍")
    assert says(demo1_output, "aws-world 48.65 秒；aws-regional 34.23 秒")
    assert says(demo1_output, "这里随机分配是最优分配的 4.9 倍")


def test_genetic_hit_rates_over_20_seeds_quoted_in_section_5_5():
    """§5.5's 20-seed hit rates (default budget, network seed 0, M = 4), recomputed."""
    from lecture09 import dist_sim
    net = dist_sim.make_network([8] * 4, intra_gbps=10, inter_gbps_range=(0.3, 1.3),
                                inter_latency_ms_range=(10, 250), seed=0)
    section = flat(notes_section(LECTURE09_NOTES, "### 5.5"))
    quoted = re.search(r"batch64是(\d+)/20、batch256是(\d+)/20、batch1024是(\d+)/20；"
                       r"不看地区的版本分别是(\d+)/20、(\d+)/20、(\d+)/20", section)
    assert quoted, "the hit-rate sentence of §5.5 is missing or reworded"
    counts = []
    for region_aware in (True, False):
        for batch in (64, 256, 1024):
            act_bytes = 2048 * 2048 * 2 * (batch // 8)
            cost = dist_sim.LayoutCost(net, 4, 8, 1.3e9 * 2 / 4, act_bytes, 4)
            best = dist_sim.optimal_layout(net, 4, 8, 1.3e9 * 2 / 4, act_bytes, n_micro_batches=4)
            target = round(best.cost * dist_sim.PS_PER_S)
            counts.append(sum(round(dist_sim.genetic_search(cost, seed, max_evaluations=20000,
                                                            region_aware=region_aware).cost * dist_sim.PS_PER_S)
                              == target for seed in range(20)))
    assert counts == [int(x) for x in quoted.groups()]
