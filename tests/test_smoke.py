"""The smoke set's script runs (`python3 -m pytest -m smoke`, about a minute on 2 cores):
every script answers --help within 100 columns, and runs its cheapest demo as a student
would, from another folder. Every full quick run, compared with its golden output, is in
tests/test_golden_outputs.py (the fast suite): together those need ~180 CPU-seconds here,
more than a one-minute check on 2 cores has."""

import subprocess
import sys

import pytest

from conftest import LECTURE01, LECTURE09, ROOT

pytestmark = pytest.mark.smoke

SCRIPTS = sorted(LECTURE01.glob("[0-9][0-9]_*.py")) + sorted(LECTURE09.glob("[0-9][0-9]_*.py"))

# The cheapest run of each script that still does its own work (flags as --help lists them).
CHEAPEST = {
    "01_world.py": ["--samples", "2"],
    "02_train_base.py": ["--steps", "2", "--eval-every", "2", "--probes", "2", "--samples", "1", "--no-cache",
                         "--fp32"],
    "01_collectives.py": ["--demo", "5", "--quick"],               # real gloo ranks
    "02_data_parallel.py": None,                                   # real ranks again: golden tests
    "03_memory_zero.py": ["--demo", "1"],
    "04_pipeline.py": ["--demo", "1"],
    "05_decentralized.py": ["--demo", "1", "--quick"],
    "06_swarm_http.py": ["--steps", "2", "--workers", "1", "--modes", "none"],   # server and a worker
    "07_compression_beyond.py": None,                              # every table trains: golden tests
    "08_byzantine.py": None,                                       # every table trains: golden tests
    "09_torchft.py": None,                                         # real processes, ~40 s: test_code9.py
    "10_hivemind.py": None,                                        # real processes, ~15 s: test_code10.py
    "11_frontier.py": ["--demo", "1", "--quick"],                  # 6 training steps, then arithmetic
}


_RUNS = {}


def run(script, argv, code_page=None):
    """stdout of a script run as a student would, from another folder; code_page: run it as
    Windows runs a redirected script (PYTHONIOENCODING=cp1252: no 汉字 at all), the output
    read as UTF-8 all the same (test_console_encoding.py has cp936 and the rest). One run per
    (script, argv, code page) in a session: two tests read each --help's one run."""
    key = (str(script), tuple(argv), code_page)
    if key not in _RUNS:
        _RUNS[key] = _run(script, argv, code_page)
    return _RUNS[key]


def _run(script, argv, code_page):
    import os
    from lecture01.console import display_width
    env = {**os.environ, "COLUMNS": "100", **({"PYTHONIOENCODING": code_page} if code_page else {})}
    done = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, encoding="utf-8",
                          cwd=str(ROOT.parent), timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    wide = [line for line in done.stdout.splitlines() if display_width(line) > 100]
    assert not wide, wide[:3]
    return done.stdout


def test_every_script_is_in_the_table():
    assert {s.name for s in SCRIPTS} == set(CHEAPEST)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_help_fits_and_names_the_flags(script):
    out = run(script, ["--help"])
    assert out.startswith("usage:") and "--help" in out


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_a_bad_flag_is_one_line_with_a_hint(script):
    done = subprocess.run([sys.executable, str(script), "--no-such-flag"], capture_output=True, text=True,
                          cwd=str(ROOT.parent), timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "error:" in done.stderr and "--help" in done.stderr, done.stderr


@pytest.mark.parametrize("script", [s for s in SCRIPTS if CHEAPEST[s.name]], ids=lambda s: s.name)
def test_cheapest_demo_runs(script):
    out = run(script, CHEAPEST[script.name], code_page="cp1252")
    assert out.count("\n") >= 5


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_every_flag_is_explained_in_both_languages(script):
    """Each flag's help has Chinese and an English word a student can search for (issue 21, 9)."""
    import re
    out = run(script, ["--help"])
    options = out[out.index("options:"):]
    entries = re.split(r"\n  (?=-)", options)[1:]            # one entry per flag, wrapped lines included
    for entry in entries:
        flag, _, text = entry.partition(" ")
        if flag in ("-h,", "--help"):
            continue
        text = re.sub(r"\(default[^)]*\)|--[\w-]+|\{[^}]*\}|[A-Z_]{2,}", " ", text)
        assert re.search(r"[\u4e00-\u9fff]", text) and re.search(r"[a-z]{3,}", text), (script.name, entry)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_help_fits_an_80_column_terminal_too(script):
    import os
    from lecture01.console import display_width
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                          cwd=str(ROOT.parent), timeout=60, env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0
    wide = [line for line in done.stdout.splitlines() if display_width(line) > 80]
    assert not wide, wide[:3]
