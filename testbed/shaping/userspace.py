"""The `userspace` applier, for kernels without sch_netem (docs/platform.md): the HTB tree (rates
and QoS) is real `tc`; delay, jitter and loss come from a delay-line daemon in the host's
namespace (testbed/shaping/userspace_daemon.py) fed by an iptables NFQUEUE rule on the data
interface. Runtime changes go over the daemon's control socket."""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

from testbed.hosts.netns import NetnsHost
from testbed.processes import spawn
from testbed.rundir import RunDir
from testbed.shaping import ShapingError, netem
from testbed.shaping.plan import ClassPlan, HostPlan
from testbed.shaping.userspace_daemon import read_line

QUEUE_NUM = 7
READY_TIMEOUT_S = 10.0


def daemon_config(plan: HostPlan, control: str, seed: int) -> dict[str, Any]:
    return {"queue": QUEUE_NUM, "control": control, "seed": f"{seed}:{plan.host}",
            "classes": {c.dst_ip: lane(c) for c in plan.classes}}


def lane(c: ClassPlan) -> dict[str, Any]:
    """The daemon's lane: the class's path (nodes/linkmodel.py fields), its HTB rate as
    `rate_bps`, netem's own rate as `netem_rate_bps`, and the delay line's limit."""
    return {**c.path.model_fields(), "delay_ns": c.delay_ns, "jitter_ns": c.jitter_ns,
            "distribution": c.distribution, "loss": c.loss, "rate_bps": c.rate_bps,
            "netem_rate_bps": c.path.rate_bps, "limit": c.limit}


def nfqueue_rule(dev: str) -> list[str]:
    return ["OUTPUT", "-o", dev, "-j", "NFQUEUE", "--queue-num", str(QUEUE_NUM)]


def control(path: str, request: dict[str, Any], timeout: float = 2.0) -> dict[str, Any]:
    """One request to a shaping daemon's control socket."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(json.dumps(request).encode() + b"\n")
        data = read_line(s)
    reply: dict[str, Any] = json.loads(data)
    return reply


def control_path(run: RunDir, host: str) -> str:
    path = run.path.resolve() / "shaping" / f"{host}.sock"
    # A Unix socket path must fit in 108 bytes; deep run directories fall back to /tmp.
    return str(path) if len(str(path)) < 100 else f"/tmp/tb-{run.run_id}-{host}.sock"


class UserspaceApplier:
    name = "userspace"

    def __init__(self, run: RunDir, seed: int = 1):
        self.run = run
        self.seed = seed
        self.sockets: dict[str, str] = {}

    def script(self, plan: HostPlan) -> str:
        rule = " ".join(["iptables", "-A", *nfqueue_rule(plan.dev)])
        return "\n".join([netem.script(plan, leaves=False), rule,
                          f"python -m testbed.shaping.userspace_daemon --config "
                          f"shaping/{plan.host}.json"])

    def apply(self, ns: NetnsHost, plan: HostPlan, journal: Any) -> None:
        d = self.run.path / "shaping"
        d.mkdir(exist_ok=True)
        sock = control_path(self.run, plan.host)
        cfg_path = d / f"{plan.host}.json"
        cfg_path.write_text(json.dumps(daemon_config(plan, sock, self.seed), indent=1))
        spawn(journal, self.run.run_id, f"shaper:{plan.host}",
              [*ns.prefix(), sys.executable, "-m", "testbed.shaping.userspace_daemon",
               "--config", str(cfg_path)], d / f"{plan.host}.log", cwd=Path.cwd())
        self._wait_ready(plan.host, sock, d / f"{plan.host}.log")
        self.sockets[plan.host] = sock
        netem.apply_tree(ns, plan, journal, leaves=False)
        # The rule goes in only once the queue is bound: without --queue-bypass a packet queued
        # to nobody is dropped, which is also what a crashed daemon should cause (loud, not
        # silently unshaped).
        rule = nfqueue_rule(plan.dev)
        journal.append("create", kind="iptables", id=f"ipt:{plan.host}:nfqueue", host=plan.host,
                       rule=rule, ns_pid=ns.pid, ns_start=ns.starttime)
        ns.run(["iptables", "-w", "-A", *rule])

    def _wait_ready(self, host: str, sock: str, log: Path) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if control(sock, {"op": "ping"}).get("ok"):
                    return
            except (OSError, ValueError):
                time.sleep(0.05)
        tail = log.read_text()[-500:] if log.exists() else ""
        raise ShapingError(f"{host}: the shaping daemon did not start: {tail.strip()}")

    def change(self, ns: NetnsHost, plan: HostPlan, c: ClassPlan) -> None:
        ns.run(netem.htb_class(plan.dev, "1:1", c.classid, c.rate_bps, verb="change"))
        reply = control(self.sockets[plan.host], {"op": "set", "dst": c.dst_ip, "path": lane(c)})
        if not reply.get("ok"):
            raise ShapingError(f"{plan.host}: shaping daemon refused the change: {reply}")

    def stats(self, host: str) -> dict[str, Any]:
        return control(self.sockets[host], {"op": "stats"})
