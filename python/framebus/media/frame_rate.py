"""The frame rate a recording is written at: what the stream's frames carry (``framebus play``
writes it into each frame's metadata, :func:`fps_meta`), else a default."""

from __future__ import annotations

import json
import math
from typing import Any, Optional

#: The rate of a recording whose frames carry none (and no --fps was given).
DEFAULT_FPS = 30.0


def fps_in_meta(meta: Any) -> Optional[float]:
    """The frame rate a frame's metadata carries: a JSON object with a positive finite number
    "fps" (what ``framebus play`` writes); None for anything else."""
    if not meta:
        return None
    try:
        value = json.loads(bytes(meta).decode("utf-8"))
    except (ValueError, UnicodeDecodeError, TypeError):
        return None
    fps = value.get("fps") if isinstance(value, dict) else None
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not (0 < fps < math.inf):
        return None
    return float(fps)


def fps_meta(fps: Optional[float]) -> Optional[bytes]:
    """The metadata ``framebus play`` writes with each frame: the video's frame rate as JSON
    ``{"fps": 25.0}`` (what :func:`fps_in_meta` reads); None for no usable rate."""
    return json.dumps({"fps": fps}).encode() if fps and 0 < fps < math.inf else None
