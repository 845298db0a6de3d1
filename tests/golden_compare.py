"""Compare a script's quick-mode output with its committed golden file.

A refactor should not change what a script prints; this checks it in seconds. The output
is cut into units: a list item ("  3. ..." and its wrapped lines) or a block of non-blank
lines (a table, a paragraph). Each unit is compared in one of four ways:

  exact     machine-independent units (costs, bytes, counts, the world): every character,
            so a table's alignment is checked too;
  tolerant  units with trained figures (bits per char, losses): the words must be the
            same, each number within `atol` of the golden one (wrapping may differ);
  skipped   units whose content moves with the machine: anything marked [实测]
            (measured), and the units a golden names in `skip` (generated samples, ...);
  masked    parts of a line that are timings (`mask`), blanked before comparing.

Numbers in scientific notation (1.3e-07) are rounding differences: their size depends on
the CPU's summation order, so only their place is compared; the tests of each module check
that they stay below their tolerance.

Regenerate after an intended change:  GOLDEN_UPDATE=1 python3 -m pytest tests/test_golden_outputs.py
and read the diff (`git diff tests/golden`) before committing it.
"""

import re
from dataclasses import dataclass, field

NUMBER = re.compile(r"\d+(?:[.,]\d+)*(?:e[-+]\d+)?")
LIST_ITEM = re.compile(r"^\s{0,3}\d+\. ")
MEASURED_MARK = re.compile(r"\[实测|实测 measured|\(measured")


@dataclass(frozen=True)
class Golden:
    name: str                                   # the file tests/golden/<name>.txt
    script: str                                 # path from the repository root
    args: tuple                                 # quick-mode flags
    tolerant: tuple = ()                        # regexes: a unit matching one is compared with atol
    skip: tuple = ()                            # regexes: a unit matching one is not compared
    mask: tuple = ()                            # regexes: matched text blanked in every line
    atol: float = 0.05                          # for trained figures in tolerant units
    timeout_s: float = 300


@dataclass
class Unit:
    lines: list = field(default_factory=list)

    @property
    def text(self):
        return "\n".join(self.lines)


def units(text):
    """Split output into units: list items, and blocks of non-blank lines."""
    found, current = [], None
    for line in text.splitlines():
        if not line.strip():
            current = None
            continue
        if current is None or LIST_ITEM.match(line):
            current = Unit()
            found.append(current)
        current.lines.append(line)
    return found


SCIENTIFIC = re.compile(r"\d+(?:\.\d+)?e[-+]\d+")


def _masked(text, golden):
    text = SCIENTIFIC.sub("<rounding>", text)
    for pattern in golden.mask:
        text = re.sub(pattern, "<masked>", text, flags=re.M)
    return text


def _words_and_numbers(text):
    """(text with numbers replaced by '#', whitespace removed; the numbers as floats or
    None for scientific notation)."""
    numbers = []
    for match in NUMBER.finditer(text):
        token = match.group(0)
        numbers.append(None if "e" in token else float(token.replace(",", "")))
    words = re.sub(r"\s+", "", NUMBER.sub("#", text))
    return words, numbers


def kind_of(unit, golden):
    text = unit.text
    if MEASURED_MARK.search(text) or any(re.search(p, text) for p in golden.skip):
        return "skipped"
    if any(re.search(p, text) for p in golden.tolerant):
        return "tolerant"
    return "exact"


def differences(actual_text, golden_text, golden):
    """A list of human-readable differences (empty when the output matches)."""
    actual, expected = units(actual_text), units(golden_text)
    problems = []
    if len(actual) != len(expected):
        problems.append(f"{len(actual)} units of output, golden has {len(expected)}")
    for index, (got, want) in enumerate(zip(actual, expected)):
        kind = kind_of(want, golden)
        if kind != kind_of(got, golden):
            problems.append(f"unit {index}: a {kind} unit in the golden file, not in the output:\n{got.text}")
            continue
        if kind == "skipped":
            continue
        got_text, want_text = _masked(got.text, golden), _masked(want.text, golden)
        if kind == "exact":
            if got_text != want_text:
                problems.append(f"unit {index} differs:\n--- golden\n{want_text}\n--- output\n{got_text}")
            continue
        got_words, got_numbers = _words_and_numbers(got_text)
        want_words, want_numbers = _words_and_numbers(want_text)
        if got_words != want_words or len(got_numbers) != len(want_numbers):
            problems.append(f"unit {index}: words differ:\n--- golden\n{want_text}\n--- output\n{got_text}")
            continue
        for a, b in zip(got_numbers, want_numbers):
            if (a is None) != (b is None) or (a is not None and abs(a - b) > golden.atol):
                problems.append(f"unit {index}: {a} against golden {b} (atol {golden.atol}):\n{got_text}")
                break
    return problems
