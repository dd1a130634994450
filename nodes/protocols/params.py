"""Protocol parameter dataclasses and their helpers (nodes/protocols/base.py explains them).

A module of its own, never compiled (nodes/fastpath.py): the spec loader's pydantic check
reads these classes' annotations, and protocols outside the compiled set subclass them, so
they stay plain Python classes. `base`, `reliable` and `sequencer` re-export their names.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypeVar


def ms(doc: str, default: float, **limits: float) -> Any:
    """A duration parameter in milliseconds (positive unless `limits` say otherwise)."""
    return field(default=default, metadata={"doc": doc, **(limits or {"gt": 0})})


def param(default: Any, doc: str, **meta: Any) -> Any:
    """A parameter with its documentation and pydantic-style limits in `metadata`."""
    return field(default=default, metadata={"doc": doc, **meta})


@dataclass(frozen=True)
class CommonParams:
    """Parameters every protocol takes: the failure detector the node core runs beside it."""

    fd_interval_ms: float = ms("period of the failure detector's check (probes due, "
                               "suspicions)", 100)
    fd_timeout_ms: float = ms("how long an unanswered probe waits before its target is "
                              "suspected", 1000)
    fd_alives_per_timeout: int = param(4, "probe rounds per fd_timeout_ms (a round is timeout "
                                       "/ this, at least an interval; each member sends one "
                                       "PING and one ACK a round when idle)", ge=1)


P = TypeVar("P", bound=CommonParams)


def typed_params(cls: type[P], params: dict[str, Any]) -> P:
    """The protocol's parameters as its dataclass, from a node config's params (already
    validated by the spec loader; keys the dataclass does not have, such as `incarnation` or
    resolved host ids, are left out)."""
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in params.items() if k in names})


# reliable FIFO multicast's (nodes/protocols/reliable.py)
@dataclass(frozen=True)
class ReliableParams(CommonParams):
    """The NACK layer's parameters (every stack built on it takes them too)."""

    tick_ms: float = ms("period of the layer's timer scan (NACKs, heartbeats, ACKs)", 10)
    nack_delay_ms: float = ms("how long a gap stays open before it is NACKed", 5, ge=0)
    nack_retry_ms: float = ms("how often an unanswered NACK repeats", 60)
    ack_every_ms: float = ms("period of the cumulative ACKs that free send buffers (a stream "
                             "that advanced by a quarter of the window since the last ACK is "
                             "ACKed at the next tick)", 200)
    heartbeat_after_ms: float = ms("least time an idle sender waits for a member's overdue ACK "
                                   "before its first heartbeat to it (the wait is the ACK "
                                   "round trip's SRTT + 4 RTTVAR when longer)", 100)
    heartbeat_max_ms: float = ms("longest gap between an idle sender's heartbeats to a member "
                                 "(they double from the first wait)", 640)
    window: int = param(1024, "own messages a sender keeps unacknowledged (flow control)",
                        ge=1)
    max_resend: int = param(128, "messages resent per NACK at most", ge=1)


# the fixed sequencer's (nodes/protocols/sequencer.py)
@dataclass(frozen=True)
class SequencerParams(ReliableParams):
    sequencer: str | None = param(None, "the host that numbers messages (default: the first)",
                                  host=True)
    optimistic: bool = param(False, "also opt-deliver in spontaneous receive order (000 2.2)")
    fetch_after_ms: float = ms("how long a missing ordered message waits before a FETCH", 200)
