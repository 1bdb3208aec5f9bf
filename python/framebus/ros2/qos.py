"""The QoS of a framebus ROS 2 end as rmw_zenoh carries it: reliability, durability and
history depth; how it is written in the liveliness token; how it shapes the Zenoh publisher or
subscriber (transient local: a Zenoh advanced publisher that keeps the last ``depth`` images for
late subscribers, an advanced subscriber that asks for them, as rmw_zenoh does); and which pairs
ROS 2 refuses to match.

ROS 2 matches a publisher and a subscription when the publisher offers at least what the
subscription requests: a best-effort publisher cannot serve a reliable subscription, a volatile
one cannot serve a transient-local subscription. Over DDS such a pair never connects; Zenoh
still delivers the samples. :class:`QosWatch` reads the other ends' tokens on the topic and says
which of them ROS 2 would refuse, so the framebus end can report it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Set

from ..errors import InvalidArgumentError
from . import rmw

RELIABILITIES = ("reliable", "best_effort")
DURABILITIES = ("volatile", "transient_local")
_REL_CODE = {"reliable": rmw.RELIABLE, "best_effort": rmw.BEST_EFFORT}
_DUR_CODE = {"transient_local": 1, "volatile": 2}  # rmw/types.h


@dataclass(frozen=True)
class Qos:
    """A QoS profile: ``reliability`` ("reliable" or "best_effort"), ``durability``
    ("volatile" or "transient_local"), keep-last ``depth`` (1 or more). ValueError otherwise."""

    reliability: str = "reliable"
    durability: str = "volatile"
    depth: int = 10

    def __post_init__(self) -> None:
        if self.reliability not in RELIABILITIES:
            raise InvalidArgumentError(f"QoS reliability is 'reliable' or 'best_effort', got {self.reliability!r}")
        if self.durability not in DURABILITIES:
            raise InvalidArgumentError(f"QoS durability is 'volatile' or 'transient_local', got {self.durability!r}")
        if isinstance(self.depth, bool) or not isinstance(self.depth, int) or self.depth < 1:
            raise InvalidArgumentError(f"QoS depth is a positive number of messages, got {self.depth!r}")

    @property
    def transient_local(self) -> bool:
        return self.durability == "transient_local"

    @property
    def reliable(self) -> bool:
        return self.reliability == "reliable"

    def token(self) -> str:
        """The QoS field of the liveliness token, as rmw_zenoh writes it."""
        return rmw.qos_string(_REL_CODE[self.reliability], self.depth, transient_local=self.transient_local)

    @classmethod
    def from_token(cls, text: str) -> "Qos":
        """The QoS of a liveliness token's QoS field; ValueError if malformed or unknown."""
        rel, dur, _hist, depth = rmw.parse_qos(text)
        names = {v: k for k, v in _REL_CODE.items()}, {v: k for k, v in _DUR_CODE.items()}
        if rel not in names[0] or dur not in names[1]:
            raise ValueError(f"QoS {text!r}: reliability {rel} or durability {dur} is not one ROS 2 defines")
        return cls(names[0][rel], names[1][dur], max(depth, 1))

    def __str__(self) -> str:
        return f"{self.reliability}, {self.durability}, depth {self.depth}"


def incompatibility(offered: Qos, requested: Qos) -> Optional[str]:
    """Why ROS 2 would not match a publisher offering ``offered`` with a subscription requesting
    ``requested``; None when it would."""
    if requested.reliable and not offered.reliable:
        return "reliability: the publisher is best_effort, the subscription requests reliable"
    if requested.transient_local and not offered.transient_local:
        return "durability: the publisher is volatile, the subscription requests transient_local"
    return None


def declare_publisher(session: Any, key: str, qos: Qos) -> Any:
    """A Zenoh publisher of ``key`` for ``qos``: reliable or best effort, dropping rather than
    blocking when the network is congested (the newest image wins); for transient local, an
    advanced publisher caching the last ``depth`` samples for late subscribers."""
    import zenoh

    reliability = zenoh.Reliability.RELIABLE if qos.reliable else zenoh.Reliability.BEST_EFFORT
    if not qos.transient_local:
        return session.declare_publisher(key, congestion_control=zenoh.CongestionControl.DROP, reliability=reliability)
    from zenoh import ext

    return ext.declare_advanced_publisher(
        session, key, congestion_control=zenoh.CongestionControl.DROP, reliability=reliability,
        cache=ext.CacheConfig(max_samples=qos.depth), publisher_detection=True,
        sample_miss_detection=ext.MissDetectionConfig(heartbeat=None, sporadic_heartbeat=0.5) if qos.reliable else None,
    )


def declare_subscriber(session: Any, key: str, qos: Qos, handler: Callable[[Any], None]) -> Any:
    """A Zenoh subscriber of ``key`` calling ``handler`` per sample; for transient local, an
    advanced subscriber that first asks the publishers for their cached samples."""
    if not qos.transient_local:
        return session.declare_subscriber(key, handler)
    from zenoh import ext

    return ext.declare_advanced_subscriber(
        session, key, handler, history=ext.HistoryConfig(detect_late_publishers=True, max_samples=qos.depth),
        recovery=ext.RecoveryConfig(periodic_queries=None, heartbeat=True) if qos.reliable else None, subscriber_detection=True,
    )


class QosWatch:
    """Watches the liveliness tokens of the other side of a topic (the subscriptions of a
    publisher's topic, or the publishers of a subscription's) and keeps, for each that ROS 2
    would refuse to match with ``qos``, why. ``note()`` says it in one clause."""

    def __init__(self, session: Any, domain: int, topic: str, own_kind: str, qos: Qos) -> None:
        self.topic, self.qos, self.own_kind = topic, qos, own_kind
        self._lock = threading.Lock()
        self.refused: Dict[str, str] = {}  # token key -> "<node>: <why>"
        #: The other side's entities on the topic now (their token keys), and whether any was
        #: ever seen (a publisher that declares no token, e.g. plain Zenoh, is not counted here).
        self.others: Set[str] = set()
        self.seen_others = False
        self._sub = session.liveliness().declare_subscriber(f"{rmw.ADMIN_SPACE}/{domain}/**", self._on_token, history=True)

    def _on_token(self, sample: Any) -> None:
        import zenoh

        key = str(sample.key_expr)
        try:
            tok = rmw.parse_token(key)
        except ValueError:
            return  # a node token, or not rmw_zenoh's
        if tok.topic != self.topic or tok.kind == self.own_kind or tok.kind not in ("MP", "MS"):
            return
        with self._lock:
            if sample.kind == zenoh.SampleKind.DELETE:
                self.refused.pop(key, None)
                self.others.discard(key)
                return
            self.others.add(key)
            self.seen_others = True
            if tok.qos is None:
                return
            try:
                theirs = Qos.from_token(tok.qos)
            except ValueError:
                return
            why = incompatibility(theirs, self.qos) if self.own_kind == "MS" else incompatibility(self.qos, theirs)
            if why is not None:
                self.refused[key] = f"{tok.namespace.rstrip('/')}/{tok.node}: {why}"

    def count(self) -> Optional[int]:
        """How many entities of the other side the topic has now (by their liveliness
        tokens), or None while none ever announced itself."""
        with self._lock:
            return len(self.others) if self.seen_others else None

    def note(self) -> str:
        """Empty when every end on the topic matches; else "incompatible QoS with ..." naming
        each node and the policy ROS 2 refuses (Zenoh still delivers its images)."""
        with self._lock:
            refused = sorted(set(self.refused.values()))
        if not refused:
            return ""
        return "incompatible QoS with " + "; ".join(refused) + " (ROS 2 would not match them; Zenoh still delivers)"

    def close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            sub.undeclare()
