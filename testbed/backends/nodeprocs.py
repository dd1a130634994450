"""Node programs as journaled OS processes, for backends whose hosts are this machine (local,
`LocalHost`) or namespaces on it (mininet, `NetnsHost`): start, wait, and the process control
of nodes/faults.py -- crash (SIGKILL), restart (a new incarnation joins), pause/resume
(SIGSTOP/SIGCONT)."""

from __future__ import annotations

import contextlib
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
from testbed.hosts.local import LocalHost
from testbed.processes import is_alive, spawn, stop_pid
from testbed.rundir import RunDir

HostOf = Callable[[str], LocalHost]  # host name -> where its node runs (testbed/hosts/)


class NodeProcesses:
    def __init__(self, run: RunDir, host_of: HostOf | None = None):
        self.run = run
        self.host_of: HostOf = host_of or LocalHost
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.configs: dict[str, NodeConfig] = {}
        self.crashed: set[str] = set()
        self.adopted: dict[str, tuple[int, int | None]] = {}  # host -> (pid, start time)

    @classmethod
    def attach(cls, run: RunDir, host_of: HostOf | None = None) -> NodeProcesses:
        """The nodes of a run started by another orchestrator process (`testbed up`), found
        through the journal; faults then act on them by pid."""
        nodes = cls(run, host_of)
        for cfg_path in sorted((run.path / "nodes").glob("*/node.json")):
            nodes.configs[cfg_path.parent.name] = NodeConfig.read(cfg_path)
        for entry in run.journal.live():
            if entry.get("kind") == "process" and entry["id"].startswith("node:"):
                host = entry["id"].removeprefix("node:")
                nodes.adopted[host] = (entry["pid"], entry.get("starttime"))
        return nodes

    def start_all(self, configs: list[NodeConfig], at_once: int | None = None) -> float:
        """Start every node and wait until each is up: the nodes boot (import, bind, open
        their control endpoint) side by side instead of one after another, so on a loaded
        machine the last one is not seconds late for the common start time. With `at_once`,
        at most that many boot at a time (the next starts as soon as one is up): a hundred
        interpreters booting together on two cores each take the whole time to boot, while
        the early ones already send. Returns the seconds until the last one was up."""
        t0 = time.monotonic()
        window = len(configs) if at_once is None else max(1, at_once)
        pending = list(configs)
        booting: dict[str, float] = {}  # host -> its boot deadline
        while pending or booting:
            while pending and len(booting) < window:
                cfg = pending.pop(0)
                self.start(cfg, wait=False)
                if cfg.control_port is not None:
                    booting[cfg.name] = time.monotonic() + 10
            now = time.monotonic()
            for name, deadline in list(booting.items()):
                if ((self.run.node_dir(name) / "control.json").exists() or now > deadline
                        or self.procs[name].poll() is not None):
                    del booting[name]
            if booting and (not pending or len(booting) >= window):
                time.sleep(0.02)
        return time.monotonic() - t0

    def start(self, cfg: NodeConfig, wait: bool = True) -> None:
        d = self.run.node_dir(cfg.name)
        cfg.write(d / "node.json")
        (d / "control.json").unlink(missing_ok=True)
        self.configs[cfg.name] = cfg
        self.procs[cfg.name] = spawn(
            self.run.journal, self.run.run_id, f"node:{cfg.name}",
            [*self.host_of(cfg.name).prefix(), sys.executable, "-m", "nodes", "--config",
             str(d / "node.json")], d / "node.log", cwd=Path.cwd())
        if wait and cfg.control_port is not None:
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

    # -- process control (nodes/faults.py) ----------------------------------------------------
    def _adopted(self, host: str) -> tuple[int, int | None] | None:
        """(pid, start time) of a node another orchestrator process started, else None."""
        return self.adopted[host] if host in self.adopted and host not in self.procs else None

    def crash(self, host: str) -> dict[str, Any]:
        adopted = self._adopted(host)
        if adopted is not None:
            pid, started = adopted
            if not is_alive(pid, started):
                return {"alive": False, "note": "host is down"}
            os.kill(pid, signal.SIGKILL)
            for _ in range(100):
                if not is_alive(pid, started):
                    break
                time.sleep(0.01)
            self.run.journal.append("remove", id=f"node:{host}")
            return {"alive": is_alive(pid, started)}
        proc = self.procs.get(host)
        if proc is None or proc.poll() is not None:
            return {"alive": False, "note": "already down"}
        proc.kill()
        proc.wait()
        self.crashed.add(host)
        self.run.journal.append("remove", id=f"node:{host}")
        return {"alive": proc.poll() is None, "exit": proc.returncode}

    def restart(self, host: str) -> dict[str, Any]:
        adopted = self._adopted(host)
        proc = self.procs.get(host)
        if (adopted is not None and is_alive(*adopted)) or (
                adopted is None and proc is not None and proc.poll() is None):
            return {"alive": True, "note": "was not down"}
        cfg = self.configs[host]
        self.start(replace(cfg, incarnation=cfg.incarnation + 1))
        self.crashed.discard(host)
        new = self.procs[host]
        return {"alive": new.poll() is None, "pid": new.pid,
                "incarnation": cfg.incarnation + 1}

    def pause(self, host: str) -> dict[str, Any]:
        return self._signal(host, signal.SIGSTOP)

    def resume(self, host: str) -> dict[str, Any]:
        return self._signal(host, signal.SIGCONT)

    def _signal(self, host: str, sig: signal.Signals) -> dict[str, Any]:
        adopted = self._adopted(host)
        if adopted is not None:
            if not is_alive(*adopted):
                return {"alive": False, "note": "host is down"}
            os.kill(adopted[0], sig)
            return {"state": _state(adopted[0])}
        proc = self.procs.get(host)
        if proc is None or proc.poll() is not None:
            return {"note": "host is down"}
        proc.send_signal(sig)
        return {"state": _state(proc.pid)}

    def stop_all(self, grace_s: float = 3.0) -> None:
        """SIGTERM to every running node at once, SIGKILL to those still running after one
        shared grace period (one after another, a hundred nodes that each used their grace
        were minutes), then each reaped and its journal entry closed."""
        running = [proc for proc in self.procs.values() if proc.poll() is None]
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        deadline = time.monotonic() + grace_s
        while any(proc.poll() is None for proc in running) and time.monotonic() < deadline:
            time.sleep(0.05)
        for name, proc in list(self.procs.items()):
            if proc.poll() is None:
                stop_pid(proc.pid, None, grace_s=0.0)
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
