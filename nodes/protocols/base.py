"""The sans-IO protocol interface (docs/architecture.md decision 1, in the h11/h2 style).

A layer takes events -- `broadcast`, `on_message`, `on_timer` -- with the node's *local* clock
reading, and returns actions. It never touches sockets, threads or the wall clock, so the same
code runs in the asyncio node runtime and in the discrete-event simulator.

Layers stack by ownership: an upper layer holds its lower layer and consumes the lower layer's
`RDeliver` actions itself (as a sequencer sits on reliable FIFO multicast). Timer keys are
namespaced by layer ("rm:tick", "seq:flush").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from nodes.wire import Message


@dataclass(frozen=True, slots=True)
class Send:
    """Put a datagram on the network: to one member, or to every other member (dst=None)."""

    dst: int | None
    msg: Message


@dataclass(frozen=True, slots=True)
class SetTimer:
    """Call on_timer(key) after delay_ns of local time; re-setting a key replaces it."""

    key: str
    delay_ns: int


@dataclass(frozen=True, slots=True)
class RDeliver:
    """A lower layer hands a message up (reliable FIFO delivery)."""

    src: int
    msg: Message


@dataclass(frozen=True, slots=True)
class OptDeliver:
    """Optimistic (tentative) total-order delivery (000 section 2.2)."""

    origin: int
    mno: int
    size: int


@dataclass(frozen=True, slots=True)
class FinalDeliver:
    """Final (authoritative) total-order delivery at position seq."""

    origin: int
    mno: int
    seq: int
    size: int


@dataclass(frozen=True, slots=True)
class Received:
    """A data message reached this process (logged as `recv`; analysis splits latency here)."""

    origin: int
    mno: int
    size: int


@dataclass(frozen=True, slots=True)
class Log:
    """A delivery-log event the protocol wants recorded (ev name and fields)."""

    ev: str
    fields: dict[str, Any] = field(default_factory=dict)


Action = Send | SetTimer | RDeliver | OptDeliver | FinalDeliver | Received | Log


class Layer(Protocol):
    """What the node runtime and the simulator drive."""

    def start(self, now: int) -> list[Action]: ...

    def broadcast(self, payload: bytes, now: int) -> list[Action]: ...

    def on_message(self, src: int, msg: Message, now: int) -> list[Action]: ...

    def on_timer(self, key: str, now: int) -> list[Action]: ...


class ProtocolError(Exception):
    """A peer violated the protocol (e.g. an ORDER that contradicts an earlier one)."""
