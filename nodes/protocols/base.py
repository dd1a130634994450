"""The sans-IO protocol interface (docs/architecture.md decision 1, in the h11/h2 style).

A layer takes events -- `broadcast`, `on_message`, `on_timer` -- with the node's *local* clock
reading, and returns actions. It never touches sockets, threads or the wall clock, so the same
code runs in the asyncio node runtime and in the discrete-event simulator.

Layers stack by ownership: an upper layer holds its lower layer and consumes the lower layer's
`RDeliver` actions itself (as a sequencer sits on reliable FIFO multicast). Timer keys are
namespaced by layer ("rm:tick", "seq:flush").

Every hook the node core calls is declared in `Layer` (no `getattr` probes): the four events,
plus `on_suspect` (the failure detector changed its mind) and `on_view` (the `primary` layer,
nodes/protocols/primary.py, gives the total-order instance it runs in a primary view that
view's members). `LayerBase` gives the hooks a layer does not
need a default that does nothing. A layer also declares what the node reads of it: the roles
it gives members (`roles`, for the edge gate, nodes/edge.py) and its management attributes
(`managed`, for the node's MBeans, nodes/management/node_mbeans.py), next to its state.

Each protocol's parameters are a dataclass (`CommonParams` and its subclasses): field types,
defaults and `metadata` constraints (`gt`, `ge`, `le`, `lt`, `doc`, `host`) that the catalogue
(`nodes/protocols/catalogue.py`) turns into the pydantic model specs are validated with. The
node program itself needs no pydantic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from nodes.protocols.params import (  # re-exported: protocols import them from here
    CommonParams as CommonParams,
)
from nodes.protocols.params import (
    P as P,
)
from nodes.protocols.params import (
    ms as ms,
)
from nodes.protocols.params import (
    param as param,
)
from nodes.protocols.params import (
    typed_params as typed_params,
)
from nodes.wire import Message, mypyc_attr, quick_init


class Send:
    """Put a datagram on the network: to one member, or to every other member (dst=None).

    Send, Received and FinalDeliver are built once or twice per simulated event, so like
    `RDeliver` they are plain slotted classes rather than frozen dataclasses: compiled
    (nodes/fastpath.py), a dataclass's `__init__` stays interpreted Python, these are native
    (docs/architecture.md, "Compiled hot path"). Same constructor (parameters, defaults),
    equal and hashable by value as the dataclasses were; the fields are `Final`, so mypy
    rejects an assignment to one."""

    __slots__ = ("dst", "msg")

    def __init__(self, dst: int | None, msg: Message):
        self.dst: Final = dst
        self.msg: Final = msg

    def __eq__(self, other: object) -> bool:
        return type(other) is Send and self.dst == other.dst and self.msg == other.msg

    def __hash__(self) -> int:
        return hash((self.dst, self.msg))

    def __repr__(self) -> str:
        return f"Send(dst={self.dst!r}, msg={self.msg!r})"


@dataclass(frozen=True, slots=True)
class SetTimer:
    """Call on_timer(key) after delay_ns of local time; re-setting a key replaces it."""

    key: str
    delay_ns: int


class RDeliver:
    """A lower layer hands a message up (reliable FIFO delivery). Built once per received
    datagram and consumed at once by the layer above, so a plain slotted class rather than a
    frozen dataclass: compiled (nodes/fastpath.py), a dataclass's `__init__` stays
    interpreted Python, this one is native. Treat it as immutable; equal and hashable by
    value as the dataclass was."""

    __slots__ = ("src", "msg")

    def __init__(self, src: int, msg: Message):
        self.src = src
        self.msg = msg

    def __eq__(self, other: object) -> bool:
        return (type(other) is RDeliver and self.src == other.src
                and self.msg == other.msg)

    def __hash__(self) -> int:
        return hash((self.src, self.msg))

    def __repr__(self) -> str:
        return f"RDeliver(src={self.src!r}, msg={self.msg!r})"


@dataclass(frozen=True, slots=True)
class OptDeliver:
    """Optimistic (tentative) total-order delivery (000 section 2.2)."""

    origin: int
    mno: int
    size: int
    # The layer instance that produced it ("" = the node's protocol); the log writes it as
    # the event's `proto` ("<protocol>#<scope>" for a second instance in one node).
    instance: str = ""


class FinalDeliver:
    """Final (authoritative) total-order delivery at position seq. `instance` is the layer
    instance that produced it ("" = the node's protocol); the log writes it as the event's
    `proto` ("<protocol>#<scope>" for a second instance in one node). A plain slotted class
    for speed, as `Send` explains."""

    __slots__ = ("origin", "mno", "seq", "size", "instance")

    def __init__(self, origin: int, mno: int, seq: int, size: int, instance: str = ""):
        self.origin: Final = origin
        self.mno: Final = mno
        self.seq: Final = seq
        self.size: Final = size
        self.instance: Final = instance

    def _key(self) -> tuple[int, int, int, int, str]:
        return (self.origin, self.mno, self.seq, self.size, self.instance)

    def __eq__(self, other: object) -> bool:
        return type(other) is FinalDeliver and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"FinalDeliver(origin={self.origin!r}, mno={self.mno!r}, seq={self.seq!r}, "
                f"size={self.size!r}, instance={self.instance!r})")


@dataclass(frozen=True, slots=True)
class EnsuredDeliver:
    """A delivered message reached a stronger guarantee (001 §4.3, jGCS `onServiceEnsured`):
    `uniform` once every member of the (primary) view has delivered it. Logged as
    `ev=ensured` with `service`."""

    origin: int
    mno: int
    service: str = "uniform"
    instance: str = ""


class Received:
    """A data message reached this process (logged as `recv`; analysis splits latency here).
    `instance` as in `FinalDeliver`. A plain slotted class for speed, as `Send` explains."""

    __slots__ = ("origin", "mno", "size", "instance")

    def __init__(self, origin: int, mno: int, size: int, instance: str = ""):
        self.origin: Final = origin
        self.mno: Final = mno
        self.size: Final = size
        self.instance: Final = instance

    def _key(self) -> tuple[int, int, int, str]:
        return (self.origin, self.mno, self.size, self.instance)

    def __eq__(self, other: object) -> bool:
        return type(other) is Received and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"Received(origin={self.origin!r}, mno={self.mno!r}, size={self.size!r}, "
                f"instance={self.instance!r})")


# The other actions on the common path: a faster __init__ (nodes/wire.py `quick_init`).
for _cls in (SetTimer, OptDeliver):
    quick_init(_cls)


@dataclass(frozen=True, slots=True)
class Log:
    """A delivery-log event the protocol wants recorded (ev name and fields)."""

    ev: str
    fields: dict[str, Any] = field(default_factory=dict)


# The Log a restarted process writes where it joins a sender's stream (fields `origin` and
# `mno`, logged as the `mid` of the first message it takes from that sender): from that
# message on it owes every message of the sender some correct host delivers (agreement,
# analysis/joins.py).
JOIN_EVENT = "stream_join"


@dataclass(frozen=True, slots=True)
class Reserve:
    """Ask the network for a reservation of `rate_bps` (bits/s) for this node's sends.

    The QoS-preserving protocols of paper 004 assume reserved bandwidth (section 3). The node
    core passes the request to its transport: an HTB class per reservation on mininet and
    docker, a token bucket in the in-process transport (local) and in the simulator.
    Admission control answers with `Layer.on_reserve_result`; a renegotiation is another
    `Reserve` with the new rate (same `key`). Logged as `ev=reserve`.
    """

    rate_bps: float
    burst_bytes: int = 0  # 0: the transport's default burst (one MTU-sized datagram)
    key: str = "default"  # one reservation per key and node


@dataclass(frozen=True)
class Attribute:
    """A management attribute a layer declares (`Layer.managed`): its name, type (as
    nodes/management/mbeans.py names them: int, float, str, bool, list, dict), how to read
    it, and how to write it (None: read-only)."""

    name: str
    type: str
    get: Callable[[], Any]
    set: Callable[[Any], None] | None = None
    description: str = ""


@dataclass(frozen=True)
class Operation:
    """A management operation a layer declares: `call` takes `args` ((name, type) pairs)
    and returns a value of type `returns` (None: nothing); a ValueError is the caller's
    one-line error."""

    name: str
    call: Callable[..., Any]
    args: tuple[tuple[str, str], ...] = ()
    returns: str | None = None
    description: str = ""


@dataclass(frozen=True)
class Managed:
    """What a layer exposes in one MBean: `bean` is the MBean's type, `testbed:type=<bean>`
    (`TotalOrder` and `Transport` are the node's: the attributes join them), `description`
    the MBean's when the layer makes it."""

    bean: str
    attributes: tuple[Attribute, ...] = ()
    operations: tuple[Operation, ...] = ()
    description: str = ""


@dataclass(frozen=True)
class ManagedHost:
    """What the node gives a layer's management declarations: its local clock now, and the
    host name of a member id."""

    local_now: Callable[[], int]
    name: Callable[[int], str]


Action = (Send | SetTimer | RDeliver | OptDeliver | FinalDeliver | EnsuredDeliver | Received | Log
          | Reserve)


class Layer(Protocol):
    """What the node runtime and the simulator drive: every hook the core calls."""

    def start(self, now: int) -> list[Action]: ...

    def broadcast(self, payload: bytes, now: int) -> list[Action]: ...

    def on_message(self, src: int, msg: Message, now: int) -> list[Action]: ...

    def on_timer(self, key: str, now: int) -> list[Action]: ...

    def on_suspect(self, member: int, suspected: bool, now: int) -> list[Action]:
        """The failure detector now suspects `member` (or no longer does)."""
        ...

    def on_view(self, members: list[int], now: int) -> list[Action]:
        """A membership service installed a new view (the `primary` layer calls it on the
        instance it starts for each primary view)."""
        ...

    def on_reserve_result(self, key: str, granted: bool, rate_bps: float, reason: str,
                          now: int) -> list[Action]:
        """Admission control answered a `Reserve` (refused: `granted` False, `reason` why)."""
        ...

    def on_new_rate(self, rates: dict[str, float], now: int) -> list[Action]:
        """The application renegotiates its rate (004 §3.2 `new-rate`): e.g. {"rate": 20}
        for CBR, {"avg": 40, "max_burst": 3} for VBR; from a workload schedule entry or the
        `testbed:type=QoS` management operation `newRate`."""
        ...

    def retag(self, proto: int) -> bool:
        """Stamp `proto` in the header of every datagram sent from now on (a container's
        instance tag, nodes/protocols/switching.py); False: this layer cannot, and the
        container re-stamps its datagrams itself."""
        ...

    def renumber(self, last: int) -> bool:
        """Number the next broadcast `last + 1` (a container that numbers the application's
        messages itself, as `primary` does across its views); False: this layer cannot."""
        ...

    def roles(self) -> dict[str, int]:
        """The roles this layer's protocol gives members now, by name (`sequencer`,
        `coordinator`, `predecessor`, `leader`, `installer`): the member id playing each.
        The edge gate's role rules (nodes/edge.py `RoleRule`) read them; a role missing here
        holds for no one."""
        ...

    def managed(self, host: ManagedHost) -> list[Managed]:
        """The management attributes and operations of this layer (and the layers it owns),
        as JGroups' protocols declare theirs: the node's MBeans (nodes/management/
        node_mbeans.py) are built from them."""
        ...


@mypyc_attr(allow_interpreted_subclasses=True)  # subclassed by other protocols
class LayerBase:
    """Defaults for the optional hooks of `Layer`: ignore suspicions and views."""

    def on_suspect(self, member: int, suspected: bool, now: int) -> list[Action]:
        return []

    def on_view(self, members: list[int], now: int) -> list[Action]:
        return []

    def on_reserve_result(self, key: str, granted: bool, rate_bps: float, reason: str,
                          now: int) -> list[Action]:
        return []

    def on_new_rate(self, rates: dict[str, float], now: int) -> list[Action]:
        return []

    def retag(self, proto: int) -> bool:
        return False

    def renumber(self, last: int) -> bool:
        return False

    def roles(self) -> dict[str, int]:
        return {}

    def managed(self, host: ManagedHost) -> list[Managed]:
        return []


class ProtocolError(Exception):
    """A peer violated the protocol (e.g. an ORDER that contradicts an earlier one)."""
