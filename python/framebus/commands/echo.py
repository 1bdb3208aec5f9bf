"""``framebus echo NAME``: one frame of a stream, like ``ros2 topic echo``: its header
(sequence, frame id, time and age, metadata) and what it holds: one array (shape, dtype and a
short summary), several named arrays (the same for each), or a byte payload (its length, codec
and first bytes). A packet of an encoded bridge's packet stream (``NAME.CODEC``) is printed with
its header decoded (codec, keyframe, picture size, encoder run and packet number); ``meta`` is
then the source frame's own metadata, after that header. It views the newest frame (zero-copy, pinned only while it prints) as a
latest-mode handle tagged "monitor"; ``--new`` waits for the next frame instead; ``--count``
prints several. ``--json`` prints strict JSON for every dtype (complex numbers as [re, im],
NaN and infinities as the strings "nan", "inf", "-inf")."""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any, Dict, List, Optional

HELP = "print a frame's header (seq, id, time, age, meta) and its arrays (shape, dtype, summary) or bytes"

#: Values shown per array, bytes shown of a byte payload.
FIRST = 8
HEAD = 16


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ._args import positive_float, positive_int, stream_name

    p.add_argument("name", type=stream_name, help="stream to look at")
    p.add_argument("--new", action="store_true", help="wait for the next frame instead of showing the newest")
    p.add_argument("--count", type=positive_int, default=1, metavar="K", help="frames to print (default 1; more implies --new after the first)")
    p.add_argument("--timeout", type=positive_float, default=10.0, metavar="S", help="how long to wait for a frame (default 10 s)")
    p.add_argument("--json", action="store_true", help="one JSON object per frame")
    from ._wait import add_wait_argument

    add_wait_argument(p)


def json_value(v: Any) -> Any:
    """A NumPy or Python scalar as a value ``json.dumps(allow_nan=False)`` accepts: complex as
    [re, im], NaN and infinities as "nan"/"inf"/"-inf", bools and ints as they are."""
    if isinstance(v, complex):
        return [json_value(v.real), json_value(v.imag)]
    if isinstance(v, float):
        return v if math.isfinite(v) else ("nan" if v != v else ("inf" if v > 0 else "-inf"))
    if isinstance(v, (bool, int, str)) or v is None:
        return v
    return json_value(v.item()) if hasattr(v, "item") else str(v)


def payload(data: Any, codec: Any) -> Dict[str, Any]:
    """A byte payload: its length, codec and first bytes in hex."""
    head = bytes(memoryview(data)[:HEAD])
    return {"kind": "bytes", "length": len(memoryview(data)), "codec": codec, "head": head.hex(" ")}


def packet(frame: Any) -> Optional[Dict[str, Any]]:
    """The header an encoded bridge puts at the start of a packet's metadata, decoded:
    ``codec``, ``keyframe``, ``width``, ``height``, ``channels``, ``session`` (the encoder run)
    and ``index`` (the packet's number in that run, from 0); None for a frame without one."""
    from ..media.codec import unpack_header

    h = unpack_header(frame.meta) if frame.meta else None
    if h is None:
        return None
    return {"codec": frame.codec, "keyframe": h.key, "width": h.width, "height": h.height, "channels": h.channels, "session": h.session, "index": h.index}


def summary(arr: Any) -> Dict[str, Any]:
    """One array: shape, dtype, min/max/mean of real numbers, the first values."""
    import numpy as np

    out: Dict[str, Any] = {"kind": "array", "shape": list(arr.shape), "dtype": str(arr.dtype)}
    if arr.size and arr.dtype.kind in "biuf":
        with np.errstate(all="ignore"):
            out.update(min=json_value(float(arr.min())), max=json_value(float(arr.max())), mean=json_value(float(arr.mean(dtype=np.float64))))
    out["first"] = [json_value(v) for v in arr.reshape(-1)[:FIRST]]
    return out


def describe(frame: Any) -> Dict[str, Any]:
    """What echo prints of one frame: the header, then ``kind`` "array" (with the array's
    fields at the top level), "bytes" (``length``, ``codec``, ``head``, and ``packet``: the
    decoded header of an encoded bridge's packet, see :func:`packet`, or None) or "arrays" (a
    list of ``{"name", ...}`` entries, one per named array, each an array or bytes)."""
    import numpy as np

    from ..media.codec import HEADER_BYTES
    from .._native import DeviceFrame

    meta = frame.meta
    header = None if isinstance(frame, DeviceFrame) or not frame.is_bytes else packet(frame)
    if header is not None:
        meta = meta[HEADER_BYTES:]  # what follows is the source frame's own metadata
    out: Dict[str, Any] = {
        "seq": frame.seq,
        "frame_id": frame.frame_id,
        "timestamp": frame.timestamp,
        "age_ms": (time.time() - frame.timestamp) * 1e3,
        "meta": meta.decode("utf-8", "replace") if meta else "",
    }
    if isinstance(frame, DeviceFrame):
        out.update(summary(frame.to_numpy()), device=frame.device)
    elif frame.names is not None:
        flagged = set(frame.byte_names)
        arrays: List[Dict[str, Any]] = []
        for name, arr in frame.arrays.items():
            arrays.append({"name": name, **(payload(arr, None) if name in flagged else summary(arr))})
        out.update(kind="arrays", shape=None, dtype=None, arrays=arrays)
    elif frame.is_bytes:
        out.update(payload(frame.array, frame.codec), packet=header)
    else:
        out.update(summary(np.asarray(frame.array)))
    return out


def _num(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _line(d: Dict[str, Any]) -> str:
    """One array or byte payload in a line."""
    if d["kind"] == "bytes":
        return f"bytes: {d['length']}" + (f" (codec {d['codec']})" if d["codec"] else "") + f"  head: {d['head'] or '-'}"
    text = f"shape: {tuple(d['shape'])}  dtype: {d['dtype']}"
    if "mean" in d:
        text += "".join(f"  {k}: {_num(d[k])}" for k in ("min", "max", "mean"))
    return text + f"  first: {d['first']}"


def text(d: Dict[str, Any]) -> str:
    """The frame as echo prints it without --json."""
    lines = [f"seq: {d['seq']}", f"frame_id: {d['frame_id']}", f"timestamp: {d['timestamp']:.6f} (age {d['age_ms']:.1f} ms)", f"meta: {d['meta']!r}"]
    p = d.get("packet")
    if p:
        lines.append(
            f"packet: {p['codec']} {'keyframe' if p['keyframe'] else 'delta frame'}, {p['width']}x{p['height']}x{p['channels']}, "
            f"encoder run {p['session']}, packet {p['index']}"
        )
    if d["kind"] == "arrays":
        lines.append(f"arrays: {len(d['arrays'])}")
        lines += [f"  {a['name']}: {_line(a)}" for a in d["arrays"]]
    else:
        lines.append(_line(d))
    return "\n".join(lines) + "\n---"


def run(args: argparse.Namespace) -> int:
    """Prints the frames; an ended stream (its writer called end() or closed) is a normal end:
    "stream NAME ended" and exit status 0, as ``framebus hz`` does."""
    import framebus

    from ._wait import wait_for_stream

    wait_for_stream(args.name, args.wait)
    s = framebus.open(args.name)
    s.set_role("monitor", "echo")
    try:
        for i in range(args.count):
            try:
                frame = s.wait_view(args.timeout) if (args.new or i > 0) else s.view(args.timeout)
            except framebus.StreamEndedError:
                print(f"stream {args.name!r} ended")
                return 0
            with frame:
                d = describe(frame)
            print(json.dumps(d, allow_nan=False) if args.json else text(d))
    finally:
        s.close()
    return 0
