"""The discrete-event simulator: every node's protocol stack in one process, in virtual time.

It drives the very same `NodeCore` as the asyncio runtime, with datagrams delayed, jittered,
dropped and paced by the same `LinkModel`, every random draw from RNGs seeded by the run seed,
and ties broken by insertion order -- so one seed gives byte-identical delivery logs.

`python -m nodes.sim --config sim.json` where sim.json is
`{"t0_ns": ..., "seed": ..., "nodes": [NodeConfig, ...]}`; prints a JSON line of statistics.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodes.config import NodeConfig
from nodes.core import NodeCore, Output
from nodes.linkmodel import LinkModel
from nodes.wire import Message
from nodes.workload import intervals, workload_rng

# Virtual time starts at a fixed instant (2026-01-01T00:00:00Z) so logs look like real ones
# and are reproducible.
SIM_EPOCH_NS = 1_767_225_600_000_000_000


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


class Simulator:
    def __init__(self, configs: list[NodeConfig], seed: int, t0_ns: int = SIM_EPOCH_NS):
        self.t0 = t0_ns
        self.now = t0_ns
        self.cores = {c.node_id: NodeCore(c, t0_ns=c.start_at_ns) for c in configs}
        self.configs = {c.node_id: c for c in configs}
        self.queue: list[tuple[int, int, Callable[[], None]]] = []
        self._counter = 0
        self._timer_gen: dict[tuple[int, str], int] = {}
        self.links: dict[tuple[int, int], LinkModel] = {}
        for c in configs:
            for dst, path in c.paths.items():
                rng = random.Random(f"{seed}:{c.node_id}:{dst}:link")
                self.links[(c.node_id, dst)] = LinkModel(path, rng)
        self.stats = SimStats()

    # -- scheduling ---------------------------------------------------------------------------
    def at(self, t: int, fn: Callable[[], None]) -> None:
        self._counter += 1
        heapq.heappush(self.queue, (t, self._counter, fn))

    def run(self, until_ns: int) -> SimStats:
        start = time.perf_counter()
        for nid, core in self.cores.items():
            self._apply(nid, core.start(self.now))
            cfg = self.configs[nid]
            if cfg.workload.send and cfg.workload.rate > 0:
                gaps = intervals(cfg.workload, workload_rng(cfg.seed, nid))
                self._schedule_broadcast(nid, cfg.start_at_ns, gaps)
        while self.queue and self.queue[0][0] <= until_ns:
            t, _, fn = heapq.heappop(self.queue)
            self.now = t
            self.stats.events += 1
            fn()
        self.now = until_ns
        for nid, core in self.cores.items():
            core.stop(self.now)
            self.stats.per_node[self.configs[nid].name] = vars(core.counters).copy()
        self.stats.wall_s = time.perf_counter() - start
        self.stats.virtual_s = (until_ns - self.t0) / 1e9
        return self.stats

    def _schedule_broadcast(self, nid: int, planned: int, gaps: Iterator[int]) -> None:
        cfg = self.configs[nid]
        nxt = planned + next(gaps)
        if nxt >= cfg.start_at_ns + cfg.duration_ns:
            return

        def fire() -> None:
            self._apply(nid, self.cores[nid].broadcast(self.now))
            self._schedule_broadcast(nid, nxt, gaps)

        self.at(nxt, fire)

    # -- actions ------------------------------------------------------------------------------
    def _apply(self, nid: int, out: Output) -> None:
        for key, delay in out.timers:
            gen = self._timer_gen.get((nid, key), 0) + 1
            self._timer_gen[(nid, key)] = gen
            self.at(self.now + max(0, delay), self._timer(nid, key, gen))
        blocked = self.cores[nid].blocked_out
        for dst, data, msg in out.sends:
            targets = [d for d in self.cores if d != nid] if dst is None else [dst]
            for d in targets:
                if d not in blocked:
                    self._transmit(nid, d, data, msg)

    def _timer(self, nid: int, key: str, gen: int) -> Callable[[], None]:
        def fire() -> None:
            if self._timer_gen.get((nid, key)) == gen:
                self._apply(nid, self.cores[nid].timer(key, self.now))

        return fire

    def _transmit(self, src: int, dst: int, data: bytes, msg: Message) -> None:
        core = self.cores[src]
        core.counters.datagrams_out += 1
        core.counters.bytes_out += len(data)
        self.stats.datagrams += 1
        link = self.links.get((src, dst))
        delay = 0 if link is None else link.transit(self.now, len(data))
        if delay is None:
            self.stats.lost += 1
            return

        def arrive() -> None:
            core = self.cores[dst]
            core.counters.datagrams_in += 1
            core.counters.bytes_in += len(data)
            self._apply(dst, core.deliver(msg, self.now))

        self.at(self.now + delay, arrive)


def run_sim_file(path: Path) -> SimStats:
    spec: dict[str, Any] = json.loads(path.read_text())
    configs = [NodeConfig.from_dict(d) for d in spec["nodes"]]
    sim = Simulator(configs, seed=spec["seed"], t0_ns=spec.get("t0_ns", SIM_EPOCH_NS))
    end = max(c.start_at_ns + c.duration_ns + c.drain_ns for c in configs)
    return sim.run(end)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nodes.sim", description=__doc__)
    parser.add_argument("--config", type=Path, required=True)
    args = parser.parse_args(argv)
    stats = run_sim_file(args.config)
    print(json.dumps({"events": stats.events, "events_per_s": round(stats.events_per_s),
                      "datagrams": stats.datagrams, "lost": stats.lost,
                      "wall_s": round(stats.wall_s, 3), "virtual_s": stats.virtual_s}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
