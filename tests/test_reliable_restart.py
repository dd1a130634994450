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


# A restarted sender's first message overtaking its previous incarnation's last one (explore
# seed 53901, tests/reproducers/reliable-{nack,ack}-53901.yaml): h4's message 28 crossed a
# link delayed by 180 ms to h3 while h4 crashed and restarted; its new incarnation's first
# message, on the healed link, reached h3 first, and h3 dropped 28 as "from before the
# restart". h2, correct, had delivered it: agreement broken.
def test_an_old_incarnations_message_overtaken_by_the_new_ones_is_still_delivered() -> None:
    old = ReliableMulticast(0, [0, 1])
    receiver = ReliableMulticast(1, [0, 1])
    sent = [to(1, old.multicast(data(), b"a", 0))[0] for _ in range(3)]
    got = delivered(receiver.on_message(0, sent[0], 0))
    new = ReliableMulticast(0, [0, 1], incarnation=1)
    fresh = to(1, new.multicast(data(), b"b", 5 * MS))[0]
    got += delivered(receiver.on_message(0, fresh, 5 * MS))  # overtakes 2 and 3
    assert got == [1, 1]  # the old stream's 1, the new incarnation's 1
    late = receiver.on_message(0, sent[2], 8 * MS) + receiver.on_message(0, sent[1], 9 * MS)
    assert [(a.msg.header.aux, a.msg.header.rseq) for a in late
            if isinstance(a, RDeliver)] == [(0, 2), (0, 3)]
    assert receiver.on_message(0, sent[1], 10 * MS) == []  # a duplicate stays discarded
    # Nothing about the gone incarnation goes to the sender (its new incarnation never sent
    # those numbers): no NACK, no ACK.
    now = 10 * MS
    for _ in range(30):
        now += 10 * MS
        for msg in to(0, receiver.on_timer("rm:tick", now)):
            assert msg.header.type == MsgType.ACK and msg.header.rseq == 1


def test_reliable_ack_delivers_an_old_incarnations_overtaken_message() -> None:
    from nodes.protocols.base import FinalDeliver
    from nodes.protocols.reliable_ack import ReliableAck
    from nodes.protocols.sequencer import INCARNATION_SPAN

    old = ReliableAck(0, [0, 1], {})
    receiver = ReliableAck(1, [0, 1], {})
    sent = [m for _ in range(2) for m in to(1, old.broadcast(b"a", 0))]
    new = ReliableAck(0, [0, 1], {"incarnation": 1})
    fresh = to(1, new.broadcast(b"b", 5 * MS))[0]

    def fnl(actions: list[Action]) -> list[int]:
        return [a.mno for a in actions if isinstance(a, FinalDeliver)]

    got = fnl(receiver.on_message(0, sent[0], 0))
    got += fnl(receiver.on_message(0, fresh, 5 * MS))  # overtakes the old 2
    late = receiver.on_message(0, sent[1], 8 * MS)
    assert got + fnl(late) == [1, INCARNATION_SPAN + 1, 2]
    assert to(0, late) == []  # no ACK to the new incarnation for a number it never sent
