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

    fd_interval_ms: float = ms("failure-detector heartbeat period", 100)
    fd_timeout_ms: float = ms("silence after which a member is suspected", 1000)


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
    ack_every_ms: float = ms("period of the cumulative ACKs that free send buffers", 20)
    heartbeat_after_ms: float = ms("idle time after which a sender with unacknowledged "
                                   "messages sends its first heartbeat", 100)
    heartbeat_max_ms: float = ms("longest gap between an idle sender's heartbeats (they "
                                 "double from heartbeat_after_ms)", 640)
    window: int = param(1024, "own messages a sender keeps unacknowledged (flow control)",
                        ge=1)
    max_resend: int = param(128, "messages resent per NACK at most", ge=1)


# the fixed sequencer's (nodes/protocols/sequencer.py)
@dataclass(frozen=True)
class SequencerParams(ReliableParams):
    sequencer: str | None = param(None, "the host that numbers messages (default: the first)",
                                  host=True)
    optimistic: bool = param(False, "also opt-deliver in spontaneous receive order (000 2.2)")
    relay_store: int = param(16384, "data messages the relay keeps for FETCH requests", ge=0)
    fetch_after_ms: float = ms("how long a missing ordered message waits before a FETCH", 200)
