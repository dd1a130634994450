"""SETO: optimistic total order with delay compensation (000 sec. 3 and Fig. 4; 003 Fig. 2).

The final order is the fixed sequencer's (000 Fig. 1, reused from `Sequencer`), with one change
that keeps it correct in the asynchronous model (000 sec. 3.1): every process, the sequencer
included, postpones the optimistic delivery of a message from sender k by `delay[k]`, and the
sequencer numbers messages in its *optimistic* delivery order (Fig. 4 lines 13-18). Each other
process tunes its delays so that it is "relatively equidistant" with the sequencer from every
pair of senders (sec. 3.2); its optimistic order then predicts the final one.

Delay estimation, per Fig. 4:
- on receipt, a message gets its optimistic delivery instant o = now + delay[sender] (line 12);
- on receipt of its sequence number, the instant t is recorded (line 22);
- Delta compares o as the *current* delays plan it (o - delay[k] at receipt + delay[k] now):
  Fig. 4 uses the o fixed at receipt, so after a partition heals and a burst of ORDERs names
  messages received hundreds of ms apart, every pair of the burst re-applied the same
  correction (their o predate all of it) and a delay grew by (1 - alpha) * |Delta| per pair,
  to seconds; the hint made the sequencer hold its own messages that long (a stall). Now each
  adjust moves the o of the messages still waiting, and a burst converges as a steady stream;
- on final delivery of m after m', Delta = (t - t') - (o - o') tells how much later (Delta > 0)
  or earlier the sequencer saw m relative to m' than this process planned to (line 26), and
  adjust() moves delays by (1 - alpha) * |Delta|, alpha being the inertia factor (lines 27-39):
  it shortens the delay of the sender to be brought forward and, once that reaches zero,
  lengthens the other sender's delay by what is left;
- every DATA message carries a hint max(delay[]) - delay[seq] (line 10, `header.hint`, us):
  how much longer this process delays its slowest sender than the sequencer's messages. The
  sequencer delays its own messages by the largest hint it last heard from each process (lines
  19-20), so that it "stands back from itself what it distances from the farthest process".

Two readings of the figure are made explicit here:
- Fig. 4 also runs adjust() when m and m' come from the same sender. That pair carries no
  relative distance (sec. 3.2 adjusts the distance between p and *two* senders), and adjust(i,
  i, d) always shrinks delay[i], so jitter alone would bias every delay down; it is skipped.
- At the sequencer, t and o coincide by construction (it numbers messages as it opt-delivers
  them) and sec. 3.2 says the distance to the sequencer "does not apply here", so it never
  adjusts; its own delay comes only from the hints.

Local Order (000 sec. 2.2): a message whose final delivery comes before its optimistic delay
has expired is opt-delivered immediately before its fnl-delivery, never after.

Local Order across a restart (000 sec. 2.2: a process fnl-delivers what it opt-delivered, in
the same order): a restarted process (incarnation > 0) joins the final order at the first
ORDER it sees (sequencer.py). Opt-delivering every message it received before that would
include those the sequencer numbered before its join point, which it never fnl-delivers. So
it opt-delivers a message of origin o only once it knows o's messages will be fnl-delivered:
the sequencer numbers each origin's messages in their FIFO order (below), so once an ORDER
from the join point on names (o, n), o's messages from n on are fnl-delivered here and those
below n that no such ORDER names never are (they are not opt-delivered; `opt_skipped` counts
them). Until then o's messages wait (parked);
the opt-delivery just before a fnl-delivery still applies to them.

FIFO (002, "FIFO ordering", which every total-order protocol here claims): Fig. 4 reads as if
delay[k] were constant between two messages of k. When it shrinks by more than their gap (a
Fast SETO plan arriving, a large adjust), line 12 would give the later message the earlier o,
and the sequencer would number k's messages out of their sending order. o is therefore never
earlier than the o of k's previous message: reliable multicast hands k's messages up in order,
so they are opt-delivered, and numbered, in order.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Protocol

from nodes.protocols.base import Action, FinalDeliver, OptDeliver, SetTimer, param
from nodes.protocols.sequencer import ORDER_ENTRY, Sequencer, SequencerParams, mid_key
from nodes.wire import Message, Proto

OPT = "seto:opt"
_HINT_MAX_US = 2**31 - 1

Key = tuple[int, int]  # (origin, mno)


@dataclass(frozen=True)
class SetoParams(SequencerParams):
    alpha: float = param(0.5, "inertia factor of adjust() (000 Fig. 4 lines 33-39)", ge=0, lt=1)


class Planner(Protocol):
    """What plans SETO's delays instead of adjust() (Fast SETO, nodes/protocols/fast_seto.py):
    its own datagrams, timers and start actions come to it, and it hands a planned row of
    delays to `SetoDelays.apply_plan`."""

    def bind(self, seto: SetoDelays) -> None: ...

    def start(self, now: int) -> list[Action]: ...

    def on_message(self, src: int, msg: Message, now: int) -> list[Action] | None: ...

    def on_timer(self, key: str, now: int) -> list[Action] | None: ...

    def roles(self) -> dict[str, int]: ...


def build(me: int, members: list[int], params: dict[str, Any]) -> Sequencer:
    """The `seto` stack: the fixed sequencer over reliable FIFO, with SETO's order policy."""
    return Sequencer(me, members, params, Proto.SETO, SetoDelays(me, members, params))


class SetoDelays:
    """SETO's order policy (`nodes.protocols.sequencer.OrderPolicy`): Fig. 4's delays decide
    when the sequencer opt-delivers and numbers each data message."""

    def __init__(self, me: int, members: list[int], params: dict[str, Any],
                 planner: Planner | None = None):
        self.me = me
        self.planner = planner
        self.incarnation = int(params.get("incarnation", 0))
        self.alpha = float(params.get("alpha", 0.5))
        if not 0.0 <= self.alpha < 1.0:
            raise ValueError(f"SETO inertia factor alpha must be in [0, 1), got {self.alpha}")
        self.adaptive = True  # Fast SETO switches adjust() off once it has a planned matrix
        self.delay: dict[int, int] = {m: 0 for m in members}  # delay[k], local ns
        self.r_delay: dict[int, int] = {m: 0 for m in members}  # hints heard, at the sequencer
        self.hint: dict[Key, int] = {}  # d of each message received but not opt-delivered
        # o - delay[origin] of each message not yet fnl-delivered (R): o as the current
        # delays plan it is this plus delay[origin] (Delta, docstring)
        self.opt_at: dict[Key, int] = {}
        self.seq_at: dict[int, int] = {}  # t at which each sequence number arrived (S)
        self.waiting: list[tuple[int, int, Key]] = []  # (o, arrival, key) heap, awaiting opt
        self.arrivals = 0
        self.last_o: dict[int, int] = {}  # o of each sender's latest message (FIFO, above)
        self.last: tuple[int, int, int] | None = None  # (t', o' - delay, sender), last fnl
        # Restarts (docstring): per origin, the first number an ORDER since the join names
        # (None: a process that never restarted opt-delivers at once); messages parked until
        # their origin's entry is known.
        self.opt_from: dict[int, int] | None = {} if self.incarnation > 0 else None
        self.parked: dict[Key, int] = {}  # key -> o
        self.opt_skipped = 0
        self.opt_delivered = 0

    # -- the order policy's events (nodes.protocols.sequencer.OrderPolicy) ------------------
    def bind(self, seq: Sequencer) -> None:
        self.seq = seq
        self.sequencer = seq.sequencer
        if self.planner is not None:
            self.planner.bind(self)

    def start(self, now: int) -> list[Action]:
        return [] if self.planner is None else self.planner.start(now)

    def on_message(self, src: int, msg: Message, now: int) -> list[Action] | None:
        return None if self.planner is None else self.planner.on_message(src, msg, now)

    def on_timer(self, key: str, now: int) -> list[Action] | None:
        if key == OPT:
            return self._release(now)
        return None if self.planner is None else self.planner.on_timer(key, now)

    def sent(self) -> int:
        """The number of this process's last TO-multicast (its sequencer's counter)."""
        return self.seq.mno

    def apply_plan(self, row: dict[int, int]) -> None:
        """A planned row of delays replaces the adjusted ones from now on (003 Fig. 7 lines
        7-11), the sequencer's own delay included."""
        self.adaptive = False
        self.delay = dict(row)

    def roles(self) -> dict[str, int]:
        return {} if self.planner is None else self.planner.roles()

    # -- optimistic delivery (Fig. 4 lines 9-20) ----------------------------------------------
    def hint_us(self) -> int:
        spread = max(self.delay.values()) - self.delay[self.sequencer]
        return min(max(spread // 1000, 0), _HINT_MAX_US)

    def on_data(self, msg: Message, now: int) -> list[Action]:
        h = msg.header
        key = (h.origin, h.mno)
        o = max(now + self.delay[h.origin], self.last_o.get(h.origin, 0))
        self.last_o[h.origin] = o
        self.opt_at[key] = o - self.delay[h.origin]
        self.hint[key] = h.hint * 1000
        if self.opt_from is not None:
            first = self.opt_from.get(h.origin)
            if first is None:
                self.parked[key] = o
                return []
            if h.mno < first:
                return self._skip_opt(key)
        self.arrivals += 1
        heapq.heappush(self.waiting, (o, self.arrivals, key))
        return self._release(now)

    def _skip_opt(self, key: Key) -> list[Action]:
        """Numbered before this incarnation joined: never fnl-delivered, so never opt."""
        self.hint.pop(key, None)
        self.opt_at.pop(key, None)
        self.opt_skipped += 1
        return []

    def _named(self, entries: list[tuple[int, int]], now: int) -> list[Action]:
        """An ORDER since the join names `entries`: the origins' opt-delivery starts."""
        assert self.opt_from is not None
        out: list[Action] = []
        for origin, mno in entries:
            if origin in self.opt_from:
                continue
            self.opt_from[origin] = mno
            for key in [k for k in self.parked if k[0] == origin]:
                o = self.parked.pop(key)
                if key[1] < mno and mid_key(*key) not in self.seq.order.values():
                    out += self._skip_opt(key)
                elif key in self.hint:
                    self.arrivals += 1
                    heapq.heappush(self.waiting, (o, self.arrivals, key))
        return out + self._release(now) if out or self.waiting else out

    def _release(self, now: int) -> list[Action]:
        """Opt-deliver every message whose delay has expired, in (o, arrival) order, and arm
        the timer for the next one."""
        out: list[Action] = []
        while self.waiting and self.waiting[0][0] <= now:
            _, _, key = heapq.heappop(self.waiting)
            if key not in self.hint:
                continue  # already opt-delivered just before its fnl-delivery
            out += self._opt_deliver(key, self.seq.received[mid_key(*key)])
        if self.waiting:
            out.append(SetTimer(OPT, self.waiting[0][0] - now))
        return out

    def _opt_deliver(self, key: Key, size: int) -> list[Action]:
        d = self.hint.pop(key)
        self.opt_delivered += 1
        out: list[Action] = [OptDeliver(key[0], key[1], size)]
        if self.me == self.sequencer:
            if self.adaptive:
                self.r_delay[key[0]] = d
                self.delay[self.me] = max(self.r_delay.values())
            out += self.seq.enqueue_order(key)
        return out

    # -- final delivery (Fig. 4 lines 21-32) --------------------------------------------------
    def before_order(self, msg: Message, now: int) -> None:
        h = msg.header
        for i in range(len(msg.payload) // ORDER_ENTRY.size):
            self.seq_at[h.seq + i] = now

    def after_order(self, msg: Message, now: int) -> list[Action]:
        if self.opt_from is None:
            return []
        # Delivered first (the join happens there), then the origins it names.
        entries = [ORDER_ENTRY.unpack_from(msg.payload, i)
                   for i in range(0, len(msg.payload), ORDER_ENTRY.size)]
        return self._named(entries, now)

    def before_fnl(self, fnl: FinalDeliver) -> list[Action]:
        key = (fnl.origin, fnl.mno)
        out: list[Action] = []
        if key in self.hint:
            # Local Order: never opt-deliver after fnl-delivering; the waiting heap entry is
            # skipped later because the hint is gone.
            out += self._opt_deliver(key, fnl.size)
        self.parked.pop(key, None)
        t = self.seq_at.pop(fnl.seq)
        base = self.opt_at.pop(key)
        o = base + self.delay[fnl.origin]
        if self.last is not None and self.adaptive and self.me != self.sequencer:
            t_prev, base_prev, sender_prev = self.last
            o_prev = base_prev + self.delay[sender_prev]
            if sender_prev != fnl.origin:
                diff = (t - t_prev) - (o - o_prev)
                if diff > 0:
                    self._adjust(sender_prev, fnl.origin, diff)
                else:
                    self._adjust(fnl.origin, sender_prev, -diff)
        self.last = (t, base, fnl.origin)
        return out

    def _adjust(self, i: int, j: int, d: int) -> None:
        """adjust(i, j, d) of Fig. 4 (lines 33-39): bring i's messages forward by the share
        (1 - alpha) of d; what cannot be taken off delay[i] is added to delay[j]."""
        v = round(self.delay[i] * self.alpha + (self.delay[i] - d) * (1.0 - self.alpha))
        if v >= 0:
            self.delay[i] = v
        else:
            self.delay[i] = 0
            self.delay[j] += -v
