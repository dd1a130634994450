"""Fast SETO: optimistic total order with planned delays (003 sec. 4.3 and Fig. 7).

SETO (000 Fig. 4) converges to delays that give a total order but not the lowest optimistic
latency (003 sec. 3). Fast SETO computes the delay matrix instead, in the paper's four steps:

1. every process estimates the one-way delay to every other from round trips -- a PING
   carrying its local send instant, echoed in a PONG -- as half the round trip, averaged over
   the last `samples` probes (the paper leaves this step open: "there are multiple ways of
   collecting round-trip estimations");
2. it sends its vector in an ESTIMATE to the designated process, the smallest member id
   (updateDelays, lines 13-14), with its own send rate (messages/s over the last `rate_window`
   ESTIMATE periods): the rates lambda_k that weight 003's objective (eq. 3, sec. 4.1);
3. once it holds every vector (allDelaysGathered, line 15), the designated process computes the
   matrix with the planner named by `planner` -- `optimal` (the MOL linear program) or
   `heuristic` (003 Fig. 4), both in `nodes.planner` -- weighted by the reported rates;
4. it unicasts each process its row in a DELAY message (lines 17-18): the delays that process
   applies to every sender's messages. The sequencer opt-delivers, numbers and fnl-delivers
   exactly as in SETO (lines 19-34), so the planned delays only steer the optimistic order.

Until its first row arrives a process runs plain SETO (delays learnt by adjust()). The
designated process re-plans when an estimate moves more than `replan_ms` away from the one the
current plan used, or a send rate by more than `replan_rate` (a fraction) of the largest.
Messages here are sent unreliably and repaired by repetition: ESTIMATEs go out every
`estimate_ms` carrying the plan round the sender applies (header.aux), and the designated
process answers a stale round with the current row.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from nodes.protocols.base import Action, Log, Send, SetTimer, ms, param
from nodes.protocols.sequencer import Sequencer
from nodes.protocols.seto import SetoDelays, SetoParams
from nodes.wire import Header, Message, MsgType, Proto

if TYPE_CHECKING:
    from nodes.planner import Plan

PROBE = "fs:probe"
ESTIMATE = "fs:estimate"
ENTRY = struct.Struct("!Hi")  # member id, microseconds
# The ESTIMATE entry that carries the sender's own rate (in milli-messages per second) instead
# of a delay: member ids are 16-bit and never this one.
RATE_ID = 0xFFFF
# The planners (nodes/planner.py) need numpy, imported when the coordinator first plans: a
# node of any other protocol, and the CLI, start without it.
PLANNERS = ("optimal", "heuristic")
_CONTROL = (MsgType.PING, MsgType.PONG, MsgType.ESTIMATE, MsgType.DELAY)


@dataclass(frozen=True)
class FastSetoParams(SetoParams):
    planner: Literal["optimal", "heuristic"] = param(
        "optimal", "delay planner: the MOL linear program or 003 Fig. 4's heuristic")
    probe_ms: float = ms("round-trip probe period (step 1)", 100)
    estimate_ms: float = ms("ESTIMATE period (step 2)", 500)
    replan_ms: float = ms("estimate drift that triggers a re-plan", 3.0)
    min_samples: int = param(5, "probes per member before the first estimate", ge=1)
    replan_rate: float = param(0.25, "send-rate change (fraction of the largest) that re-plans",
                               gt=0)
    rate_window: int = param(10, "ESTIMATE periods the send rate is measured over", ge=2)
    samples: int = param(50, "probes averaged per member", ge=1)


def pack_vector(values: dict[int, int]) -> bytes:
    """Per-member durations in ns, carried as (id, us) entries."""
    return b"".join(ENTRY.pack(m, round(v / 1000)) for m, v in sorted(values.items()))


def unpack_vector(payload: bytes) -> dict[int, int]:
    entries = (ENTRY.unpack_from(payload, i) for i in range(0, len(payload), ENTRY.size))
    return {m: us * 1000 for m, us in entries}


def build(me: int, members: list[int], params: dict[str, Any]) -> Sequencer:
    """The `fast-seto` stack: the fixed sequencer over reliable FIFO, with SETO's order
    policy, whose delays this planner plans."""
    delays = SetoDelays(me, members, params, planner=DelayPlanner(me, members, params))
    return Sequencer(me, members, params, Proto.FAST_SETO, delays)


class DelayPlanner:
    """Fast SETO's four steps (module docstring), as SETO's planner
    (`nodes.protocols.seto.Planner`)."""

    proto = Proto.FAST_SETO

    def __init__(self, me: int, members: list[int], params: dict[str, Any]):
        self.me = me
        self.members = members
        planner = str(params.get("planner", "optimal"))
        if planner not in PLANNERS:
            raise ValueError(f"Fast SETO planner must be one of {sorted(PLANNERS)}, "
                             f"got {planner!r}")
        self.planner_name = planner
        self.probe_ns = round(float(params.get("probe_ms", 100)) * 1e6)
        self.estimate_ns = round(float(params.get("estimate_ms", 500)) * 1e6)
        self.replan_ns = round(float(params.get("replan_ms", 3.0)) * 1e6)
        self.min_samples = int(params.get("min_samples", 5))
        self.replan_rate = float(params.get("replan_rate", 0.25))
        # (local time, messages sent) at the last ESTIMATE periods: the send rate's window.
        self.sent_at: deque[tuple[int, int]] = deque(maxlen=int(params.get("rate_window", 10)))
        window = int(params.get("samples", 50))
        self.coordinator = min(members)
        self.samples: dict[int, deque[int]] = {
            m: deque(maxlen=window) for m in members if m != me}
        self.applied_round = 0  # round of the row this process applies (0: none yet)
        # Designated process only: the vectors and rates gathered, and what the plan used.
        self.estimates: dict[int, dict[int, int]] = {}
        self.rates: dict[int, float] = {}
        self.planned_rates: dict[int, float] = {}
        self.round = 0
        self.planned: dict[int, dict[int, int]] = {}
        self.rows: dict[int, dict[int, int]] = {}

    # -- the planner's events (nodes.protocols.seto.Planner) ---------------------------------
    def bind(self, seto: SetoDelays) -> None:
        self.seto = seto

    def start(self, now: int) -> list[Action]:
        self.sent_at.append((now, self.seto.sent()))
        return [SetTimer(PROBE, 0), SetTimer(ESTIMATE, self.estimate_ns)]

    def roles(self) -> dict[str, int]:
        """The designated process (the `coordinator`) gathers every ESTIMATE and alone
        sends DELAY rows (003 Fig. 7 lines 13-18)."""
        return {"coordinator": self.coordinator}

    def on_message(self, src: int, msg: Message, now: int) -> list[Action] | None:
        h = msg.header
        if h.type not in _CONTROL:
            return None
        if h.type == MsgType.PING:
            return [Send(src, self._control(MsgType.PONG, ts=h.ts))]
        if h.type == MsgType.PONG:
            if src in self.samples and now >= h.ts:
                self.samples[src].append((now - h.ts) // 2)
            return []
        if h.type == MsgType.ESTIMATE:
            vector = unpack_vector(msg.payload)
            rate = vector.pop(RATE_ID, None)
            return self._gathered(src, vector, h.aux, None if rate is None else rate / 1e6)
        if src == self.coordinator:
            return self._apply_row(h.aux, unpack_vector(msg.payload))
        return []

    def on_timer(self, key: str, now: int) -> list[Action] | None:
        if key == PROBE:
            return [Send(None, self._control(MsgType.PING, ts=now)),
                    SetTimer(PROBE, self.probe_ns)]
        if key == ESTIMATE:
            self.sent_at.append((now, self.seto.sent()))
            return self._update_delays() + [SetTimer(ESTIMATE, self.estimate_ns)]
        return None

    # -- steps 1-2: estimate and report (updateDelays, lines 13-14) --------------------------
    def tdelay(self) -> dict[int, int] | None:
        """This process's one-way delay estimates to every other member, in local ns; None
        until every member has answered `min_samples` probes."""
        if any(len(s) < self.min_samples for s in self.samples.values()):
            return None
        return {m: sum(s) // len(s) for m, s in self.samples.items()}

    def send_rate(self) -> float:
        """Messages this process TO-multicast per second (local time) over the window."""
        (t0, n0), (t1, n1) = self.sent_at[0], self.sent_at[-1]
        return (n1 - n0) * 1e9 / (t1 - t0) if t1 > t0 else 0.0

    def _update_delays(self) -> list[Action]:
        vector = self.tdelay()
        if vector is None:
            return []
        rate = self.send_rate()
        if self.me == self.coordinator:
            return self._gathered(self.me, vector, self.applied_round, rate)
        # The rate rides as one more entry, in thousandths (ENTRY's value scales by 1000).
        entries = {**vector, RATE_ID: round(rate * 1e6)}
        msg = Message(self._header(MsgType.ESTIMATE, aux=self.applied_round),
                      pack_vector(entries))
        return [Send(self.coordinator, msg)]

    # -- steps 3-4: plan and distribute (lines 1-18) -----------------------------------------
    def _gathered(self, src: int, vector: dict[int, int], their_round: int,
                  rate: float | None) -> list[Action]:
        if self.me != self.coordinator:
            return []
        self.estimates[src] = vector
        if rate is not None:
            self.rates[src] = rate
        if len(self.estimates) < len(self.members):
            return []
        if self.round == 0 or self._drift() > self.replan_ns or self._rate_moved():
            return self._replan()
        if their_round != self.round and src != self.me:
            return [self._delay_msg(src)]
        return []

    def _drift(self) -> int:
        return max(abs(v - self.planned[k][j])
                   for k, row in self.estimates.items() for j, v in row.items())

    def _rate_moved(self) -> bool:
        top = max([*self.planned_rates.values(), *self.rates.values(), 1.0])
        return any(abs(r - self.planned_rates.get(m, 0.0)) > self.replan_rate * top
                   for m, r in self.rates.items())

    def _replan(self) -> list[Action]:
        import numpy as np

        from nodes.planner import heuristic_plan, optimal_plan

        ms = self.members
        omega = np.zeros((len(ms), len(ms)))
        for a, k in enumerate(ms):
            for b, j in enumerate(ms):
                if k != j:
                    omega[a, b] = self.estimates[k][j] / 1e6
        # Rate-weighted (003 eq. 3); equal weights until some process has sent anything.
        rates = [self.rates.get(k, 0.0) for k in ms]
        planner = optimal_plan if self.planner_name == "optimal" else heuristic_plan
        plan: Plan = planner(omega, rates if any(rates) else None)
        self.planned_rates = dict(self.rates)
        self.round = self.round % 0xFFFF + 1  # header.aux is 16 bits; 0 means "no plan"
        self.planned = {k: dict(v) for k, v in self.estimates.items()}
        self.rows = {p: {k: round(x * 1e6) for k, x in zip(ms, plan.delays_at(b), strict=True)}
                     for b, p in enumerate(ms)}
        out: list[Action] = [Log("replan", {"round": self.round,
                                            "rates": [round(r, 3) for r in rates]})]
        out += [self._delay_msg(p) for p in ms if p != self.me]
        return out + self._apply_row(self.round, self.rows[self.me])

    def _delay_msg(self, dst: int) -> Send:
        return Send(dst, Message(self._header(MsgType.DELAY, aux=self.round),
                                 pack_vector(self.rows[dst])))

    def _apply_row(self, round_: int, row: dict[int, int]) -> list[Action]:
        """DELAY from the designated process (lines 7-11): from now on the planned delays
        replace SETO's adjusted ones, the sequencer's own delay included."""
        if round_ == self.applied_round or set(row) != set(self.members):
            return []
        self.applied_round = round_
        self.seto.apply_plan(row)
        return [Log("plan", {"round": round_,
                             "delay_us": [round(row[m] / 1000) for m in self.members]})]

    # -- wire helpers -------------------------------------------------------------------------
    def _header(self, mtype: MsgType, ts: int = 0, aux: int = 0) -> Header:
        return Header(mtype, self.proto, sender=self.me, ts=ts, aux=aux)

    def _control(self, mtype: MsgType, ts: int) -> Message:
        return Message(self._header(mtype, ts=ts))
