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
  tail to the NACK rule -- to the members whose ACK is still below that number (the others
  have it all), first once the sender has been idle for `heartbeat_after_ns` and then
  backing off, each gap twice the last, up to `heartbeat_max_ns`, until a new multicast or
  the ACKs end it. (It went to every member at every idle tick, 10 ms: no member's ACK can be
  back that soon -- ACKs go out every `ack_every_ns`, and across a WAN take a round trip --
  so each message drew some thirty heartbeats per member, and at a hundred members they were
  most of the traffic. A lost tail is now exposed ~100 ms after the sender fell idle, like
  TCP's minimum retransmission timeout of 200 ms for a round trip.);
- "When can a sender purge a message from its buffer?" -- receivers periodically send a
  cumulative positive ACK (V[i]) to each sender; a message is purged once every member has it.
A gap is NACKed only once it has stayed open for `nack_delay_ns` (jitter reorders datagrams, and
an eager NACK would ask for what is still in flight); unanswered NACKs repeat every
`nack_retry_ns`. Heartbeats go out only from an idle sender, for the same reason; once a
receiver knows of a gap its own NACKs repeat, so a heartbeat needs repeating only when it was
lost itself, hence the back-off.

Flow control: a sender keeps at most `window` of its own messages unacknowledged by some member;
further multicasts wait in a backlog until ACKs free the window. Without it an overloaded
receiver's socket overflows, its NACKs ask for more than it can take, and throughput collapses
instead of levelling off. A NACK is answered with at most `max_resend` messages. Suspected
members (failure detector) do not hold the window, but the send buffer still keeps what they
miss: a partitioned member that stays correct must be able to catch up after the heal.

Restarts: every reliable message carries its sender's incarnation (header.aux). A message from a
newer incarnation resets that sender's stream. A restarted process (incarnation > 0) joins from
the present: the lowest message sent fresh (not a retransmission) that it gets from each stream
within `nack_delay` of the first fixes where it starts, since the history before its crash is
gone (a crashed process is no longer correct; 002 leaves recovery to membership). It used to
join at the first message of any kind, and a retransmission -- asked for by its NACK of
everything below a heartbeat's number -- made it deliver again what its previous incarnation had
delivered (integrity: one log, one delivery per message); heartbeats and retransmissions no
longer count until it has joined. One heartbeat does: reaching it before any fresh message,
it makes the receiver join after the heartbeat's number and acknowledge it. The sender may
have nothing fresh to send until then -- its window held full by the last ACK of the receiver's
previous incarnation, which counts again once unsuspected -- and every process had stopped
delivering after a restart some six seconds after the crash.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from nodes.protocols.base import Action, LayerBase, RDeliver, Send, SetTimer
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
    incarnation: int = 0
    adopt: bool = False  # a restarted receiver that has not joined this stream yet
    gap_since: int = -1  # local time a gap was first seen (-1: no gap)
    nack_at: int = -1  # local time of the last NACK for the current gap (-1: none sent)
    buffer: dict[int, Message] | None = None


class ReliableMulticast:
    def __init__(
        self,
        me: int,
        members: list[int],
        proto: int = Proto.RELIABLE,
        tick_ns: int = 10_000_000,
        nack_delay_ns: int = 5_000_000,
        nack_retry_ns: int = 60_000_000,
        ack_every_ns: int = 20_000_000,
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
        # Heartbeats: the last one's time (-1: none yet) and the gap before the next, which
        # doubles from heartbeat_after_ns up to heartbeat_max_ns and starts over at every
        # multicast.
        self.heartbeat_at = -1
        self.heartbeat_after_ns = heartbeat_after_ns
        self.heartbeat_gap = heartbeat_after_ns
        self.heartbeat_max_ns = max(heartbeat_max_ns, heartbeat_after_ns)
        self.ack_every_ns = ack_every_ns
        self.window = window
        self.max_resend = max_resend
        self.backlog: deque[tuple[Header, bytes]] = deque()
        self.next_rseq = 1  # C_i
        self.send_buffer: dict[int, Message] = {}
        self._purged = 0  # send_buffer holds nothing at or below this number
        self.acked = {m: 0 for m in members if m != me}  # highest cumulative ACK per receiver
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
        self.heartbeat_gap = self.heartbeat_after_ns
        if self.acked:
            self.send_buffer[msg.header.rseq] = msg
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
                return []  # from before the sender restarted
            # A restarted receiver that had not joined the old stream joins the new one from
            # the present too: its first messages were sent before we restarted.
            stream = self.streams[h.sender] = _Stream(incarnation=h.aux, adopt=stream.adopt)
            self._gaps.discard(h.sender)
            self._moved.discard(h.sender)
        if typ == _HEARTBEAT:
            if not stream.adopt:
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
        if unacked > self._purged:  # something sent is not yet acknowledged by every member
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
        """HEARTBEATs carrying `unacked` (our highest number) to the members still behind it,
        once the sender has been idle for the current back-off gap while some unsuspected
        member has not acknowledged everything."""
        quiet_since = self.last_multicast_at
        if self.heartbeat_at > quiet_since:
            quiet_since = self.heartbeat_at
        gap = self.heartbeat_gap
        if now - quiet_since < gap:
            return []
        floor = self._floor()
        if floor is None or floor >= unacked:
            return []
        self.heartbeat_at = now
        self.heartbeat_gap = min(gap * 2, self.heartbeat_max_ns)
        behind = [m for m, v in self.acked.items() if v < unacked]
        msg = self._control(_HEARTBEAT, rseq=unacked)
        if len(behind) == len(self.acked):
            return [Send(None, msg)]
        return [Send(m, msg) for m in behind]

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
        if stream.highest_seen <= rseq:  # nothing seen beyond: no gap
            stream.highest_seen = rseq
            self._close_gap(sender, stream)
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
        acknowledges it at the next ACK tick, which frees the sender's window."""
        stream.adopt = False
        stream.delivered = stream.highest_seen = rseq
        stream.acked_sent = 0
        self._close_gap(sender, stream)
        self._moved.add(sender)

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
        for rseq in range(self._purged + 1, floor + 1):
            buf.pop(rseq, None)
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
