"""Experiment specs: which topology, backend, protocol, workload, faults and expectations."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator

from analysis.expect import parse_expectation
from nodes.protocols import catalogue
from testbed.faults.schedule import check_faults
from testbed.faults.spec import FaultSpec
from testbed.spec.qos import check_qos_params
from testbed.spec.topology import Loc, Strict, TopologySpec
from testbed.spec.units import Duration, Frequency, Size

BACKENDS = ("sim", "local", "mininet", "docker", "remote")
Backend = Literal["sim", "local", "mininet", "docker", "remote"]


def _protocol_schema(schema: dict[str, Any]) -> None:
    """`testbed schema experiment` shows every protocol's parameters (from the catalogue)."""
    schema["description"] = ("a protocol of the catalogue; `params` follow the protocol's "
                             "model under `x-protocols`")
    schema["x-protocols"] = {
        e.name: {"summary": e.summary, "claims": sorted(e.claims), "optimistic": e.optimistic,
                 "params": catalogue.params_model(e.name).model_json_schema()}
        for e in catalogue.CATALOGUE}


class ProtocolSpec(Strict):
    model_config = ConfigDict(json_schema_extra=_protocol_schema)

    name: str
    params: dict[str, Any] = {}

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        if catalogue.find(v) is None:
            raise ValueError(f"unknown protocol {v!r}; known: {', '.join(catalogue.names())}")
        return v


def check_protocol_params(spec: ProtocolSpec, hosts: list[str]) -> list[tuple[Loc, str]]:
    """The params against the protocol's model (one problem per bad or unknown key) and the
    host-naming ones against the topology's hosts."""
    entry = catalogue.find(spec.name)
    if entry is None:
        return []
    problems: list[tuple[Loc, str]] = []
    try:
        catalogue.params_model(spec.name).model_validate(spec.params)
    except ValidationError as exc:
        for err in exc.errors():
            loc = ("protocol", "params", *(p for p in err["loc"] if isinstance(p, str | int)))
            msg = "unknown parameter" if err["type"] == "extra_forbidden" else str(err["msg"])
            problems.append((loc[:3], msg.removeprefix("Value error, ")))
    for key in entry.host_params():
        host = spec.params.get(key)
        if host is not None and host not in hosts:
            problems.append((("protocol", "params", key), f"unknown {key} host {host!r}"))
    for key in entry.per_host_params():
        value = spec.params.get(key)
        unknown = sorted(set(value) - set(hosts)) if isinstance(value, dict) else []
        if unknown:
            problems.append((("protocol", "params", key), f"unknown host {unknown[0]!r}"))
    return problems


class WorkloadSpec(Strict):
    senders: Literal["all"] | list[str] = "all"
    rate: Frequency = Field(description="messages per second, per sender, e.g. 50/s")
    size: Size = 1024
    arrival: Literal["constant", "poisson"] = "constant"


class CaptureSpec(Strict):
    pcap: bool = False
    snaplen: int = Field(default=256, ge=64, le=65535)
    rotate_mb: int | None = Field(default=None, ge=1)
    rotate_s: int | None = Field(default=None, ge=1)
    arrivals: bool = Field(default=False, description="log each datagram's arrival "
                           "(ev=arrive: src, type, rseq, flags) in the receiver's event log; "
                           "what a pcap shows, on every backend (sim and local have no pcaps)")


class ManagementSpec(Strict):
    """How nodes serve `/jolokia` and `/metrics`: HTTPS with certificates from the run's CA
    (testbed/certs.py) when `tls` is true."""

    tls: bool = False
    # Mutual TLS: clients must also present a certificate from the run's CA (testbed mgmt
    # and the fault injector use certs/orchestrator.pem).
    mutual: bool = False
    # The key algorithm of the run's certificates (HTTPS management and the tls transport).
    key: str = Field(default="ecdsa-p256", description="ecdsa-p256 or rsa-2048")

    @field_validator("key")
    @classmethod
    def _algorithm(cls, v: str) -> str:
        from testbed.certs import check_algorithm

        return check_algorithm(v)


class ExperimentSpec(Strict):
    name: str
    description: str = ""
    topology: str | TopologySpec
    backend: Backend = "local"
    duration: Duration
    # After the workload the run drains until every message a correct host sent is
    # final-delivered at every correct host: at least `drain`, at most `drain_max`
    # (docs/architecture.md "Liveness").
    drain: Duration = 3_000_000_000
    drain_max: Duration = 30_000_000_000
    seed: int = 1
    protocol: ProtocolSpec
    workload: WorkloadSpec
    faults: list[FaultSpec] = []
    capture: CaptureSpec = CaptureSpec()
    # How nodes talk: plain UDP, or UDP with every datagram sealed by AES-GCM under a per-run
    # key (authenticated header, replay window per sender; nodes/aead.py).
    # ... or TCP + TLS 1.3 with mutual authentication (nodes/tls_transport.py): reliable FIFO
    # channels, so emulated loss below the node becomes delay.
    transport: Literal["udp", "udp-aead", "tls"] = "udp"
    management: ManagementSpec = ManagementSpec()
    expect: list[str] = []

    @field_validator("expect")
    @classmethod
    def _expectations(cls, v: list[str]) -> list[str]:
        for text in v:
            parse_expectation(text)
        return v

    @field_validator("duration")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v <= 0:
            raise ValueError("duration must be positive, e.g. '20s'")
        return v


def check_experiment(exp: ExperimentSpec, topo: TopologySpec) -> list[tuple[Loc, str]]:
    """Cross-reference checks between an experiment and its (resolved) topology."""
    problems: list[tuple[Loc, str]] = []
    hosts = [h.name for h in topo.hosts]
    if isinstance(exp.workload.senders, list):
        for i, s in enumerate(exp.workload.senders):
            if s not in hosts:
                problems.append((("workload", "senders", i), f"unknown sender host {s!r}"))
    problems += check_protocol_params(exp.protocol, hosts)
    entry = catalogue.find(exp.protocol.name)
    if entry is not None:
        # one line per param: a duration the params model refused (`theta: 0ms`) is not
        # reported again by the cross-field checks
        said = {loc for loc, _ in problems}
        problems += [p for p in check_qos_params(entry.name, exp.protocol.params, topo,
                                                 entry.bound) if p[0] not in said]
    problems += check_faults(exp.faults, hosts, exp.duration)
    if exp.transport != "udp" and exp.backend == "sim":
        problems.append((("transport",), f"transport {exp.transport} needs real sockets; the "
                         "sim backend delivers in-process (use local, mininet or docker)"))
    if exp.transport == "udp-aead" and exp.backend == "docker":
        problems.append((("transport",), "udp-aead is not available on the docker backend yet: "
                         "the node image has no `cryptography` (use local or mininet, or tls)"))
    if exp.capture.pcap and exp.backend in ("sim", "local"):
        problems.append((("capture", "pcap"),
                         f"packet capture needs the mininet or docker backend, not {exp.backend}"))
    return problems
