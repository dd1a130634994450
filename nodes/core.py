"""The node core: one protocol stack plus its clock and delivery log, driven by a runtime.

Both drivers -- the asyncio runtime (real UDP, real time) and the discrete-event simulator
(virtual time) -- feed events in with the *true* time and get back datagrams to send and timers
to arm, both in true time. The core converts to the node's local clock for the protocol and
writes the delivery log with both times.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, cast

from nodes.clock import SkewedClock
from nodes.config import Member, NodeConfig
from nodes.edge import Gate
from nodes.eventlog import EventLog
from nodes.protocols import catalogue, make_protocol
from nodes.protocols.base import (
    EnsuredDeliver,
    FinalDeliver,
    Log,
    OptDeliver,
    Received,
    Reserve,
    Send,
    SetTimer,
)
from nodes.protocols.failure_detector import FailureDetector
from nodes.protocols.sequencer import INCARNATION_SPAN, Sequencer
from nodes.reservation import DEFAULT_CAPACITY_BPS, Reservations
from nodes.wire import Message, MsgType, WireError, decode, encode
from nodes.workload import Arrivals

ALIVE: Final = MsgType.ALIVE
DROP_LOG_LIMIT: Final = 10  # `drop` events logged per reason; past that they are only counted


class Output:
    """What one event makes the node do. A plain slotted class, not a dataclass: one is
    built per event, and the dataclass's default factories cost more than the rest of an
    empty one (docs/architecture.md, "Compiled hot path"). Read what a core returns, never
    change it: events that do nothing share one (`NOTHING`)."""

    __slots__ = ("sends", "timers")

    def __init__(self, sends: list[tuple[int | None, bytes, Message]] | None = None,
                 timers: list[tuple[str, int]] | None = None):
        # (dst, datagram, message): dst None means all other members; the decoded message
        # rides along so the simulator need not decode the same bytes at every receiver.
        self.sends: list[tuple[int | None, bytes, Message]] = [] if sends is None else sends
        self.timers: list[tuple[str, int]] = [] if timers is None else timers  # (key, ns)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Output) and self.sends == other.sends
                and self.timers == other.timers)

    def __repr__(self) -> str:
        return f"Output(sends={self.sends!r}, timers={self.timers!r})"


# What an event that does nothing returns (`NodeCore._process`): shared, so never mutate an
# Output a core returned -- read it.
NOTHING: Final = Output()


@dataclass
class Counters:
    broadcast: int = 0
    opt: int = 0
    fnl: int = 0
    datagrams_out: int = 0
    datagrams_in: int = 0
    bytes_out: int = 0
    bytes_in: int = 0
    malformed: int = 0  # datagrams that do not decode (nodes/wire.py)
    rejected: int = 0  # decoded, refused by the edge checks (nodes/edge.py)
    reasons: dict[str, int] = field(default_factory=dict)  # "malformed:length": count, ...
    errors: int = 0  # exceptions caught in a runtime callback (ev=error)


class NodeCore:
    def __init__(self, cfg: NodeConfig, t0_ns: int):
        self.cfg = cfg
        self.clock = SkewedClock(t0_ns, cfg.clock.offset_ns, cfg.clock.drift_ppm)
        self.names = _shared_names(cfg.members)
        self.log = EventLog(Path(cfg.log_path) if cfg.log_path else None, cfg.name, cfg.protocol)
        self.protocol = make_protocol(cfg.protocol, cfg.node_id, sorted(self.names),
                                      resolve_params(cfg))
        # The same object when it is exactly the (compiled) sequencer -- SETO and Fast SETO
        # are too -- so that the compiled core calls it natively: through `protocol`, typed
        # by the `Layer` protocol, every datagram and tick was a Python-level method call
        # (boxed arguments, a method look-up).
        proto = self.protocol
        self.native_sequencer: Sequencer | None = proto if type(proto) is Sequencer else None
        self.counters = Counters()
        # Liveness bookkeeping for the orchestrator's quiescence check: messages this node
        # sent, final deliveries per origin member id, and those of a restarted origin's
        # incarnation (mno // INCARNATION_SPAN >= 1) per (origin, incarnation).
        self.sent = 0
        self.fnl_from: dict[int, int] = {}
        self.fnl_late: dict[tuple[int, int], int] = {}
        self.fnl_first: dict[int, int] = {}  # per origin, the first mno final-delivered
        entry = catalogue.get(cfg.protocol)
        self.gate = Gate(cfg.node_id, sorted(self.names), self.protocol, entry.edge,
                         entry.wire_id, cfg.incarnation)
        self._payload = b"\x00" * cfg.workload.size
        p = cfg.params
        self.fd = FailureDetector(cfg.node_id, sorted(self.names),
                                  round(float(p.get("fd_interval_ms", 100)) * 1e6),
                                  round(float(p.get("fd_timeout_ms", 1000)) * 1e6),
                                  int(p.get("fd_alives_per_timeout", 4)),
                                  announce=cfg.incarnation > 0)
        # Node-side network filters (partitions on backends without iptables): datagrams to
        # `blocked_out` are not sent, datagrams from `blocked_in` are dropped on arrival.
        self.blocked_out: set[int] = set()
        self.blocked_in: set[int] = set()
        self.durable_sends = True
        # Admission control and policing of the protocol's `Reserve`s (nodes/reservation.py);
        # the runtime or simulator polices with `reservations.charged()`.
        self.reservations = Reservations(float(cfg.qos_capacity_bps or DEFAULT_CAPACITY_BPS))
        # The sender's arrival process (nodes/workload.py), set by the driver: a new rate
        # moves the application too.
        self.arrivals: Arrivals | None = None
        self.app_rate = cfg.workload.avg or cfg.workload.rate  # messages/s, for new_rate
        self.log_arrivals = cfg.log_arrivals

    def start(self, t: int) -> Output:
        self.log.write(t, self.clock.local(t), "start", incarnation=self.cfg.incarnation)
        lt = self.clock.local(t)
        actions: list[Any] = []
        if self.cfg.workload.reserve_bps:  # the application's own (docs/reservations.md)
            actions.append(Reserve(self.cfg.workload.reserve_bps, key="workload"))
        return self._process(actions + self.protocol.start(lt) + self.fd.start(lt), t)

    def id_of(self, name: str) -> int:
        for i, n in self.names.items():
            if n == name:
                return i
        raise KeyError(f"no member named {name!r}")

    def broadcast(self, t: int) -> Output:
        self.counters.broadcast += 1
        out = self._process(self.protocol.broadcast(self._payload, self.clock.local(t)), t)
        # The `send` line reaches the file before the datagram leaves: a node killed right
        # after must not leave deliveries of a message its log never sent. (The simulator
        # crashes nodes itself and turns this off.)
        if self.durable_sends:
            self.log.flush()
        return out

    def receive(self, data: bytes, t: int) -> Output:
        self.counters.datagrams_in += 1
        self.counters.bytes_in += len(data)
        try:
            msg = decode(data)
        except WireError as exc:
            self.counters.malformed += 1
            self.dropped(t, f"malformed:{exc.reason}", str(exc))
            return Output()
        reason = self.gate.check(msg)
        if reason is not None:
            self.counters.rejected += 1
            h = msg.header
            self.dropped(t, f"rejected:{reason}",
                         f"{h.type.name} from {h.sender} (origin {h.origin}, rseq {h.rseq}, "
                         f"seq {h.seq})")
            return Output()
        return self.deliver(msg, t)

    def dropped(self, t: int, reason: str, detail: str) -> None:
        """Count a refused datagram; log the first few of each reason (a flood must not
        flood the delivery log too)."""
        n = self.counters.reasons.get(reason, 0) + 1
        self.counters.reasons[reason] = n
        if n <= DROP_LOG_LIMIT:
            self.log.write(t, self.clock.local(t), "drop", reason=reason, detail=detail)

    def deliver(self, msg: Message, t: int) -> Output:
        """A datagram already decoded (the simulator shares one decode among receivers)."""
        src = msg.header.sender
        if self.log_arrivals:  # `capture: {arrivals: true}` (docs/link-model.md)
            h = msg.header
            self.log.write(t, self.clock.local(t), "arrive", src=self.names.get(src, str(src)),
                           type=h.type.name, rseq=h.rseq, flags=h.flags)
        blocked_in = self.blocked_in
        if blocked_in and src in blocked_in:
            return Output()
        clock = self.clock  # SkewedClock.local, inlined for the common undrifted clock
        lt = clock.local(t) if clock.drift_ppm else t + clock.offset_ns
        fd = self.fd
        suspected = fd.suspected
        if suspected and src in suspected:
            actions = fd.heard(src, lt)
            if msg.header.type != ALIVE:
                actions += self.protocol.on_message(src, msg, lt)
            else:
                actions += fd.on_alive(src, msg.header, lt)
        else:
            fd.last_heard[src] = lt  # the common case of FailureDetector.heard, inlined
            # The protocol's own list: not extended in place (copied below if need be).
            if msg.header.type == ALIVE:
                actions = fd.on_alive(src, msg.header, lt)
            else:
                seq = self.native_sequencer
                actions = (seq.on_message(src, msg, lt) if seq is not None
                           else self.protocol.on_message(src, msg, lt))
        if fd.changes:
            actions = actions + self._suspicions(lt)
        return self._process(actions, t)

    def timer(self, key: str, t: int) -> Output:
        lt = self.clock.local(t)
        if key.startswith("fd:"):
            return self._process(self.fd.on_timer(lt) + self._suspicions(lt), t)
        seq = self.native_sequencer
        return self._process(seq.on_timer(key, lt) if seq is not None
                             else self.protocol.on_timer(key, lt), t)

    def _suspicions(self, lt: int) -> list[Any]:
        """Tell the protocol what the failure detector changed its mind about."""
        if not self.fd.changes:
            return []
        actions: list[Any] = []
        for member, suspected in self.fd.drain_changes():
            actions += self.protocol.on_suspect(member, suspected, lt)
        return actions

    def new_rate(self, rates: dict[str, float], t: int, source: str) -> Output:
        """The application renegotiates its rate (004 §3.2 `new-rate`): a workload schedule
        entry or `testbed:type=QoS` `newRate`. Logged as `ev=new-rate`."""
        lt = self.clock.local(t)
        self.log.write(t, lt, "new-rate", source=source, **rates)
        if self.arrivals is not None:
            self.arrivals.renegotiate(rates)
        actions: list[Any] = []
        # The application's own reservation (`workload.reserve`) follows its rate.
        new_rate = rates.get("avg", rates.get("rate"))
        mine = self.reservations.by_key.get("workload")
        if mine is not None and new_rate and self.app_rate:
            actions.append(Reserve(mine.rate_bps * new_rate / self.app_rate, mine.burst_bytes,
                                   "workload"))
        if new_rate:
            self.app_rate = new_rate
        return self._process(actions + self.protocol.on_new_rate(dict(rates), lt), t)

    def rate_change(self, rates: dict[str, float], tell: bool, t: int) -> Output:
        """A workload schedule entry: the application moves to `rates` and, unless it
        misbehaves (`tell` False, logged as `ev=overrun`), renegotiates with the protocol."""
        if tell:
            return self.new_rate(rates, t, "workload")
        self.log.write(t, self.clock.local(t), "overrun", **rates)
        if self.arrivals is not None:
            self.arrivals.renegotiate(rates)
        return Output()

    def progress(self) -> dict[str, Any]:
        """What the quiescence check needs: this incarnation and the messages it sent, final
        deliveries per origin, per origin the deliveries of each later incarnation of it
        (`incarnations`: name -> {incarnation: n}; mids of incarnation k are numbered from
        k * INCARNATION_SPAN, docs/protocols.md "Restarts"), and per origin the first mno
        this incarnation final-delivered (`first`: where it joined that stream)."""
        late: dict[str, dict[str, int]] = {}
        for (o, inc), n in self.fnl_late.items():
            late.setdefault(self.names[o], {})[str(inc)] = n
        return {"incarnation": self.cfg.incarnation, "sent": self.sent,
                "delivered": {self.names[o]: n for o, n in self.fnl_from.items()},
                "incarnations": late,
                "first": {self.names[o]: n for o, n in self.fnl_first.items()}}

    def _count_late(self, origin: int, mno: int, n: int) -> None:
        key = (origin, mno // INCARNATION_SPAN)
        self.fnl_late[key] = self.fnl_late.get(key, 0) + n

    def stop(self, t: int) -> None:
        c = self.counters
        self.log.write(t, self.clock.local(t), "stop", malformed=c.malformed,
                       rejected=c.rejected, errors=c.errors, drops=dict(sorted(c.reasons.items())))
        self.log.close()

    def _process(self, actions: list[Any], t: int) -> Output:
        # Most events (an arrival that is only logged, an ACK) send nothing and arm no timer:
        # they all return the one shared empty Output, and the lists are built on first use.
        if not actions:
            return NOTHING
        sends: list[tuple[int | None, bytes, Message]] | None = None
        timers: list[tuple[str, int]] | None = None
        lt: int | None = None
        for a in actions:
            kind = type(a)
            # `a` is Any: each branch reads its fields through the narrowed type (`cast`),
            # natively when compiled, not through a generic attribute look-up.
            if kind is Send:
                snd = cast(Send, a)
                if sends is None:
                    sends = []
                msg = snd.msg
                sends.append((snd.dst, encode(msg), msg))
            elif kind is SetTimer:
                st = cast(SetTimer, a)
                if timers is None:
                    timers = []
                timers.append((st.key, self.clock.duration_to_true(st.delay_ns)))
            elif kind is Reserve:
                more = self._reserve(a, t)
                if more.sends:
                    sends = (sends or []) + more.sends
                if more.timers:
                    timers = (timers or []) + more.timers
            elif kind is Received:  # _record's commonest cases, inlined
                rcv = cast(Received, a)
                lt = self.clock.local(t) if lt is None else lt
                self.log.delivery(t, lt, "recv", self.names[rcv.origin], rcv.mno, 0,
                                     rcv.size, rcv.instance)
            elif kind is FinalDeliver:
                fnl = cast(FinalDeliver, a)
                lt = self.clock.local(t) if lt is None else lt
                self.counters.fnl += 1
                origin = fnl.origin
                fnl_from = self.fnl_from
                if origin not in fnl_from:
                    self.fnl_first[origin] = fnl.mno
                fnl_from[origin] = fnl_from.get(origin, 0) + 1
                if fnl.mno >= INCARNATION_SPAN:
                    self._count_late(origin, fnl.mno, 1)
                self.log.delivery(t, lt, "fnl", self.names[origin], fnl.mno, fnl.seq,
                                     fnl.size, fnl.instance)
            else:
                lt = self.clock.local(t) if lt is None else lt
                self._record(a, t, lt)
        if sends is None and timers is None:
            return NOTHING
        return Output(sends, timers)

    def _reserve(self, a: Reserve, t: int) -> Output:
        """Admission control answers at once (004 §2.1: reservations take effect
        immediately); a refusal is logged and counted, and the layer sees it either way."""
        ans = self.reservations.reserve(a.key, a.rate_bps, a.burst_bytes, t)
        lt = self.clock.local(t)
        self.log.write(t, lt, "reserve", key=ans.key, rate_bps=ans.rate_bps,
                       burst=ans.burst_bytes, granted=ans.granted, reason=ans.reason)
        return self._process(self.protocol.on_reserve_result(ans.key, ans.granted,
                                                             ans.rate_bps, ans.reason, lt), t)

    def _record(self, a: Any, t: int, lt: int) -> None:
        kind = type(a)
        if kind is Received:
            self.log.delivery(t, lt, "recv", self.names[a.origin], a.mno, 0, a.size,
                              a.instance)
        elif kind is FinalDeliver:
            self.counters.fnl += 1
            if a.origin not in self.fnl_from:
                self.fnl_first[a.origin] = a.mno
            self.fnl_from[a.origin] = self.fnl_from.get(a.origin, 0) + 1
            if a.mno >= INCARNATION_SPAN:
                self._count_late(a.origin, a.mno, 1)
            self.log.delivery(t, lt, "fnl", self.names[a.origin], a.mno, a.seq, a.size,
                              a.instance)
        elif kind is OptDeliver:
            self.counters.opt += 1
            self.log.delivery(t, lt, "opt", self.names[a.origin], a.mno, 0, a.size,
                              a.instance)
        elif kind is EnsuredDeliver:
            self.log.write(t, lt, "ensured", mid=f"{self.names[a.origin]}:{a.mno}",
                           service=a.service)
        elif kind is Log and a.ev == "send":
            self.sent += 1
            self.log.delivery(t, lt, "send", self.cfg.name, a.fields["mno"], 0,
                              a.fields["size"])
        elif kind is Log:
            fields = dict(a.fields)
            if a.ev == "state":
                self._revoke(fields.get("revoked") or ())
            if "member" in fields:
                fields["member"] = self.names[fields["member"]]
            if "members" in fields:
                fields["members"] = [self.names[m] for m in fields["members"]]
            if "deps" in fields:  # message ids (origin, mno), as mids
                fields["deps"] = [f"{self.names[o]}:{n}" for o, n in fields["deps"]]
            if "mno" in fields:
                origin = fields.pop("origin", self.cfg.node_id)
                fields["mid"] = f"{self.names[origin]}:{fields.pop('mno')}"
            self.log.write(t, lt, a.ev, **fields)

    def _revoke(self, mids: Any) -> None:
        """A state transfer revoked these deliveries (001 §4.1.2, analysis/revocation.py):
        they no longer count in `progress()`, so the drain waits for them to come again."""
        ids = {name: i for i, name in self.names.items()}
        for mid in mids:
            name, _, mno = str(mid).rpartition(":")
            origin = ids.get(name)
            if origin is not None and self.fnl_from.get(origin, 0) > 0:
                self.fnl_from[origin] -= 1
                if mno.isdigit() and int(mno) >= INCARNATION_SPAN:
                    self._count_late(origin, int(mno), -1)


# Member id -> name maps, one per distinct membership: the hundred nodes of one simulation
# share one (read-only) dict and its strings, which the delivery log reads at every line --
# a hundred copies of them missed the CPU caches. Bounded: a long-lived process (explore) runs
# many groups.
_NAMES: dict[tuple[tuple[int, str], ...], dict[int, str]] = {}


def _shared_names(members: list[Member]) -> dict[int, str]:
    key = tuple((m.id, m.name) for m in members)
    names = _NAMES.get(key)
    if names is None:
        if len(_NAMES) >= 64:
            _NAMES.clear()
        names = _NAMES[key] = dict(key)
    return names


def resolve_params(cfg: NodeConfig) -> dict[str, Any]:
    """The protocol's params with each host-naming one (per the catalogue) as `<name>_id`,
    plus the node's `incarnation`, `start_at_ns`, `member_names` and `payload_size`."""
    ids = {m.name: m.id for m in cfg.members}
    params = dict(cfg.params)
    params["incarnation"] = cfg.incarnation
    # What the QoS protocols (004) need of the run: the configured start (their common epoch,
    # nodes/protocols/qos_common.py), host names (per-host rates) and the payload size (the
    # wire bytes they reserve for).
    params["start_at_ns"] = cfg.start_at_ns
    params["member_names"] = {m.id: m.name for m in cfg.members}
    params["payload_size"] = cfg.workload.size
    entry = catalogue.find(cfg.protocol)
    for key in entry.host_params() if entry is not None else ():
        if params.get(key) is not None:
            params[f"{key}_id"] = ids[params.pop(key)]
        else:
            params.pop(key, None)
    if entry is not None and entry.resolve_hosts is not None:
        params = entry.resolve_hosts(params, ids)
    return params
