"""Whether a Zenoh session reaches anyone, for the state that the Zenoh ends report.

A Zenoh session in peer or client mode opens even when nothing listens at its ``connect``
endpoints: it keeps retrying in the background, and what it puts meanwhile goes nowhere. Its
``info`` lists the routers and peers it is connected to now; :class:`Reach` asks it and words
the state to show while both lists are empty: "waiting for a Zenoh router at tcp/HOST:7447".
A session in router mode waits for nobody (the clients connected to it are not listed).
"""

from __future__ import annotations

import json
from typing import Any, List, Optional

#: Longest label the core keeps for a stream handle (``Stream.set_role``).
LABEL_BYTES = 48


def reached(session: Any) -> bool:
    """Whether ``session`` is connected to at least one Zenoh router or peer now."""
    info = session.info
    return any(True for _ in info.routers_zid()) or any(True for _ in info.peers_zid())


def _endpoints(cfg: Any, key: str, mode: str) -> List[str]:
    try:
        value = json.loads(cfg.get_json(key))
    except Exception:  # noqa: BLE001 - an unreadable field: no endpoints to name
        return []
    if isinstance(value, dict):  # per mode: {"router": [...], "peer": [...]}
        value = value.get(mode, [])
    return [str(v) for v in value] if isinstance(value, list) else []


def _mode(cfg: Any) -> str:
    try:
        mode = json.loads(cfg.get_json("mode"))
    except Exception:  # noqa: BLE001
        mode = None
    return mode if isinstance(mode, str) else "peer"


class Reach:
    """Whether one end's session reaches a router or peer; ``waiting`` is the state to show
    while it does not. ``ever`` tells whether it ever did (for the line printed at the end)."""

    def __init__(self, config: Any) -> None:
        mode = _mode(config)
        connect = _endpoints(config, "connect/endpoints", mode)
        # A port 0 endpoint (Zenoh's default for a peer: any free port) names nothing to connect to.
        listen = [e for e in _endpoints(config, "listen/endpoints", mode) if not e.endswith(":0")]
        #: Whether this session can tell (False in router mode: always counted as reached).
        self.tells = mode != "router"
        if connect:
            where = ", ".join(connect)
            self.waiting = f"waiting for a Zenoh router at {where}"
            #: What went missing, said when nothing was ever reached.
            self.missing = f"no Zenoh router or peer was reached at {where}"
            shorter = [f"waiting for router {where}", "waiting for a Zenoh router"]
        elif listen:
            where = ", ".join(listen)
            self.waiting = f"waiting for a Zenoh peer to connect to {where}"
            self.missing = f"no Zenoh peer connected to {where}"
            shorter = [f"waiting for a peer on {where}", "waiting for a Zenoh peer"]
        else:
            self.waiting = "waiting for a Zenoh router or peer"
            self.missing = "no Zenoh router or peer was found"
            shorter = []
        #: The waiting text in at most LABEL_BYTES (a handle's label, which monitors show): the
        #: endpoint is left out rather than cut.
        self.label = next(t for t in [self.waiting, *shorter, "waiting for Zenoh"] if len(t.encode()) <= LABEL_BYTES)
        self.ever = False
        self._session: Optional[Any] = None
        self._now = False

    def attach(self, session: Optional[Any]) -> None:
        """Watches ``session`` (None once it is closed)."""
        self._session = session

    def now(self) -> bool:
        """Whether the session reaches a router or peer now (a few microseconds to ask)."""
        session = self._session
        if session is None:
            return self._now
        if not self.tells:
            self._now = self.ever = True
            return True
        try:
            self._now = reached(session)
        except Exception:  # noqa: BLE001 - a session closing meanwhile: keep the last answer
            pass
        self.ever = self.ever or self._now
        return self._now

    def state(self, state: str) -> str:
        """``state``, or the waiting text while the session is open and reaches nobody."""
        if self._session is not None and state not in ("starting", "stopped", "failed") and not self.now():
            return self.waiting
        return state

    def note(self) -> str:
        """What to add to the end-of-run line when nothing was ever reached (else "")."""
        return "" if self.ever else f"; {self.missing}, so nothing was exchanged"
