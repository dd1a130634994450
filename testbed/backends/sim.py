"""The `sim` backend: every node in one deterministic discrete-event simulation (nodes/sim.py),
run as one process so that testbed/ only talks to nodes/ through its config contract."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from nodes.config import NodeConfig
from nodes.quiescence import DRAIN_FILE
from testbed.backends.base import Backend, BackendError, Capabilities, HostAddress, Realised
from testbed.faults.schedule import Action, correct_hosts
from testbed.processes import spawn

#: how much earlier than the runner's wall limit the simulator stops itself (it checks the wall
#: clock every few thousand events; a fifth of the limit when that is less)
SIM_STOP_EARLY_S = 2.0


class SimBackend(Backend):
    name = "sim"
    capabilities = Capabilities(virtual_clock=True, management=False)

    def up(self) -> Realised:
        # Virtual hosts need addresses only to fill the node config; nothing is bound.
        return Realised({h: HostAddress(f"198.18.0.{i + 1}", 7000, "127.0.0.1")
                         for i, h in enumerate(self.paths.hosts)})

    def schedule_faults(self, actions: list[Action], start_at_ns: int) -> None:
        """The timeline travels inside sim.json: the simulator applies it in virtual time."""
        self.fault_plan = (actions, start_at_ns)

    def deploy(self, configs: list[NodeConfig]) -> None:
        actions, start = getattr(self, "fault_plan", ([], 0))
        spec = {"seed": configs[0].seed, "nodes": [c.to_dict() for c in configs],
                "faults_log": str(self.run.path / "faults.jsonl"),
                # The drain waits for these hosts' quiescence (nodes/quiescence.py).
                "correct": correct_hosts(self.paths.hosts, actions),
                "drain_log": str(self.run.path / DRAIN_FILE),
                # The simulator applies the timeline in virtual time and writes the history.
                "faults": [{"t_ns": start + a.at_ns, "op": a.op, "params": a.params,
                            "fault": a.fault} for a in actions],
                # Past it the simulator stops every node at the virtual time reached and says
                # so in its statistics line (`cut_short`), a little before the runner would.
                "max_wall_s": max(self.wall_limit_s - SIM_STOP_EARLY_S,
                                  self.wall_limit_s * 0.8)}
        path = self.run.path / "sim.json"
        path.write_text(json.dumps(spec, sort_keys=True))
        self._proc = spawn(self.run.journal, self.run.run_id, "sim",
                           [sys.executable, "-m", "nodes.sim", "--config", str(path)],
                           self.run.path / "sim.log")

    def wait(self, timeout_s: float) -> bool:
        try:
            rc = self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        self.run.journal.append("remove", id="sim")
        if rc != 0:
            log = (self.run.path / "sim.log").read_text()[-2000:]
            raise BackendError(f"the simulator failed with exit code {rc}: {log.strip()}")
        return True

    def stats(self) -> dict[str, Any]:
        """The simulator's statistics line; {} when it has none (it was stopped)."""
        lines = (self.run.path / "sim.log").read_text().strip().splitlines()
        try:
            stats = json.loads(lines[-1]) if lines else {}
        except ValueError:
            return {}
        return stats if isinstance(stats, dict) else {}

    def collect(self) -> None:
        """The logs are in the run directory already; a simulator still running (the runner
        cut the run short) is stopped."""
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
            self.run.journal.append("remove", id="sim")

    def down(self) -> None:
        self.collect()
