"""Internals of ``framebus.net`` (the ZeroMQ bridge). Import the public API from ``framebus.net``.

Modules: ``errors`` (exception classes), ``protocol`` (the versioned wire format), ``codec``
(optional per-frame compression), ``status`` (the sidecar records ``framebus ls`` reads),
``sockets`` (endpoint checks, CURVE, ZeroMQ error mapping), ``base`` (the thread/lifecycle shared
by both ends), ``publisher`` and ``subscriber``. Only ``sockets``, ``base``, ``publisher`` and
``subscriber`` import pyzmq.
"""
