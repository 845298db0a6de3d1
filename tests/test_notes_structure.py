"""Lecture 9's notes read from §1 to §11 (issue 20): section k goes with code k, and no
section leans on what a later one defines: the collectives' terms first appear in §1, and
every "第 X 节说过 / 推导" points back, never forward."""

import re

from conftest import LECTURE09, ROOT
from notes_book import LECTURE09_BOOK

NOTES = LECTURE09_BOOK
# Terms §1 defines (the collectives and their cost) that §2-§4 use.
SECTION_1_TERMS = ("reduce-scatter", "all-gather", "α–β", "2(p−1)/p", "all-reduce = reduce-scatter + all-gather")


def sections():
    """[(number, text)] of the top-level sections, in order, without the references."""
    text = NOTES.read_text(encoding="utf-8")
    text = text[:text.index("\n## 参考文献")]
    parts = re.split(r"\n(?=## )", text)
    return [(int(re.match(r"## (\d+) ", p).group(1)), p) for p in parts[1:]]


def test_the_sections_are_numbered_1_to_11_in_order():
    assert [n for n, _ in sections()] == list(range(1, 12))


def test_script_k_names_section_k_and_section_k_names_script_k():
    scripts = sorted(LECTURE09.glob("[0-9][0-9]_*.py"))
    assert len(scripts) == 11
    by_number = dict(sections())
    for script in scripts:
        k = int(script.name[:2])
        source = script.read_text(encoding="utf-8")
        assert re.search(rf"第 {k} 节|§{k}\b|§{k}\.\d", source), script.name
        assert script.name in by_number[k], (k, script.name)


def test_the_collectives_terms_first_appear_in_section_1():
    first = {}
    for n, text in sections():
        for term in SECTION_1_TERMS:
            if term in text:
                first.setdefault(term, n)
    assert first == {term: 1 for term in SECTION_1_TERMS}, first


def test_every_said_or_derived_reference_points_back():
    """"第 X 节说过 / 推导过 / 算过" in section k needs X <= k; "第 X 节会…" is the forward form."""
    backward = re.compile(r"第 ?(\d+)(?:\.\d+)? ?节(?:里)?(?:说过|推导过|算过|讲过|推导的|量过)")
    wrong = [(n, m.group(0)) for n, text in sections() for m in backward.finditer(text) if int(m.group(1)) > n]
    assert not wrong, wrong
