"""Endpoint checks, CURVE set-up and ZeroMQ error mapping shared by both ends of a bridge."""

from __future__ import annotations

import errno
import ipaddress
import os
import socket as _socket
from typing import Any, Optional, Tuple

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from ...errors import InvalidArgumentError
from ..wire import BridgeError, EndpointError, EndpointInUseError

_FORMS = "tcp://HOST:PORT (bind: tcp://*:PORT or tcp://IP:PORT, PORT may be * for any free port) or ipc:///path/to/socket"


def check_endpoint(endpoint: Any, *, bind: bool) -> str:
    """``endpoint`` if the bridge can use it, else EndpointError (TypeError for a non-string).
    For a connect, a host name is resolved now so a typo fails here and not as a silent wait."""
    if not isinstance(endpoint, str):
        raise TypeError(f"endpoint must be a string such as 'tcp://127.0.0.1:5555', got {endpoint!r}")
    transport, sep, address = endpoint.partition("://")
    if not sep or not address:
        raise EndpointError(f"malformed endpoint {endpoint!r}; expected {_FORMS}")
    if transport == "ipc":
        return endpoint
    if transport != "tcp":
        raise EndpointError(f"endpoint {endpoint!r}: transport {transport!r} is not supported by the bridge; use {_FORMS}")
    host, colon, port = address.rpartition(":")
    if not colon or not host:
        raise EndpointError(f"endpoint {endpoint!r} has no port; expected {_FORMS}")
    if port != "*" or not bind:
        try:
            number = int(port)
        except ValueError:
            raise EndpointError(f"endpoint {endpoint!r}: port {port!r} is not a number; expected {_FORMS}") from None
        if not 0 < number < 65536:
            raise EndpointError(f"endpoint {endpoint!r}: port {number} is out of range 1..65535")
    if not bind:
        name = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if name == "*":
            raise EndpointError(f"endpoint {endpoint!r}: '*' is only for binding; connect to the publisher's host name or address")
        try:
            ipaddress.ip_address(name)
        except ValueError:
            try:
                _socket.getaddrinfo(name, None, type=_socket.SOCK_STREAM)
            except _socket.gaierror as exc:
                raise EndpointError(f"endpoint {endpoint!r}: cannot resolve host {name!r} ({exc.strerror})") from None
    return endpoint


def zmq_error(exc: zmq.ZMQError, endpoint: str, action: str) -> Exception:
    """A framebus exception for a failed bind/connect."""
    if exc.errno == errno.EADDRINUSE:
        return EndpointInUseError(errno.EADDRINUSE, f"cannot {action} {endpoint!r}: the address is already in use (another publisher running?)")
    if exc.errno in (errno.EINVAL, errno.EPROTONOSUPPORT, errno.ENODEV, errno.EADDRNOTAVAIL, errno.ENOENT):
        return EndpointError(f"cannot {action} {endpoint!r}: {exc.strerror}; expected {_FORMS}")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return BridgeError(f"cannot {action} {endpoint!r}: permission denied (privileged port or ipc path?)")
    return BridgeError(f"cannot {action} {endpoint!r}: {exc.strerror} (errno {exc.errno})")


def _load(path: Any, *, secret: bool) -> Tuple[bytes, Optional[bytes]]:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"a CURVE certificate must be given as a file path, got {path!r}")
    if not zmq.has("curve"):
        raise BridgeError("this libzmq was built without CURVE support; install a pyzmq wheel from PyPI")
    try:
        public, secret_key = zmq.auth.load_certificate(os.fspath(path))
    except ValueError as exc:
        raise InvalidArgumentError(f"cannot read CURVE certificate {os.fspath(path)!r}: {exc}") from None
    if secret and not secret_key:
        raise InvalidArgumentError(
            f"{os.fspath(path)!r} holds only a public key; pass the secret certificate (the .key_secret file made by `framebus bridge keys`)"
        )
    return public, secret_key


def curve_server(ctx: zmq.Context, sock: zmq.Socket, certificate: Any, location: Any) -> Optional[ThreadAuthenticator]:
    """Makes ``sock`` a CURVE server with the secret certificate file ``certificate``. With a
    ``location`` (a directory of public certificates), only clients whose key is there may
    connect; returns the running authenticator to stop later. Without one, any client that
    knows the server's public key may connect (encrypted, not authenticated)."""
    public, secret = _load(certificate, secret=True)
    auth = None
    if location is not None:
        if not os.path.isdir(location):
            raise InvalidArgumentError(f"curve_location {os.fspath(location)!r} is not a directory of public certificates")
        auth = ThreadAuthenticator(ctx)
        auth.start()
        auth.configure_curve(domain="*", location=os.fspath(location))
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_server = True
    return auth


def curve_client(sock: zmq.Socket, certificate: Any, server_certificate: Any) -> None:
    """Makes ``sock`` a CURVE client of the server whose public certificate file is
    ``server_certificate``, with its own secret certificate file ``certificate`` (None: a new
    key pair, accepted only by a publisher that does not authenticate clients)."""
    server_public, _ = _load(server_certificate, secret=False)
    if certificate is None:
        public, secret = zmq.curve_keypair()
    else:
        public, secret_opt = _load(certificate, secret=True)
        secret = secret_opt or b""
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_serverkey = server_public


def create_certificates(directory: Any, name: str) -> Tuple[str, str]:
    """Writes a new CURVE key pair as ``NAME.key`` (public: give it to the other side) and
    ``NAME.key_secret`` (keep it private, mode 0600) in ``directory`` (created if needed).
    Returns the two paths."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    public, secret = zmq.auth.create_certificates(os.fspath(directory), name)
    os.chmod(secret, 0o600)
    return public, secret
