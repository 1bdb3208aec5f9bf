"""The names and bytes by which rmw_zenoh (ROS 2's Zenoh middleware, Jazzy and later) finds and
reads a topic: data key expressions, liveliness tokens, QoS strings and the per-sample
attachment. Pure Python, no Zenoh import: it only makes and parses strings and bytes.

- data key: ``<domain>/<topic without its leading '/'>/<DDS type name>/<type hash>``, e.g.
  ``0/camera/image_raw/sensor_msgs::msg::dds_::Image_/RIHS01_...``;
- liveliness tokens (under the hermetic prefix ``@ros2_lv``): a node's
  ``@ros2_lv/<domain>/<session id>/<node id>/<node id>/NN/<enclave>/<namespace>/<node>`` and a
  publisher's or subscription's ``.../<node id>/<entity id>/MP|MS/<enclave>/<namespace>/<node>/
  <topic>/<DDS type name>/<type hash>/<qos>``, names mangled ('/' becomes '%', empty is '%');
- QoS: ``<reliability>:<durability>:<history>,<depth>:<deadline s>,<ns>:<lifespan s>,<ns>:
  <liveliness>,<lease s>,<ns>``, each field empty when it is the default (reliable, volatile,
  keep-last, automatic liveliness, infinite durations); the depth is always written;
- attachment of each sample: sequence number (int64 LE), source timestamp (ns since the UNIX
  epoch, int64 LE), the GID's length (one byte, 16) and the publisher's 16-byte GID.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional, Tuple

from ..errors import InvalidArgumentError

ADMIN_SPACE = "@ros2_lv"
#: rmw's enum values (rmw/types.h).
RELIABLE, BEST_EFFORT = 1, 2
GID_SIZE = 16
_ATTACHMENT = struct.Struct("<qqB16s")

def dds_type_name(ros_type: str) -> str:
    """``pkg/msg/Name`` -> ``pkg::msg::dds_::Name_``."""
    pkg, kind, name = ros_type.split("/")
    return f"{pkg}::{kind}::dds_::{name}_"


#: Message definitions (``.msg`` fields) of the types framebus uses that rosbags' store does
#: not ship: registered before their hash is computed.
EXTRA_TYPES = {
    "foxglove_msgs/msg/CompressedVideo": "builtin_interfaces/Time timestamp\nstring frame_id\nuint8[] data\nstring format\n",
}


def type_hash(ros_type: str) -> str:
    """The REP-2011 type hash (``RIHS01_<sha256>``) of a ROS 2 message type, from rosbags'
    Jazzy type store (the same for Kilted and Rolling for the types framebus uses), with the
    types of ``EXTRA_TYPES`` registered from their definitions."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS2_JAZZY)
    if ros_type in EXTRA_TYPES:
        store.register(get_types_from_msg(EXTRA_TYPES[ros_type], ros_type))
    return str(store.hash_rihs01(ros_type))


def check_topic(topic: str) -> str:
    """The fully qualified topic name (leading '/'), or ValueError for a name ROS rejects."""
    if not isinstance(topic, str):
        raise TypeError(f"the topic must be a string such as '/camera/image_raw', got {topic!r}")
    name = topic if topic.startswith("/") else "/" + topic
    parts = name[1:].split("/")
    ok = all(p and (p[0].isalpha() or p[0] == "_") and all(c.isalnum() or c == "_" for c in p) for p in parts)
    if not ok or "__" in name:
        raise InvalidArgumentError(
            f"{topic!r} is not a valid ROS 2 topic name: use letters, digits and '_' between '/', each part starting with a letter or '_'"
        )
    return name


def check_domain(domain: int) -> int:
    if isinstance(domain, bool) or not isinstance(domain, int) or not 0 <= domain <= 232:
        raise InvalidArgumentError(f"the ROS domain id must be an integer 0..232, got {domain!r}")
    return domain


def mangle(name: str) -> str:
    """'/' -> '%'; an empty name is '%'."""
    return name.replace("/", "%") if name else "%"


def topic_key(domain: int, topic: str, ros_type: str, hash_: str) -> str:
    """The data key expression of a topic."""
    return f"{domain}/{check_topic(topic)[1:]}/{dds_type_name(ros_type)}/{hash_}"


def qos_string(reliability: int = RELIABLE, depth: int = 10, *, transient_local: bool = False, keep_all: bool = False) -> str:
    """A QoS profile as rmw_zenoh writes it in liveliness tokens (defaults left empty)."""
    rel = "" if reliability == RELIABLE else str(reliability)
    dur = "1" if transient_local else ""
    hist = "2" if keep_all else ""
    return f"{rel}:{dur}:{hist},{depth}:,:,:,,"


def parse_qos(text: str) -> Tuple[int, int, int, int]:
    """(reliability, durability, history, depth) of a QoS string (defaults filled in: 1, 2, 1)."""
    fields = text.split(":")
    if len(fields) != 6:
        raise ValueError(f"malformed rmw_zenoh QoS string {text!r}")
    hist, _, depth = fields[2].partition(",")
    return (int(fields[0] or RELIABLE), int(fields[1] or 2), int(hist or 1), int(depth or 0))


def node_token(domain: int, zid: str, node_id: int, namespace: str, node: str, enclave: str = "") -> str:
    """The liveliness token of a node."""
    return f"{ADMIN_SPACE}/{domain}/{zid}/{node_id}/{node_id}/NN/{mangle(enclave)}/{mangle(namespace)}/{node}"


def entity_token(
    kind: str, domain: int, zid: str, node_id: int, entity_id: int, namespace: str, node: str,
    topic: str, ros_type: str, hash_: str, qos: str, enclave: str = "",
) -> str:
    """The liveliness token of a publisher (``MP``) or subscription (``MS``)."""
    if kind not in ("MP", "MS"):
        raise ValueError(f"entity kind must be 'MP' or 'MS', got {kind!r}")
    return (
        f"{ADMIN_SPACE}/{domain}/{zid}/{node_id}/{entity_id}/{kind}/{mangle(enclave)}/{mangle(namespace)}/{node}/"
        f"{mangle(check_topic(topic))}/{dds_type_name(ros_type)}/{hash_}/{qos}"
    )


@dataclass(frozen=True)
class Token:
    """A parsed liveliness token."""

    domain: int
    zid: str
    node_id: int
    entity_id: int
    kind: str
    enclave: str
    namespace: str
    node: str
    topic: Optional[str] = None
    dds_type: Optional[str] = None
    type_hash: Optional[str] = None
    qos: Optional[str] = None


def parse_token(key: str) -> Token:
    """Parses a node or entity liveliness token; ValueError if it is not one."""
    parts = key.split("/")  # entity tokens may carry more chunks after the QoS (hiroz: its buffer backends), ignored
    if parts[0] != ADMIN_SPACE or (len(parts) != 9 and len(parts) < 13):
        raise ValueError(f"not an rmw_zenoh liveliness token: {key!r}")

    def unmangle(s: str) -> str:
        return "" if s == "%" else s.replace("%", "/")

    try:
        base = (int(parts[1]), parts[2], int(parts[3]), int(parts[4]), parts[5], unmangle(parts[6]), unmangle(parts[7]), parts[8])
    except ValueError:
        raise ValueError(f"not an rmw_zenoh liveliness token (domain and ids are numbers): {key!r}") from None
    if len(parts) >= 13:
        return Token(*base, "/" + unmangle(parts[9]).lstrip("/"), parts[10], parts[11], parts[12])
    return Token(*base)


def pack_attachment(seq: int, timestamp_ns: int, gid: bytes) -> bytes:
    """The attachment of one sample (33 bytes)."""
    if len(gid) != GID_SIZE:
        raise ValueError(f"a GID is {GID_SIZE} bytes, got {len(gid)}")
    return _ATTACHMENT.pack(seq, timestamp_ns, GID_SIZE, gid)


def unpack_attachment(data: bytes) -> Tuple[int, int, bytes]:
    """(sequence number, source timestamp ns, GID) of an attachment; ValueError if malformed."""
    if len(data) != _ATTACHMENT.size:
        raise ValueError(f"an rmw_zenoh attachment is {_ATTACHMENT.size} bytes, got {len(data)}")
    seq, ts, n, gid = _ATTACHMENT.unpack(data)
    if n != GID_SIZE:
        raise ValueError(f"an rmw_zenoh attachment carries a {GID_SIZE}-byte GID, this one says {n}")
    return seq, ts, gid
