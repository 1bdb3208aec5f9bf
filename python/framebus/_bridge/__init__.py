"""Internals of ``framebus.net`` (the bridge). Import the public API from ``framebus.net``.

Modules: ``errors`` (exception classes), ``protocol`` (the versioned wire format), ``codec``
(optional per-frame compression), ``status`` (the sidecar records ``framebus ls`` reads),
``base`` (the thread/lifecycle shared by both ends), ``publisher`` and ``subscriber`` (the two
ends, the same for every engine), ``encode``/``decode``/``video`` (encoded video, on every
engine), and the engines: ``zmq_engine`` with ``sockets`` (endpoint checks, CURVE, ZeroMQ error
mapping) over pyzmq, ``zenoh_engine`` over eclipse-zenoh. Only ``zmq_engine`` and ``sockets``
import pyzmq, only ``zenoh_engine`` imports zenoh.
"""
