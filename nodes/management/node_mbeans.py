"""The MBeans a running node exposes (docs/architecture.md "Management API", D3.5 section 4.2):
`testbed:type=Node`, `type=Clock`, `type=TotalOrder,protocol=P`, `type=Transport`, and
`type=QoS` (reservations, docs/reservations.md); besides, what the protocol's layers declare
next to their state (`Layer.managed`, nodes/protocols/base.py): attributes that join
`TotalOrder` or `Transport` (the sequencer's LastSeq, reliable multicast's
Retransmissions, switching's switchTo) and MBeans of their own (`primary`'s
`type=Membership`)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from nodes.core import NodeCore, Output
from nodes.management.mbeans import MBean, MBeanRegistry
from nodes.protocols import catalogue
from nodes.protocols.base import Managed, ManagedHost


def build_node_registry(core: NodeCore, true_now: Callable[[], int] = time.time_ns,
                        on_stop: Callable[[], None] | None = None,
                        apply: Callable[[Output], None] | None = None) -> MBeanRegistry:
    """The node's MBeans; `on_stop` (the runtime's) makes `testbed:type=Node` `stop` end the
    node cleanly, log flushed, as the orchestrator does once the run is quiescent; `apply`
    (the runtime's or simulator's) sends and arms what an operation made the protocol do
    (`testbed:type=QoS` `newRate`)."""
    registry = MBeanRegistry()
    started = true_now()
    cfg = core.cfg
    clock = core.clock
    counters = core.counters
    entry = catalogue.find(cfg.protocol)
    claims = sorted(entry.claims) if entry is not None else []

    node = (
        MBean("testbed:type=Node", "This protocol node")
        .attribute("Name", "str", lambda: cfg.name, description="host name")
        .attribute("Id", "int", lambda: cfg.node_id, description="member id")
        .attribute("Protocol", "str", lambda: cfg.protocol, description="protocol stack")
        .attribute("Claims", "list", lambda: claims,
                   description="checks the protocol promises to pass (its catalogue entry)")
        .attribute("Uptime", "float", lambda: (true_now() - started) / 1e9,
                   description="seconds since the node started")
        .attribute("Progress", "dict", core.progress,
                   description="incarnation, messages sent, final deliveries per origin "
                               "host and per later incarnation of it")
    )
    if on_stop is not None:
        node.operation("stop", on_stop, [], None,
                       "end the node now (log flushed), as after the drain")
    registry.register(node)

    def set_offset(ms: float) -> None:
        clock.offset_ns = round(ms * 1e6)
        _log_clock(core, true_now(), "set-offset")

    def set_drift(ppm: float) -> None:
        clock.set_drift(true_now(), ppm)
        _log_clock(core, true_now(), "set-drift")

    def jump(ms: float) -> float:
        clock.jump(round(ms * 1e6))
        _log_clock(core, true_now(), "jump")
        return clock.offset_ns / 1e6

    registry.register(
        MBean("testbed:type=Clock",
              "The node's skewed local clock (docs/architecture.md decision 6)")
        .attribute("OffsetMs", "float", lambda: clock.offset_ns / 1e6, set_offset,
                   "offset from true time at t0, ms")
        .attribute("DriftPpm", "float", lambda: clock.drift_ppm, set_drift,
                   "rate error, parts per million")
        .attribute("LocalTimeNs", "int", lambda: clock.local(true_now()),
                   description="the local clock now")
        .operation("jump", jump, [("ms", "float")], "float",
                   "step the clock by ms; returns the new offset in ms")
    )

    def reset_stats() -> None:
        counters.opt = counters.fnl = counters.broadcast = 0

    total_order = (
        MBean(f"testbed:type=TotalOrder,protocol={cfg.protocol}", "Total order statistics")
        .attribute("MsgsBroadcast", "int", lambda: counters.broadcast)
        .attribute("MsgsOptDelivered", "int", lambda: counters.opt)
        .attribute("MsgsFinalDelivered", "int", lambda: counters.fnl)
        .operation("resetStats", reset_stats, [], None, "zero the delivery counters")
    )
    declared = core.protocol.managed(
        ManagedHost(lambda: clock.local(true_now()), lambda m: core.names[m]))
    registry.register(_with_declared(total_order, "TotalOrder", declared))

    fd = core.fd

    def set_fd_timeout(ms: float) -> None:
        if ms <= 0:
            raise ValueError(f"TimeoutMs must be positive, got {ms}")
        fd.timeout_ns = round(ms * 1e6)

    def set_fd_interval(ms: float) -> None:
        if ms <= 0:
            raise ValueError(f"IntervalMs must be positive, got {ms}")
        fd.interval_ns = round(ms * 1e6)

    registry.register(
        MBean("testbed:type=FailureDetector", "Probing failure detector (D3.5 section 4.2)")
        .attribute("TimeoutMs", "float", lambda: fd.timeout_ns / 1e6, set_fd_timeout,
                   "how long an unanswered probe waits before its target is suspected")
        .attribute("IntervalMs", "float", lambda: fd.interval_ns / 1e6, set_fd_interval,
                   "period of the detector's check")
        .attribute("SuspectedMembers", "list",
                   lambda: sorted(core.names[m] for m in fd.suspected))
        .attribute("Suspicions", "int", lambda: fd.suspicions,
                   description="suspicions raised since start (each one a member suspected)")
    )

    def ids(names: list[str]) -> set[int]:
        return {core.id_of(n) for n in names}

    def block(to: list[str], from_: list[str]) -> list[str]:
        core.blocked_out |= ids(to)
        core.blocked_in |= ids(from_)
        _log_net(core, true_now())
        return sorted(core.names[m] for m in core.blocked_out | core.blocked_in)

    def heal() -> None:
        core.blocked_out.clear()
        core.blocked_in.clear()
        _log_net(core, true_now())

    registry.register(
        MBean("testbed:type=Network", "Node-side data-plane filters (partitions) and paths")
        .attribute("BlockedTo", "list", lambda: sorted(core.names[m] for m in core.blocked_out))
        .attribute("BlockedFrom", "list",
                   lambda: sorted(core.names[m] for m in core.blocked_in))
        .operation("block", block, [("to", "list"), ("from", "list")], "list",
                   "drop datagrams to and from these hosts")
        .operation("heal", heal, [], None, "remove every filter")
    )

    registry.register(_with_declared(
        MBean("testbed:type=Transport", "UDP transport and reliable multicast")
        .attribute("Transport", "str", lambda: cfg.transport,
                   description="udp, or udp-aead (AES-GCM sealed datagrams)")
        .attribute("DatagramsSent", "int", lambda: counters.datagrams_out)
        .attribute("DatagramsReceived", "int", lambda: counters.datagrams_in)
        .attribute("BytesSent", "int", lambda: counters.bytes_out)
        .attribute("BytesReceived", "int", lambda: counters.bytes_in)
        .attribute("Malformed", "int", lambda: counters.malformed,
                   description="datagrams that did not decode (nodes/wire.py)")
        .attribute("Rejected", "int", lambda: counters.rejected,
                   description="decoded datagrams refused by the edge checks (nodes/edge.py)")
        .attribute("DropReasons", "dict", lambda: dict(counters.reasons),
                   description="refused datagrams per reason, e.g. malformed:length")
        .attribute("Errors", "int", lambda: counters.errors,
                   description="exceptions caught in node callbacks (ev=error)"),
        "Transport", declared))
    for bean_type in dict.fromkeys(d.bean for d in declared):
        if bean_type not in ("TotalOrder", "Transport"):
            registry.register(_with_declared(MBean(f"testbed:type={bean_type}", next(
                d.description for d in declared if d.bean == bean_type)), bean_type, declared))
    if apply is not None:
        registry.register(qos_mbean(core, true_now, apply))
    return registry


def parse_rates(text: str) -> dict[str, float]:
    """`newRate`'s argument: a rate ("20": CBR, messages/s), "avg,max_burst" ("40,3": VBR) or
    "name=value" pairs ("avg=40,max_burst=3"); every value a finite number > 0."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if any("=" in p for p in parts):
        pairs = [p.partition("=") for p in parts]
        items = [(k.strip(), v.strip()) for k, _, v in pairs]
    elif len(parts) == 1:
        items = [("rate", parts[0])]
    elif len(parts) == 2:
        items = [("avg", parts[0]), ("max_burst", parts[1])]
    else:
        raise ValueError(f"newRate takes a rate or avg,max_burst, got {text!r}")
    rates: dict[str, float] = {}
    for k, v in items:
        try:
            x = float(v)
        except ValueError:
            raise ValueError(f"newRate: {k} {v!r} is not a number") from None
        if not k or not math.isfinite(x) or x <= 0:
            raise ValueError(f"newRate: {k or '?'} must be a positive number, got {v!r}")
        rates[k] = x
    return rates


def qos_mbean(core: NodeCore, true_now: Callable[[], int],
              apply: Callable[[Output], None]) -> MBean:
    """`testbed:type=QoS`: the node's reservations (nodes/reservation.py) and the
    application's `new-rate` (004 §3.2)."""
    res = core.reservations

    def reserved() -> dict[str, dict[str, float]]:
        return {k: {"rate_bps": r.rate_bps, "burst_bytes": r.burst_bytes, "changes": r.changes,
                    "delayed": r.bucket.delayed, "dropped": r.bucket.dropped}
                for k, r in res.by_key.items()}

    def new_rate(rates: str) -> dict[str, dict[str, float]]:
        parsed = parse_rates(rates)
        apply(core.new_rate(parsed, true_now(), "mgmt"))
        return reserved()

    return (
        MBean("testbed:type=QoS", "Network reservations: admission control, policing, "
              "renegotiation (004 §2.1, §3.2)")
        .attribute("Reserved", "dict", reserved,
                   description="granted reservations by key: rate, burst, policing counters")
        .attribute("Used", "dict", lambda: res.used_bps(true_now()),
                   description="datagram bit/s each reservation carried since granted or changed")
        .attribute("Refused", "int", lambda: res.refused,
                   description="reservations admission control refused")
        .attribute("CapacityBps", "float", lambda: res.capacity_bps,
                   description="the host's link capacity (topology qos.rate)")
        .operation("newRate", new_rate, [("rates", "str")], "dict",
                   "renegotiate: a rate (20), or avg,max_burst (40,3); returns Reserved")
    )


def _log_net(core: NodeCore, t: int) -> None:
    core.log.write(t, core.clock.local(t), "net",
                   blocked_to=sorted(core.names[m] for m in core.blocked_out),
                   blocked_from=sorted(core.names[m] for m in core.blocked_in))


def _log_clock(core: NodeCore, t: int, action: str) -> None:
    core.log.write(t, core.clock.local(t), "clock", action=action,
                   offset_ms=core.clock.offset_ns / 1e6, drift_ppm=core.clock.drift_ppm)


def _with_declared(bean: MBean, bean_type: str, declared: list[Managed]) -> MBean:
    """`bean` with the attributes and operations the layers declare for `bean_type`."""
    for d in declared:
        if d.bean != bean_type:
            continue
        for a in d.attributes:
            bean.attribute(a.name, a.type, a.get, a.set, a.description)
        for op in d.operations:
            bean.operation(op.name, op.call, op.args, op.returns, op.description)
    return bean
