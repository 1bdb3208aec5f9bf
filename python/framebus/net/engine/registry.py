"""The one place that knows the engines by name: ``"zmq"`` (pyzmq, the default) and
``"zenoh"`` (eclipse-zenoh). Each entry says which options class each end of that engine takes,
which Python package it needs, and how to make its transports (imported only when a bridge on
that engine starts, so neither package is needed to import ``framebus.net``). Nothing else in
framebus compares engine names (tests/test_rooms.py checks that)."""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from ...errors import InvalidArgumentError
from ..zenoh import ZenohLink
from ..zmq import ZmqPublishOptions, ZmqSubscribeOptions
from .contract import PublishTransport, SubscribeTransport


def _zmq_publishing(options: Any) -> PublishTransport:
    from ..zmq.transport import ZmqPublishing

    return ZmqPublishing(options)


def _zmq_subscribing(options: Any) -> SubscribeTransport:
    from ..zmq.transport import ZmqSubscribing

    return ZmqSubscribing(options)


def _zenoh_publishing(options: Any) -> PublishTransport:
    from ..zenoh.transport import ZenohPublishing

    return ZenohPublishing(options)


def _zenoh_subscribing(options: Any) -> SubscribeTransport:
    from ..zenoh.transport import ZenohSubscribing

    return ZenohSubscribing(options)


@dataclass(frozen=True)
class Engine:
    """One engine: its name, its options class per end, the module it imports (``needs``), the
    distribution that provides it (``package``) and the framebus extra that installs it, and
    its transport factories."""

    name: str
    publish_options: type
    subscribe_options: type
    needs: str
    package: str
    extra: str
    _publishing: Callable[[Any], PublishTransport]
    _subscribing: Callable[[Any], SubscribeTransport]

    def options_class(self, end: str) -> type:
        """The options class of this engine's ``end`` ("publish" or "subscribe")."""
        return self.publish_options if end == "publish" else self.subscribe_options

    def transport(self, end: str, options: Any = None) -> Any:
        """A new transport for one ``end`` with ``options`` (an instance of ``options_class``,
        or None for the defaults). ImportError with the install command when the engine's
        package is missing."""
        if options is None:
            options = self.options_class(end)()
        return (self._publishing if end == "publish" else self._subscribing)(options)

    def missing(self) -> Optional[str]:
        """What to install when this engine's package is missing (else None)."""
        if importlib.util.find_spec(self.needs) is None:
            return f"the {self.name} engine needs {self.package}, which is not installed: pip install 'framebus[{self.extra}]'"
        return None


#: Name -> engine.
ENGINES: Dict[str, Engine] = {
    "zmq": Engine("zmq", ZmqPublishOptions, ZmqSubscribeOptions, "zmq", "pyzmq", "net", _zmq_publishing, _zmq_subscribing),
    "zenoh": Engine("zenoh", ZenohLink, ZenohLink, "zenoh", "eclipse-zenoh", "zenoh", _zenoh_publishing, _zenoh_subscribing),
}

#: The engine used when none is named.
DEFAULT = "zmq"


def names() -> List[str]:
    """The engines' names, the default first."""
    return [DEFAULT, *(n for n in ENGINES if n != DEFAULT)]


def engine(name: Any = None) -> Engine:
    """The engine called ``name`` (None: the default); InvalidArgumentError (ValueError) for
    another name."""
    if name is None:
        name = DEFAULT
    found = ENGINES.get(name) if isinstance(name, str) else None
    if found is None:
        raise InvalidArgumentError(f"engine must be one of {', '.join(repr(n) for n in names())} (default {DEFAULT!r}), got {name!r}")
    return found


def owner(options: Any) -> Optional[Engine]:
    """The engine whose options ``options`` are (None for None); TypeError for anything else."""
    if options is None:
        return None
    for e in ENGINES.values():
        if isinstance(options, (e.publish_options, e.subscribe_options)):
            return e
    kinds = ", ".join(sorted({c.__name__ for e in ENGINES.values() for c in (e.publish_options, e.subscribe_options)}))
    raise TypeError(f"engine_options must be one of {kinds}, got {type(options).__name__}")


def field_owner(end: str, field: str) -> Optional[Engine]:
    """The engine whose ``end`` options have a field ``field`` (None if no engine's do)."""
    for e in ENGINES.values():
        if field in {f.name for f in dataclasses.fields(e.options_class(end))}:
            return e
    return None


def engine_options(end: str, options: Any, fields: Dict[str, Any]) -> Any:
    """``options`` (one engine's options for ``end``, or None) with the ``fields`` that are not
    None set: all of them must be fields of one engine's options for that end (of ``options``'
    engine, when given). ValueError naming the engines when they are not; None when there is
    nothing to set and nothing given."""
    given = {k: v for k, v in fields.items() if v is not None}
    have = owner(options)
    if not given:
        return options
    if have is not None and not isinstance(options, have.options_class(end)):
        raise InvalidArgumentError(f"engine_options is a {type(options).__name__}, not the options of a {end} end")
    for field in given:
        e = field_owner(end, field)
        if e is None:
            raise TypeError(f"no engine's {end} options have a field {field!r}")
        if have is None:
            have = e
        elif e is not have:
            raise InvalidArgumentError(f"{field} is an option of the {e.name} engine, not of the {have.name} engine these options are for")
    assert have is not None
    return dataclasses.replace(options, **given) if options is not None else have.options_class(end)(**given)


def split(end: str, name: Any, engine_options_given: Any, fields: Dict[str, Any], common: Tuple[str, ...]) -> Tuple[Engine, Dict[str, Any], Any]:
    """Resolves ``framebus.net.publish``/``subscribe``'s engine: the engine called ``name``
    (None: the one ``engine_options_given`` belong to, else the default), the keywords of
    ``fields`` that are ``common`` (engine-independent) options, and that engine's options
    (``engine_options_given`` with the other keywords set). A keyword of another engine is a
    ValueError naming that engine; one of no engine is left among the common ones (the options
    class then says it is unknown)."""
    have = owner(engine_options_given)
    chosen = engine(name) if name is not None else (have or engine(None))
    if have is not None and have is not chosen:
        raise InvalidArgumentError(f"the options given are the {have.name} engine's ({type(engine_options_given).__name__}), but engine={chosen.name!r}")
    own = {f.name for f in dataclasses.fields(chosen.options_class(end))}
    mine: Dict[str, Any] = {}
    rest: Dict[str, Any] = {}
    for key, value in fields.items():
        if key in common:
            rest[key] = value
        elif key in own:
            mine[key] = value
        else:
            other = field_owner(end, key)
            if other is not None:
                raise InvalidArgumentError(f"{key} is an option of the {other.name} engine (engine={other.name!r}); this bridge uses engine={chosen.name!r}")
            rest[key] = value
    options = engine_options_given
    if mine:
        options = dataclasses.replace(options, **mine) if options is not None else chosen.options_class(end)(**mine)
    return chosen, rest, options
