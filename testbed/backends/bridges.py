"""Linux bridges of a run seen by the root namespace's netfilter: shared by the backends that
put hosts on bridges (mininet, docker) so that neither imports the other."""

from __future__ import annotations

import subprocess
from pathlib import Path

from testbed.backends.base import BackendError
from testbed.rundir import Journal

BRIDGE_NF = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")


def allow_bridged(journal: Journal, prefix: str, bridges: list[str]) -> None:
    """With br_netfilter loaded (any machine where Docker ran), bridged frames traverse the
    root namespace's FORWARD chain, whose policy Docker sets to DROP (docs/platform.md). Rather than
    flip the global sysctl, accept this run's bridges in a chain of the run's own."""
    try:
        if BRIDGE_NF.read_text().strip() != "1":
            return
    except OSError:
        return
    chain = f"{prefix}-fwd"
    journal.append("create", kind="iptables-chain", id=f"chain:{chain}", chain=chain,
                   hook="FORWARD")
    cmds = [["iptables", "-w", "-N", chain]]
    for br in bridges:
        cmds += [["iptables", "-w", "-A", chain, "-i", br, "-j", "ACCEPT"],
                 ["iptables", "-w", "-A", chain, "-o", br, "-j", "ACCEPT"]]
    cmds.append(["iptables", "-w", "-I", "FORWARD", "-j", chain])
    for cmd in cmds:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BackendError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip()}")
