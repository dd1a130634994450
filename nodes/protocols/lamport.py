"""`lamport`: symmetric total order with Lamport timestamps and acknowledgements (the
timestamp-based family of the lecture notes 002 "Total Order"; 001 ch. 2 "logical clocks
[13]"; Lamport, CACM 1978). *Reconstructed*: the notes give no rules; these are the standard
ones (numbered L1-L4 here), over reliable FIFO multicast (the NACK layer), since
the delivery rule needs per-pair FIFO channels without loss.

State: the Lamport clock L, a queue Q ordered by (ts, origin), and last[q], the highest
(ts, q) received from each q.
- L1 broadcast m: L += 1; insert (L, me, m) into Q; R-multicast DATA(L, me, m);
- L2 on DATA(ts, q, m): L := max(L, ts) + 1; insert it into Q; last[q] := (ts, q); then
  acknowledge: `immediate` R-multicasts ACK(L) at once (n - 1 acks per message); `delayed`
  sends one ACK(L) after `ack_delay_ms` unless this process sent a DATA or ACK meanwhile
  (the null messages of idle processes: one ACK covers everything so far);
- L3 on ACK(ts) from q: L := max(L, ts) + 1; last[q] := (ts, q);
- L4 deliver the head h = (ts_h, o_h) of Q while last[q] >= h for every q != me: FIFO
  channels guarantee that nothing smaller will still come from q. For q = o_h, h itself is
  the evidence (o_h's later messages carry larger timestamps), so the origin need not ack its
  own message; a strict ">" would stall delivery behind an idle origin, a classic off-by-one.

Restarts (L4 assumes that nothing smaller than last[q] will still come from q, and integrity
assumes mids are unique): a restarted process numbering from 1 again would collide with the
old incarnation's mids (h3:1.. delivered twice), and with its clock back at 0 its first
messages would carry timestamps below what the others have already delivered, ordered behind
them at some nodes and ahead at others. So
- mnos start at `incarnation * INCARNATION_SPAN` (the sequencer's convention);
- L0 (ours) a restarted process multicasts a JOIN (a null message, `slot` 1) and holds its
  broadcasts until every other member has answered with a WELCOME (a null message, `slot`
  2, `hint` = the joiner, `mno` = its incarnation) sent after it saw the new incarnation:
  a WELCOME's timestamp exceeds everything its sender delivered, and everything it can
  still deliver on the old incarnation's last[q] (that never grows again), so the joiner's
  clock, past every WELCOME, puts its messages after all of them. Every process answers
  the first message of a newer incarnation of q with a WELCOME; reliable FIFO resets q's
  stream for it, and answers every JOIN: the joiner repeats its JOIN every 200 ms until all
  answered, since a WELCOME sent before its reliable FIFO joined that sender's stream is never
  repaired. A member that never answers (crashed) holds the joiner's messages, as it holds
  every delivery anyway.

Wire: `ts` travels in the header's `seq`; the ACK is an R-multicast MsgType.DUMMY (a null
message: MsgType.ACK belongs to the NACK layer's cumulative acknowledgements). Deliveries are
`fnl` with `seq` the local delivery count. Failure-free: a crashed member stops all delivery
(membership is out of scope).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Literal

from nodes.protocols.base import (
    Action,
    FinalDeliver,
    Log,
    Received,
    SetTimer,
    ms,
    param,
    typed_params,
)
from nodes.protocols.reliable import Below, OnReliable, ReliableParams
from nodes.protocols.sequencer import INCARNATION_SPAN
from nodes.wire import Header, Message, MsgType

WIRE_ID = 9
JOIN, WELCOME = 1, 2  # `slot` of the restart handshake's null messages (L0)
JOIN_RETRY_NS = 200_000_000


@dataclass(frozen=True)
class LamportParams(ReliableParams):
    ack_mode: Literal["immediate", "delayed"] = param(
        "delayed", "acknowledge each DATA at once, or once per ack_delay_ms of silence")
    ack_delay_ms: float = ms("how long a delayed acknowledgement waits for own traffic", 10)


class Lamport(OnReliable):
    def __init__(self, me: int, members: list[int], params: dict[str, Any],
                 scope: str = "rm"):
        p = typed_params(LamportParams, params)
        self.me = me
        self.others = [m for m in members if m != me]
        self.rm = Below(me, members, params, WIRE_ID, self._r_deliver, scope)
        self.immediate = p.ack_mode == "immediate"
        self.ack_delay_ns = round(p.ack_delay_ms * 1e6)
        self.ack_key = f"lamport:{scope}:ack"
        self.join_key = f"lamport:{scope}:join"
        self.instance = "" if scope == "rm" else f"lamport#{scope}"
        self.clock = 0  # L
        self.queue: list[tuple[int, int, int, int]] = []  # Q: (ts, origin, mno, size)
        self.last = {q: (0, q) for q in self.others}
        self.incarnation = int(params.get("incarnation", 0))
        self.mno = self.incarnation * INCARNATION_SPAN  # mids stay unique across restarts
        self.seen_inc = dict.fromkeys(self.others, 0)  # newest incarnation heard of each q
        # L0: a restarted process holds its broadcasts until every other member welcomed it.
        self.joining = self.incarnation > 0
        self.welcomed: set[int] = set()
        self.held: list[tuple[int, bytes]] = []  # (mno, payload) broadcast while joining
        self.ack_armed = False
        self.sent_since_receipt = False
        self.acks_sent = 0
        self.delivered = 0

    # -- Layer interface ----------------------------------------------------------------------
    def start(self, now: int) -> list[Action]:
        return self.rm.start(now) + self._join(now)

    def _join(self, now: int) -> list[Action]:
        """L0: ask for WELCOMEs, again every JOIN_RETRY_NS until every member answered (a
        WELCOME sent before reliable FIFO joined its sender's stream here is never repaired)."""
        if not self.joining:
            return []
        header = Header(MsgType.DUMMY, origin=self.me, seq=self.clock, ts=now, slot=JOIN)
        out = self.rm.multicast(header, b"", now)
        return out + [SetTimer(self.join_key, JOIN_RETRY_NS)]

    def renumber(self, last: int) -> bool:
        self.mno = last
        return True

    def broadcast(self, payload: bytes, now: int) -> list[Action]:
        """L1 (held while joining, L0)."""
        self.mno += 1
        if self.joining:
            self.held.append((self.mno, payload))
            return [Log("send", {"mno": self.mno, "size": len(payload)})]
        return self._send(self.mno, payload, now, log=True)

    def _send(self, mno: int, payload: bytes, now: int, log: bool) -> list[Action]:
        self.clock += 1
        heapq.heappush(self.queue, (self.clock, self.me, mno, len(payload)))
        self.sent_since_receipt = True
        header = Header(MsgType.DATA, origin=self.me, mno=mno, seq=self.clock, ts=now)
        out: list[Action] = [Log("send", {"mno": mno, "size": len(payload)})] if log else []
        out += self.rm.multicast(header, payload, now)
        return out + self._deliver()

    def on_timer(self, key: str, now: int) -> list[Action]:
        if key == self.join_key:
            return self._join(now)
        if key == self.ack_key:
            self.ack_armed = False
            if self.sent_since_receipt:
                return []
            return self._ack(now)
        return self.rm.on_timer(key, now)

    # -- the algorithm ------------------------------------------------------------------------
    def _r_deliver(self, src: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        if h.origin == self.me and h.sender == self.me:
            return []  # our own R-delivery: queued at L1 already
        return self._receive(h.sender, msg, now)

    def _receive(self, q: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        if q not in self.last:
            return []
        ts = h.seq
        self.clock = max(self.clock, ts) + 1
        if (ts, q) > self.last[q]:
            self.last[q] = (ts, q)
        out: list[Action] = []
        if h.aux > self.seen_inc[q] or (h.type == MsgType.DUMMY and h.slot == JOIN):
            # L0: q restarted (or asks again: its join may have missed our WELCOME); welcome it
            self.seen_inc[q] = max(self.seen_inc[q], h.aux)
            out += self._ack(now, welcome=(q, h.aux))
        if (h.type == MsgType.DUMMY and h.slot == WELCOME and self.joining
                and h.hint == self.me and h.mno == self.incarnation):
            self.welcomed.add(q)
            if self.welcomed.issuperset(self.others):
                out += self._joined(now)
        if h.type == MsgType.DATA:  # L2
            heapq.heappush(self.queue, (ts, h.origin, h.mno, len(msg.payload)))
            out.append(Received(h.origin, h.mno, len(msg.payload), self.instance))
            if self.immediate:
                out += self._ack(now)
            else:
                self.sent_since_receipt = False
                if not self.ack_armed:
                    self.ack_armed = True
                    out.append(SetTimer(self.ack_key, self.ack_delay_ns))
        return out + self._deliver()  # L3 (an ACK) only moves last[q]

    def _ack(self, now: int, welcome: tuple[int, int] | None = None) -> list[Action]:
        self.clock += 1
        self.acks_sent += 1
        self.sent_since_receipt = True
        if welcome is None:
            header = Header(MsgType.DUMMY, origin=self.me, seq=self.clock, ts=now)
        else:
            header = Header(MsgType.DUMMY, origin=self.me, seq=self.clock, ts=now,
                            slot=WELCOME, hint=welcome[0], mno=welcome[1])
        return self.rm.multicast(header, b"", now)

    def _joined(self, now: int) -> list[Action]:
        """L0 done: the clock is past every WELCOME; send what was held, in order."""
        self.joining = False
        held, self.held = self.held, []
        out: list[Action] = [Log("joined", {"held": len(held), "clock": self.clock})]
        for mno, payload in held:
            out += self._send(mno, payload, now, log=False)
        return out

    def _deliver(self) -> list[Action]:
        """L4."""
        out: list[Action] = []
        queue, last = self.queue, self.last
        while queue:
            ts, origin, mno, size = queue[0]
            if any(last[q] < (ts, origin) for q in self.others):
                break
            heapq.heappop(queue)
            self.delivered += 1
            out.append(FinalDeliver(origin, mno, self.delivered, size, self.instance))
        return out
