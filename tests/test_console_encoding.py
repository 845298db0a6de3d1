"""Every script writes UTF-8 whatever the console's code page (issue 43, item 2).

Windows gives a redirected stdout (`python script.py > out.txt`, `| more`, a test's pipe) the
ANSI code page: cp1252 cannot encode 汉字, cp936 (GBK) cannot encode '✓' or '█'. Python reads
PYTHONIOENCODING for the same choice, so these tests are Windows' redirect on this machine:
each script's cheapest run (the smoke set's argv where it has one) under both code pages must
exit 0 and write stdout and stderr that decode as UTF-8, Chinese included. Under cp936 a script
is checked on the fresh-process quick run the sweep tier makes of it anyway (shared_run): a
superset of the cheapest run's output, run once for three tests. Without
console.utf8_output() the first Chinese line stops a script with UnicodeEncodeError.
"""

import os
import subprocess
import sys

import pytest

from conftest import LECTURE01, ROOT, SWEEP_TIER
from test_smoke import CHEAPEST, SCRIPTS

# The scripts the smoke set leaves to other tests (None there): their cheapest run here.
CHEAP_TOO = {
    "02_data_parallel.py": ["--demo", "1", "--quick"],
    "07_compression_beyond.py": ["--steps", "1", "--diloco-h", "1", "--diloco-compressed-h", "1",
                                 "--powersgd-ranks", "1", "--jobs", "1"],
    "08_byzantine.py": ["--steps", "1", "--warm-steps", "1", "--aggregators", "mean", "--attacks", "none",
                        "--compressed-aggregators", "mean", "--jobs", "1"],
    "09_torchft.py": ["--quick"],
    "10_hivemind.py": ["--quick"],
}


def cheapest(name):
    return CHEAPEST[name] or CHEAP_TOO[name]


def run_under(encoding, script, argv, timeout_s=300):
    env = {**os.environ, "PYTHONIOENCODING": encoding, "COLUMNS": "100"}
    env.pop("PYTHONUTF8", None)
    done = subprocess.run([sys.executable, str(script), *argv], capture_output=True, cwd=str(ROOT.parent),
                          timeout=timeout_s, env=env)
    out, err = done.stdout.decode("utf-8"), done.stderr.decode("utf-8")   # UnicodeDecodeError: not UTF-8
    return done.returncode, out, err


def engine_available(name):
    import importlib.util
    module = {"09_torchft.py": "torchft", "10_hivemind.py": "hivemind"}.get(name)
    return module is None or importlib.util.find_spec(module) is not None


def cases():
    for script in SCRIPTS:
        for encoding in ("cp1252", "cp936"):
            # cp1252 on the smoke set's cheapest runs is test_smoke.py's own run (it costs nothing
            # more); the rest, the engines' quick runs among them, is the sweep tier's
            if encoding == "cp1252" and CHEAPEST[script.name]:
                continue
            yield pytest.param(encoding, script, marks=SWEEP_TIER, id=f"{encoding}-{script.name}")


def shared_run(encoding, script):
    """(status, stdout, stderr) under cp936 of the fresh-process run another sweep test makes
    of the script anyway (conftest.student_run runs it once): its golden comparison's run
    (test_golden_outputs.fresh_run), or else its `--quick --figures DIR` (test_figures.py).
    A quick run writes all the cheapest run writes and more. None: no such run."""
    from test_figures import QUICK_FILES, quick_run_with_figures
    from test_golden_outputs import FRESH_CODE_PAGE, GOLDENS, fresh_run
    golden = next((g for g in GOLDENS if ROOT / g.script == script), None)
    if encoding == FRESH_CODE_PAGE and golden is not None:
        done = fresh_run(golden)
    elif encoding == "cp936" and script.parent.name == "lecture09" and script.name in QUICK_FILES:
        done = quick_run_with_figures(script.name)
    else:
        return None
    return done.status, done.stdout, done.stderr


@pytest.mark.parametrize("encoding,script", list(cases()))
def test_cheapest_run_writes_utf8_under_a_windows_code_page(encoding, script):
    if not engine_available(script.name):
        pytest.skip(f"{script.name} needs an engine this machine lacks")
    status, out, err = shared_run(encoding, script) or run_under(encoding, script, cheapest(script.name))
    assert status == 0, err[-2000:]
    assert any("\u4e00" <= ch <= "\u9fff" for ch in out), out[:300]
    assert "\\u" not in out and "\\x" not in err, err[-500:]


@pytest.mark.smoke
@pytest.mark.parametrize("encoding", ["cp1252", "cp936"])
def test_help_and_a_refusal_write_utf8_under_a_windows_code_page(encoding):
    """--help (Chinese on stdout) and a refusal (Chinese on stderr) of a lecture-1 script."""
    script = LECTURE01 / "02_train_base.py"
    status, out, _ = run_under(encoding, script, ["--help"])
    assert status == 0 and "训练步数" in out
    status, out, err = run_under(encoding, script, ["--steps", "0"])
    assert status == 2 and out == "" and "需要整数" in err and err.count("\n") == 1, err


def test_utf8_output_reconfigures_only_what_needs_it(monkeypatch):
    import io
    from lecture01.console import utf8_output
    raw_out, raw_err = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(raw_out, encoding="cp1252")
    err = io.TextIOWrapper(raw_err, encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.delenv("PYTHONIOENCODING", raising=False)
    utf8_output()
    assert out.encoding == "utf-8" and err.encoding == "utf-8"
    assert os.environ["PYTHONIOENCODING"] == "utf-8"           # the processes a script starts, too
    print("✓ 汉字", file=out)
    out.flush()
    assert raw_out.getvalue().decode("utf-8") == "✓ 汉字\n"
    monkeypatch.setattr(sys, "stdout", io.StringIO())          # a test's capture: left as it is
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.delenv("PYTHONIOENCODING")
    utf8_output()
    assert "PYTHONIOENCODING" not in os.environ
