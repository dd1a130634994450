"""What backends with real interfaces share (mininet, docker): each host is a network
namespace whose egress an applier shapes from the host's plan; link faults change one class of
that plan while the run goes on, and partitions are iptables rules in the hosts' namespaces
(the kernel drops the datagrams; the nodes know nothing of it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from testbed.backends.base import Backend, HostAddress
from testbed.faults.nodeside import NodeSideFaults
from testbed.faults.schedule import Action
from testbed.shaping.hostns import HostNs
from testbed.shaping.plan import HostPlan, with_path
from testbed.spec.topology import Path as PathSpec


class ShapedHosts(Backend):
    applier: Any
    ns: Mapping[str, HostNs]
    plans: dict[str, HostPlan]
    addresses: dict[str, HostAddress]

    def partition_fault(self, action: Action, node_side: NodeSideFaults) -> dict[str, Any]:
        """`block`: one journaled DROP rule per cut (src, dst) in src's OUTPUT chain, tagged with
        the run id; `heal`: the probe (what each node's failure detector suspects, through the
        data plane), then every rule of the run is removed."""
        tag = ["-m", "comment", "--comment", f"tb-{self.run.run_id}"]
        journal = self.run.journal
        if action.op == "block":
            rules: dict[str, int] = {}
            for src, dst in action.params["cuts"]:
                ns = self.ns[src]
                rule = ["OUTPUT", "-d", self.addresses[dst].data, "-j", "DROP", *tag]
                rid = f"cut:{src}:{dst}"
                journal.append("create", kind="iptables", id=rid, rule=rule, ns_pid=ns.pid,
                               ns_start=ns.starttime)
                # First in OUTPUT: ahead of the userspace shaper's NFQUEUE rule, whose daemon
                # re-sends through a packet socket that iptables never sees.
                ns.run(["iptables", "-w", "-I", *rule[:1], "1", *rule[1:]])
                rules[src] = rules.get(src, 0) + 1
            return {"drop_rules": rules}
        measured = node_side.apply(action)  # reads the suspicions, clears node-side filters
        for entry in journal.live():
            if entry.get("kind") == "iptables" and entry["id"].startswith("cut:"):
                src = entry["id"].split(":")[1]
                self.ns[src].run(["iptables", "-w", "-D", *entry["rule"]], check=False)
                journal.append("remove", id=entry["id"])
        return measured

    def set_path(self, src: str, dst: str, path: PathSpec) -> None:
        """Change one one-way path while the run goes on (tc change / daemon control)."""
        plan = with_path(self.plans[src], dst, path)
        self.plans[src] = plan
        self.applier.change(self.ns[src], plan, plan.class_for(dst))

    def path_fault(self, p: dict[str, Any]) -> dict[str, Any]:
        """A link fault: each end's shaper changes its class for the other end (or, with
        `reset`, goes back to the planned path)."""
        a, b = p["between"]
        out = {}
        for src, dst in ((a, b), (b, a)):
            base = self.paths.get(src, dst)
            path = base if p.get("reset") else replace(
                base, **{k: p[k] for k in ("delay_ns", "jitter_ns", "loss") if k in p})
            self.set_path(src, dst, path)
            c = self.plans[src].class_for(dst)
            out[src] = {"delay_ms": c.delay_ns / 1e6, "jitter_ms": c.jitter_ns / 1e6,
                        "loss": c.loss}
        return {"paths": out}
