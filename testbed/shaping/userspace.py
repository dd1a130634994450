"""The `userspace` applier, for kernels without sch_netem (docs/platform.md): the HTB tree (rates
and QoS) is real `tc`; delay, jitter and loss come from a delay-line daemon in the host's
namespace (testbed/shaping/userspace_daemon.py) fed by an iptables NFQUEUE rule on the data
interface. Runtime changes go over the daemon's control socket.

The tree is the host's part only: the HTB root, class 1:1 at the host's rate (its QoS
capacity) and the default class 1:2 under it, three `tc` commands a host. Everything per
destination -- delay, jitter, loss, queue limit and the path's rate (the class's `rate_bps`,
serialised before the delay) -- is the daemon's lane for that destination address, a
dictionary entry, exact per pair. A class and a u32 filter per destination as well (the netem
applier's tree, which needs them for its netem leaves) would shape the lane's already paced
output a second time at the same rate: at 100 hosts that was 9,900 classes and 9,900 linear
filters through the kernel's rtnl lock at bring-up and up to 99 filter matches a packet."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from testbed.hosts.netns import NetnsHost
from testbed.processes import spawn, start_time
from testbed.rundir import RUN_ENV, RunDir
from testbed.shaping import ShapingError, netem
from testbed.shaping.plan import ClassPlan, HostPlan
from testbed.shaping.userspace_daemon import read_line

QUEUE_NUM = 7
READY_TIMEOUT_S = 10.0


def daemon_config(plan: HostPlan, control: str, seed: int, spin: bool = True) -> dict[str, Any]:
    return {"queue": QUEUE_NUM, "control": control, "seed": f"{seed}:{plan.host}",
            "classes": {c.dst_ip: lane(c) for c in plan.classes},
            **({} if spin else {"spin_ns": 0})}


def spins(daemons: int) -> bool:
    """Whether the daemons spin before their deadlines: only while each can have a core
    (testbed/shaping/userspace_daemon.py)."""
    return daemons <= (os.cpu_count() or 1)


def lane(c: ClassPlan) -> dict[str, Any]:
    """The daemon's lane: the class's path (nodes/linkmodel.py fields), its HTB rate as
    `rate_bps`, netem's own rate as `netem_rate_bps`, and the delay line's limit."""
    return {**c.path.model_fields(), "delay_ns": c.delay_ns, "jitter_ns": c.jitter_ns,
            "distribution": c.distribution, "loss": c.loss, "rate_bps": c.rate_bps,
            "netem_rate_bps": c.path.rate_bps, "limit": c.limit}


def tree_commands(plan: HostPlan) -> list[list[str]]:
    """The host's HTB tree: root, the host's rate, the default class (module docstring)."""
    return netem.root_commands(plan)


def tree_batch(plan: HostPlan) -> str:
    return "\n".join(" ".join(cmd[1:]) for cmd in tree_commands(plan)) + "\n"


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
        self.launched: dict[str, str] = {}  # host -> control socket of a launched daemon
        # launchers whose daemons are not journaled yet: (process, argv, host -> socket)
        self.launching: list[tuple[subprocess.Popen[bytes], list[str], dict[str, str]]] = []

    def script(self, plan: HostPlan) -> str:
        rule = " ".join(["iptables", "-A", *nfqueue_rule(plan.dev)])
        return "\n".join([f"# {plan.host}: {len(plan.classes)} destination lane(s) in the delay "
                          f"line on {plan.dev}", *[f"# warning: {w}" for w in plan.warnings],
                          *[" ".join(cmd) for cmd in tree_commands(plan)], rule,
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
        journal.append_many([netem.qdisc_record(ns, plan)])
        ns.run(["tc", "-batch", "-"], input=tree_batch(plan))
        # The rule goes in only once the queue is bound: without --queue-bypass a packet queued
        # to nobody is dropped, which is also what a crashed daemon should cause (loud, not
        # silently unshaped).
        rule = nfqueue_rule(plan.dev)
        journal.append("create", kind="iptables", id=f"ipt:{plan.host}:nfqueue", host=plan.host,
                       rule=rule, ns_pid=ns.pid, ns_start=ns.starttime)
        ns.run(["iptables", "-w", "-A", *rule])

    def launch(self, hosts: list[tuple[NetnsHost, HostPlan]], journal: Any) -> None:
        """Start the hosts' daemons, forked from one launcher (`--launch`: one Python start-up
        instead of one a host), without waiting for them: a daemon needs only its namespace,
        so a backend may call this as soon as the namespaces exist and build links while the
        daemons start. `apply_all` waits for them."""
        if not hosts:
            return
        d = self.run.path / "shaping"
        d.mkdir(exist_ok=True)
        spec, socks = [], {}
        spin = spins(len(hosts) + len(self.launched))
        for ns, plan in hosts:
            sock = socks[plan.host] = control_path(self.run, plan.host)
            cfg_path = d / f"{plan.host}.json"
            cfg_path.write_text(json.dumps(daemon_config(plan, sock, self.seed, spin), indent=1))
            spec.append({"host": plan.host, "pid": ns.pid, "starttime": ns.starttime,
                         "config": str(cfg_path.resolve()),
                         "log": str((d / f"{plan.host}.log").resolve())})
        spec_path = d / "launch.json"
        spec_path.write_text(json.dumps(spec, indent=1))
        argv = [sys.executable, "-m", "testbed.shaping.userspace_daemon", "--launch",
                str(spec_path.resolve())]
        with (d / "launch.log").open("ab") as err:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err,
                                    stdin=subprocess.DEVNULL, cwd=Path.cwd(),
                                    env=dict(os.environ, **{RUN_ENV: self.run.run_id}),
                                    start_new_session=True)
        journal.append("create", kind="process", id="shaper-launcher", pid=proc.pid,
                       starttime=start_time(proc.pid), argv=argv)
        self.launching.append((proc, argv, socks))

    def _collect(self, journal: Any) -> None:
        """Journal the daemons the launchers forked (until then their run id names them)."""
        d = self.run.path / "shaping"
        while self.launching:
            proc, argv, socks = self.launching.pop(0)
            assert proc.stdout is not None
            forked = [line.split() for line in proc.stdout.read().decode().splitlines()]
            proc.wait()
            journal.append_many([{"op": "create", "kind": "process", "id": f"shaper:{host}",
                                  "pid": int(pid), "starttime": start_time(int(pid)),
                                  "argv": [*argv[:-2], "--config", f"shaping/{host}.json"]}
                                 for pid, host in forked])
            if len(forked) != len(socks):
                raise ShapingError(f"the shaping launcher forked {len(forked)} of {len(socks)}"
                                   f" daemons: {(d / 'launch.log').read_text()[-300:].strip()}")
            self.launched.update(socks)

    def apply_all(self, hosts: list[tuple[NetnsHost, HostPlan]], journal: Any) -> None:
        """Every host at once: the daemons (`launch`, unless already launched) waited for
        together, then each host's HTB tree and NFQUEUE rule in one shell a host, side by
        side, their journal entries in one batch before any of them is made."""
        if not hosts:
            return
        d = self.run.path / "shaping"
        pending = {h for _, _, socks in self.launching for h in socks}
        self.launch([(ns, plan) for ns, plan in hosts
                     if plan.host not in self.launched and plan.host not in pending], journal)
        self._collect(journal)
        socks = {plan.host: self.launched[plan.host] for _, plan in hosts}
        self._wait_all_ready(socks, d, timeout_s=READY_TIMEOUT_S + 0.1 * len(hosts))
        self.sockets.update(socks)
        files = {}
        for _, plan in hosts:
            files[plan.host] = (d / f"{plan.host}.tc").resolve()
            files[plan.host].write_text(tree_batch(plan))
        records = []
        for ns, plan in hosts:
            records.append(netem.qdisc_record(ns, plan))
            records.append({"op": "create", "kind": "iptables", "id": f"ipt:{plan.host}:nfqueue",
                            "host": plan.host, "rule": nfqueue_rule(plan.dev), "ns_pid": ns.pid,
                            "ns_start": ns.starttime})
        journal.append_many(records)
        # As in apply(): the NFQUEUE rule only once the tree (and the daemon) is there.
        netem.run_side_by_side(
            [(ns, f"tc -batch {files[plan.host]} && iptables -w -A "
                  f"{' '.join(nfqueue_rule(plan.dev))}") for ns, plan in hosts],
            "the HTB tree and NFQUEUE rule")

    def _wait_all_ready(self, socks: dict[str, str], d: Path, timeout_s: float) -> None:
        pending = dict(socks)
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for host, sock in list(pending.items()):
                try:
                    if control(sock, {"op": "ping"}).get("ok"):
                        del pending[host]
                except (OSError, ValueError):
                    pass
            if pending:
                time.sleep(0.02)
        if pending:
            host = sorted(pending)[0]
            log = d / f"{host}.log"
            tail = log.read_text()[-500:] if log.exists() else ""
            raise ShapingError(f"{host}: the shaping daemon did not start ({len(pending)} of "
                               f"{len(socks)} did not): {tail.strip()}")

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
        """The destination's lane, rate included; the tree is per host and does not change."""
        reply = control(self.sockets[plan.host], {"op": "set", "dst": c.dst_ip, "path": lane(c)})
        if not reply.get("ok"):
            raise ShapingError(f"{plan.host}: shaping daemon refused the change: {reply}")

    def stats(self, host: str) -> dict[str, Any]:
        return control(self.sockets[host], {"op": "stats"})
