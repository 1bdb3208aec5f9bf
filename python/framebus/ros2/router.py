"""A Zenoh router for ROS 2 over rmw_zenoh, from the eclipse-zenoh Python package: what
``ros2 run rmw_zenoh_cpp rmw_zenohd`` runs, without a ROS installation.

Its settings are those rmw_zenoh's default router configuration changes from Zenoh's defaults
(hiroz's ``RouterConfigBuilder`` uses the same; tests/test_ros2_interop.py compares them):
router mode, listening on ``tcp/[::]:7447``, no multicast scouting (discovery by gossip
through the router), timestamps on, generous transport timeouts and session limits for launches
of many nodes, and shared memory off.
"""

from __future__ import annotations

import json
from typing import Any, List, Optional, Sequence, Tuple

from ..errors import InvalidArgumentError
from ..net import BridgeError, EndpointError

#: Where rmw_zenoh's router listens by default.
DEFAULT_LISTEN = "tcp/[::]:7447"

#: (key, value) of each setting of rmw_zenoh's default router configuration that differs from
#: Zenoh's defaults, besides ``listen/endpoints``.
ROUTER_SETTINGS: Tuple[Tuple[str, Any], ...] = (
    ("mode", "router"),
    ("connect/endpoints", []),
    ("routing/router/peers_failover_brokering", False),
    ("transport/link/tx/queue/congestion_control/block/wait_before_close", 5_000_000),
    ("scouting/multicast/enabled", False),
    ("scouting/gossip/target", {"router": ["router", "peer"], "peer": ["router"]}),
    ("timestamping/enabled", {"router": True, "peer": True, "client": True}),
    ("transport/unicast/open_timeout", 60_000),
    ("transport/unicast/accept_timeout", 60_000),
    ("transport/unicast/accept_pending", 10_000),
    ("transport/unicast/max_sessions", 10_000),
    ("transport/link/tx/lease", 60_000),
    ("transport/link/tx/keep_alive", 2),
    ("transport/shared_memory/enabled", False),
)


def router_config(listen: Sequence[str] = (DEFAULT_LISTEN,)) -> Any:
    """A ``zenoh.Config`` with rmw_zenoh's router settings, listening on ``listen`` (Zenoh
    endpoints such as ``tcp/0.0.0.0:7447``). EndpointError (ValueError) for an endpoint Zenoh
    rejects."""
    import zenoh

    if isinstance(listen, str) or not listen:
        raise InvalidArgumentError(f"listen must be a list of Zenoh endpoints such as ['tcp/0.0.0.0:7447'], got {listen!r}")
    cfg = zenoh.Config()
    for key, value in ROUTER_SETTINGS:
        cfg.insert_json5(key, json.dumps(value))
    try:
        cfg.insert_json5("listen/endpoints", json.dumps(list(listen)))
    except Exception as exc:  # zenoh.ZError: a malformed endpoint
        raise EndpointError(f"{list(listen)} is not a list of Zenoh endpoints (PROTOCOL/HOST:PORT, e.g. tcp/0.0.0.0:7447): {exc}") from None
    return cfg


class Router:
    """A running Zenoh router (``with Router(["tcp/127.0.0.1:7447"]) as r: ...``); ``close()``
    stops it. Opening raises BridgeError when Zenoh cannot listen (the port is taken, say)."""

    def __init__(self, listen: Sequence[str] = (DEFAULT_LISTEN,)) -> None:
        import zenoh

        self.listen: List[str] = list(listen)
        cfg = router_config(self.listen)
        try:
            self._session: Optional[Any] = zenoh.open(cfg)
        except Exception as exc:  # zenoh.ZError
            raise BridgeError(f"the Zenoh router cannot listen on {', '.join(self.listen)}: {exc} (is another router using the port?)") from None
        self.zid = str(self._session.info.zid())

    def sessions(self) -> int:
        """How many Zenoh sessions (ROS nodes' processes, other routers) are connected now."""
        session = self._session
        return 0 if session is None else len(list(session.info.transports()))

    def close(self) -> None:
        """Stops the router (idempotent)."""
        session, self._session = self._session, None
        if session is not None:
            session.close()

    def __enter__(self) -> "Router":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
