"""The `local` backend: one OS process per host, no root.

Data sockets sit on distinct loopback addresses (127.0.0.0/8 is all loopback on Linux) picked
from the run id, so concurrent runs do not collide; path delay, jitter, loss and bandwidth are
applied by each node's transport per destination (the `inprocess` applier). Control (management)
stays on 127.0.0.1.
"""

from __future__ import annotations

from nodes.config import NodeConfig
from nodes.faults import Controls
from testbed.backends.base import Backend, HostAddress, Realised
from testbed.backends.nodeprocs import NodeProcesses
from testbed.faults.nodeside import NodeSideFaults
from testbed.rundir import RunDir
from testbed.spec.topology import PathMatrix, TopologySpec

DATA_PORT = 7000


class LocalBackend(Backend):
    name = "local"

    def __init__(self, run: RunDir, topology: TopologySpec, paths: PathMatrix):
        super().__init__(run, topology, paths)
        self.nodes = NodeProcesses(run)
        node_side = NodeSideFaults(run, paths.hosts, self.nodes.alive)
        # The nodes shape their own datagrams, so the network control is theirs too.
        self.controls = Controls(process=self.nodes, network=node_side, node=node_side)

    def up(self) -> Realised:
        n = int(self.run.run_id, 16)
        a, b = 100 + n % 100, (n // 100) % 250
        return Realised({h: HostAddress(f"127.{a}.{b}.{i + 1}", DATA_PORT, "127.0.0.1")
                         for i, h in enumerate(self.paths.hosts)})

    def deploy(self, configs: list[NodeConfig]) -> None:
        self.nodes.start_all(configs)

    def wait(self, timeout_s: float) -> bool:
        return self.nodes.wait(timeout_s)

    def down(self) -> None:
        self.nodes.stop_all()
