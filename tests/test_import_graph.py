"""No import circles in framebus's Python packages, counting imports inside functions (a circle
hidden behind a function-level import is still a circle: two modules that cannot be read, or
changed, one without the other).

Edges: every ``import`` / ``from ... import`` anywhere in a module (module level, functions,
methods) that names another module of the same package; importing a package's ``__init__`` from
inside the package counts too. Imports under ``if TYPE_CHECKING:`` are left out: they are never
executed, and name a type for annotations only."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = [("framebus", ROOT / "python" / "framebus"), ("framebus_bench", ROOT / "benches" / "framebus_bench")]


def modules(name: str, folder: pathlib.Path) -> dict:
    """Module name -> source path (the native module counts, as its stub)."""
    found = {}
    for path in folder.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        parts = [name, *path.relative_to(folder).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    for stub in folder.rglob("*.pyi"):
        found.setdefault(".".join([name, *stub.relative_to(folder).with_suffix("").parts]), stub)
    return found


def imported(module: str, path: pathlib.Path, known: dict, package: str) -> set:
    """The package's modules that ``module`` imports, anywhere in its source."""
    is_package = path.name == "__init__.py"
    out = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    type_only = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            type_only.update(id(n) for child in node.body for n in ast.walk(child))
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in known else prefix for a in node.names]
        for name in names:
            if name.split(".")[0] != package:
                continue
            while name not in known and "." in name:
                name = name.rsplit(".", 1)[0]
            if name in known and name != module:
                out.add(name)
    return out


def circles(graph: dict) -> list:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize("package,folder", PACKAGES, ids=[p for p, _ in PACKAGES])
def test_no_import_circles(package, folder):
    known = modules(package, folder)
    graph = {m: imported(m, p, known, package) for m, p in known.items()}
    assert circles(graph) == []


def test_the_checker_finds_a_circle_hidden_in_a_function(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import y\ndef f():\n    from .a import x\n")
    (pkg / "c.py").write_text("from . import b\n")
    known = modules("pkg", pkg)
    graph = {m: imported(m, p, known, "pkg") for m, p in known.items()}
    assert circles(graph) == [["pkg.a", "pkg.b"]]
