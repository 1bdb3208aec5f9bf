"""Bridges: a stream on one machine, read on another, over ZeroMQ (pyzmq) or Eclipse Zenoh.

>>> pub = framebus.net.publish("camera", "tcp://*:5555")            # on the camera box  # doctest: +SKIP
>>> sub = framebus.net.subscribe("tcp://camera-box:5555", "camera")  # on the other machine  # doctest: +SKIP
>>> framebus.open("camera").read_new(timeout=1)                     # local readers as usual  # doctest: +SKIP

(Skipped as a doctest: it needs two machines and a running producer.)

``publish`` follows a local stream and sends each frame, zero-copy from its slot (the slot stays
pinned until ZeroMQ has sent it). ``subscribe`` writes the frames into a local stream it creates
from the publisher's spec, keeping each frame's sequence number, timestamp, frame_id and
metadata (numbers are shifted only when the local stream is already past them, e.g. after the
source was replaced: ``Subscriber.seq_offset``). Both run on a background thread and
return an object with ``stop()``, ``join()``, ``stats``, ``error`` that is also a context
manager; ``framebus bridge publish|subscribe`` runs them from the command line.

Modes (chosen by the publisher): ``"latest"`` (bounded queues, the newest frame wins, drops are
counted on both ends) and ``"lossless"`` (backpressure from the slowest subscriber to the local
writer; nothing is dropped). See docs/bridges.md for the guarantees, security (CURVE) and figures.

Plain TCP is neither encrypted nor authenticated: use it only on a trusted network, or give both
ends CURVE certificates (``framebus bridge keys``).

Importing this module needs neither engine's package: pyzmq is imported when a ZeroMQ bridge
starts (``framebus[net]``), eclipse-zenoh when a Zenoh one does (``framebus[zenoh]``).

This module is the door of the package; behind it, one room per concern, each a subpackage
whose ``__init__`` lists its public names: ``link`` (lifecycle, status records, the local
stream rule, the commands' stop/watch helpers), ``wire`` (framebus's bridge protocol,
compression, heap tuning, errors), ``engine`` (the transport contract and the one registry of
engines), ``zmq`` and ``zenoh`` (the two engines), ``ends`` (the publisher and subscriber, one
class each) and ``video`` (encoded frames as a payload). See docs/design.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Tuple

from .ends import LinkOptions, PublishOptions, Publisher, SubscribeOptions, Subscriber
from .engine import registry
from .link import Bridge, BridgeStats, bridges
from .wire import BridgeError, EndpointError, EndpointInUseError, PeerTimeoutError, ProtocolError, SpecMismatchError
from .zenoh import ZenohLink
from .zmq import ZmqPublishOptions, ZmqSubscribeOptions

__all__ = [
    "Bridge",
    "BridgeError",
    "BridgeStats",
    "EndpointError",
    "EndpointInUseError",
    "LinkOptions",
    "PeerTimeoutError",
    "ProtocolError",
    "PublishOptions",
    "Publisher",
    "SpecMismatchError",
    "SubscribeOptions",
    "Subscriber",
    "ZenohLink",
    "ZmqPublishOptions",
    "ZmqSubscribeOptions",
    "bridges",
    "create_certificates",
    "publish",
    "subscribe",
]


def publish(stream_name: str, endpoint: str, options: Optional[PublishOptions] = None, *, engine: Optional[str] = None, **fields: Any) -> Publisher:
    """Starts publishing the local stream ``stream_name`` on ``endpoint`` (bound here:
    ``"tcp://*:5555"``, ``"tcp://127.0.0.1:*"`` for any free port, ``"ipc:///run/cam.sock"``) and
    returns the running :class:`Publisher` (``.endpoint`` is the address actually bound).
    The options are the fields of :class:`PublishOptions`, given as keywords, as an options
    object, or both (keywords replace its fields); an unknown one is a TypeError naming them all.

    ``mode``: ``"latest"`` (a subscriber that falls behind gets the newest frame next; frames it
    missed are counted in ``stats.dropped``) or ``"lossless"`` (the source's writer is held back
    to the slowest subscriber; frames written while no subscriber is connected wait in the
    source stream, and frames in flight when a subscriber dies are sent again when it comes
    back). ``hwm``: frames in flight per subscriber (its credit window; in lossless mode at most
    the source's slots - 1, as those frames stay pinned until acknowledged). ``compress``:
    ``None`` or ``"zstd"`` / ``"zstd:LEVEL"`` (needs ``framebus[zstd]``). Frames smaller than
    ``copy_threshold`` bytes are copied into the message; larger ones are sent zero-copy from the
    slot. ``heartbeat_ivl`` / ``peer_timeout`` (seconds): how often an idle link is checked and
    when a silent subscriber is forgotten. ``curve_certificate``: this end's secret certificate
    file (CURVE encryption); ``curve_location``: a directory of the public certificates of the
    subscribers allowed to connect (without it any subscriber that has the publisher's public
    key may). ``status``: keep a record for ``framebus ls``.

    ``encode``: ``"h264"``, ``"hevc"``, ``"av1"`` or ``"mjpeg"`` encodes the stream (uint8
    images of shape (h, w) or (h, w, 3), even sizes) with low-latency settings and
    sends one packet per picture; ``bitrate`` (bits/s, or a string such as ``"8M"``; default
    8M), ``gop`` (frames between keyframes, default 30) and ``encoder`` (``"auto"``: the first
    hardware encoder that works here, else software; or an FFmpeg encoder name such as
    ``"libx264"``) tune it. These codecs have no alpha plane: an (h, w, 4) stream is a
    ValueError unless ``drop_alpha=True``, which sends its first three channels (the
    subscriber's stream is then (h, w, 3)). The packets go through the packet stream ``NAME.CODEC`` (created
    and removed by the publisher); each subscriber starts with a keyframe, forced for it when
    it joins (at most one forced every 0.25 s), and one that misses a packet is sent nothing
    until the next keyframe. Works the same on both engines. Needs PyAV (``framebus[video]``);
    see docs/video.md.

    The end of the source stream (its writer's ``end()``, or the writer closing its handle)
    does not stop the publisher: it sends END to every subscriber after the last frame
    (``source_ended`` is then True) and bridges the frames of a restarted producer as before.

    Raises StreamNotFoundError (FileNotFoundError) if the stream does not exist,
    EndpointError (ValueError) for a malformed endpoint, EndpointInUseError (OSError) if it is
    taken, ValueError/TypeError for bad arguments, ImportError if ``compress`` needs a missing
    package. Errors after start-up stop the bridge and are raised by ``join()``/``stop()``.

    ``engine="zenoh"`` (needs ``framebus[zenoh]``) carries the same protocol over Eclipse Zenoh:
    ``endpoint`` is then a Zenoh key such as ``"framebus/camera"``, and the keywords
    ``listen``/``connect`` (Zenoh endpoints such as ``"tcp/0.0.0.0:7447"``), ``scouting``
    (multicast on/off), ``zenoh_mode`` (``"peer"``/``"client"``) and ``zenoh_config`` (a Zenoh
    configuration file) say how to join the Zenoh network (see docs/zenoh.md).

    Engine options: the keywords of one engine (``copy_threshold``, ``curve_certificate``,
    ``curve_location`` for ZeroMQ: :class:`ZmqPublishOptions`; those of :class:`ZenohLink` for
    Zenoh) go to that engine's options (``options.engine_options``); one of the other engine
    is a ValueError naming it. ``engine`` None: the engine of ``engine_options`` if given, else
    ZeroMQ.
    """
    opts, transport = _resolve("publish", PublishOptions, options, engine, fields)
    pub = Publisher(stream_name, endpoint, opts, transport=transport)
    pub._start()
    return pub


def subscribe(endpoint: str, local_name: str, options: Optional[SubscribeOptions] = None, *, engine: Optional[str] = None, **fields: Any) -> Subscriber:
    """Connects to the publisher at ``endpoint`` and starts writing its frames into the local
    stream ``local_name``; returns the running :class:`Subscriber`. The options are the fields
    of :class:`SubscribeOptions` (keywords, an options object, or both, as for ``publish``).

    The local stream is created with the publisher's dtype, shape, metadata capacity and slot
    count (``slots`` overrides the latter), re-created when the publisher's spec changes (local
    readers reopen it), and removed on ``stop()`` unless ``keep=True`` or it was not created by
    this bridge. An existing stream of the same spec is written into; one left by a subscriber
that was killed (readers still attached) is taken over as it is, decoded video included, so
its readers go on getting frames after a restart. Each frame is copied once,
    from ZeroMQ's receive buffer into its slot. When the publisher's source is ended, the local
    stream is ended too (``Stream.end()``; ``source_ended`` is then True): local readers get
    every frame, then StreamEndedError; the next frame that arrives starts it again.

    From an encoded publisher (``encode=``) the packets are decoded into ``local_name``, an
    ordinary stream of the publisher's picture shape (uint8), created at the first keyframe,
    with each frame's timestamp, frame_id and metadata; the packets pass through the local
    packet stream ``local_name.CODEC``. Decoding starts at a keyframe and skips to the next one
    after a missed packet (counted in ``stats.dropped``), so no picture is decoded from missing
    data. ``packets=True`` keeps the packets in ``local_name`` instead (a byte stream for
    ``framebus record`` or another bridge).

    ``mode``: None takes the publisher's; "latest"/"lossless" insist on it. ``hwm``: frames in
    flight this end accepts. ``shape``/``dtype``: what the frames must be (SpecMismatchError
    otherwise). ``timeout``: seconds to wait for the publisher's first answer (None: return at
    once and keep trying). ``heartbeat_ivl`` / ``peer_timeout``: after ``peer_timeout`` s of
    silence the publisher is taken as gone and HELLO is repeated until it (or a restarted one)
    answers. ``identity``: how the publisher knows this subscriber across reconnects (default
    ``b"HOST/local_name"``). ``curve_server_certificate``: the publisher's public certificate
    file (turns CURVE on); ``curve_certificate``: this end's secret certificate file (needed when
    the publisher authenticates subscribers). ``tune_malloc``: raise glibc's mmap and trim
    thresholds (process-wide, only ever upwards) so that ZeroMQ's receive buffers for large
    frames stay in the heap and are reused, instead of being given back to the kernel and
    faulted in again: at 1080p that saves about 40 % of the receiving side's CPU. It is skipped where the environment already tunes malloc
    (``GLIBC_TUNABLES``, ``MALLOC_*_``), on other C libraries and for frames above 32 MiB;
    ``sub.heap_reserved`` says whether it applies.

    Raises EndpointError (ValueError) for a malformed endpoint or a host that does not resolve,
    PeerTimeoutError (TimeoutError) when no publisher answers within ``timeout``,
    SpecMismatchError (ValueError) for a mode/shape/dtype other than required or a local stream
    of another spec owned by another process, ProtocolError for a peer that is not a framebus
    bridge of this protocol version. Later errors stop the bridge and are raised by
    ``join()``/``stop()``.

    ``engine="zenoh"``: ``endpoint`` is the publisher's Zenoh key; the Zenoh keywords are those
    of ``publish``. Engine options as for ``publish`` (ZeroMQ's: ``curve_certificate``,
    ``curve_server_certificate``, :class:`ZmqSubscribeOptions`).
    """
    opts, transport = _resolve("subscribe", SubscribeOptions, options, engine, fields)
    sub = Subscriber(endpoint, local_name, opts, transport=transport)
    sub._start()
    return sub


def create_certificates(directory: Any, name: str) -> Tuple[str, str]:
    """Writes a new CURVE key pair for the ZeroMQ engine as ``NAME.key`` (public: give it to
    the other side) and ``NAME.key_secret`` (keep it private, mode 0600) in ``directory``
    (created if needed). Returns the two paths. ImportError without pyzmq."""
    try:
        from .zmq.sockets import create_certificates as create
    except ImportError:
        raise ImportError("CURVE certificates need pyzmq: pip install 'framebus[net]'") from None
    return create(directory, name)


def _resolve(end: str, kind: Any, options: Any, engine: Optional[str], fields: Any) -> Tuple[Any, Any]:
    """The options object of ``kind`` for ``end`` (``options`` with the engine-independent
    keywords of ``fields`` set, and ``engine_options`` with the engine's) and the chosen
    engine's transport for it."""
    if options is not None and not isinstance(options, kind):
        raise TypeError(f"options must be a framebus.net.{kind.__name__}, got {type(options).__name__}")
    fields = dict(fields)
    given = fields.pop("engine_options", None if options is None else options.engine_options)
    common = tuple(f.name for f in dataclasses.fields(kind) if f.name != "engine_options")
    chosen, rest, engine_options = registry.split(end, engine, given, fields, common)
    opts = _options(kind, options, {**rest, "engine_options": engine_options})
    return opts, chosen.transport(end, opts.engine_options)


def _options(kind: Any, options: Any, fields: Any) -> Any:
    """``options`` (a ``kind``) with ``fields`` replaced, or a ``kind`` of ``fields``; a field
    the kind does not have is a TypeError naming it."""
    if options is not None and not isinstance(options, kind):
        raise TypeError(f"options must be a framebus.net.{kind.__name__}, got {type(options).__name__}")
    try:
        return dataclasses.replace(options, **fields) if options is not None else kind(**fields)
    except TypeError as exc:
        known = ", ".join(f.name for f in dataclasses.fields(kind))
        raise TypeError(f"{exc}; the options are: {known}") from None
