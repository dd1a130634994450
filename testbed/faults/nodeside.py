"""Faults applied by the nodes themselves, over their management endpoints: data-plane filters
(partitions), clock changes, path changes of the inprocess shaper, and arbitrary Jolokia
requests. Any backend whose nodes run the management server can use these; each returns what
it measured afterwards."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from testbed.faults.schedule import Action
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

    def apply(self, action: Action) -> dict[str, Any]:
        p = action.params
        if action.op == "block":
            to: dict[str, list[str]] = {h: [] for h in self.hosts}
            for src, dst in p["cuts"]:
                to[src].append(dst)
            blocked = self._each_live(
                lambda c, h: c.exec("testbed:type=Network", "block", to[h], []))
            return {"blocked_to": blocked}
        if action.op == "heal":
            # The probe: each node's failure detector, fed by data-plane heartbeats, shows
            # which peers it could not hear during the cut (across groups, not within).
            suspected = self._each_live(
                lambda c, h: c.read("testbed:type=FailureDetector", "SuspectedMembers"))
            self._each_live(lambda c, h: c.exec("testbed:type=Network", "heal"))
            return {"suspected_before_heal": suspected}
        if action.op == "clock":
            c = self.client(p["host"])
            if "jump_ns" in p:
                c.exec("testbed:type=Clock", "jump", p["jump_ns"] / 1e6)
            elif "offset_ns" in p:
                c.write("testbed:type=Clock", "OffsetMs", p["offset_ns"] / 1e6)
            else:
                c.write("testbed:type=Clock", "DriftPpm", p["drift_ppm"])
            return {"clock": c.read("testbed:type=Clock", ["OffsetMs", "DriftPpm"])}
        if action.op == "path":
            a, b = p["between"]
            for src, dst in ((a, b), (b, a)):
                c = self.client(src)
                if p.get("reset"):
                    c.exec("testbed:type=Paths", "reset", dst)
                    continue
                now = c.read("testbed:type=Paths", "Paths").get(dst, {})
                c.exec("testbed:type=Paths", "setPath", dst,
                       p.get("delay_ns", now.get("delay_ms", 0) * 1e6) / 1e6,
                       p.get("jitter_ns", now.get("jitter_ms", 0) * 1e6) / 1e6,
                       p.get("loss", now.get("loss_pct", 0) / 100) * 100)
            return {"paths": {a: self.client(a).read("testbed:type=Paths", "Paths").get(b),
                              b: self.client(b).read("testbed:type=Paths", "Paths").get(a)}}
        if action.op == "mgmt":
            c = self.client(p["host"])
            if p.get("write"):
                return {"old": {k: c.write(p["mbean"], k, v) for k, v in p["write"].items()}}
            op, *args = p["exec"]
            return {"value": c.exec(p["mbean"], op, *args)}
        raise ValueError(f"{action.op} is not a node-side fault")
