"""Reliable FIFO and a restarted receiver whose previous incarnation holds the sender's window
(nodes/protocols/reliable.py, "Restarts").

Found by `testbed explore` (sequencer, seeds 60380 and 60228 of experiments/quickstart.yaml,
kept in tests/reproducers/): a process down for ~6 s came back to senders whose window its
previous incarnation's last ACK held full (unsuspected again, it counts for the window). A
restarted receiver joins a stream at a fresh message, and the senders could send none: every
multicast waited in the backlog, the heartbeats that did reach it were ignored while it had
not joined, and no process delivered anything for the rest of the run.
"""

from __future__ import annotations

from nodes.protocols.base import Action, RDeliver, Send
from nodes.protocols.reliable import ReliableMulticast
from nodes.wire import Header, Message, MsgType, Proto

MS = 1_000_000
WINDOW = 8


def data() -> Header:
    return Header(MsgType.DATA, Proto.RELIABLE)


def to(dst: int, actions: list[Action]) -> list[Message]:
    return [a.msg for a in actions if isinstance(a, Send) and a.dst in (None, dst)]


def delivered(actions: list[Action]) -> list[int]:
    return [a.msg.header.rseq for a in actions if isinstance(a, RDeliver)]


def test_a_restarted_receiver_frees_a_window_its_previous_incarnation_held() -> None:
    sender = ReliableMulticast(0, [0, 1], window=WINDOW)
    old = ReliableMulticast(1, [0, 1])
    now = 0
    for msg in to(1, sender.multicast(data(), b"a", now)):
        old.on_message(0, msg, now)
    now += 210 * MS  # past the first `ack_every` (200 ms)
    for msg in to(0, old.on_timer("rm:tick", now)):  # its one ACK: 1
        assert msg.header.type == MsgType.ACK
        sender.on_message(1, msg, now)
    assert sender.acked[1] == 1
    # The receiver crashes; the sender fills its window and queues the rest.
    for _ in range(WINDOW + 5):
        sender.multicast(data(), b"b", now)
    assert sender.next_rseq - 1 == 1 + WINDOW and len(sender.backlog) == 5
    new = ReliableMulticast(1, [0, 1], incarnation=1)
    new.start(now)
    got: list[int] = []
    for _ in range(200):  # 10 ms ticks for 2 s: heartbeats, ACKs, the backlog released
        now += 10 * MS
        for msg in to(1, sender.on_timer("rm:tick", now)):
            got += delivered(new.on_message(0, msg, now))
        for msg in to(0, new.on_timer("rm:tick", now)):
            for fresh in to(1, sender.on_message(1, msg, now)):
                got += delivered(new.on_message(0, fresh, now))
    assert not sender.backlog, "the window stayed held by the previous incarnation's ACK"
    # It joined after the heartbeat's number, the sender's highest: the backlog's five
    # messages, sent fresh, are what it delivers, in order.
    assert got == list(range(WINDOW + 2, WINDOW + 7))
    assert sender.acked[1] == WINDOW + 6
