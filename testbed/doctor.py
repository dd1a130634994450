"""`testbed doctor`: what this machine can do, what each capability enables, and the exact
command that fixes what is missing. Kernel features are probed in an anonymous namespace so
the probe never touches the host's own interfaces and never outlives its process."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    enables: str
    fix: str


def _run(argv: list[str], timeout: float = 10) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=timeout).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def probe_qdisc(kind: list[str]) -> bool:
    """Add a qdisc on the loopback of an anonymous network namespace (`unshare --net`). The
    namespace has no name and dies with the probe's process, so a probe killed at any point
    (even by SIGKILL, as a killed `testbed run` is) leaves nothing behind."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("tc"):
        return False
    return _run(["unshare", "--net", "tc", "qdisc", "add", "dev", "lo", "root", *kind], timeout=60)


def checks() -> list[Check]:
    root = os.geteuid() == 0
    java = shutil.which("java") is not None
    return [
        Check("root", root, "mininet/docker backends, real tc, iptables", "run as root (sudo)"),
        Check("java", java, "Spark analysis", "apt-get install -y openjdk-17-jre-headless"),
        Check("iproute2 (ip, tc)", bool(shutil.which("tc") and shutil.which("ip")),
              "namespaces and shaping", "apt-get install -y iproute2"),
        Check("sch_netem", probe_qdisc(["netem", "delay", "1ms"]),
              "the netem shaping applier",
              "kernel lacks sch_netem: the userspace applier is used (auto); real netem runs "
              "under user-mode-linux"),
        Check("HTB", probe_qdisc(["handle", "1:", "htb"]), "QoS reservation (tc htb)",
              "a kernel with sch_htb"),
        Check("iptables", shutil.which("iptables") is not None, "partitions, NFQUEUE shaping",
              "apt-get install -y iptables"),
        Check("tcpdump", shutil.which("tcpdump") is not None, "packet capture",
              "apt-get install -y tcpdump"),
        Check("Mininet (mnexec)", shutil.which("mnexec") is not None, "the mininet backend",
              "apt-get install -y mininet bridge-utils"),
        Check("Open vSwitch", shutil.which("ovs-vsctl") is not None
              and Path("/sys/module/openvswitch").exists(),
              "OVS switches (the mininet backend uses Linux bridges without it)",
              "a kernel with the openvswitch module, then apt-get install -y openvswitch-switch"),
        # Usable when an engine answers, or when root can start one (the docker backend and
        # `testbed image build` start dockerd themselves: testbed/engine.py).
        Check("Docker engine", (root and shutil.which("dockerd") is not None)
              or (_run(["docker", "info"]) if shutil.which("docker") else False),
              "the docker backend (started on demand when root)",
              "apt-get install -y docker.io (testbed starts dockerd itself when root)"),
        Check("user-mode-linux", shutil.which("linux.uml") is not None,
              "real netem proof under UML", "apt-get install -y user-mode-linux"),
    ]
