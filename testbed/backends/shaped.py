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
from testbed.hosts.partitions import Partitions
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
    def _partitions(self) -> Partitions:
        return Partitions(self.run.run_id, lambda h: self.ns[h],
                          lambda h: self.addresses[h].data)

    def block(self, cuts: list[tuple[str, str]]) -> Measured:
        """One journaled DROP rule per cut (src, dst) in src's OUTPUT chain, tagged with the run
        id (testbed/hosts/partitions.py): every rule journaled in one write, then the hosts'
        rules inserted side by side."""
        partitions = self._partitions()
        self.run.journal.append_many([
            {"op": "create", "kind": "iptables", "id": f"cut:{src}:{dst}",
             "rule": partitions.rule(dst), "ns_pid": self.ns[src].pid,
             "ns_start": self.ns[src].starttime} for src, dst in cuts])
        return partitions.block(cuts)

    def heal(self) -> Measured:
        """The probe (what each node's failure detector suspects, through the data plane), then
        every cut rule of the run is removed (the journal's: also those another process,
        `testbed fault`, made), the hosts side by side, and marked removed in one write."""
        measured = self.node_side.heal()  # reads the suspicions, clears node-side filters
        journal = self.run.journal
        cut = [e for e in journal.live()
               if e.get("kind") == "iptables" and e["id"].startswith("cut:")]
        self._partitions().remove_all((e["id"].split(":")[1], e["rule"]) for e in cut)
        journal.append_many([{"op": "remove", "id": e["id"]} for e in cut])
        return measured

    def set_path(self, fault: SetPath) -> Measured:
        """A link fault: each end's shaper changes its class for the other end (or, with
        `reset`, goes back to the planned path)."""
        return change_link(self.plans, self.paths, fault.between, fault.changes(), fault.reset,
                           lambda src, plan, c: self.applier.change(self.ns[src], plan, c))
