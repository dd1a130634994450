"""What backends with real interfaces share (mininet, docker): each host is a network
namespace whose egress an applier shapes from the host's plan; link faults change one class of
that plan while the run goes on, and partitions are iptables rules in the hosts' namespaces
(the kernel drops the datagrams; the nodes know nothing of it). `ShapedHosts` is these
backends' network control (nodes/faults.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from typing import Any

from nodes.faults import Measured, SetPath
from testbed.backends.base import Backend, HostAddress
from testbed.faults.nodeside import NodeSideFaults
from testbed.hosts.netns import NetnsHost
from testbed.shaping.plan import HostPlan, change_link


class ShapedHosts(Backend):
    applier: Any
    ns: Mapping[str, NetnsHost]
    plans: dict[str, HostPlan]
    addresses: dict[str, HostAddress]
    node_side: NodeSideFaults

    def exec(self, host: str, argv: list[str]) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([*self.ns[host].command_prefix(), *argv], capture_output=True,
                              timeout=60)

    # -- network control ----------------------------------------------------------------------
    def block(self, cuts: list[tuple[str, str]]) -> Measured:
        """One journaled DROP rule per cut (src, dst) in src's OUTPUT chain, tagged with the run
        id."""
        tag = ["-m", "comment", "--comment", f"tb-{self.run.run_id}"]
        journal = self.run.journal
        rules: dict[str, int] = {}
        for src, dst in cuts:
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

    def heal(self) -> Measured:
        """The probe (what each node's failure detector suspects, through the data plane), then
        every cut rule of the run is removed."""
        measured = self.node_side.heal()  # reads the suspicions, clears node-side filters
        journal = self.run.journal
        for entry in journal.live():
            if entry.get("kind") == "iptables" and entry["id"].startswith("cut:"):
                src = entry["id"].split(":")[1]
                self.ns[src].run(["iptables", "-w", "-D", *entry["rule"]], check=False)
                journal.append("remove", id=entry["id"])
        return measured

    def set_path(self, fault: SetPath) -> Measured:
        """A link fault: each end's shaper changes its class for the other end (or, with
        `reset`, goes back to the planned path)."""
        return change_link(self.plans, self.paths, fault.between, fault.changes(), fault.reset,
                           lambda src, plan, c: self.applier.change(self.ns[src], plan, c))
