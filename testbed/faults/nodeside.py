"""Faults applied by the nodes themselves, over their management endpoints: data-plane filters
(partitions), clock changes, path changes of the inprocess shaper, and arbitrary Jolokia
requests. Any backend whose nodes run the management server uses this as its node control and,
when the nodes shape their own traffic (local), as its network control (nodes/faults.py); each
returns what it measured afterwards."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodes.faults import Management, Measured, SetClock, SetPath
from testbed.mgmt import MgmtClient, MgmtError
from testbed.rundir import RunDir


class NodeSideFaults:
    def __init__(self, run: RunDir, hosts: list[str], alive: Callable[[str], bool]):
        self.run = run
        self.hosts = hosts
        self.alive = alive

    def client(self, host: str) -> MgmtClient:
        client: MgmtClient = self.run.mgmt_client(host)
        return client

    def _each_live(self, fn: Callable[[MgmtClient, str], Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for h in self.hosts:
            if not self.alive(h):
                out[h] = "down"
                continue
            try:
                out[h] = fn(self.client(h), h)
            except (MgmtError, LookupError, OSError) as exc:
                out[h] = f"unreachable: {exc}"
        return out

    # -- network control ----------------------------------------------------------------------
    def block(self, cuts: list[tuple[str, str]]) -> Measured:
        to: dict[str, list[str]] = {h: [] for h in self.hosts}
        for src, dst in cuts:
            to[src].append(dst)
        blocked = self._each_live(
            lambda c, h: c.exec("testbed:type=Network", "block", to[h], []))
        return {"blocked_to": blocked}

    def heal(self) -> Measured:
        # The probe: each node's failure detector, fed by data-plane heartbeats, shows
        # which peers it could not hear during the cut (across groups, not within).
        suspected = self._each_live(
            lambda c, h: c.read("testbed:type=FailureDetector", "SuspectedMembers"))
        self._each_live(lambda c, h: c.exec("testbed:type=Network", "heal"))
        return {"suspected_before_heal": suspected}

    def set_path(self, fault: SetPath) -> Measured:
        a, b = fault.between
        for src, dst in ((a, b), (b, a)):
            c = self.client(src)
            if fault.reset:
                c.exec("testbed:type=Paths", "reset", dst)
                continue
            now = c.read("testbed:type=Paths", "Paths").get(dst, {})
            delay = now.get("delay_ms", 0) * 1e6 if fault.delay_ns is None else fault.delay_ns
            jitter = now.get("jitter_ms", 0) * 1e6 if fault.jitter_ns is None else fault.jitter_ns
            loss = now.get("loss_pct", 0) / 100 if fault.loss is None else fault.loss
            c.exec("testbed:type=Paths", "setPath", dst, delay / 1e6, jitter / 1e6, loss * 100)
        return {"paths": {a: self.client(a).read("testbed:type=Paths", "Paths").get(b),
                          b: self.client(b).read("testbed:type=Paths", "Paths").get(a)}}

    # -- node control -------------------------------------------------------------------------
    def set_clock(self, fault: SetClock) -> Measured:
        c = self.client(fault.host)
        if fault.jump_ns is not None:
            c.exec("testbed:type=Clock", "jump", fault.jump_ns / 1e6)
        elif fault.offset_ns is not None:
            c.write("testbed:type=Clock", "OffsetMs", fault.offset_ns / 1e6)
        else:
            c.write("testbed:type=Clock", "DriftPpm", fault.drift_ppm)
        return {"clock": c.read("testbed:type=Clock", ["OffsetMs", "DriftPpm"])}

    def management(self, fault: Management) -> Measured:
        c = self.client(fault.host)
        if fault.write:
            return {"old": {k: c.write(fault.mbean, k, v) for k, v in fault.write.items()}}
        op, *args = fault.exec or ()
        return {"value": c.exec(fault.mbean, op, *args)}
