"""Turn an experiment into one node configuration per host (the nodes/config.py contract)."""

from __future__ import annotations

from pathlib import Path

from nodes.config import ClockConfig, Member, NodeConfig, PathConfig, WorkloadConfig
from testbed.backends.base import HostAddress
from testbed.spec.experiment import ExperimentSpec
from testbed.spec.topology import PathMatrix, TopologySpec


def node_configs(
    exp: ExperimentSpec,
    topo: TopologySpec,
    paths: PathMatrix,
    addresses: dict[str, HostAddress],
    run_path: Path,
    start_at_ns: int,
    inprocess_shaping: bool,
    duration_ns: int | None = None,
    control_port: int | None = None,
    mgmt_token: str = "",
) -> list[NodeConfig]:
    """One config per host. control_port: None for no management server, 0 for any port."""
    hosts = paths.hosts
    members = [Member(i, h, addresses[h].data, addresses[h].port) for i, h in enumerate(hosts)]
    senders = set(hosts if exp.workload.senders == "all" else exp.workload.senders)
    params = dict(exp.protocol.params)  # host params default to the first host (member 0)
    configs = []
    for i, host in enumerate(topo.hosts):
        shaping = {}
        if inprocess_shaping:
            for j, other in enumerate(hosts):
                if other != host.name:
                    p = paths.get(host.name, other)
                    shaping[j] = PathConfig(p.delay_ns, p.jitter_ns, p.distribution, p.loss,
                                            p.bandwidth_bps)
        configs.append(NodeConfig(
            node_id=i,
            name=host.name,
            members=members,
            protocol=exp.protocol.name,
            params=params,
            log_path=str(run_path / "nodes" / host.name / "events.jsonl"),
            seed=exp.seed,
            start_at_ns=start_at_ns,
            duration_ns=exp.duration if duration_ns is None else duration_ns,
            drain_ns=exp.drain,
            drain_max_ns=exp.drain_max,
            workload=WorkloadConfig(host.name in senders, exp.workload.rate, exp.workload.size,
                                    exp.workload.arrival),
            clock=ClockConfig(host.clock.offset, host.clock.drift),
            paths=shaping,
            control_host=addresses[host.name].control,
            control_port=control_port,
            mgmt_token=mgmt_token,
        ))
    return configs
