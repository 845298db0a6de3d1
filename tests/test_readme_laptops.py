"""The README for a student on Windows or macOS (issue 43, items 2, 3 and 9): PowerShell
commands that Windows PowerShell 5.1 can run, the venv usable under the default execution
policy, a true sentence about bf16 on Apple silicon, and a run-time table whose cells are a
line each."""

import re

import pytest

from conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")

pytestmark = pytest.mark.smoke


def code_lines():
    """The README's indented command lines (four spaces, outside tables)."""
    return [line[4:] for line in README.splitlines() if line.startswith("    ") and line.strip()]


def test_powershell_lines_have_no_and_and_and_call_the_venv_python():
    powershell = [line for line in code_lines() if line.startswith((".venv\\", "py "))]
    assert len(powershell) >= 5, powershell
    assert not [line for line in powershell if "&&" in line]         # a syntax error in PowerShell 5.1
    assert ".venv\\Scripts\\python -m pytest" in powershell
    assert ".venv\\Scripts\\python code\\lecture09\\05_decentralized.py" in powershell
    assert "Set-ExecutionPolicy -Scope Process" in README            # or activation is blocked


def test_the_macos_sentence_gives_the_reason_the_code_has():
    """fp32 on every Mac because auto checks for x86's AVX512-BF16 or AMX only, not because
    Apple silicon has no bf16 (M2 and later have BF16 instructions)."""
    import inspect
    from lecture01 import tiny_gpt
    assert "neither has\nbf16 in hardware" not in README and "M2 and later" in README
    source = inspect.getsource(tiny_gpt.cpu_has_native_bf16)
    assert "avx512_bf16" in source and "amx" in source and "arm" not in source.lower()
    assert "cpu_has_native_bf16" in README


def test_each_run_time_cell_is_a_line():
    rows = [line for line in README.splitlines() if line.startswith("| `code/")]
    frontier = next(r for r in rows if "11_frontier.py" in r)
    assert len(frontier) <= 800, len(frontier)
    assert len(rows) == 13
    for row in rows:
        cell = [c.strip() for c in row.strip().strip("|").split("|")][3]
        assert len(cell) <= 250, (row[:40], len(cell))       # code 11's was 367 (and its row 3,016)
        assert re.match(r"~?\d", cell), cell
