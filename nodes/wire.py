"""The binary wire format every node speaks (docs/architecture.md, "Wire format").

One fixed 44-byte header, network byte order, then the payload::

    offset size field    meaning
    0      2    magic    b"TB"
    2      1    version  WIRE_VERSION
    3      1    type     MsgType
    4      1    proto    Proto (the layer stack that sent it)
    5      1    flags    Flag bits
    6      2    sender   node id of the transport-level sender
    8      4    rseq     reliable-multicast sequence number of `sender` (0: unreliable)
    12     2    origin   node id of the process that TO-multicast the message
    14     4    mno      origin's message number (the `n` of mid "origin:n")
    18     4    seq      global sequence number (sequencer ORDER), or an aux number
    22     4    hint     piggybacked delay hint in microseconds (SETO, 000 Fig. 4), signed
    26     4    slot     QoS slot number (004), or an aux number
    30     8    ts       origin's local clock at TO-multicast, ns (what a real process could stamp)
    38     2    aux      on reliable-multicast messages the sender's incarnation (restarts);
                         on other control messages protocol-specific (e.g. a planner round)
    40     4    length   payload length in bytes

The same layout is dissected from pcaps by `analysis/` (scapy layer and fast reader), so
any change here bumps WIRE_VERSION.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import MISSING, fields
from typing import Any, Final, TypeVar

try:
    # mypyc (nodes/fastpath.py) reads this decorator; without mypy installed (the node image)
    # it is a no-op: it only tells the compiler a class may be subclassed by Python code.
    from mypy_extensions import mypyc_attr
except ImportError:  # pragma: no cover -- images without the dev tools

    def mypyc_attr(*_args: Any, **_kwargs: Any) -> Any:  # type: ignore[misc,no-redef,unused-ignore]
        return lambda cls: cls

MAGIC: Final = b"TB"
WIRE_VERSION: Final = 1
HEADER: Final = struct.Struct("!2sBBBBHIHIIiIQHI")
HEADER_SIZE: Final = HEADER.size  # 44

# Field names in header order (after magic and version), for dissectors.
FIELDS = (
    "type",
    "proto",
    "flags",
    "sender",
    "rseq",
    "origin",
    "mno",
    "seq",
    "hint",
    "slot",
    "ts",
    "aux",
    "length",
)


class MsgType(enum.IntEnum):
    DATA = 1  # application payload, reliable multicast
    ORDER = 2  # sequencer: (origin, mno) gets global number seq
    NACK = 3  # negative ack: origin's rseq in [rseq, seq] missing, please resend
    ACK = 4  # positive ack: receiver holds origin's stream up to rseq (for buffer GC)
    HEARTBEAT = 5  # sender's highest rseq, so that a lost last message is noticed
    PING = 6  # round-trip probe (Fast SETO delay estimation, failure detection)
    PONG = 7
    DELAY = 8  # Fast SETO: the designated process tells a process its delay row
    ESTIMATE = 9  # Fast SETO: a process sends its one-way delay vector
    DUMMY = 10  # QoS total order: keep-alive for an idle slot (004)
    ALIVE = 11  # failure-detector heartbeat
    FETCH = 12  # ask for data messages by (origin, mno) (sequencer relay)


class Proto(enum.IntEnum):
    """The wire ids of the first protocols. Every protocol's id is in its catalogue entry
    (nodes/protocols/catalogue.py), which registers it here with `register_proto`."""

    RAW = 0
    RELIABLE = 1
    SEQUENCER = 2
    SETO = 3
    FAST_SETO = 4


class Flag(enum.IntFlag):
    NONE = 0
    RETRANSMIT = 1  # this datagram is a retransmission
    RELAYED = 2  # a data message resent by someone other than its origin


class WireError(ValueError):
    """A datagram that is not a well-formed testbed message; `reason` is a short slug that
    nodes count per kind (`testbed:type=Transport` `MalformedReasons`)."""

    def __init__(self, message: str, reason: str = "malformed"):
        super().__init__(message)
        self.reason = reason


class Header:
    """The decoded header (fields as in the table above). Built for every datagram a node
    sends or decodes, so Header and Message are plain slotted classes rather than frozen
    dataclasses: compiled (nodes/fastpath.py), a dataclass's `__init__` stays interpreted
    Python, these are native (docs/architecture.md, "Compiled hot path"). Same constructor
    (parameters, defaults), equal and hashable by value as the dataclasses were; the fields
    are `Final`, so mypy rejects an assignment to one (the simulator shares one decoded
    message among its receivers): change a header with `with_`."""

    __slots__ = ("type", "proto", "flags", "sender", "rseq", "origin", "mno", "seq", "hint",
                 "slot", "ts", "aux", "length")  # FIELDS, spelled out for mypyc

    def __init__(self, type: MsgType, proto: int = Proto.RAW, flags: int = 0,
                 sender: int = 0, rseq: int = 0, origin: int = 0, mno: int = 0, seq: int = 0,
                 hint: int = 0, slot: int = 0, ts: int = 0, aux: int = 0, length: int = 0):
        self.type: Final = type
        self.proto: Final = proto  # a Proto member, or another registered wire id
        self.flags: Final = flags
        self.sender: Final = sender
        self.rseq: Final = rseq
        self.origin: Final = origin
        self.mno: Final = mno
        self.seq: Final = seq
        self.hint: Final = hint
        self.slot: Final = slot
        self.ts: Final = ts
        self.aux: Final = aux
        self.length: Final = length

    def _key(self) -> tuple[int, ...]:
        return (self.type, self.proto, self.flags, self.sender, self.rseq, self.origin,
                self.mno, self.seq, self.hint, self.slot, self.ts, self.aux, self.length)

    def __eq__(self, other: object) -> bool:
        return type(other) is Header and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in FIELDS)
        return f"Header({inner})"

    def with_(self, **changes: int) -> Header:
        """A copy with `changes` (a field name that is not one is a TypeError)."""
        values: dict[str, Any] = {name: getattr(self, name) for name in FIELDS}
        values.update(changes)
        return Header(**values)


class Message:
    """A header and its payload (a plain slotted class for speed, as `Header` explains)."""

    __slots__ = ("header", "payload")

    def __init__(self, header: Header, payload: bytes = b""):
        self.header: Final = header
        self.payload: Final = payload

    def __eq__(self, other: object) -> bool:
        return (type(other) is Message and self.header == other.header
                and self.payload == other.payload)

    def __hash__(self) -> int:
        return hash((self.header, self.payload))

    def __repr__(self) -> str:
        return f"Message(header={self.header!r}, payload={self.payload!r})"

    @property
    def mid(self) -> str:
        """The delivery-log message id, "origin:n"."""
        return f"{self.header.origin}:{self.header.mno}"


_A = TypeVar("_A")


def quick_init(cls: type[_A]) -> type[_A]:
    """Give a frozen, slotted dataclass a faster `__init__` with the same signature:
    the generated one looks up `object.__setattr__` once per field, which made building
    headers and actions a tenth of the simulator's time (py-spy); this one sets each slot
    through its descriptor, bound once. Instances stay frozen, equal and hashable as before."""
    every = fields(cls)  # type: ignore[arg-type]
    names = [f.name for f in every]
    params = ", ".join(f.name if f.default is MISSING else f"{f.name}=_d_{f.name}"
                       for f in every)
    scope: dict[str, Any] = {f"_s_{n}": cls.__dict__[n].__set__ for n in names}
    scope.update({f"_d_{f.name}": f.default for f in every if f.default is not MISSING})
    body = "".join(f"    _s_{n}(self, {n})\n" for n in names)
    exec(f"def __init__(self, {params}):\n{body}", scope)  # noqa: S102 -- fixed field names
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[misc, method-assign]
    return cls


# Enum construction by value is slow on the hot path; look members up in plain dicts.
_TYPES = {int(t): t for t in MsgType}
_PROTOS: dict[int, int] = {int(p): p for p in Proto}


def register_proto(wire_id: int, name: str) -> None:
    """Accept `wire_id` in decoded headers (the protocol catalogue registers every entry's)."""
    if not 0 <= wire_id <= 255:
        raise ValueError(f"protocol {name!r}: wire id {wire_id} does not fit the u8 field")
    _PROTOS.setdefault(wire_id, wire_id)

# The payload shape of each message type, checked once where the datagram is decoded:
# (entry size, fewest entries, most entries). An entry size of 0 means "no payload". The
# 6-byte entries are the sequencer's (origin, mno) pairs (ORDER, FETCH) and Fast SETO's
# (member, microseconds) vector entries (ESTIMATE, DELAY). FETCH asks for at most 64
# messages (nodes/protocols/sequencer.py `_fetch_missing`), which bounds what one FETCH can
# make the sequencer send back, and for none when it only reports the member's delivered
# number (its header `seq`). An ORDER may be empty: the sequencer's answer to a restarted
# member's join request when it has nothing to number (the member joins at its `seq`). Types
# not listed (DATA, DUMMY) carry any payload.
ENTRY_SIZE = 6
FETCH_MAX = 64
RULED_PROTOS = frozenset(int(p) for p in Proto)  # the ids PAYLOAD_RULES describes
PAYLOAD_RULES: dict[MsgType, tuple[int, int, int]] = {
    MsgType.ORDER: (ENTRY_SIZE, 0, 65535 // ENTRY_SIZE),
    MsgType.FETCH: (ENTRY_SIZE, 0, FETCH_MAX),
    MsgType.ESTIMATE: (ENTRY_SIZE, 1, 4097),
    MsgType.DELAY: (ENTRY_SIZE, 1, 4096),
    MsgType.NACK: (0, 0, 0),
    MsgType.ACK: (0, 0, 0),
    MsgType.HEARTBEAT: (0, 0, 0),
    MsgType.PING: (0, 0, 0),
    MsgType.PONG: (0, 0, 0),
    MsgType.ALIVE: (0, 0, 0),
}


def encode(msg: Message) -> bytes:
    h = msg.header
    return (
        HEADER.pack(
            MAGIC,
            WIRE_VERSION,
            int(h.type),
            int(h.proto),
            h.flags,
            h.sender,
            h.rseq,
            h.origin,
            h.mno,
            h.seq,
            h.hint,
            h.slot,
            h.ts,
            h.aux,
            len(msg.payload),
        )
        + msg.payload
    )


def decode(data: bytes) -> Message:
    """Parse one datagram; WireError (with a `reason`) for anything that is not exactly one
    well-formed message: short, wrong magic or version, a length field that does not match
    the datagram, an unknown type or protocol, a payload of the wrong shape for its type."""
    if len(data) < HEADER_SIZE:
        raise WireError(f"datagram of {len(data)} bytes is shorter than the header", "short")
    (magic, version, typ, proto, flags, sender, rseq, origin, mno, seq, hint, slot, ts, aux,
     length) = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise WireError(f"bad magic {magic!r}", "magic")
    if version != WIRE_VERSION:
        raise WireError(f"wire version {version}, expected {WIRE_VERSION}", "version")
    if HEADER_SIZE + length != len(data):
        raise WireError(f"payload length {length} does not match the datagram's "
                        f"{len(data) - HEADER_SIZE} bytes", "length")
    mtype = _TYPES.get(typ)
    mproto = _PROTOS.get(proto)
    if mtype is None or mproto is None:
        raise WireError(f"unknown message type {typ} or protocol {proto}", "type")
    # The shapes are those of the first protocols' messages; a protocol added through the
    # catalogue may give a type another payload (token-ring's token is an ORDER), so its
    # payloads are left to its own checks (docs/protocols.md).
    rule = PAYLOAD_RULES.get(mtype) if proto in RULED_PROTOS else None
    if rule is not None:
        size, fewest, most = rule
        if size == 0:
            if length:
                raise WireError(f"{mtype.name} carries no payload, got {length} bytes",
                                "payload")
        elif length % size or not fewest <= length // size <= most:
            raise WireError(f"{mtype.name} payload of {length} bytes is not {fewest}..{most} "
                            f"entries of {size} bytes", "payload")
    header = Header(mtype, mproto, flags, sender, rseq, origin, mno, seq, hint, slot, ts, aux,
                    length)
    return Message(header, bytes(data[HEADER_SIZE : HEADER_SIZE + length]))
