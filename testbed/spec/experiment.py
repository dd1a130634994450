"""Experiment specs: which topology, backend, protocol, workload, faults and expectations."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from analysis.expect import parse_expectation
from nodes.maelstrom import CONSISTENCY_MODELS, TOPOLOGIES, WORKLOADS
from nodes.protocols import catalogue
from testbed.faults.schedule import check_faults
from testbed.faults.spec import FaultSpec, MgmtFault
from testbed.spec.qos import check_qos_params
from testbed.spec.topology import Loc, Strict, TopologySpec
from testbed.spec.units import Bandwidth, Duration, Fraction, Frequency, Size

BACKENDS = ("sim", "local", "mininet", "docker", "remote")
# `protocol` of an experiment whose hosts run a user's program speaking Maelstrom's protocol
# (`node: {program, speaks: maelstrom}`, docs/maelstrom.md): filled in when `node` is given.
MAELSTROM = "maelstrom"
MAELSTROM_BACKENDS = ("local", "mininet", "docker", "remote")
Backend = Literal["sim", "local", "mininet", "docker", "remote"]


def _protocol_schema(schema: dict[str, Any]) -> None:
    """`testbed schema experiment` shows every protocol's parameters (from the catalogue)."""
    schema["description"] = ("a protocol of the catalogue; `params` follow the protocol's "
                             "model under `x-protocols`")
    schema["x-protocols"] = {
        e.name: {"summary": e.summary, "claims": sorted(e.claims), "optimistic": e.optimistic,
                 "liveness": e.liveness.as_dict(),
                 "hazards": [h.as_dict() for h in e.hazards],
                 "param_claims": [c.as_dict() for c in e.param_claims],
                 **({"bound": e.bound, "model": e.model.as_dict()} if e.model else {}),
                 "params": catalogue.params_model(e.name).model_json_schema()}
        for e in catalogue.CATALOGUE}


class ProtocolSpec(Strict):
    model_config = ConfigDict(json_schema_extra=_protocol_schema)

    name: str
    params: dict[str, Any] = {}

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        if catalogue.find(v) is None and v != MAELSTROM:
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
    if entry.check_params is not None and not problems:
        problems += entry.check_params(spec.params, hosts)
    return problems


class RateChangeSpec(Strict):
    """One entry of the workload's `schedule`: at `at` the application moves to new rates
    and renegotiates them with the protocol (`Layer.on_new_rate`, 004 §3.2 `new-rate`), or,
    with `renegotiate: false`, just sends faster: a misbehaving application that the
    reservation polices (docs/reservations.md)."""

    at: Duration = Field(description="time after the workload start, e.g. 5s")
    rate: Frequency | None = Field(default=None, description="new rate (constant, poisson, "
                                   "ticks), e.g. 30/s")
    avg: Frequency | None = Field(default=None, description="new average rate (vbr)")
    max_burst: int | None = Field(default=None, ge=1, description="new burst limit (vbr)")
    renegotiate: bool = True

    def rates(self) -> dict[str, float]:
        return {k: float(v) for k, v in (("rate", self.rate), ("avg", self.avg),
                                         ("max_burst", self.max_burst)) if v is not None}


class SendWindowSpec(Strict):
    """When one sender host sends: from `start` after the workload start until `stop` (a
    workload that changes from one sender to all senders and back: 001 §2.2, beyond the
    paper; nodes/workload.py)."""

    start: Duration = 0
    stop: Duration | None = None


class WorkloadSpec(Strict):
    # A Maelstrom workload (docs/maelstrom.md): the agents act as its clients against the
    # hosts' programs; `rate` is then the whole run's operations per second.
    maelstrom: Literal[WORKLOADS] | None = Field(  # type: ignore[valid-type]
        default=None, description="the Maelstrom workload run against `node.program`: "
        + ", ".join(WORKLOADS))
    concurrency: int | None = Field(default=None, ge=1, description="Maelstrom clients in "
                                    "all (default: one per host), placed on hosts in turn")
    key_count: int | None = Field(default=None, ge=1, description="lin-kv, kafka, "
                                  "txn-list-append and txn-rw-register: keys in use at once "
                                  "(default 3; the txn ones 10)")
    max_writes_per_key: int | None = Field(default=None, ge=1, description="kafka, "
                                           "txn-list-append and txn-rw-register: writes to a "
                                           "key from one host before it is retired (default "
                                           "16)")
    max_txn_length: int | None = Field(default=None, ge=1, description="txn-list-append"
                                       " and txn-rw-register: micro-operations per "
                                       "transaction, at most (default 4)")
    consistency_models: list[Literal[CONSISTENCY_MODELS]] | None = Field(  # type: ignore[valid-type]
        default=None, description="txn-list-append and txn-rw-register: the models whose "
        "anomalies fail the "
        "run (default strict-serializable): " + ", ".join(CONSISTENCY_MODELS))
    topology: Literal[TOPOLOGIES] = Field(  # type: ignore[valid-type]
        default="grid", description="broadcast workloads: the neighbour map sent to the "
        "nodes (" + ", ".join(TOPOLOGIES) + ")")
    senders: Literal["all"] | list[str] = "all"
    rate: Frequency | None = Field(
        default=None, description="messages per second, per sender, e.g. 50/s (for vbr the "
        "average, `avg`)")
    size: Size = 1024
    # ticks: send or skip at each 1/rate tick; vbr: bursts of at most `max_burst` per `slot`,
    # on average `avg` (docs/reservations.md "Workloads", nodes/workload.py).
    arrival: Literal["constant", "poisson", "ticks", "vbr"] = "constant"
    send_prob: Fraction = Field(default=1.0, description="ticks: probability of sending at a "
                                "tick, e.g. 80%")
    avg: Frequency | None = Field(default=None, description="vbr: average messages per second")
    max_burst: int | None = Field(default=None, ge=1, description="vbr: most messages a slot")
    slot: Duration | None = Field(default=None, description="vbr: slot length, e.g. 100ms")
    reserve: Bandwidth | None = Field(
        default=None, description="a reservation every node makes for the application "
        "whatever the protocol, e.g. 200kbit (admitted against the host's qos.rate, policed)")
    schedule: list[RateChangeSpec] = []
    sending: dict[str, SendWindowSpec] = Field(
        default={}, description="per sender host, the part of the run in which it sends "
        "(default: all of it), e.g. {oregon: {start: 10s, stop: 20s}}")
    # Graceful overload (docs/architecture.md "Flow control and overload"): the node-runtime
    # backends refuse a message (`ev=refused`) instead of offering it while the sender has
    # more than `window` of its own messages not yet final-delivered; the default is far
    # above what loads below capacity keep outstanding.
    window: int = Field(default=1024, ge=0, description="own messages a sender keeps not yet "
                        "final-delivered before it refuses new ones (ev=refused); 0: no limit")

    @model_validator(mode="before")
    @classmethod
    def _vbr_rate(cls, data: Any) -> Any:
        """A vbr workload's rate is its average: `rate` is filled in from `avg`."""
        if isinstance(data, dict) and data.get("arrival") == "vbr" and "rate" not in data \
                and data.get("avg") is not None:
            data = {**data, "rate": data["avg"]}
        return data

    @model_validator(mode="after")
    def _arrival(self) -> WorkloadSpec:
        if self.arrival == "vbr":
            missing = [k for k in ("avg", "max_burst", "slot") if getattr(self, k) is None]
            if missing:
                raise ValueError(f"arrival vbr needs {', '.join(missing)} (e.g. avg: 40/s, "
                                 "max_burst: 3, slot: 100ms)")
            assert self.avg is not None and self.max_burst is not None and self.slot is not None
            if self.slot <= 0 or self.avg <= 0:
                raise ValueError("arrival vbr needs a positive slot and avg")
            if self.avg * self.slot / 1e9 > self.max_burst:
                raise ValueError(f"avg {self.avg:g}/s over a {self.slot / 1e6:g} ms slot is "
                                 f"{self.avg * self.slot / 1e9:g} messages, more than "
                                 f"max_burst {self.max_burst}")
            if self.rate != self.avg:
                raise ValueError("arrival vbr takes its rate from avg; leave rate out")
        else:
            extra = [k for k in ("avg", "max_burst", "slot") if getattr(self, k) is not None]
            if extra:
                raise ValueError(f"{', '.join(extra)} only apply to arrival vbr")
            if self.rate is None and self.maelstrom is None:  # Maelstrom's: no operations
                raise ValueError(f"arrival {self.arrival} needs a rate, e.g. rate: 50/s")
        if not 0 < self.send_prob <= 1:
            raise ValueError(f"send_prob must be in (0, 100%], got {self.send_prob:g}")
        if self.send_prob != 1 and self.arrival != "ticks":
            raise ValueError("send_prob only applies to arrival ticks")
        if self.reserve is not None and self.reserve <= 0:
            raise ValueError("reserve must be a positive bandwidth, e.g. 200kbit")
        for i, change in enumerate(self.schedule):
            keys = set(change.rates())
            want = {"avg", "max_burst"} if self.arrival == "vbr" else {"rate"}
            if not keys or not keys <= want:
                raise ValueError(f"schedule[{i}]: arrival {self.arrival} changes "
                                 f"{' and '.join(sorted(want))}, got {sorted(keys) or 'none'}")
        if [c.at for c in self.schedule] != sorted(c.at for c in self.schedule):
            raise ValueError("schedule entries must be in time order")
        return self

    @property
    def msgs_per_s(self) -> float:
        """The (average) rate per sender: `rate`, or `avg` for vbr."""
        return float(self.rate or 0.0)


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


ExploreGenerator = Literal["partition", "crash", "pause", "clock", "link", "network",
                           "restarts", "crashes", "long", "mgmt", "switch"]
EXPLORE_GENERATORS: tuple[ExploreGenerator, ...] = ("partition", "crash", "pause", "clock",
                                                    "link", "network")
# World mode's: today's and those that need a drawn world's timeouts and operations.
WORLD_GENERATORS: tuple[ExploreGenerator, ...] = (*EXPLORE_GENERATORS, "restarts", "crashes",
                                                  "long", "mgmt", "switch")
RANGE_ROOTS = ("workload.", "protocol.params.")


class ExploreSpec(Strict):
    """`testbed explore` only (docs/explore.md): which fault generators draw each seed's
    schedule, how many faults at most, and workload / protocol parameters drawn from ranges.
    `testbed run` ignores it."""

    generators: list[ExploreGenerator] | None = Field(
        default=None, description="fault generators to draw from, e.g. [partition, crash] "
        "(default: " + ", ".join(EXPLORE_GENERATORS) + "; in world mode also restarts, "
        "crashes, long, mgmt, switch, a random subset per seed)")
    world: bool = Field(default=False, description="draw a world per seed (topology, "
                        "delays, link impairments, workload, protocol parameters) as well as "
                        "its faults")
    features: list[str] | None = Field(
        default=None, description="world mode: the world features a seed may turn on "
        "(default: all of testbed/explore/world.py FEATURES)")
    max_faults: int = Field(default=4, ge=0, le=32, description="most faults one seed draws")
    max_events: int | None = Field(
        default=None, ge=1, description="simulator events one seed may take before it fails "
        "as `livelock` (default: 200 x planned messages x hosts, at least 1,000,000)")
    ranges: dict[str, tuple[Any, Any]] = Field(
        default={}, description="a parameter (workload.KEY or protocol.params.KEY) drawn "
        "uniformly in [low, high] per seed, e.g. {workload.rate: [10/s, 100/s], "
        "protocol.params.fd_timeout_ms: [100, 1000]}")

    @field_validator("features")
    @classmethod
    def _features(cls, v: list[str] | None) -> list[str] | None:
        from testbed.explore.world import FEATURES

        unknown = [f for f in v or [] if f not in FEATURES]
        if unknown:
            raise ValueError(f"unknown world feature(s) {', '.join(unknown)}; features: "
                             f"{', '.join(FEATURES)}")
        return v

    @field_validator("ranges")
    @classmethod
    def _ranges(cls, v: dict[str, tuple[Any, Any]]) -> dict[str, tuple[Any, Any]]:
        from testbed.explore.ranges import split_value

        for key, (lo, hi) in v.items():
            if not key.startswith(RANGE_ROOTS) or key.endswith("."):
                raise ValueError(f"range {key!r}: ranges name workload.KEY or "
                                 "protocol.params.KEY")
            try:
                (a, unit_a), (b, unit_b) = split_value(lo), split_value(hi)
            except ValueError as exc:
                raise ValueError(f"range {key!r}: {exc}") from None
            if unit_a != unit_b:
                raise ValueError(f"range {key!r}: both ends need the same unit, got "
                                 f"{lo!r} and {hi!r}")
            if a > b:
                raise ValueError(f"range {key!r}: low {lo!r} is above high {hi!r}")
        return v


class NodeSpec(Strict):
    """A user's node program on every host instead of a protocol of the catalogue."""

    program: list[str] = Field(min_length=1, description="argv of the node program, e.g. "
                               "[python3, node.py] (relative paths: from the experiment file)")
    speaks: Literal["maelstrom"] = Field(description="the program's protocol: maelstrom "
                                         "(JSON lines on stdin and stdout)")


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
    node: NodeSpec | None = Field(default=None, description="run a user's node program "
                                  "(docs/maelstrom.md); `protocol` is then left out")
    workload: WorkloadSpec
    faults: list[FaultSpec] = []
    capture: CaptureSpec = CaptureSpec()
    # How nodes talk: plain UDP, or UDP with every datagram sealed by AES-GCM under a per-run
    # key (authenticated header, replay window per sender; nodes/aead.py).
    # ... or TCP + TLS 1.3 with mutual authentication (nodes/tls_transport.py): reliable FIFO
    # channels, so emulated loss below the node becomes delay.
    transport: Literal["udp", "udp-aead", "tls"] = "udp"
    management: ManagementSpec = ManagementSpec()
    # The remote backend's hosts (docs/remote.md): an inventory file, relative to the
    # experiment file; `testbed run --inventory` overrides it.
    inventory: str | None = None
    expect: list[str] = []
    explore: ExploreSpec | None = Field(default=None, description="testbed explore: fault "
                                        "generators and parameter ranges (docs/explore.md)")
    # A protocol with a latency bound runs only inside the model the bound is proven in
    # (catalogue `Model`: FIFO links, loss, failures, clocks within Γ/2); true runs it
    # outside anyway and measures each assumption (summary.json `qos.assumptions`).
    outside_model: bool = Field(default=False, description=(
        "run a protocol with a latency bound outside its model (FIFO links, no loss, its "
        "failures, clocks within Γ/2): measure each assumption and judge the bound only "
        "when all held"))
    fidelity: Literal["strict", "best-effort"] = Field(default="strict", description=(
        "a run whose emulated WAN was not the one configured (summary.json `fidelity`, "
        "docs/architecture.md \"Emulation fidelity\"): strict fails it, best-effort only "
        "says so"))

    @model_validator(mode="before")
    @classmethod
    def _node_protocol(cls, data: Any) -> Any:
        """With `node:`, the protocol is the program's own: `protocol` is filled in."""
        if isinstance(data, dict) and data.get("node") is not None and "protocol" not in data:
            data = {**data, "protocol": {"name": MAELSTROM}}
        return data

    @property
    def maelstrom(self) -> bool:
        """True when the hosts run a user's Maelstrom program (docs/maelstrom.md)."""
        return self.node is not None and self.node.speaks == "maelstrom"

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


def _check_switch_targets(exp: ExperimentSpec) -> list[tuple[Loc, str]]:
    """A scheduled `switchTo NAME` (nodes/protocols/switching.py) names a configured instance,
    so a typo fails before the run rather than as a refused management call mid-run."""
    if exp.protocol.name != "switching":
        return []
    from nodes.protocols.switching import instance_specs

    names = [str(i.get("name")) for i in instance_specs(exp.protocol.params)
             if isinstance(i, dict)]
    if len(names) < 2:
        return []  # check_params already says so
    problems: list[tuple[Loc, str]] = []
    for k, f in enumerate(exp.faults):
        if not isinstance(f, MgmtFault) or "protocol=switching" not in f.mbean:
            continue
        call = f.exec_ or []
        if call and call[0] == "switchTo" and (len(call) != 2 or str(call[1]) not in names):
            problems.append((("faults", k, "exec"), f"switchTo needs one instance name of "
                             f"{', '.join(names)}; got {call[1:]}"))
    return problems


def _check_maelstrom(exp: ExperimentSpec) -> list[tuple[Loc, str]]:
    """A Maelstrom program run (docs/maelstrom.md): node, workload and protocol agree, on a
    backend and with faults the host agent supports."""
    problems: list[tuple[Loc, str]] = []
    if exp.protocol.name == MAELSTROM and exp.node is None:
        problems.append((("protocol", "name"), "protocol maelstrom is a user's program: give "
                         "`node: {program: [...], speaks: maelstrom}`"))
    if exp.node is None:
        if exp.workload.maelstrom is not None:
            problems.append((("workload", "maelstrom"), "a Maelstrom workload needs `node: "
                             "{program: [...], speaks: maelstrom}`"))
        return problems
    if exp.protocol.name != MAELSTROM:
        problems.append((("protocol",), "a run with `node:` runs the program's own protocol; "
                         "leave `protocol` out"))
    if exp.workload.maelstrom is None:
        problems.append((("workload", "maelstrom"), "a Maelstrom program needs a workload: "
                         f"maelstrom: one of {', '.join(WORKLOADS)}"))
    if exp.backend not in MAELSTROM_BACKENDS:
        problems.append((("backend",), f"Maelstrom programs run on "
                         f"{', '.join(MAELSTROM_BACKENDS)} so far, not {exp.backend}"))
    if exp.transport != "udp":
        problems.append((("transport",), "the host agent carries messages over udp only"))
    if exp.management.tls:
        problems.append((("management", "tls"), "the host agent serves management over "
                         "HTTP only (with the run's token) so far"))
    for i, f in enumerate(exp.faults):
        if f.kind not in ("partition", "heal", "crash", "restart", "mgmt"):
            hint = " (pause the program with a mgmt fault: testbed:type=Agent exec [pause])" \
                if f.kind in ("pause", "resume") else ""
            problems.append((("faults", i, "kind"), f"{f.kind} faults on Maelstrom programs "
                             f"are not built yet (partition, heal, crash, restart, mgmt are)"
                             + hint))
    return problems


def check_experiment(exp: ExperimentSpec, topo: TopologySpec) -> list[tuple[Loc, str]]:
    """Cross-reference checks between an experiment and its (resolved) topology."""
    problems: list[tuple[Loc, str]] = []
    hosts = [h.name for h in topo.hosts]
    if isinstance(exp.workload.senders, list):
        for i, s in enumerate(exp.workload.senders):
            if s not in hosts:
                problems.append((("workload", "senders", i), f"unknown sender host {s!r}"))
    for host, window in exp.workload.sending.items():
        if host not in hosts:
            problems.append((("workload", "sending", host), f"unknown host {host!r}"))
        elif window.stop is not None and not window.start < window.stop:
            problems.append((("workload", "sending", host, "stop"),
                             f"{window.stop / 1e9:g} s is not after start "
                             f"{window.start / 1e9:g} s"))
    for i, change in enumerate(exp.workload.schedule):
        if change.at >= exp.duration:
            problems.append((("workload", "schedule", i, "at"),
                             f"{change.at / 1e9:g} s is not within the workload's "
                             f"{exp.duration / 1e9:g} s"))
    param_problems = check_protocol_params(exp.protocol, hosts)
    problems += param_problems
    entry = catalogue.find(exp.protocol.name)
    if entry is not None:
        # One line per problem: a param the catalogue already refused is not judged again.
        refused = {loc[:3] for loc, _ in param_problems}
        problems += [(loc, msg) for loc, msg in
                     check_qos_params(entry.name, exp.protocol.params, topo, entry.bound)
                     if loc[:3] not in refused]
        if entry.bound and exp.transport == "tls":
            # docs/architecture.md, transports: over TCP a lost datagram becomes a late one,
            # so no latency bound of 004 can hold.
            problems.append((("transport",), f"{entry.name} promises a latency bound, which "
                             "transport tls (TCP: loss becomes delay) cannot keep; use udp or "
                             "udp-aead"))
    problems += check_faults(exp.faults, hosts, exp.duration)
    problems += _check_switch_targets(exp)
    problems += _check_maelstrom(exp)
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
