"""Nodes survive hostile datagrams (docs/security.md, "Hostile datagrams").

Property-based (hypothesis): each protocol's node core is fed header-valid random messages --
types, senders, origins, numbers and payload entries drawn near the values a real group uses,
so that many pass the edge checks and reach the protocol -- interleaved with its timers, plus
random bytes and mutated encodings. No exception may escape, and every datagram is either
delivered or counted. Bounded: a few hundred examples per protocol, seconds each.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodes.config import Member, NodeConfig, WorkloadConfig
from nodes.core import NodeCore
from nodes.edge import Gate
from nodes.protocols.fast_seto import RATE_ID
from nodes.protocols.sequencer import mid_key
from nodes.wire import (
    FETCH_MAX,
    HEADER_SIZE,
    Flag,
    Header,
    Message,
    MsgType,
    Proto,
    WireError,
    decode,
    encode,
)

N = 4
PROTOS = {"sequencer": Proto.SEQUENCER, "seto": Proto.SETO, "fast-seto": Proto.FAST_SETO}
ENTRY = struct.Struct("!Hi")
T0 = 1_000_000_000_000


def make_core(protocol: str, me: int, incarnation: int = 0) -> NodeCore:
    members = [Member(i, f"h{i}", "127.0.0.1", 7000 + i) for i in range(N)]
    cfg = NodeConfig(node_id=me, name=f"h{me}", members=members, protocol=protocol,
                     params={"sequencer": "h0", "min_samples": 1}, log_path="", seed=1,
                     start_at_ns=T0, duration_ns=10**9, drain_ns=0,
                     workload=WorkloadConfig(True, 10.0, 16), incarnation=incarnation)
    return NodeCore(cfg, T0)


member_ish = st.one_of(st.integers(0, N - 1), st.integers(0, N - 1), st.integers(0, 0xFFFF))
small = st.one_of(st.integers(0, 12), st.integers(0, 2**32 - 1))


@st.composite
def entries(draw: Any) -> bytes:
    n = draw(st.integers(0, 8))
    out = b""
    for _ in range(n):
        m = draw(st.one_of(member_ish, st.just(RATE_ID)))
        v = draw(st.one_of(st.integers(-5, 50_000), st.integers(-2**31, 2**31 - 1)))
        out += ENTRY.pack(m, v)
    return out


@st.composite
def messages(draw: Any, proto: Proto) -> bytes:
    mtype = draw(st.sampled_from(list(MsgType)))
    p = draw(st.one_of(st.just(proto), st.just(proto), st.sampled_from(list(Proto))))
    if mtype == MsgType.ALIVE and draw(st.booleans()):
        p = Proto.RAW
    header = Header(
        mtype, p,
        flags=draw(st.sampled_from([0, 0, int(Flag.RETRANSMIT), int(Flag.RELAYED), 3])),
        sender=draw(member_ish), rseq=draw(small), origin=draw(member_ish),
        mno=draw(small), seq=draw(small),
        hint=draw(st.one_of(st.integers(0, 5000), st.integers(-2**31, 2**31 - 1))),
        slot=draw(small), ts=draw(st.integers(0, 2**64 - 1)),
        aux=draw(st.one_of(st.integers(0, 2), st.integers(0, 0xFFFF))))
    payload = draw(st.one_of(entries(), st.binary(max_size=64)))
    data = encode(Message(header, payload))
    mutation = draw(st.integers(0, 9))
    if mutation == 0:  # truncated
        data = data[: draw(st.integers(0, len(data)))]
    elif mutation == 1:  # a length that lies
        data = data + draw(st.binary(min_size=1, max_size=8))
    elif mutation == 2:  # one byte flipped anywhere
        i = draw(st.integers(0, len(data) - 1))
        data = data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1:]
    return data


def drive(core: NodeCore, datagrams: list[bytes], gaps: list[int]) -> None:
    """Feed the datagrams with the node's timers firing as true time advances."""
    t = T0
    due: dict[str, int] = {}

    def take(out: Any, now: int) -> None:
        for key, delay in out.timers:
            due[key] = now + max(delay, 0)

    take(core.start(t), t)
    for i, data in enumerate(datagrams):
        t += gaps[i % len(gaps)]
        if i % 5 == 0:
            take(core.broadcast(t), t)
        take(core.receive(data, t), t)
        for key in [k for k, at in due.items() if at <= t]:
            del due[key]
            take(core.timer(key, t), t)
    c = core.counters
    assert c.datagrams_in == len(datagrams)
    assert c.errors == 0


@pytest.mark.parametrize("protocol", sorted(PROTOS))
@pytest.mark.parametrize("me", [0, 1], ids=["sequencer", "member"])
def test_protocols_survive_random_header_valid_messages(protocol: str, me: int) -> None:
    proto = PROTOS[protocol]

    @settings(max_examples=150, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(messages(proto), min_size=1, max_size=60),
           st.lists(st.integers(0, 300_000_000), min_size=1, max_size=8))
    def run(datagrams: list[bytes], gaps: list[int]) -> None:
        drive(make_core(protocol, me), datagrams, gaps)

    run()


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.binary(max_size=200))
def test_random_bytes_never_raise_anything_but_wire_error(data: bytes) -> None:
    try:
        decode(data)
    except WireError as exc:
        assert exc.reason in {"short", "magic", "version", "length", "type", "payload"}


# -- the crashes measured in the issue, one by one ---------------------------------------------
def _from(sender: int, mtype: MsgType, proto: Proto, payload: bytes = b"", **fields: int
          ) -> bytes:
    return encode(Message(Header(mtype, proto, sender=sender, **fields), payload))


def test_order_payload_not_a_multiple_of_the_entry_size_is_malformed() -> None:
    core = make_core("sequencer", 1)
    core.start(T0)
    core.receive(_from(0, MsgType.ORDER, Proto.SEQUENCER, b"\x00" * 7, rseq=1, origin=0,
                       seq=1), T0)
    assert core.counters.malformed == 1
    assert core.counters.reasons == {"malformed:payload": 1}


def test_estimate_with_a_non_member_is_rejected_not_a_key_error() -> None:
    core = make_core("fast-seto", 0)
    core.start(T0)
    bad = ENTRY.pack(1, 100) + ENTRY.pack(2, 100) + ENTRY.pack(77, 100)
    core.receive(_from(3, MsgType.ESTIMATE, Proto.FAST_SETO, bad), T0)
    missing = ENTRY.pack(1, 100)  # h3's vector must name 0, 1 and 2
    core.receive(_from(3, MsgType.ESTIMATE, Proto.FAST_SETO, missing), T0)
    assert core.counters.rejected == 2
    assert core.counters.reasons == {"rejected:entries": 2}


def test_data_from_a_non_member_origin_is_rejected() -> None:
    core = make_core("sequencer", 1)
    core.start(T0)
    core.receive(_from(2, MsgType.DATA, Proto.SEQUENCER, b"x", rseq=1, origin=9, mno=1), T0)
    core.receive(_from(9, MsgType.DATA, Proto.SEQUENCER, b"x", rseq=1, origin=9, mno=1), T0)
    assert core.counters.reasons == {"rejected:origin": 1, "rejected:sender": 1}


def test_order_only_from_the_sequencer_and_inside_the_window() -> None:
    core = make_core("sequencer", 1)
    core.start(T0)
    entry = struct.pack("!HI", 2, 1)
    core.receive(_from(2, MsgType.ORDER, Proto.SEQUENCER, entry, rseq=1, origin=2, seq=1), T0)
    core.receive(_from(0, MsgType.ORDER, Proto.SEQUENCER, entry, rseq=1, origin=0,
                       seq=2**31), T0)
    core.receive(_from(0, MsgType.DATA, Proto.SEQUENCER, b"x", rseq=2**31, origin=0, mno=1),
                 T0)
    assert core.counters.reasons == {"rejected:role": 1, "rejected:window": 2}
    # ... and an honest ORDER from the sequencer goes through.
    core.receive(_from(0, MsgType.ORDER, Proto.SEQUENCER, entry, rseq=1, origin=0, seq=1), T0)
    assert core.counters.rejected == 3
    assert core.protocol.order == {1: mid_key(2, 1)}  # type: ignore[attr-defined]


def test_forged_ack_cannot_purge_the_send_buffer() -> None:
    core = make_core("sequencer", 1)
    core.start(T0)
    core.broadcast(T0)
    rm = core.protocol.rm.layer  # type: ignore[attr-defined]
    assert list(rm.send_buffer) == [1]
    for peer in (0, 2, 3):
        core.receive(_from(peer, MsgType.ACK, Proto.SEQUENCER, rseq=1000), T0)
    assert list(rm.send_buffer) == [1] and core.counters.reasons == {"rejected:range": 3}


def test_fetch_is_bounded_and_only_served_by_the_sequencer() -> None:
    """The amplifier of the issue: one 1,140-byte FETCH made the sequencer send 179 data
    messages. A FETCH now names at most FETCH_MAX messages, and only the sequencer serves."""
    seq = make_core("sequencer", 0)
    seq.start(T0)
    for mno in range(1, 200):
        seq.receive(_from(2, MsgType.DATA, Proto.SEQUENCER, b"p" * 1024, rseq=mno, origin=2,
                          mno=mno), T0)
    want = b"".join(struct.pack("!HI", 2, m) for m in range(1, 191))
    request = _from(3, MsgType.FETCH, Proto.SEQUENCER, want)
    assert len(request) == HEADER_SIZE + 1140
    assert seq.receive(request, T0).sends == []
    assert seq.counters.reasons == {"malformed:payload": 1}
    ok = _from(3, MsgType.FETCH, Proto.SEQUENCER, want[: FETCH_MAX * 6])
    answer = seq.receive(ok, T0).sends
    assert len(answer) == FETCH_MAX
    member = make_core("sequencer", 1)
    member.start(T0)
    assert member.receive(ok, T0).sends == []
    assert member.counters.reasons == {"rejected:role": 1}


def test_a_fetch_reports_at_most_what_the_sequencer_numbered() -> None:
    """A FETCH's header `seq` is the member's last delivered number, which lets the
    sequencer drop what every member delivered from its relay store: a number beyond what
    the sequencer numbered is refused (it would drop what a member still needs); an empty
    FETCH, a report alone, passes."""
    seq = make_core("sequencer", 0)
    seq.start(T0)
    seq.receive(_from(2, MsgType.DATA, Proto.SEQUENCER, b"p", rseq=1, origin=2, mno=1), T0)
    seq.timer("seq:flush", T0)
    assert seq.protocol.g == 1  # type: ignore[attr-defined]
    assert seq.receive(_from(3, MsgType.FETCH, Proto.SEQUENCER, seq=2), T0).sends == []
    assert seq.counters.reasons == {"rejected:window": 1}
    seq.receive(_from(3, MsgType.FETCH, Proto.SEQUENCER, seq=1), T0)
    assert seq.counters.rejected == 1 and seq.counters.malformed == 0
    assert seq.protocol.delivered_at[3] == 1  # type: ignore[attr-defined]


def test_gate_leaves_unknown_protocols_to_generic_checks() -> None:
    class Other:
        proto = "not-in-the-table"

    gate = Gate(0, [0, 1], Other(), None, None)
    msg = Message(Header(MsgType.DUMMY, Proto.RAW, sender=1))
    assert gate.check(msg) is None
    assert gate.check(Message(Header(MsgType.DUMMY, Proto.RAW, sender=5))) == "sender"


def test_relayed_copies_from_the_sequencer_pass_the_gate() -> None:
    """A FETCH answer keeps its origin's header (sender = origin), flagged RELAYED."""
    seq = make_core("sequencer", 0)
    seq.start(T0)
    seq.receive(_from(2, MsgType.DATA, Proto.SEQUENCER, b"p", rseq=1, origin=2, mno=1), T0)
    (_, data, _), = seq.receive(_from(3, MsgType.FETCH, Proto.SEQUENCER,
                                      struct.pack("!HI", 2, 1)), T0).sends
    member = make_core("sequencer", 3)
    member.start(T0)
    member.receive(data, T0)
    assert member.counters.rejected == 0 and member.counters.malformed == 0
    assert mid_key(2, 1) in member.protocol.received  # type: ignore[attr-defined]


def test_a_restarted_member_takes_its_earlier_incarnations_relayed_messages() -> None:
    """A message the crashed incarnation sent, ordered after the restarted member joined,
    comes back only as the sequencer's relayed copy, which names this member as sender: the
    gate lets it through. A relayed copy of the present incarnation, or one not relayed,
    with this member as sender is still refused."""
    seq = make_core("sequencer", 0)
    seq.start(T0)
    seq.receive(_from(2, MsgType.DATA, Proto.SEQUENCER, b"p", rseq=1, origin=2, mno=1), T0)
    (_, data, _), = seq.receive(_from(2, MsgType.FETCH, Proto.SEQUENCER,
                                      struct.pack("!HI", 2, 1)), T0).sends
    assert decode(data).header.sender == 2 and decode(data).header.aux == 0
    restarted = make_core("sequencer", 2, incarnation=1)
    restarted.start(T0)
    restarted.receive(data, T0)
    assert restarted.counters.rejected == 0
    assert mid_key(2, 1) in restarted.protocol.received  # type: ignore[attr-defined]
    relayed = int(Flag.RELAYED)
    restarted.receive(_from(2, MsgType.DATA, Proto.SEQUENCER, b"q", flags=relayed, rseq=2,
                            origin=2, mno=2, aux=1), T0)
    restarted.receive(_from(2, MsgType.DATA, Proto.SEQUENCER, b"q", rseq=2, origin=2, mno=2),
                      T0)
    assert restarted.counters.reasons == {"rejected:sender": 2}
    first = make_core("sequencer", 2)
    first.start(T0)
    first.receive(data, T0)
    assert first.counters.reasons == {"rejected:sender": 1}


# -- docs/security.md, "Hostile datagrams": each decode refusal and edge rule, one by one ------
def _valid() -> bytes:
    return _from(2, MsgType.DATA, Proto.SEQUENCER, b"x", rseq=1, origin=2, mno=1)


def _with(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value):]


@pytest.mark.parametrize(("data", "reason"), [
    (_valid()[:HEADER_SIZE - 1], "short"),
    (_with(_valid(), 0, b"XX"), "magic"),
    (_with(_valid(), 2, b"\x09"), "version"),
    (_valid() + b"y", "length"),
    (_with(_valid(), 3, b"\xee"), "type"),
    (_with(_valid(), 4, b"\x60"), "type"),  # an unknown protocol (96: no wire id)
    (_from(0, MsgType.FETCH, Proto.SEQUENCER, b"\x00" * 7), "payload"),
    (_from(0, MsgType.ESTIMATE, Proto.FAST_SETO, b"\x00" * 5), "payload"),
    (_from(0, MsgType.DELAY, Proto.FAST_SETO, b""), "payload"),
    (_from(0, MsgType.ACK, Proto.SEQUENCER, b"\x00"), "payload"),
], ids=["short", "magic", "version", "length", "type", "proto", "fetch", "estimate", "delay",
        "ack"])
def test_decode_refuses_each_malformation_with_its_reason(data: bytes, reason: str) -> None:
    assert decode(_valid()).header.sender == 2  # the datagram mutated below is well-formed
    with pytest.raises(WireError) as err:
        decode(data)
    assert err.value.reason == reason
    core = make_core("sequencer", 1)
    core.start(T0)
    core.receive(data, T0)
    assert core.counters.reasons == {f"malformed:{reason}": 1}


def test_sender_must_be_another_member_and_the_protocol_the_nodes() -> None:
    core = make_core("sequencer", 1)
    core.start(T0)
    core.receive(_from(1, MsgType.DATA, Proto.SEQUENCER, b"x", rseq=1, origin=1, mno=1), T0)
    core.receive(_from(2, MsgType.DATA, Proto.SETO, b"x", rseq=1, origin=2, mno=1), T0)
    core.receive(_from(2, MsgType.ESTIMATE, Proto.SEQUENCER, ENTRY.pack(0, 1)), T0)
    assert core.counters.reasons == {"rejected:sender": 1, "rejected:proto": 1,
                                     "rejected:type": 1}
    core.receive(_valid(), T0)
    assert core.counters.rejected == 3


def test_forged_nack_outside_what_was_sent_is_refused() -> None:
    core = make_core("sequencer", 1)
    core.start(T0)
    core.broadcast(T0)
    core.receive(_from(2, MsgType.NACK, Proto.SEQUENCER, rseq=1, seq=500), T0)
    core.receive(_from(2, MsgType.NACK, Proto.SEQUENCER, rseq=0, seq=1), T0)
    assert core.counters.reasons == {"rejected:range": 2}
    resent = core.receive(_from(2, MsgType.NACK, Proto.SEQUENCER, rseq=1, seq=1), T0).sends
    assert core.counters.rejected == 2 and len(resent) == 1


def test_a_nack_is_answered_with_at_most_max_resend_messages() -> None:
    """docs/security.md "Not protected": a spoofed NACK makes a node resend at most
    `max_resend` messages, and only to the member the header names."""
    core = make_core("sequencer", 1)
    core.start(T0)
    for _ in range(300):
        core.broadcast(T0)
    sends = core.receive(_from(2, MsgType.NACK, Proto.SEQUENCER, rseq=1, seq=300), T0).sends
    data = [(dst, m) for dst, m, _ in sends if decode(m).header.type == MsgType.DATA]
    assert len(data) == 128 and {dst for dst, _ in data} == {2}


def test_refusals_are_counted_per_reason_logged_ten_times_and_totalled_at_stop(
        tmp_path: Path) -> None:
    from nodes.management.node_mbeans import build_node_registry

    members = [Member(i, f"h{i}", "127.0.0.1", 7000 + i) for i in range(N)]
    log = tmp_path / "node.log"
    cfg = NodeConfig(node_id=1, name="h1", members=members, protocol="sequencer",
                     params={"sequencer": "h0"}, log_path=str(log), seed=1, start_at_ns=T0,
                     duration_ns=10**9, drain_ns=0, workload=WorkloadConfig(True, 10.0, 16))
    core = NodeCore(cfg, T0)
    core.start(T0)
    entry = struct.pack("!HI", 2, 1)
    for _ in range(15):
        core.receive(_from(2, MsgType.ORDER, Proto.SEQUENCER, entry, rseq=1, origin=2, seq=1),
                     T0)
        core.receive(b"\x00" * 3, T0)
    transport = build_node_registry(core).get("testbed:type=Transport")
    assert transport.read("Rejected") == 15 and transport.read("Malformed") == 15
    assert transport.read("DropReasons") == {"rejected:role": 15, "malformed:short": 15}
    core.stop(T0)
    events = [json.loads(line) for line in log.read_text().splitlines()]
    drops = [e["reason"] for e in events if e["ev"] == "drop"]
    assert sorted(drops) == ["malformed:short"] * 10 + ["rejected:role"] * 10
    stop = events[-1]
    assert stop["ev"] == "stop" and (stop["malformed"], stop["rejected"]) == (15, 15)
    assert stop["drops"] == {"malformed:short": 15, "rejected:role": 15}
