"""The MBeans a running node exposes (docs/architecture.md "Management API", D3.5 section 4.2):
`testbed:type=Node`, `type=Clock`, `type=TotalOrder,protocol=P`, `type=Transport`,
`type=Membership` for the `primary` protocol, and `type=QoS` (reservations,
docs/reservations.md)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from nodes.core import NodeCore, Output
from nodes.management.mbeans import MBean, MBeanRegistry
from nodes.protocols import catalogue
from nodes.protocols.primary import Primary
from nodes.protocols.switching import Switching, switching_mbean


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
    proto: Any = core.protocol
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
                   description="messages sent, and final deliveries per origin host")
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
        .attribute("LastSeq", "int", lambda: getattr(proto, "next_deliver", 1) - 1,
                   description="last final-delivered sequence number")
        .attribute("PendingQueue", "int", lambda: len(getattr(proto, "received", ())),
                   description="messages received and not yet final-delivered")
        .attribute("RelayStore", "int", lambda: len(getattr(proto, "store", ())),
                   description="messages the sequencer keeps for FETCHes (until every "
                               "member delivered them)")
        .attribute("FetchUnserved", "int", lambda: getattr(proto, "fetch_unserved", 0),
                   description="FETCHed messages the sequencer's relay store did not hold")
        .operation("resetStats", reset_stats, [], None, "zero the delivery counters")
    )
    if isinstance(proto, Switching):
        switching_mbean(total_order, proto, lambda: clock.local(true_now()))
    registry.register(total_order)

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
        MBean("testbed:type=FailureDetector", "Heartbeat failure detector (D3.5 section 4.2)")
        .attribute("TimeoutMs", "float", lambda: fd.timeout_ns / 1e6, set_fd_timeout,
                   "silence after which a member is suspected")
        .attribute("IntervalMs", "float", lambda: fd.interval_ns / 1e6, set_fd_interval,
                   "heartbeat period")
        .attribute("SuspectedMembers", "list",
                   lambda: sorted(core.names[m] for m in fd.suspected))
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

    if isinstance(proto, Primary):
        registry.register(membership_mbean(core, proto))

    rm = getattr(proto, "rm", None)
    registry.register(
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
                   description="exceptions caught in node callbacks (ev=error)")
        .attribute("Retransmissions", "int", lambda: getattr(rm, "retransmissions", 0))
    )
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


def membership_mbean(core: NodeCore, proto: Primary) -> MBean:
    """`testbed:type=Membership` (001 4.2 L432-436, Appia's `view`, `blocked`,
    `set_primary`): the view, whether it is primary, blocked, the primary counter; the
    operation `setPrimary` makes a blocked (or fresh) node's view the primary one (P9). On a
    node already in a primary view it is refused with a one-line error and changes nothing."""
    def names(ids: list[int]) -> list[str]:
        return [core.names[m] for m in ids]

    def set_primary() -> str:
        try:
            accepted = proto.set_primary()
        except ValueError as exc:
            raise ValueError(f"{core.cfg.name}: {exc} (members "
                             f"{names(proto.view_info()['last_primary'])})") from None
        return f"{accepted}: view {names(proto.view_info()['members'])}"

    return (
        MBean("testbed:type=Membership", "Primary-partition membership (001 section 4.1)")
        .attribute("View", "list", lambda: names(proto.view_info()["members"]),
                   description="members of the membership view")
        .attribute("ViewId", "int", lambda: proto.view_info()["vid"])
        .attribute("IsPrimary", "bool", lambda: proto.view_info()["primary"],
                   description="the view is a primary view")
        .attribute("Blocked", "bool", lambda: proto.view_info()["blocked"],
                   description="no primary here: nothing is delivered, broadcasts refused")
        .attribute("PrimaryCounter", "int", lambda: proto.view_info()["counter"],
                   description="primary views this node installed (its primary epoch)")
        .attribute("LastPrimary", "list", lambda: names(proto.view_info()["last_primary"]))
        .attribute("Status", "str", lambda: proto.view_info()["status"],
                   description="primary, blocked, or fresh (excluded or not joined yet)")
        .attribute("RefusedBroadcasts", "int", lambda: proto.refused)
        .attribute("TransferredDeliveries", "int", lambda: proto.transferred,
                   description="deliveries received by state transfer when rejoining")
        .attribute("RejectedMessages", "int",
                   lambda: proto.rejected + proto.membership.rejected,
                   description="view and membership messages refused as malformed")
        .operation("setPrimary", set_primary, [], "str",
                   "make this blocked node's view the primary (operator recovery, 4.2)")
    )
