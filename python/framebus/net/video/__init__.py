"""The video room: encoded frames over a bridge, as a payload that composes with any engine's
transport. ``EncodedFrames`` (the publisher's: an encoder stage writes the packet stream
``NAME.CODEC`` that the publisher reads, and a keyframe gate per subscriber) and
``DecodedFrames`` (the subscriber's: a decoder stage turns the packets into pictures), with the
stages themselves (``EncoderStage``, ``DecoderStage``) and ``packet_stream_name``. The PyAV
encoder and decoder are those of framebus's media code.

Public names: those in ``__all__``."""

from __future__ import annotations

from .decode import DecodedFrames, DecoderStage
from .encode import EncodedFrames, EncoderStage, packet_stream_name

__all__ = ["DecodedFrames", "DecoderStage", "EncodedFrames", "EncoderStage", "packet_stream_name"]
