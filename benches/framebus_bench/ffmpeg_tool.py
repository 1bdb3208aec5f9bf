"""Finding FFmpeg for the benchmarks, and its version (for the records of a run)."""

from __future__ import annotations

import functools
import shutil
import subprocess
from typing import Optional


@functools.lru_cache(maxsize=1)
def find_ffmpeg() -> Optional[str]:
    """FFmpeg's path: framebus.ffmpeg's finder when present, imageio-ffmpeg's bundled binary,
    else ``ffmpeg`` on PATH; None when there is none."""
    try:
        from framebus.ffmpeg import find_ffmpeg as fb_find  # type: ignore[import-not-found]

        return str(fb_find())
    except Exception:  # noqa: BLE001 - not in this framebus, or no FFmpeg found by it
        pass
    try:
        import imageio_ffmpeg

        return str(imageio_ffmpeg.get_ffmpeg_exe())
    except Exception:  # noqa: BLE001 - not installed or no binary for this platform
        pass
    return shutil.which("ffmpeg")


@functools.lru_cache(maxsize=1)
def ffmpeg_version() -> Optional[str]:
    """The version word of ``ffmpeg -version`` (None without FFmpeg)."""
    ff = find_ffmpeg()
    if not ff:
        return None
    try:
        out = subprocess.run([ff, "-hide_banner", "-version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    parts = out.split()
    return parts[2] if len(parts) > 2 else None
