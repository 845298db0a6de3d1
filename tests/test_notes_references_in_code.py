"""What a script prints or says in its docstring about the notes ("讲义 5.7 节", "第 4.9 节")
points at a section that exists, and code 5's own references point into §5, the section it
pairs with (lecture 9's sections were renumbered once; a stale "7.7" then named §7's DiLoCo)."""

import re

import pytest

from conftest import ROOT
from notes_book import LECTURE09_BOOK

pytestmark = pytest.mark.smoke

NOTES = LECTURE09_BOOK
REFERENCE = re.compile(r"(?:讲义 ?|第 ?)(\d+)\.(\d+) ?节")
# code 5's files: the script, demo 1's scheduling and demo 2's report
CODE5 = ("05_decentralized.py", "schedule/", "compress/demo2_report.py")


def references():
    found = []
    for path in sorted((ROOT / "code" / "lecture09").rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for major, minor in REFERENCE.findall(line):
                found.append((str(path.relative_to(ROOT / "code" / "lecture09")), number, int(major), int(minor)))
    return found


def test_every_section_the_code_names_exists_and_code_5_names_its_own():
    headings = set(re.findall(r"^### (\d+)\.(\d+) ", NOTES.read_text(encoding="utf-8"), re.M))
    found = references()
    assert len(found) >= 5                                   # the pattern still finds them
    for where, line, major, minor in found:
        assert (str(major), str(minor)) in headings, (where, line, f"{major}.{minor}")
        if where.startswith(CODE5):
            assert major == 5, (where, line, f"{major}.{minor}: code 5 pairs with §5")
