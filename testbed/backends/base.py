"""The backend interface shared by sim, local, mininet, docker and remote
(docs/architecture.md decision 2): up, deploy, exec, fault, collect, down."""

from __future__ import annotations

import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from nodes.config import NodeConfig
from nodes.faults import Controls, apply
from testbed.faults.schedule import Action
from testbed.rundir import RunDir
from testbed.shaping.plan import HostPlan
from testbed.spec.topology import PathMatrix, TopologySpec

# Time for node processes to start, bind and arm timers before the workload begins.
STARTUP_NS = 1_500_000_000


class BackendError(Exception):
    """A backend cannot do what was asked; the message is one sentence for the user."""


@dataclass(frozen=True)
class Capabilities:
    """What a backend does itself, so that the runner asks instead of testing its type.

    virtual_clock: nodes run in virtual time from SIM_EPOCH_NS inside the backend, which also
      applies the fault timeline (`schedule_faults`) and the drain there (sim); else the wall
      clock, with the runner's nemesis thread and drain watch.
    inprocess_shaping: the node transport applies path delays itself (the inprocess applier).
    capture: tcpdump on the hosts' data interfaces (`capture:` in the experiment).
    management: nodes serve the management endpoint on their control address.
    """

    virtual_clock: bool = False
    inprocess_shaping: bool = True
    capture: bool = False
    management: bool = True


@dataclass(frozen=True)
class HostAddress:
    data: str  # data-plane address (shaped)
    port: int
    control: str  # control-plane address (never shaped)


@dataclass(frozen=True)
class Realised:
    """What `up()` made: each host's addresses and, on a backend that shapes real interfaces,
    the shaping plan each host's applier applied (docker renumbers the run plan's classes into
    its subnet, remote names each host's own device and addresses); empty when the nodes
    shape their own datagrams."""

    addresses: dict[str, HostAddress]
    shaping: dict[str, HostPlan] = field(default_factory=dict)


class Backend(ABC):
    name: str
    capabilities: Capabilities = Capabilities()
    #: the constructor takes make_backend's options (applier, capture, seed, ...)
    takes_options: bool = False
    #: process, network and node control: how this backend applies typed faults
    #: (nodes/faults.py); None for a backend that applies its timeline itself (sim)
    controls: Controls | None = None
    #: from computing the start time to the nodes running: the workload starts this much after
    #: "now" (remote raises it: a playbook starts its nodes, docs/remote.md)
    startup_ns: int = STARTUP_NS
    #: wall seconds after the deploy past which the runner cuts the run short (set by the
    #: runner before `deploy`; 0: none). A backend that runs its nodes' clock itself (the
    #: simulator) stops them there on its own, at one virtual instant, so every node's log is
    #: complete up to it; the runner's stop is then only the backstop.
    wall_limit_s: float = 0.0

    def __init__(self, run: RunDir, topology: TopologySpec, paths: PathMatrix):
        self.run = run
        self.topology = topology
        self.paths = paths

    @property
    def inprocess_shaping(self) -> bool:
        """True when path delays are applied by the node transport itself."""
        return self.capabilities.inprocess_shaping

    def stats(self) -> dict[str, Any]:
        """Backend-specific figures for the console (the simulator's event rate)."""
        return {}

    @abstractmethod
    def up(self) -> Realised:
        """Create the emulated network; return what was made (the run plan is not changed:
        the runner derives the realised plan from this)."""

    @abstractmethod
    def deploy(self, configs: list[NodeConfig]) -> None:
        """Start the node program on every host."""

    @abstractmethod
    def wait(self, timeout_s: float) -> bool:
        """Block until every node has exited or the timeout passed; True when all exited."""

    def exec(self, host: str, argv: list[str]) -> subprocess.CompletedProcess[bytes]:
        raise BackendError(f"the {self.name} backend cannot run commands on hosts")

    def fault(self, action: Action) -> dict[str, Any]:
        """Apply one primitive of the fault timeline; return what was measured afterwards."""
        if self.controls is None:
            raise BackendError(f"the {self.name} backend does not inject {action.op} faults "
                               "in real time")
        return apply(self.controls, action.primitive())

    def schedule_faults(self, actions: list[Action], start_at_ns: int) -> None:
        """A backend with a virtual clock applies the fault timeline itself, in virtual time:
        it takes the timeline here, before deploy. On the wall clock the runner's nemesis
        (testbed/faults/nemesis.py) walks it and calls `fault` for each primitive."""
        raise BackendError(f"the {self.name} backend has no timeline of its own; the runner's "
                           "nemesis applies faults through its controls")

    def collect(self) -> None:  # noqa: B027 - optional hook, most backends write in place
        """Bring logs (and captures) into the run directory."""

    @abstractmethod
    def down(self) -> None:
        """Remove everything up() and deploy() created (idempotent)."""
