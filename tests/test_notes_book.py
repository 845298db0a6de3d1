"""Lecture 9's notes are a book of pages (issue 42): one page per section, named after its
script, none longer than about 700 lines; every path the README, the code and the notes give
under lectures/ exists; the joined text the other notes tests read holds every page."""

import re

import pytest

from conftest import LECTURE09, ROOT
from notes_book import (INDEX, LECTURE09_BOOK, REFERENCES, all_pages, one_level_down, pages_of_sections,
                        section_pages)

pytestmark = pytest.mark.smoke

MAX_LINES = 720          # "about 700" (issue 42); the longest, §4, has twenty parts and 15 tables
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
    for page, more in pages_of_sections():
        k = int(page.stem[:2])
        fence, parts = False, []
        for line in (line for p in (page, *more) for line in p.read_text(encoding="utf-8").splitlines()[1:]):
            if line.startswith("```"):
                fence = not fence
            if not fence and line.startswith("## "):
                m = re.match(rf"## {k}\.(\d+) \S", line)
                assert m, (page.name, line)
                parts.append(int(m.group(1)))
        assert parts == list(range(1, len(parts) + 1)) and parts, (page.name, parts)


README = ROOT / "README.md"


def readme_run_time(script):
    """The first time the README's run-time table gives for a lecture-9 script ("28 s")."""
    row = next(line for line in README.read_text(encoding="utf-8").splitlines()
               if line.startswith(f"| `code/lecture09/{script}`"))
    cell = [c.strip() for c in row.strip().strip("|").split("|")][3]
    m = re.search(r"(\d+(?:\.\d+)?) ?(s|min)\b", cell)
    return f"{m.group(1)} {m.group(2)}"


def index_rows():
    rows = {}
    for line in INDEX.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| §(\d+) \| \[[^]]+\]\(([\w.]+)\) \| `([\w.]+)` \| 约 ([^|]+) \|", line)
        if m:
            rows[int(m.group(1))] = (m.group(2), m.group(3), m.group(4).strip())
    return rows


def test_the_index_lists_every_section_with_its_page_script_and_the_readmes_run_time():
    rows = index_rows()
    assert sorted(rows) == list(range(1, 12))
    for k, (page, script, time) in rows.items():
        assert page == f"{script[:-3]}.md" and (INDEX.parent / page).exists(), (k, page)
        assert time == readme_run_time(script), (k, time, readme_run_time(script))


def test_each_section_opens_with_what_to_run_in_class_and_what_is_for_home():
    rows = index_rows()
    for page in section_pages():
        k = int(page.stem[:2])
        head = page.read_text(encoding="utf-8").splitlines()[:6]
        in_class = next(line for line in head if line.startswith("> **课上 in class**"))
        assert any(line.startswith("> **课后 at home**") for line in head), page.name
        assert f"`python3 code/lecture09/{page.stem}.py`（约 {rows[k][2]}）" in in_class, (page.name, in_class)
        cited = re.findall(rf"\b{k}\.(\d+)", in_class)
        headings = set(re.findall(rf"^## {k}\.(\d+) ", page.read_text(encoding="utf-8"), re.M))
        assert cited and set(cited) <= headings, (page.name, cited)


def test_every_table_has_a_name_the_text_can_use():
    """A table is named within the four lines above it: the script's own label ("表 (a)") or
    the notes' number ("**表 5.1　…**", numbered in order within its section)."""
    for page, more in pages_of_sections():
        k = int(page.stem[:2])
        lines = [line for p in (page, *more) for line in p.read_text(encoding="utf-8").splitlines()]
        fence, numbers, unnamed = False, [], []
        for i, line in enumerate(lines):
            if line.startswith("```"):
                fence = not fence
            before = lines[i - 1] if i else ""
            starts_table = (not fence and line.startswith("|") and not before.startswith("|")
                            and i + 1 < len(lines) and re.fullmatch(r"\|[\s:|-]+\|?", lines[i + 1].strip()))
            if starts_table:
                context = "\n".join(lines[max(0, i - 4):i])
                own = re.findall(rf"^\*\*表 {k}\.(\d+)　", context, re.M)
                numbers += [int(n) for n in own]
                if not own and not re.search(r"表 ?[（(]|表[0-9一-龥]", context):
                    unnamed.append(i + 1)
        assert not unnamed, (page.name, unnamed)
        assert numbers == list(range(1, len(numbers) + 1)), (page.name, numbers)


def test_every_committed_figure_is_embedded_with_alt_text_and_a_numbered_caption():
    """Each SVG in lectures/lecture09/figures/ appears in a page as ![alt](figures/FILE) with
    alt text, followed by its caption "**图 k.n**" (numbered in order within its section)."""
    figures = {p.name for p in (INDEX.parent / "figures").glob("*.svg")}
    embedded = {}
    for page, more in pages_of_sections():
        k = int(page.stem[:2])
        lines = [line for p in (page, *more) for line in p.read_text(encoding="utf-8").splitlines()]
        numbers = []
        for i, line in enumerate(lines):
            m = re.fullmatch(r"!\[([^]]*)\]\(figures/([\w.]+)\)", line)
            if m:
                assert len(m.group(1)) >= 20, (page.name, m.group(2), "alt text")
                caption = next(x for x in lines[i + 1:] if x.strip())
                n = re.match(rf"\*\*图 {k}\.(\d+)\*\*　\S", caption)
                assert n, (page.name, caption[:40])
                numbers.append(int(n.group(1)))
                embedded[m.group(2)] = page.name
        assert numbers == list(range(1, len(numbers) + 1)), (page.name, numbers)
    assert len(figures) >= 12 and set(embedded) == figures, figures ^ set(embedded)
