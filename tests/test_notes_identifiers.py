"""Every identifier the notes cite in backticks exists: a toolkit module's attribute
(`tiny_gpt.plain_backward`), a function, class, field, argument or test of ours
(`get_batch`, `test_train_base_is_deterministic`), or a PyTorch or Python name the notes
point students to (`no_sync`, `powerSGD_hook`, `max`). A renamed function makes this fail
until the notes follow."""

import ast
import builtins
import re
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

import pytest

pytestmark = pytest.mark.smoke

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "code").glob("lecture*/**/*.py")) + sorted((ROOT / "tests").glob("*.py"))
NOTES = sorted((ROOT / "lectures").rglob("*.md"))
# A backticked code span that names something: `name`, `module.name` or `name(args)`.
CITED = re.compile(r"`([A-Za-z_][\w.]*)(\([^`]*\))?`")
TORCH_NAMESPACES = (torch, dist, torch.nn.Module, torch.Tensor, DistributedDataParallel, default_hooks,
                    powerSGD_hook, builtins)


def top_level_names(tree):
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def all_names(tree):
    """Functions, classes, arguments, assigned names and attributes, keywords: any name a
    note may mean when it writes `block_size` or `backward(model, x, y)`."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
            names |= {a.arg for a in node.args.args + node.args.kwonlyargs}
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"[a-z_]+", node.value):
            names.add(node.value)          # dictionary keys and field names written as strings
    return names


def index_sources():
    modules, everything = {}, set()
    for path in SOURCES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules[path.stem] = top_level_names(tree)
        everything |= all_names(tree)
    return modules, everything | set(modules)


def missing_identifiers(text, modules, everything):
    missing = []
    for match in CITED.finditer(text):
        ident, call = match.group(1), match.group(2)
        parts = ident.split(".")
        if parts[0] in modules and len(parts) >= 2 and parts[1] != "py":
            if parts[1] not in modules[parts[0]]:
                missing.append(ident)
        elif len(parts) == 1 and ("_" in ident or call):
            if ident not in everything and not any(hasattr(ns, ident) for ns in TORCH_NAMESPACES):
                missing.append(ident)
    return missing


def test_every_identifier_the_notes_cite_exists():
    modules, everything = index_sources()
    assert {"tiny_gpt", "dist_sim", "compression"} <= set(modules)
    missing = {notes.name: missing_identifiers(notes.read_text(encoding="utf-8"), modules, everything)
               for notes in NOTES}
    assert all(not names for names in missing.values()), missing


def test_the_check_catches_a_renamed_function():
    modules, everything = index_sources()
    text = "用 `tiny_gpt.default_backward` 和 `no_such_helper_9(x)`，以及存在的 `tiny_gpt.plain_backward`。"
    assert missing_identifiers(text, modules, everything) == ["tiny_gpt.default_backward", "no_such_helper_9"]
