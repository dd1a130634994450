"""The sequencer's bounded state under load (nodes/protocols/sequencer.py): duplicate
suppression (SeenMessages) exact against a plain set, in memory bounded by the reordering,
not by the messages seen; ORDERs that wait behind a full reliable-multicast window
coalesce into one instead of taking a window slot each; and the relay store, which keeps a
message until every other member reported it delivered, however many come after it."""

from __future__ import annotations

import random

from nodes.protocols.base import Log, Send
from nodes.protocols.sequencer import (
    FETCH_ROUND,
    INCARNATION_SPAN,
    ORDER_COALESCE_BYTES,
    ORDER_ENTRY,
    SeenMessages,
    Sequencer,
    pack_orders,
    unpack_orders,
)
from nodes.wire import FETCH_MAX, Header, Message, MsgType, Proto


def test_seen_matches_a_plain_set_and_stays_small() -> None:
    rng = random.Random(18)
    seen, plain = SeenMessages(), set()
    fused = SeenMessages()  # driven through add_new, the sequencer's one-look-up path
    keys: list[tuple[int, int]] = []
    for origin in range(1, 6):
        # Two incarnations per origin; the first one's stream stops with a gap (a crash).
        keys += [(origin, m) for m in range(1, 3001)]
        keys += [(origin, INCARNATION_SPAN + m) for m in range(1, 3001)]
    # FIFO per origin, streams interleaved; a relayed copy now and then, ahead or behind.
    keys.sort(key=lambda k: (k[1] % INCARNATION_SPAN) + rng.random() * 3)
    arrivals = []
    for k in keys:
        arrivals.append(k)
        if rng.random() < 0.05:
            o, m = k
            arrivals.append((o, m + rng.randint(-40, 40)))
    biggest = 0
    for k in arrivals:
        if k[1] <= 0:
            continue
        assert (k in seen) == (k in plain), k
        assert fused.add_new(k) == (k not in plain), k
        seen.add(k)
        plain.add(k)
        assert k in seen
        biggest = max(biggest, len(seen))
    probes = [(o, m) for o in range(0, 7) for m in range(-5, 3100)]
    probes += [(o, INCARNATION_SPAN + m) for o in range(0, 7) for m in range(-5, 3100)]
    assert all((p in seen) == (p in plain) for p in probes)
    assert (fused.ranges, fused.extra) == (seen.ranges, seen.extra)
    assert len(plain) > 30_000
    assert biggest < 400, biggest  # ranges + stragglers, against 30,000+ keys


def test_a_straggler_below_the_first_seen_extends_the_range_down() -> None:
    seen = SeenMessages()
    seen.add((1, 10))  # a relayed copy first
    for m in (7, 8, 9):
        seen.add((1, m))
    assert seen.extra == set() and seen.ranges and len(seen) == 1
    assert (1, 7) in seen and (1, 6) not in seen and (1, 11) not in seen


def _data(sender: int, n: int) -> Message:
    return Message(Header(MsgType.DATA, Proto.SEQUENCER, sender=sender, rseq=n, origin=sender,
                          mno=n), b"x" * 8)


def _ack(sender: int, n: int) -> Message:
    return Message(Header(MsgType.ACK, Proto.SEQUENCER, sender=sender, rseq=n))


def test_orders_behind_a_full_window_coalesce_into_one_consecutive_order() -> None:
    seq = Sequencer(1, [1, 2, 3], {"window": 1})
    seq.broadcast(b"mine", 0)  # rseq 1 leaves; the window (1) is now full
    assert seq.on_timer("seq:flush", 1) == []  # its ORDER waits in the backlog
    for n in range(1, 301):  # other members' messages, each flushed on its own
        seq.on_message(2, _data(2, n), 1 + n)
        seq.on_timer("seq:flush", 1 + n)
    backlog = list(seq.rm.layer.backlog)
    assert [h.type for h, _ in backlog] == [MsgType.ORDER, MsgType.ORDER]
    entries = [unpack_orders(p) for _, p in backlog]
    assert len(backlog[0][1]) <= ORDER_COALESCE_BYTES
    assert len(entries[0]) == ORDER_COALESCE_BYTES // ORDER_ENTRY.size  # full, then a second
    assert entries[0] + entries[1] == [(1, 1)] + [(2, n) for n in range(1, 301)]
    assert backlog[1][0].seq == 1 + len(entries[0])  # numbers stay consecutive
    # The window frees: the ORDERs leave, numbered 1.. and 227.., and every process that
    # applies them delivers in that order.
    out = seq.on_message(2, _ack(2, 1), 400) + seq.on_message(3, _ack(3, 1), 401)
    sent = [a.msg for a in out if isinstance(a, Send) and a.msg.header.type == MsgType.ORDER]
    assert [m.header.seq for m in sent] == [1]
    assert seq.fnl_delivered == len(entries[0])


def _fetch(sender: int, delivered: int, mids: list[tuple[int, int]]) -> Message:
    return Message(Header(MsgType.FETCH, Proto.SEQUENCER, sender=sender, seq=delivered),
                   pack_orders(mids))


def test_the_relay_store_keeps_what_a_member_has_not_delivered_however_much_follows() -> None:
    """Member 3 reports nothing (cut off): 20,000 messages of origin 2 later -- more than
    the 16,384 a count limit kept -- its first is still served; once 3 reports them
    delivered, the store drops them. What the store no longer holds is counted and logged."""
    seq = Sequencer(1, [1, 2, 3], {"window": 1 << 20})  # ORDERs never wait for ACKs here
    for n in range(1, 20_001):
        seq.on_message(2, _data(2, n), n)
        seq.on_timer("seq:flush", n)
    assert seq.next_deliver == 20_001 and len(seq.store) == 20_000
    seq.on_message(2, _fetch(2, 20_000, []), 30_000)  # 2 has it all: 3 has not
    out = seq.on_message(3, _fetch(3, 0, [(2, 1)]), 30_001)
    assert [(a.dst, a.msg.header.mno) for a in out if type(a) is Send] == [(3, 1)]
    seq.on_message(3, _fetch(3, 19_000, []), 30_002)
    assert sorted(seq.store) == sorted((2 << 32) | n for n in range(19_001, 20_001))
    out = seq.on_message(3, _fetch(3, 19_000, [(2, 5), (2, 19_500)]), 30_003)
    assert [a.msg.header.mno for a in out if type(a) is Send] == [19_500]
    assert [a.fields for a in out if type(a) is Log] == [{"member": 3, "count": 1}]
    assert seq.fetch_unserved == 1


def test_a_member_reports_its_position_and_fetches_in_rounds() -> None:
    """A member reports the last number it delivered once per `ack_every_ms`; blocked on
    messages it never got, it FETCHes up to FETCH_ROUND x FETCH_MAX of them after
    `fetch_after_ms`, and the next round as soon as this one is answered."""
    m = Sequencer(3, [1, 2, 3], {"ack_every_ms": 200, "fetch_after_ms": 200})
    m.on_message(1, _data(1, 1), 0)
    order = Message(Header(MsgType.ORDER, Proto.SEQUENCER, sender=1, rseq=2, origin=1, seq=1),
                    pack_orders([(1, 1)] + [(2, n) for n in range(1, 601)]))
    m.on_message(1, order, 1)
    assert m.next_deliver == 2
    report = m.on_timer("rm:tick", 10)
    fetches = [a.msg for a in report if type(a) is Send and a.msg.header.type == MsgType.FETCH]
    assert [(f.header.seq, f.payload) for f in fetches] == [(1, b"")]
    assert not [a for a in m.on_timer("rm:tick", 20) if type(a) is Send]  # blocked from now
    rnd = [a.msg for a in m.on_timer("rm:tick", 220_000_000) if type(a) is Send
           and a.msg.header.type == MsgType.FETCH]
    asked = [k for f in rnd for k in unpack_orders(f.payload)]
    assert len(rnd) == FETCH_ROUND and asked == [(2, n) for n in range(1, FETCH_ROUND
                                                                      * FETCH_MAX + 1)]
    assert not [a for a in m.on_timer("rm:tick", 230_000_000) if type(a) is Send]
    for o, n in asked:  # the relayed copies arrive: the next round goes at the next tick
        relayed = Message(Header(MsgType.DATA, Proto.SEQUENCER, flags=2, sender=o, rseq=n,
                                 origin=o, mno=n), b"x")
        m.on_message(1, relayed, 231_000_000)
    assert m.next_deliver == 2 + len(asked)
    nxt = [a.msg for a in m.on_timer("rm:tick", 240_000_000) if type(a) is Send]
    assert nxt[0].header.seq == 1 + len(asked)
    assert [k for f in nxt for k in unpack_orders(f.payload)] == [
        (2, n) for n in range(len(asked) + 1, 2 * len(asked) + 1)]
