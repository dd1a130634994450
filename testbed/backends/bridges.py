"""Linux bridges of a run seen by the root namespace: their netfilter and the subnets already
taken, shared by what puts hosts on bridges (mininet, docker, `testbed lab`) so that none
imports another backend."""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path
from typing import Any

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


def used_subnets(docker: Any) -> list[ipaddress.IPv4Network]:
    """/24s taken by Docker networks and by addresses in the root namespace (Mininet's control
    bridges, other runs' bridges)."""
    taken = []
    for net in docker.api.networks():
        for pool in (net.get("IPAM") or {}).get("Config") or []:
            try:
                taken.append(ipaddress.IPv4Network(pool["Subnet"], strict=False))
            except (KeyError, ValueError):
                continue
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            taken.append(ipaddress.IPv4Network(parts[parts.index("inet") + 1], strict=False))
    return taken
