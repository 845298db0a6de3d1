"""Shared test setup: a loader for numbered scripts and helpers for running them.

The toolkit is the installed package (`lecture01`, `lecture09`; see pyproject.toml).

Scripts are named like `05_decentralized.py`, which `import` cannot spell, so tests load
them by path. Loading a script runs nothing but its definitions (main() is guarded).
"""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LECTURE01 = ROOT / "code" / "lecture01"
LECTURE09 = ROOT / "code" / "lecture09"

# The sweep tier: a legal-extreme flag sweep of a demo that trains or starts processes, or a
# further case (another seed, scheme or moment of a kill) of a check the main part
# makes once. A few seconds each add up to minutes: `python3 -m pytest` (what CI runs) and
# the whole suite run them, `-m sweep` runs them alone, the main part (`-m "not
# slow"`) leaves them out.
SWEEP_TIER = (pytest.mark.slow, pytest.mark.sweep)


def load_script(path):
    """Import a numbered script as a module named after its file (without running main)."""
    path = Path(path)
    name = "script_" + path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Results in the notes are produced with one torch thread; tests use the same."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is in requirements.txt
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


DECIMAL = r"(?<![\d.])\d+\.\d+(?![\d.])"


def decimals_in(text):
    """Every decimal number written in `text` (like 22.17 or 1.5637), as strings."""
    import re
    return re.findall(DECIMAL, text)


def printed_samples(out):
    """The sampled texts 02_train_base.py printed, unwrapped: '  1 | text' then
    continuation lines '    | text' (joined with a space, where the wrap broke a line)."""
    import re
    samples = []
    for line in out.splitlines():
        m = re.match(r"^  (\d+) \| (.*)$", line)
        if m:
            samples.append(m.group(2))
        elif line.startswith("    | ") and samples:
            samples[-1] += " " + line[6:]
    return samples


def without_newline_marks(printed):
    """A printed sample with its newline marks taken out. The script prints each newline as
    ' / ' ('/' is not in the alphabet), so n newlines in a row print as ' /  / ...'; every
    '/' that stands between spaces (or at an end) is a mark, however many follow in a row."""
    import re
    return re.sub(r"(?<![^ ])/(?![^ ])", " ", printed)


def notes_section(path, heading_prefix):
    """The text of a Markdown section: from the heading that starts with heading_prefix
    (e.g. "## 7 ") to the next heading of the same level or a higher one. `path` is a file
    or anything with read_text, such as lecture 9's notes read as one (tests/notes_book.py)."""
    source = path if hasattr(path, "read_text") else Path(path)
    lines = source.read_text(encoding="utf-8").splitlines()
    level = len(heading_prefix.split()[0])
    start = next(i for i, line in enumerate(lines) if line.startswith(heading_prefix))
    end = next((i for i in range(start + 1, len(lines))
                if re.match("#{1,%d} " % level, lines[i])), len(lines))
    return "\n".join(lines[start:end])


def table_cells(line):
    """The stripped cells of one Markdown table line ("| a | b |" -> ["a", "b"])."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


def notes_row(section, first_cell):
    """{header cell: cell} of the Markdown table row of `section` whose first cell is
    first_cell, read under its own table's header (so a test names a column, not a position)."""
    lines = section.splitlines()
    header = None
    for i, line in enumerate(lines):
        cells = table_cells(line)
        if not line.startswith("|") or re.match(r"\|\s*:?-", line):
            continue
        if i + 1 < len(lines) and re.match(r"\|\s*:?-", lines[i + 1]):
            header = cells
        elif cells[0] == first_cell:
            assert header and len(header) == len(cells), line
            return dict(zip(header, cells))
    raise KeyError(f"no table row starts with {first_cell!r}")


def notes_range(cell):
    """(low, high) of a notes cell written "low..high"."""
    low, high = (float(x) for x in cell.split(".."))
    return low, high


def frontier_default_run(demo, precision):
    """Table of code 11's demo `demo` at its defaults in one forward precision (the claims
    tests of §11.4-§11.6 share one run per precision in a module fixture)."""
    results, _ = main_quietly(load_script(LECTURE09 / "11_frontier.py").main,
                              ["--demo", str(demo), "--precision", precision])
    return results[f"demo{demo}"]["table"]


def assert_deltas_in_notes_ranges(section, precision, table, n_rows, tol):
    """Each row after the first (the baseline of Δ) lies in its row's "Δ <precision>（5 组种子）"
    range of the notes, widened by tol: the notes' ranges are 5 draws, the default pair one of them."""
    rows = list(table.items())[1:]
    assert len(rows) == n_rows
    for label, (_, _, (delta, *_)) in rows:
        low, high = notes_range(notes_row(section, label)[f"Δ {precision}（5 组种子）"])
        assert low - tol <= delta <= high + tol, (precision, label, delta)


def run_script(path, *args, timeout_s=1800):
    """Run a script as a student would (python3 path args) from another folder; return stdout."""
    import subprocess
    done = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True,
                          cwd=str(ROOT.parent), timeout=timeout_s)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def assert_one_line_status_2(script, argv, words, cwd=None):
    """A script run with bad flags: exit status 2, nothing on stdout, one line on stderr
    that contains `words`."""
    import subprocess
    done = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True,
                          cwd=cwd, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and words in done.stderr, done.stderr


def main_quietly(main, argv):
    """(what main(argv) returns, what it printed): a script's main run in this process."""
    import contextlib
    import io
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        results = main(argv)
    return results, buffer.getvalue()


_SHARED_RUNS = {}
# The flags of each lecture-9 script's one quick run in a test session, when not --quick alone:
# fp32 where the golden file holds trained figures (a CPU with bf16 hardware then prints what
# one without it prints), --jobs 1 where the results are the same with any number (tested).
QUICK_ARGV = {"07_compression_beyond.py": ("--quick", "--fp32", "--jobs", "1"),
              "08_byzantine.py": ("--quick", "--fp32", "--jobs", "1"),
              "11_frontier.py": ("--quick", "--fp32")}


def shared_quick_run(script, argv=None):
    """(results, output) of main(argv) of a lecture-9 script, run once per test session and
    shared by every module that reads it (a module must not change what it gets): e.g. the
    tests of demos 5, 6 and 7 read code 4's one quick run, not three runs of their own, and
    the golden outputs compare the same run. argv: QUICK_ARGV's, or --quick alone."""
    argv = QUICK_ARGV.get(script, ("--quick",)) if argv is None else argv
    key = (script, tuple(argv))
    if key not in _SHARED_RUNS:
        module = sys.modules.get("script_" + Path(script).stem) or load_script(LECTURE09 / script)
        _SHARED_RUNS[key] = main_quietly(module.main, list(argv))
    return _SHARED_RUNS[key]


# --- Ctrl-C as a terminal sends it: SIGINT to the script's whole process group ----------

def as_from_a_terminal():
    """preexec_fn for a child started as a shell starts it: SIGINT at its default and not
    blocked, whatever this (long-running pytest) process's own SIGINT state has become."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


def start_in_own_group(path, *args, cwd=None):
    """Start a script as a student would, in its own process group (so the test can press
    Ctrl-C on the group, and find every process the script started)."""
    import subprocess
    return subprocess.Popen([sys.executable, str(path), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, cwd=cwd, preexec_fn=as_from_a_terminal)


def group_processes(pgid):
    """Process ids still alive in a process group."""
    import subprocess
    return [int(p) for p in subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True).stdout.split()]


def wait_until_group_has(proc, n_processes, timeout_s=60):
    """Wait until the script has started its own processes (n_processes in all, itself
    included), then a moment more, so Ctrl-C arrives while they run."""
    import time
    deadline = time.time() + timeout_s
    while time.time() < deadline and len(group_processes(proc.pid)) < n_processes and proc.poll() is None:
        time.sleep(0.1)
    time.sleep(0.5)                     # past the moment a launcher ignores SIGINT while it starts them


def press_ctrl_c(proc, timeout_s=60):
    """Send SIGINT to the group; return (status, stdout, stderr, processes left when the
    script has exited). No grace period: run_main stops even the stdlib's resource tracker."""
    import os
    import signal
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=timeout_s)
    return proc.returncode, out, err, group_processes(proc.pid)


def interrupt_when_ranks_run(argv, n_ranks, timeout_s=60):
    """Start a script (argv: its path and flags) in its own process group and press Ctrl-C
    once its ranks are running; return (status, stderr, processes left behind)."""
    proc = start_in_own_group(*argv)
    wait_until_group_has(proc, 1 + n_ranks, timeout_s)
    status, _, err, left = press_ctrl_c(proc, timeout_s)
    return status, err, left


def other_precision():
    """The forward precision that --precision auto does *not* pick on this machine ("bf16" or
    "fp32"): a second kernel path, the nearest thing to a student's laptop a test has."""
    from lecture01.tiny_gpt import resolve_precision
    return "bf16" if resolve_precision("auto") == "fp32" else "fp32"


# --- one fresh process per (script, argv, environment), shared by the tests that read it ------

_STUDENT_RUNS = {}
_FIGURE_DIRS = []


class StudentRun:
    """What one fresh-process run of a script gave: status, stdout and stderr (read as UTF-8,
    newlines as text=True reads them: a byte that is not UTF-8 raises UnicodeDecodeError in
    the test that reads it) and the --figures folder, or None."""

    def __init__(self, status, out_bytes, err_bytes, figures):
        self.status, self.figures = status, figures
        self._out, self._err = out_bytes, err_bytes

    @staticmethod
    def _text(raw):
        return raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")

    @property
    def stdout(self):
        return self._text(self._out)

    @property
    def stderr(self):
        return self._text(self._err)


def student_run(script, argv, code_page=None, figures=False, timeout_s=900):
    """A script run as a student runs it (python3 code/.../NN_x.py argv, a fresh process from
    the repository root, COLUMNS=100), once per test session for each (script, argv, code
    page, --figures or not) and handed to every test that asks for exactly that run: e.g. the
    sweep tier's golden comparison of a fresh process, its --figures check and its check
    under a Windows code page read one run, not three. code_page: PYTHONIOENCODING as Windows
    sets it for a redirected stdout (cp1252, cp936; test_console_encoding.py). figures: add
    --figures DIR, a folder of its own. A test must not change what it gets."""
    import os
    import subprocess
    import tempfile
    script = Path(script)
    script = script if script.is_absolute() else ROOT / script
    key = (str(script), tuple(argv), code_page, bool(figures))
    if key not in _STUDENT_RUNS:
        env = {**os.environ, "COLUMNS": "100"}
        env.pop("PYTHONUTF8", None)
        if code_page:
            env["PYTHONIOENCODING"] = code_page
        else:
            env.pop("PYTHONIOENCODING", None)
        folder = None
        if figures:
            _FIGURE_DIRS.append(tempfile.TemporaryDirectory(prefix="student_run_"))
            folder = Path(_FIGURE_DIRS[-1].name) / "figures"
        args = [*argv, *(["--figures", str(folder)] if figures else [])]
        done = subprocess.run([sys.executable, str(script.relative_to(ROOT)), *args], capture_output=True,
                              cwd=str(ROOT), timeout=timeout_s, env=env)
        _STUDENT_RUNS[key] = StudentRun(done.returncode, done.stdout, done.stderr, folder)
    return _STUDENT_RUNS[key]
