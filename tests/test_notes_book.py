"""Lecture 9's notes are a book of pages (issue 42): one page per section, named after its
script, none longer than about 700 lines; every path the README, the code and the notes give
under lectures/ exists; the joined text the other notes tests read holds every page."""

import re

import pytest

from conftest import LECTURE09, ROOT
from notes_book import INDEX, LECTURE09_BOOK, REFERENCES, all_pages, one_level_down, section_pages

pytestmark = pytest.mark.smoke

MAX_LINES = 700
LECTURES_PATH = re.compile(r"lectures/[\w/]+\.md")


def test_one_page_per_section_named_after_its_script():
    scripts = sorted(p.stem for p in LECTURE09.glob("[0-9][0-9]_*.py"))
    assert [p.stem for p in section_pages()] == scripts
    for page in section_pages():
        first = page.read_text(encoding="utf-8").splitlines()[0]
        assert re.match(rf"# {int(page.stem[:2])} ", first), (page.name, first)


def test_no_page_is_longer_than_about_700_lines():
    lengths = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in all_pages()}
    assert max(lengths.values()) <= MAX_LINES, lengths


def test_every_lectures_path_named_in_readme_code_and_notes_exists():
    sources = [ROOT / "README.md", *sorted((ROOT / "code").rglob("*.py")),
               *sorted((ROOT / "lectures").rglob("*.md"))]
    named = {(str(s.relative_to(ROOT)), m) for s in sources
             for m in LECTURES_PATH.findall(s.read_text(encoding="utf-8"))}
    assert len(named) >= 20                                  # the pattern still finds them
    missing = sorted((where, path) for where, path in named if not (ROOT / path).exists())
    assert not missing, missing


def test_the_joined_book_holds_every_page_with_headings_one_level_down():
    text = LECTURE09_BOOK.read_text(encoding="utf-8")
    assert text.startswith("# 第 9 讲")
    for page in section_pages():
        k = int(page.stem[:2])
        assert re.search(rf"^## {k} ", text, re.M), k
    assert "\n## 参考文献" in text and REFERENCES.exists() and INDEX.exists()


def test_one_level_down_leaves_code_blocks_alone():
    page = "# 6 title\n## 6.1 part\n```bash\n# a shell comment\n```\n### deeper\n"
    assert one_level_down(page) == "## 6 title\n### 6.1 part\n```bash\n# a shell comment\n```\n#### deeper\n"
    assert one_level_down("# 第 9 讲\n## x\n", keep_title=True) == "# 第 9 讲\n### x\n"


def test_every_part_of_every_section_is_numbered_k_n_in_order():
    """"§6.5" can be cited: a section's parts are ## k.1, k.2, ... (no 一、二、三 in their place),
    and deeper headings carry their part's number (### k.n.m) or none at all."""
    for page in section_pages():
        k = int(page.stem[:2])
        fence, parts = False, []
        for line in page.read_text(encoding="utf-8").splitlines()[1:]:
            if line.startswith("```"):
                fence = not fence
            if not fence and line.startswith("## "):
                m = re.match(rf"## {k}\.(\d+) \S", line)
                assert m, (page.name, line)
                parts.append(int(m.group(1)))
        assert parts == list(range(1, len(parts) + 1)) and parts, (page.name, parts)
