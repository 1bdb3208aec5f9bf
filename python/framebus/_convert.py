"""Argument checks and conversions shared by the facade and the native module (slow paths only:
an array that already matches a stream's spec never comes here)."""

from __future__ import annotations

import math
import operator
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native
from .errors import InvalidArgumentError

ShapeLike = Union[int, Sequence[int]]


def normalize_shape(shape: ShapeLike) -> Tuple[int, ...]:
    """``shape`` as the tuple of a fixed-shape stream, checked by the core as ``create()``
    checks it (InvalidArgumentError saying what is wrong, TypeError for what is no int)."""
    return tuple(_native.check_shape(shape))


def normalize_dtype(dtype: Any) -> np.dtype:
    """``dtype`` as a NumPy dtype a stream can hold, checked by the core as ``create()`` checks
    it (InvalidArgumentError for objects, strings or records, TypeError for what is no dtype)."""
    return np.dtype(_native.check_dtype(dtype))


def as_frame(value: Any, dtype: np.dtype, shape: Tuple[int, ...], name: str) -> np.ndarray:
    """``value`` as a C-contiguous array of ``dtype`` and ``shape`` (a copy), or ValueError /
    TypeError saying what is wrong. Arrays of another dtype are converted only when NumPy's
    "same_kind" rule allows it or both are integer types (float -> int is refused) and no value
    changes beyond a float's rounding (see :func:`lossless_cast`). Raw bytes (bytes, bytearray,
    a memoryview of bytes) of exactly a frame's size are that frame's bytes."""
    if isinstance(value, np.ndarray):
        arr = value
    elif _raw_bytes(value):
        arr = _frame_from_bytes(value, dtype, shape, name)
    else:
        try:
            arr = np.asarray(value)
        except Exception as exc:  # noqa: BLE001 - any conversion failure becomes a TypeError
            raise TypeError(f"cannot convert {type(value).__name__} to an array for stream {name!r}: {exc}") from None
        if arr.dtype == object:
            raise TypeError(f"cannot write a {type(value).__name__} to stream {name!r}: it is not numeric array data")
    if arr.shape != shape:
        raise InvalidArgumentError(
            f"stream {name!r} takes frames of shape {shape}, got shape {arr.shape}; nothing was written"
        )
    if arr.dtype != dtype and not _allowed_cast(arr.dtype, dtype):
        raise InvalidArgumentError(
            f"stream {name!r} takes dtype {dtype}, got {arr.dtype}: write() converts only within a kind "
            "(integers to integers, floats to floats, integers to floats) and refuses float to int, complex to "
            f"real and numbers to bool; convert explicitly with .astype({str(dtype)!r}); nothing was written"
        )
    if arr.dtype == dtype:
        return np.ascontiguousarray(arr)
    return lossless_cast(arr, dtype, name)


def _allowed_cast(src: np.dtype, dst: np.dtype) -> bool:
    """Whether ``write()`` converts ``src`` arrays to ``dst`` (then value by value, see
    :func:`lossless_cast`): NumPy's "same_kind" rule, plus any integer type to any other
    (int64 to uint8, uint64 to int32: signed and unsigned are different kinds to NumPy, but a
    value either fits the target's range or is refused, so nothing changes silently)."""
    if src.kind in "iu" and dst.kind in "iu":
        return True
    return bool(np.can_cast(src, dst, casting="same_kind"))


def _raw_bytes(value: Any) -> bool:
    """Whether ``value`` is raw bytes (bytes, bytearray, or a memoryview of single bytes)
    rather than array data with a shape and dtype of its own."""
    if isinstance(value, (bytes, bytearray)):
        return True
    return isinstance(value, memoryview) and value.itemsize == 1 and value.format in ("B", "b", "c")


def _frame_from_bytes(value: Any, dtype: np.dtype, shape: Tuple[int, ...], name: str) -> np.ndarray:
    """Raw bytes written to a fixed-shape stream: taken as the frame's bytes (C order, the
    stream's dtype) when there are exactly as many as a frame has, else InvalidArgumentError
    that says so and points at variable-shape streams for payloads of any length."""
    view = memoryview(value)
    nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if view.nbytes != nbytes:
        raise InvalidArgumentError(
            f"stream {name!r} takes frames of shape {shape} and dtype {dtype} ({nbytes} bytes); got "
            f"{type(value).__name__} of {view.nbytes} bytes; nothing was written. Bytes are written to a "
            "fixed-shape stream only as a whole frame's raw bytes; for byte payloads of any length "
            f"create a variable-shape stream (framebus.create({name!r}, capacity=...))"
        )
    if not view.c_contiguous:
        view = memoryview(view.tobytes())
    return np.frombuffer(view.cast("B"), np.uint8).view(dtype).reshape(shape)


def _exact_ints(src: np.dtype, dst: np.dtype) -> bool:
    """Whether every value of integer type ``src`` is exactly a value of float/complex type
    ``dst`` (uint8 -> float16/32, int16 -> float32, int32 -> float64: yes; int64 -> float64,
    int32 -> float32: no)."""
    info = np.iinfo(src)
    return max(-int(info.min), int(info.max)) <= 2 ** (np.finfo(dst).nmant + 1)


def _changed_ints(arr: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Where the integers ``arr`` did not survive conversion to the floats ``out``: an inf, a
    value outside ``arr``'s range, or one that does not convert back to the same integer."""
    real = out.real if out.dtype.kind == "c" else out
    info = np.iinfo(arr.dtype)
    low, high = np.float64(info.min), np.float64(2.0 ** info.bits if info.min == 0 else 2.0 ** (info.bits - 1))
    wide = real.astype(np.float64)  # exact for float16/32/64; the bounds are powers of 2
    bad = ~np.isfinite(wide) | (wide < low) | (wide >= high)
    with np.errstate(invalid="ignore", over="ignore"):
        back = np.where(bad, 0, real).astype(arr.dtype)
    return bad | (back != arr)


def lossless_cast(arr: np.ndarray, dtype: np.dtype, name: str) -> np.ndarray:
    """``arr`` converted to ``dtype`` (a C-contiguous copy), or InvalidArgumentError naming the
    first value that would change, its index and the fix (nothing is written then):

    - float -> float: a finite number that overflows to inf (float64 1e300 into float32).
      Rounding (float64 0.1 into float32) is not refused;
    - int -> int: a value out of the target's range (it would wrap around);
    - int -> float: a value that does not convert back to the same integer: overflow to inf
      (70000 into float16) or rounding (2**40 + 1 into float32). Integer types whose every value
      is exact in the float (uint8 images into float32) are converted without a check."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.ascontiguousarray(arr, dtype=dtype)
    src, dst = arr.dtype.kind, dtype.kind
    if dst in "fc" and src in "fc":
        bad = np.isfinite(arr) & ~np.isfinite(out)
        how = "overflow to inf"
    elif dst in "iu" and src in "iu":
        info = np.iinfo(dtype)
        bad = (arr < info.min) | (arr > info.max)
        how = f"wrap around (the range is {info.min} to {info.max})"
    elif dst in "fc" and src in "iu" and not _exact_ints(arr.dtype, dtype):
        bad = _changed_ints(arr, out)
        how = f"change: overflow to inf, or rounding, as {dtype} holds integers exactly only up to 2**{np.finfo(dtype).nmant + 1}"
    else:
        return out
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        stored = out[index].item()
        raise InvalidArgumentError(
            f"stream {name!r} takes dtype {dtype}: the {arr.dtype} value {arr[index].item()!r} at index {index} "
            f"does not fit (it would be stored as {stored!r}; {int(bad.sum())} value(s) would {how}); nothing was written. "
            f"Scale or clip the data first, or convert it yourself with .astype({str(dtype)!r}) if that is what you want"
        )
    return out


def timeout_seconds(timeout: Any) -> Optional[float]:
    """A ``timeout=`` argument of the Python layer (``open``, the asyncio calls) as seconds
    (None stays None: no limit), checked as the native calls check theirs: TypeError for what is
    not a number, InvalidArgumentError naming ``timeout`` and its range for a negative or NaN
    value or an int too large for a float (never an OverflowError)."""
    if timeout is None:
        return None
    if isinstance(timeout, (bool, np.bool_)) or not isinstance(timeout, (int, float, np.integer, np.floating)):
        raise TypeError(f"timeout must be None or a number of seconds, got {timeout!r}")
    try:
        seconds = float(timeout)
    except OverflowError:
        seconds = math.nan
    if math.isnan(seconds) or seconds < 0:
        shown = repr(timeout) if len(repr(timeout)) <= 40 else f"{repr(timeout)[:20]}... ({len(repr(timeout))} digits)"
        raise InvalidArgumentError(f"timeout must be None or a number of seconds from 0 to about 1.8e308, got {shown}")
    return seconds


# -- variable-shape streams -------------------------------------------------------------------

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20, "g": 10**9, "gb": 10**9, "gib": 2**30}


def parse_capacity(capacity: Any) -> int:
    """``capacity`` (an int of bytes, or a string such as ``"32MiB"``, ``"500kB"``) as an int,
    checked by the core as ``create(capacity=)`` checks it; ValueError/TypeError saying what is
    wrong."""
    if isinstance(capacity, str):
        text = capacity.strip().lower().replace(" ", "")
        digits = text.rstrip("abgikm")
        unit = text[len(digits):]
        try:
            value = float(digits)
        except ValueError:
            value = math.nan
        if unit not in _UNITS or not math.isfinite(value):
            raise InvalidArgumentError(
                f"capacity {capacity!r} is not a size; give bytes as an int or a string such as '32MiB', '500kB', '1GiB'"
            )
        capacity = int(value * _UNITS[unit])
    elif isinstance(capacity, (bool, np.bool_)) or not isinstance(capacity, (int, np.integer)):
        raise TypeError(f"capacity must be an int of bytes or a string such as '32MiB', got {capacity!r}")
    return int(_native.check_capacity(capacity))


# The helpers below only convert a write's or a loan's Python values into arrays, dtypes and
# ints. What a frame may hold (dimensions, number types, sizes) the core checks when it lays the
# frame out, and the native module names the dtypes it refuses (TypeError).

_BYTES_LIKE = (bytes, bytearray, memoryview)


def _ints(shape: Any) -> Tuple[int, ...]:
    """``shape`` of one array of a variable-shape frame as a tuple of ints (an int or a
    sequence of ints), else TypeError; their range is checked by the core."""
    if isinstance(shape, (bool, np.bool_)):
        raise TypeError(f"shape must be an int or a sequence of ints, got {shape!r}")
    try:
        return (operator.index(shape),)
    except TypeError:
        try:
            return tuple(operator.index(d) for d in shape)
        except TypeError:
            raise TypeError(f"shape must be an int or a sequence of ints, got {shape!r}") from None


def _dtype(dtype: Any, what: str) -> np.dtype:
    """``dtype`` of one array of a frame as a NumPy dtype, else TypeError naming it."""
    try:
        return np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"{what}: {dtype!r} is not a NumPy dtype: {exc}") from None


def _byte_array(value: Any) -> np.ndarray:
    """A byte payload (bytes, bytearray, memoryview) as a 1-D uint8 array (zero-copy when
    contiguous)."""
    view = memoryview(value)
    if not view.c_contiguous:
        view = memoryview(view.tobytes())
    return np.frombuffer(view.cast("B"), np.uint8)


def _frame_array(value: Any, stream: str, what: str) -> np.ndarray:
    """``value`` as a C-contiguous array (a copy if it is not one)."""
    if not isinstance(value, np.ndarray):
        try:
            value = np.asarray(value)
        except Exception as exc:  # noqa: BLE001 - any conversion failure becomes a TypeError
            raise TypeError(f"cannot convert {what} ({type(value).__name__}) to an array for stream {stream!r}: {exc}") from None
    return value if value.flags.c_contiguous else np.array(value, order="C")


def frame_parts(value: Any, stream: str) -> Tuple[List[Tuple[str, np.ndarray, bool]], bool]:
    """What a write of ``value`` to a variable-shape stream is made of: ([(name, C-contiguous
    array, is_bytes)], written as a dict). Raises TypeError for what is no array data, bytes or
    dict of them, ValueError for an empty dict."""
    if isinstance(value, _BYTES_LIKE):
        return [("", _byte_array(value), True)], False
    if isinstance(value, Mapping):
        if not value:
            raise InvalidArgumentError(f"a frame must hold at least one array; got an empty dict for stream {stream!r}")
        parts = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"array names must be str, got {key!r} for stream {stream!r}")
            if isinstance(item, _BYTES_LIKE):
                parts.append((key, _byte_array(item), True))
            else:
                parts.append((key, _frame_array(item, stream, f"array {key!r}"), False))
        return parts, True
    return [("", _frame_array(value, stream, "the frame"), False)], False


def loan_layout(shape: Any, dtype: Any, nbytes: Any, arrays: Any) -> Tuple[List[Tuple[str, np.dtype, Tuple[int, ...], bool]], bool]:
    """What a loan of a variable-shape stream lays out, from exactly one of ``shape`` (with
    ``dtype``), ``nbytes`` or ``arrays`` ({name: (shape, dtype)}): ([(name, dtype, shape,
    is_bytes)], is a dict). ValueError/TypeError for arguments that do not fit together or are
    of the wrong type."""
    given = [label for label, v in (("shape", shape), ("nbytes", nbytes), ("arrays", arrays)) if v is not None]
    if len(given) != 1:
        raise InvalidArgumentError(
            "a loan of a variable-shape stream needs exactly one of shape= (with dtype=), nbytes= "
            f"(a byte payload) or arrays={{name: (shape, dtype)}}; got {', '.join(given) or 'none'}"
        )
    if nbytes is not None:
        if dtype is not None:
            raise InvalidArgumentError("loan(nbytes=) lays out a byte payload; leave dtype out")
        if isinstance(nbytes, (bool, np.bool_)) or not isinstance(nbytes, (int, np.integer)):
            raise TypeError(f"nbytes must be an int, got {nbytes!r}")
        return [("", np.dtype(np.uint8), (int(nbytes),), True)], False
    if shape is not None:
        if dtype is None:
            raise InvalidArgumentError("loan(shape=) needs dtype= too (for example dtype=np.uint8)")
        return [("", _dtype(dtype, "the loan"), _ints(shape), False)], False
    if dtype is not None:
        raise InvalidArgumentError("loan(arrays=) gives each array's dtype; leave dtype out")
    if not isinstance(arrays, Mapping) or not arrays:
        raise TypeError(f"arrays must be a non-empty dict of name: (shape, dtype), got {arrays!r}")
    out = []
    for name, spec in arrays.items():
        if not isinstance(name, str):
            raise TypeError(f"array names must be str, got {name!r}")
        try:
            sub_shape, sub_dtype = spec
        except (TypeError, ValueError):
            raise TypeError(f"arrays[{name!r}] must be a (shape, dtype) pair, got {spec!r}") from None
        out.append((name, _dtype(sub_dtype, f"array {name!r}"), _ints(sub_shape), False))
    return out, True
