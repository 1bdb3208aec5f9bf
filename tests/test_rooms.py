"""Walls between framebus's Python packages and between the rooms of ``framebus.net``, read from
the source (imports anywhere in a module count, function-level ones included).

- A name with a leading underscore is private to its module: no other module imports it.
- A module or package with a leading underscore is private to the package it sits in: only
  modules inside that package import it.
- ``framebus.net`` is a door in front of rooms (``framebus.net.link``, ``.wire``, ``.engine``,
  ``.zmq``, ``.zenoh``, ``.ends``, ``.video``). From outside a room, what is imported from the
  room's package is a name in its ``__all__`` or one of its (public) modules.
- Engines are chosen by name in one place, ``framebus.net.engine.registry``: no other module
  compares a value with an engine's name (``== "zenoh"``, ``in ("zmq", "zenoh")``) or keys a
  dict by one.
- A received stream is created or taken over by one function, ``framebus.net.link.local_stream``:
  no other module of ``framebus.net`` or ``framebus.ros2`` creates a stream, except the video
  encoder, which creates its own packet stream.
"""

from __future__ import annotations

import ast
import pathlib
from typing import Dict, Iterator, List, Tuple

ROOT = pathlib.Path(__file__).resolve().parent.parent / "python" / "framebus"

#: (importing module, imported module, name): why it may cross the wall. Keep short.
ALLOWED = {
    ("framebus._device_stream", "framebus._stream", "_ReadOnlyStream"): "the core's device stream is a read-only core stream",
    ("framebus.cli", "framebus.commands._signals", ""): "the command runner sets up the signal handling its commands share",
}

#: The engines' names (as registered in framebus.net.engine.registry).
ENGINE_NAMES = {"zmq", "zenoh"}
REGISTRY = "framebus.net.engine.registry"
#: Modules that create a stream of their own (not a received one).
CREATES_OWN = {"framebus.net.video.encode": "the encoder's packet stream", "framebus.net.link.local": "the one rule"}


def modules(root: pathlib.Path) -> Dict[str, pathlib.Path]:
    """Module name -> source path, for the package at ``root`` (named after its folder)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    for stub in root.rglob("*.pyi"):
        found.setdefault(".".join([root.name, *stub.relative_to(root).with_suffix("").parts]), stub)
    return found


def imports(module: str, path: pathlib.Path) -> Iterator[Tuple[int, str, List[str]]]:
    """(line, imported module, names imported from it; [] for ``import x.y``) for every
    import of the module's source, wherever it is."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name, []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield node.lineno, target, [a.name for a in node.names]


def public_names(path: pathlib.Path) -> set:
    """The names in a package's ``__all__``."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return {ast.literal_eval(e) for e in node.value.elts}  # type: ignore[attr-defined]
    return set()


def room_of(module: str, package: str) -> str:
    """The room of a module of ``PACKAGE.net`` (``PACKAGE.net.link`` ...), else ''."""
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[:2] == [package, "net"] and len(parts) > 2 else ""


def wall_crossings(root: pathlib.Path) -> List[str]:
    """Every import that goes through a wall (see the module's docstring)."""
    package = root.name
    known = modules(root)
    out = []
    for module, path in known.items():
        for line, target, names in imports(module, path):
            if not target.split(".")[0] == package:
                continue
            where = f"{path.relative_to(root.parent)}:{line}"
            imported = [f"{target}.{n}" if f"{target}.{n}" in known else None for n in names] or [target]
            # private modules: only from inside their parent package
            for full in [target, *[m for m in imported if m]]:
                parts = full.split(".")
                for i, part in enumerate(parts[1:], 1):
                    parent = ".".join(parts[:i])
                    inside = module == parent or module.startswith(parent + ".")
                    if part.startswith("_") and not part.startswith("__") and not inside and (module, full, "") not in ALLOWED:
                        out.append(f"{where}: {module} imports {full}, private to {parent}")
                        break
            for name, full in zip(names, imported):
                if full is not None:
                    continue  # a module, checked above
                # private names: only from their own module
                if name.startswith("_") and not name.startswith("__") and target != module and (module, target, name) not in ALLOWED:
                    out.append(f"{where}: {module} imports {name}, private to {target}")
                # a room's package: only the names it lists
                room = room_of(target, package)
                if room and target == room and room_of(module, package) != room and name != "*":
                    if name not in public_names(known[room]):
                        out.append(f"{where}: {module} imports {name} from {room}, which does not list it in __all__")
    return sorted(set(out))


def engine_name_tests(root: pathlib.Path) -> List[str]:
    """Comparisons with an engine's name, and dicts keyed by one, outside the registry."""
    out = []
    for module, path in modules(root).items():
        if module == REGISTRY.replace("framebus", root.name, 1) or path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            consts: List[ast.AST] = []
            if isinstance(node, ast.Compare):
                for side in [node.left, *node.comparators]:
                    consts.extend(side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side])
            elif isinstance(node, ast.Dict):
                consts.extend(k for k in node.keys if k is not None)
            if any(isinstance(c, ast.Constant) and c.value in ENGINE_NAMES for c in consts):
                out.append(f"{path.relative_to(root.parent)}:{node.lineno}: {ast.unparse(node)[:80]}")
    return out


def stream_creations(root: pathlib.Path) -> List[str]:
    """Calls of ``*.create(...)`` on the stream module in PACKAGE.net and PACKAGE.ros2, outside
    the modules that create a stream of their own."""
    out = []
    for module, path in modules(root).items():
        rel = module.split(".")[1:2]
        if rel not in (["net"], ["ros2"]) or module.replace(root.name, "framebus", 1) in CREATES_OWN or path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            f = node.func if isinstance(node, ast.Call) else None
            if isinstance(f, ast.Attribute) and f.attr == "create" and isinstance(f.value, ast.Name) and f.value.id == "_stream":
                out.append(f"{path.relative_to(root.parent)}:{node.lineno}: {ast.unparse(node)[:80]}")
    return out


def test_no_import_goes_through_a_wall():
    assert wall_crossings(ROOT) == []


def test_engines_are_named_in_the_registry_only():
    assert (ROOT / "net" / "engine" / "registry.py").is_file()
    assert engine_name_tests(ROOT) == []


def test_received_streams_are_made_by_the_one_rule():
    assert stream_creations(ROOT) == []


def _package(tmp_path: pathlib.Path, files: Dict[str, str]) -> pathlib.Path:
    root = tmp_path / "pkg"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checkers_find_what_the_old_layout_did(tmp_path):
    """The patterns of the layout before the rooms: ros2 taking a private class and private
    modules of the bridge, a command taking another command's private helpers, engines chosen
    by comparing strings in several places, a ROS end creating its own local stream."""
    root = _package(tmp_path, {
        "__init__.py": "",
        "_stream.py": "",
        "_bridge/__init__.py": "",
        "_bridge/zenoh_engine.py": "class _Inbox: ...\nclass ZenohLink: ...\n",
        "net/__init__.py": "def publish(engine):\n    if engine == 'zenoh':\n        pass\n",
        "net/zenoh/__init__.py": "from .link import ZenohLink\n__all__ = ['ZenohLink']\n",
        "net/zenoh/link.py": "class ZenohLink: ...\nclass Hidden: ...\n",
        "ros2/__init__.py": "",
        "ros2/node.py": (
            "from .._bridge.zenoh_engine import _Inbox, ZenohLink\nfrom ..net.zenoh import Hidden\nfrom ..net.zenoh.link import ZenohLink as L\n"
            "from .. import _stream\ndef f():\n    return _stream.create('x')\n"
        ),
        "commands/__init__.py": "",
        "commands/bridge.py": "def _stop(): ...\nENGINES = {'zmq': 1}\n",
        "commands/ros2.py": "def run(args):\n    from .bridge import _stop\n    return args.engine in ('zmq', 'zenoh')\n",
    })
    crossings = wall_crossings(root)
    assert any("ros2.node imports _Inbox, private to pkg._bridge.zenoh_engine" in c for c in crossings), crossings
    assert any("imports Hidden from pkg.net.zenoh, which does not list it" in c for c in crossings), crossings
    assert any("commands.ros2 imports _stop, private to pkg.commands.bridge" in c for c in crossings), crossings
    assert not any("ZenohLink" in c or "pkg._stream" in c for c in crossings), crossings  # public names; the core's own private module
    assert len(engine_name_tests(root)) == 3
    assert len(stream_creations(root)) == 1
