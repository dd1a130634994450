"""The `local` backend: one OS process per host, no root.

Data sockets sit on distinct loopback addresses (127.0.0.0/8 is all loopback on Linux) picked
from the run id, so concurrent runs do not collide; path delay, jitter, loss and bandwidth are
applied by each node's transport per destination (the `inprocess` applier). Control (management)
stays on 127.0.0.1.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from nodes.config import NodeConfig
from testbed.backends.base import Backend, HostAddress
from testbed.faults.nodeside import NodeSideFaults
from testbed.faults.schedule import Action
from testbed.processes import spawn, stop_pid
from testbed.rundir import RunDir
from testbed.spec.topology import PathMatrix, TopologySpec

DATA_PORT = 7000


class LocalBackend(Backend):
    name = "local"

    def __init__(self, run: RunDir, topology: TopologySpec, paths: PathMatrix):
        super().__init__(run, topology, paths)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.configs: dict[str, NodeConfig] = {}
        self.crashed: set[str] = set()
        self.node_side = NodeSideFaults(run, paths.hosts, lambda h: h not in self.crashed)

    def up(self) -> dict[str, HostAddress]:
        n = int(self.run.run_id, 16)
        a, b = 100 + n % 100, (n // 100) % 250
        return {h: HostAddress(f"127.{a}.{b}.{i + 1}", DATA_PORT, "127.0.0.1")
                for i, h in enumerate(self.paths.hosts)}

    def deploy(self, configs: list[NodeConfig]) -> None:
        for cfg in configs:
            self._start(cfg)

    def _start(self, cfg: NodeConfig) -> None:
        d = self.run.node_dir(cfg.name)
        cfg.write(d / "node.json")
        (d / "control.json").unlink(missing_ok=True)
        self.configs[cfg.name] = cfg
        self.procs[cfg.name] = spawn(
            self.run.journal, self.run.run_id, f"node:{cfg.name}",
            [sys.executable, "-m", "nodes", "--config", str(d / "node.json")], d / "node.log")
        if cfg.control_port is not None:
            _wait_for(d / "control.json", timeout_s=10)

    def fault(self, action: Action) -> dict[str, Any]:
        if action.op not in ("crash", "restart", "pause", "resume"):
            return self.node_side.apply(action)
        host = action.params["host"]
        proc = self.procs.get(host)
        if action.op == "crash":
            if proc is None or proc.poll() is not None:
                return {"alive": False, "note": "already down"}
            proc.kill()
            proc.wait()
            self.crashed.add(host)
            self.run.journal.append("remove", id=f"node:{host}")
            return {"alive": proc.poll() is None, "exit": proc.returncode}
        if action.op == "restart":
            if proc is not None and proc.poll() is None:
                return {"alive": True, "note": "was not down"}
            cfg = self.configs[host]
            self._start(replace(cfg, incarnation=cfg.incarnation + 1))
            self.crashed.discard(host)
            new = self.procs[host]
            return {"alive": new.poll() is None, "pid": new.pid,
                    "incarnation": cfg.incarnation + 1}
        if proc is None or proc.poll() is not None:
            return {"note": "host is down"}
        proc.send_signal(signal.SIGSTOP if action.op == "pause" else signal.SIGCONT)
        return {"state": _state(proc.pid)}

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        for name, proc in list(self.procs.items()):
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                return False
            self.run.journal.append("remove", id=f"node:{name}")
            del self.procs[name]
        return True

    def failed(self) -> dict[str, int]:
        """Nodes that exited with an error, by exit code."""
        return {n: p.returncode for n, p in self.procs.items()
                if p.poll() is not None and p.returncode != 0}

    def down(self) -> None:
        for name, proc in list(self.procs.items()):
            if proc.poll() is None:
                stop_pid(proc.pid, None)
            proc.wait()
            self.run.journal.append("remove", id=f"node:{name}")
            del self.procs[name]


def _wait_for(path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
