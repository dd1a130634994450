"""The plan of one run, built once from the spec and serving both `testbed run --dry-run` and
the real run (docs/architecture.md "Data flow"): the path matrix, the shaping plans, the fault
timeline with the hosts it leaves correct, and -- once the backend has given addresses -- the
node configurations. The real run writes it to `plan.json` in the run directory, which
`testbed fault` and `testbed mgmt` read instead of re-deriving anything from the spec."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from nodes.config import SIM_EPOCH_NS, NodeConfig
from testbed.backends import BackendError, Capabilities, HostAddress, Realised, backend_class
from testbed.backends.addressing import DATA_DEV, data_addresses
from testbed.backends.base import STARTUP_NS
from testbed.deploy import node_configs, security
from testbed.faults.schedule import Action, correct_hosts, expand
from testbed.rundir import RunDir
from testbed.shaping import netem
from testbed.shaping.plan import HostPlan, host_plans
from testbed.spec.experiment import ExperimentSpec
from testbed.spec.topology import PathMatrix, TopologySpec

PLAN_FILE = "plan.json"
LOCAL_STARTUP_NS = STARTUP_NS  # a backend's own margin is Backend.startup_ns
SIM_STARTUP_NS = 500_000_000


@dataclass(frozen=True)
class RunPlan:
    """Immutable: `build` makes the plan from the spec; `realise` gives the plan as the
    backend realised it (addresses, shaping as applied, the start, the node configs) as a new
    plan."""

    experiment: ExperimentSpec
    topology: TopologySpec
    paths: PathMatrix
    capabilities: Capabilities
    actions: list[Action]  # the fault timeline, offsets from the workload start
    correct: list[str]  # hosts the timeline leaves correct (the drain waits for them)
    shaping: dict[str, HostPlan]  # per host, on backends that shape real interfaces
    start_at_ns: int = 0
    addresses: dict[str, HostAddress] = field(default_factory=dict)
    configs: list[NodeConfig] = field(default_factory=list)

    @classmethod
    def build(cls, exp: ExperimentSpec, topo: TopologySpec) -> RunPlan:
        paths = topo.paths()
        try:
            caps = backend_class(exp.backend).capabilities
        except BackendError:  # a backend not built yet: its plan without shaping
            caps = Capabilities()
        actions = expand(exp.faults, paths.hosts, exp.duration, exp.seed)
        shaping = {} if caps.inprocess_shaping else shaping_plans(topo, paths)
        return cls(exp, topo, paths, caps, actions, correct_hosts(paths.hosts, actions), shaping)

    @property
    def hosts(self) -> list[str]:
        return self.paths.hosts

    def start_time(self, now_ns: int, startup_ns: int = LOCAL_STARTUP_NS) -> int:
        """When the workload starts: a fixed virtual instant, or a margin after now (longer
        for a backend that starts its nodes slowly: remote, docs/remote.md)."""
        if self.capabilities.virtual_clock:
            return SIM_EPOCH_NS + SIM_STARTUP_NS
        return now_ns + startup_ns

    def realise(self, run: RunDir, realised: Realised | dict[str, HostAddress],
                start_at_ns: int, duration_ns: int | None = None) -> RunPlan:
        """The plan as the backend realised it (`Backend.up()`: the hosts' addresses, the
        shaping as applied, which replaces the planned one when given), started at
        `start_at_ns`, with the nodes' configurations."""
        if not isinstance(realised, Realised):
            realised = Realised(dict(realised))
        caps, addresses = self.capabilities, dict(realised.addresses)
        configs = node_configs(
            self.experiment, self.topology, self.paths, addresses, run.path, start_at_ns,
            caps.inprocess_shaping, duration_ns=duration_ns,
            control_port=0 if caps.management else None,
            **security(run, self.experiment, addresses, is_sim=not caps.management))
        return replace(self, start_at_ns=start_at_ns, addresses=addresses, configs=configs,
                       shaping=dict(realised.shaping) or self.shaping)

    def record(self) -> dict[str, Any]:
        return {
            "backend": self.experiment.backend,
            "hosts": self.hosts,
            "correct": self.correct,
            "start_at_ns": self.start_at_ns,
            "addresses": {h: {"data": a.data, "port": a.port, "control": a.control}
                          for h, a in self.addresses.items()},
            "faults": [{"at_ns": a.at_ns, "op": a.op, "params": a.params, "fault": a.fault}
                       for a in self.actions],
            # The tc commands of each host's plan (what `--dry-run` prints), as applied.
            "shaping": {h: netem.script(p).splitlines() for h, p in self.shaping.items()},
        }

    def write(self, run: RunDir) -> None:
        (run.path / PLAN_FILE).write_text(json.dumps(self.record(), indent=1) + "\n")


def shaping_plans(topo: TopologySpec, paths: PathMatrix) -> dict[str, HostPlan]:
    """Per host, the HTB + per-destination plan of backends that shape real interfaces, in the
    mininet addressing (docker renumbers the same classes into its subnet)."""
    return host_plans(topo, paths, data_addresses(topo), DATA_DEV)


def read_plan(run: RunDir) -> dict[str, Any]:
    """The plan a run wrote (`plan.json`); LookupError when it has none."""
    path = run.path / PLAN_FILE
    try:
        plan: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        raise LookupError(f"run {run.run_id} has no {PLAN_FILE} (no nodes were planned); "
                          "start one with `testbed up TOPOLOGY`") from None
    return plan
