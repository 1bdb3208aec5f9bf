"""One validator: the core decides what a stream may hold (dimensions, dtypes, frame size,
capacity, the size= cross-check) and the native constructor raises the errors, with clear
messages; the Python layer re-declares none of the core's limits and checks nothing before it."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import framebus
from framebus import _native
from framebus.errors import InvalidArgumentError

PACKAGE = os.path.dirname(os.path.abspath(framebus.__file__))

#: The most bytes a frame may have (the core's bound, exported as _native.MAX_FRAME_BYTES).
BOUND = (2**63 - 1) // 128

#: (create() keywords, exception, words of the message)
REFUSED = [
    (dict(shape=()), InvalidArgumentError, "shape must have 1 to 8 dimensions, got ()"),
    (dict(shape=(1,) * 9), InvalidArgumentError, "shape must have 1 to 8 dimensions, got (1, 1, 1, 1, 1, 1, 1, 1, 1)"),
    (dict(shape=(0, 3)), InvalidArgumentError, "shape dimensions must be positive, got (0, 3)"),
    (dict(shape=(2, -1)), InvalidArgumentError, "shape dimensions must be positive, got (2, -1)"),
    (dict(shape=(2**64,)), InvalidArgumentError, f"has 18446744073709551616 elements; a frame may have at most {BOUND} bytes"),
    (dict(shape=(2**200,)), InvalidArgumentError, "has at least 2**127 elements"),
    (dict(shape=(2**27, 2**27), dtype=np.float64), InvalidArgumentError, f"dtype float64 would have {2**57} bytes; a frame may have at most"),
    (dict(shape="ab"), TypeError, "shape must be an int or a sequence of ints, got 'ab'"),
    (dict(shape=(2.5,)), TypeError, "shape must be an int or a sequence of ints"),
    (dict(shape=True), TypeError, "shape must be an int or a sequence of ints, got True"),
    (dict(shape=(2,), dtype=object), InvalidArgumentError, 'unsupported dtype "|O": streams hold bool, integer, float or complex elements'),
    (dict(shape=(2,), dtype="U4"), InvalidArgumentError, "unsupported dtype"),
    (dict(shape=(2,), dtype=[("a", "f4")]), InvalidArgumentError, "unsupported dtype"),
    (dict(shape=(2,), dtype="nonsense"), TypeError, "dtype 'nonsense' is not a NumPy dtype"),
    (dict(shape=(2, 3), size=25), InvalidArgumentError, "size=25 does not match shape (2, 3) and dtype float32 (24 bytes)"),
    (dict(shape=(2,), size="8"), TypeError, "size must be an int"),
    (dict(capacity=0), InvalidArgumentError, "capacity must be a positive number of bytes, got 0"),
    (dict(capacity=-5), InvalidArgumentError, "capacity must be a positive number of bytes, got -5"),
    (dict(capacity=2**70), InvalidArgumentError, "is larger than a frame may be"),
    (dict(capacity=16, shape=(2,)), InvalidArgumentError, "give either shape= or capacity=, not both"),
    (dict(capacity=16, size=16), InvalidArgumentError, "takes no size"),
    (dict(), TypeError, "needs shape= (every frame has that shape and dtype) or capacity="),
]


@pytest.mark.parametrize("kwargs, exc, words", REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_the_native_constructor_refuses_what_create_refuses(name, kwargs, exc, words):
    """The checks live below Python: the native constructor, called directly, raises the same
    error as framebus.create(), and neither leaves a segment behind."""
    native = dict(kwargs)
    if "dtype" not in native and "capacity" not in native:
        native["dtype"] = np.float32  # create()'s default
    with pytest.raises(exc) as direct:
        _native.Stream(name, create=True, **native)
    with pytest.raises(exc) as through_create:
        framebus.create(name, **kwargs)
    assert words in str(direct.value) and str(through_create.value) == str(direct.value)
    assert not os.path.exists(f"/dev/shm/framebus.{name}")


def test_the_check_functions_normalise_as_create_does(name):
    assert _native.check_shape(5) == (5,) and _native.check_shape([np.int64(2), 3]) == (2, 3)
    assert _native.check_dtype(np.float32) == np.dtype(np.float32).str and _native.check_dtype(">u2") == ">u2"
    assert _native.check_dtype(None) == np.dtype(None).str  # NumPy's default, as np.dtype(None)
    assert _native.check_capacity(np.int64(4096)) == 4096
    with pytest.raises(InvalidArgumentError, match="unsupported dtype"):
        _native.check_dtype("M8[ns]")
    with framebus.create(name, shape=_native.check_shape((3, 2)), dtype=_native.check_dtype("u1")) as s:
        assert s.shape == (3, 2) and s.dtype == np.uint8
        s.unlink()


def test_the_core_exports_its_frame_bound():
    assert _native.MAX_FRAME_BYTES == BOUND
    assert _native.check_shape(_native.MAX_FRAME_BYTES) == (_native.MAX_FRAME_BYTES,)
    with pytest.raises(InvalidArgumentError, match="a frame may have at most"):
        _native.check_shape(_native.MAX_FRAME_BYTES + 1)


def test_python_declares_none_of_the_cores_limits():
    """No module of the package (the pyshmem compat layer aside: it reproduces pyshmem's own
    checks and messages) spells the core's frame bound, its dimension limit or its dtype kinds."""
    patterns = {
        "the frame bound": re.compile(r"2\s*\*\*\s*63\s*-\s*1\)\s*//\s*128|MAX_FRAME_BYTES\s*="),
        "the dimension limit": re.compile(r"MAX_NDIM\s*=|<=\s*len\(\w+\)\s*<=\s*8|len\(\w+\)\s*>\s*8\b"),
        "the dtype kinds": re.compile(r"[\"']biufc[\"']"),
    }
    found = []
    for folder, _dirs, files in os.walk(PACKAGE):
        if os.path.basename(folder) == "pyshmem":
            continue
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
                found += [f"{os.path.relpath(path, PACKAGE)}: {what}" for what, p in patterns.items() if p.search(text)]
    assert not found, found


def test_variable_frames_are_checked_by_the_core(name):
    """A write or a loan of a variable-shape stream: the core refuses too many dimensions, the
    native module a dtype no frame holds (TypeError), and a dimension outside an int's range."""
    with framebus.create(name, capacity=4096) as w:
        with pytest.raises(InvalidArgumentError, match="9 dimensions; at most 8"):
            w.write(np.zeros((1,) * 9, np.uint8))
        with pytest.raises(InvalidArgumentError, match="9 dimensions; at most 8"):
            w.loan(shape=(1,) * 9, dtype=np.uint8)
        with pytest.raises(TypeError, match="the frame has dtype <U1; frames hold bool, integer, float or complex"):
            w.write(np.array(["x"]))
        with pytest.raises(TypeError, match="array 'a'|array \"a\""):
            w.loan(arrays={"a": ((2,), object)})
        with pytest.raises(InvalidArgumentError, match="from 0 to 2\\*\\*64-1, got -1"):
            w.loan(shape=(-1,), dtype=np.uint8)
        with pytest.raises(InvalidArgumentError, match="nbytes must be an int from 0 to 2\\*\\*64-1"):
            w.loan(nbytes=-1)
        w.unlink()
