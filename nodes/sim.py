"""The discrete-event simulator: every node's protocol stack in one process, in virtual time.

It drives the very same `NodeCore` as the asyncio runtime, with datagrams delayed, jittered,
dropped and paced by the same `LinkModel`, every random draw from RNGs seeded by the run seed,
and ties broken by insertion order -- so one seed gives byte-identical delivery logs.

`python -m nodes.sim --config sim.json` where sim.json is
`{"t0_ns": ..., "seed": ..., "nodes": [NodeConfig, ...]}`, optionally with the fault timeline
`"faults": [{"t_ns", "op", "params", "fault"}, ...]` and `"faults_log"` (nodes/faults.py);
prints a JSON line of statistics.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import math
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from math import tau as TWOPI
from pathlib import Path
from typing import Any, Final, cast

if __name__ == "__main__":
    # `python -m nodes.sim` (the sim backend's command): load the compiled hot path before
    # anything imports its modules (nodes/fastpath.py); main() below runs the compiled copy.
    from nodes.fastpath import activate

    activate()

from nodes.config import SIM_EPOCH_NS, NodeConfig, PathConfig  # noqa: E402
from nodes.core import NodeCore, Output  # noqa: E402
from nodes.faults import (  # noqa: E402
    Controls,
    FaultHistory,
    Management,
    Primitive,
    SetClock,
    SetPath,
    apply,
    primitive,
)
from nodes.linkmodel import LinkModel  # noqa: E402
from nodes.quiescence import (  # noqa: E402
    add_counts,
    behind_restarted,
    drain_record,
    owed_restarted,
    undelivered,
    unsent_own,
    unsettled,
)
from nodes.wire import MsgType  # noqa: E402
from nodes.workload import intervals, workload_rng  # noqa: E402

# Final: mypyc compiles these to constants (a plain module global is a dict look-up per use).
ARRIVE: Final = 0
TIMER: Final = 1
BROADCAST: Final = 2
CALL: Final = 3
ALIVE: Final = MsgType.ALIVE  # the failure detector's heartbeats: not the protocol's, not policed
QUIESCE_STEP_NS: Final = 50_000_000  # how often (virtual time) the drain checks for quiescence
BUDGET_MASK: Final = 4095  # the event budget is checked once every BUDGET_MASK + 1 events
# The event queue is, for later events, one plain list per slot of 2**SLOT_BITS ns (~1 ms);
# when the current slot is done the next one is sorted (list.sort compares tuples far faster
# than heapq does) and read in order, merged with a small heap of the events pushed before
# `horizon` (its end) meanwhile. Most events are arrivals tens of ms ahead, so that heap
# stays tiny, while the order -- (t, insertion counter) -- is exactly that of one big heap.
SLOT_BITS: Final = 20


@dataclass(frozen=True)
class Quiesce:
    """Drain past the minimum until quiescent (nodes/quiescence.py), at most to `cap_ns`."""

    correct: list[str]
    workload_end_ns: int
    drain_min_ns: int
    cap_ns: int
    path: Path



@dataclass
class SimStats:
    events: int = 0
    datagrams: int = 0
    lost: int = 0
    wall_s: float = 0.0
    virtual_s: float = 0.0
    per_node: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s else 0.0


class BudgetExceeded(Exception):  # noqa: N818 -- a stop, not a crash of the simulator
    """`Simulator.run` stopped at its budget: more than `max_events` events, or more than
    `max_wall_s` wall seconds. The nodes were stopped at the virtual time reached (their logs
    are complete up to it); `stats` are the simulator's statistics at that point."""

    def __init__(self, reason: str, stats: SimStats, virtual_s: float):
        super().__init__(f"{reason} at virtual time {virtual_s:.3f} s after "
                         f"{stats.events} events")
        self.reason = reason
        self.stats = stats
        self.virtual_s = virtual_s


class Simulator:
    # The budget of one run (0: none). The event budget is deterministic: it is checked every
    # BUDGET_MASK + 1 events of each loop, so one seed stops at the same event every time.
    max_events: int = 0
    max_wall_s: float = 0.0

    def __init__(self, configs: list[NodeConfig], seed: int, t0_ns: int = SIM_EPOCH_NS):
        self.t0 = t0_ns
        self.now = t0_ns
        self.cores = {c.node_id: self._core(c) for c in configs}
        self.configs = {c.node_id: c for c in configs}
        # The current slot, sorted, read from _pos on; and the heap of the events pushed with
        # t < _horizon (the slot's end) since it was sorted.
        self._cur: list[tuple[Any, ...]] = []
        self._pos = 0
        self.queue: list[tuple[Any, ...]] = []
        self._horizon = 0
        self._later: dict[int, list[tuple[Any, ...]]] = {}  # slot -> its events (t >= horizon)
        self._slots: list[int] = []  # heap of the slots in _later
        self._counter = 0
        # Timer generations per node and key: a popped timer whose generation is not the
        # latest was re-armed or replaced since, and is skipped.
        self._timer_gens: dict[int, dict[str, int]] = {c.node_id: {} for c in configs}
        self.links: dict[tuple[int, int], LinkModel] = {}
        for c in configs:
            for dst, path in c.paths.items():
                rng = random.Random(f"{seed}:{c.node_id}:{dst}:link")
                self.links[(c.node_id, dst)] = LinkModel(path, rng)
        self.stats = SimStats()
        self._deadline = 0.0
        self.seed = seed
        # Fault state: a crashed node's events are dropped, a paused node's are held.
        self.epoch = {nid: 0 for nid in self.cores}
        self.down: set[int] = set()
        self.paused: set[int] = set()
        self.held: dict[int, list[tuple[Any, ...]]] = {nid: [] for nid in self.cores}
        self.history: FaultHistory | None = None
        self.by_name = {c.name: c.node_id for c in configs}
        self.others = {n: tuple(d for d in self.cores if d != n) for n in self.cores}
        self._fanout: dict[int, tuple[tuple[int, LinkModel | None], ...]] = {}
        # Per node, per destination: the one-target fan-out of a unicast.
        self._unicast: dict[int, dict[int, tuple[tuple[int, LinkModel | None], ...]]] = {}
        self._refanout()

    def _refanout(self) -> None:
        """Each node's broadcast targets with their links (again after a fault adds a link)."""
        self._fanout = {n: tuple((d, self.links.get((n, d))) for d in others)
                        for n, others in self.others.items()}
        # In place: a running loop holds this dict (a fault may add a link mid-loop).
        self._unicast.clear()
        self._unicast.update({n: {d: ((d, link),) for d, link in fan}
                              for n, fan in self._fanout.items()})

    @staticmethod
    def _core(cfg: NodeConfig) -> NodeCore:
        core = NodeCore(cfg, t0_ns=cfg.start_at_ns)
        core.durable_sends = False
        return core

    # -- scheduling ---------------------------------------------------------------------------
    # Queue entries are plain tuples (t, tie, kind, node, epoch, a, b), dispatched in run():
    # no closure per event, which is most of the simulator's speed.
    def _push(self, t: int, kind: int, nid: int, a: Any = None, b: Any = None) -> None:
        self._counter += 1
        self._put((t, self._counter, kind, nid, self.epoch[nid], a, b))

    def at(self, t: int, fn: Callable[[], None]) -> None:
        self._counter += 1
        self._put((t, self._counter, CALL, -1, 0, fn, None))

    def _put(self, entry: tuple[Any, ...]) -> None:
        t = entry[0]
        if t < self._horizon:
            heapq.heappush(self.queue, entry)
            return
        slot = t >> SLOT_BITS
        events = self._later.get(slot)
        if events is None:
            self._later[slot] = [entry]
            heapq.heappush(self._slots, slot)
        else:
            events.append(entry)

    def run(self, until_ns: int, quiesce: Quiesce | None = None) -> SimStats:
        """Simulate to `until_ns`; with `quiesce`, keep draining past it (in steps of
        QUIESCE_STEP_NS, up to its cap) until every correct host delivered every message a
        correct host sent, and write the outcome to its `path`."""
        start = time.perf_counter()
        for nid, core in self.cores.items():
            self._apply(nid, core.start(self.now))
            cfg = self.configs[nid]
            if cfg.workload.send and cfg.workload.rate > 0:
                gaps = intervals(cfg.workload, workload_rng(cfg.seed, nid))
                core.arrivals = gaps
                self._schedule_broadcast(nid, cfg.start_at_ns, gaps)
                for at, rates, tell in cfg.workload.rate_changes:
                    self.at(cfg.start_at_ns + at, partial(self._rate_change, nid, rates, tell))
        # The loop allocates many short-lived objects that reference counting frees, and makes
        # no cyclic garbage (tests/test_sim_fastpath.py checks it; a restart's old node core
        # is the exception, one per restart): the cyclic collector would only walk the growing
        # live state (send buffers, relay stores) again and again -- 6-7 % of a 100-host run's
        # time under perf even with a young generation of 200,000 -- so it is off meanwhile.
        collecting = gc.isenabled()
        gc.disable()
        self._deadline = start + self.max_wall_s if self.max_wall_s > 0 else 0.0
        over: BudgetExceeded | None = None
        try:
            self._loop(until_ns)
            if quiesce is not None:
                until_ns = self._drain(until_ns, quiesce)
            if self.max_events > 0:  # a run that ended past its budget exceeded it too
                self._over_budget(0, self.now)
        except BudgetExceeded as exc:
            over, until_ns = exc, self.now
        finally:
            if collecting:
                gc.enable()
        self.now = until_ns
        for nid, core in self.cores.items():
            core.stop(self.now)
            self.stats.per_node[self.configs[nid].name] = asdict(core.counters)
        self.stats.wall_s = time.perf_counter() - start
        self.stats.virtual_s = (until_ns - self.t0) / 1e9
        if over is not None:
            raise BudgetExceeded(over.reason, self.stats, self.stats.virtual_s)
        return self.stats

    def _over_budget(self, events: int, t: int) -> None:
        """Every BUDGET_MASK + 1 events of a loop: raise BudgetExceeded when the run is past
        its event or wall-clock budget (`events`: this loop's so far, not yet in stats)."""
        total = self.stats.events + events
        reason = ""
        if self.max_events > 0 and total > self.max_events:
            reason = f"event budget of {self.max_events} events exceeded"
        elif self._deadline > 0 and time.perf_counter() > self._deadline:
            reason = f"wall-clock budget of {self.max_wall_s:g} s exceeded"
        if reason:
            self.now = t
            self.stats.events = total
            raise BudgetExceeded(reason, self.stats, (t - self.t0) / 1e9)

    def _drain(self, t: int, q: Quiesce) -> int:
        ids = [self.by_name[h] for h in q.correct]
        while True:
            progress = {self.configs[n].name: self.cores[n].progress() for n in ids}
            missing = undelivered(progress, q.correct)
            faulty = unsettled(progress, q.correct)
            # A restarted process that stays up: until it has its own messages, the correct
            # hosts may not have them either (agreement and validity judge them).
            restarted = [self.configs[n].name for n in sorted(self.cores)
                         if n not in self.down and self.configs[n].incarnation > 0
                         and self.configs[n].name not in q.correct]
            mine = {h: self.cores[self.by_name[h]].progress() for h in restarted}
            faulty.update(unsent_own(mine, restarted))
            # ... and the correct hosts owe them that incarnation's messages
            add_counts(faulty, owed_restarted(progress | mine, q.correct, restarted))
            # ... and it owes theirs from its join points on
            add_counts(faulty, behind_restarted(progress | mine, q.correct, restarted))
            done = not any(missing.values())
            if (done and not any(faulty.values())) or t >= q.cap_ns:
                break
            t = min(t + QUIESCE_STEP_NS, q.cap_ns)
            self._loop(t)
        q.path.write_text(json.dumps(drain_record(done, t - q.workload_end_ns, q.drain_min_ns,
                                                  q.cap_ns - q.workload_end_ns, q.correct,
                                                  missing, faulty)) + "\n")
        return t

    def _loop(self, until_ns: int) -> None:
        """Pop and dispatch events up to `until_ns`.

        The hot path (arrivals, timers, broadcasts and the datagrams and timers they produce)
        is inlined here with everything it touches in locals: no method call, closure or tuple
        key per event beyond the protocol's own work. The order of heap pushes -- and with it
        every tie-break -- is exactly that of `_apply` and `_schedule_broadcast`, so a seed
        still gives byte-identical logs.
        """
        queue, cores, epochs, configs = self.queue, self.cores, self.epoch, self.configs
        down, paused, timer_gens, fanout = self.down, self.paused, self._timer_gens, self._fanout
        unicast = self._unicast
        links = self.links
        later, slots, put = self._later, self._slots, self._put
        pop, push = heapq.heappop, heapq.heappush
        horizon = self._horizon
        arrive, timer, call, alive = ARRIVE, TIMER, CALL, ALIVE
        mask, budgeted = BUDGET_MASK, bool(self.max_events or self._deadline)
        if budgeted:  # across loops (the drain's are short): the events of the loops before
            self._over_budget(0, self.now)
        events = datagrams = lost = 0
        counter = self._counter
        cur, pos = self._cur, self._pos
        ncur = len(cur)
        while True:
            # The next event: the sorted slot's or the heap's, whichever comes first; one
            # past the limit stays where it is.
            if pos < ncur:
                entry = cur[pos]
                if queue and queue[0] < entry:
                    entry = queue[0]
                    if entry[0] > until_ns:
                        break
                    pop(queue)
                else:
                    if entry[0] > until_ns:
                        break
                    pos += 1
            elif queue:
                entry = queue[0]
                if entry[0] > until_ns:
                    break
                pop(queue)
            else:
                if not slots or slots[0] << SLOT_BITS > until_ns:
                    break
                slot = pop(slots)
                cur = self._cur = later.pop(slot)
                cur.sort()
                pos, ncur = 0, len(cur)
                horizon = self._horizon = (slot + 1) << SLOT_BITS
                continue
            # The fields the loop compares and adds, unboxed once (native ints when compiled:
            # `entry` holds objects, and each generic comparison was a call).
            t: int = entry[0]
            kind: int = entry[2]
            events += 1
            if budgeted and not events & mask:
                self._counter, self._pos = counter, pos
                self._over_budget(events, t)
            nid, epoch, a, b = entry[3], entry[4], entry[5], entry[6]
            if kind == call:
                self.now, self._counter, self._pos = t, counter, pos
                a()
                counter = self._counter
                continue
            # (An empty set's test first: no node is down or paused for most of a run.)
            if (down and nid in down) or (kind != arrive and epoch != epochs[nid]):
                continue  # crashed, or an event of an incarnation that is gone
            if paused and nid in paused:
                self.held[nid].append(entry)
                continue
            core = cores[nid]
            if kind == arrive:
                c = core.counters
                c.datagrams_in += 1
                c.bytes_in += cast(int, b)  # an int, added natively (`b` is Any)
                out = core.deliver(a, t)
            elif kind == timer:
                if timer_gens[nid].get(a) != b:
                    continue  # re-armed or replaced since
                out = core.timer(a, t)
            else:
                out = core.broadcast(t)
                cfg = configs[nid]
                nxt = a + next(b)
                if nxt < cfg.start_at_ns + cfg.duration_ns:
                    counter += 1
                    # `a` is when this message was planned: after a pause (the event held,
                    # then released at the resume) the next planned time may have passed;
                    # it is sent at once then, never in the virtual past
                    put((nxt if nxt > t else t, counter, BROADCAST, nid, epochs[nid], nxt, b))
            # -- _apply(nid, out), inlined --
            timers = out.timers
            if timers:
                gens = timer_gens[nid]
                ep = epochs[nid]
                for key, delay in timers:
                    gen = gens.get(key, 0) + 1
                    gens[key] = gen
                    counter += 1
                    put((t + delay if delay > 0 else t, counter, TIMER, nid, ep, key, gen))
            sends = out.sends
            if not sends:
                continue
            blocked = core.blocked_out
            # Policing by the node's reservation (nodes/reservation.py), in virtual time.
            bucket = core.reservations.charged() if core.reservations.by_key else None
            sent = sent_bytes = 0
            for dst, data, msg in sends:
                size = len(data)
                if dst is None:
                    targets = fanout[nid]
                else:
                    one = unicast[nid].get(dst)
                    targets = ((dst, links.get((nid, dst))),) if one is None else one
                for d, link in targets:
                    if blocked and d in blocked:
                        continue
                    sent += 1
                    sent_bytes += size
                    at = t
                    if bucket is not None and msg.header.type != alive:
                        departs = bucket.depart(t, size)
                        if departs is None:
                            core.dropped(t, "policed", f"{size}-byte datagram to "
                                         f"{core.names[d]}: the reservation's queue is full")
                            continue
                        at = departs
                    if link is None:
                        transit = 0
                    else:
                        plain = link.plain
                        if plain is None:
                            drawn = link.transit(at, size)
                            dup = link.dup_ns
                            if dup is not None:  # netem's duplicate: a second arrival
                                counter += 1
                                put((at + dup, counter, ARRIVE, d, 0, msg, size))
                            if drawn is None:
                                lost += 1
                                continue
                            transit = drawn
                        else:  # LinkModel.transit without loss or bandwidth, inlined
                            transit, jitter, gauss = plain
                            if jitter:
                                transit += _gauss_ns(link.rng, jitter)
                                if transit < 0:
                                    transit = 0
                    counter += 1
                    transit += at
                    # An arrival's epoch is never read (a datagram in flight reaches a
                    # restarted node too): 0, not a look-up per datagram.
                    arrival = (transit, counter, ARRIVE, d, 0, msg, size)
                    if transit < horizon:
                        push(queue, arrival)
                        continue
                    slot = transit >> SLOT_BITS  # self._put(...), inlined
                    later_events = later.get(slot)
                    if later_events is None:
                        later[slot] = [arrival]
                        push(slots, slot)
                    else:
                        later_events.append(arrival)
            c = core.counters
            c.datagrams_out += sent
            c.bytes_out += sent_bytes
            datagrams += sent
        self._counter, self._pos = counter, pos
        if events:
            self.now = t
        stats = self.stats
        stats.events += events
        stats.datagrams += datagrams
        stats.lost += lost

    def _rate_change(self, nid: int, rates: dict[str, float], tell: bool) -> None:
        """A workload schedule entry (an incarnation that restarted since keeps its own)."""
        if nid not in self.down:
            self._apply(nid, self.cores[nid].rate_change(rates, tell, self.now))

    def _schedule_broadcast(self, nid: int, planned: int, gaps: Iterator[int]) -> None:
        cfg = self.configs[nid]
        nxt = planned + next(gaps)
        if nxt < cfg.start_at_ns + cfg.duration_ns:
            self._push(nxt, BROADCAST, nid, nxt, gaps)

    # -- actions ------------------------------------------------------------------------------
    def _apply(self, nid: int, out: Output) -> None:
        """Arm `out`'s timers and send its datagrams (outside the loop: starts, restarts)."""
        now = self.now
        gens = self._timer_gens[nid]
        for key, delay in out.timers:
            gen = gens.get(key, 0) + 1
            gens[key] = gen
            self._push(now + max(0, delay), TIMER, nid, key, gen)
        if not out.sends:
            return
        core = self.cores[nid]
        c = core.counters
        blocked = core.blocked_out
        links = self.links
        bucket = core.reservations.charged() if core.reservations.by_key else None
        for dst, data, msg in out.sends:
            targets = self.others[nid] if dst is None else (dst,)
            size = len(data)
            for d in targets:
                if d in blocked:
                    continue
                c.datagrams_out += 1
                c.bytes_out += size
                self.stats.datagrams += 1
                at = now
                if bucket is not None and msg.header.type != ALIVE:
                    departs = bucket.depart(now, size)
                    if departs is None:
                        core.dropped(now, "policed", f"{size}-byte datagram to "
                                     f"{core.names[d]}: the reservation's queue is full")
                        continue
                    at = departs
                link = links.get((nid, d))
                transit = 0 if link is None else link.transit(at, size)
                if link is not None and link.dup_ns is not None:
                    self._push(at + link.dup_ns, ARRIVE, d, msg, size)
                if transit is None:
                    self.stats.lost += 1
                    continue
                self._push(at + transit, ARRIVE, d, msg, size)

    # -- faults (the timeline from testbed/faults/schedule.py, typed by nodes/faults.py) ------
    def schedule_faults(self, faults: list[dict[str, Any]], history: Path) -> None:
        """`faults`: sim.json entries `{"t_ns", "op", "params", "fault"}`."""
        self.history = FaultHistory(history)
        for f in faults:
            self.at(f["t_ns"], partial(self.apply_fault, primitive(f["op"], f["params"]),
                                       f.get("fault", 0)))

    def apply_fault(self, fault: Primitive, index: int = 0) -> None:
        """The simulator is all three controls: process, network and node."""
        measured = apply(Controls(process=self, network=self, node=self), fault)
        if self.history is not None:
            self.history.append(fault, self.now, measured, index)

    # network control
    def block(self, cuts: list[tuple[str, str]]) -> dict[str, Any]:
        for src, dst in cuts:
            self.cores[self.by_name[src]].blocked_out.add(self.by_name[dst])
        return {"blocked_to": {c.cfg.name: sorted(c.names[d] for d in c.blocked_out)
                               for c in self.cores.values()}}

    def heal(self) -> dict[str, Any]:
        suspected = {c.cfg.name: "down" if n in self.down else sorted(c.names[m]
                                                                     for m in c.fd.suspected)
                     for n, c in self.cores.items()}
        for c in self.cores.values():
            c.blocked_out.clear()
        return {"suspected_before_heal": suspected}

    def set_path(self, fault: SetPath) -> dict[str, Any]:
        a, b = (self.by_name[h] for h in fault.between)
        for src, dst in ((a, b), (b, a)):
            base = self.configs[src].paths.get(dst, PathConfig())
            link = self.links.setdefault(
                (src, dst), LinkModel(base, random.Random(f"{self.seed}:{src}:{dst}:f")))
            self._refanout()
            link.path = base if fault.reset else replace(link.path, **fault.changes())
        return {"paths": {
            self.configs[x].name: {"delay_ms": self.links[(x, y)].path.delay_ns / 1e6,
                                   "jitter_ms": self.links[(x, y)].path.jitter_ns / 1e6,
                                   "loss": self.links[(x, y)].path.loss}
            for x, y in ((a, b), (b, a))}}

    # node control
    def set_clock(self, fault: SetClock) -> dict[str, Any]:
        clock = self.cores[self.by_name[fault.host]].clock
        if fault.jump_ns is not None:
            clock.jump(fault.jump_ns)
        elif fault.offset_ns is not None:
            clock.offset_ns = fault.offset_ns
        else:
            assert fault.drift_ppm is not None
            clock.set_drift(self.now, fault.drift_ppm)
        return {"clock": {"OffsetMs": clock.offset_ns / 1e6, "DriftPpm": clock.drift_ppm}}

    def management(self, fault: Management) -> dict[str, Any]:
        return self._mgmt(self.cores[self.by_name[fault.host]], fault)

    # process control
    def crash(self, host: str) -> dict[str, Any]:
        nid = self.by_name[host]
        self.down.add(nid)
        self.paused.discard(nid)
        self.held[nid].clear()
        self.cores[nid].log.close()
        return {"alive": False}

    def restart(self, host: str) -> dict[str, Any]:
        nid = self.by_name[host]
        if nid not in self.down:
            return {"alive": True, "note": "was not down"}
        self.down.discard(nid)
        self.epoch[nid] += 1
        cfg = replace(self.configs[nid], incarnation=self.configs[nid].incarnation + 1)
        self.configs[nid] = cfg
        fresh = self._core(cfg)
        self.cores[nid] = fresh
        self._apply(nid, fresh.start(self.now))
        if cfg.workload.send and cfg.workload.rate > 0:
            gaps = intervals(cfg.workload, workload_rng(cfg.seed * 1000 + cfg.incarnation, nid))
            fresh.arrivals = gaps
            for at, rates, _ in cfg.workload.rate_changes:  # the app's rate by now
                if cfg.start_at_ns + at <= self.now:
                    gaps.renegotiate(rates)
            self._schedule_broadcast(nid, self.now, gaps)
        return {"alive": True, "incarnation": cfg.incarnation}

    def pause(self, host: str) -> dict[str, Any]:
        self.paused.add(self.by_name[host])
        return {"state": "T"}

    def resume(self, host: str) -> dict[str, Any]:
        nid = self.by_name[host]
        self.paused.discard(nid)
        held, self.held[nid] = self.held[nid], []
        for entry in held:
            self._counter += 1
            self._put((self.now, self._counter, *entry[2:]))
        return {"state": "S", "released": len(held)}

    def _mgmt(self, core: NodeCore, fault: Management) -> dict[str, Any]:
        """Management requests answered in-process by the node's own MBeans."""
        from nodes.management.jolokia import Jolokia
        from nodes.management.node_mbeans import build_node_registry

        nid = core.cfg.node_id
        jolokia = Jolokia(build_node_registry(core, true_now=lambda: self.now,
                                              apply=lambda out: self._apply(nid, out)))
        if fault.write:
            return {"old": {k: jolokia.handle({"type": "write", "mbean": fault.mbean,
                                               "attribute": k, "value": v}).get("value")
                            for k, v in fault.write.items()}}
        op, *args = fault.exec or ()
        reply = jolokia.handle({"type": "exec", "mbean": fault.mbean, "operation": op,
                                "arguments": args})
        return {"value": reply.get("value"), "status": reply.get("status"),
                **({"error": reply["error"]} if "error" in reply else {})}


def _gauss_ns(rng: random.Random, jitter: int) -> int:
    """`round(rng.gauss(0.0, jitter))`: the same draws and arithmetic as
    random.Random.gauss (CPython 3.11-3.13) and round()'s half-to-even, in native floats when
    compiled (`gauss_next` is the generator's own cached second draw)."""
    spare: Any = rng.gauss_next  # type: ignore[attr-defined]
    z: float
    if spare is None:
        x2pi = rng.random() * TWOPI
        g2rad = math.sqrt(-2.0 * math.log(1.0 - rng.random()))
        z = math.cos(x2pi) * g2rad
        rng.gauss_next = math.sin(x2pi) * g2rad  # type: ignore[attr-defined]
    else:
        z = spare
        rng.gauss_next = None  # type: ignore[attr-defined]
    x = z * jitter
    r = math.floor(x)  # round(x), half to even: x - floor(x) is exact
    frac = x - r
    if frac > 0.5 or (frac == 0.5 and r & 1):
        r += 1
    return r


def run_sim_file(path: Path) -> SimStats:
    # No cyclic garbage collection while building the nodes either (see Simulator.run): a
    # hundred hosts' set-up allocates some 200,000 objects, the collector's work for nothing.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _run_sim_file(path)
    finally:
        if collecting:
            gc.enable()


def _run_sim_file(path: Path) -> SimStats:
    spec: dict[str, Any] = json.loads(path.read_text())
    configs = [NodeConfig.from_dict(d) for d in spec["nodes"]]
    sim = Simulator(configs, seed=spec["seed"], t0_ns=spec.get("t0_ns", SIM_EPOCH_NS))
    # The runner's wall limit (testbed/backends/sim.py): past it the run stops at one virtual
    # instant (BudgetExceeded), every node's log complete up to it.
    sim.max_wall_s = float(spec.get("max_wall_s", 0.0))
    if spec.get("faults"):
        sim.schedule_faults(spec["faults"], Path(spec["faults_log"]))
    end = max(c.start_at_ns + c.duration_ns + c.drain_ns for c in configs)
    quiesce = None
    if spec.get("drain_log"):
        workload_end = max(c.start_at_ns + c.duration_ns for c in configs)
        quiesce = Quiesce(spec.get("correct", [c.name for c in configs]), workload_end,
                          end - workload_end, max(end, max(c.end_ns for c in configs)),
                          Path(spec["drain_log"]))
    return sim.run(end, quiesce)


def main(argv: list[str] | None = None) -> int:
    # The module docstring by name: a compiled module's `__doc__` global reads as None.
    doc = sys.modules[__name__].__doc__
    parser = argparse.ArgumentParser(prog="python -m nodes.sim", description=doc)
    parser.add_argument("--config", type=Path, required=True)
    args = parser.parse_args(argv)
    cut: dict[str, str] = {}
    try:
        stats = run_sim_file(args.config)
    except BudgetExceeded as exc:  # stopped at its wall limit: the statistics line says so
        stats, cut = exc.stats, {"cut_short": str(exc)}
    from nodes.fastpath import active

    print(json.dumps({"compiled": active(), "events": stats.events,
                      "events_per_s": round(stats.events_per_s),
                      "datagrams": stats.datagrams, "lost": stats.lost,
                      "wall_s": round(stats.wall_s, 3), "virtual_s": stats.virtual_s, **cut}))
    return 0


if __name__ == "__main__":
    # This file runs as `__main__`; the simulator proper is the `nodes.sim` module that
    # activate() loaded (compiled), or, on the pure path, this source imported as `nodes.sim`.
    import importlib

    sys.exit(importlib.import_module("nodes.sim").main())
