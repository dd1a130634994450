"""A test-only layer that reserves its rate (the QoS protocols' `Reserve`, before they land):
`fifo` (002 "FIFO Ordering: Implementation") that asks for `msgs_per_s` worth of bandwidth at
start and renegotiates on `on_new_rate`. It sends whatever the workload hands it, so a workload
faster than the reservation is the misbehaving sender that the transport must police."""

from __future__ import annotations

from typing import Any

from nodes.protocols.base import Action, Reserve
from nodes.protocols.fifo import Fifo
from nodes.wire import HEADER_SIZE


def bits_per_message(members: int, payload: int) -> float:
    """Datagram bits one multicast costs: one per other member (no IP multicast)."""
    return (members - 1) * (HEADER_SIZE + payload) * 8


class ReservingFifo(Fifo):
    def __init__(self, me: int, members: list[int], msgs_per_s: float, payload: int,
                 burst_bytes: int = 0, rate_bps: float | None = None):
        super().__init__(me, members, {})
        self.per_msg = bits_per_message(len(members), payload)
        self.rate_bps = rate_bps if rate_bps is not None else msgs_per_s * self.per_msg
        self.burst = burst_bytes
        self.answers: list[tuple[str, bool, float, str]] = []
        self.new_rates: list[dict[str, float]] = []

    def start(self, now: int) -> list[Action]:
        return [Reserve(self.rate_bps, self.burst)]

    def on_reserve_result(self, key: str, granted: bool, rate_bps: float, reason: str,
                          now: int) -> list[Action]:
        self.answers.append((key, granted, rate_bps, reason))
        return []

    def on_new_rate(self, rates: dict[str, float], now: int) -> list[Action]:
        self.new_rates.append(rates)
        return [Reserve(rates["rate"] * self.per_msg, self.burst)]


def install(core: Any, msgs_per_s: float, **kw: Any) -> ReservingFifo:
    """Put a ReservingFifo in place of a node core's `fifo` protocol (before it starts)."""
    layer = ReservingFifo(core.cfg.node_id, sorted(core.names), msgs_per_s,
                          core.cfg.workload.size, **kw)
    core.protocol = layer
    core.gate.protocol = layer
    return layer
