"""Every exercise of lecture 9 says its level, what it needs and how long its command runs.

Issue 42, item 3. An exercise is a numbered item ("7. …") in an exercise list of a section page
(lectures/lecture09/NN_*.md): a list opened by a line "**练习**" or "**练习**（续）", or by a
heading "## k.n 练习 …", and closed by the next heading or bold paragraph. Its first line starts
with one marker:

    7. 【核心 core · `python3 code/lecture09/05_decentralized.py --demo 1` · 约 7 s】 **标题。** …
    7. 【深入 depth · 写代码 write code · `python3 code/lecture09/04_pipeline.py --demo 4` · 约 1 s】 …
    7. 【深入 depth · `python3 code/lecture09/07_compression_beyond.py --seeds 3` · 约 4 min（估计 estimated）】 …
    7. 【核心 core · 纸笔 pen and paper】 …

the level (核心 core: what a student does after class to check the section's main idea; 深入
depth: further), then what it needs: a command in backticks, or 纸笔 pen and paper, 读代码 read
the code, 写代码 write code (this one may be followed by the command to run after the edit).
A command is followed by its time on 2 cores: "约 N s" or "约 N min", "K 次 × 约 N s" when the
exercise runs it K times (with other values of the same flags), "（估计 estimated）" when it was
estimated from its parts instead of run. The command names a script that exists and is accepted
by that script's own argument parsing (every flag exists, every value is legal); a value written
in capitals (`--micro-batches M`, `--token-file FILE`) is the student's own, and only its flag is checked.

Exercises are numbered 1, 2, … in each list; a "（续）" list goes on from the one before it, so
"练习 12" names one exercise of its page.
"""

import contextlib
import functools
import io
import re
import shlex

import pytest

from conftest import ROOT, load_script
from notes_book import pages_of_sections, section_pages
from test_notes_flag_tables import parser_of

pytestmark = pytest.mark.smoke

LEVELS = ("核心 core", "深入 depth")
NEEDS = ("纸笔 pen and paper", "读代码 read the code", "写代码 write code")
MARKER = re.compile(r"^(\d+)\. 【([^】]*)】 ")
ITEM = re.compile(r"^(\d+)\. ")
OPENS = re.compile(r"^\*\*练习\*\*(（续）)?\s*$|^#+ \d+\.\d+ 练习")
TIME = re.compile(r"^(\d+ 次 × )?约 [1-9]\d* (s|min)(（估计 estimated）)?$")
COMMAND = re.compile(r"^`(python3 [^`]+)`$")
PLACEHOLDER = re.compile(r"^[A-Z]+$")


def exercise_lists(path):
    """[(continues, [(line number, number, first line)])] for each exercise list of a page."""
    lists, current, fence = [], None, False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fence = not fence
        if fence:
            continue
        if OPENS.match(line):
            current = (line.startswith("**练习**（续）"), [])
            lists.append(current)
        elif current is not None and (line.startswith("#") or line.startswith("**")):
            current = None
        elif current is not None and ITEM.match(line):
            current[1].append((number, int(ITEM.match(line).group(1)), line))
    return lists


def exercises():
    out = []
    for path in (p for page, more in pages_of_sections() for p in (page, *more)):
        for _, items in exercise_lists(path):
            for line_number, number, line in items:
                out.append(pytest.param(path, line_number, line, id=f"{path.stem[:2]}-ex{number}"))
    return out


EXERCISES = exercises()


def parse_marker(line):
    """(level, needs, [commands], time or None) of an exercise's first line; AssertionError if it has none."""
    m = MARKER.match(line)
    assert m, "no marker 【level · command · time】 at the start"
    parts = m.group(2).split(" · ")
    level, rest = parts[0], parts[1:]
    needs = [p for p in rest if p in NEEDS]
    commands = [COMMAND.match(p).group(1) for p in rest if COMMAND.match(p)]
    times = [p for p in rest if TIME.match(p)]
    unknown = [p for p in rest if p not in needs and not COMMAND.match(p) and not TIME.match(p)]
    assert not unknown, f"parts that are neither a need, a command nor a time: {unknown}"
    return level, needs, commands, times


@functools.lru_cache(maxsize=None)
def script_and_parser(script):
    """The script loaded once, and its parser."""
    return load_script(ROOT / script), parser_of(script)


def command_problems(command):
    """Why `command` would not run as written: a missing script, or its parser refusing the flags."""
    words = shlex.split(command)
    assert words[0] == "python3"
    if words[1] == "-c":
        scripts = re.findall(r"code/lecture\d\d/[\w/]+\.py", words[2])
        missing = [s for s in scripts if not (ROOT / s).is_file()]
        return [f"{s}: no such file" for s in missing] if scripts else ["python3 -c names no script"]
    script, argv = words[1], words[2:]
    if not re.fullmatch(r"code/lecture09/\d\d_\w+\.py", script) or not (ROOT / script).is_file():
        return [f"{script}: not a script of lecture 9"]
    module, parser = script_and_parser(script)
    if any(PLACEHOLDER.match(w) for w in argv):      # the student's answer: check the flags only
        known = {o for a in parser._actions for o in a.option_strings}
        return [f"{w}: no such flag in {script}" for w in argv if w.startswith("--") and w.split("=")[0] not in known]
    parse = module.parse_args if hasattr(module, "parse_args") else parser.parse_args
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parse(argv)
    except SystemExit as refused:
        return [f"{script} refuses {' '.join(argv)!r} (exit {refused.code}): {err.getvalue().strip()[-200:]}"]
    return []


@pytest.mark.parametrize("path, line_number, line", EXERCISES)
def test_every_exercise_is_marked_with_its_level_needs_and_time(path, line_number, line):
    where = f"{path.name}:{line_number}: {line[:60]}"
    level, needs, commands, times = parse_marker(line)
    assert level in LEVELS, f"{where}: level {level!r} is not one of {LEVELS}"
    assert needs or commands, f"{where}: says neither a command nor {NEEDS}"
    assert len(needs) <= 1 and len(commands) <= 1 and len(times) <= 1, f"{where}: one need, one command, one time"
    if commands:
        assert times, f"{where}: a command without its time"
        assert not (needs and needs[0] != NEEDS[2]), f"{where}: only 写代码 goes with a command"
    else:
        assert not times, f"{where}: a time without a command"


@pytest.mark.parametrize("path, line_number, line", [p for p in EXERCISES if "`python3 " in p.values[2].split("】")[0]])
def test_an_exercise_command_runs_as_written(path, line_number, line):
    _, _, commands, _ = parse_marker(line)
    problems = command_problems(commands[0])
    assert not problems, f"{path.name}:{line_number}:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", section_pages(), ids=lambda p: p.stem[:2])
def test_exercises_are_numbered_one_by_one_so_a_number_names_one(path):
    """A section's continuation page (tests/notes_book.py) goes on with its numbers: its lists
    are "（续）" lists after the section page's own."""
    lists = [lst for p in (path, *dict(pages_of_sections())[path]) for lst in exercise_lists(p)]
    assert lists, f"{path.name}: no exercise list"
    last = 0
    for continues, items in lists:
        numbers = [n for _, n, _ in items]
        start = last + 1 if continues else 1
        assert numbers == list(range(start, start + len(numbers))), f"{path.name}: {numbers}"
        last = numbers[-1] if numbers else last


def test_the_checks_find_what_they_guard():
    """Hand-made cases: an unmarked exercise, a wrong level, a flag the script lacks, a value it refuses."""
    with pytest.raises(AssertionError, match="no marker"):
        parse_marker("3. **更多进程。** `--world-size 4`：…")
    level, _, _, _ = parse_marker("3. 【简单 easy · 纸笔 pen and paper】 …")
    assert level not in LEVELS
    script = "code/lecture09/04_pipeline.py"
    assert command_problems(f"python3 {script} --demo 1 --stages 4") == []
    assert command_problems(f"python3 {script} --demo 1 --micro-batches M") == []
    assert command_problems(f"python3 {script} --demo 1 --no-such-flag 3")
    assert command_problems(f"python3 {script} --demo 1 --micro-batches 133")      # the parser allows 1-64
    assert command_problems(f"python3 {script} --demo 1 --mikro-batches M")
    assert command_problems("python3 code/lecture09/12_nothing.py")
    assert not TIME.match("约 0.5 s") and not TIME.match("a while") and TIME.match("3 次 × 约 80 s（估计 estimated）")
