"""The protocol catalogue: one entry per protocol, read by everything that needs to know one.

An entry gives the protocol's name (as experiments spell it), its wire id (the header's
`proto` byte), the factory that builds its stack for one process, its parameter dataclass
(nodes/protocols/base.py: types, defaults, limits; `params_model` turns it into the pydantic
model that specs are validated with and `testbed schema` shows), and its **claims**: which
checks of the checker suite (the keys of summary.json's `checks`) it promises to pass, and
whether it opt-delivers. Spec validation, node configs, the node core, the management MBeans
and the checker suite all read it; adding a protocol is its module plus one entry below
(docs/protocols.md).

Importing this module needs no pydantic (the node image has none): only `params_model` does.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from typing import TYPE_CHECKING, Annotated, Any

from nodes import wire
from nodes.protocols import (
    cbcast,
    fifo,
    lamport,
    leader,
    membership,
    moving_sequencer,
    primary,
    psync,
    psync_total,
    qos_cbr,
    qos_common,
    qos_vbr,
    reliable_ack,
    switching,
    timestamp_leader,
    token_ring,
)
from nodes.protocols.base import CommonParams, Layer
from nodes.protocols.fast_seto import FastSeto, FastSetoParams
from nodes.protocols.reliable import ReliableParams
from nodes.protocols.reliable_nack import ReliableNack
from nodes.protocols.sequencer import Sequencer, SequencerParams
from nodes.protocols.seto import Seto, SetoParams
from nodes.wire import Proto

if TYPE_CHECKING:
    from pydantic import BaseModel

# The checks a protocol can claim: the keys of summary.json's `checks` (analysis/checks.py).
CHECKS = ("total_order", "fifo_order", "causal_order", "agreement", "integrity", "validity")
# What reliable FIFO multicast promises (002, "Reliable FIFO"), and what a total order by one
# numbering authority (a fixed sequencer, 000 Fig. 1, 003 Fig. 2; or a token, 002 L379-384)
# adds to it: total order, and causal order too, since a message is numbered after everything
# its sender had delivered when sending it. Lamport timestamps order messages consistently
# with happened-before (the clock condition), so `lamport` claims the same.
RELIABLE_FIFO = frozenset({"fifo_order", "agreement", "integrity", "validity"})
SEQUENCER_TOTAL = RELIABLE_FIFO | {"total_order", "causal_order"}

Factory = Callable[[int, list[int], dict[str, Any]], Layer]
# A protocol whose params nest other protocols (switching's instances) checks and resolves
# them itself: (params, topology hosts) -> [(location, message)], (params, {host: id}) -> params.
ParamsCheck = Callable[[dict[str, Any], list[str]], list[tuple[tuple[Any, ...], str]]]
HostResolver = Callable[[dict[str, Any], dict[str, int]], dict[str, Any]]


@dataclass(frozen=True)
class Entry:
    name: str
    wire_id: int
    factory: Factory
    params: type[CommonParams]
    claims: frozenset[str]
    optimistic: bool = False  # opt-delivers (summary.json gets `local_order` and accuracy)
    summary: str = ""
    # A claimed latency bound (004): the formula analysis/qos.py judges the run's maximum
    # latency against -- "cbr" Δ+Γ, "vbr" Δ+Γ+Θ (Δ+2Γ+Θ with failures), "leader" 2Δ+pO,
    # "timestamp-leader" Δ+max(Δ+pO, Θ); "" claims none.
    bound: str = ""
    check_params: ParamsCheck | None = None
    resolve_hosts: HostResolver | None = None

    def host_params(self) -> tuple[str, ...]:
        """Parameters that name a host: specs check them, nodes get the member id
        (`<name>_id`)."""
        return tuple(f.name for f in fields(self.params) if f.metadata.get("host"))

    def per_host_params(self) -> tuple[str, ...]:
        """Parameters that take one value or a mapping host -> value (specs check the
        hosts)."""
        return tuple(f.name for f in fields(self.params) if f.metadata.get("per_host"))

    def claims_check(self, check: str) -> bool:
        """Whether a check of the suite (or `local_order`) is among the claims."""
        if check == "local_order":
            return self.optimistic
        return check in self.claims


CATALOGUE: tuple[Entry, ...] = (
    Entry("sequencer", Proto.SEQUENCER, Sequencer, SequencerParams, SEQUENCER_TOTAL,
          summary="fixed-sequencer total order over reliable FIFO (000 sec. 2.1, Fig. 1)"),
    Entry("seto", Proto.SETO, Seto, SetoParams, SEQUENCER_TOTAL, optimistic=True,
          summary="optimistic total order with delay compensation (000 sec. 3, Fig. 4)"),
    Entry("fast-seto", Proto.FAST_SETO, FastSeto, FastSetoParams, SEQUENCER_TOTAL,
          optimistic=True,
          summary="SETO with planned delays (003 sec. 4.3, Fig. 7)"),
    Entry("reliable-nack", Proto.RELIABLE, ReliableNack, ReliableParams, RELIABLE_FIFO,
          summary="reliable FIFO multicast with negative acknowledgements (002)"),
    Entry("reliable-ack", reliable_ack.WIRE_ID, reliable_ack.ReliableAck,
          reliable_ack.ReliableAckParams, RELIABLE_FIFO,
          summary="reliable FIFO multicast with positive acknowledgements (002 L120-181)"),
    Entry("cbcast", cbcast.WIRE_ID, cbcast.Cbcast, ReliableParams,
          RELIABLE_FIFO | {"causal_order"},
          summary="causal order with vector clocks, ISIS CBCAST (002 L299-327)"),
    Entry("token-ring", token_ring.WIRE_ID, token_ring.TokenRing, token_ring.TokenRingParams,
          SEQUENCER_TOTAL,
          summary="total order by a rotating token carrying the sequence number (002 "
                  "L379-384, Totem single ring)"),
    Entry("lamport", lamport.WIRE_ID, lamport.Lamport, lamport.LamportParams, SEQUENCER_TOTAL,
          summary="symmetric total order by Lamport timestamps and acknowledgements (002 "
                  "L366-369, Lamport 1978)"),
    Entry("moving-sequencer", moving_sequencer.WIRE_ID, moving_sequencer.MovingSequencer,
          moving_sequencer.MovingSequencerParams, SEQUENCER_TOTAL,
          summary="total order by a sequencer role rotating with a token (001 L130, "
                  "Chang-Maxemchuk)"),
    Entry("psync", psync.WIRE_ID, psync.Psync, ReliableParams, RELIABLE_FIFO | {"causal_order"},
          summary="causal order by a context graph, Psync (002 L329-352)"),
    Entry("psync-total", psync_total.WIRE_ID, psync_total.PsyncTotal,
          psync_total.PsyncTotalParams, SEQUENCER_TOTAL,
          summary="total order from Psync's causal order by waves, with NULLs (002 "
                  "L386-390)"),
    Entry("qos-vbr", qos_vbr.WIRE_ID, qos_vbr.QosVbr, qos_vbr.QosVbrParams,
          frozenset({"total_order", "integrity"}), bound="vbr",
          summary="QoS-preserving total order for variable bit rate: slots of theta, latency "
                  "<= delta+gamma+theta, delta+2gamma+theta with a crash; total order with "
                  "gaps when loss_tolerance > 0 (004 secs. 5-7)"),
    Entry("primary", primary.WIRE_ID, primary.Primary, primary.PrimaryParams, SEQUENCER_TOTAL,
          summary="total order in primary views over partitionable membership: majority of "
                  "the last primary, blocked minorities, forced leave and rejoin (001 4.1)"),
    Entry("qos-cbr", qos_cbr.WIRE_ID, qos_cbr.QosCbr, qos_cbr.QosCbrParams,
          RELIABLE_FIFO | {"total_order"}, bound="cbr",
          summary="QoS-preserving total order for constant bit rates, latency <= Δ+Γ (004 "
                  "§4, Figs. 3-5)"),
    Entry("leader", leader.WIRE_ID, leader.Leader, leader.LeaderParams,
          RELIABLE_FIFO | {"total_order"}, bound="leader",
          summary="leader broadcast over reserved rates, latency <= 2Δ+pO (004 §8.1)"),
    Entry("timestamp-leader", timestamp_leader.WIRE_ID, timestamp_leader.TimestampLeader,
          timestamp_leader.TimestampLeaderParams, RELIABLE_FIFO | {"total_order"},
          bound="timestamp-leader",
          summary="blocks of timestamps granted by a leader, latency <= Δ+max(Δ+pO, Θ) (004 "
                  "§8.2)"),
    Entry("switching", switching.WIRE_ID, switching.Switching, switching.SwitchingParams,
          SEQUENCER_TOTAL,
          summary="switches between total-order instances without stopping the flow, or by "
                  "the RABP and stop-the-flow baselines (001 ch. 2, Fig. 2.1)",
          check_params=switching.check_params, resolve_hosts=switching.resolve_hosts),
    Entry("fifo", fifo.WIRE_ID, fifo.Fifo, CommonParams, frozenset({"fifo_order", "integrity"}),
          summary="FIFO without reliability, late messages dropped (002 L54-66)"),
)

_BY_NAME = {e.name: e for e in CATALOGUE}
_BY_WIRE = {e.wire_id: e for e in CATALOGUE}
if len(_BY_NAME) != len(CATALOGUE) or len(_BY_WIRE) != len(CATALOGUE):
    raise RuntimeError("protocol catalogue: names and wire ids must be unique")
for _e in CATALOGUE:
    if not _e.claims <= set(CHECKS):
        raise RuntimeError(f"protocol {_e.name!r} claims unknown checks "
                           f"{sorted(_e.claims - set(CHECKS))}")
    wire.register_proto(_e.wire_id, _e.name)
wire.register_proto(membership.WIRE_ID, "membership")  # the primary layer's membership


def names() -> tuple[str, ...]:
    return tuple(_BY_NAME)


def get(name: str) -> Entry:
    """The entry of protocol `name`; KeyError naming the known ones."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown protocol {name!r}; known: {', '.join(_BY_NAME)}") from None


def find(name: str) -> Entry | None:
    return _BY_NAME.get(name)


def build(name: str, me: int, members: list[int], params: dict[str, Any]) -> Layer:
    """Build protocol `name`'s stack for process `me` (host params already resolved to ids)."""
    return get(name).factory(me, members, params)


def params_model(name: str) -> type[BaseModel]:
    """The pydantic model of protocol `name`'s parameters (unknown keys forbidden)."""
    return _model(get(name).params)


_MODELS: dict[type, Any] = {}


def _duration_ms(value: Any) -> float:
    return qos_common.duration_ns(value) / 1e6


def _model(cls: type[CommonParams]) -> type[BaseModel]:
    from pydantic import ConfigDict, Field, create_model

    if cls in _MODELS:
        return _MODELS[cls]  # type: ignore[no-any-return]
    from pydantic import BeforeValidator

    hints = typing.get_type_hints(cls)
    spec: dict[str, Any] = {}
    for f in fields(cls):
        meta = dict(f.metadata)
        doc = meta.pop("doc", None)
        meta.pop("host", None)
        default = f.default if f.default is not MISSING else ...
        hint: Any = hints[f.name]
        if meta.pop("duration", False):
            # `20ms` or a number of ms (nodes/protocols/qos_common.py `duration_ns`), as ms
            hint = Annotated[float, BeforeValidator(_duration_ms)]
        if meta.pop("per_host", False):
            # one value for every host, or a mapping host name -> value, each within limits
            one: Any = Annotated[typing.get_args(hint)[0], Field(**meta)]
            hint, meta = typing.Union[one, dict[str, one]], {}  # noqa: UP007 (runtime types)
        spec[f.name] = (hint, Field(default=default, description=doc, **meta))
    model = create_model(f"{cls.__name__}Model", __config__=ConfigDict(extra="forbid"),
                         __doc__=cls.__doc__, **spec)
    _MODELS[cls] = model
    return model
