"""`leader`: leader-based broadcast with reserved rates (004 §8.1; rules rebuilt
from the description; numbered LB1-LB5 here).

- LB1 broadcast(m) at i != L: unicast FWD(origin=i, mno) to the leader L; at L: LB2 at once.
- LB2 the leader appends each FWD (and its own messages) to its relay queue and relays them in
  arrival order: g += 1, multicast SEQDATA(seq=g, origin, mno). The time from receipt to relay
  is the processing overhead pO (§8.1), logged per message as `relay` (`po_ns`); the
  optional `leader_service_us` models the leader's CPU as a single server.
- LB3 every process delivers SEQDATA in the order of g: FIFO from L is the total order.
- LB4 reservations: each i != L reserves its rate towards L (unicast), L reserves the sum of
  all rates towards everyone (§8.1).

No failures, no clock synchrony (§8). AppLatency = 2Δ + pO (§8.1): analysis/qos.py judges the
latency against 2Δ + max pO. Runs over the unreliable per-pair FIFO channel
(nodes/protocols/qos_common.py), like the symmetric QoS protocols; a gap in g is waited for.
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
from nodes.protocols.qos_common import FifoChannel, netrecv, own_value, wire_rate_bps
from nodes.protocols.sequencer import INCARNATION_SPAN
from nodes.wire import HEADER_SIZE, Flag, Header, Message, MsgType

WIRE_ID = 15
RESERVE_KEY = "leader"
SERVE_TIMER = "ldr:serve"
HOLD_MAX = 100_000  # out-of-order SEQDATA held at most (a bound on what a peer can make us keep)


@dataclass(frozen=True)
class LeaderParams(CommonParams):
    leader: str | None = param(None, "the leader host (default: the first member)", host=True)
    delta: float | str = param(50, "Δ: the declared maximum one-way network latency, ms or "
                               "with a unit")
    rate: int | dict[str, int] = param(50, "this process's reserved rate in messages/s (or a "
                                       "mapping host -> rate)")
    leader_service_us: float = param(0, "modelled leader processing time per relayed message "
                                     "(pO), µs", ge=0)


class Leader(LayerBase):
    proto = WIRE_ID

    def __init__(self, me: int, members: list[int], params: dict[str, Any]):
        p = typed_params(LeaderParams, params)
        self.me = me
        self.members = sorted(members)
        self.leader = int(params.get("leader_id", self.members[0]))
        self.n = len(members)
        self.rate = int(own_value(p.rate, params, me))
        rates = p.rate if isinstance(p.rate, dict) else None
        self.total_rate = sum(rates.values()) if rates else self.rate * self.n
        self.service_ns = round(p.leader_service_us * 1_000)
        self.incarnation = int(params.get("incarnation", 0))
        self.wire_bytes = HEADER_SIZE + int(params.get("payload_size", 0))
        self.chan = FifoChannel(me, members)
        # a restart's messages get new mids (the sequencer's numbering, nodes/protocols/
        # sequencer.py INCARNATION_SPAN)
        self.mno = self.incarnation * INCARNATION_SPAN
        self.g = 0  # leader: the last sequence number given
        self.next_seq = 1  # everyone: the next g to deliver
        # A restarted process (incarnation > 0) joins the relay stream where it finds it: §8
        # assumes no failures, so nothing before its first SEQDATA is owed to it.
        self.joining = self.incarnation > 0
        self.held: dict[int, tuple[int, int, int]] = {}  # g -> (origin, mno, size)
        self.relay_q: deque[tuple[int, int, int, int]] = deque()  # (origin, mno, size, recv t)
        self.serving = False
        self.refused = 0

    def start(self, now: int) -> list[Action]:
        """LB4: reserve towards the leader, or (at L) the sum of all rates towards all."""
        if self.me == self.leader:
            bps = wire_rate_bps(self.n, self.total_rate, self.wire_bytes)
            avg = self.total_rate
        else:
            bps = wire_rate_bps(2, self.rate, self.wire_bytes)
            avg = self.rate
        return [Reserve(bps, self.wire_bytes, RESERVE_KEY),
                Log("reserve", {"avg": avg, "burst": 1, "bytes": self.wire_bytes,
                                "rate_bps": bps, "key": RESERVE_KEY})]

    def on_reserve_result(self, key: str, granted: bool, rate_bps: float, reason: str,
                          now: int) -> list[Action]:
        if key != RESERVE_KEY or granted:
            return []
        self.refused += 1
        return [Log("refused", {"key": key, "rate_bps": rate_bps, "reason": reason})]

    def broadcast(self, payload: bytes, now: int) -> list[Action]:
        self.mno += 1
        acts: list[Action] = [Log("send", {"mno": self.mno, "size": len(payload)})]
        if self.me == self.leader:  # LB1 at L: straight to the relay queue
            acts.append(Log("net", {"kind": "data", "mno": self.mno}))
            return acts + self._enqueue(self.me, self.mno, len(payload), now)
        rseq = self.chan.stamp()  # LB1: FWD to the leader
        msg = Message(Header(MsgType.DATA, WIRE_ID, sender=self.me, rseq=rseq, origin=self.me,
                             mno=self.mno, ts=now, aux=self.incarnation), payload)
        return acts + [Send(self.leader, msg),
                       Log("net", {"kind": "data", "rseq": rseq, "mno": self.mno})]

    def _enqueue(self, origin: int, mno: int, size: int, now: int) -> list[Action]:
        """LB2: relay in arrival order; with `leader_service_us` each relay leaves when its
        service ends (a single server)."""
        self.relay_q.append((origin, mno, size, now))
        if not self.service_ns:
            acts: list[Action] = []
            while self.relay_q:
                acts += self._relay(*self.relay_q.popleft(), now)
            return acts
        if self.serving:
            return []
        self.serving = True
        return [SetTimer(SERVE_TIMER, self.service_ns)]

    def _relay(self, origin: int, mno: int, size: int, got: int, now: int) -> list[Action]:
        self.g += 1
        rseq = self.chan.stamp()
        msg = Message(Header(MsgType.DATA, WIRE_ID, Flag.RELAYED, sender=self.me, rseq=rseq,
                             origin=origin, mno=mno, seq=self.g, aux=self.incarnation),
                      b"\x00" * size)
        acts: list[Action] = [Send(None, msg),
                              Log("relay", {"origin": origin, "mno": mno, "seq": self.g,
                                            "po_ns": now - got}),
                              Log("net", {"kind": "data", "rseq": rseq})]
        return acts + self._ordered(self.g, origin, mno, size)

    def on_timer(self, key: str, now: int) -> list[Action]:
        if key != SERVE_TIMER or not self.relay_q:
            return []
        acts = self._relay(*self.relay_q.popleft(), now)
        if self.relay_q:
            acts.append(SetTimer(SERVE_TIMER, self.service_ns))
        else:
            self.serving = False
        return acts

    def roles(self) -> dict[str, int]:
        """The `leader` relays every message (LB2); the others forward theirs to it (LB1)."""
        return {"leader": self.leader}

    def on_message(self, src: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        j = h.sender
        if h.proto != WIRE_ID or h.type != MsgType.DATA or j == self.me or j not in self.members:
            return [Log("reject", {"reason": "type", "detail": f"{h.type.name} from {j}"})]
        # Relayed SEQDATA only from the leader, FWDs only to it: the edge gate's role rules
        # (`roles`, nodes/protocols/catalogue.py LEADER_EDGE).
        relayed = bool(h.flags & Flag.RELAYED)
        if (not relayed and h.origin != j) or h.mno < 1 or h.origin not in self.members \
                or (relayed and h.seq < 1):
            return [Log("reject", {"reason": "origin", "detail": f"from {j} seq {h.seq}"})]
        if not self.chan.accept(j, h.rseq, h.aux):
            return [Log("late", {"member": j, "rseq": h.rseq})]
        acts: list[Action] = [netrecv(h, "data")]
        if not relayed:  # LB2 at the leader
            return acts + self._enqueue(h.origin, h.mno, len(msg.payload), now)
        if self.joining:
            self.joining, self.next_seq = False, h.seq
        if h.seq < self.next_seq or len(self.held) >= HOLD_MAX:
            return acts + [Log("reject", {"reason": "window", "detail": f"seq {h.seq}"})]
        acts.append(Received(h.origin, h.mno, len(msg.payload)))
        return acts + self._ordered(h.seq, h.origin, h.mno, len(msg.payload))

    def _ordered(self, seq: int, origin: int, mno: int, size: int) -> list[Action]:
        """LB3: deliver in the order of g."""
        self.held[seq] = (origin, mno, size)
        acts: list[Action] = []
        while self.next_seq in self.held:
            o, m, s = self.held.pop(self.next_seq)
            acts.append(FinalDeliver(o, m, self.next_seq, s))
            self.next_seq += 1
        return acts
