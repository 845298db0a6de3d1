"""Each script's quick-mode output against its committed golden file (tests/golden/).

Lecture 9's scripts whose quick run other tests read too (IN_PROCESS) are compared on that
one run, main() in this process (conftest.shared_quick_run), so the main part runs
each quick mode once; the others run as a student runs them (a fresh process, from the
repository root; under a Windows code page, and with --figures where test_figures.py's sweep
runs the same flags: one run for the three checks, fresh_run below). test_smoke.py starts
every script as a fresh process. What may differ
between machines is described in golden_compare.py. Set GOLDEN_UPDATE=1 to rewrite the
files after an intended change, then read `git diff tests/golden` before committing.
"""

import os
from pathlib import Path

import pytest

from conftest import QUICK_ARGV, shared_quick_run, student_run
from golden_compare import Golden, differences
from lecture01.console import LINE_WIDTH, display_width

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
ELAPSED = (r"\d+(\.\d+)? ?s\b", r"\d+(\.\d+)? 秒")          # wall-clock times

GOLDENS = [
    Golden("lecture01_01_world", "code/lecture01/01_world.py", ()),
    Golden("lecture01_02_train_base", "code/lecture01/02_train_base.py",
           ("--quick", "--fp32"),       # --steps 40 --eval-every 20 --probes 20 --samples 1, no cache
           tolerant=(r"bits/字符",), mask=ELAPSED,
           # generated text, the model's answers and the observations about them are trained
           # outcomes that change with the CPU; the claims tests check the default run's words
           skip=(r"samples", r"^\s*\d+ \|", r"提示 prompt", r"准确率 accuracy", r"^\s*\d\. ",
                 r"training loss")),
    Golden("lecture09_01_collectives", "code/lecture09/01_collectives.py", ("--quick",), mask=ELAPSED),
    Golden("lecture09_02_data_parallel", "code/lecture09/02_data_parallel.py", ("--quick",),
           tolerant=(r"loss", r"bits/字符"), mask=ELAPSED),
    Golden("lecture09_03_memory_zero", "code/lecture09/03_memory_zero.py", ("--quick",), mask=ELAPSED),
    Golden("lecture09_04_pipeline", "code/lecture09/04_pipeline.py", ("--quick",), mask=ELAPSED),
    # demo 1 is arithmetic (exact); demo 2's rows and observations carry trained figures, and
    # their words (better / worse / the same) follow the figures, so only a tolerance would
    # let a kernel difference through: fp32 and a tolerance of 0.05 bits per char
    Golden("lecture09_05_decentralized", "code/lecture09/05_decentralized.py", ("--quick", "--fp32"),
           tolerant=(r"bits/字符", r"Δ", r"误差反馈", r"压缩"), mask=ELAPSED),
    Golden("lecture09_06_swarm_http", "code/lecture09/06_swarm_http.py", ("--quick",),   # --steps 6 --workers 2
           tolerant=(r"bpc", r"loss", r"损失"), mask=ELAPSED),
    Golden("lecture09_07_compression_beyond", "code/lecture09/07_compression_beyond.py",
           ("--quick", "--fp32", "--jobs", "1"),
           tolerant=(r"bits/字符", r"Δ", r"loss", r"\|"), mask=ELAPSED),
    Golden("lecture09_08_byzantine", "code/lecture09/08_byzantine.py", ("--quick", "--fp32", "--jobs", "1"),
           tolerant=(r"\d\.\d\d",), mask=ELAPSED),
    # tables (a), (c), (e), (g) and what they show are trained (fp32, a few steps); (b), (d),
    # (f), (h) are arithmetic; the paired observations of demos 3 and 4 quote trained differences
    Golden("lecture09_11_frontier", "code/lecture09/11_frontier.py", ("--quick", "--fp32"),
           tolerant=(r"直接发", r"误差", r"bits/字符", r"Δ", r"减去全发", r"比 int8 的 DiLoCo", r"减去 fp32"),
           mask=ELAPSED),
]


# Scripts whose quick run is shared with other tests: stdout of main() in this process.
IN_PROCESS = {"01_collectives.py", "02_data_parallel.py", "03_memory_zero.py", "04_pipeline.py",
              "07_compression_beyond.py", "08_byzantine.py", "11_frontier.py"}


# A fresh process runs under PYTHONIOENCODING=cp936 (Windows' redirect; a script without
# console.utf8_output() stops at its first '✓'), and with --figures DIR where its flags are the
# ones test_figures.py's sweep runs with: that one run serves the golden comparison here, the
# code-page check (test_console_encoding.py) and the figures check, each with its own assertion.
FRESH_CODE_PAGE = "cp936"


def fresh_run(golden):
    """The golden's run in a fresh process (conftest.student_run: once per session)."""
    from test_figures import QUICK_FILES, STUDENT_ARGV
    script = Path(golden.script).name
    figures = golden.script.startswith("code/lecture09/") and script in QUICK_FILES \
        and tuple(golden.args) == STUDENT_ARGV
    return student_run(golden.script, golden.args, code_page=FRESH_CODE_PAGE, figures=figures,
                       timeout_s=max(golden.timeout_s, 900))


def run_quick(golden, fresh_process=False):
    script = Path(golden.script).name
    if script in IN_PROCESS and not fresh_process:
        assert golden.args == QUICK_ARGV.get(script, ("--quick",)), "one quick run per script"
        return shared_quick_run(script)[1]
    done = fresh_run(golden)
    assert done.status == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.parametrize("golden", GOLDENS, ids=lambda g: g.name)
def test_quick_output_matches_golden(golden):
    assert_matches_golden(golden, run_quick(golden))


# The sweep tier (CI) runs the in-process ones again as a student does, a fresh process from
# the repository root: what the shared run cannot show (process start, module state).
@pytest.mark.slow
@pytest.mark.sweep
@pytest.mark.parametrize("golden", [g for g in GOLDENS if Path(g.script).name in IN_PROCESS], ids=lambda g: g.name)
def test_a_fresh_process_prints_the_golden_output_too(golden):
    assert_matches_golden(golden, run_quick(golden, fresh_process=True), update=False)


def assert_matches_golden(golden, output, update=True):
    too_wide = [line for line in output.splitlines() if display_width(line) > LINE_WIDTH]
    assert not too_wide, too_wide[:3]           # a projector shows 100 columns (CJK counts two)
    path = GOLDEN_DIR / f"{golden.name}.txt"
    if update and os.environ.get("GOLDEN_UPDATE") == "1":
        path.write_text(output, encoding="utf-8")
    assert path.exists(), f"no golden file {path.name}: run with GOLDEN_UPDATE=1 once and commit it"
    problems = differences(output, path.read_text(encoding="utf-8"), golden)
    assert not problems, "\n\n".join(problems[:5])
