"""Shared test setup: the lecture folders on sys.path, and a loader for numbered scripts.

Scripts are named like `05_decentralized.py`, which `import` cannot spell, so tests load
them by path. Loading a script runs nothing but its definitions (main() is guarded).
"""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LECTURE01 = ROOT / "code" / "lecture01"
LECTURE09 = ROOT / "code" / "lecture09"
for folder in (LECTURE01, LECTURE09):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


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


def notes_section(path, heading_prefix):
    """The text of a Markdown section: from the heading that starts with heading_prefix
    (e.g. "## 7") to the next heading of the same level."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    level = heading_prefix.split()[0]
    start = next(i for i, line in enumerate(lines) if line.startswith(heading_prefix))
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].startswith(level + " ")), len(lines))
    return "\n".join(lines[start:end])


def run_script(path, *args, timeout_s=1800):
    """Run a script as a student would (python3 path args) from another folder; return stdout."""
    import subprocess
    done = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True,
                          cwd=str(ROOT.parent), timeout=timeout_s)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
