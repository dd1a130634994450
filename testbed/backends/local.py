"""The `local` backend: one OS process per host, no root.

Data sockets sit on distinct loopback addresses (127.0.0.0/8 is all loopback on Linux) picked
from the run id, so concurrent runs do not collide; path delay, jitter, loss and bandwidth are
applied by each node's transport per destination (the `inprocess` applier). Control (management)
stays on 127.0.0.1.
"""

from __future__ import annotations

import subprocess
import sys
import time

from nodes.config import NodeConfig
from testbed.backends.base import Backend, HostAddress
from testbed.processes import spawn, stop_pid
from testbed.rundir import RunDir
from testbed.spec.topology import PathMatrix, TopologySpec

DATA_PORT = 7000


class LocalBackend(Backend):
    name = "local"

    def __init__(self, run: RunDir, topology: TopologySpec, paths: PathMatrix):
        super().__init__(run, topology, paths)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def up(self) -> dict[str, HostAddress]:
        n = int(self.run.run_id, 16)
        a, b = 100 + n % 100, (n // 100) % 250
        return {h: HostAddress(f"127.{a}.{b}.{i + 1}", DATA_PORT, "127.0.0.1")
                for i, h in enumerate(self.paths.hosts)}

    def deploy(self, configs: list[NodeConfig]) -> None:
        for cfg in configs:
            d = self.run.node_dir(cfg.name)
            cfg.write(d / "node.json")
            self.procs[cfg.name] = spawn(
                self.run.journal, self.run.run_id, f"node:{cfg.name}",
                [sys.executable, "-m", "nodes", "--config", str(d / "node.json")],
                d / "node.log")

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
