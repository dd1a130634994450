"""`qos-vbr`: QoS-preserving total order for variable bit rate (paper 004, Bar-Joseph, Anker,
Keidar, Lynch: §5 slots, §6 failures and joins, §7 message loss).

Every process owns slots of Θ (`theta`) on its own clock, counted from one common epoch E:
slot s is local `[E + sΘ, E + (s+1)Θ)` (004 §2.1; docs/protocols.md "qos-vbr").
In each slot it multicasts at most `max_burst` messages (AppMaxBurst) and, when it sent fewer,
a DUMMY at the slot's end (Fig. 7 `dummy`). Every process delivers slot by slot, and within a
slot process by process in index order, each process's messages of that slot in FIFO order
(Fig. 7 `deliver`, `handle-dummy`). So the delivery sequence is the same everywhere (Lemma 5.2)
and a message waits at most for the end of its slot at the slowest clock plus Δ: AppLatency
<= Δ + Γ + Θ (Thm 2).

Rules (Fig. 7, numbered here; where the figure is damaged, reconciled so that the rate message
is counted exactly once on both sides):
- V1/V2 init and reserve: at the start of slot 0 (and of the slot after a `new_rate`) the
  process reserves NetAvgRate = avg + 1/Θ and NetMaxBurst = max_burst (Thm 3) and sends a RATE
  message first in the slot; it counts as one of the slot's `max_burst` messages.
- V5 app-mcast: the message joins Squeue (a recovering process sends only from its join slot).
- V6 net-mcast: queued application messages go out at once while the slot has room; the rest
  wait for the next slot.
- V7/V8 dummy, next-slot: at the slot's end a DUMMY if the slot is not full; the next deadline
  is computed from the previous deadline, never from the late timer's clock reading.
- V10/V11/V13 deliver: the receiver attributes messages to slots by counting (`count` against
  `maxRate[j]`) and cross-checks the header's `slot`; a mismatch is counted (`crosscheck`) and
  logged as `late` (it means a bug or a violated assumption).
- V12 new-rate(avg, max): applies from the process's next slot, which opens with a RATE.

§6 failures and joins (always on; nothing fires while the assumptions hold, Lemma 6.1):
- F2 slot-deadline detector: at local D(s) = E + (s+1)Θ + Δ + Γ (+1 ns: "more than", §6.2) the
  messages of j for slot s that arrived are delivered; if j's slot is incomplete, j is removed
  from slot s+1 on (`remove`). With a crash the bound becomes Δ + 2Γ + Θ (Thm 5).
- F3 a restarted process (new incarnation, carried in `aux`) joins: Smax = floor((c_w - E + Δ +
  Γ)/Θ) + 1 (ours: the first slot that starts more than Δ + Γ from now), JOIN(Smax,
  max_burst), sending from slot Smax starting with its RATE message; it delivers from Smax,
  each process's messages once its TAG(Smax) arrived, those without a TAG by D(Smax) being
  outside Act(Smax).
- F4/F5 on JOIN the others end the old incarnation, add j from Smax (`add`) and TAG their own
  first message of slot Smax (hint = their burst for that slot).
- F6-F8 merge (partitions, §6.6): a slot message from a process that is not active (it was
  removed while cut off) starts a MERGE at Smax = floor((clock_i - E + Δ + Γ)/Θ) + 1 (as F3),
  answered by a MERGE REPLY; both sides take the larger Smax.

§7 message loss (`loss_tolerance` x > 0): slot numbers in headers are authoritative (§7);
the burst in force is piggybacked (flag RATE, `hint` = max, `seq` = first slot it applies to)
on the first x+1 messages after every change or join (§7); JOINs go out x+1 times; the
delivery passes j in slot s on a full burst, its DUMMY, a later slot at the head of its queue
(FIFO: nothing more for s can come) or D(s) (`skip`); j is removed only after x+1 silent slots
(§7). The result is total order *with gaps* (Def. 2): every node delivers a FIFO subset of
each slot's messages, in the same key order (slot, index, FIFO).

Wire (nodes/wire.py header; type, flags and fields as used here):
    DATA   mno >= 1   application message      slot, ts, payload; TAG/RATE flags as below
    DATA   mno == 0   RATE message (§5/§6)     flag RATE, hint = max_burst
    DUMMY             end of a non-full slot   slot; TAG/RATE flags as below
    DUMMY  flag JOIN  join (F3)                slot = Smax, hint = max_burst
    DUMMY  flag MERGE merge (F6-F8)            slot = Smax, hint = max_burst, flag REPLY
    flag TAG on slot messages: the sender includes the joiner/merged process from Smax
    flag RATE on DATA/DUMMY (x > 0): hint = max_burst, seq = the first slot it applies to
Every datagram carries the sender's per-pair FIFO number `rseq` (002 A0.1/A0.2: the unreliable
FIFO channel; never the NACK layer, whose retransmissions break every bound) and its
incarnation in `aux`.

Log events (docs/protocols.md "qos-vbr"; the conventions analysis/qos.py reads, docs/qos.md
"Log events"): `net` (kind data|dummy|rate, slot, rseq, mid for data) at every slot-message
send, `netrecv` (member, kind, rseq, inc once the sender restarted: qos_common.netrecv) at
every slot message the FIFO channel accepts, `slot` (s, maxSend) at each slot start, `reserve`
(key, avg, max_burst, slot, bytes, rate_bps, burst) at each reservation, `refused`, `join`,
`add`, `remove`, `skip`, `merge`, `late`, `reject`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from nodes.protocols.base import (
    Action,
    CommonParams,
    FinalDeliver,
    LayerBase,
    Log,
    Received,
    Reserve,
    Send,
    SetTimer,
    param,
    typed_params,
)
from nodes.protocols.qos_common import (
    FifoChannel,
    duration_ns,
    epoch_ns,
    netrecv,
    own_value,
    wire_rate_bps,
)
from nodes.protocols.sequencer import INCARNATION_SPAN
from nodes.wire import HEADER_SIZE, Header, Message, MsgType

WIRE_ID = 14

# Header `flags` bits of qos-vbr (the generic bits 1 and 2 are RETRANSMIT and RELAYED).
F_REPLY = 0x08
F_RATE = 0x10
F_TAG = 0x20
F_JOIN = 0x40
F_MERGE = 0x80

MAX_BURST = 65535  # a burst above this in a header is refused (`reject`, reason "hint")
SLOT_AHEAD = 100_000  # slots a header may be ahead of the receiver's clock (reject "slot")
NEVER = 1 << 62


def duration(doc: str, default: float) -> Any:
    """A positive duration parameter (`20ms`, or a number of ms); the catalogue's model
    validates it with `qos_common.duration_ns`."""
    return param(default, doc, duration=True, gt=0)


@dataclass(frozen=True)
class QosVbrParams(CommonParams):
    delta: float = duration("Δ: the largest one-way network latency the topology honours "
                            "(delay + jitter + a burst's serialisation)", 50)
    gamma: float = duration("Γ: the largest difference between two clocks (offsets within "
                            "±Γ/2)", 10)
    theta: float = duration("Θ: the slot length", 20)
    avg: float | dict[str, float] = param(
        50.0, "AppAvgRate in messages/s: one value, or a mapping host -> value", ge=0,
        per_host=True)
    max_burst: int | dict[str, int] = param(
        3, "AppMaxBurst: messages per slot, the RATE message included: one value, or a "
           "mapping host -> value", ge=1, le=MAX_BURST, per_host=True)
    loss_tolerance: int = param(
        0, "x (§7): the network loses at most x consecutive messages of a sender; > 0 gives "
           "total order with gaps", ge=0, le=16)


@dataclass(slots=True)
class _Slot:
    """One slot message in a receive queue."""

    slot: int
    kind: str  # data | dummy | rate
    msg: Message


class QosVbr(LayerBase):
    def __init__(self, me: int, members: list[int], params: dict[str, Any]):
        p = typed_params(QosVbrParams, params)
        self.me = me
        self.members = sorted(members)
        self.index = {m: k for k, m in enumerate(self.members)}
        self.n = len(members)
        self.delta = duration_ns(p.delta)
        self.gamma = duration_ns(p.gamma)
        self.theta = duration_ns(p.theta)
        self.x = int(p.loss_tolerance)
        names = params.get("member_names") or {}
        self.names = {m: str(names.get(m, names.get(str(m), m))) for m in members}
        # per-host values; a host the mapping leaves out gets the default
        self.my_avg = float(own_value(p.avg, params, me, default=QosVbrParams.avg))
        self.my_max = int(own_value(p.max_burst, params, me, default=QosVbrParams.max_burst))
        self.incarnation = int(params.get("incarnation", 0))
        self.payload_bytes = int(params.get("payload_size", 1024))
        # E: the common epoch, Γ before the workload starts (004 §2.2; docs/protocols.md
        # "qos-vbr"): with offsets within ±Γ/2 every node's slot 0 has begun on its own clock
        # when the first message comes. qos_common's epoch with `epoch_ms` = -Γ.
        self.epoch = epoch_ns({"start_at_ns": params.get("start_at_ns", 0),
                               "epoch_ms": f"{-self.gamma}ns"})
        # -- sender (Fig. 6) --
        self.slot = -1  # my sending slot; -1 until E
        self.last = self.epoch  # end of my current slot (local), the next deadline
        self.my_count = 0
        self.max_send = 0
        self.change_rate = True  # V1: a reservation (and RATE message) is due
        self.squeue: deque[tuple[int, bytes]] = deque()
        self.mno = self.incarnation * INCARNATION_SPAN  # mids stay unique across restarts
        # the unreliable per-pair FIFO channel (002 A0.1/A0.2), per incarnation of the sender
        self.chan = FifoChannel(me, self.members)
        self.tag_from: int | None = None  # TAG my messages from this slot on (F4/F5, L3)
        self.tag_left = 0
        self.piggy: tuple[int, int] | None = None  # §7 L2: (first slot, max) to piggyback
        self.piggy_left = 0
        self.own_hist: list[tuple[int, int]] = []  # (first slot, burst) of my own rates
        self.refused = False
        # -- receiver --
        self.rq: dict[int, deque[_Slot]] = {m: deque() for m in self.members}
        self.hist: dict[int, list[tuple[int, int]]] = {m: [] for m in self.members}
        self.heard: dict[int, int] = {m: -1 for m in self.members}  # last slot heard from j
        # Act(s) = { j : from <= s < to for one of j's intervals } (§6 active_from/failed_from)
        self.intervals: dict[int, list[list[int]]] = {m: [[0, NEVER]] for m in self.members}
        self.dslot = 0
        self.cur = 0  # position in Act(dslot)
        self.count = 0
        self.order: list[int] = list(self.members)
        self.deciding: set[int] = set()  # F3: joiner waits for these processes' TAG(Smax)
        self.smax: int | None = None
        self.merging: dict[int, int] = {}  # F6-F8: peer -> agreed Smax
        self.delivered = 0
        self.deadline_armed: int | None = None
        self.crosscheck = 0
        self.late = 0
        self.rejects: dict[str, int] = {}
        self.removed: list[tuple[int, int]] = []

    # -- helpers --------------------------------------------------------------------------
    def _deadline(self, s: int) -> int:
        """D(s) = E + (s+1)Θ + Δ + Γ, local; the timer fires 1 ns later (§6.2 'more than')."""
        return self.epoch + (s + 1) * self.theta + self.delta + self.gamma

    def _join_slot(self, now: int) -> int:
        """Smax = floor((clock - E + Δ + Γ)/Θ) + 1 (004 §6.3; F3, F6-F8)."""
        return (now - self.epoch + self.delta + self.gamma) // self.theta + 1

    def _active(self, j: int, s: int) -> bool:
        return any(a <= s < b for a, b in self.intervals[j])

    def _act(self, s: int) -> list[int]:
        return [j for j in self.members if self._active(j, s) or (j in self.deciding
                                                                  and s == self.smax)]

    def _end(self, j: int, s: int) -> None:
        """j takes no part in slots >= s (failed_from := s)."""
        for iv in self.intervals[j]:
            if iv[1] > s:
                iv[1] = max(iv[0], s)
        self.intervals[j] = [iv for iv in self.intervals[j] if iv[0] < iv[1]]

    def _add(self, j: int, s: int) -> None:
        """j takes part again from slot s on (replacing a join or merge still pending)."""
        self.intervals[j] = [iv for iv in self.intervals[j] if iv[0] <= self.dslot]
        self._end(j, s)
        self.intervals[j].append([s, NEVER])

    def _rate_at(self, j: int, s: int) -> int:
        best = 0
        for first, mx in self.hist[j]:
            if first <= s:
                best = mx
        return best

    def _reject(self, reason: str, h: Header) -> list[Action]:
        self.rejects[reason] = self.rejects.get(reason, 0) + 1
        return [Log("reject", {"member": h.sender, "reason": reason, "slot": h.slot})]

    def _wire_bytes(self) -> int:
        return HEADER_SIZE + self.payload_bytes

    # -- the events ---------------------------------------------------------------------------
    def start(self, now: int) -> list[Action]:
        acts: list[Action] = []
        # F3: a recovered process joins; so does one that starts after its slot 0 is over (a
        # slow start on a loaded host): it cannot send slot 0 in time, the others time it out.
        if self.incarnation > 0 or now > self.epoch + self.theta:
            s = self._join_slot(now)
            self.smax = s
            self.slot = s - 1
            self.last = self.epoch + s * self.theta
            self.dslot, self.cur, self.count = s, 0, 0
            for j in self.members:
                self.intervals[j] = []
                self.hist[j] = []
            self.intervals[self.me] = [[s, NEVER]]
            self.deciding = {j for j in self.members if j != self.me}
            acts.append(Log("join", {"smax": s, "rate": self.my_max,
                                     "incarnation": self.incarnation}))
            for _ in range(self.x + 1):  # L3: x+1 copies
                acts.append(Send(None, self._msg(MsgType.DUMMY, s, F_JOIN, hint=self.my_max,
                                                 now=now)))
        acts += self._tick(now)
        return acts

    def broadcast(self, payload: bytes, now: int) -> list[Action]:
        if self.smax is not None and self.slot < self.smax:
            # V5: a recovering process takes part only from its join slot (§3.1: it is
            # correct after its initialisation); earlier messages are refused, not sent.
            return [Log("drop", {"reason": "joining", "size": len(payload)})]
        self.mno += 1
        self.squeue.append((self.mno, payload))  # V5
        acts: list[Action] = [Log("send", {"mno": self.mno, "size": len(payload)})]
        return acts + self._tick(now)

    def on_timer(self, key: str, now: int) -> list[Action]:
        return self._tick(now)

    def on_new_rate(self, rates: dict[str, float], now: int) -> list[Action]:
        """V12 new-rate(avg, max): applies from my next slot, which opens with a RATE."""
        avg = float(rates.get("avg", self.my_avg))
        mx = rates.get("max_burst", self.my_max)
        if avg < 0 or int(mx) != mx or not 1 <= int(mx) <= MAX_BURST:
            return [Log("refused", {"key": "qos-vbr", "reason": f"bad new rate {rates!r}"})]
        self.my_avg, self.my_max = avg, int(mx)
        self.change_rate = True
        return self._tick(now)

    def on_reserve_result(self, key: str, granted: bool, rate_bps: float, reason: str,
                          now: int) -> list[Action]:
        if granted:
            return []
        # The network will not carry our rate: the latency bound (Thm 2) no longer holds for
        # our messages; order is unaffected. Keep running, log it for the analysis.
        self.refused = True
        return [Log("refused", {"key": key, "rate_bps": rate_bps, "reason": reason})]

    # -- sending (Fig. 7 reserve, net-mcast, dummy, next-slot) --------------------------------
    def _msg(self, mtype: MsgType, slot: int, flags: int = 0, *, mno: int = 0, hint: int = 0,
             seq: int = 0, payload: bytes = b"", now: int = 0) -> Message:
        return Message(Header(mtype, WIRE_ID, flags, sender=self.me, rseq=self.chan.stamp(),
                              origin=self.me, mno=mno, seq=seq, hint=hint, slot=slot, ts=now,
                              aux=self.incarnation), payload)

    def _slot_send(self, kind: str, now: int, mno: int = 0, payload: bytes = b"") -> list[Action]:
        """Multicast one message of my current slot (and queue my own copy, no delay)."""
        s = self.slot
        flags, hint, seq = 0, self.max_send, 0
        if kind == "rate":
            flags |= F_RATE
        if self.tag_from is not None and s >= self.tag_from and self.tag_left > 0:
            flags |= F_TAG
            self.tag_left -= 1
        if self.x > 0 and self.piggy is not None and self.piggy_left > 0:
            flags |= F_RATE  # §7 L2: the rate rides on the first x+1 messages
            seq, hint = self.piggy
            self.piggy_left -= 1
        mtype = MsgType.DUMMY if kind == "dummy" else MsgType.DATA
        msg = self._msg(mtype, s, flags, mno=mno, hint=hint, seq=seq, payload=payload, now=now)
        self.rq[self.me].append(_Slot(s, kind, msg))
        fields: dict[str, Any] = {"kind": kind, "slot": s, "rseq": msg.header.rseq}
        if mno:
            fields["mno"] = mno  # the log writes it as the message's `mid`
        return [Send(None, msg), Log("net", fields)]

    def _start_slot(self, now: int) -> list[Action]:
        """V8 next-slot, then V2 reserve when a rate change is due."""
        acts: list[Action] = []
        self.slot += 1
        self.my_count = 0
        self.last += self.theta  # from the deadline, not from the (late) clock reading
        if self.tag_from is not None and self.slot == self.tag_from:
            self.tag_left = self.x + 1
        if self.change_rate:
            self.change_rate = False
            self.max_send = self.my_max
            self.own_hist.append((self.slot, self.my_max))
            acts += self._reserve()
            if self.x == 0:
                self.my_count = 1  # ★ counted here, once (Fig. 7 reconciled: Rules above)
                acts += self._slot_send("rate", now)
            else:
                self.piggy, self.piggy_left = (self.slot, self.my_max), self.x + 1
        acts.append(Log("slot", {"s": self.slot, "maxSend": self.max_send}))
        return acts

    def _reserve(self) -> list[Action]:
        net_avg = self.my_avg + 1e9 / self.theta  # NetAvgRate = AppAvgRate + 1/Θ (Thm 3)
        copies = max(1, self.n - 1)  # no IP multicast: n-1 unicasts per message
        rate_bps = wire_rate_bps(max(2, self.n), net_avg, self._wire_bytes())
        burst = copies * self.my_max * self._wire_bytes()
        # `reserve` with `avg` (AppAvgRate): analysis/qos.py's rate check (Thm 3) reads it
        return [Reserve(rate_bps, burst, key="qos-vbr"),
                Log("reserve", {"key": "qos-vbr", "avg": self.my_avg, "max_burst": self.my_max,
                                "slot": self.slot, "bytes": self._wire_bytes(),
                                "rate_bps": round(rate_bps), "burst": burst})]

    def _pump(self, now: int) -> list[Action]:
        """V6: send queued messages while my slot has room."""
        acts: list[Action] = []
        while self.squeue and self.slot >= 0 and self.my_count < self.max_send:
            mno, payload = self.squeue.popleft()
            self.my_count += 1
            acts += self._slot_send("data", now, mno, payload)
        return acts

    def _tick(self, now: int) -> list[Action]:
        """Bring the sender up to `now` (slot ends past due fire in order), then deliver."""
        acts: list[Action] = []
        while now >= self.last:
            acts += self._pump(now)
            if self.slot >= 0 and self.my_count < self.max_send:  # V7 dummy
                self.my_count = self.max_send
                acts += self._slot_send("dummy", now)
            acts += self._start_slot(now)
        acts += self._pump(now)
        acts += self._deliver(now)
        acts.append(SetTimer("vbr:slot", self.last - now))
        d = self._deadline(self.dslot)
        if self.deadline_armed != self.dslot:
            self.deadline_armed = self.dslot
            acts.append(SetTimer("vbr:deadline", max(0, d + 1 - now)))
        return acts

    # -- receiving ----------------------------------------------------------------------------
    def on_message(self, src: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        j = h.sender
        if j not in self.chan.seen or h.proto != WIRE_ID:
            return self._reject("sender", h)
        if h.type not in (MsgType.DATA, MsgType.DUMMY) or (h.type == MsgType.DATA
                                                           and h.origin != j):
            return self._reject("type", h)
        if h.slot > (now - self.epoch) // self.theta + SLOT_AHEAD:
            return self._reject("slot", h)
        if (h.flags & (F_RATE | F_TAG | F_JOIN | F_MERGE)) and not 1 <= h.hint <= MAX_BURST:
            return self._reject("hint", h)
        # The FIFO channel (002 A0.2), per incarnation of the sender.
        known = self.chan.incarnation[j]
        if not self.chan.accept(j, h.rseq, h.aux):
            if h.aux < known:
                return []  # from before j restarted
            self.late += 1
            return [Log("late", {"member": j, "slot": h.slot, "reason": "fifo"})]
        acts: list[Action] = []
        if h.aux > known:
            self.heard[j] = -1
            if self._active(j, self.dslot) or any(b > self.dslot for _, b in self.intervals[j]):
                self._end(j, self.dslot + 1)  # F4: the old incarnation's stream ends
        if h.flags & F_JOIN:
            acts += self._on_join(j, h, now)
        elif h.flags & F_MERGE:
            acts += self._on_merge(j, h, now)
        else:
            acts += self._on_slot_message(j, msg, now)
        return acts + self._tick(now)

    def _on_join(self, j: int, h: Header, now: int) -> list[Action]:
        """F4: add j from Smax and TAG my own first message(s) of Smax."""
        s = h.slot
        if any(a == s for a, _ in self.intervals[j]):
            return []  # a further copy (L3)
        if s <= self.dslot or s <= self.slot:
            # Too late to include j at Smax here (an assumption does not hold): merge later.
            return [Log("late", {"member": j, "slot": s, "reason": "join"})]
        self._end(j, self.dslot + 1)  # F4: j's earlier stream, if any, ends after dslot
        self._add(j, s)
        self.hist[j] = [(a, m) for a, m in self.hist[j] if a < s] + [(s, h.hint)]
        acts: list[Action] = [Log("add", {"member": j, "slot": s})]
        return acts + self._tag(s)

    def _tag(self, s: int) -> list[Action]:
        if self.tag_from is None or self.tag_from <= self.slot or s < self.tag_from:
            self.tag_from = s
            if self.x > 0:  # L2: the rate in force at s rides along too
                mx = self.my_max if self.change_rate else self.max_send
                self.piggy, self.piggy_left = (s, mx), self.x + 1
        return []

    def _on_merge(self, j: int, h: Header, now: int) -> list[Action]:
        """F7/F8: agree with j on the larger Smax and take each other in from there."""
        s = max(h.slot, self.merging.get(j, h.slot))
        if s <= self.dslot or s <= self.slot:
            s = max(self._join_slot(now), self.dslot + 1, self.slot + 1)
        acts: list[Action] = []
        if self.merging.get(j) != s:
            self.merging[j] = s
            self._add(j, s)
            self.hist[j] = [(a, m) for a, m in self.hist[j] if a < s] + [(s, h.hint)]
            acts.append(Log("merge", {"peer": self.names[j], "smax": s,
                                      "reply": bool(h.flags & F_REPLY)}))
            acts += self._tag(s)
            if not h.flags & F_REPLY or s != h.slot:
                acts += self._send_merge(j, s, reply=True, now=now)
        return acts

    def _send_merge(self, j: int, s: int, reply: bool, now: int) -> list[Action]:
        flags = F_MERGE | (F_REPLY if reply else 0)
        return [Send(j, self._msg(MsgType.DUMMY, s, flags, hint=self.my_max, now=now))
                for _ in range(self.x + 1)]

    def _on_slot_message(self, j: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        s = h.slot
        kind = ("dummy" if h.type == MsgType.DUMMY else
                "rate" if h.mno == 0 and self.x == 0 else "data")
        if kind == "data" and h.mno < 1:
            return self._reject("mno", h)
        if kind == "rate" and not h.flags & F_RATE:
            return self._reject("type", h)
        acts: list[Action] = [netrecv(h, kind)]  # paired with j's `net` for Δ_meas
        self.heard[j] = max(self.heard[j], s)
        if self.x > 0 and h.flags & F_RATE:  # §7 L2: from this copy on
            first = h.seq
            self.hist[j] = [(a, m) for a, m in self.hist[j] if a < first] + [(first, h.hint)]
        if h.flags & F_TAG and j in self.deciding and self.smax is not None and s >= self.smax:
            # F3: j includes me from Smax, so j is in Act(Smax) here, with its burst.
            self.deciding.discard(j)
            self._add(j, self.smax)
            if self.x == 0 or not self.hist[j]:
                self.hist[j] = [(self.smax, h.hint)]
            acts.append(Log("add", {"member": j, "slot": self.smax}))
        if not self._active(j, s):
            # F6/F9: a process outside Act (cut off and removed, or not yet joined) is heard
            # again; its messages cannot be placed until both sides agree on an Smax.
            if (self.smax is None or j not in self.deciding) and j not in self.merging \
                    and self.chan.incarnation[j] == h.aux and not any(
                        b == NEVER for _, b in self.intervals[j]):
                m = self._join_slot(now)
                m = max(m, self.dslot + 1, self.slot + 1)
                self.merging[j] = m
                self._add(j, m)
                acts.append(Log("merge", {"peer": self.names[j], "smax": m, "reply": False}))
                acts += self._tag(m) + self._send_merge(j, m, reply=False, now=now)
            return acts
        if s < self.dslot or (s == self.dslot and self._passed(j)):
            self.late += 1
            return acts + [Log("late", {"member": j, "slot": s, "reason": "passed"})]
        self.rq[j].append(_Slot(s, kind, msg))
        if kind == "data":
            acts.append(Received(j, h.mno, len(msg.payload)))
        return acts

    def _passed(self, j: int) -> bool:
        """Delivery of dslot has already moved past j."""
        order = self._act(self.dslot)
        return j in order and order.index(j) < self.cur

    # -- delivery (Fig. 7 deliver, handle-dummy, change-rate; §6 F1/F2; §7 L4/L5) --------------
    def _advance(self) -> None:
        self.cur += 1
        self.count = 0

    def _next_slot(self) -> list[Action]:
        self.dslot += 1
        self.cur = 0
        self.count = 0
        return [Log("add", {"member": j, "slot": self.dslot})
                for j in self.members if any(a == self.dslot for a, _ in self.intervals[j])
                and j in self.merging and self.merging[j] == self.dslot]

    def _deliver(self, now: int) -> list[Action]:
        acts: list[Action] = []
        while True:
            order = self._act(self.dslot)
            if self.cur >= len(order):
                if self.dslot >= self.slot:  # my own slot is not over: nothing complete
                    break
                acts += self._next_slot()
                continue
            j = order[self.cur]
            expired = now > self._deadline(self.dslot)
            if j in self.deciding and self.dslot == self.smax:
                if not expired:
                    break
                self.deciding.discard(j)  # F3: no TAG by D(Smax): not in Act(Smax) here
                continue
            q = self.rq[j]
            while q and q[0].slot < self.dslot:
                q.popleft()
                self.late += 1
                acts.append(Log("late", {"member": j, "slot": self.dslot, "reason": "stale"}))
            mx = self._rate_at(j, self.dslot) if self.x > 0 else self._rate_now(j)
            if q and q[0].slot > self.dslot:  # L4(d): j has left slot dslot
                if self.x == 0:
                    self.crosscheck += 1
                    acts.append(Log("late", {"member": j, "slot": self.dslot,
                                             "reason": "crosscheck"}))
                self._advance()
                continue
            if not q:
                if not expired:
                    break
                acts += self._timeout(j)
                continue
            item = q.popleft()
            if item.kind == "dummy":  # V11 handle-dummy / L4(b)
                self._advance()
                continue
            if item.kind == "rate":  # V13 change-rate, ★ pop and advance check
                self.hist[j] = [(a, m) for a, m in self.hist[j] if a < item.slot] + [
                    (item.slot, item.msg.header.hint)]
                mx = item.msg.header.hint
            else:  # V10 deliver
                h = item.msg.header
                self.delivered += 1
                acts.append(FinalDeliver(j, h.mno, self.delivered, len(item.msg.payload)))
            self.count += 1
            if mx and self.count >= mx:  # L4(a)
                self._advance()
        return acts

    def _rate_now(self, j: int) -> int:
        return self.hist[j][-1][1] if self.hist[j] else 0

    def _timeout(self, j: int) -> list[Action]:
        """D(dslot) passed with j's slot incomplete (F2; §7 L4(e), L5)."""
        s = self.dslot
        self._advance()
        if j == self.me:
            return []
        if self.x == 0 or self.heard[j] < s - self.x:
            for iv in self.intervals[j]:  # failed_from := s + 1; a pending join stays
                if iv[0] <= s < iv[1]:
                    iv[1] = s + 1
            self.rq[j] = deque(m for m in self.rq[j] if self._active(j, m.slot))
            self.merging.pop(j, None)
            self.removed.append((j, s))
            return [Log("remove", {"member": j, "slot": s})]
        return [Log("skip", {"member": j, "slot": s})]
