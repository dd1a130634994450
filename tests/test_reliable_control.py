"""Reliable FIFO's control traffic (nodes/protocols/reliable.py, "Control traffic"): delayed
cumulative ACKs with a count threshold, heartbeats that wait for each receiver's measured ACK
round trip, and the ACK a heartbeat draws from a receiver that has everything.

A small network drives the layers here: per-pair one-way delays, 10 ms ticks, datagrams
dropped on demand."""

from __future__ import annotations

import heapq
from collections.abc import Callable

from nodes.protocols.base import Action, RDeliver, Send
from nodes.protocols.reliable import ReliableMulticast
from nodes.wire import Header, Message, MsgType, Proto

MS = 1_000_000
TICK = 10 * MS


def data() -> Header:
    return Header(MsgType.DATA, Proto.RELIABLE)


class Net:
    """Layers 0..n-1, one-way delay `delay[(a, b)]` (ns); `drop(src, dst, msg)` loses one."""

    def __init__(self, layers: list[ReliableMulticast], delay: dict[tuple[int, int], int],
                 drop: Callable[[int, int, Message], bool] = lambda s, d, m: False):
        self.layers, self.delay, self.drop = layers, delay, drop
        self.queue: list[tuple[int, int, int, int, Message]] = []
        self.n = 0
        self.now = 0
        self.sent: list[tuple[int, int, int, Message]] = []  # (time, src, dst, msg)
        self.delivered: dict[int, list[tuple[int, int]]] = {i: [] for i in range(len(layers))}
        for layer in layers:
            layer.start(0)

    def _out(self, src: int, actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, RDeliver):
                self.delivered[src].append((a.msg.header.rseq, self.now))
            elif isinstance(a, Send):
                dsts = [d for d in range(len(self.layers)) if d != src] if a.dst is None \
                    else [a.dst]
                for d in dsts:
                    self.sent.append((self.now, src, d, a.msg))
                    if not self.drop(src, d, a.msg):
                        self.n += 1
                        heapq.heappush(self.queue, (self.now + self.delay[(src, d)], self.n,
                                                    src, d, a.msg))

    def multicast(self, src: int) -> None:
        self._out(src, self.layers[src].multicast(data(), b"x", self.now))

    def run_until(self, t: int) -> None:
        while self.now < t:
            nxt = self.now + TICK - self.now % TICK
            while self.queue and self.queue[0][0] < nxt:
                when, _, src, dst, msg = heapq.heappop(self.queue)
                self.now = max(self.now, when)
                self._out(dst, self.layers[dst].on_message(src, msg, self.now))
            self.now = nxt
            for i, layer in enumerate(self.layers):
                self._out(i, layer.on_timer("rm:tick", self.now))

    def count(self, mtype: MsgType, src: int | None = None, dst: int | None = None,
              since: int = 0) -> int:
        return sum(1 for t, s, d, m in self.sent if m.header.type == mtype and t >= since
                   and (src is None or s == src) and (dst is None or d == dst))


def symmetric(pairs: dict[tuple[int, int], int]) -> dict[tuple[int, int], int]:
    return {**pairs, **{(b, a): v for (a, b), v in pairs.items()}}


def test_a_sparse_stream_is_acked_once_per_ack_every() -> None:
    """A sender at 20 msgs/s: its receiver ACKs it once per `ack_every` (200 ms), not once
    per message. Failed before (ACKs every 20 ms: one per message, 20 a second)."""
    net = Net([ReliableMulticast(0, [0, 1]), ReliableMulticast(1, [0, 1])],
              symmetric({(0, 1): 5 * MS}))
    for k in range(40):  # 2 s
        net.multicast(0)
        net.run_until((k + 1) * 50 * MS)
    net.run_until(3000 * MS)
    assert [r for r, _ in net.delivered[1]] == list(range(1, 41))
    acks = net.count(MsgType.ACK, src=1)
    assert 9 <= acks <= 11, acks  # ~one per 200 ms over 2 s
    assert net.layers[0].acked[1] == 40 and not net.layers[0].send_buffer


def test_a_stream_that_advanced_a_quarter_window_is_acked_at_the_next_tick() -> None:
    """Flow control under load: a quarter of the window delivered since the last ACK makes
    the ACK due at the next tick, so a sender whose window fills does not wait `ack_every`
    for it. Failed before (no ACK before `ack_every`): 200 messages through a window of 16
    took 2.5 s at one window per `ack_every`; now ~0.3 s."""
    layers = [ReliableMulticast(0, [0, 1], window=16, ack_every_ns=200 * MS),
              ReliableMulticast(1, [0, 1], window=16, ack_every_ns=200 * MS)]
    net = Net(layers, symmetric({(0, 1): 2 * MS}))
    for _ in range(200):
        net.multicast(0)
    net.run_until(1000 * MS)
    got = net.delivered[1]
    assert [r for r, _ in got] == list(range(1, 201))
    assert got[-1][1] < 400 * MS, got[-1][1]
    assert net.count(MsgType.ACK, src=1) >= 200 // 16  # at least one per window


def test_heartbeats_wait_for_each_receivers_ack_round_trip() -> None:
    """A sender that falls idle heartbeats a receiver only once that receiver's ACK is overdue
    against its measured round trip: a member 150 ms away (300 ms round trip plus up to 200 ms
    of ACK delay) gets none while its ACK is on its way. Failed before: every idle spell drew
    heartbeats to every member whose ACK was not back 100 ms after the last multicast."""
    delay = symmetric({(0, 1): 5 * MS, (0, 2): 150 * MS, (1, 2): 150 * MS})
    net = Net([ReliableMulticast(m, [0, 1, 2]) for m in range(3)], delay)
    for k in range(30):  # 6 s: a message every 200 ms
        net.multicast(0)
        net.run_until((k + 1) * 200 * MS)
    net.run_until(8000 * MS)
    assert all([r for r, _ in net.delivered[m]] == list(range(1, 31)) for m in (1, 2))
    assert net.count(MsgType.HEARTBEAT) == 0
    sender = net.layers[0]
    assert sender.acked == {1: 30, 2: 30}
    # The estimate: the far member's round trip and ACK delay, the near one's ACK delay.
    assert 300 * MS <= sender.srtt[2] <= 500 * MS
    assert sender.srtt[1] <= 220 * MS
    assert sender.rto(2) > sender.rto(1)


def test_a_lost_tail_is_exposed_once_the_ack_is_overdue() -> None:
    """The last message before the sender falls idle is lost to the far member: the heartbeat
    comes once its ACK is overdue, the member NACKs and gets it -- within its RTO and a round
    trip and a half (heartbeat, NACK, retransmission) plus ticks of the loss."""
    lost: list[int] = []

    def drop(src: int, dst: int, msg: Message) -> bool:
        if (src, dst) == (0, 2) and msg.header.type == MsgType.DATA \
                and msg.header.rseq == 30 and not lost:
            lost.append(1)
            return True
        return False

    delay = symmetric({(0, 1): 5 * MS, (0, 2): 150 * MS, (1, 2): 150 * MS})
    net = Net([ReliableMulticast(m, [0, 1, 2]) for m in range(3)], delay, drop)
    for k in range(30):
        net.multicast(0)
        net.run_until((k + 1) * 200 * MS)
    sent_at = 29 * 200 * MS
    rto = net.layers[0].rto(2)
    net.run_until(9000 * MS)
    assert lost
    assert [r for r, _ in net.delivered[2]] == list(range(1, 31))
    recovered = net.delivered[2][-1][1]
    assert recovered - sent_at <= rto + 3 * 150 * MS + 3 * TICK, (recovered - sent_at, rto)
    assert net.count(MsgType.HEARTBEAT, dst=2) == 1
    assert net.count(MsgType.HEARTBEAT, dst=1) == 0  # the near member had it all
    assert net.layers[0].acked[2] == 30


def test_a_retransmitted_number_gives_no_rtt_sample() -> None:
    """Karn's rule: the ACK of a number that was retransmitted says nothing of the round trip
    (it may answer the retransmission)."""
    sender = ReliableMulticast(0, [0, 1])
    sender.multicast(data(), b"x", 0)
    sender.on_message(1, Message(Header(MsgType.NACK, Proto.RELIABLE, sender=1, rseq=1,
                                        seq=1)), 900 * MS)
    sender.on_message(1, Message(Header(MsgType.ACK, Proto.RELIABLE, sender=1, rseq=1)),
                      1000 * MS)
    assert sender.acked[1] == 1 and sender.srtt[1] == -1
    sender.multicast(data(), b"x", 1000 * MS)
    sender.on_message(1, Message(Header(MsgType.ACK, Proto.RELIABLE, sender=1, rseq=2)),
                      1040 * MS)
    assert sender.srtt[1] == 40 * MS and sender.rttvar[1] == 20 * MS


def test_a_heartbeat_to_a_receiver_that_has_everything_draws_its_ack_again() -> None:
    """The receiver's last ACK was lost: the sender's heartbeats would go on (backing off)
    for as long as nothing new is sent. A heartbeat whose number the receiver has makes it
    ACK at the next tick. Failed before (no ACK: nothing had moved since its last)."""
    acks_lost = [True]

    def drop(src: int, dst: int, msg: Message) -> bool:
        if msg.header.type == MsgType.ACK and acks_lost[0]:
            acks_lost[0] = False
            return True
        return False

    net = Net([ReliableMulticast(m, [0, 1]) for m in (0, 1)], symmetric({(0, 1): 20 * MS}),
              drop)
    for _ in range(3):
        net.multicast(0)
    net.run_until(3000 * MS)
    assert not acks_lost[0]
    assert net.layers[0].acked[1] == 3
    assert net.count(MsgType.HEARTBEAT) == 1
    assert net.count(MsgType.ACK) == 2
