"""The node configuration: the contract between the orchestrator and `python -m nodes`.

The orchestrator writes one JSON file per node (and `nodes.sim` takes a list of them). Like the
wire format, this is a contract, so `testbed/` may import this module.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# udp-aead: AES-GCM sealed datagrams (nodes/aead.py); tls: TCP + TLS 1.3, mutual
# authentication with the run's certificates (nodes/tls_transport.py).
TRANSPORTS = ("udp", "udp-aead", "tls")

# The simulator's virtual time starts at a fixed instant (2026-01-01T00:00:00Z) so that its
# logs look like real ones and are reproducible.
SIM_EPOCH_NS = 1_767_225_600_000_000_000


@dataclass(frozen=True, slots=True)
class Member:
    id: int
    name: str
    host: str  # data-plane address
    port: int


@dataclass(frozen=True, slots=True)
class PathConfig:
    """One-way path parameters the node itself applies (the `inprocess` shaping applier, and
    the simulator): netem's model, field for field as testbed.spec.topology.Path
    (docs/link-model.md)."""

    delay_ns: int = 0
    jitter_ns: int = 0
    distribution: str = "normal"
    loss: float = 0.0
    bandwidth_bps: int | None = None
    jitter_corr: float = 0.0
    fifo: bool = False  # `reorder: false`: arrive = max(send + delay, previous arrival)
    loss_corr: float = 0.0
    gemodel: tuple[float, float, float, float] | None = None  # Gilbert-Elliott p, r, h, k
    duplicate: float = 0.0
    duplicate_corr: float = 0.0
    corrupt: float = 0.0
    corrupt_corr: float = 0.0
    reorder: float = 0.0
    reorder_corr: float = 0.0
    reorder_gap: int = 0
    limit: int | None = None  # datagrams in the delay line at once
    rate_bps: int | None = None  # netem's rate (serialisation in the delay line)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PathConfig:
        d = dict(d)
        if d.get("gemodel") is not None:
            d["gemodel"] = tuple(d["gemodel"])
        return cls(**d)


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    send: bool = False
    rate: float = 0.0  # messages per second
    size: int = 1024  # payload bytes
    arrival: str = "constant"  # "poisson", "ticks" or "vbr" (nodes/workload.py)
    # ticks: the probability of sending at each 1/rate tick; vbr: slot length, average
    # messages per second and most messages per slot.
    send_prob: float = 1.0
    slot_ns: int = 0
    avg: float = 0.0
    max_burst: int = 0
    # Rate changes: (ns after the workload start, the new rates, whether the protocol is told
    # through Layer.on_new_rate -- False: a misbehaving application that just sends faster).
    rate_changes: list[tuple[int, dict[str, float], bool]] = field(default_factory=list)
    # The part of the workload in which this host sends (`workload.sending`): from start_ns
    # after the workload start until stop_ns (0: to the end). nodes/workload.py.
    start_ns: int = 0
    stop_ns: int = 0
    # A reservation the node makes for the application whatever the protocol (key
    # "workload", nodes/reservation.py); 0: none.
    reserve_bps: float = 0.0
    # Graceful overload (docs/architecture.md "Flow control and overload"): a sender with
    # more than `window` of its own messages not yet final-delivered at itself does not
    # offer the next one to the protocol but refuses it (`ev=refused`); 0: no limit.
    window: int = 1024


@dataclass(frozen=True, slots=True)
class ClockConfig:
    offset_ns: int = 0
    drift_ppm: float = 0.0


@dataclass(frozen=True)
class NodeConfig:
    node_id: int
    name: str
    members: list[Member]
    protocol: str
    params: dict[str, Any]
    log_path: str
    seed: int
    start_at_ns: int  # true time at which the workload starts
    duration_ns: int  # workload length; 0 = run until told to stop
    drain_ns: int  # after the workload, keep running at least this long before exiting
    workload: WorkloadConfig = WorkloadConfig()
    clock: ClockConfig = ClockConfig()
    paths: dict[int, PathConfig] = field(default_factory=dict)  # by destination id
    control_host: str = "127.0.0.1"
    control_port: int | None = None  # management HTTP (Jolokia); None: off, 0: any free port
    mgmt_token: str = ""  # bearer token protecting the management endpoints
    mgmt_basic: str = ""  # "user:password" also accepted as HTTP Basic (Jolokia clients)
    incarnation: int = 0  # restarts of this host so far; >0 joins a running group
    # The drain's cap: the orchestrator stops the node as soon as the group is quiescent
    # (docs/architecture.md "Liveness"), at the latest this long after the workload.
    # 0 keeps the old fixed drain of drain_ns.
    drain_max_ns: int = 0

    @property
    def end_ns(self) -> int:
        """True time at which the node exits on its own (the drain's cap)."""
        return self.start_at_ns + self.duration_ns + max(self.drain_ns, self.drain_max_ns)
    transport: str = "udp"  # one of TRANSPORTS
    transport_key: str = ""  # udp-aead: the run's AES-GCM key, hex
    # The node's certificate and key and the run's CA, PEM (testbed/certs.py): for HTTPS
    # management (`mgmt_tls`) and the `tls` transport.
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    mgmt_tls: bool = False
    mgmt_mutual: bool = False  # HTTPS management also wants a client certificate of the CA
    # Log every datagram's arrival (`ev=arrive`: src, type, rseq, flags), the sim's and the local
    # backend's stand-in for a pcap (`capture: {arrivals: true}`).
    log_arrivals: bool = False
    # Reservations (docs/reservations.md): the host's link capacity for admission control (the
    # topology's `qos.rate`; None: nodes/reservation.py DEFAULT_CAPACITY_BPS), and the data
    # device on which the node realises them as HTB classes itself (mininet, docker; "": a
    # token bucket in the node's own send path, local and sim).
    qos_capacity_bps: int | None = None
    qos_dev: str = ""
    # A user's node program that speaks Maelstrom's protocol (docs/maelstrom.md): `program`
    # (argv), `workload`, `clients` (the client names on this host), `rate` (this host's
    # operations per second), `topology` (broadcast's neighbour map), `settle_ns` (from the
    # workload's end to the final read). Non-empty: `python -m nodes` runs the host agent
    # (nodes/agent.py) instead of a protocol node.
    maelstrom: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["paths"] = {str(k): v for k, v in d["paths"].items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NodeConfig:
        d = dict(d)
        d["members"] = [Member(**m) for m in d["members"]]
        w = dict(d.get("workload", {}))
        w["rate_changes"] = [(int(at), dict(r), bool(tell))
                             for at, r, tell in w.get("rate_changes", [])]
        d["workload"] = WorkloadConfig(**w)
        d["clock"] = ClockConfig(**d.get("clock", {}))
        d["paths"] = {int(k): PathConfig.from_dict(v) for k, v in d.get("paths", {}).items()}
        return cls(**d)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True))

    @classmethod
    def read(cls, path: Path) -> NodeConfig:
        return cls.from_dict(json.loads(path.read_text()))
