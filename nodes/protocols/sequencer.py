"""Fixed-sequencer total order multicast (000, section 2.1 and Fig. 1).

"A data message is disseminated using unordered reliable multicast. Upon reception, the message
is buffered until a sequence number for it is obtained. A single process is designated as the
sequencer: it increments a counter and multicasts its value along with the original message's
identification to all receivers as a control message. Data messages are then delivered
according to the sequence numbers."

Here the reliable multicast is reliable FIFO (so ORDER control messages from the sequencer also
arrive in order and are repaired when lost). ORDERs assigned in the same instant are batched
into one control message: its header carries the first number and the payload the
(origin, mno) pairs, numbered consecutively.

With `optimistic: true` every process also opt-delivers data messages in their spontaneous
receive order -- the plain-sequencer baseline of optimistic total order (000 section 2.2).

Relay: "a group membership protocol is used to ensure that for any given data message there is
exactly one active sequencer" (000 section 2.1), and the view-synchronous multicast under it
makes sure every correct process gets every ordered message. Without a membership service
here, a process that finds the next ORDER naming a message it never received (its origin
crashed while this process was partitioned away) FETCHes it from the sequencer, which has
R-delivered every message it ordered; the copy comes back flagged RELAYED.

The relay store keeps a message until it is stable (ours, after view synchrony's stability):
every other member has final-delivered it. Each member reports the last number it delivered
to the sequencer at the ACK period (`ack_every_ms`, a FETCH whose header `seq` carries it and
whose list may be empty; every FETCH carries it). A count limit evicted, under load, what a
member cut off for long still needed once its origin crashed, and that member stalled for
good; a member that never reports (cut off, or crashed for good) now keeps the store growing,
as the reliable layer's send buffers keep what a suspect misses. A FETCH the store cannot
serve is counted (`fetch_unserved`, `testbed:type=TotalOrder` `FetchUnserved`) and logged.
A member catching up FETCHes in rounds of up to `FETCH_ROUND` datagrams of 64 entries: the
next round goes out as soon as the last one is answered, and again after `fetch_after_ms`
when it was not (lost, or unserved).

Restarts: the membership service of 000 §2.1 admits a process to the group before it
multicasts there, and keeps the one sequencer's numbering going. Without it, a FETCH naming
no message and marked by its header's `aux` stands in for both (`aux` JOIN_TO_SEQUENCER: a
member's request, `seq` 0, or answer, `seq` N; `aux` JOIN_QUESTION: the sequencer's question;
a delivery report is an unmarked FETCH):
- a restarted member (incarnation > 0) numbers each multicast at once (its `send`: a layer
  above, nodes/protocols/switching.py, maps the instance's ids to its own from it) but holds
  it until it has joined the order at the first ORDER it R-delivers, so each of them is
  ordered after its join and delivered by itself too; it asks the sequencer to join (FETCH,
  `seq` 0), which answers with an ORDER at once, empty when it has nothing to number, so a
  member joins even when nobody else sends;
- a restarted sequencer must not reuse a number: it asks every member for the next number it
  knows (FETCH, `seq` 0, answered by a FETCH whose `seq` is that number) and numbers nothing
  until every member not suspected has answered; it then continues after the highest answer
  and joins the order there.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Any, Final, Protocol

from nodes.protocols.base import (
    Action,
    Attribute,
    FinalDeliver,
    Log,
    Managed,
    ManagedHost,
    OptDeliver,
    Received,
    Send,
    SetTimer,
)
from nodes.protocols.params import SequencerParams as SequencerParams  # re-exported
from nodes.protocols.reliable import Below, OnReliable
from nodes.wire import FETCH_MAX, Flag, Header, Message, MsgType, Proto

ORDER_ENTRY: Final = struct.Struct("!HI")  # origin, mno
FLUSH: Final = "seq:flush"
INCARNATION_SPAN: Final = 1_000_000
# An ORDER grows by coalescing (see _flush_orders) up to what fits one Ethernet frame with
# its header: 1,356 bytes of (origin, mno) entries.
ORDER_COALESCE_BYTES: Final = 1400 - 44
RELAYED: Final = int(Flag.RELAYED)  # IntFlag arithmetic is slow on the receive path
# Enum members as module constants: `MsgType.DATA` is a slow class-attribute lookup on the
# per-datagram path.
_DATA: Final = MsgType.DATA
_ORDER: Final = MsgType.ORDER
_FETCH: Final = MsgType.FETCH
FETCH_ROUND: Final = 4  # FETCH datagrams per round
# A join FETCH's header `aux` (a plain FETCH, a request or delivery report, has 0): to the
# sequencer (a member's request to join, `seq` 0, or its answer, `seq` the next number it
# knows), or the restarted sequencer's question to a member.
JOIN_TO_SEQUENCER: Final = 1
JOIN_QUESTION: Final = 2


def mid_key(origin: int, mno: int) -> int:
    """A message id (origin, mno) as one int, the key of the sequencer's R, S and relay
    store: an int hashes and compares natively, a tuple element by element (these dict
    operations are on every DATA and ORDER's path). Both fit: origin 16 bits, mno 32 (the
    wire's widths, `ORDER_ENTRY`)."""
    return (origin << 32) | mno


def mid_of(key: int) -> tuple[int, int]:
    """`mid_key`'s (origin, mno) back."""
    return key >> 32, key & 0xFFFFFFFF


def pack_orders(entries: list[tuple[int, int]]) -> bytes:
    return b"".join(ORDER_ENTRY.pack(o, n) for o, n in entries)


def unpack_orders(payload: bytes) -> list[tuple[int, int]]:
    return [ORDER_ENTRY.unpack_from(payload, i) for i in range(0, len(payload), ORDER_ENTRY.size)]


class SeenMessages:
    """The (origin, mno) of every data message R-delivered, for exact duplicate suppression in
    bounded memory: per origin and incarnation, the contiguous range of mnos seen (reliable
    FIFO delivers an origin's messages in order, so the range just grows at its top), plus a
    set of the few seen outside it (relayed copies that arrived ahead of, or behind, the
    FIFO stream). A plain set of keys grew by one entry per message for the whole run.
    Incarnations have ranges of their own: a restarted origin numbers
    from `incarnation * INCARNATION_SPAN` on, far above its old range."""

    __slots__ = ("ranges", "extra")

    def __init__(self) -> None:
        # (origin, incarnation) packed in one int -> [first seen - 1, last contiguous seen].
        self.ranges: dict[int, list[int]] = {}
        self.extra: set[tuple[int, int]] = set()

    def __contains__(self, key: tuple[int, int]) -> bool:
        origin, mno = key
        r = self.ranges.get((origin << 16) | (mno // INCARNATION_SPAN))
        return (r is not None and r[0] < mno <= r[1]) or key in self.extra

    def add(self, key: tuple[int, int]) -> None:
        self.add_new(key)

    def add_new(self, key: tuple[int, int]) -> bool:
        """`key not in self`, then `self.add(key)` if so, with one look-up of its range: the
        sequencer's per-message path."""
        origin, mno = key
        lane = (origin << 16) | (mno // INCARNATION_SPAN)
        r = self.ranges.get(lane)
        if r is None:
            if self.extra and key in self.extra:
                return False
            self.ranges[lane] = [mno - 1, mno]
            return True
        extra = self.extra
        if r[0] < mno <= r[1] or (extra and key in extra):
            return False
        if mno == r[1] + 1:
            r[1] = mno
            while extra and (origin, r[1] + 1) in extra:
                extra.discard((origin, r[1] + 1))
                r[1] += 1
        elif mno == r[0]:
            r[0] = mno - 1
            while extra and (origin, r[0]) in extra:
                extra.discard((origin, r[0]))
                r[0] -= 1
        else:
            extra.add(key)
        return True

    def __len__(self) -> int:
        """Entries held (ranges and stragglers), not messages seen."""
        return len(self.ranges) + len(self.extra)


class OrderPolicy(Protocol):
    """When the sequencer opt-delivers and numbers the data messages it receives: the plain
    sequencer (no policy) does both at receipt, in receive order (000 Fig. 1); SETO's delay
    compensation (nodes/protocols/seto.py `SetoDelays`, 000 Fig. 4) postpones both. The
    policy is bound to its sequencer (`bind`) and may read it and call its public methods
    (`enqueue_order`), never write its fields; its own datagrams and timers come to it
    first (`on_message`, `on_timer`: None when they are not its own)."""

    def bind(self, seq: Sequencer) -> None: ...

    def start(self, now: int) -> list[Action]: ...

    def on_message(self, src: int, msg: Message, now: int) -> list[Action] | None: ...

    def on_timer(self, key: str, now: int) -> list[Action] | None: ...

    def hint_us(self) -> int:
        """The delay hint piggybacked on our DATA messages (000 Fig. 4 line 10)."""
        ...

    def on_data(self, msg: Message, now: int) -> list[Action]:
        """A data message was received (and recorded in R)."""
        ...

    def before_order(self, msg: Message, now: int) -> None:
        """An ORDER from the sequencer is about to be recorded."""
        ...

    def after_order(self, msg: Message, now: int) -> list[Action]:
        """That ORDER was recorded and what it made deliverable was delivered."""
        ...

    def before_fnl(self, fnl: FinalDeliver) -> list[Action]:
        """What goes out just before the final delivery `fnl`."""
        ...

    def roles(self) -> dict[str, int]:
        """The roles the policy gives members (`Layer.roles`): Fast SETO's `coordinator`."""
        ...


class Sequencer(OnReliable):
    def __init__(self, me: int, members: list[int], params: dict[str, Any],
                 wire_id: int = Proto.SEQUENCER, policy: OrderPolicy | None = None):
        self.me = me
        self.members = members
        self.proto = wire_id
        self.sequencer: int = params.get("sequencer_id", min(members))
        self.optimistic = bool(params.get("optimistic", False))
        self.rm = Below(me, members, params, wire_id, self._r_deliver_from)
        # A restarted process numbers its messages in a fresh range so mids stay unique, and
        # joins the order at the first ORDER it sees (its pre-crash history is gone).
        self.incarnation = int(params.get("incarnation", 0))
        self.mno = self.incarnation * INCARNATION_SPAN  # our own TO-multicast counter
        self.g = 0  # global sequence number (used by the sequencer)
        self.next_deliver = 1
        self.joining = self.incarnation > 0
        # (mno, payload): our multicasts waiting for our join (module docstring)
        self.held: list[tuple[int, bytes]] = []
        self.join_asked = False  # the sequencer owes a joining member an ORDER
        self.rejoin_at = 0  # when a joining member or recovering sequencer asks again
        # A restarted sequencer: the members whose next number it waits for, and the highest
        # of those that answered (module docstring).
        self.waiting: set[int] = (set(m for m in members if m != me)
                                  if self.joining and me == self.sequencer else set())
        self.next_known = 1
        self.suspected: set[int] = set()
        self.received: dict[int, int] = {}  # R: mid_key(origin, mno) -> payload size
        self.order: dict[int, int] = {}  # S: seq -> mid_key(origin, mno)
        self.pending_orders: list[tuple[int, int]] = []
        self.opt_delivered = 0
        self.fnl_delivered = 0
        # Relay (see module docstring): every data message seen, and those some member may
        # still FETCH (until stable) kept at the sequencer.
        self.seen = SeenMessages()
        self.store: dict[int, Message] = {}  # mid_key -> message
        # The sequencer's own deliveries still in the store, oldest first: the front one is
        # number next_deliver - len(stable_keys). A deque, as evicting a plain dict's first key
        # walks the deleted slots at its front (O(store) per message).
        self.stable_keys: deque[int] = deque()
        # The last number each other member reported delivered (at the sequencer).
        self.delivered_at: dict[int, int] = {m: 0 for m in members if m != me}
        self.fetch_unserved = 0  # FETCHed messages the store did not hold
        self.fetch_after_ns = round(float(params.get("fetch_after_ms", 200)) * 1e6)
        self.report_every_ns = round(float(params.get("ack_every_ms", 200)) * 1e6)
        self.reported = 0  # the last number we reported delivered
        self.reported_at = -1  # local time of that report (-1: none yet)
        self.fetch_wanted: list[int] = []  # mid_keys asked for in the last FETCH round
        self.blocked_since: int | None = None  # when the next ORDER's data went missing
        self.policy = policy
        if policy is not None:
            policy.bind(self)

    # -- Layer interface ----------------------------------------------------------------------
    def start(self, now: int) -> list[Action]:
        out = self.rm.start(now) + self._rejoin(now)
        return out if self.policy is None else out + self.policy.start(now)

    def renumber(self, last: int) -> bool:
        self.mno = last
        return True

    def roles(self) -> dict[str, int]:
        """The `sequencer` numbers (sends ORDERs) and serves FETCHes (000 Fig. 1 and the
        relay); the order policy's roles besides."""
        if self.policy is None:
            return {"sequencer": self.sequencer}
        return {"sequencer": self.sequencer, **self.policy.roles()}

    def managed(self, host: ManagedHost) -> list[Managed]:
        order = Managed("TotalOrder", (
            Attribute("LastSeq", "int", lambda: self.next_deliver - 1,
                      description="last final-delivered sequence number"),
            Attribute("PendingQueue", "int", lambda: len(self.received),
                      description="messages received and not yet final-delivered"),
            Attribute("Sequencer", "str", lambda: host.name(self.sequencer),
                      description="the host that numbers every message (000 Fig. 1)"),
            Attribute("RelayStore", "int", lambda: len(self.store),
                      description="messages the sequencer keeps for FETCHes (until every "
                                  "member delivered them)"),
            Attribute("FetchUnserved", "int", lambda: self.fetch_unserved,
                      description="FETCHed messages the sequencer's relay store did not hold")))
        return [order, *super().managed(host)]

    def broadcast(self, payload: bytes, now: int) -> list[Action]:
        """TO-multicast(m): R-multicast the data message (Fig. 1); a restarted member numbers
        it now (its `send`, which a layer above maps to its own id) and holds it until it has
        joined the order."""
        self.mno += 1
        out: list[Action] = [Log("send", {"mno": self.mno, "size": len(payload)})]
        if self.joining and self.me != self.sequencer:
            self.held.append((self.mno, payload))
            return out
        return out + self._multicast(self.mno, payload, now)

    def _multicast(self, mno: int, payload: bytes, now: int) -> list[Action]:
        header = Header(MsgType.DATA, origin=self.me, mno=mno, ts=now, hint=self._hint_us())
        return self.rm.multicast(header, payload, now)

    def on_message(self, src: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        typ = h.type
        if typ == _FETCH:
            if h.aux:
                return self._on_join_fetch(src, h.aux, h.seq, now)
            return self._serve_fetch(src, msg)
        if typ == _DATA and h.flags & RELAYED:
            return self._r_deliver(msg, now)
        if typ in (_DATA, _ORDER) and self.rm.next_in_order(msg):
            # The common case, fused: reliable FIFO would hand just this message up
            # (`ReliableMulticast.next_in_order`); no RDeliver, no lists in between.
            return self._r_deliver(msg, now)
        if self.policy is not None:
            own = self.policy.on_message(src, msg, now)
            if own is not None:
                return own
        return self.rm.on_message(src, msg, now)

    def on_timer(self, key: str, now: int) -> list[Action]:
        if key == FLUSH:
            return self._flush_orders(now)
        if self.policy is not None:
            own = self.policy.on_timer(key, now)
            if own is not None:
                return own
        return self.rm.on_timer(key, now) + self._fetch_missing(now) + self._rejoin(now)

    def on_suspect(self, member: int, suspected: bool, now: int) -> list[Action]:
        if suspected:
            self.suspected.add(member)
        else:
            self.suspected.discard(member)
        return self.rm.on_suspect(member, suspected, now) + self._recovered(now)

    # -- the algorithm ------------------------------------------------------------------------
    def _r_deliver_from(self, src: int, msg: Message, now: int) -> list[Action]:
        return self._r_deliver(msg, now)

    def _r_deliver(self, msg: Message, now: int) -> list[Action]:
        h = msg.header
        typ = h.type
        if typ == _DATA:
            origin, mno = h.origin, h.mno
            if not self.seen.add_new((origin, mno)):
                return []  # a relayed copy of what reliable multicast already gave us
            key = (origin << 32) | mno  # mid_key, inlined
            if self.me == self.sequencer and self.delivered_at:  # it serves FETCHes
                self.store[key] = msg
            size = len(msg.payload)
            self.received[key] = size
            out: list[Action] = [Received(origin, mno, size)]
            out += self._on_data(msg, now)
            out += self._try_deliver()
            return out
        if typ == _ORDER and h.sender == self.sequencer:
            policy = self.policy
            if policy is not None:
                policy.before_order(msg, now)
            released: list[Action] = []
            if self.joining:
                self.joining = False
                self.next_deliver = h.seq
                held, self.held = self.held, []
                for mno, data in held:
                    released += self._multicast(mno, data, now)
            order = self.order
            seq = h.seq
            payload = msg.payload
            unpack = ORDER_ENTRY.unpack_from
            for i in range(0, len(payload), ORDER_ENTRY.size):  # unpack_orders, inlined
                o: int
                n: int
                o, n = unpack(payload, i)
                order[seq] = (o << 32) | n  # mid_key, inlined
                seq += 1
            if policy is not None:
                return self._try_deliver() + policy.after_order(msg, now) + released
            return self._try_deliver() + released
        return []

    def _on_data(self, msg: Message, now: int) -> list[Action]:
        """A data message was received (and recorded in R). The plain sequencer opt-delivers it
        at once when optimistic and, at the sequencer, orders it in this spontaneous receive
        order (Fig. 1). An order policy (SETO) decides instead."""
        if self.policy is not None:
            return self.policy.on_data(msg, now)
        h = msg.header
        out: list[Action] = []
        if self.optimistic:
            self.opt_delivered += 1
            out.append(OptDeliver(h.origin, h.mno, len(msg.payload)))
        if self.me == self.sequencer:
            out += self.enqueue_order((h.origin, h.mno))
        return out

    def _fetch_missing(self, now: int) -> list[Action]:
        """The next ORDER names a message we never got, and reliable FIFO cannot repair it
        (its origin crashed or restarted): after `fetch_after` ask the sequencer, which holds
        every message not yet stable, for the missing ones, a round of up to `FETCH_ROUND`
        FETCHes; the next round at once when this one is answered. Otherwise report our
        position (module docstring) once per `report_every`."""
        if self.me == self.sequencer or self.joining:
            return []
        key = self.order.get(self.next_deliver)
        if key is None or key in self.received:
            self.blocked_since = None
            self.fetch_wanted = []
            return self._report(now)
        if self.blocked_since is None:
            self.blocked_since = now
            return self._report(now)
        answered = bool(self.fetch_wanted) and all(mid_of(k) in self.seen
                                                   for k in self.fetch_wanted)
        if not answered and now - self.blocked_since < self.fetch_after_ns:
            return self._report(now)
        self.blocked_since = now
        received = self.received
        wanted = [k for _, k in sorted(self.order.items()) if k not in received]
        wanted = wanted[:FETCH_MAX * FETCH_ROUND]
        self.fetch_wanted = wanted
        self.reported, self.reported_at = self.next_deliver - 1, now
        header = Header(MsgType.FETCH, self.proto, sender=self.me, seq=self.reported)
        return [Send(self.sequencer,
                     Message(header, pack_orders([mid_of(k) for k in
                                                  wanted[i:i + FETCH_MAX]])))
                for i in range(0, len(wanted), FETCH_MAX)]

    def _report(self, now: int) -> list[Action]:
        """Tell the sequencer the last number we delivered (an empty FETCH), when it moved
        and `report_every` passed since the last report."""
        pos = self.next_deliver - 1
        if pos <= self.reported or (self.reported_at >= 0
                                    and now - self.reported_at < self.report_every_ns):
            return []
        self.reported, self.reported_at = pos, now
        header = Header(MsgType.FETCH, self.proto, sender=self.me, seq=pos)
        return [Send(self.sequencer, Message(header, b""))]

    def _serve_fetch(self, src: int, msg: Message) -> list[Action]:
        """Relay what `src` asks for, and drop from the store what every member delivered."""
        out: list[Action] = []
        unserved = 0
        for origin, mno in unpack_orders(msg.payload):
            data = self.store.get(mid_key(origin, mno))
            if data is not None:
                h = data.header.with_(flags=data.header.flags | Flag.RELAYED)
                out.append(Send(src, Message(h, data.payload)))
            else:
                unserved += 1
        if unserved:
            self.fetch_unserved += unserved
            out.append(Log("fetch_unserved", {"member": src, "count": unserved}))
        pos = msg.header.seq
        if pos > self.delivered_at.get(src, pos):
            self.delivered_at[src] = pos
            self._collect()
        return out

    def _collect(self) -> None:
        """Drop from the store the messages every other member reported delivered."""
        floor = min(self.delivered_at.values())
        stable = self.stable_keys
        first = self.next_deliver - len(stable)
        store = self.store
        while stable and first <= floor:
            store.pop(stable.popleft(), None)
            first += 1

    def _rejoin(self, now: int) -> list[Action]:
        """A joining member asks the sequencer for an ORDER to join at; a restarted sequencer
        asks the members it waits for the next number they know; both every `fetch_after`
        until answered (the FETCH is a datagram, which may be lost)."""
        if not self.joining or now < self.rejoin_at:
            return []
        self.rejoin_at = now + self.fetch_after_ns
        if self.me != self.sequencer:
            ask = Header(MsgType.FETCH, self.proto, sender=self.me, aux=JOIN_TO_SEQUENCER)
            return [Send(self.sequencer, Message(ask, b""))]
        question = Header(MsgType.FETCH, self.proto, sender=self.me, aux=JOIN_QUESTION)
        return [Send(m, Message(question, b"")) for m in sorted(self.waiting - self.suspected)]

    def _on_join_fetch(self, src: int, aux: int, seq: int, now: int) -> list[Action]:
        """A join FETCH (marked by `aux`): a member's request to join (JOIN_TO_SEQUENCER,
        `seq` 0, at the sequencer), the sequencer's question for the next number
        (JOIN_QUESTION, at a member), or a member's answer to it (JOIN_TO_SEQUENCER, `seq`
        that number, at the sequencer)."""
        if self.me != self.sequencer:
            if src != self.sequencer or aux != JOIN_QUESTION:
                return []
            known = max(self.next_deliver, max(self.order, default=0) + 1)
            header = Header(MsgType.FETCH, self.proto, sender=self.me, seq=known,
                            aux=JOIN_TO_SEQUENCER)
            return [Send(src, Message(header, b""))]
        if aux != JOIN_TO_SEQUENCER:
            return []
        if seq:
            if src in self.waiting:
                self.waiting.discard(src)
                self.next_known = max(self.next_known, seq)
                return self._recovered(now)
            return []
        if self.joining:
            return []  # we are restarting too: the member asks again
        out: list[Action] = []
        if not self.pending_orders and not self.join_asked:
            out.append(SetTimer(FLUSH, 0))
        self.join_asked = True
        return out

    def _recovered(self, now: int) -> list[Action]:
        """A restarted sequencer that has every answer it waits for continues the numbering
        after the highest number a member knows, and joins the order there."""
        if not (self.joining and self.me == self.sequencer and self.waiting <= self.suspected):
            return []
        self.joining = False
        self.waiting = set()
        self.g = self.next_known - 1
        self.next_deliver = self.next_known
        if not self.pending_orders:
            return []
        return self._flush_orders(now)

    def enqueue_order(self, key: tuple[int, int]) -> list[Action]:
        """The sequencer numbers `key` next; the ORDER goes out at the end of the current
        instant, batched with any others."""
        out: list[Action] = []
        if not self.pending_orders:
            out.append(SetTimer(FLUSH, 0))
        self.pending_orders.append(key)
        return out

    def _hint_us(self) -> int:
        """The delay hint piggybacked on our DATA messages (0: none; SETO's is 000 Fig. 4)."""
        return 0 if self.policy is None else self.policy.hint_us()

    def _flush_orders(self, now: int) -> list[Action]:
        if self.joining:
            return []  # a restarted sequencer numbers nothing before it knows where to go on
        entries, self.pending_orders = self.pending_orders, []
        joins, self.join_asked = self.join_asked, False
        if not entries and not joins:
            return []
        first = self.g + 1
        self.g += len(entries)
        tail = self.rm.queued_tail()
        if tail is not None:
            # Reliable multicast holds our messages back (its window is full): the new
            # numbers join the ORDER waiting at the backlog's tail, whose range they continue,
            # instead of queueing one more ORDER behind it. Under overload the sequencer then
            # spends one window slot per batch, not per flush -- tiny ORDERs had filled the
            # window, and the delivered rate fell with the offered one.
            header, payload = tail
            if (header.type == _ORDER and len(payload) < ORDER_COALESCE_BYTES
                    and header.seq + len(payload) // ORDER_ENTRY.size == first):
                room = (ORDER_COALESCE_BYTES - len(payload)) // ORDER_ENTRY.size
                self.rm.replace_queued_tail(header, payload + pack_orders(entries[:room]))
                first += len(entries[:room])
                entries = entries[room:]
                if not entries:
                    return []  # a joining member joins at that ORDER
        header = Header(MsgType.ORDER, seq=first, origin=self.me)
        return self.rm.multicast(header, pack_orders(entries), now)

    def _try_deliver(self) -> list[Action]:
        out: list[Action] = []
        order, received = self.order, self.received
        n = self.next_deliver
        # At the sequencer, what it delivers stays in the relay store until stable.
        keep = self.me == self.sequencer and bool(self.delivered_at)
        stable = self.stable_keys
        # One look-up of `key` in `received` (its size, or None), not a test then a pop:
        # each hashes the tuple again.
        while (key := order.get(n)) is not None and (size := received.pop(key, None)) is not None:
            del order[n]
            out.append(FinalDeliver(key >> 32, key & 0xFFFFFFFF, n, size))
            if keep:
                stable.append(key)
            n += 1
        if out:
            self.fnl_delivered += len(out)
            self.next_deliver = n
            policy = self.policy
            if policy is not None:
                told: list[Action] = []
                for a in out:
                    if isinstance(a, FinalDeliver):
                        told += policy.before_fnl(a)
                    told.append(a)
                return told
        return out
