"""Node programs as journaled OS processes, for backends whose hosts are processes (local) or
processes inside namespaces (mininet): start, wait, and the process faults -- crash (SIGKILL),
restart (a new incarnation joins), pause/resume (SIGSTOP/SIGCONT)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from nodes.config import NodeConfig
from testbed.processes import is_alive, spawn, stop_pid
from testbed.rundir import RunDir

Prefix = Callable[[str], list[str]]  # host -> argv prefix that runs a command "on" it


class NodeProcesses:
    def __init__(self, run: RunDir, prefix: Prefix | None = None):
        self.run = run
        self.prefix = prefix or (lambda host: [])
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.configs: dict[str, NodeConfig] = {}
        self.crashed: set[str] = set()
        self.adopted: dict[str, tuple[int, int | None]] = {}  # host -> (pid, start time)

    @classmethod
    def attach(cls, run: RunDir, prefix: Prefix | None = None) -> NodeProcesses:
        """The nodes of a run started by another orchestrator process (`testbed up`), found
        through the journal; faults then act on them by pid."""
        nodes = cls(run, prefix)
        for cfg_path in sorted((run.path / "nodes").glob("*/node.json")):
            nodes.configs[cfg_path.parent.name] = NodeConfig.read(cfg_path)
        for entry in run.journal.live():
            if entry.get("kind") == "process" and entry["id"].startswith("node:"):
                host = entry["id"].removeprefix("node:")
                nodes.adopted[host] = (entry["pid"], entry.get("starttime"))
        return nodes

    def start(self, cfg: NodeConfig) -> None:
        d = self.run.node_dir(cfg.name)
        cfg.write(d / "node.json")
        (d / "control.json").unlink(missing_ok=True)
        self.configs[cfg.name] = cfg
        self.procs[cfg.name] = spawn(
            self.run.journal, self.run.run_id, f"node:{cfg.name}",
            [*self.prefix(cfg.name), sys.executable, "-m", "nodes", "--config",
             str(d / "node.json")], d / "node.log", cwd=Path.cwd())
        if cfg.control_port is not None:
            _wait_for(d / "control.json", timeout_s=10)

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

    def alive(self, host: str) -> bool:
        if host in self.adopted and host not in self.procs:
            return is_alive(*self.adopted[host])
        return host not in self.crashed

    def fault(self, op: str, host: str) -> dict[str, Any]:
        if host in self.adopted and host not in self.procs:
            return self._fault_by_pid(op, host)
        proc = self.procs.get(host)
        if op == "crash":
            if proc is None or proc.poll() is not None:
                return {"alive": False, "note": "already down"}
            proc.kill()
            proc.wait()
            self.crashed.add(host)
            self.run.journal.append("remove", id=f"node:{host}")
            return {"alive": proc.poll() is None, "exit": proc.returncode}
        if op == "restart":
            if proc is not None and proc.poll() is None:
                return {"alive": True, "note": "was not down"}
            cfg = self.configs[host]
            self.start(replace(cfg, incarnation=cfg.incarnation + 1))
            self.crashed.discard(host)
            new = self.procs[host]
            return {"alive": new.poll() is None, "pid": new.pid,
                    "incarnation": cfg.incarnation + 1}
        if proc is None or proc.poll() is not None:
            return {"note": "host is down"}
        proc.send_signal(signal.SIGSTOP if op == "pause" else signal.SIGCONT)
        return {"state": _state(proc.pid)}

    def _fault_by_pid(self, op: str, host: str) -> dict[str, Any]:
        pid, started = self.adopted[host]
        if op == "restart":
            if is_alive(pid, started):
                return {"alive": True, "note": "was not down"}
            cfg = self.configs[host]
            self.start(replace(cfg, incarnation=cfg.incarnation + 1))
            new = self.procs[host]
            return {"alive": new.poll() is None, "pid": new.pid,
                    "incarnation": cfg.incarnation + 1}
        if not is_alive(pid, started):
            return {"alive": False, "note": "host is down"}
        sig = {"crash": signal.SIGKILL, "pause": signal.SIGSTOP, "resume": signal.SIGCONT}[op]
        os.kill(pid, sig)
        if op == "crash":
            for _ in range(100):
                if not is_alive(pid, started):
                    break
                time.sleep(0.01)
            self.run.journal.append("remove", id=f"node:{host}")
            return {"alive": is_alive(pid, started)}
        return {"state": _state(pid)}

    def stop_all(self) -> None:
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
