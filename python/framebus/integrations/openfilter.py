"""OpenFilter pipelines whose raw images travel through framebus streams.

Switch it on with one line in the script that launches the pipeline (before ``Filter.run_multi``
or ``Filter.run``)::

    import framebus.integrations.openfilter as fb_openfilter
    fb_openfilter.enable()

or with ``FRAMEBUS_OPENFILTER=1`` in the environment of every filter process (the framebus wheel
installs a start-up hook that reads it). Filters do not change.

What changes underneath (see docs/openfilter.md):

- A sender writes each topic's raw image into a framebus stream of its own (a variable-shape
  stream, so a topic may change resolution or dtype) and sends OpenFilter's usual ZeroMQ message
  with the stream's name and the frame's sequence number in place of the pixels. Control, flow,
  topics and the frame's ``data`` stay on ZeroMQ.
- A receiver pins exactly that frame (:meth:`framebus.Stream.view_seq`) and hands the filter a
  read-only zero-copy view. A filter that keeps the frame keeps the pin: the slot is never
  rewritten under it. The sender keeps each frame it names pinned until every synchronized
  client has received a later message (and for at least its last ``FRAMEBUS_OPENFILTER_HOLD``
  messages). Should a frame still be gone (a listen-only client far behind), the receiver logs
  it and drops the whole message; it never substitutes another frame or delivers a message with
  a topic missing.
- The sender only sends references when every client connected to it can map its streams (each
  receiver says so in the connection id it already sends, with a token for the host and its
  /dev/shm). Otherwise, and whenever the ring has no free slot (filters keeping many frames), it
  sends the pixels inline exactly as OpenFilter does. A receiver on another host, or one started
  with ``enable(receive=False)`` / ``FRAMEBUS_OPENFILTER_RECEIVE=0``, therefore gets every frame
  through OpenFilter's own transport.
- Streams are named ``of.<sender id>.<topic>.<instance>.<generation>``; a restarted sender
  removes the streams of its dead predecessors, and a clean exit removes its own. ``framebus ls``
  and ``framebus top`` show them.

This module only translates: it calls OpenFilter's own functions for everything that is not an
image reference and framebus's public API for the rest.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import json
import logging
import os
import re
import secrets
import sys
import threading
import weakref
from collections import deque
from types import ModuleType
from typing import Any, Callable, Dict, Optional

import framebus
from framebus import _native

__all__ = ["enable", "disable", "enabled", "enable_on_import", "host_token", "stats"]

logger = logging.getLogger("framebus.openfilter")

ENV = "FRAMEBUS_OPENFILTER"
ENV_RECEIVE = "FRAMEBUS_OPENFILTER_RECEIVE"
ENV_SLOTS = "FRAMEBUS_OPENFILTER_SLOTS"
ENV_HOLD = "FRAMEBUS_OPENFILTER_HOLD"

#: Slots per topic stream: the frame being written, the newest frame, the sender's hold and room
#: for frames filters keep.
DEFAULT_SLOTS = 8
#: Messages whose frames a sender keeps pinned whatever its clients report, so an ephemeral or
#: load-balanced client a few messages behind still finds its frame (synchronized clients are
#: waited for however far behind they are).
DEFAULT_HOLD = 2
_MARK = "+fb"
_MQ_MODULE = "openfilter.filter_runtime.mq"

_lock = threading.Lock()
_patched: Dict[str, Any] = {}
_stats = {
    "sent_framebus": 0,
    "sent_inline": 0,
    "ring_full": 0,
    "forwarded": 0,
    "received_framebus": 0,
    "received_inline": 0,
    "missed": 0,
}


#: id(array) -> (weak reference to the array, stream name, sequence) for every image a receiver in
#: this process handed to a filter: a filter that passes such an image on is forwarded by
#: reference (the downstream pins the same frame), with no copy.
_views: Dict[int, Any] = {}


def _remember_view(array: Any, name: str, seq: int) -> None:
    key = id(array)

    def forget(_ref: Any, key: int = key) -> None:
        _views.pop(key, None)

    _views[key] = (weakref.ref(array, forget), name, seq)


def _received_ref(array: Any) -> Optional[list]:
    found = _views.get(id(array))
    if found is None or found[0]() is not array:
        return None
    return [found[1], found[2]]


def _truthy(value: Optional[str]) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _int_env(name: str, default: int, low: int, high: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer; use {low} to {high} or unset it") from None
    if not low <= value <= high:
        raise ValueError(f"{name}={value} is out of range; use {low} to {high} or unset it")
    return value


def host_token() -> str:
    """A short token equal for two processes exactly when they share this machine's boot, IPC
    namespace and /dev/shm (so one can map the other's streams)."""
    parts = []
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            parts.append(f.read().strip())
    except OSError:
        parts.append(os.uname().nodename)
    for path in ("/dev/shm",):
        try:
            parts.append(str(os.stat(path).st_dev))
        except OSError:
            parts.append("-")
    try:
        parts.append(os.readlink("/proc/self/ns/ipc"))
    except OSError:
        pass
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:10]


def stats() -> Dict[str, int]:
    """This process's counters: images sent as framebus references or inline (and how many of
    those were inline because the ring had no free slot), received images passed on by
    reference (``forwarded``: no copy), images received as views or inline,
    and references whose frame was gone (``missed``; logged as warnings too)."""
    with _lock:
        return dict(_stats)


def _count(key: str, n: int = 1) -> None:
    with _lock:
        _stats[key] += n


def enabled() -> bool:
    """Whether OpenFilter is patched in this process."""
    return bool(_patched)


def enable(*, receive: Optional[bool] = None) -> None:
    """Routes this process's OpenFilter images through framebus, and (through the environment)
    those of the filter processes it starts. Idempotent.

    ``receive=False`` (or ``FRAMEBUS_OPENFILTER_RECEIVE=0``) keeps this process's receivers on
    OpenFilter's own transport: senders see it and send them the pixels inline (the fallback a
    receiver on another host gets). Raises ImportError when openfilter is not installed
    (``pip install 'framebus[openfilter]'``) and ValueError for a bad FRAMEBUS_OPENFILTER_*
    value. Copies nothing itself; see the module docstring for what moves where."""
    os.environ[ENV] = "1"
    if receive is not None:
        os.environ[ENV_RECEIVE] = "1" if receive else "0"
    _check_env()
    try:
        mq = importlib.import_module(_MQ_MODULE)
    except ImportError as e:
        raise ImportError(
            f"framebus.integrations.openfilter needs openfilter ({e}); install it with pip install 'framebus[openfilter]'"
        ) from e
    _patch(mq)


def _check_env() -> None:
    _int_env(ENV_SLOTS, DEFAULT_SLOTS, 3, 64)
    _int_env(ENV_HOLD, DEFAULT_HOLD, 0, 16)


def enable_on_import() -> None:
    """Patches OpenFilter as soon as it is imported in this process (or now, if it already is).
    The start-up hook calls this where FRAMEBUS_OPENFILTER=1; importing framebus costs nothing
    more in processes that never import OpenFilter."""
    module = sys.modules.get(_MQ_MODULE)
    if module is not None:
        _patch(module)
        return
    if not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds OpenFilter's mq module with the other finders and patches it once it has run."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != _MQ_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        try:
            _check_env()
            _patch(module)
        except Exception as e:  # a bad setting must not stop the filter: it runs on OpenFilter's transport
            logger.error("framebus: not moving OpenFilter frames through framebus: %s", e)


def disable() -> None:
    """Restores OpenFilter's own functions in this process (MQs created while enabled keep their
    framebus streams until they are destroyed)."""
    with _lock:
        for (owner, attr), original in _patched.pop("originals", {}).items():
            setattr(owner, attr, original)
        _patched.clear()
    os.environ.pop(ENV, None)


def _patch(mq: ModuleType) -> None:
    with _lock:
        if _patched:
            return
        from openfilter.filter_runtime import zeromq

        MQ = mq.MQ
        Sender = zeromq.ZMQReceiver.Sender
        originals = {
            (MQ, "__init__"): MQ.__init__,
            (MQ, "frames2topicmsgs"): MQ.__dict__["frames2topicmsgs"],
            (MQ, "topicmsgs2frames"): MQ.__dict__["topicmsgs2frames"],
            (MQ, "recv"): MQ.recv,
            (Sender, "__init__"): Sender.__init__,
        }
        init, frames2topicmsgs = MQ.__init__, MQ.frames2topicmsgs
        topicmsgs2frames, sender_init, recv = MQ.topicmsgs2frames, Sender.__init__, MQ.recv
        suffix = _MARK + host_token()

        def mq_init(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            if kwargs.get("outs_jpg") is None and "OUTPUTS_JPG" not in os.environ:
                # OpenFilter's default encodes every image as JPEG for the wire; through framebus
                # an image goes raw unless it already is JPEG-encoded.
                self.outs_jpg = None
            if self.sender is not None:
                if self.shm_pool is not None:  # OPENFILTER_SHM_ENABLE as well: framebus replaces it
                    self.shm_pool.destroy()
                self.shm_pool = _Publisher(self, suffix)
            if self.receiver is not None:
                self.shm_cache = _Subscriber(self.shm_cache)

        def encode(frames: Any, outs_jpg: Any = None, *, pool: Any = None) -> Any:
            if isinstance(pool, _Publisher):
                return pool.topicmsgs(frames, outs_jpg, frames2topicmsgs)
            return frames2topicmsgs(frames, outs_jpg, pool=pool)

        def decode(topicmsgs: Any, *, cache: Any = None) -> Any:
            if isinstance(cache, _Subscriber):
                return cache.frames(topicmsgs, topicmsgs2frames)
            return topicmsgs2frames(topicmsgs, cache=cache)

        def recv_whole(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return recv(self, *args, **kwargs)
            except _MessageLost:
                return None  # as if nothing arrived yet: the filter's loop waits for the next one

        def connection_init(self: Any, *args: Any, **kwargs: Any) -> None:
            sender_init(self, *args, **kwargs)
            if _truthy(os.environ.get(ENV_RECEIVE, "1")):
                self.unique_id = f"{self.unique_id}{suffix}"

        MQ.__init__ = mq_init
        MQ.frames2topicmsgs = staticmethod(encode)
        MQ.topicmsgs2frames = staticmethod(decode)
        MQ.recv = recv_whole
        Sender.__init__ = connection_init
        _patched["originals"] = originals


def _token(text: str) -> str:
    clean = re.sub(r"[^A-Za-z0-9_-]", "_", text)[:40]
    if clean != text:
        clean = f"{clean}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"
    return clean or "_"


class _TopicStream:
    """One topic's stream on the sender side."""

    def __init__(self, name: str, capacity: int, slots: int, label: str) -> None:
        self.name = name
        self.stream = framebus.create(name, capacity=capacity, slots=slots)
        self.stream.set_role("writer", label[:48])

    def put(self, image: Any) -> "Optional[tuple[int, Any]]":
        """Writes ``image`` without waiting; (sequence, a view pinning it) or None when every
        free slot is pinned."""
        try:
            self.stream.write(image, timeout=0)
        except TimeoutError:
            return None
        seq = self.stream.write_sequence
        return seq, self.stream.view_seq(seq)

    def close(self) -> None:
        try:
            self.stream.end()
            self.stream.unlink()
        except (framebus.FramebusError, OSError):
            pass
        self.stream.close()


class _Retention:
    """What keeps the frames a sender has named alive until its clients are past them.

    Each sent message gets an entry: the pins of the frames it names (views of frames this
    sender wrote, arrays of frames it forwarded). An entry is let go once every synchronized
    client has received a later message (a client asks for message *M+1* only after its
    previous ``recv`` returned, so after it pinned the frames of message *M*), and never while it
    is among the last ``hold`` messages (the floor for ephemeral clients, which do not report
    progress in step)."""

    def __init__(self, hold: int) -> None:
        self.hold = hold
        self.entries: deque = deque()  # [message id or None (the newest, not yet known), pins]

    def add(self, pins: list, last_sent_id: Optional[int]) -> None:
        self._name_last(last_sent_id)
        self.entries.append([None, pins])

    def settle(self, last_sent_id: Optional[int], acked: Optional[int]) -> None:
        """Lets go of entries whose message every synchronized client is past (``acked``: the
        lowest message id they have received; None: unknown, keep only the floor)."""
        self._name_last(last_sent_id)
        while len(self.entries) > self.hold:
            msg_id = self.entries[0][0]
            if acked is not None and (msg_id is None or msg_id >= acked):
                break
            self._release(self.entries.popleft()[1])

    def _name_last(self, last_sent_id: Optional[int]) -> None:
        if self.entries and self.entries[-1][0] is None:
            if last_sent_id is None:
                self.entries[-1][0] = -1  # not knowable: release by count
            else:
                self.entries[-1][0] = last_sent_id

    def clear(self) -> None:
        while self.entries:
            self._release(self.entries.popleft()[1])

    @staticmethod
    def _release(pins: list) -> None:
        for pin in pins:
            if isinstance(pin, framebus.Frame):
                pin.release()  # this sender's own pin; a forwarded array is just dropped


class _Publisher:
    """Stands in for OpenFilter's SHMPool on a sender MQ."""

    def __init__(self, mq: Any, suffix: str) -> None:
        self._mq = weakref.ref(mq)
        self._suffix = suffix
        self._prefix = f"of.{_token(str(mq.sender.server_id))}."
        self._instance = f"{os.getpid():x}{secrets.token_hex(2)}"
        self._slots = _int_env(ENV_SLOTS, DEFAULT_SLOTS, 3, 64)
        self._retention = _Retention(_int_env(ENV_HOLD, DEFAULT_HOLD, 0, 16))
        self._streams: Dict[str, _TopicStream] = {}
        self._generation = 0
        self._failed = False
        self._sweep()

    def _sweep(self) -> None:
        """Removes streams of this sender id whose creator is dead (a predecessor killed before it
        could clean up); receivers that still map them keep their mapping."""
        for name in _native.stream_names():
            if not name.startswith(self._prefix):
                continue
            try:
                if not _native.stream_info(name).get("creator_alive", True):
                    framebus.unlink(name)
                    logger.info("framebus: removed stream %s of a sender that died", name)
            except (framebus.FramebusError, OSError):
                continue

    def _clients(self) -> Dict[str, Any]:
        mq = self._mq()
        return getattr(getattr(mq, "sender", None), "clients", None) or {}

    def _clients_can_map(self) -> bool:
        clients = self._clients()
        return bool(clients) and all(full_id.endswith(self._suffix) for full_id in clients)

    def _progress(self) -> "tuple[Optional[int], Optional[int]]":
        """(id of the last message OpenFilter sent, lowest id the synchronized clients have
        received); None where OpenFilter does not say."""
        sender = getattr(self._mq(), "sender", None)
        next_id = getattr(sender, "min_send_id", None)
        last_sent = next_id - 1 if isinstance(next_id, int) else None
        received = [getattr(c, "prev_id", None) for c in self._clients().values() if not getattr(c, "ephemeral", 0)]
        known = [r for r in received if isinstance(r, int)]
        acked = min(known) if known and len(known) == len(received) else None
        return last_sent, acked

    def _stream_for(self, topic: str, nbytes: int) -> Optional[_TopicStream]:
        current = self._streams.get(topic)
        if current is not None and (current.stream.capacity or 0) >= nbytes:
            return current
        if current is not None:
            current.close()
            del self._streams[topic]
        self._generation += 1
        name = f"{self._prefix}{_token(topic)}.{self._instance}.{self._generation}"
        capacity = max(4096, -(-nbytes * 5 // 4 // 4096) * 4096)  # room for a little growth
        try:
            made = _TopicStream(name, capacity, self._slots, f"openfilter {topic}")
        except (framebus.FramebusError, OSError, ValueError) as e:
            if not self._failed:
                logger.warning("framebus: cannot create stream %s (%s); sending images inline", name, e)
                self._failed = True
            return None
        self._streams[topic] = made
        return made

    def topicmsgs(self, frames: Dict[str, Any], outs_jpg: Any, encode: Callable[..., Any]) -> Dict[str, Any]:
        last_sent, acked = self._progress()
        self._retention.settle(last_sent, acked)
        if not self._clients_can_map():
            n = sum(1 for f in frames.values() if getattr(f, "has_image", False))
            if n:
                _count("sent_inline", n)
            return encode(frames, outs_jpg, pool=None)
        msgs: Dict[str, Any] = {}
        pins: list = []
        for topic, frame in frames.items():
            ref = None
            if frame.has_image and not (frame.has_jpg if outs_jpg is None else outs_jpg):
                ref = self._reference(topic, frame.image, pins)
            if ref is None:
                if frame.has_image:
                    _count("sent_inline")
                msgs.update(encode({topic: frame}, outs_jpg, pool=None))
                continue
            xtra = {"img": [frame.height, frame.width, frame.format, "raw"], "fb": ref}
            data = json.dumps(frame.data, separators=(",", ":")).encode() if frame.data else None
            msgs[topic] = [xtra] if data is None else [xtra, data]
        if pins:
            self._retention.add(pins, last_sent)
        return msgs

    def _reference(self, topic: str, image: Any, pins: list) -> Optional[list]:
        """``[stream, seq]`` naming ``image`` in a framebus stream (adding what keeps it alive to
        ``pins``), or None to send it inline."""
        ref = _received_ref(image)
        if ref is not None:
            # An image this process received through framebus, passed on unchanged (it is
            # read-only): send the same reference and keep the array, so its pin, until the
            # clients are past this message.
            pins.append(image)
            _count("forwarded")
            return ref
        topic_stream = self._stream_for(topic, image.nbytes)
        if topic_stream is None:
            return None
        written = topic_stream.put(image)
        if written is None or written[1] is None:
            _count("ring_full")
            return None
        seq, view = written
        pins.append(view)
        _count("sent_framebus")
        return [topic_stream.name, seq]

    def destroy(self) -> None:
        self._retention.clear()
        for topic_stream in self._streams.values():
            topic_stream.close()
        self._streams.clear()


class _MessageLost(Exception):
    """A message named a frame that is no longer in its ring: OpenFilter's ``MQ.recv`` (patched)
    drops the whole message, so a filter never gets a message with a topic missing."""


class _Subscriber:
    """Stands in for OpenFilter's SHMAttachCache on a receiver MQ (keeping OpenFilter's own cache,
    if it had one, for senders that use OpenFilter's shared memory)."""

    MAX_STREAMS = 64

    def __init__(self, openfilter_cache: Any) -> None:
        self._openfilter_cache = openfilter_cache
        self._streams: Dict[str, framebus.Stream] = {}

    def _open(self, name: str) -> Optional[framebus.Stream]:
        stream = self._streams.get(name)
        if stream is not None:
            return stream
        try:
            stream = framebus.open(name)
        except (framebus.FramebusError, OSError) as e:
            logger.warning("framebus: cannot open stream %s named by the sender: %s", name, e)
            return None
        # A sender that grew a topic's stream or restarted names a new one: drop handles to
        # older generations of the same sender and topic (pinned frames keep their mapping).
        family = name.rsplit(".", 2)[0]
        for old in [n for n in self._streams if n.rsplit(".", 2)[0] == family]:
            self._streams.pop(old).close()
        if len(self._streams) >= self.MAX_STREAMS:
            self._streams.pop(next(iter(self._streams))).close()
        self._streams[name] = stream
        return stream

    def frames(self, topicmsgs: Dict[str, Any], decode: Callable[..., Any]) -> Dict[str, Any]:
        from openfilter.filter_runtime.frame import Frame

        plain = {t: m for t, m in topicmsgs.items() if not (isinstance(m[0], dict) and "fb" in m[0])}
        decoded = decode(plain, cache=self._openfilter_cache) if plain else {}
        inline = sum(1 for f in decoded.values() if getattr(f, "has_image", False))
        if inline:
            _count("received_inline", inline)
        if len(plain) == len(topicmsgs):
            return decoded
        out: Dict[str, Any] = {}
        for topic, msg in topicmsgs.items():
            if topic in decoded:
                out[topic] = decoded[topic]
                continue
            xtra = msg[0]
            name, seq = xtra["fb"]
            if len(msg) > 2:
                raise RuntimeError(f"incorrect number of messages: {len(msg)}")
            stream = self._open(name)
            view = stream.view_seq(seq) if stream is not None else None
            if view is None:
                _count("missed")
                logger.warning(
                    "framebus: frame %d of stream %s (topic %r) is no longer in the ring; the message is dropped (the filter gets the next one)",
                    seq,
                    name,
                    topic,
                )
                raise _MessageLost(topic)
            image = view.array  # read-only, zero-copy; the pin lives as long as the array
            _remember_view(image, name, seq)
            data = json.loads(bytes(msg[1]).decode()) if len(msg) > 1 else None
            out[topic] = Frame(image, data, xtra["img"][2])
            _count("received_framebus")
        return out

    def destroy(self) -> None:
        for stream in self._streams.values():
            stream.close()
        self._streams.clear()
        if self._openfilter_cache is not None:
            self._openfilter_cache.destroy()
