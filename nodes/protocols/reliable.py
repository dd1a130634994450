"""Reliable FIFO multicast with negative acknowledgements (lecture notes 002, "Reliable FIFO:
Negative Acknowledgement").

The notes' rules, per sender i and receiver j:
- sending: attach <i, C_i>, increment C_i, keep m in the send buffer;
- receiving C == V[i] + 1: deliver, then deliver buffered successors;
  C > V[i] + 1: buffer m and send a retransmit request (NACK) for the missing numbers;
  C <= V[i]: discard;
- on a retransmit request: resend m from the send buffer.

The notes end with two open questions, answered here as SRM-style stacks do:
- "What if the sender doesn't send any message after the lost message?" -- a sender with
  unacknowledged messages sends a HEARTBEAT carrying its highest number, which exposes a lost
  tail to the NACK rule, to each member whose ACK is overdue (see "Control traffic");
- "When can a sender purge a message from its buffer?" -- receivers send each sender a
  delayed cumulative positive ACK (V[i]); a message is purged once every member has it.
A gap is NACKed only once it has stayed open for `nack_delay_ns` (jitter reorders datagrams, and
an eager NACK would ask for what is still in flight); unanswered NACKs repeat every
`nack_retry_ns`. Heartbeats go out only from an idle sender, for the same reason; once a
receiver knows of a gap its own NACKs repeat, so a heartbeat needs repeating only when it was
lost itself, hence the back-off.

Control traffic (the rules TCP uses for the same jobs; at a hundred members the ACKs,
heartbeats and the failure detector's ALIVEs were 46 % of the simulator's events):
- ACKs are delayed: a receiver ACKs each sender whose stream moved at most once per
  `ack_every_ns` (200 ms, TCP's usual delayed-ACK bound), and at the next tick when the stream
  advanced by a quarter of the window since its last ACK (TCP's "every second segment": a
  sender under load gets its window back as before) or a retransmission filled a gap (RFC 5681
  4.2: the sender is waiting for that ACK). One ACK per message at ten messages a second from
  each of 99 senders (`ack_every` 20 ms) was 376,974 of the 1,576,631 events of the
  simulator's 100-host bench; now 176,118.
- Heartbeats wait for the round trip: the sender measures each member's ACK round trip -- from
  a number's first sending to the ACK that first covers it, which includes the receiver's ACK
  delay; never for a number that was retransmitted (Karn's rule) -- smoothed as TCP's SRTT and
  RTTVAR (RFC 6298, gains 1/8 and 1/4). A member still behind gets a HEARTBEAT once its ACK
  is overdue, `rto(m)` = SRTT + 4 RTTVAR after the last multicast (at least
  `heartbeat_after_ns`, at most `heartbeat_max_ns` + `ack_every_ns`; `ack_every_ns` +
  `heartbeat_after_ns` before the first sample), then at gaps that double up to
  `heartbeat_max_ns`, until a new multicast or its ACK. (A fixed 100 ms of idleness came
  before the ACK of any member further than 50 ms could be back: 111,208 heartbeats in a run
  with 45 NACKs; now 1,691.) A lost tail is exposed one RTO after the sender fell idle, then
  NACKed and resent: RTO plus a round trip and a half (`tests/test_reliable_control.py`).
- A heartbeat whose number a receiver already has means its last ACK was lost (or is late):
  it ACKs again at the next tick (news may never come, and the heartbeats go on at
  `heartbeat_max_ns`).

Flow control: a sender keeps at most `window` of its own messages unacknowledged by some member;
further multicasts wait in a backlog until ACKs free the window. Without it an overloaded
receiver's socket overflows, its NACKs ask for more than it can take, and throughput collapses
instead of levelling off. A NACK is answered with at most `max_resend` messages. Suspected
members (failure detector) do not hold the window, but the send buffer still keeps what they
miss: a partitioned member that stays correct must be able to catch up after the heal.

Restarts: every reliable message carries its sender's incarnation (header.aux). A message from a
newer incarnation resets that sender's stream; the old stream is kept behind it, so the old
incarnation's data still in flight when the new one's first message overtook it (a slower
path) is delivered in order, as a correct member that got it sooner delivered it (agreement,
002 "Reliable FIFO"); no NACK or ACK goes to the gone incarnation.
A restarted process (incarnation > 0) joins from
the present: the lowest message sent fresh (not a retransmission) that it gets from each stream
within `nack_delay` of the first fixes where it starts, since the history before its crash is
gone (a crashed process is no longer correct; 002 leaves recovery to membership). Were it to
join at the first message of any kind, a retransmission -- asked for by its NACK of
everything below a heartbeat's number -- would make it deliver again what its previous
incarnation had delivered (integrity: one log, one delivery per message); heartbeats and
retransmissions do not count until it has joined. One heartbeat does: reaching it before any
fresh message, it makes the receiver join after the heartbeat's number and acknowledge it. The
sender may
have nothing fresh to send until then -- its window held full by the last ACK of the receiver's
previous incarnation, which counts again once unsuspected -- and every process had stopped
delivering after a restart some six seconds after the crash.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from nodes.protocols.base import (
    Action,
    Attribute,
    LayerBase,
    Managed,
    ManagedHost,
    RDeliver,
    Send,
    SetTimer,
)
from nodes.protocols.params import ReliableParams as ReliableParams  # re-exported
from nodes.wire import Flag, Header, Message, MsgType, Proto, mypyc_attr

TICK: Final = "rm:tick"
# Enum members as module constants: `MsgType.NACK` is a slow class-attribute lookup, and
# on_message runs once per datagram.
_NACK: Final = MsgType.NACK
_ACK: Final = MsgType.ACK
_HEARTBEAT: Final = MsgType.HEARTBEAT
RETRANSMIT: Final = int(Flag.RETRANSMIT)  # IntFlag arithmetic is slow on a hot path


def reliable_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    """ReliableMulticast's keyword arguments from a node config's params."""
    names = {"tick_ms": "tick_ns", "nack_delay_ms": "nack_delay_ns",
             "nack_retry_ms": "nack_retry_ns", "ack_every_ms": "ack_every_ns",
             "heartbeat_after_ms": "heartbeat_after_ns", "heartbeat_max_ms": "heartbeat_max_ns"}
    out = {names[k]: round(float(v) * 1e6) for k, v in params.items() if k in names}
    out.update({k: int(v) for k, v in params.items()
                if k in ("window", "max_resend", "incarnation")})
    return out


@dataclass
class _Stream:
    """Receiver state for one sender: V[i] and the receive buffer."""

    delivered: int = 0  # V[i]: highest number delivered in order (numbers start at 1)
    highest_seen: int = 0
    acked_sent: int = 0  # what our last ACK to that sender said
    ack_due: bool = False  # in ReliableMulticast._due: ACK it at the next tick
    incarnation: int = 0
    adopt: bool = False  # a restarted receiver that has not joined this stream yet
    gap_since: int = -1  # local time a gap was first seen (-1: no gap)
    nack_at: int = -1  # local time of the last NACK for the current gap (-1: none sent)
    buffer: dict[int, Message] | None = None
    # The stream of the sender's previous incarnation, kept when a newer one replaced it:
    # that incarnation's datagrams still in flight (a slower path) continue it in order.
    prev: _Stream | None = None


class ReliableMulticast:
    def __init__(
        self,
        me: int,
        members: list[int],
        proto: int = Proto.RELIABLE,
        tick_ns: int = 10_000_000,
        nack_delay_ns: int = 5_000_000,
        nack_retry_ns: int = 60_000_000,
        ack_every_ns: int = 200_000_000,
        window: int = 1024,
        max_resend: int = 128,
        incarnation: int = 0,
        scope: str = "rm",
        heartbeat_after_ns: int = 100_000_000,
        heartbeat_max_ns: int = 640_000_000,
    ):
        self.me = me
        # Timer keys are scoped per layer instance ("<scope>:tick"), so two instances can run
        # side by side in one node; the owner routes keys with its own prefixes elsewhere.
        self.tick_key = TICK if scope == "rm" else f"{scope}:tick"
        self.members = members
        self.proto = proto
        self.tick_ns = tick_ns
        self.nack_delay_ns = nack_delay_ns
        self.nack_retry_ns = nack_retry_ns
        self.last_multicast_at = 0
        self.heartbeat_after_ns = heartbeat_after_ns
        self.heartbeat_max_ns = max(heartbeat_max_ns, heartbeat_after_ns)
        self.ack_every_ns = ack_every_ns
        self.window = window
        # A stream that advanced by a quarter of the window since our last ACK to its sender
        # is ACKed at the next tick, not at the next `ack_every` (TCP's delayed ACK with a
        # count): a sender under load gets its window back as often as before.
        self._ack_count = max(1, window // 4)
        self.max_resend = max_resend
        self.backlog: deque[tuple[Header, bytes]] = deque()
        self.next_rseq = 1  # C_i
        self.send_buffer: dict[int, Message] = {}
        self._purged = 0  # send_buffer holds nothing at or below this number
        self.acked = {m: 0 for m in members if m != me}  # highest cumulative ACK per receiver
        # The ACK round trip per receiver, smoothed as TCP's SRTT / RTTVAR (RFC 6298): sampled
        # from a number's first sending to the ACK that first covers it, never for a number
        # that was retransmitted (Karn's rule); -1: no sample yet. It includes the receiver's
        # ACK delay, which is what a heartbeat has to wait for.
        self._sent_at: dict[int, int] = {}  # number -> local time sent (until purged)
        self._resent: set[int] = set()  # numbers retransmitted (until purged)
        self.srtt = {m: -1 for m in self.acked}
        self.rttvar = {m: 0 for m in self.acked}
        # Heartbeats per receiver: the last one's time (-1: none) and the gap before the next.
        self._hb_at = {m: -1 for m in self.acked}
        self._hb_gap = {m: 0 for m in self.acked}
        self._hb_next = 0  # no heartbeat is due before this local time
        # min(acked.values()) kept up to date, and how many receivers sit at it: an ACK moves
        # the minimum only when the last receiver at it moves up, so the minimum is not
        # recomputed over every member at every ACK (O(members) per ACK at 100 members).
        self._ack_floor = 0
        self._at_floor = len(self.acked)
        self.incarnation = incarnation
        self.streams = {m: _Stream(adopt=incarnation > 0) for m in members if m != me}
        # What the tick needs without walking every stream (O(members) per tick, ~5 % of the
        # simulator's time at 100 members): the senders whose stream has a gap or a joining
        # buffer open (`gap_since >= 0`), and those whose V[i] moved past our last ACK.
        # Ticks visit them in member order, as a walk over `streams` would.
        self._gaps: set[int] = set()
        self._moved: set[int] = set()
        self._due: set[int] = set()  # streams whose ACK goes at the next tick (ack_due)
        self._rank = {m: i for i, m in enumerate(self.streams)}  # a sender's place in streams
        self.excluded: set[int] = set()  # suspected members
        self.last_ack_at = 0
        self.retransmissions = 0

    # -- events -------------------------------------------------------------------------------
    def start(self, now: int) -> list[Action]:
        self.last_ack_at = now
        return [SetTimer(self.tick_key, self.tick_ns)]

    def multicast(self, header: Header, payload: bytes, now: int) -> list[Action]:
        """R-multicast: number the message, buffer it, send it, and deliver it locally."""
        if self.backlog or self._window_full():
            self.backlog.append((header, payload))
            return []
        return self._send_new(header, payload, now)

    def _floor(self) -> int | None:
        """Highest number every unsuspected member has acknowledged."""
        if not self.excluded:
            return self._ack_floor if self.acked else None
        live = [v for m, v in self.acked.items() if m not in self.excluded]
        return min(live) if live else None

    def _window_full(self) -> bool:
        floor = self._floor()
        return floor is not None and self.next_rseq - 1 - floor >= self.window

    def on_suspect(self, member: int, suspected: bool, now: int) -> list[Action]:
        if suspected:
            self.excluded.add(member)
        else:
            self.excluded.discard(member)
        self._purge()
        return self._release(now)

    def _send_new(self, header: Header, payload: bytes, now: int) -> list[Action]:
        h = header  # built field by field: dataclasses.replace is slow on this hot path
        msg = Message(Header(h.type, self.proto, h.flags, self.me, self.next_rseq, h.origin,
                             h.mno, h.seq, h.hint, h.slot, h.ts, self.incarnation, h.length),
                      payload)
        self.next_rseq += 1
        self.last_multicast_at = now
        self._hb_next = now + self.heartbeat_after_ns  # no receiver's RTO is shorter
        if self.acked:
            self.send_buffer[msg.header.rseq] = msg
            self._sent_at[msg.header.rseq] = now
        return [Send(None, msg), RDeliver(self.me, msg)]

    def on_message(self, src: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        typ = h.type
        if typ == _NACK:
            return self._retransmit(src, h.rseq, h.seq)
        if typ == _ACK:
            acked = self.acked
            old = acked.get(src)
            if old is not None and h.rseq > old:
                acked[src] = h.rseq
                sent = self._sent_at.get(h.rseq)
                if sent is not None and now >= sent and h.rseq not in self._resent:
                    self._rtt_sample(src, now - sent)
                if old == self._ack_floor:
                    self._at_floor -= 1
                    if not self._at_floor:  # the last receiver at the minimum moved up
                        floor = min(acked.values())
                        self._ack_floor = floor
                        self._at_floor = sum(1 for v in acked.values() if v == floor)
                self._purge()
                return self._release(now) if self.backlog else []
            return []
        stream = self.streams.get(h.sender)
        if stream is None:
            return []
        if h.aux != stream.incarnation:
            if h.aux < stream.incarnation:
                # From before the sender restarted. Its data still in flight when the newer
                # incarnation's first message overtook it (a slower path) continues the old
                # stream: deliver it in order, as a correct member that got it sooner did
                # (agreement, 002 "Reliable FIFO"). No NACK or ACK goes to a gone incarnation.
                prev = stream.prev
                if prev is None or h.aux != prev.incarnation or typ == _HEARTBEAT:
                    return []
                return self._receive_old(prev, msg)
            # A restarted receiver that had not joined the old stream joins the new one from
            # the present too: its first messages were sent before we restarted.
            was = stream
            stream = self.streams[h.sender] = _Stream(incarnation=h.aux, adopt=stream.adopt)
            if not was.adopt:
                was.prev = None  # one incarnation back is kept
                stream.prev = was
            self._gaps.discard(h.sender)
            self._moved.discard(h.sender)
        if typ == _HEARTBEAT:
            if not stream.adopt:
                if h.rseq <= stream.delivered:
                    # We have it all, yet the sender thinks us behind: our ACK was lost (or
                    # is late). Say it again at the next tick, not at the next `ack_every`.
                    self._ack_soon(h.sender, stream)
                else:
                    self._note_highest(h.sender, stream, h.rseq, now)
            elif not stream.buffer:
                # A joining receiver asks for nothing from before its join. With no fresh
                # message kept yet, it joins after the heartbeat's number: the sender has
                # sent nothing newer, and may be unable to (its window held by the last ACK
                # of our previous incarnation) until we acknowledge.
                self._join_after(h.sender, stream, h.rseq)
            return []
        if stream.adopt:
            if h.flags & RETRANSMIT:
                # Sent before we restarted (our previous incarnation may have delivered it):
                # join at a message sent fresh, so one log never shows a delivery twice.
                return []
            # Join at the lowest fresh message of the first `nack_delay` (jitter reorders:
            # joining at the first arrival would skip the fresh ones just behind it).
            if stream.buffer is None:
                stream.buffer = {}
            if not stream.buffer:
                self._open_gap(h.sender, stream, now)
            stream.buffer[h.rseq] = msg
            return []
        return self._receive(stream, msg, now)

    def on_timer(self, key: str, now: int) -> list[Action]:
        out: list[Action] = [SetTimer(self.tick_key, self.tick_ns)]
        unacked = self.next_rseq - 1
        if unacked > self._purged and now >= self._hb_next:
            # something sent is not yet acknowledged by every member, and some receiver's
            # heartbeat may be due
            out += self._heartbeat(unacked, now)
        if self._gaps:
            streams = self.streams
            for sender in sorted(self._gaps, key=self._rank.__getitem__):
                stream = streams[sender]
                if stream.adopt:
                    if stream.buffer and now - stream.gap_since >= self.nack_delay_ns:
                        out += self._join(sender, stream, now)
                    continue
                if now - stream.gap_since < self.nack_delay_ns:
                    continue
                if stream.nack_at < 0 or now - stream.nack_at >= self.nack_retry_ns:
                    out += self._nack(sender, stream, now)
        if self._due:
            due, self._due = self._due, set()
            streams = self.streams
            for sender in sorted(due, key=self._rank.__getitem__):
                stream = streams[sender]
                stream.ack_due = False
                if not stream.adopt and stream.delivered > 0:
                    stream.acked_sent = stream.delivered
                    out.append(Send(sender, self._control(_ACK, rseq=stream.delivered)))
        if now - self.last_ack_at >= self.ack_every_ns:
            self.last_ack_at = now
            if self._moved:
                moved, self._moved = self._moved, set()
                streams = self.streams
                for sender in sorted(moved, key=self._rank.__getitem__):
                    stream = streams[sender]
                    if stream.delivered > stream.acked_sent:
                        stream.acked_sent = stream.delivered
                        out.append(Send(sender, self._control(_ACK, rseq=stream.delivered)))
        return out

    def _heartbeat(self, unacked: int, now: int) -> list[Action]:
        """HEARTBEATs carrying `unacked` (our highest number) to the receivers still behind it
        whose ACK is overdue: first once `rto(m)` passed since our last multicast, then at
        gaps that double up to `heartbeat_max_ns` (or the RTO, if longer), until a new
        multicast or the ACK ends it."""
        last = self.last_multicast_at
        hb_at, hb_gap = self._hb_at, self._hb_gap
        cap = self.heartbeat_max_ns
        due: list[int] = []
        nxt = -1
        for m, v in self.acked.items():
            if v >= unacked:
                continue
            at = hb_at[m]
            if at > last:
                when = at + hb_gap[m]
            else:
                rto = self.rto(m)
                hb_gap[m] = rto
                when = last + rto
            if when <= now:
                due.append(m)
                hb_at[m] = now
                gap = hb_gap[m] * 2
                hb_gap[m] = gap if gap < cap else max(cap, hb_gap[m])
                when = now + hb_gap[m]
            if nxt < 0 or when < nxt:
                nxt = when
        self._hb_next = nxt if nxt >= 0 else now + self.heartbeat_after_ns
        if not due:
            return []
        msg = self._control(_HEARTBEAT, rseq=unacked)
        if len(due) == len(self.acked):
            return [Send(None, msg)]
        return [Send(m, msg) for m in due]

    def rto(self, member: int) -> int:
        """How long after sending a number its ACK from `member` is overdue: SRTT + 4 RTTVAR
        of the ACK round trip (which includes the receiver's ACK delay), at least
        `heartbeat_after_ns` and at most `heartbeat_max_ns` + `ack_every_ns` (a sample
        stretched by a clock that jumped ahead must not silence the heartbeats);
        `ack_every_ns` + `heartbeat_after_ns` before the first sample."""
        srtt = self.srtt[member]
        if srtt < 0:
            return self.ack_every_ns + self.heartbeat_after_ns
        rto = srtt + 4 * self.rttvar[member]
        if rto < self.heartbeat_after_ns:
            return self.heartbeat_after_ns
        cap = self.heartbeat_max_ns + self.ack_every_ns
        return rto if rto < cap else cap

    def _rtt_sample(self, member: int, rtt: int) -> None:
        """RFC 6298 2.2-2.3: alpha 1/8, beta 1/4."""
        srtt = self.srtt[member]
        if srtt < 0:
            self.srtt[member] = rtt
            self.rttvar[member] = rtt // 2
            return
        self.rttvar[member] += (abs(srtt - rtt) - self.rttvar[member]) // 4
        self.srtt[member] = srtt + (rtt - srtt) // 8

    def _ack_soon(self, sender: int, stream: _Stream) -> None:
        if not stream.ack_due:
            stream.ack_due = True
            self._due.add(sender)

    def queued_tail(self) -> tuple[Header, bytes] | None:
        """The newest multicast still waiting for the window (None: nothing waits)."""
        return self.backlog[-1] if self.backlog else None

    def replace_queued_tail(self, header: Header, payload: bytes) -> None:
        """Rewrite the newest waiting multicast before it is numbered and sent (the sequencer
        coalesces ORDERs into it)."""
        self.backlog[-1] = (header, payload)

    def retag(self, proto: int) -> None:
        """Stamp `proto` on every datagram sent from now on (a container's instance tag)."""
        self.proto = proto

    def next_in_order(self, msg: Message) -> bool:
        """`on_message`'s common case for a message that carries an upper layer's data (not
        NACK, ACK or HEARTBEAT), taken by an upper layer that fuses it with its own receive
        path (nodes/protocols/sequencer.py): `msg` is the next of its sender's current
        stream and nothing waits behind it. Then the stream advances exactly as `_receive`
        would advance it and the answer is True: `on_message` would have returned just
        `[RDeliver(sender, msg)]`. Otherwise False, nothing changed: call `on_message`."""
        h = msg.header
        stream = self.streams.get(h.sender)
        if (stream is None or h.aux != stream.incarnation or stream.adopt or stream.buffer
                or h.rseq != stream.delivered + 1):
            return False
        rseq = stream.delivered = h.rseq
        self._moved.add(h.sender)
        if rseq - stream.acked_sent >= self._ack_count and not stream.ack_due:
            self._ack_soon(h.sender, stream)
        if stream.highest_seen <= rseq:  # nothing seen beyond: no gap
            stream.highest_seen = rseq
            self._close_gap(h.sender, stream)
        return True

    # -- receiving ----------------------------------------------------------------------------
    def _receive(self, stream: _Stream, msg: Message, now: int) -> list[Action]:
        rseq = msg.header.rseq
        if rseq <= stream.delivered:
            return []  # C <= V[i]: duplicate, discard
        out: list[Action] = []
        if rseq > stream.delivered + 1:
            # C > V[i] + 1: keep it for later and ask for what is missing.
            if stream.buffer is None:
                stream.buffer = {}
            stream.buffer[rseq] = msg
            self._note_highest(msg.header.sender, stream, rseq, now)
            return out
        sender = msg.header.sender
        out.append(RDeliver(sender, msg))
        if stream.buffer:
            buffer = stream.buffer
            while (nxt := buffer.pop(rseq + 1, None)) is not None:
                out.append(RDeliver(nxt.header.sender, nxt))
                rseq += 1
        stream.delivered = rseq
        self._moved.add(sender)
        if (rseq - stream.acked_sent >= self._ack_count or msg.header.flags & RETRANSMIT) \
                and not stream.ack_due:
            # a quarter window delivered since the last ACK, or a gap filled by a
            # retransmission (TCP's immediate ACK for a segment that fills a hole, RFC 5681
            # 4.2): the sender is waiting for this ACK
            self._ack_soon(sender, stream)
        if stream.highest_seen <= rseq:  # nothing seen beyond: no gap
            stream.highest_seen = rseq
            self._close_gap(sender, stream)
        return out

    def _receive_old(self, prev: _Stream, msg: Message) -> list[Action]:
        """A message of the sender's previous incarnation, overtaken by the newer one's:
        `_receive`'s rules without NACKs, ACKs or gap timers (nobody answers them now)."""
        rseq = msg.header.rseq
        if rseq <= prev.delivered:
            return []
        if prev.buffer is None:
            prev.buffer = {}
        if rseq > prev.delivered + 1:
            prev.buffer[rseq] = msg
            return []
        sender = msg.header.sender
        out: list[Action] = [RDeliver(sender, msg)]
        buffer = prev.buffer
        while (nxt := buffer.pop(rseq + 1, None)) is not None:
            out.append(RDeliver(nxt.header.sender, nxt))
            rseq += 1
        prev.delivered = rseq
        return out

    def _join(self, sender: int, stream: _Stream, now: int) -> list[Action]:
        """A restarted receiver joins the stream at the lowest fresh message it kept."""
        assert stream.buffer
        first = min(stream.buffer)
        stream.adopt = False
        stream.delivered = stream.highest_seen = stream.acked_sent = first - 1
        self._close_gap(sender, stream)
        out = self._receive(stream, stream.buffer.pop(first), now)
        if stream.buffer:  # a gap behind the first: NACKed as usual
            self._note_highest(sender, stream, max(stream.buffer), now)
        return out

    def _join_after(self, sender: int, stream: _Stream, rseq: int) -> None:
        """A restarted receiver joins the stream after `rseq` (a heartbeat's number) and
        acknowledges it at the next tick, which frees the sender's window."""
        stream.adopt = False
        stream.delivered = stream.highest_seen = stream.acked_sent = rseq
        self._close_gap(sender, stream)
        self._ack_soon(sender, stream)

    def _note_highest(self, sender: int, stream: _Stream, rseq: int, now: int) -> None:
        if rseq > stream.highest_seen:
            stream.highest_seen = rseq
        if stream.highest_seen > stream.delivered and stream.gap_since < 0:
            self._open_gap(sender, stream, now)

    # `_gaps` holds a sender exactly while its stream's `gap_since >= 0`: these two are the
    # only places that change either (a replaced stream leaves `_gaps` where it is replaced).
    def _open_gap(self, sender: int, stream: _Stream, now: int) -> None:
        stream.gap_since = now
        self._gaps.add(sender)

    def _close_gap(self, sender: int, stream: _Stream) -> None:
        if stream.gap_since >= 0:
            self._gaps.discard(sender)
        stream.gap_since = stream.nack_at = -1

    def _nack(self, sender: int, stream: _Stream, now: int) -> list[Action]:
        missing_from = stream.delivered + 1
        missing_to = stream.highest_seen
        if stream.buffer:
            while missing_to in stream.buffer:
                missing_to -= 1
        if missing_to < missing_from:
            return []
        stream.nack_at = now
        return [Send(sender, self._control(_NACK, rseq=missing_from, seq=missing_to))]

    # -- sending ------------------------------------------------------------------------------
    def _retransmit(self, dst: int, first: int, last: int) -> list[Action]:
        out: list[Action] = []
        for rseq in range(first, min(last, self.next_rseq - 1, first + self.max_resend - 1) + 1):
            msg = self.send_buffer.get(rseq)
            if msg is not None:
                self.retransmissions += 1
                self._resent.add(rseq)
                h = msg.header  # built field by field: dataclasses.replace is slow here
                h = Header(h.type, h.proto, h.flags | RETRANSMIT, h.sender, h.rseq, h.origin,
                           h.mno, h.seq, h.hint, h.slot, h.ts, h.aux, h.length)
                out.append(Send(dst, Message(h, msg.payload)))
        return out

    def _release(self, now: int) -> list[Action]:
        out: list[Action] = []
        while self.backlog and not self._window_full():
            header, payload = self.backlog.popleft()
            out += self._send_new(header, payload, now)
        return out

    def _purge(self) -> None:
        if not self.acked:
            return
        floor = self._ack_floor  # min(self.acked.values())
        if floor > self.next_rseq - 1:  # an ACK beyond what was sent frees no more
            floor = self.next_rseq - 1
        if floor <= self._purged:
            return
        # Numbers are consecutive: drop what the last purge left up to the new floor, instead
        # of scanning the whole buffer at every ACK.
        buf = self.send_buffer
        sent_at = self._sent_at
        for rseq in range(self._purged + 1, floor + 1):
            buf.pop(rseq, None)
            sent_at.pop(rseq, None)
        if self._resent:
            self._resent = {r for r in self._resent if r > floor}
        self._purged = floor

    def _control(self, mtype: MsgType, rseq: int = 0, seq: int = 0) -> Message:
        return Message(Header(mtype, self.proto, sender=self.me, rseq=rseq, seq=seq,
                              aux=self.incarnation))


# An upper layer's handler of one R-delivery: (sender, message, now) -> its actions.
Up = Callable[[int, Message, int], list[Action]]


class Below:
    """An upper layer's one handle on the reliable FIFO multicast below it (docs/architecture.md,
    "Protocol stack"): it builds the lower layer for the upper one's wire id and timer scope,
    hands every R-delivery to the upper layer's `up(sender, message, now)` and passes every
    other action upwards unchanged. What an upper layer needs of the lower one beyond events
    is a method here; no upper layer touches the lower layer's fields."""

    def __init__(self, me: int, members: list[int], params: dict[str, Any], wire_id: int,
                 up: Up, scope: str = "rm"):
        self.layer = ReliableMulticast(me, members, proto=wire_id, scope=scope,
                                       **reliable_kwargs(params))
        self.up = up

    def lift(self, actions: list[Action], now: int) -> list[Action]:
        """The lower layer's actions as the upper layer's: R-deliveries handed to `up`."""
        out: list[Action] = []
        if not actions:
            return out
        up = self.up
        for a in actions:
            if type(a) is RDeliver:
                out += up(a.src, a.msg, now)
            else:
                out.append(a)
        return out

    def start(self, now: int) -> list[Action]:
        return self.layer.start(now)

    def multicast(self, header: Header, payload: bytes, now: int) -> list[Action]:
        return self.lift(self.layer.multicast(header, payload, now), now)

    def on_message(self, src: int, msg: Message, now: int) -> list[Action]:
        return self.lift(self.layer.on_message(src, msg, now), now)

    def on_timer(self, key: str, now: int) -> list[Action]:
        return self.lift(self.layer.on_timer(key, now), now)

    def on_suspect(self, member: int, suspected: bool, now: int) -> list[Action]:
        return self.lift(self.layer.on_suspect(member, suspected, now), now)

    def owns(self, key: str) -> bool:
        """Whether timer `key` is the lower layer's (its keys are scoped `<scope>:...`)."""
        return key == self.layer.tick_key

    def next_in_order(self, msg: Message) -> bool:
        return self.layer.next_in_order(msg)

    def queued_tail(self) -> tuple[Header, bytes] | None:
        return self.layer.queued_tail()

    def replace_queued_tail(self, header: Header, payload: bytes) -> None:
        self.layer.replace_queued_tail(header, payload)

    def retag(self, proto: int) -> None:
        self.layer.retag(proto)

    @property
    def retransmissions(self) -> int:
        return self.layer.retransmissions


@mypyc_attr(allow_interpreted_subclasses=True)  # the base of every layer on reliable multicast
class OnReliable(LayerBase):
    """The events a layer on reliable multicast does not handle itself, passed to the layer
    below through its `Below` (`rm`). Not a protocol: it has no `broadcast`."""

    rm: Below

    def start(self, now: int) -> list[Action]:
        return self.rm.start(now)

    def on_message(self, src: int, msg: Message, now: int) -> list[Action]:
        return self.rm.on_message(src, msg, now)

    def on_timer(self, key: str, now: int) -> list[Action]:
        return self.rm.on_timer(key, now)

    def on_suspect(self, member: int, suspected: bool, now: int) -> list[Action]:
        return self.rm.on_suspect(member, suspected, now)

    def retag(self, proto: int) -> bool:
        self.rm.retag(proto)
        return True

    def managed(self, host: ManagedHost) -> list[Managed]:
        rm = self.rm
        return [Managed("Transport", (
            Attribute("Retransmissions", "int", lambda: rm.retransmissions,
                      description="data messages sent again (NACKed or timed out)"),))]
