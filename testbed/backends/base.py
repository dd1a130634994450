"""The backend interface shared by sim, local, mininet, docker and remote
(ARCHITECTURE.md decision 2): up, deploy, exec, fault, collect, down."""

from __future__ import annotations

import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass

from nodes.config import NodeConfig
from testbed.rundir import RunDir
from testbed.spec.topology import PathMatrix, TopologySpec


class BackendError(Exception):
    """A backend cannot do what was asked; the message is one sentence for the user."""


@dataclass(frozen=True)
class HostAddress:
    data: str  # data-plane address (shaped)
    port: int
    control: str  # control-plane address (never shaped)


class Backend(ABC):
    name: str
    #: True when path delays are applied by the node transport itself (inprocess applier)
    inprocess_shaping: bool = True

    def __init__(self, run: RunDir, topology: TopologySpec, paths: PathMatrix):
        self.run = run
        self.topology = topology
        self.paths = paths

    @abstractmethod
    def up(self) -> dict[str, HostAddress]:
        """Create the emulated network; return each host's addresses."""

    @abstractmethod
    def deploy(self, configs: list[NodeConfig]) -> None:
        """Start the node program on every host."""

    @abstractmethod
    def wait(self, timeout_s: float) -> bool:
        """Block until every node has exited or the timeout passed; True when all exited."""

    def exec(self, host: str, argv: list[str]) -> subprocess.CompletedProcess[bytes]:
        raise BackendError(f"the {self.name} backend cannot run commands on hosts")

    def fault(self, kind: str, **params: object) -> None:
        raise BackendError(f"the {self.name} backend does not inject {kind} faults yet")

    def collect(self) -> None:
        """Bring logs (and captures) into the run directory."""

    @abstractmethod
    def down(self) -> None:
        """Remove everything up() and deploy() created (idempotent)."""
