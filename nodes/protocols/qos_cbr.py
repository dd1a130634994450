"""`qos-cbr`: QoS-preserving symmetric total order for constant bit rates (004 §4, Figs. 3-5).

Every process declares a rate r (messages/s) and sends exactly one message per 1/r -- its
next queued message, or a header-only DUMMY -- on the grid `E + K/r` of the common epoch E
(nodes/protocols/qos_common.py). Every process delivers along the same schedule `Porder`:
one "second" (cycle) with r_j entries for process j, the pairs (j, k), k < r_j, sorted by the
fraction k/r_j, ties in insertion order (§4.1). Message K of j fills j's K-th entry
(modulo the cycle), so the delivery order depends only on the rates, and the latency from a
message's tick to its delivery at every process is at most Δ+Γ (Theorem 1).

Rules (numbered here, with the paper's lines):
- C1 init-rate at start, ahead of E: reserve, multicast RATE(init, r) out of the tick grid;
  ticks from E.
- C3 a RATE(init) at the head of Rqueue[j] sets rate[j] (Fig. 4 update-rate).
- C4 start-deliver once every rate is known: Porder of process 0, then Update inserts the
  others one by one (Fig. 4).
- C6 at each tick: the head of Squeue, or a DUMMY (Fig. 4 net-mcast, dummy
  with the precondition "Squeue is empty", ours: the figure omits it). The next deadline is
  computed from the previous *deadline*, never from the clock reading at which the timer
  fired.
- C8 deliver / handle-dummy / change-rate at Porder[current] (Fig. 4): a new-rate
  message uses up one entry of its sender and runs Update with `current` on it; then
  `current := cur mod total` (ours: Fig. 4 leaves the cursor past the cycle's end).
- C9 new-rate: queued in Squeue, in FIFO with data, reserved at once (Fig. 4).
- Update (Fig. 5, reconstructed: the lost `else` branch and the repairs marked in `update`)
  with the cursor rule `update_cursor`: `aligned` (default) counts a new j entry as done when
  its *start* fraction is before the rate message's, `literal` keeps the paper's end-fraction
  rule and its extra latency after an off-grid renegotiation (docs/qos.md). After a rate change the
  sender ticks on the new grid from the cycle start, first point not before the rate
  message's tick (ours), or, with `literal`, every 1/r_new after it.

It runs over the unreliable per-pair FIFO channel (no retransmission) and assumes no loss,
no failures and FIFO links whose one-way delay is at most Δ (§4). Under loss it stays
safe (docs/qos.md): message K fills its sender's entry K, a gap becomes `lost` entries, and a
lost rate message halts that sender's stream rather than letting Porders diverge. A reservation the
network refuses is logged (`refused`) and the bound is no longer claimed for the run.

Log events (docs/qos.md): `net` at every send (kind data|dummy|rate, K, rseq, rate), `netrecv` at
every accepted datagram (member, rseq, kind) for the empirical Δ, `reserve`, `refused`,
`porder` (hash, current, cycle) at start-deliver and every change-rate, `late` for a datagram
the FIFO channel drops, `reject` for one that breaks the protocol.
"""

from __future__ import annotations

import zlib
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal

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
    FLAG_RATE_INIT,
    FLAG_RATE_NEW,
    NS_PER_S,
    FifoChannel,
    epoch_ns,
    netrecv,
    own_value,
    tick_ns,
    wire_rate_bps,
)
from nodes.protocols.sequencer import INCARNATION_SPAN
from nodes.wire import HEADER_SIZE, Header, Message, MsgType

WIRE_ID = 13
RESERVE_KEY = "qos-cbr"
MAX_RATE = 100_000  # msgs/s: a rate message above this is refused as malformed
MAX_GAP = 100_000_000  # lost messages one gap may stand for (a longer one halts the sender)
TIMER = "cbr:tick"
INIT_TIMER = "cbr:init"  # the init-rate, held until the run's configured start


@dataclass(frozen=True)
class QosCbrParams(CommonParams):
    delta: float | str = param(50, "Δ: the declared maximum one-way network latency, ms or "
                               "with a unit ('40ms'); the topology must honour it")
    gamma: float | str = param(10, "Γ: the declared maximum clock difference between two "
                               "processes, ms or with a unit ('10ms')")
    rate: int | dict[str, int] = param(50, "this process's rate in messages/s (integer >= 1; "
                                       "or a mapping host -> rate)")
    update_cursor: Literal["aligned", "literal"] = param(
        "aligned", "cursor rule of Update after a rate change: aligned (keeps Δ+Γ) or "
        "literal (004 Fig. 5 as printed)")
    epoch_ms: float = param(100, "the common epoch E: this long after the run's configured "
                            "start, on each node's local clock", ge=0)


def update(order: list[int], cur: int, rate: dict[int, int], j: int, included: list[int],
           aligned: bool) -> tuple[list[int], int]:
    """004 Fig. 5 `Update`, reconstructed (docs/qos.md): re-insert process j into the schedule
    with its new rate and move the cursor to j's first entry still to come."""
    delivered_j = order[:cur].count(j)  # appearances of j in P until cur
    prate_j = order.count(j)  # j's previous rate
    cur -= delivered_j  # non-j entries already processed this cycle
    old = [i for i in order if i != j]
    total = sum(rate[i] for i in included)
    temp: list[int] = []
    count = dict.fromkeys(included, 0)
    old_index = 0
    rj = rate[j]
    for _ in range(total):
        i = old[old_index] if old_index < len(old) else None  # ours: past the old entries
        if i is None or count[j] * rate[i] < count[i] * rj:  # ties: the old entry first
            temp.append(j)
            if prate_j:  # ours: at startup nothing of j was delivered
                if aligned and count[j] * prate_j < delivered_j * rj:
                    cur += 1  # start fraction k/r_new before f = deliveredJ/PrateJ
                count[j] += 1
                if not aligned and count[j] * prate_j <= delivered_j * rj:
                    cur += 1  # the paper's rule: end fraction (k+1)/r_new <= f
            else:
                count[j] += 1
        else:  # the lost `else` branch
            temp.append(i)
            count[i] += 1
            old_index += 1
    return temp, cur


def porder_hash(order: list[int]) -> int:
    return zlib.crc32(",".join(map(str, order)).encode())


class QosCbr(LayerBase):
    proto = WIRE_ID

    def __init__(self, me: int, members: list[int], params: dict[str, Any]):
        p = typed_params(QosCbrParams, params)
        self.me = me
        self.members = sorted(members)
        self.n = len(members)
        self.aligned = p.update_cursor == "aligned"
        self.declared_rate = int(own_value(p.rate, params, me))
        if self.declared_rate < 1:
            raise ValueError("qos-cbr: rate must be >= 1 message/s (004 §4: a process must "
                             "appear in Porder)")
        self.epoch = epoch_ns(params)
        self.start_at = int(params.get("start_at_ns", 0))  # the run's configured start
        self.incarnation = int(params.get("incarnation", 0))
        self.wire_bytes = HEADER_SIZE + int(params.get("payload_size", 0))
        self.chan = FifoChannel(me, members)
        self.squeue: deque[tuple[str, int, int, int]] = deque()  # (kind, value, mno, ts)
        self.rq: dict[int, deque[tuple[Any, ...]]] = {m: deque() for m in self.members}
        self.rate: dict[int, int] = {}
        self.my_rate: int | None = None
        self.mode = "get-rate"  # get-rate -> det-order -> deliver (Fig. 2, rebuilt)
        self.order: list[int] = []
        self.current = 0
        self.cycle = 0
        # the send grid: tick k is at seg_base + k/seg_rate (qos_common.tick_ns)
        self.seg_base = self.epoch
        self.seg_rate = self.declared_rate
        self.seg_k = 0
        self.k_sent = 0  # K: post-init messages sent
        # a restart's messages get new mids (the sequencer's numbering, nodes/protocols/
        # sequencer.py INCARNATION_SPAN)
        self.mno = self.incarnation * INCARNATION_SPAN
        self.delivered = 0
        self.refused = 0
        self.bound_claimed = True
        self.rejects = 0
        self.announced = 0  # rate messages sent (header `seq` of every message)
        # Receipt-side bookkeeping that keeps the order safe when datagrams are lost, which
        # §4 assumes away: message K of j fills j's K-th entry whatever arrived
        # before it, a gap in K becomes `lost` entries, and a lost rate message (the `seq`
        # count differs) halts j's stream for good instead of letting Porders diverge.
        self.next_k: dict[int, int] = {}
        self.changes: dict[int, int] = {}
        self.recv_rate: dict[int, int] = {}
        self.inc: dict[int, int] = dict.fromkeys(self.members, 0)
        self.gaps = 0

    # -- application side ---------------------------------------------------------------------
    def start(self, now: int) -> list[Action]:
        # A real backend boots its nodes one after another, up to seconds before the run's
        # configured start (mininet: 1.2 s between the first and the last of four): an
        # init-rate sent at boot reaches peers that are not listening yet, they never learn
        # this rate and never start delivering. Held until the configured start (E minus
        # `epoch_ms`), when every node is up; a late node (a restart) sends it at once.
        if now < self.start_at:
            return [SetTimer(INIT_TIMER, self.start_at - now)]
        return self._init_rate(now)

    def broadcast(self, payload: bytes, now: int) -> list[Action]:
        # C5: queued for the next tick (also before E: sent at the first tick)
        self.mno += 1
        self.squeue.append(("data", len(payload), self.mno, now))
        return [Log("send", {"mno": self.mno, "size": len(payload)})]

    def on_new_rate(self, rates: dict[str, float], now: int) -> list[Action]:
        """C9 (Fig. 4 new-rate): the rate message goes out in-band at a tick."""
        r = rates.get("rate")
        if r is None or int(r) != r or int(r) < 1 or int(r) > MAX_RATE:
            return [Log("reject", {"reason": "new-rate", "detail": repr(rates)})]
        if self.my_rate is None:
            self.declared_rate = int(r)
            self.seg_rate = int(r)
            return []
        self.squeue.append(("rate", int(r), 0, now))
        self.my_rate = int(r)
        return self._reserve(int(r))

    def on_reserve_result(self, key: str, granted: bool, rate_bps: float, reason: str,
                          now: int) -> list[Action]:
        if key != RESERVE_KEY or granted:
            return []
        # §2.1 assumes every reservation is accepted: without it the bound is void.
        self.refused += 1
        self.bound_claimed = False
        return [Log("refused", {"key": key, "rate_bps": rate_bps, "reason": reason})]

    def _reserve(self, r: int) -> list[Action]:
        bps = wire_rate_bps(self.n, r, self.wire_bytes)
        burst = self.wire_bytes * max(1, self.n - 1)
        return [Reserve(bps, burst, RESERVE_KEY),
                Log("reserve", {"avg": r, "burst": 1, "bytes": self.wire_bytes,
                                "rate_bps": bps, "key": RESERVE_KEY})]

    # -- sending ------------------------------------------------------------------------------
    def _init_rate(self, now: int) -> list[Action]:
        """C1: init-rate at start, `epoch_ms` ahead of tick 0 at E (FirstReserve -> DetOrder
        at once, §2.1). Fig. 4 sends the first message 1/r after init-rate; leaving well
        ahead keeps the init-rate first even on a link that reorders close datagrams."""
        r = self.declared_rate
        self.my_rate = r
        # A process started after E (a restart: §4 has no joins) ticks from the next grid
        # point instead of catching up on every tick it missed.
        k0 = max(0, -(-(now - self.epoch) * r // NS_PER_S))
        self.seg_base, self.seg_rate, self.seg_k = self.epoch, r, k0
        self.k_sent = k0  # K is the grid index: receivers map message K to entry K
        self.mode = "det-order"
        rseq = self.chan.stamp()
        msg = Message(Header(MsgType.DUMMY, WIRE_ID, FLAG_RATE_INIT, sender=self.me, rseq=rseq,
                             hint=r, aux=self.incarnation))
        self.rq[self.me].append(("init", r))
        if k0:
            self.rq[self.me].append(("lost", k0))  # the entries of the ticks it missed
        acts: list[Action] = self._reserve(r)
        acts += [Send(None, msg), Log("net", {"kind": "rate", "k": -1, "rseq": rseq, "rate": r,
                                            "init": True}),
                 SetTimer(TIMER, max(0, tick_ns(self.epoch, k0, r) - now))]
        return acts + self._process()

    def on_timer(self, key: str, now: int) -> list[Action]:
        if key == INIT_TIMER:
            return self._init_rate(now) if self.my_rate is None else []
        if key != TIMER or self.my_rate is None:
            return []
        return self._tick(now)

    def _tick(self, now: int) -> list[Action]:
        """C6: one message per tick -- the head of Squeue, or a DUMMY when it is empty."""
        k = self.k_sent
        self.k_sent += 1
        rseq = self.chan.stamp()
        fields: dict[str, Any] = {"k": k, "rseq": rseq}
        if self.squeue:
            kind, value, mno, ts = self.squeue.popleft()
        else:
            kind, value, mno, ts = "dummy", 0, 0, 0
        slot = k & 0xFFFFFFFF
        if kind == "data":
            h = Header(MsgType.DATA, WIRE_ID, sender=self.me, rseq=rseq, origin=self.me, mno=mno,
                       seq=self.announced, slot=slot, ts=ts, aux=self.incarnation)
            msg = Message(h, b"\x00" * value)
            self.rq[self.me].append(("data", mno, value))
            fields.update(kind="data", mno=mno)
        elif kind == "rate":
            self.announced += 1
            msg = Message(Header(MsgType.DUMMY, WIRE_ID, FLAG_RATE_NEW, sender=self.me,
                                 rseq=rseq, seq=self.announced, hint=value, slot=slot,
                                 aux=self.incarnation))
            self.rq[self.me].append(("rate", value))
            fields.update(kind="rate", rate=value)
        else:
            msg = Message(Header(MsgType.DUMMY, WIRE_ID, sender=self.me, rseq=rseq,
                                 seq=self.announced, slot=slot, aux=self.incarnation))
            self.rq[self.me].append(("dummy",))
            fields["kind"] = "dummy"
        this_tick = tick_ns(self.seg_base, self.seg_k, self.seg_rate)
        if kind == "rate":
            self._regrid(this_tick, value)
        else:
            self.seg_k += 1
        nxt = tick_ns(self.seg_base, self.seg_k, self.seg_rate)
        acts: list[Action] = [Send(None, msg), Log("net", fields),
                              SetTimer(TIMER, max(0, nxt - now))]
        return acts + self._process()

    def _regrid(self, this_tick: int, r_new: int) -> None:
        """After the rate message at tick T, tick on the new grid (ours, module docstring)."""
        if self.aligned:
            cycles, k_in = divmod(self.seg_k, self.seg_rate)
            self.seg_base += cycles * NS_PER_S  # the start of T's cycle
            self.seg_k = -(-k_in * r_new // self.seg_rate)  # first new point not before T
        else:
            self.seg_base, self.seg_k = this_tick, 1  # Fig. 4: last := last + 1/r_new
        self.seg_rate = r_new

    # -- receiving and delivery ---------------------------------------------------------------
    def on_message(self, src: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        j = h.sender
        if h.proto != WIRE_ID or j == self.me or j not in self.rq:
            return self._reject("sender", h)
        if h.type == MsgType.DATA:
            if h.origin != j or h.mno < 1:
                return self._reject("origin", h)
            item: tuple[Any, ...] = ("data", h.mno, len(msg.payload))
        elif h.type == MsgType.DUMMY:
            if h.flags & (FLAG_RATE_INIT | FLAG_RATE_NEW):
                if not 1 <= h.hint <= MAX_RATE:
                    return self._reject("rate", h)
                item = ("init" if h.flags & FLAG_RATE_INIT else "rate", h.hint)
            else:
                item = ("dummy",)
        else:
            return self._reject("type", h)
        if not self.chan.accept(j, h.rseq, h.aux):  # A0.2: late or duplicate
            return [Log("late", {"member": j, "rseq": h.rseq})]
        acts: list[Action] = [netrecv(h, item[0])]
        acts += self._place(j, h, item)
        if item[0] == "data":
            acts.append(Received(j, h.mno, len(msg.payload)))
        return acts + self._process()

    def _place(self, j: int, h: Header, item: tuple[Any, ...]) -> list[Action]:
        """Queue a received message at its position K in j's stream (see `next_k`)."""
        q = self.rq[j]
        if item[0] == "init":
            if h.aux > self.inc[j] and j in self.recv_rate:  # j restarted (§4: no joins)
                self.inc[j] = h.aux
                if item[1] != self.recv_rate[j]:
                    return self._halt(j, "restarted with another rate")
                self.changes[j] = 0  # its rate messages count from 0 again
                return []
            if j in self.recv_rate:
                return [Log("reject", {"reason": "init-rate", "member": j})]
            self.recv_rate[j], self.changes[j], self.next_k[j] = item[1], 0, 0
            q.append(item)
            return []
        if j not in self.recv_rate:  # its init-rate was lost: j can never be scheduled
            return [Log("late", {"member": j, "rseq": h.rseq, "reason": "no init-rate"})]
        k, expected = h.slot, self.next_k[j]
        if k < expected:
            return [Log("late", {"member": j, "rseq": h.rseq, "reason": "old K"})]
        acts: list[Action] = []
        if k > expected:
            if k - expected > MAX_GAP:
                return self._halt(j, f"gap of {k - expected} messages")
            self.gaps += k - expected
            q.append(("lost", k - expected))
            acts.append(Log("gap", {"member": j, "from_k": expected, "to_k": k - 1}))
        self.next_k[j] = k + 1
        if h.seq != self.changes[j] + (item[0] == "rate"):  # a rate message was lost
            return acts + self._halt(j, "a rate message was lost")
        if item[0] == "rate":
            self.changes[j] += 1
            self.recv_rate[j] = item[1]
        q.append(item)
        return acts

    def _halt(self, j: int, why: str) -> list[Action]:
        """Stop delivering at j's next entry for good: safe, where guessing is not."""
        self.rq[j].append(("halt",))
        self.next_k[j] = 1 << 62
        return [Log("halt", {"member": j, "reason": why})]

    def _reject(self, reason: str, h: Header) -> list[Action]:
        self.rejects += 1
        return [Log("reject", {"reason": reason, "detail": f"{h.type.name} from {h.sender} "
                                                           f"rseq {h.rseq}"})]

    def _process(self) -> list[Action]:
        """C3, C4 and C8, run after every event until no rule applies."""
        acts: list[Action] = []
        if self.mode == "det-order":
            for j, q in self.rq.items():
                if q and q[0][0] == "init":
                    self.rate[j] = q.popleft()[1]
            if len(self.rate) < self.n:
                return acts
            self._start_deliver()
            acts.append(self._porder_log(self.members[0]))
        if self.mode != "deliver":
            return acts
        order, rq = self.order, self.rq
        while True:
            j = order[self.current]
            q = rq[j]
            if not q:
                return acts
            kind = q[0][0]
            if kind == "halt":
                return acts
            item = q.popleft()
            if kind == "lost" and item[1] > 1:
                q.appendleft(("lost", item[1] - 1))  # one entry per lost message
            if kind == "rate":  # change-rate (Fig. 4; the cursor wraps, C8)
                self.rate[j] = item[1]
                self.order, cur = update(order, self.current, self.rate, j, self.members,
                                         self.aligned)
                order = self.order
                self.current = cur % len(order)
                acts.append(self._porder_log(j))
                continue
            if kind == "data":
                self.delivered += 1
                acts.append(FinalDeliver(j, item[1], self.delivered, item[2]))
            self.current += 1
            if self.current == len(order):
                self.current = 0
                self.cycle += 1

    def _start_deliver(self) -> None:
        """C4 (Fig. 4 start-deliver)."""
        first = self.members[0]
        order = [first] * self.rate[first]
        for idx in range(1, self.n):
            order, _ = update(order, 0, self.rate, self.members[idx], self.members[:idx + 1],
                              self.aligned)
        self.order, self.current, self.mode = order, 0, "deliver"

    def _porder_log(self, j: int) -> Log:
        return Log("porder", {"hash": porder_hash(self.order), "current": self.current,
                              "cycle": self.cycle, "member": j,
                              "rate": self.rate.get(j, 0)})
