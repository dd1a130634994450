"""`moving-sequencer`: total order by a sequencer role that rotates around the ring (001 ch. 2:
"the sequencer role is rotated among processes"; Chang and Maxemchuk, *Reliable
broadcast protocols*, TOCS 2(3), 1984). *Reconstructed*: 002 has no rules for it; these are
the rules M1-M4 below, over reliable FIFO multicast (the NACK layer) as the fixed sequencer is.

- M1 broadcast m: R-multicast DATA(origin, mno, payload), as sequencer.py does;
- M2 the token site T, once it holds the token and its unsequenced set U (received, not yet
  ordered) is not empty -- or after `token_hold_ms` with U empty -- R-multicasts
  ORDER(g + 1, U in receive order, succ(T)) and g += |U|: the ORDER numbers U and passes the
  token to succ(T);
- M3 on ORDER: record seq -> (origin, mno); the process it names becomes the token site once
  every number up to the ORDER's last is recorded *and* its DATA received (Chang-Maxemchuk's
  "acknowledge before taking the token"): then its U is exactly what nobody ordered yet;
- M4 deliver seq by seq once both the ORDER entry and the DATA are present.
Resilience (M5, option L) and token-site reformation after a crash (Chang-Maxemchuk's
membership phase) are not implemented: a crashed site stops the order.

Restarts (integrity, and M2's "U is exactly what nobody ordered yet"): a restarted process
numbering from 1 again would collide with the old incarnation's mids (the others would drop
its new messages as already received); at next_deliver = 1 it would wait for ever, the token
passed to it never taken again and the order stopped; and, as the ring's first member, it
would believe it held the token. So
- mnos start at `incarnation * INCARNATION_SPAN` (the sequencer's convention);
- M6 (ours) a restarted process (incarnation > 0) starts without the token and joins the order
  at the first ORDER it R-delivers (next_deliver = its first number). What it received before
  may have been ordered before that point, and ordering it again would give one message two
  numbers. An origin's messages are numbered in FIFO order (every site orders U in reliable
  FIFO's receive order), so once the ORDERs recorded without a gap from the join point name (o,
  n), o's messages below n that they do not name were ordered before the join: they are dropped
  (ORDERs come from different sites' streams: one still on its way may name lower numbers than a
  later one that arrived first, hence "without a gap"). Until then o's messages stay out of the
  ORDERs this process issues (another site orders them: every site holds them); after, only
  o's messages that follow the highest number of o named since the join without a gap go in
  (its messages between the two were sent before the restart, which reliable FIFO never hands
  it, and another site orders them first: numbering a later one now would break o's FIFO
  order, world seed 2151). Conversely an
  ORDER from the join point on may name a message sent before the restart, which reliable FIFO
  never hands it: an entry (o, n) below the first message of o it received is skipped (M4 would
  wait for it for ever, and with it the token).
- M7 (ours) the token passed to a member that is down stays with it, and its new incarnation
  never gets that ORDER (reliable FIFO joins from the present): the order stopped for good.
  The member that passed it, on hearing its successor's new incarnation while no ORDER
  followed its own, passes the token again with an empty ORDER (`token_repass`), at which
  the restarted process joins and takes it. Not claimed: if the crashed member had issued an
  ORDER that reached some members and not the one that passed it the token, the two numberings
  conflict (membership would settle it; out of scope).

Wire: ORDER carries the first number in `seq`, the next site in `slot`, and (origin u16, mno
u32) entries as the fixed sequencer's ORDER does; an empty ORDER just passes the token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nodes.protocols.base import (
    Action,
    Attribute,
    FinalDeliver,
    Log,
    Managed,
    ManagedHost,
    Received,
    SetTimer,
    ms,
    typed_params,
)
from nodes.protocols.reliable import Below, OnReliable, ReliableParams
from nodes.protocols.sequencer import INCARNATION_SPAN, pack_orders, unpack_orders
from nodes.wire import Header, Message, MsgType

WIRE_ID = 10


@dataclass(frozen=True)
class MovingSequencerParams(ReliableParams):
    token_hold_ms: float = ms("how long an idle token site waits before passing the token", 20)


class MovingSequencer(OnReliable):
    def __init__(self, me: int, members: list[int], params: dict[str, Any],
                 scope: str = "rm"):
        p = typed_params(MovingSequencerParams, params)
        self.me = me
        ring = sorted(members)
        self.succ = ring[(ring.index(me) + 1) % len(ring)]
        self.rm = Below(me, members, params, WIRE_ID, self._r_deliver, scope)
        self.hold_ns = round(p.token_hold_ms * 1e6)
        self.flush_key, self.hold_key = f"ms:{scope}:flush", f"ms:{scope}:hold"
        self.instance = "" if scope == "rm" else f"moving-sequencer#{scope}"
        self.incarnation = int(params.get("incarnation", 0))
        self.mno = self.incarnation * INCARNATION_SPAN  # mids stay unique across restarts
        # M6: a restarted process joins at its first ORDER; per origin, the first number an
        # ORDER from there on names (None: a process that never restarted orders anything).
        self.joining = self.incarnation > 0
        self.first_named: dict[int, int] | None = {} if self.joining else None
        self.join_seq: int | None = None
        self.top_named: dict[int, int] = {}  # M6: per origin, the highest named since the join
        self.named_to = 0  # M6: ORDERs recorded without a gap from the join up to here
        # M6: per origin, the first message received since the restart (ours: our first).
        self.first_data: dict[int, int] | None = {me: self.mno + 1} if self.joining else None
        self.received: dict[tuple[int, int], int] = {}  # DATA received: key -> size
        self.unordered: dict[tuple[int, int], None] = {}  # U, in receive order
        self.order: dict[int, tuple[int, int]] = {}  # seq -> key (recorded ORDER entries)
        self.ordered: set[tuple[int, int]] = set()
        self.next_deliver = 1
        self.g = 0  # highest number assigned by the ORDERs seen
        self.site = me == ring[0] and not self.joining  # the first member starts with it
        self.token_due: int | None = None  # last number of the ORDER that passed us the token
        self.flush_armed = False
        self.passed_at: int | None = None  # M7: g when our last ORDER passed the token on
        self.succ_inc = 0  # M7: the newest incarnation of succ heard
        self.orders_sent = 0
        self.delivered = 0

    # -- Layer interface ----------------------------------------------------------------------
    def managed(self, host: ManagedHost) -> list[Managed]:
        return [Managed("TotalOrder", (
            Attribute("LastSeq", "int", lambda: self.next_deliver - 1,
                      description="last final-delivered sequence number"),
            Attribute("PendingQueue", "int", lambda: len(self.received),
                      description="data messages received and not yet final-delivered")),
        ), *super().managed(host)]

    def start(self, now: int) -> list[Action]:
        out = self.rm.start(now)
        if self.site:
            out += self._took_token()
        return out

    def broadcast(self, payload: bytes, now: int) -> list[Action]:
        """M1."""
        self.mno += 1
        header = Header(MsgType.DATA, origin=self.me, mno=self.mno, ts=now)
        out: list[Action] = [Log("send", {"mno": self.mno, "size": len(payload)})]
        return out + self.rm.multicast(header, payload, now)

    def on_timer(self, key: str, now: int) -> list[Action]:
        if key in (self.flush_key, self.hold_key):
            if key == self.flush_key:
                self.flush_armed = False
            if not self.site or (key == self.hold_key and self.unordered):
                return []  # not ours, or a flush is due anyway
            return self._issue_order(now)
        return self.rm.on_timer(key, now)

    # -- the algorithm ------------------------------------------------------------------------
    def _r_deliver(self, src: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        out: list[Action] = []
        if h.sender == self.succ and h.aux > self.succ_inc:
            self.succ_inc = h.aux
            out += self._repass(now)
        if h.type == MsgType.DATA:
            out += self._on_data(msg)
        elif h.type == MsgType.ORDER:
            out += self._on_order(msg)
        return out

    def _on_data(self, msg: Message) -> list[Action]:
        h = msg.header
        key = (h.origin, h.mno)
        if key in self.received:
            return []
        if self.first_data is not None:
            self.first_data.setdefault(h.origin, h.mno)
        first = None if self.first_named is None else self.first_named.get(h.origin)
        if first is not None and h.mno < first and key not in self.ordered:
            return []  # M6: ordered before this process joined
        self.received[key] = len(msg.payload)
        out: list[Action] = [Received(h.origin, h.mno, len(msg.payload), self.instance)]
        if key not in self.ordered:
            self.unordered[key] = None
            if self.site and not self.flush_armed:  # M2: order at the end of this instant
                self.flush_armed = True
                out.append(SetTimer(self.flush_key, 0))
        return out + self._deliver()

    def _on_order(self, msg: Message) -> list[Action]:
        """M3."""
        h = msg.header
        entries = unpack_orders(msg.payload)
        if self.joining:  # M6
            self.joining = False
            self.next_deliver = self.join_seq = h.seq
        elif self.join_seq is not None and h.seq < self.join_seq:
            return []  # an ORDER from before our join point (another site's stream)
        for k, key in enumerate(entries):
            self.order[h.seq + k] = key
            self.ordered.add(key)
            self.unordered.pop(key, None)
            if self.first_named is not None:
                self.top_named[key[0]] = max(self.top_named.get(key[0], 0), key[1])
        if self.first_named is not None:
            self._note_named()
        last = h.seq + len(entries) - 1
        self.g = max(self.g, last)
        if h.slot == self.me:
            self.token_due = last
        return self._deliver()

    def _note_named(self) -> None:
        """M6: an origin's first number named since the join; its unnamed messages below it
        were ordered before the join. Read over the ORDERs recorded without a gap from the
        join point only: ORDERs come from different sites' streams, and one still on its way
        may name lower numbers than a later one that arrived first."""
        assert self.first_named is not None and self.join_seq is not None
        if self.named_to < self.join_seq - 1:
            self.named_to = self.join_seq - 1
        while (key := self.order.get(self.named_to + 1)) is not None:
            self.named_to += 1
            origin, mno = key
            if origin in self.first_named:
                continue
            self.first_named[origin] = mno
            for key in [k for k in self.received if k[0] == origin and k[1] < mno
                        and k not in self.ordered]:
                del self.received[key]
                self.unordered.pop(key, None)

    def _deliver(self) -> list[Action]:
        """M4, then M3's condition for taking the token."""
        out: list[Action] = []
        while (key := self.order.get(self.next_deliver)) is not None:
            if key not in self.received:
                first = None if self.first_data is None else self.first_data.get(key[0])
                if first is None or key[1] >= first:
                    break
                del self.order[self.next_deliver]  # M6: sent before we restarted
                self.ordered.discard(key)
                self.next_deliver += 1
                continue
            del self.order[self.next_deliver]
            out.append(FinalDeliver(key[0], key[1], self.next_deliver,
                                    self.received.pop(key), self.instance))
            self.ordered.discard(key)
            self.delivered += 1
            self.next_deliver += 1
        if self.token_due is not None and self.next_deliver > self.token_due:
            self.token_due = None
            self.site = True
            out += self._took_token()
        return out

    def _took_token(self) -> list[Action]:
        if self.unordered:
            self.flush_armed = True
            return [SetTimer(self.flush_key, 0)]
        return [SetTimer(self.hold_key, self.hold_ns)]

    def _repass(self, now: int) -> list[Action]:
        """M7: our successor restarted and no ORDER followed the one that passed it the
        token: pass it again."""
        if self.site or self.passed_at is None or self.g != self.passed_at:
            return []
        self.orders_sent += 1
        header = Header(MsgType.ORDER, origin=self.me, seq=self.g + 1, slot=self.succ)
        return [Log("token_repass", {"to": self.succ, "seq": self.g + 1}),
                *self.rm.multicast(header, b"", now)]

    def _issue_order(self, now: int) -> list[Action]:
        """M2: number U and pass the token to succ."""
        named = self.first_named
        if named is None:
            entries = list(self.unordered)
            self.unordered.clear()
        else:  # M6: only origins whose join point is known, in FIFO order from there
            after = {o: self.top_named[o] + 1 for o in named}
            entries = []
            for key in self.unordered:
                if after.get(key[0]) == key[1]:
                    entries.append(key)
                    after[key[0]] += 1
            for key in entries:
                del self.unordered[key]
        first = self.g + 1
        self.site = False
        self.orders_sent += 1
        self.passed_at = first + len(entries) - 1
        header = Header(MsgType.ORDER, origin=self.me, seq=first, slot=self.succ)
        # Our own ORDER comes back as an R-delivery at once and is recorded there (M3).
        return self.rm.multicast(header, pack_orders(entries), now)
