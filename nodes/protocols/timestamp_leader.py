"""`timestamp-leader`: total order by blocks of timestamps a leader grants (004 §8.2;
rules rebuilt from the description, numbered TS1-TS5 here).

- TS1 a sender with no open block, on its first message: block := next req_no; unicast
  REQ(i, req_no, k = max_burst) to the leader L and at once multicast the message as
  TSDATA(origin=i, mno, req_no, idx=0) (§8.2).
- TS2 further messages of the block take idx 1..k-1. A block closes when its k timestamps are
  used or at its deadline, the end of the sender's current local slot of Θ (§8.2). At the
  deadline with idx < k the sender multicasts ONE DUMMY(req_no, from=first unused idx) that
  releases the rest of the block (ours: §8.2 leaves unused timestamps open). A message after
  a closed block opens a new one (a new REQ).
- TS3 the leader on REQ(i, req_no, k): grant [first = g+1, k], g += k, multicast
  GRANT(i, req_no, first, k) (logged as `grant` with the time it waited, pO). The leader's own
  blocks are granted the same way.
- TS4 every process delivers timestamps in order: for the next timestamp t, the grant
  (i, req_no, first, k) with first <= t < first+k gives idx = t - first; deliver TSDATA(i,
  req_no, idx) if present, skip the rest of the block if a DUMMY(i, req_no, from <= idx) is,
  else wait. Grants come FIFO from L, so they are applied in the order given.
- TS5 reservations: the application's rate plus one REQ, one GRANT (at L, per process) and at
  most one DUMMY per slot (§8.2, §8.2.1).

No failures, no clock synchrony (§8). The paper's AppLatency = Δ + max(Δ + pO, Θ) (§8.2.1)
holds when requests reach the leader in the order they were sent (equal paths to it): its
case B counts only blocks requested before the message was sent. The leader grants in
arrival order (§8.2), so a nearer sender's block requested up to Δ later is granted first and
stays open up to Θ: the bound is 2Δ + max(pO, Θ), judged by analysis/qos.py (`bound_ns`)
with pO the largest wait the leader logged.
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
    NS_PER_S,
    FifoChannel,
    duration_ns,
    epoch_ns,
    netrecv,
    own_value,
    wire_rate_bps,
)
from nodes.protocols.sequencer import INCARNATION_SPAN
from nodes.wire import HEADER_SIZE, Header, Message, MsgType

WIRE_ID = 16
RESERVE_KEY = "timestamp-leader"
BLOCK_TIMER = "tsl:block"
SERVE_TIMER = "tsl:serve"
MAX_BURST = 10_000  # a REQ or GRANT for a larger block is refused as malformed
HOLD_MAX = 100_000  # held TSDATA at most (a bound on what peers can make us keep)
# Wire types (generic ones, with this protocol's id): REQ travels as FETCH, GRANT as ORDER.
REQ, GRANT, TSDATA, DUMMY = MsgType.FETCH, MsgType.ORDER, MsgType.DATA, MsgType.DUMMY


@dataclass(frozen=True)
class TimestampLeaderParams(CommonParams):
    leader: str | None = param(None, "the leader host (default: the first member)", host=True)
    delta: float | str = param(50, "Δ: the declared maximum one-way network latency, ms or "
                               "with a unit")
    theta: float | str = param(20, "Θ: the slot, the longest a block stays open, ms or with a "
                               "unit")
    max_burst: int = param(3, "k: timestamps per block (AppMaxBurst)", ge=1, le=MAX_BURST)
    avg: int | dict[str, int] = param(50, "the application's average rate in messages/s, for "
                                      "the reservation (or a mapping host -> rate)")
    leader_service_us: float = param(0, "modelled leader processing time per REQ (pO), µs",
                                     ge=0)
    epoch_ms: float = param(100, "slots start this long after the run's configured start",
                            ge=0)


class TimestampLeader(LayerBase):
    proto = WIRE_ID

    def __init__(self, me: int, members: list[int], params: dict[str, Any]):
        p = typed_params(TimestampLeaderParams, params)
        self.me = me
        self.members = sorted(members)
        self.n = len(members)
        self.leader = int(params.get("leader_id", self.members[0]))
        self.theta = duration_ns(p.theta)
        if self.theta <= 0:
            raise ValueError("timestamp-leader: theta must be positive")
        self.k = p.max_burst
        self.avg = int(own_value(p.avg, params, me))
        self.epoch = epoch_ns(params)
        self.service_ns = round(p.leader_service_us * 1_000)
        self.incarnation = int(params.get("incarnation", 0))
        self.wire_bytes = HEADER_SIZE + int(params.get("payload_size", 0))
        self.chan = FifoChannel(me, members)
        # a restart's messages get new mids (the sequencer's numbering, nodes/protocols/
        # sequencer.py INCARNATION_SPAN)
        self.mno = self.incarnation * INCARNATION_SPAN
        self.req_no = 0
        self.open_idx: int | None = None  # next idx of the open block, None: no open block
        # leader
        self.g = 0
        self.requests: deque[tuple[int, int, int, int]] = deque()  # (i, req_no, k, recv t)
        self.serving = False
        # everyone (TS4)
        self.grants: deque[tuple[int, int, int, int]] = deque()  # (i, req_no, first, k)
        self.data: dict[tuple[int, int, int], tuple[int, int]] = {}  # (i, req, idx) -> mno, size
        self.dummies: dict[tuple[int, int], int] = {}  # (i, req_no) -> from idx
        self.next_ts = 1
        self.refused = 0

    # -- reservations (TS5) -------------------------------------------------------------------
    def start(self, now: int) -> list[Action]:
        per_slot = NS_PER_S / self.theta
        msgs = self.avg + 2 * per_slot  # data, a REQ and at most one DUMMY per slot
        bps = wire_rate_bps(self.n, msgs, self.wire_bytes)
        if self.me == self.leader:  # one GRANT per process per slot to everyone
            bps += wire_rate_bps(self.n, self.n * per_slot, HEADER_SIZE)
        return [Reserve(bps, self.wire_bytes * self.k, RESERVE_KEY),
                Log("reserve", {"avg": round(msgs, 3), "burst": self.k + 2,
                                "bytes": self.wire_bytes, "rate_bps": bps,
                                "key": RESERVE_KEY})]

    def on_reserve_result(self, key: str, granted: bool, rate_bps: float, reason: str,
                          now: int) -> list[Action]:
        if key != RESERVE_KEY or granted:
            return []
        self.refused += 1
        return [Log("refused", {"key": key, "rate_bps": rate_bps, "reason": reason})]

    # -- sending (TS1, TS2) -------------------------------------------------------------------
    def broadcast(self, payload: bytes, now: int) -> list[Action]:
        self.mno += 1
        acts: list[Action] = [Log("send", {"mno": self.mno, "size": len(payload)})]
        if self.open_idx is None:  # TS1: open a block
            self.req_no += 1
            self.open_idx = 0
            acts += self._request(now)
            slot_end = self.epoch + ((now - self.epoch) // self.theta + 1) * self.theta
            acts.append(SetTimer(BLOCK_TIMER, max(0, slot_end - now)))
        idx = self.open_idx
        rseq = self.chan.stamp()
        msg = Message(Header(TSDATA, WIRE_ID, sender=self.me, rseq=rseq, origin=self.me,
                             mno=self.mno, seq=self.req_no, hint=idx, ts=now,
                             aux=self.incarnation), payload)
        acts += [Send(None, msg), Log("net", {"kind": "data", "rseq": rseq, "mno": self.mno})]
        self.open_idx = idx + 1
        if self.open_idx == self.k:  # TS2: the block is full
            self.open_idx = None
            acts.append(SetTimer(BLOCK_TIMER, 0))  # cancels the deadline (fires as a no-op)
        self._hold_data(self.me, self.req_no, idx, self.mno, len(payload))
        return acts + self._deliver()

    def _request(self, now: int) -> list[Action]:
        if self.me == self.leader:
            return self._enqueue(self.me, self.req_no, self.k, now)
        rseq = self.chan.stamp()
        req = Message(Header(REQ, WIRE_ID, sender=self.me, rseq=rseq, origin=self.me,
                             seq=self.req_no, hint=self.k, aux=self.incarnation))
        return [Send(self.leader, req), Log("net", {"kind": "req", "rseq": rseq})]

    def on_timer(self, key: str, now: int) -> list[Action]:
        if key == SERVE_TIMER:
            return self._serve_one(now)
        if key != BLOCK_TIMER or self.open_idx is None:
            return []
        # TS2: the deadline with idx < k: one DUMMY releases the unused timestamps
        first_unused, self.open_idx = self.open_idx, None
        rseq = self.chan.stamp()
        msg = Message(Header(DUMMY, WIRE_ID, sender=self.me, rseq=rseq, origin=self.me,
                             seq=self.req_no, hint=first_unused, aux=self.incarnation))
        self.dummies[(self.me, self.req_no)] = first_unused
        acts: list[Action] = [Send(None, msg), Log("net", {"kind": "dummy", "rseq": rseq})]
        return acts + self._deliver()

    # -- the leader (TS3) ---------------------------------------------------------------------
    def _enqueue(self, i: int, req_no: int, k: int, now: int) -> list[Action]:
        self.requests.append((i, req_no, k, now))
        if not self.service_ns:
            acts: list[Action] = []
            while self.requests:
                acts += self._grant(*self.requests.popleft(), now)
            return acts
        if self.serving:
            return []
        self.serving = True
        return [SetTimer(SERVE_TIMER, self.service_ns)]

    def _serve_one(self, now: int) -> list[Action]:
        if not self.requests:
            self.serving = False
            return []
        acts = self._grant(*self.requests.popleft(), now)
        if self.requests:
            acts.append(SetTimer(SERVE_TIMER, self.service_ns))
        else:
            self.serving = False
        return acts

    def _grant(self, i: int, req_no: int, k: int, got: int, now: int) -> list[Action]:
        first = self.g + 1
        self.g += k
        rseq = self.chan.stamp()
        msg = Message(Header(GRANT, WIRE_ID, sender=self.me, rseq=rseq, origin=i, mno=req_no,
                             seq=first, hint=k, aux=self.incarnation))
        self.grants.append((i, req_no, first, k))
        acts: list[Action] = [
            Send(None, msg), Log("net", {"kind": "grant", "rseq": rseq}),
            Log("grant", {"member": i, "req": req_no, "first": first, "k": k,
                          "po_ns": now - got})]
        return acts + self._deliver()

    # -- receiving and delivery (TS4) ---------------------------------------------------------
    def roles(self) -> dict[str, int]:
        """The `leader` grants blocks of timestamps (TS3); REQs go to it (TS1)."""
        return {"leader": self.leader}

    def on_message(self, src: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        j = h.sender
        if h.proto != WIRE_ID or j == self.me or j not in self.members:
            return self._reject("sender", h)
        bad = self._invalid(h)
        if bad:
            return self._reject(bad, h)
        if not self.chan.accept(j, h.rseq, h.aux):
            return [Log("late", {"member": j, "rseq": h.rseq})]
        kind = {REQ: "req", GRANT: "grant", TSDATA: "data", DUMMY: "dummy"}[h.type]
        acts: list[Action] = [netrecv(h, kind)]
        if h.type == REQ:
            return acts + self._enqueue(j, h.seq, h.hint, now)
        if h.type == GRANT:
            self.grants.append((h.origin, h.mno, h.seq, h.hint))
        elif h.type == TSDATA:
            acts.append(Received(j, h.mno, len(msg.payload)))
            self._hold_data(j, h.seq, h.hint, h.mno, len(msg.payload))
        else:
            self.dummies[(j, h.seq)] = h.hint
        return acts + self._deliver()

    def _invalid(self, h: Header) -> str:
        if h.type not in (REQ, GRANT, TSDATA, DUMMY):
            return "type"
        # REQs only to the leader, GRANTs only from it: the edge gate's role rules (`roles`,
        # nodes/protocols/catalogue.py TIMESTAMP_LEADER_EDGE).
        if h.type == REQ:
            ok = h.origin == h.sender and 1 <= h.hint <= MAX_BURST
            return "" if ok and h.seq >= 1 else "origin"
        if h.type == GRANT:
            ok = h.origin in self.members and 1 <= h.hint <= MAX_BURST
            return "" if ok and h.seq >= 1 and h.mno >= 1 else "origin"
        if h.origin != h.sender or h.seq < 1 or not 0 <= h.hint < MAX_BURST:
            return "origin"
        if h.type == TSDATA and (h.mno < 1 or len(self.data) >= HOLD_MAX):
            return "window"
        return ""

    def _reject(self, reason: str, h: Header) -> list[Action]:
        return [Log("reject", {"reason": reason,
                               "detail": f"{h.type.name} from {h.sender} seq {h.seq}"})]

    def _hold_data(self, i: int, req_no: int, idx: int, mno: int, size: int) -> None:
        self.data[(i, req_no, idx)] = (mno, size)

    def _deliver(self) -> list[Action]:
        acts: list[Action] = []
        while self.grants:
            i, req_no, first, k = self.grants[0]
            if self.next_ts >= first + k:
                self.grants.popleft()
                continue
            idx = self.next_ts - first
            got = self.data.pop((i, req_no, idx), None)
            if got is not None:
                acts.append(FinalDeliver(i, got[0], self.next_ts, got[1]))
                self.next_ts += 1
                continue
            released = self.dummies.get((i, req_no))
            if released is not None and released <= idx:
                self.next_ts = first + k  # the rest of the block carries nothing
                self.dummies.pop((i, req_no))
                continue
            break
        return acts
