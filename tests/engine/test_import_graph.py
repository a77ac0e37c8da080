"""The engine's import graph: every module imports alone, nothing inside engine/ imports
in a cycle, and the layers import only downward (engine knows nothing of completion or
server, completion nothing of server).

The graph is read from the sources (ast), lazy imports inside functions included: a
cycle hidden behind a function-level import is still a cycle. Imports under
`if TYPE_CHECKING:` are left out, as they never run. The parent package a submodule
import brings with it is not an edge; an explicit import of a package is one (to its
`__init__`).
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Source folder -> the package it installs as (pyproject's package-dir).
LAYERS = {"engine": "midword.engine", "completion": "midword.completion", "server": "midword.server"}


def _modules(folder: str) -> dict[str, Path]:
    """Module name -> source file, for every module and package under a layer's folder."""
    base = LAYERS[folder]
    out = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([base, *parts])] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST):
    """Import statements that can run: all of them but those under `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules `name` (read from `path`) imports, as absolute names: `from A import b`
    counts as an import of A.b where that is a known module, else of A."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in _import_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
            continue
        if node.level:
            base = package.split(".")
            if node.level > 1:
                base = base[: -(node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module
        subs = [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in known]
        found.update(subs)
        if len(subs) < len(node.names):
            found.add(target)
    return found


@functools.cache
def _graph() -> tuple[dict[str, set[str]], dict[str, str]]:
    """Import edges of every module of the three layers, and each module's layer."""
    modules, layer_of = {}, {}
    for folder in LAYERS:
        for name, path in _modules(folder).items():
            modules[name] = path
            layer_of[name] = folder
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}, layer_of


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a list of nodes (the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_walk_sees_relative_lazy_and_package_imports(tmp_path):
    # The reader itself, on a package of its own: a cycle through a function-level
    # import is found, a TYPE_CHECKING import is not an edge, `from . import x` is x.
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import a as _a\n")
    (pkg / "a.py").write_text(
        "from .b import f\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import T\n"
    )
    (pkg / "b.py").write_text("def f():\n    from . import a\n    return a\n")
    (pkg / "c.py").write_text("from .a import f\n")
    files = {"pkg": "__init__.py", "pkg.a": "a.py", "pkg.b": "b.py", "pkg.c": "c.py"}
    edges = {name: imports_of(name, pkg / file, set(files)) for name, file in files.items()}
    assert edges == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b", "typing"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.a"}}
    assert find_cycle(edges) == ["pkg.a", "pkg.b", "pkg.a"]
    assert find_cycle({"x": {"y"}, "y": set()}) is None


def test_no_import_cycle_inside_engine():
    edges, layer_of = _graph()
    engine = {
        name: {t for t in targets if layer_of.get(t) == "engine"}
        for name, targets in edges.items()
        if layer_of[name] == "engine"
    }
    assert len(engine) > 15  # the walk found the engine's modules
    cycle = find_cycle(engine)
    assert cycle is None, "import cycle inside engine/: " + " -> ".join(cycle)


@pytest.mark.parametrize("lower, upper", [("engine", "completion"), ("engine", "server"), ("completion", "server")])
def test_layers_import_only_downward(lower, upper):
    edges, layer_of = _graph()
    upward = sorted(
        f"{name} imports {target}"
        for name, targets in edges.items()
        if layer_of[name] == lower
        for target in targets
        if target == LAYERS[upper] or target.startswith(LAYERS[upper] + ".")
    )
    assert not upward


@pytest.mark.slow
def test_every_engine_module_imports_alone():
    # Each in a fresh interpreter, so no module leans on another having been imported
    # first (an order-dependent import is how a cycle shows up at run time).
    names = sorted(_modules("engine"))
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-c", f"import {name}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for name in names
    }
    failed = {}
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=300)
        if proc.returncode:
            failed[name] = err.strip().splitlines()[-1:]
    assert not failed, failed
