"""Optional per-frame compression: Zstandard through the ``zstandard`` package (the
``framebus[zstd]`` extra). Off by default; a frame is compressed on the publisher and
decompressed straight into the subscriber's slot (no intermediate buffer)."""

from __future__ import annotations

from typing import Any, Optional, Tuple

from ...errors import InvalidArgumentError

#: Level used by ``compress="zstd"``: fast enough for LAN rates, still about halves video-like frames.
DEFAULT_LEVEL = 1


def parse(compress: Any) -> Optional[Tuple[str, int]]:
    """``compress=`` as ("zstd", level) or None. Accepts None/False, "zstd", "zstd:LEVEL" and
    ("zstd", LEVEL); anything else is an InvalidArgumentError. Raises ImportError with the
    install command when the zstandard package is missing."""
    if compress is None or compress is False:
        return None
    if isinstance(compress, str):
        algo, _, level_s = compress.partition(":")
        try:
            level = int(level_s) if level_s else DEFAULT_LEVEL
        except ValueError:
            raise InvalidArgumentError(f"compress={compress!r}: the level after ':' must be an integer") from None
    elif isinstance(compress, tuple) and len(compress) == 2:
        algo, level = compress
    else:
        raise InvalidArgumentError(f"compress must be None, 'zstd', 'zstd:LEVEL' or ('zstd', LEVEL), got {compress!r}")
    if algo != "zstd":
        raise InvalidArgumentError(f"unknown compression {algo!r}: the bridge supports 'zstd' (install framebus[zstd])")
    if isinstance(level, bool) or not isinstance(level, int) or not -7 <= level <= 22:
        raise InvalidArgumentError(f"zstd level must be an integer from -7 (fastest) to 22, got {level!r}")
    _module()
    return ("zstd", level)


def _module() -> Any:
    try:
        import zstandard
    except ImportError:
        raise ImportError("compress='zstd' needs the zstandard package: pip install 'framebus[zstd]'") from None
    return zstandard


class Compressor:
    """Compresses frames (one context, reused; not thread-safe)."""

    def __init__(self, level: int) -> None:
        self._ctx = _module().ZstdCompressor(level=level, write_content_size=True)

    def compress(self, data: Any) -> bytes:
        """A compressed copy of ``data`` (any C-contiguous buffer)."""
        return self._ctx.compress(data)


class Decompressor:
    """Decompresses frames into a caller's buffer (one context, reused; not thread-safe)."""

    def __init__(self) -> None:
        self._ctx = _module().ZstdDecompressor()

    def decompress_into(self, data: Any, out: memoryview) -> None:
        """Decompresses ``data`` into ``out`` (a writable byte memoryview of exactly the frame's
        size). Raises ValueError if the data is corrupt or does not fill ``out`` exactly."""
        size = len(out)
        try:
            reader = self._ctx.stream_reader(data, read_size=max(len(data), 1))
            got = 0
            while got < size:
                n = reader.readinto(out[got:])
                if n == 0:
                    break
                got += n
            extra = reader.read(1)
        except Exception as exc:  # noqa: BLE001 - zstandard raises its own ZstdError
            raise ValueError(f"corrupt compressed frame: {exc}") from None
        if got != size or extra:
            raise ValueError(f"compressed frame decodes to {'more' if extra else got} bytes, expected {size}")
