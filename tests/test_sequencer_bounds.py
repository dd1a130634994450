"""The sequencer's bounded state under load (nodes/protocols/sequencer.py): duplicate
suppression (SeenMessages) exact against a plain set, in memory bounded by the reordering,
not by the messages seen; and ORDERs that wait behind a full reliable-multicast window
coalesce into one instead of taking a window slot each."""

from __future__ import annotations

import random

from nodes.protocols.base import Send
from nodes.protocols.sequencer import (
    INCARNATION_SPAN,
    ORDER_COALESCE_BYTES,
    ORDER_ENTRY,
    SeenMessages,
    Sequencer,
    unpack_orders,
)
from nodes.wire import Header, Message, MsgType, Proto


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
