"""The layering ARCHITECTURE.md draws, checked against every import in code/ (imports
inside functions too): each package imports only what the table there allows, no module
imports another in a cycle, and no module loads a numbered script."""

import ast
import re
from pathlib import Path

from conftest import ROOT

import pytest

pytestmark = pytest.mark.smoke

CODE = ROOT / "code"
SCRIPT = re.compile(r"^\d\d_")


def module_files():
    """{dotted module name: path} for every module of the toolkit (scripts excluded)."""
    modules = {}
    for path in sorted(CODE.glob("lecture*/**/*.py")):
        if SCRIPT.match(path.name) or path.stem == "_course_path":   # scripts, and their bootstrap
            continue
        parts = list(path.relative_to(CODE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def imports_of(path, modules):
    """The toolkit modules a file imports (a `from package import name` that names a
    submodule counts as importing that submodule)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module not in modules:
                continue
            subs = {f"{node.module}.{alias.name}" for alias in node.names}
            found |= {s for s in subs if s in modules} or {node.module}
            if any(s not in modules for s in subs):
                found.add(node.module)
    return found


def graph():
    modules = module_files()
    return {name: imports_of(path, modules) - {name} for name, path in modules.items()}


def group(module):
    """The box of ARCHITECTURE.md a module belongs to."""
    parts = module.split(".")
    if parts[0] == "lecture01":
        return "lecture01"
    return ".".join(parts[:2])


def allowed_imports():
    """{box: boxes it may import}, read from ARCHITECTURE.md's table."""
    table = {}
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    for box, allowed in re.findall(r"^\| `([\w.]+)` \| (.+) \|$", text, re.M):
        names = re.findall(r"`([\w.]+)`", allowed)
        table[box] = {n if n.startswith("lecture0") else f"lecture09.{n}" for n in names}
    return table


def test_the_table_names_every_box_of_the_code():
    boxes = {group(m) for m in module_files()} - {"lecture09"}
    assert boxes == set(allowed_imports()), boxes ^ set(allowed_imports())


def test_every_import_follows_the_layering():
    table = allowed_imports()
    wrong = []
    for module, targets in graph().items():
        box = group(module)
        for target in targets:
            if group(target) != box and group(target) not in table.get(box, set()):
                wrong.append(f"{module} imports {target}")
    assert not wrong, wrong


def find_cycle(edges):
    """One import cycle as a list of modules, or None (depth-first search)."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(edges):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_find_cycle_finds_one_and_only_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle():
    assert find_cycle(graph()) is None


def test_no_module_loads_a_script():
    loaders = {"spec_from_file_location", "run_path", "import_module", "__import__"}
    for module, path in module_files().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", getattr(node.func, "id", ""))
                assert name not in loaders, f"{module} calls {name}"


def test_a_clone_without_the_install_finds_the_toolkit():
    """`python -S` starts without site-packages (so without the editable install): the
    scripts' one bootstrap (_course_path.py) must put code/ on the path. These scripts
    need nothing but the standard library for what is run here."""
    import subprocess
    import sys
    for script, argv in (("lecture01/01_world.py", ["--samples", "2"]),
                         ("lecture09/02_data_parallel.py", ["--help"]),
                         ("lecture09/06_swarm_http.py", ["--help"])):
        done = subprocess.run([sys.executable, "-S", str(CODE / script), *argv], capture_output=True,
                              text=True, cwd=str(ROOT.parent), timeout=60)
        assert done.returncode == 0, (script, done.stderr[-1500:])
        assert done.stdout.strip(), script


DATA_FILES = {"fm_world.py"}     # the toy world: mostly its tables of names, places and relations
MAX_LINES = 420                  # "about 400": a file a student reads in one sitting


def test_no_lecture9_file_is_over_about_400_lines():
    """Lecture 9's scripts are thin: their tables and observations live beside the modules
    they describe. (Lecture 1's tiny_gpt.py and 02_train_base.py are ~460 lines.)"""
    long = {str(p.relative_to(CODE)): n for p in CODE.glob("lecture09/**/*.py")
            if p.name not in DATA_FILES and (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, long
