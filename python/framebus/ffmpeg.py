"""FFmpeg video I/O on top of ``framebus.pipe``: :class:`VideoWriter` encodes NumPy frames
(written to FFmpeg's stdin by the native background writer, without copies) and
:class:`VideoReader` decodes a video into NumPy frames or into a framebus stream.

>>> import numpy as np
>>> from framebus.ffmpeg import VideoWriter, VideoReader
>>> with VideoWriter("/tmp/doc.mp4", (64, 48), fps=10) as w:         # doctest: +SKIP
...     for i in range(10):
...         w.write(np.full((48, 64, 3), i * 20, np.uint8))
>>> [f.shape for f in VideoReader("/tmp/doc.mp4")][:1]                # doctest: +SKIP
[(48, 64, 3)]

FFmpeg is found in this order: the ``ffmpeg=`` argument, the ``FRAMEBUS_FFMPEG`` environment
variable, the binary that the ``imageio-ffmpeg`` package ships, ``ffmpeg`` on PATH.

This module is the public name of ``framebus.media.ffmpeg``, where the code lives (the media
package also holds the in-process PyAV codec and ``framebus record`` / ``play``).
"""

from __future__ import annotations

from .media.ffmpeg import DETACHED, PIX_FMTS, STDERR_LINES, VideoReader, VideoWriter, find_ffmpeg, frame_layout, probe

__all__ = ["VideoWriter", "VideoReader", "find_ffmpeg", "probe", "frame_layout", "PIX_FMTS", "DETACHED", "STDERR_LINES"]
