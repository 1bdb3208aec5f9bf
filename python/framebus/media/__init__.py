"""Video and images in and out of frames: the one place framebus encodes, decodes and remuxes.

- ``codec``: the in-process PyAV codec (FFmpeg's libraries; ``pip install 'framebus[video]'``)
  of encoded bridges: settings, the packet header, encoder choice, picture encoder/decoder and
  the keyframe gate.
- ``image``: JPEG/PNG still images decoded in process by PyAV (ROS 2 CompressedImage).
- ``ffmpeg``: FFmpeg as a subprocess fed through ``framebus.pipe`` (``pip install
  'framebus[ffmpeg]'`` or ffmpeg on PATH): VideoWriter, VideoReader, probe, find_ffmpeg. Its
  public name is ``framebus.ffmpeg``.
- ``record`` / ``play`` / ``remux`` / ``frame_rate``: what ``framebus record`` and ``framebus
  play`` do (the command modules hold only their arguments).

PyAV and FFmpeg stay optional: importing this package needs neither; a call that needs one
raises ImportError / FileNotFoundError naming the pip extra.
"""

from __future__ import annotations

from .codec import CODECS, KeyframeGate, PacketHeader, PictureDecoder, PictureEncoder, VideoSettings, available_encoders, parse_bitrate, pick_encoder
from .ffmpeg import PIX_FMTS, VideoReader, VideoWriter, find_ffmpeg, frame_layout, probe
from .frame_rate import DEFAULT_FPS, fps_in_meta, fps_meta
from .image import decode_still

__all__ = [
    "CODECS", "DEFAULT_FPS", "KeyframeGate", "PIX_FMTS", "PacketHeader", "PictureDecoder", "PictureEncoder", "VideoReader",
    "VideoSettings", "VideoWriter", "available_encoders", "decode_still", "find_ffmpeg", "fps_in_meta", "fps_meta",
    "frame_layout", "parse_bitrate", "pick_encoder", "probe",
]
