"""Lecture 9's notes as the tests read them.

The notes are a folder of pages, `lectures/lecture09/`: `index.md`, one page per section
(`01_collectives.md` ... `11_frontier.md`, section k with code k, each named after its
script) and `references.md`. Each page opens with its own level-1 heading ("# 5 去中心化训练 …",
its parts "## 5.1 …").

Tests that check what the notes say read `LECTURE09_BOOK`: the pages in reading order joined
into one text, every heading outside a code block one level down, so that a section is
found by the heading it had when the notes were one file ("## 5 ", "### 5.7"). The text is
the pages' own; nothing is added but the join.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LECTURE09_NOTES_DIR = ROOT / "lectures" / "lecture09"
INDEX = LECTURE09_NOTES_DIR / "index.md"
REFERENCES = LECTURE09_NOTES_DIR / "references.md"


def section_pages():
    """The eleven section pages, in order of their number."""
    return sorted(LECTURE09_NOTES_DIR.glob("[0-9][0-9]_*.md"))


def continuation_pages(page):
    """A section's further pages, after its own: `05b_emulated_network.md` goes on from
    `05_decentralized.md` (a section too long for one page of about 700 lines). Such a page
    opens with its own title ("# 5（续）…") and goes on with the section's numbering (## 5.12)."""
    return sorted(page.parent.glob(f"{page.stem[:2]}[a-z]_*.md"))


def pages_of_sections():
    """[(section page, [its continuation pages])] in order."""
    return [(page, continuation_pages(page)) for page in section_pages()]


def all_pages():
    """index, the sections in order (each followed by its continuation pages), references:
    the reading order."""
    return [INDEX, *(p for page, more in pages_of_sections() for p in (page, *more)), REFERENCES]


def one_level_down(text, keep_title=False):
    """Every Markdown heading outside fenced code one level down ("# 5 x" -> "## 5 x");
    with keep_title, the page's first line (its title) stays as it is."""
    out, fence = [], False
    for i, line in enumerate(text.splitlines()):
        if line.startswith("```"):
            fence = not fence
        if not fence and re.match(r"#{1,5} ", line) and not (keep_title and i == 0):
            line = "#" + line
        out.append(line)
    return "\n".join(out) + "\n"


class Book:
    """Reads like a Path (`read_text`, `name`, `stem`) so the notes helpers take it as one."""

    name = "lecture09"
    stem = "lecture09"

    def read_text(self, encoding="utf-8"):
        parts = [one_level_down(INDEX.read_text(encoding=encoding), keep_title=True)]
        for page, more in pages_of_sections():
            parts.append(one_level_down(page.read_text(encoding=encoding)))
            # a continuation page's title is dropped: its parts are the section's own
            parts += [one_level_down(p.read_text(encoding=encoding).split("\n", 1)[1]) for p in more]
        parts.append(one_level_down(REFERENCES.read_text(encoding=encoding)))
        return "\n".join(parts)

    def __fspath__(self):          # so Path(LECTURE09_BOOK) is refused loudly, not misread
        raise TypeError("LECTURE09_BOOK is several pages: call its read_text()")


LECTURE09_BOOK = Book()
