"""The notes' flag tables ("| 参数 | 默认 | 作用 |") say what each script's parser says.

A flag table is any Markdown table in lectures/*.md whose first-column cells are all
backticked flags (`--steps`, `--demo {1,2,all}`, `--stages` / `--micro-batches`). Each is
read against the parser of the script the section last names (`code/lecture09/04_pipeline.py`
in its command block): every flag exists, its written default equals the parser's default
(numbers as numbers, "8 64 1024" as a list, 关 as off, 不写 as none), and a `{a,b}` list
equals the flag's choices. Changing a default on either side alone makes this fail.

The parser is taken without running the script: its parse_args() builds the parser and
calls ArgumentParser.parse_args, which here hands the parser back instead of parsing.
"""

import argparse
import math
import re
from pathlib import Path

import pytest

from conftest import ROOT, load_script, table_cells
from notes_book import LECTURE09_BOOK

pytestmark = pytest.mark.smoke

NOTES = sorted((ROOT / "lectures").rglob("*.md"))
# Flag tables counted by hand in the notes: §1.7, §2.6, §3.8, §4.6, §4.7, §4.13, §4.14,
# §4.19 and §5.9 of lecture 9 (lecture 1 has none). A new one raises this count.
FLAG_TABLES_IN_NOTES = 9
# Rows whose default cell describes the default instead of giving it: (script, flag): reason.
# The parser's default must then be None (the script decides later).
DESCRIBED = {
    ("04_pipeline.py", "--plan-seq-len"): "模型自己的: each model's own sequence length, chosen after parsing",
}
DEFAULT_HEADERS = ("默认", "默认值", "default")
OFF, ON, NONE = {"关", "off", "否", "—", "-"}, {"开", "on", "是"}, {"不写", "无", "none", "None"}
SCRIPT = re.compile(r"code/lecture\d\d/\d\d_\w+\.py")
FLAG_SPAN = re.compile(r"`(--[a-z0-9-]+)([^`]*)`")


def tables(path):
    """[(line number, section heading, text before the table in its section, header, rows)]."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, heading, heading_at, i = [], "", 0, 0
    while i < len(lines):
        if lines[i].startswith("#"):
            heading, heading_at = lines[i], i
        if lines[i].startswith("|") and i + 1 < len(lines) and re.fullmatch(r"\|[\s:|-]+\|?", lines[i + 1].strip()):
            end = i + 2
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            found.append((i + 1, heading, "\n".join(lines[heading_at:i]), table_cells(lines[i]),
                          [table_cells(line) for line in lines[i + 2:end]]))
            i = end
            continue
        i += 1
    return found


def is_flag_cell(cell):
    """Only backticked flags (with metavars or {choices}), joined by " / "."""
    return bool(FLAG_SPAN.search(cell)) and FLAG_SPAN.sub("", cell).strip(" /") == ""


def flag_tables():
    out = []
    for path in NOTES:
        for line, heading, before, header, rows in tables(path):
            if rows and all(is_flag_cell(row[0]) for row in rows):
                scripts = SCRIPT.findall(before)
                out.append(pytest.param(path, heading, scripts[-1] if scripts else None, header, rows,
                                        id=f"{path.stem[:9]}-L{line}"))
    return out


FLAG_TABLES = flag_tables()


def parser_of(script):
    """The argparse parser a script builds in parse_args(), caught at its parse_args call."""
    module = load_script(ROOT / script)
    if hasattr(module, "build_parser"):
        return module.build_parser()

    class Caught(Exception):
        pass

    def hand_back(self, *args, **kwargs):
        raise Caught(self)

    saved = argparse.ArgumentParser.parse_args
    argparse.ArgumentParser.parse_args = hand_back
    try:
        module.parse_args([])
    except Caught as caught:
        return caught.args[0]
    finally:
        argparse.ArgumentParser.parse_args = saved
    raise AssertionError(f"{script}: parse_args() never called ArgumentParser.parse_args")


def written(text):
    """A default as the notes write it: False / True / None, a number, a list, or the text."""
    text = text.strip()
    if text in OFF or text in ON or text in NONE:
        return False if text in OFF else True if text in ON else None
    words = text.strip("[]()").replace(",", " ").split()
    try:
        numbers = [float(w) for w in words]
    except ValueError:
        return text
    return numbers[0] if len(numbers) == 1 and not text.startswith("[") else numbers


def same(text, default):
    value = written(text)
    if isinstance(default, bool) or default is None or isinstance(value, bool) or value is None:
        return value is default
    if isinstance(default, str):
        return text.strip() == default
    if isinstance(default, (list, tuple)):
        return isinstance(value, list) and len(value) == len(default) and \
            all(math.isclose(v, d, rel_tol=1e-9) for v, d in zip(value, default))
    return isinstance(value, float) and math.isclose(value, default, rel_tol=1e-9)


def row_problems(script, parser, row, column):
    actions = {opt: a for a in parser._actions for opt in a.option_strings}
    spans = FLAG_SPAN.findall(row[0])
    cell = row[column]
    values = [v.strip() for v in cell.split(" / ")] if len(spans) > 1 and " / " in cell else [cell]
    if len(values) not in (1, len(spans)):
        return [f"{row[0]}: {len(spans)} flags but {len(values)} defaults ({cell!r})"]
    problems = []
    for k, (flag, rest) in enumerate(spans):
        action = actions.get(flag)
        if action is None:
            problems.append(f"{flag}: no such flag in {script}")
            continue
        choices = re.search(r"\{([^}]*)\}", rest)
        if choices and action.choices is not None and \
                sorted(choices.group(1).split(",")) != sorted(str(c) for c in action.choices):
            problems.append(f"{flag}: notes list {{{choices.group(1)}}}, parser {tuple(action.choices)}")
        if (Path(script).name, flag) in DESCRIBED:
            if action.default is not None:
                problems.append(f"{flag}: notes describe the default ({cell!r}), parser has {action.default!r}")
        elif k >= len(values):   # one value for several flags: the others are off-by-default switches
            if action.default is not False or action.nargs != 0:
                problems.append(f"{flag}: shares {cell!r} with {spans[0][0]} but is not an off switch")
        elif not same(values[k], action.default):
            problems.append(f"{flag}: notes say {values[k]!r}, parser default {action.default!r}")
    return problems


def test_the_notes_have_the_flag_tables_counted_by_hand():
    found = [p.id for p in FLAG_TABLES]
    assert len(found) == FLAG_TABLES_IN_NOTES, found


@pytest.mark.parametrize("path, heading, script, header, rows", FLAG_TABLES)
def test_a_flag_table_gives_the_parser_defaults(path, heading, script, header, rows):
    assert script, f"{heading}: no code/lectureNN/NN_*.py named before the table in its section"
    column = next((i for i, h in enumerate(header) if h in DEFAULT_HEADERS), None)
    assert column is not None, f"{heading}: a flag table without a default column: {header}"
    parser = parser_of(script)
    problems = [p for row in rows for p in row_problems(script, parser, row, column)]
    assert not problems, f"{path.name} {heading} ({script}):\n" + "\n".join(problems)


def test_every_described_row_is_in_a_flag_table():
    rows = {(Path(p.values[2]).name, flag) for p in FLAG_TABLES for row in p.values[4]
            for flag, _ in FLAG_SPAN.findall(row[0])}
    assert set(DESCRIBED) <= rows, set(DESCRIBED) - rows


def test_section_8s_aggregator_table_names_the_registry_and_the_cc_tau_default():
    """§8's table is of aggregators, not flags: its names are robust.aggregators.AGGREGATORS,
    and the default its centered-clip row gives `--cc-tau` is code 8's."""
    from lecture09.robust.aggregators import AGGREGATORS
    notes = LECTURE09_BOOK
    table = next(rows for _, heading, _, header, rows in tables(notes) if heading.startswith("### 8.1 "))
    assert [re.fullmatch(r"`([a-z-]+)`", row[0]).group(1) for row in table] == list(AGGREGATORS)
    tau = re.search(r"`--cc-tau`，默认 ([\d.]+)", " ".join(" ".join(row) for row in table))
    action = next(a for a in parser_of("code/lecture09/08_byzantine.py")._actions if "--cc-tau" in a.option_strings)
    assert tau and same(tau.group(1), action.default), (tau, action.default)
