"""How a Zenoh end joins the Zenoh network (``ZenohLink``: the Zenoh engine's options, also
taken by ``framebus.ros2``) and which keys it may use (``check_key``). Importing this module
needs no eclipse-zenoh; opening a session does."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Tuple

from ...errors import InvalidArgumentError
from ..wire import BridgeError, EndpointError, EndpointInUseError

if TYPE_CHECKING:
    import zenoh


@dataclass(frozen=True)
class ZenohLink:
    """How a Zenoh engine joins the Zenoh network.

    ``zenoh_config``: a Zenoh configuration file (JSON5), used as it is, with the fields below
    on top. ``listen`` / ``connect``: Zenoh endpoints (``"tcp/0.0.0.0:7447"``,
    ``"tcp/router-host:7447"``). ``scouting``: multicast scouting on/off (None: the
    configuration's, which is on in Zenoh's default peer mode). ``zenoh_mode``: ``"peer"`` (default)
    or ``"client"`` (through a router only)."""

    zenoh_config: Any = None
    listen: Tuple[str, ...] = ()
    connect: Tuple[str, ...] = ()
    scouting: Optional[bool] = None
    zenoh_mode: Optional[str] = None

    def __post_init__(self) -> None:
        for name in ("listen", "connect"):
            value = getattr(self, name)
            if isinstance(value, str):
                value = (value,)
            if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) and "/" in v for v in value):
                raise EndpointError(f"{name} must be Zenoh endpoints such as 'tcp/127.0.0.1:7447', got {value!r}")
            object.__setattr__(self, name, tuple(value))
        if self.zenoh_config is not None:
            if not isinstance(self.zenoh_config, (str, os.PathLike)):
                raise TypeError(f"zenoh_config must be a file path, got {self.zenoh_config!r}")
            if not os.path.isfile(self.zenoh_config):
                raise FileNotFoundError(2, f"Zenoh configuration file {os.fspath(self.zenoh_config)!r} does not exist")
        if self.zenoh_mode not in (None, "peer", "client"):
            raise InvalidArgumentError(f"zenoh_mode must be 'peer' or 'client', got {self.zenoh_mode!r}")

    def config(self) -> "zenoh.Config":
        """The Zenoh configuration this link opens its session with (needs eclipse-zenoh)."""
        import zenoh

        from . import frames

        try:
            cfg = zenoh.Config.from_file(os.fspath(self.zenoh_config)) if self.zenoh_config is not None else zenoh.Config()
        except zenoh.ZError as exc:
            raise InvalidArgumentError(f"cannot read Zenoh configuration {os.fspath(self.zenoh_config)!r}: {exc}") from None
        try:
            if self.zenoh_config is None:
                # No shared-memory transport (its file in /dev/shm outlives a killed process), a
                # deeper transmission queue for large frames. A user's configuration file
                # decides for itself.
                frames.tune(cfg)
            if self.zenoh_mode is not None:
                cfg.insert_json5("mode", json.dumps(self.zenoh_mode))
            if self.listen:
                cfg.insert_json5("listen/endpoints", json.dumps(list(self.listen)))
            if self.connect:
                cfg.insert_json5("connect/endpoints", json.dumps(list(self.connect)))
            if self.scouting is not None:
                cfg.insert_json5("scouting/multicast/enabled", json.dumps(bool(self.scouting)))
        except zenoh.ZError as exc:
            raise EndpointError(f"bad Zenoh endpoint in listen={self.listen} connect={self.connect}: {exc}") from None
        return cfg

    def open(self, cfg: Optional["zenoh.Config"] = None) -> "zenoh.Session":
        """Opens a Zenoh session with ``cfg`` (default: ``config()``); EndpointInUseError when a
        listen endpoint is taken, BridgeError for any other failure."""
        import zenoh

        if cfg is None:
            cfg = self.config()
        try:
            return zenoh.open(cfg)
        except zenoh.ZError as exc:
            text = str(exc)
            if "in use" in text.lower():
                raise EndpointInUseError(98, f"cannot listen on {', '.join(self.listen)}: the address is already in use ({text})") from None
            raise BridgeError(f"cannot open a Zenoh session (listen={list(self.listen)}, connect={list(self.connect)}): {text}") from None


def check_key(key: Any) -> str:
    """``key`` if it is a Zenoh key expression without wildcards, else EndpointError."""
    if not isinstance(key, str):
        raise TypeError(f"the Zenoh key must be a string such as 'framebus/camera', got {key!r}")
    import zenoh

    if not key or "*" in key or "$" in key or key.startswith("/") or key.endswith("/"):
        raise EndpointError(f"Zenoh key {key!r}: expected a key expression such as 'framebus/camera' (no wildcards, no leading or trailing '/')")
    try:
        zenoh.KeyExpr(key)
    except zenoh.ZError as exc:
        raise EndpointError(f"Zenoh key {key!r} is not a valid key expression: {exc}") from None
    return key
