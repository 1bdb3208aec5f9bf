"""Argument checks and conversions shared by the facade and the native module (slow paths only:
an array that already matches a stream's spec never comes here)."""

from __future__ import annotations

import operator
from typing import Any, Sequence, Tuple, Union

import numpy as np

from .errors import InvalidArgumentError

ShapeLike = Union[int, Sequence[int]]

#: dtype kinds a stream can hold: bool, signed/unsigned integers, floats, complex.
_KINDS = "biufc"

#: The most bytes a frame may have (the core's bound, ``isize::MAX / 128``), so also the most
#: elements a shape may have; every dimension then fits the core's 64-bit integers.
MAX_FRAME_BYTES = (2**63 - 1) // 128


def normalize_shape(shape: ShapeLike) -> Tuple[int, ...]:
    """``shape`` as a tuple of positive ints (1 to 8 dimensions, at most ``MAX_FRAME_BYTES``
    elements in all)."""
    if isinstance(shape, (bool, np.bool_)):
        raise TypeError(f"shape must be an int or a sequence of ints, got {shape!r}")
    dims: Tuple[int, ...]
    try:
        dims = (operator.index(shape),)  # type: ignore[arg-type]
    except TypeError:
        try:
            dims = tuple(operator.index(d) for d in shape)  # type: ignore[union-attr]
        except TypeError:
            raise TypeError(f"shape must be an int or a sequence of ints, got {shape!r}") from None
    if not 1 <= len(dims) <= 8:
        raise InvalidArgumentError(f"shape must have 1 to 8 dimensions, got {dims}")
    if any(d <= 0 for d in dims):
        raise InvalidArgumentError(f"shape dimensions must be positive, got {dims}")
    elements = 1
    for d in dims:
        elements *= d
    if elements > MAX_FRAME_BYTES:
        raise InvalidArgumentError(
            f"shape {dims} has {elements} elements; a frame may have at most {MAX_FRAME_BYTES} bytes"
        )
    return dims


def normalize_dtype(dtype: Any) -> np.dtype:
    """``dtype`` as a NumPy dtype a stream can hold (numbers and bools, no objects/records)."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"dtype {dtype!r} is not a NumPy dtype: {exc}") from None
    if dt.kind not in _KINDS or dt.fields is not None or dt.subdtype is not None:
        raise InvalidArgumentError(
            f"unsupported dtype {dt!r}: streams hold bool, integer, float or complex elements"
        )
    return dt


def as_frame(value: Any, dtype: np.dtype, shape: Tuple[int, ...], name: str) -> np.ndarray:
    """``value`` as a C-contiguous array of ``dtype`` and ``shape`` (a copy), or ValueError /
    TypeError saying what is wrong. Arrays of another dtype are converted only when NumPy's
    "same_kind" rule allows it (float64 -> float32 yes, float -> int no)."""
    if isinstance(value, np.ndarray):
        arr = value
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
    if arr.dtype != dtype and not np.can_cast(arr.dtype, dtype, casting="same_kind"):
        raise InvalidArgumentError(
            f"stream {name!r} takes dtype {dtype}, got {arr.dtype} (not a same-kind cast); "
            f"convert explicitly with .astype({str(dtype)!r}); nothing was written"
        )
    if arr.dtype == dtype:
        return np.ascontiguousarray(arr)
    return lossless_cast(arr, dtype, name)


def lossless_cast(arr: np.ndarray, dtype: np.dtype, name: str) -> np.ndarray:
    """``arr`` converted to ``dtype`` (a C-contiguous copy), or InvalidArgumentError when the
    conversion would change a value beyond rounding: a finite number that overflows to inf, or
    an integer that does not fit. Rounding (float64 -> float32) is not a lost value."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.ascontiguousarray(arr, dtype=dtype)
    if dtype.kind in "fc" and arr.dtype.kind in "fc":
        bad = np.isfinite(arr) & ~np.isfinite(out)
    elif dtype.kind in "iu" and arr.dtype.kind in "iu":
        info = np.iinfo(dtype)
        bad = (arr < info.min) | (arr > info.max)
    else:
        return out
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        how = "overflow to inf" if dtype.kind in "fc" else f"wrap around (the range is {np.iinfo(dtype).min} to {np.iinfo(dtype).max})"
        raise InvalidArgumentError(
            f"stream {name!r} takes dtype {dtype}: the {arr.dtype} value {arr[index].item()!r} at index {index} "
            f"does not fit ({int(bad.sum())} value(s) would {how}); nothing was written. "
            f"Scale or clip the data first, or convert it yourself with .astype({str(dtype)!r}) if that is what you want"
        )
    return out
