"""`reliable-ack`: reliable FIFO multicast with positive acknowledgements and retransmission
on timeout (lecture notes 002, "Reliable FIFO: Positive Acknowledgement").

The notes give one sender and one receiver; for multicast every receiver acknowledges each
message and a message is purged once all receivers have (rules numbered here):
- A1 send m: attach <i, C_i>, C_i += 1, keep m in the send buffer with the set of
  receivers that have not acknowledged it and a deadline; multicast m and deliver it to self;
- A2 receive m = <i, c> at j: *always* acknowledge <i, c> first (the ack comes
  before the case split, so duplicates and out-of-order arrivals are acknowledged too); then
  c = V[i] + 1: deliver m and every buffered successor; c > V[i] + 1: buffer m;
  c <= V[i]: discard, a duplicate;
- A3 receive ACK<c> from j: remove j from c's pending set; purge c when it is empty;
- A4 deadline of c passes: resend m to the receivers still pending (unicast each,
  or one multicast when more than half are), keep it in the send buffer and set a new
  deadline, doubling the timeout per try up to the failure detector's timeout (the backoff is
  ours: the notes say only "start a new timer"). There is no retry limit: the notes resend
  until the ACK comes, and a live receiver behind a lossy path is only slow, never lost. Why
  the cap: a receiver silent for `fd_timeout_ms` is suspected and then not retried at all
  until heard again (A5), so a longer gap only delays a live receiver behind a lossy path --
  at 2^6 x `rto_ms` (6.4 s) one message whose DATA or ACK was lost five times running (26 %
  a trip over three lossy hops at 9.8 % each) waited past any drain;
- A5 (ours, answering the slides' questions on failed processes and full buffers): the
  failure detector decides who is given up, not a count of tries. A suspected receiver is not
  retried and does not hold the window, but what it has not acknowledged stays in the send buffer
  (parked, out of the deadline scan): a suspicion may be false (a slow start, a partition that
  heals), so once the receiver is heard again everything it lacks is due at once and it catches up.
  A full window (`window` messages some unsuspected receiver has not acknowledged) holds new sends
  in a backlog, as the NACK layer does. The cost: a receiver that crashed for good keeps its
  messages parked at every sender (memory grows with the traffic it misses), as the NACK layer's
  send buffers keep what a suspect misses.

Restarts (A2's duplicate rule `c <= V[i]` assumes C_i never goes back; integrity): numbered
from 1 again, a restarted sender's new messages would be acknowledged and discarded as
duplicates of the old incarnation's, and their mids would collide. So
- C_i and the message numbers start at `incarnation * INCARNATION_SPAN` (the sequencer's
  convention): they continue above the old incarnation's, so a selective ACK always names one
  message of one incarnation;
- a receiver meeting a number of a newer incarnation range starts a new stream for that
  sender at the range's base and no longer counts that sender as given up (A5 gave up the
  old one). The old stream is kept behind it: the old incarnation's data still in flight,
  overtaken by the new one's first message on a faster path, is delivered in order as a
  correct member that got it sooner delivered it (unacknowledged: nobody waits for that
  ACK). Dropped, a correct member would miss a message another delivered;
- a restarted receiver joins each stream at the first message sent fresh to it: a
  retransmission is acknowledged and dropped (it was sent before the restart, and the old
  incarnation may have delivered it), so the new incarnation never delivers a message twice
  in the log.

Deadlines are served by one periodic scan (`tick`), not a timer per message: cheaper, and the
outcome is the same. Timer keys carry the layer instance's `scope`, so two
instances can run side by side in one node. The ACK is selective, per message (002 "Positive
Acknowledgement": "the ack contains the sequence number of the message received"); it reuses
MsgType.ACK under this protocol's wire id, so it is never confused with the NACK layer's cumulative
ACK.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from nodes.protocols.base import (
    Action,
    Attribute,
    CommonParams,
    FinalDeliver,
    LayerBase,
    Log,
    Managed,
    ManagedHost,
    Send,
    SetTimer,
    ms,
    param,
    typed_params,
)
from nodes.protocols.sequencer import INCARNATION_SPAN
from nodes.wire import Flag, Header, Message, MsgType

WIRE_ID = 5
RETRANSMIT = int(Flag.RETRANSMIT)
MAX_BACKOFF_EXP = 6


@dataclass(frozen=True)
class ReliableAckParams(CommonParams):
    rto_ms: float = ms("retransmission timeout (002: 'What is an appropriate length of a "
                       "timer?'; about 2x the largest round trip)", 100)
    tick_ms: float = ms("period of the deadline scan", 5)
    window: int = param(1024, "own messages kept unacknowledged at most (flow control)", ge=1)


@dataclass
class _Pending:
    msg: Message
    waiting: set[int]  # receivers that have not acknowledged
    deadline: int
    tries: int = 0


@dataclass
class _Stream:
    delivered: int = 0  # V[i]
    buffer: dict[int, Message] = field(default_factory=dict)
    incarnation: int = 0  # the sender's incarnation this stream follows (c // SPAN)
    adopt: bool = False  # a restarted receiver: join at the first fresh message
    # The sender's previous incarnation's stream, kept when a newer one replaced it: that
    # incarnation's datagrams still in flight (a slower path) continue it in order.
    prev: _Stream | None = None


class ReliableAck(LayerBase):
    def __init__(self, me: int, members: list[int], params: dict[str, Any],
                 scope: str = "ack"):
        p = typed_params(ReliableAckParams, params)
        self.me = me
        self.others = [m for m in members if m != me]
        self.rto_ns = round(p.rto_ms * 1e6)
        # A4's longest gap between two tries of a message (docstring)
        self.max_gap_ns = max(self.rto_ns, round(p.fd_timeout_ms * 1e6))
        self.tick_ns = round(p.tick_ms * 1e6)
        self.window = p.window
        self.tick_key = f"{scope}:tick"
        self.instance = "" if scope == "ack" else f"reliable-ack#{scope}"  # written as `proto`
        # C_i and the message numbers continue across restarts (docstring, "Restarts").
        base = int(params.get("incarnation", 0)) * INCARNATION_SPAN
        self.next_c = base + 1  # C_i
        self.mno = base
        # Own messages some unsuspected receiver has not acknowledged (scanned by `tick`,
        # held against the window), and those only suspects lack (parked: A5).
        self.send_buffer: dict[int, _Pending] = {}
        self.parked: dict[int, _Pending] = {}
        self.backlog: deque[tuple[bytes, int]] = deque()
        self.streams = {m: _Stream(adopt=base > 0) for m in self.others}
        self.suspected: set[int] = set()
        self.delivered = 0  # local delivery count: the `seq` of each fnl
        self.retransmissions = 0
        self.give_ups = 0  # A5: times a suspected receiver was given up (its messages parked)

    # -- Layer interface ----------------------------------------------------------------------
    def managed(self, host: ManagedHost) -> list[Managed]:
        """`testbed:type=Transport`: what the node's retries and give-ups came to."""
        return [Managed("Transport", (
            Attribute("Retransmissions", "int", lambda: self.retransmissions,
                      description="data messages sent again (timed out)"),
            Attribute("GiveUps", "int", lambda: self.give_ups,
                      description="receivers given up while suspected (A5)"),))]

    def start(self, now: int) -> list[Action]:
        return [SetTimer(self.tick_key, self.tick_ns)]

    def broadcast(self, payload: bytes, now: int) -> list[Action]:
        self.mno += 1
        out: list[Action] = [Log("send", {"mno": self.mno, "size": len(payload)})]
        if self.backlog or self._window_full():
            self.backlog.append((payload, self.mno))
            return out
        return out + self._send_new(payload, self.mno, now)

    def _window_full(self) -> bool:
        return len(self.send_buffer) >= self.window

    def on_message(self, src: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        if h.type == MsgType.ACK:
            return self._acked(src, h.rseq, now)
        if h.type != MsgType.DATA or h.sender not in self.streams:
            return []
        ack = Send(h.sender, Message(Header(MsgType.ACK, WIRE_ID, sender=self.me, rseq=h.rseq)))
        stream = self.streams[h.sender]
        inc = h.rseq // INCARNATION_SPAN
        if inc > stream.incarnation:  # the sender restarted: a new stream
            old = stream
            stream = self.streams[h.sender] = _Stream(inc * INCARNATION_SPAN, {}, inc,
                                                      stream.adopt)
            if not old.adopt:
                old.prev = None  # one incarnation back is kept
                stream.prev = old
        elif inc < stream.incarnation:
            # From before the sender restarted, overtaken by the newer incarnation's first
            # message: it continues the old stream, delivered in order as a correct member
            # that got it sooner did (agreement, 002 "Reliable FIFO: Positive Acknowledgement"). Not
            # acknowledged: the ACK would go to the newer incarnation, which never sent it.
            prev = stream.prev
            if prev is None or inc != prev.incarnation:
                return []
            return self._receive(prev, msg)
        if stream.adopt:
            if h.flags & RETRANSMIT:
                return [ack]  # sent before we restarted: not ours to deliver
            stream.adopt = False
            stream.delivered = max(stream.delivered, h.rseq - 1)
        return [ack, *self._receive(stream, msg)]

    def on_timer(self, key: str, now: int) -> list[Action]:
        out: list[Action] = [SetTimer(self.tick_key, self.tick_ns)]
        if key != self.tick_key:
            return out
        for p in list(self.send_buffer.values()):
            if p.deadline > now:
                continue
            out += self._resend(p, p.waiting - self.suspected if self.suspected else p.waiting)
            p.tries += 1
            p.deadline = now + min(self.rto_ns << min(p.tries, MAX_BACKOFF_EXP),
                                   self.max_gap_ns)
        return out

    def on_suspect(self, member: int, suspected: bool, now: int) -> list[Action]:
        """A5: a suspect is not retried and does not hold the window (what only suspects lack
        is parked); heard again, everything it has not acknowledged is due at once."""
        if suspected:
            self.suspected.add(member)
            parked = [c for c, p in self.send_buffer.items() if p.waiting <= self.suspected]
            for c in parked:
                self.parked[c] = self.send_buffer.pop(c)
            if parked:
                self.give_ups += 1
                out: list[Action] = [Log("give_up", {"member": member, "parked": len(parked)})]
                return out + self._release(now)
            return []
        self.suspected.discard(member)
        due = 0
        for p in self.send_buffer.values():
            if member in p.waiting:
                p.deadline = now
                due += 1
        back = [c for c, p in self.parked.items() if member in p.waiting]
        for c in back:
            p = self.parked.pop(c)
            p.deadline = now
            self.send_buffer[c] = p
        if back:  # resent in number order, the order the receiver delivers in
            self.send_buffer = dict(sorted(self.send_buffer.items()))
        if due or back:
            return [Log("readmit", {"member": member, "due": due + len(back)})]
        return []

    # -- sending ------------------------------------------------------------------------------
    def _send_new(self, payload: bytes, mno: int, now: int) -> list[Action]:
        """A1: number, buffer, multicast, deliver to self."""
        c = self.next_c
        self.next_c += 1
        msg = Message(Header(MsgType.DATA, WIRE_ID, sender=self.me, rseq=c, origin=self.me,
                             mno=mno, ts=now), payload)
        if self.others:
            p = _Pending(msg, set(self.others), now + self.rto_ns)
            if p.waiting <= self.suspected:
                self.parked[c] = p
            else:
                self.send_buffer[c] = p
        self.delivered += 1
        return [Send(None, msg),
                FinalDeliver(self.me, mno, self.delivered, len(payload), self.instance)]

    def _resend(self, p: _Pending, live: set[int]) -> list[Action]:
        """A4: to the pending receivers, one multicast when more than half are."""
        h = p.msg.header
        again = Message(h.with_(flags=h.flags | RETRANSMIT), p.msg.payload)
        self.retransmissions += 1
        if 2 * len(live) > len(self.others):
            return [Send(None, again)]
        return [Send(j, again) for j in sorted(live)]

    def _acked(self, src: int, c: int, now: int) -> list[Action]:
        """A3: purge c once every receiver has acknowledged it (parked once only suspects
        lack it)."""
        p = self.send_buffer.get(c)
        if p is None:
            p = self.parked.get(c)
            if p is not None:
                p.waiting.discard(src)
                if not p.waiting:
                    del self.parked[c]
            return []
        p.waiting.discard(src)
        if p.waiting and not p.waiting <= self.suspected:
            return []
        del self.send_buffer[c]
        if p.waiting:
            self.parked[c] = p
        return self._release(now)

    def _release(self, now: int) -> list[Action]:
        out: list[Action] = []
        while self.backlog and not self._window_full():
            payload, mno = self.backlog.popleft()
            out += self._send_new(payload, mno, now)
        return out

    # -- receiving ----------------------------------------------------------------------------
    def _receive(self, stream: _Stream, msg: Message) -> list[Action]:
        """A2, after the acknowledgement."""
        c = msg.header.rseq
        if c <= stream.delivered or c in stream.buffer:
            return []  # duplicate
        if c > stream.delivered + 1:
            stream.buffer[c] = msg  # A2: buffer
            return []
        out: list[Action] = []
        nxt: Message | None = msg
        while nxt is not None:
            stream.delivered += 1
            self.delivered += 1
            h = nxt.header
            out.append(FinalDeliver(h.origin, h.mno, self.delivered, len(nxt.payload),
                                    self.instance))
            nxt = stream.buffer.pop(stream.delivered + 1, None)
        return out
