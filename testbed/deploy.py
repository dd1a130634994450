"""Turn an experiment into one node configuration per host (the nodes/config.py contract)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodes.config import ClockConfig, Member, NodeConfig, PathConfig, WorkloadConfig
from testbed.backends.base import HostAddress
from testbed.maelstrom import agent_sections
from testbed.rundir import RunDir
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
    mgmt_basic: str = "",
    transport_key: str = "",
    certs: dict[str, tuple[str, str]] | None = None,
    ca_pem: str = "",
) -> list[NodeConfig]:
    """One config per host. control_port: None for no management server, 0 for any port;
    transport_key: the run's key when the experiment says `transport: udp-aead`; certs:
    host -> (certificate, key) PEM and ca_pem the run's CA (testbed/certs.py), for HTTPS
    management and the `tls` transport."""
    if (exp.transport == "tls" or exp.management.tls) and not (certs and ca_pem):
        raise ValueError("TLS needs the run's certificates (testbed.certs.make_run_certs)")
    if exp.transport == "udp-aead" and not transport_key:
        raise ValueError("transport udp-aead needs the run's key (RunDir.transport_key)")
    hosts = paths.hosts
    members = [Member(i, h, addresses[h].data, addresses[h].port) for i, h in enumerate(hosts)]
    senders = set(hosts if exp.workload.senders == "all" else exp.workload.senders)
    params = dict(exp.protocol.params)  # host params default to the first host (member 0)
    agents = agent_sections(exp, hosts) if exp.maelstrom else {}
    configs = []
    for i, host in enumerate(topo.hosts):
        shaping = {}
        if inprocess_shaping:
            for j, other in enumerate(hosts):
                if other != host.name:
                    p = paths.get(host.name, other)
                    shaping[j] = PathConfig(**p.model_fields())  # type: ignore[arg-type]
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
            workload=workload_config(exp, host.name in senders, host.name),
            clock=ClockConfig(host.clock.offset, host.clock.drift),
            paths=shaping,
            control_host=addresses[host.name].control,
            control_port=control_port,
            mgmt_token=mgmt_token,
            mgmt_basic=mgmt_basic,
            transport=exp.transport,
            transport_key=transport_key if exp.transport == "udp-aead" else "",
            tls_cert=(certs or {}).get(host.name, ("", ""))[0],
            tls_key=(certs or {}).get(host.name, ("", ""))[1],
            tls_ca=ca_pem if certs else "",
            mgmt_tls=exp.management.tls,
            mgmt_mutual=exp.management.tls and exp.management.mutual,
            log_arrivals=exp.capture.arrivals,
            qos_capacity_bps=host.qos.rate,
            maelstrom=agents.get(host.name, {}),
        ))
    return configs


def workload_config(exp: ExperimentSpec, send: bool, host: str = "") -> WorkloadConfig:
    """The node's workload: arrivals, vbr slots, rate changes, the application's reservation
    (docs/reservations.md "Workloads"), the host's send window."""
    w = exp.workload
    period = w.sending.get(host)
    return WorkloadConfig(
        send, w.msgs_per_s, w.size, w.arrival, send_prob=w.send_prob, slot_ns=w.slot or 0,
        avg=w.avg or 0.0, max_burst=w.max_burst or 0,
        rate_changes=[(c.at, c.rates(), c.renegotiate) for c in w.schedule],
        reserve_bps=float(w.reserve or 0),
        start_ns=period.start if period else 0,
        stop_ns=(period.stop or 0) if period else 0,
        window=w.window)


def security(run: RunDir, exp: ExperimentSpec, addresses: dict[str, HostAddress],
             is_sim: bool = False) -> dict[str, Any]:
    """The run's credentials for node_configs: management token and Basic login, the
    udp-aead key, and for TLS (management or transport) the run's CA and node certificates
    (with the orchestrator's client certificate for mutual TLS)."""
    out: dict[str, Any] = {"mgmt_token": run.token, "mgmt_basic": run.basic_auth}
    if exp.transport == "udp-aead":
        out["transport_key"] = run.transport_key
    if (exp.management.tls or exp.transport == "tls") and not is_sim:
        from testbed.certs import make_run_certs

        made = make_run_certs(run.path, run.run_id,
                              {h: sorted({a.control, a.data}) for h, a in addresses.items()},
                              exp.management.key)
        if exp.management.mutual:  # the client certificate of testbed mgmt and faults
            make_run_certs(run.path, run.run_id, {"orchestrator": []}, exp.management.key)
        out["certs"] = {h: (c.cert_pem, c.key_pem) for h, c in made.items()}
        out["ca_pem"] = (run.path / "certs" / "ca.pem").read_text()
        run.journal.append("certs", hosts=sorted(made), key=exp.management.key)
    return out
