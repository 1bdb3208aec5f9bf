"""framebus decides on codes, never on the words of a message: an exception's text, a bridge
refusal's reason or a stream's problem are for people. A scan of python/framebus finds every
test of a string against such a text (``"..." in str(exc)``, ``"..." in reason``,
``msg.startswith(...)``, ``re.search(..., text)``) and fails on any that the short allowlist
below does not name and justify; the decisions that used to read text read codes now (a bridge
refusal's code, a stream's problem_kind), and the tests below check each against a text that
says the opposite."""

from __future__ import annotations

import ast
import os
import re
from types import SimpleNamespace
from typing import Iterator, List, Tuple

import pytest

import framebus
from framebus import _native

PACKAGE = os.path.dirname(os.path.abspath(framebus.__file__))

#: Names whose value is a message for people (an exception, its text, a reason, a problem).
TEXT_NAMES = re.compile(r"(?:^|_)(reason|msg|message|text|err|error|exc|exception|problem|detail|details|stderr|stdout|output|why|errmsg|strerror)$", re.I)
#: Names of a caught exception, whose str() is its message.
EXCEPTION_NAMES = {"e", "ex", "exc", "err", "error", "exception"}

#: (file, the test as ast.unparse writes it): why reading text is the only way there. Keep short.
ALLOWED = {
    # zenoh.ZError carries only a message (no errno or code) for an endpoint already in use.
    ("net/zenoh/link.py", "'in use' in text.lower()"): "Zenoh's ZError has no code for an address in use",
}


def _is_text(node: ast.AST) -> bool:
    """Whether ``node`` is a message for people: a name or attribute such as ``reason`` or
    ``exc.problem``, ``str(exc)``, or such a value lower-cased or stripped."""
    if isinstance(node, ast.Name):
        return bool(TEXT_NAMES.search(node.id))
    if isinstance(node, ast.Attribute):
        return bool(TEXT_NAMES.search(node.attr))
    if isinstance(node, ast.Subscript):  # exc.args[0]
        return isinstance(node.value, ast.Attribute) and node.value.attr == "args"
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("str", "repr", "format") and node.args:
            arg = node.args[0]
            return _is_text(arg) or (isinstance(arg, ast.Name) and arg.id in EXCEPTION_NAMES) or (isinstance(arg, ast.Attribute) and arg.attr == "args")
        if isinstance(func, ast.Attribute) and func.attr in ("lower", "upper", "casefold", "strip", "decode"):
            return _is_text(func.value)
    return False


def _text_tests(tree: ast.AST) -> Iterator[ast.AST]:
    """Every expression of ``tree`` that tests a string against a message."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            if isinstance(node.left, ast.Constant) and isinstance(node.left.value, str) and any(_is_text(c) for c in node.comparators):
                yield node
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Call) and _is_text(s) for s in sides) and any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides):
                yield node
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func = node.func
            if func.attr in ("startswith", "endswith", "find", "count", "index") and _is_text(func.value):
                yield node
            elif func.attr in ("search", "match", "fullmatch", "findall") and isinstance(func.value, ast.Name) and func.value.id == "re":
                if len(node.args) > 1 and _is_text(node.args[1]):
                    yield node


def text_decisions(root: str = PACKAGE) -> List[Tuple[str, int, str]]:
    """(file relative to ``root``, line, the test) of every decision on message text."""
    found = []
    for folder, _dirs, files in os.walk(root):
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                with open(path, encoding="utf-8") as fh:
                    tree = ast.parse(fh.read(), path)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                found += [(rel, node.lineno, ast.unparse(node)) for node in _text_tests(tree)]
    return found


def test_no_decision_is_taken_on_message_text():
    found = text_decisions()
    unexpected = [f"{path}:{line}: {expr}" for path, line, expr in found if (path, expr) not in ALLOWED]
    assert not unexpected, "decisions on message text (decide on a code or a field instead, or justify it in ALLOWED):\n" + "\n".join(unexpected)
    # Every allowlist entry still exists: an entry whose line is gone is removed from the list.
    stale = set(ALLOWED) - {(path, expr) for path, _line, expr in found}
    assert not stale, f"allowlisted but gone: {sorted(stale)}"


@pytest.mark.parametrize(
    "source",
    [
        "if 'mode' in reason:\n    pass",
        "x = SpecMismatchError if 'mode' in str(exc) else ProtocolError",
        "ok = [i for i in infos if 'not initialised yet' in i.problem]",
        "if msg.startswith('stream'):\n    pass",
        "if re.search('gc', text):\n    pass",
        "if str(e) == 'boom':\n    pass",
        "if 'x' not in err.lower():\n    pass",
    ],
)
def test_the_scan_finds_each_form(source):
    assert len(list(_text_tests(ast.parse(source)))) == 1, source


@pytest.mark.parametrize("source", ["if 'x' in head.lower():\n    pass", "if exc.reason == 'empty':\n    pass", "if str(dtype) != 'uint8':\n    pass", "ok = 'a' in names"])
def test_the_scan_leaves_codes_and_other_strings_alone(source):
    assert list(_text_tests(ast.parse(source))) == [], source


# -- bridge refusals carry a code -------------------------------------------------------------


def _refused(code: int, reason: str) -> BaseException:
    """What the subscriber raises for a REFUSE with ``code`` and ``reason``."""
    from framebus.net.wire import protocol as P
    from framebus.net.ends import Subscriber

    part = SimpleNamespace(buffer=P.pack_refuse(reason, code))
    with pytest.raises(Exception) as info:
        Subscriber._handle(SimpleNamespace(endpoint="tcp://peer:1"), [part])  # type: ignore[arg-type]
    return info.value


def test_a_refusal_is_classified_by_its_code_not_its_words():
    from framebus.net.wire import protocol as P
    from framebus.net import ProtocolError, SpecMismatchError

    mode = _refused(P.REFUSE_MODE, "the publisher will not serve you")
    assert isinstance(mode, SpecMismatchError) and "will not serve you" in str(mode)
    other = _refused(P.REFUSE_VERSION, "the publisher runs in latest mode")  # the word "mode" decides nothing
    assert isinstance(other, ProtocolError) and not isinstance(other, SpecMismatchError)
    assert type(_refused(P.REFUSE_UNSPECIFIED, "... latest mode ...")) is ProtocolError  # a publisher from before the codes


def test_a_refusal_keeps_its_format_and_carries_its_code_in_the_flags():
    from framebus.net.wire import protocol as P

    msg = P.pack_refuse("why", P.REFUSE_MODE)
    assert P.peek(msg) == (P.VERSION, P.REFUSE, P.REFUSE_MODE)
    assert msg[P.PREFIX.size:] == b"why"  # the body is the reason, as in every version
    assert P.unpack_refuse(msg) == (P.REFUSE_MODE, "why")
    old = P.PREFIX.pack(P.MAGIC, P.VERSION, P.REFUSE, 0) + b"old peer"
    assert P.unpack_refuse(old) == (P.REFUSE_UNSPECIFIED, "old peer")
    unknown = P.PREFIX.pack(P.MAGIC, P.VERSION, P.REFUSE, 99) + b"newer peer"
    assert P.unpack_refuse(unknown) == (P.REFUSE_UNSPECIFIED, "newer peer")


# -- a stream's problem carries a kind --------------------------------------------------------


def test_problem_kind_says_why_a_segment_cannot_be_read(name):
    from framebus._native import PROBLEM_KINDS
    from framebus.info import SHM_DIR, PREFIX

    assert PROBLEM_KINDS == ["not_ready", "incompatible", "corrupt", "other"]
    path = os.path.join(SHM_DIR, PREFIX + name)
    with framebus.create(name, shape=(2,)) as s:
        info = framebus.stat(name)
        assert info.problem is None and info.problem_kind is None
        s.unlink()
    open(path, "wb").close()  # a segment its creator has not sized yet
    try:
        info = framebus.stat(name)
        assert info.problem_kind == "not_ready" and "not initialised" in (info.problem or "")
        (entry,) = [i for i in framebus.list_streams() if i.name == name]
        assert entry.problem_kind == "not_ready"
        with open(path, "wb") as f:
            f.write(b"NOTMAGIC" * 1024)
        assert framebus.stat(name).problem_kind == "corrupt"
    finally:
        os.unlink(path)


def test_ls_and_gc_decide_on_the_problem_kind_not_its_words():
    from framebus.commands import gc, ls

    record = {"writer": "unreadable", "creator_pid": 0}
    young = ls._problem({**record, "problem": "stream x is odd", "problem_kind": "not_ready"})
    assert young.endswith(f"(once it is {gc.CREATION_GRACE_S:g} s old)")
    damaged = "stream x is corrupt; run `framebus gc`, not initialised yet"
    assert ls._problem({**record, "problem": damaged, "problem_kind": "corrupt"}) == damaged
    infos = [
        SimpleNamespace(problem="words", problem_kind="not_ready", creator_pid=0, stale=False),
        SimpleNamespace(problem="stream x is not initialised yet", problem_kind="corrupt", creator_pid=0, stale=False),
    ]
    assert gc.being_created(infos) == infos[:1]


def test_ls_json_has_the_problem_kind(name):
    import json

    from framebus.commands import ls

    with framebus.create(name, shape=(2,)):
        (row,) = [r for r in ls.records() if r["name"] == name]
        assert row["problem"] is None and row["problem_kind"] is None
        json.dumps(row)


def test_every_problem_kind_a_command_decides_on_is_one_the_core_gives():
    codes = set()
    for folder, _dirs, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                with open(os.path.join(folder, f), encoding="utf-8") as fh:
                    codes |= set(re.findall(r"problem_kind\"?\]? == \"(\w+)\"", fh.read()))
    assert codes and codes <= set(_native.PROBLEM_KINDS), codes
