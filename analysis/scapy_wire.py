"""Scapy layer for the testbed wire header (`nodes/wire.py`): dissection and crafting.

Importing this module binds the layer under UDP for any port, after scapy's own port
bindings: a UDP payload that starts with the magic and version becomes `TestbedWire`,
any other stays what scapy made of it (Raw for unknown ports). Crafting::

    Ether() / IP(dst="127.0.0.1") / UDP(sport=4000, dport=4001) / TestbedWire(type=1) / b"x"

`length` defaults to the payload size. `scapy_rows` is the slow, obviously-correct
reference for `analysis.pcap.read_pcap`: the same columns, from scapy's dissection.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scapy.config import conf
from scapy.fields import (
    ByteEnumField,
    ByteField,
    FlagsField,
    IntField,
    LongField,
    ShortField,
    SignedIntField,
    StrFixedLenField,
)
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6, _IPv6ExtHdr
from scapy.packet import Packet, bind_bottom_up
from scapy.utils import PcapNgReader, PcapReader

from analysis.pcap_decode import AGENT_COLUMNS, agent_message_type
from nodes import maelstrom, wire

_MSG_TYPES = {int(t): t.name for t in wire.MsgType}
_PROTOS = {int(p): p.name for p in wire.Proto}
_FLAGS = [f.name or "" for f in wire.Flag if f.value] + [f"bit{i}" for i in range(1, 8)]


class TestbedWire(Packet):
    """The 44-byte testbed header; field names and order as in `nodes.wire.FIELDS`."""

    name = "TestbedWire"
    fields_desc = [
        StrFixedLenField("magic", wire.MAGIC, 2),
        ByteField("version", wire.WIRE_VERSION),
        ByteEnumField("type", int(wire.MsgType.DATA), _MSG_TYPES),
        ByteEnumField("proto", int(wire.Proto.RAW), _PROTOS),
        FlagsField("flags", 0, 8, _FLAGS),
        ShortField("sender", 0),
        IntField("rseq", 0),
        ShortField("origin", 0),
        IntField("mno", 0),
        IntField("seq", 0),
        SignedIntField("hint", 0),
        IntField("slot", 0),
        LongField("ts", 0),
        ShortField("aux", 0),
        IntField("length", None),
    ]

    @classmethod
    def dispatch_hook(cls, _pkt: bytes | None = None, *args: Any, **kargs: Any) -> type:
        # Bound under UDP for every port, so refuse payloads that are not ours; the host
        # agent's frames are the other kind of ours.
        if _pkt is not None and len(_pkt) >= maelstrom.FRAME.size and _pkt[:3] == (
                maelstrom.MAGIC + bytes([maelstrom.FRAME_VERSION])):
            return AgentFrame
        if _pkt is not None and (len(_pkt) < wire.HEADER_SIZE
                                 or _pkt[:3] != wire.MAGIC + bytes([wire.WIRE_VERSION])):
            return conf.raw_layer  # type: ignore[no-any-return]
        return cls

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.length is None:
            pkt = pkt[:40] + len(pay).to_bytes(4, "big") + pkt[44:]
        return pkt + pay

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return s[: self.length], s[self.length:]

    def mysummary(self) -> str:
        return str(self.sprintf("TestbedWire %type% %proto% %origin%:%mno% seq=%seq%"))


class AgentFrame(Packet):
    """The Maelstrom host agent's 16-byte frame header (nodes/maelstrom.py FRAME), then a
    slice of the message's JSON line."""

    name = "AgentFrame"
    fields_desc = [
        StrFixedLenField("magic", maelstrom.MAGIC, 2),
        ByteField("version", maelstrom.FRAME_VERSION),
        ByteField("zero", 0),
        LongField("number", 0),
        ShortField("index", 0),
        ShortField("count", 1),
    ]

    def mysummary(self) -> str:
        return str(self.sprintf("AgentFrame %number% %index%/%count%"))


# No field constraint: tried for every UDP port that scapy has no binding for.
bind_bottom_up(UDP, TestbedWire)

WIRE_FIELDS = ("version", *wire.FIELDS)


def scapy_rows(path: str | Path, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """Dissect a capture with scapy into dicts keyed like `read_pcap`'s columns."""
    path = Path(path)
    with path.open("rb") as f:
        magic = f.read(4)
    reader_cls = PcapNgReader if magic == b"\x0a\x0d\x0d\x0a" else PcapReader
    with reader_cls(str(path)) as reader:
        for k, pkt in enumerate(reader):
            if limit is not None and k >= limit:
                break
            yield packet_row(pkt)


def packet_row(pkt: Packet) -> dict[str, Any]:
    """One packet's fields (None where absent), as `read_pcap` names them."""
    row: dict[str, Any] = {
        "ts_ns": _ts_ns(pkt),
        "frame_len": pkt.wirelen if pkt.wirelen is not None else len(pkt),
        "cap_len": len(bytes(pkt)) if pkt.original is None else len(pkt.original),
        "src": None, "dst": None, "proto": None, "sport": None, "dport": None,
        "ip_len": None, "ip_version": None,
    }
    row.update(dict.fromkeys(f"tb_{name}" for name in WIRE_FIELDS))
    row.update(dict.fromkeys(AGENT_COLUMNS))
    l4: Packet | None = None
    if IP in pkt:
        ip = pkt[IP]
        row.update(src=ip.src, dst=ip.dst, proto=ip.proto, ip_len=ip.len, ip_version=4)
        if ip.frag == 0:
            l4 = ip.payload
    elif IPv6 in pkt:
        ip6 = pkt[IPv6]
        row.update(src=ip6.src, dst=ip6.dst, ip_len=ip6.plen + 40, ip_version=6)
        nh, upper = ip6.nh, ip6.payload
        while isinstance(upper, _IPv6ExtHdr):
            nh, upper = upper.nh, upper.payload
        row["proto"] = nh
        l4 = upper
    if isinstance(l4, UDP | TCP):
        row.update(sport=l4.sport, dport=l4.dport)
    if isinstance(l4, UDP) and TestbedWire in l4:
        tb = l4[TestbedWire]
        for name in WIRE_FIELDS:
            row[f"tb_{name}"] = int(tb.getfieldval(name))
    if isinstance(l4, UDP) and AgentFrame in l4:
        fr = l4[AgentFrame]
        index = int(fr.getfieldval("index"))
        row.update(tm_number=fr.number, tm_fragment=index, tm_count=fr.count)
        if index == 0:
            payload = bytes(fr.payload)
            whole = fr.count == 1 and l4.len is not None and \
                len(payload) == l4.len - 8 - maelstrom.FRAME.size
            row["tm_type"] = agent_message_type(payload, whole)
    return row


def _ts_ns(pkt: Packet) -> int:
    t = pkt.time
    # scapy keeps pcap timestamps as EDecimal, exact to the nanosecond.
    return int(t * 1_000_000_000)
