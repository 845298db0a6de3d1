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
