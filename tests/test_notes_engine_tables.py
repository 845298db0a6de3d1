"""§9 一 and §10 一: what each engine is made of, with what code 9 and code 10 use of it.
The figures in the right-hand column (replica groups, the quorum's minimum, the round the
bootstrap node dies, the late peer's number) are read from the notes and compared with the
scripts' defaults and constants, so neither side can change alone."""

import re

import pytest

from conftest import LECTURE09, ROOT, load_script, notes_section, table_cells
from notes_book import LECTURE09_BOOK

pytestmark = pytest.mark.smoke

NOTES = LECTURE09_BOOK


def row(section, first_cell):
    line = next(line for line in section.splitlines() if line.startswith(f"| {first_cell}"))
    return table_cells(line)


def test_section_9_parts_table_says_what_code_9_uses():
    from lecture09.engines import torchft_run
    code9 = load_script(LECTURE09 / "09_torchft.py")
    section = notes_section(NOTES, "## 9 ")
    groups = row(section, "副本组 replica group")[2]
    assert int(re.match(r"(\d+) 组，每组 1 个 gloo rank", groups).group(1)) == code9.DEFAULTS["replicas"]
    lighthouse = row(section, "Lighthouse")[2]
    assert int(re.search(r"`min_replicas = (\d+)`", lighthouse).group(1)) == torchft_run.MIN_REPLICAS


def test_section_10_parts_table_says_what_code_10_does():
    code10 = load_script(LECTURE09 / "10_hivemind.py")
    section = notes_section(NOTES, "## 10 ")
    bootstrap = row(section, "引导节点 bootstrap")[2]
    dies = int(re.search(r"第 (\d+) 轮被 SIGKILL", bootstrap).group(1))
    args = code10.build_parser().parse_args([])
    code10.fill_churn(args)                                    # the churn rounds follow --rounds
    assert dies == args.bootstrap_dies_at
    late = row(section, "状态共享 state sharing")[2]
    assert int(re.search(r"晚来的同伴 (\d+)", late).group(1)) == code10.DEFAULTS["peers"] - 1
