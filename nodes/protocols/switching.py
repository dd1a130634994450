"""Switching total-order protocols without stopping the flow (001 ch. 2, Fig. 2.1), with the
RABP and stop-the-flow baselines of 001 §2.2.2.

The layer runs two or more total-order instances from the catalogue (`instances`: name,
protocol, params) and hands the application one total order across switches.

Message identity (001 §2.1): every application message gets the layer's own id (origin, sn),
prefixed to the payload handed to the instances (`PREFIX`: flags, sn). The two copies of one
message, one per instance, carry the same sn: that is how the watermark `wm[origin]` (Fig. 2.1
`deliv`; a watermark suffices because every instance is FIFO) drops the second copy, and how
the checkers catch a double delivery. The instance's own (origin, mno) never reaches the log.

Wire: an instance's datagrams travel as they are, one header, except the header's `proto`
byte, which carries the instance tag instead of the instance's wire id (`TAG_BASE + tag`,
registered with nodes/wire.py so that the node decodes them; catalogue wire ids stay below
`TAG_BASE`). The receiving layer puts the instance's wire id back and hands the datagram to
that instance's edge gate (nodes/edge.py), then to the instance: one decode and one full gate
check per datagram, as for a protocol on its own (an encapsulating header decoded and checked
twice halved the throughput: bench/switching_overhead.py). Instances
are created per switch epoch (tag = epoch mod TAGS + 1), so traffic of a torn-down instance is
recognised by its tag alone (a datagram delayed across TAGS switches would be taken for the
current instance's: its reliable layer and gate then judge it); datagrams for the next
epoch's tag that arrive before this node has created that instance are kept and replayed
(S5: early deliveries are buffered, not dropped).

Control: the switch request (`SWITCH`) and the end-of-switch notice (`DONE`) are
TO-broadcast on the current instance (001 Fig. 2.1 l.8 uses a reliable broadcast; Appia and
this layer use the current TO instead). Every node so meets SWITCH at the same point
of the current instance's order, concurrent requests are settled by that order (the first
SWITCH(epoch+1) wins, the others are `switch_rejected` everywhere), and "every node has
finished the previous switch" (001 §2.1: no concurrent adaptations) is the same decision
everywhere: DONE(e) from every member delivered before the next SWITCH.

Modes:
- `live` (Fig. 2.1): on SWITCH, broadcast on both instances; the first message on the old
  instance after the switch (or a NULL after `null_timeout_ms`, prose §2.1) is flagged; the
  new instance's deliveries wait in `undeliv`, in the new instance's order; once every
  member's flag is delivered from the old instance, the layer delivers `undeliv` and continues
  on the new instance (l.28-35). Later old-instance deliveries are discarded (prose §2.1).
- `rabp` (001 §2.2.2, Rütti et al.): at CHANGE the node stops using the old
  instance and re-issues its own undelivered messages, same ids, on the new one (R0-R4 below).
  Everything the old instance orders after the CHANGE is discarded (R4), also when it comes
  up in the same batch as the CHANGE (one ORDER names several messages): `_lift` once took
  "current instance, nothing switching, nothing held" for the whole batch, so a node
  delivered the batch's rest from the instance it had just left, messages the others
  delivered later from the new one (total order broken at every fast switch).
- `stop` (001 §2.2.2): at STOP a node queues new application messages and confirms by a
  flagged NULL on the old instance; once every confirmation is delivered (FIFO: everything
  the member sent before it is delivered too) it sends the queue on the new instance (T1-T5,
  with the confirmations ordered by the old instance instead of collected by a coordinator).

`payload_once` (§2.2.1, S10): while switching, the old instance carries a STUB
(the id only) and the new one the payload; a STUB delivery waits until the new instance has
received the payload (logged as `stub_wait`), and so does every later delivery of the old
instance (`held`), the rest of the STUB's own batch included. The batch that carries the
SWITCH can carry such a STUB too; the rest of that batch once bypassed `held` (the batch was
judged "nothing switching, nothing held" at its start), so a node delivered later messages
ahead of the STUB under loss plus duplication. Whether a delivery may skip Fig. 2.1's
routing is now decided again after every control or held delivery in a batch.

Rule labels used below. Live mode: S1-S2 the first SWITCH(epoch+1) in the current order
wins, once every member finished the previous switch; S3 the first old-instance message after
SWITCH is flagged; S4 without one within `null_timeout_ms`, a flagged NULL; S5 datagrams for
the next epoch's instance that arrive before it exists are kept and replayed; S8 the old
instance is torn down once every member said DONE; S10 `payload_once`'s STUB waits for its
payload. RABP: R0 a node keeps its own undelivered messages (`mine`); R1 each broadcast joins
them; R3 at CHANGE they are re-issued, same ids and in order, on the new instance; R4 the old
instance's later deliveries are discarded. Stop: T1-T5 as described under `stop` above (T2 new
messages wait in a queue, confirmed by a flagged NULL; T4 the queue goes out on the new
instance).

Failures (ours): a member that crashes while a switch is under way never sends
its flag, so Fig. 2.1 alone never ends the switch. When the node's failure detector has
suspected a member for `exclude_after_ms` while a switch waits for that member's flag or DONE,
the node TO-broadcasts EXCLUDE(member) on the current instance; every node applies it at the
same point of that order and stops waiting for the member's flag (l.16) and DONE (S8) from
there on, so all nodes end the switch at one switch point (a local, unagreed exclusion
would not). INCLUDE undoes it when the member is heard again. The old instance
must itself survive the crash (a sequencer instance whose sequencer crashed orders nothing
more). Failure-detector changes go to every running instance, and a new instance is told who
is suspected when it is created: it would otherwise never hear of a member that crashed
before its epoch and wait for that member's acknowledgements (its ordering stopped for good
under loss). Actions the layer does not consume (a future `ensured` notification,
reservations) pass through unchanged.

An excluded member may be alive behind a partition; after the heal it must reach the same
switch point (Fig. 2.1 l.16: every node ends the switch at the same place of the old order)
and lose nothing (TO3). Two causes once broke that: (1) S8 tore the old instance down once
every *non-excluded* member said DONE, so nobody answered the excluded member's repairs of
the old order and it never reached the switch point (it stopped delivering for good); such
an old instance is now kept (`retired`, at most RETIRED_LIMIT, delivering nothing) until
that member's DONE too. (2) What the excluded member sent on the old instance while cut off
is ordered after the switch point, where every node discards it; Fig. 2.1's "nothing is lost
at the switch" (every message outside the old prefix is also on the new instance) held only
for members whose flag made the prefix. Now every node re-issues its undelivered messages on
the new instance, same ids and in order, when it starts the switch (live; stop: when it
ends; RABP did already, R3): the watermark drops the copies of those the old prefix holds.

Restarts: a restarted process starts at epoch 0 and cannot learn the group's epoch (no state
transfer), so once the group has switched it can never rejoin: it is out for good, as 001
§4.1.2 forces a member that lost progress to leave. It announces its incarnation and epoch
(`_announce`); a node that has met a SWITCH since holds it suspected in every instance, so
no acknowledgement window waits for a process that can never acknowledge (alive and never
suspected, it held the current instance's window, and the group stopped after a window of
unacknowledged messages), and a switch that waits for it excludes it as a crashed member.
Every member answers the announcement with its epoch. The restarted process delivers
nothing until every member it does not suspect has answered with its own epoch (then it is
admitted and follows the group's next switch); an answer from a later epoch puts it out,
and it delivers nothing more: the instance it started on is one the group has left, which
may still order the newcomer's messages (a retired instance answers repairs) that nobody
else delivers.

Liveness (what the layer promises, 001 ch. 2 promises nothing under failures): progress
whenever the instance in use orders (and, during a switch, the old one until the switch
point); crashes of members no instance depends on (EXCLUDE), healed partitions (above). Not
claimed: a crash of a host an instance needs (the sequencer of a `sequencer` instance, any
member of a `lamport`, `token-ring` or `moving-sequencer` one) stops the group for good,
before, during or after a switch, as it stops that protocol alone; the switch cannot end
without the old instance's order, and nothing else can tell the survivors where the old
order stopped (that needs a view-synchronous membership, 001 §4.1). Nor is catching up
claimed for a member excluded more than RETIRED_LIMIT switches ago.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from nodes.protocols.base import (
    Action,
    Attribute,
    CommonParams,
    FinalDeliver,
    Layer,
    LayerBase,
    Log,
    Managed,
    ManagedHost,
    Operation,
    OptDeliver,
    Received,
    Send,
    SetTimer,
    ms,
    param,
)
from nodes.protocols.stack import Hosted, Lookup, TimerKeys, fan_out
from nodes.wire import (
    PAYLOAD_RULES,
    RULED_PROTOS,
    Header,
    Message,
    MsgType,
    register_proto,
)

WIRE_ID = 17
MODES = ("live", "rabp", "stop")
# Prefix flags: FLAG marks a member's first old-instance message after SWITCH;
# NULL carries no application message; STUB is the id of a payload sent on the new instance;
# CTRL carries a SWITCH or DONE body instead of an application payload.
FLAG, NULL, STUB, CTRL = 1, 2, 4, 8
KNOWN_FLAGS = FLAG | NULL | STUB | CTRL
PREFIX = struct.Struct("!BI")  # flags, sn
CONTROL = struct.Struct("!BIB")  # kind, epoch, instance index
SWITCH, DONE, EXCLUDE, INCLUDE = 1, 2, 3, 4  # EXCLUDE/INCLUDE: CONTROL's epoch is the member
TICK, NULL_KEY = "sw:tick", "sw:null"
DATA = MsgType.DATA
# A restarted process's announcement (`_announce`): header `proto` WIRE_ID, type HEARTBEAT,
# `aux` its incarnation, `seq` its switch epoch, no payload; every HELLO_EVERY_NS until it is
# admitted or out. Every member answers each one with the same header, `aux` 0 and `seq` its
# own epoch (`_on_reply`).
HELLO = MsgType.HEARTBEAT
HELLO_EVERY_NS = 100_000_000
EARLY_LIMIT = 65536  # datagrams kept for an instance not yet created; past that, NACKs repair
DROP_LOG_LIMIT = 10
RETIRED_LIMIT = 8  # old instances kept for members that have not finished their switch
# Instance tags on the wire: header `proto` TAG_BASE + tag, tag in 1..TAGS.
TAG_BASE, TAGS = 128, 127
for _tag in range(1, TAGS + 1):
    register_proto(TAG_BASE + _tag, f"switching-tag-{_tag}")
# The last datagram restored in this process, by the identity of the received message: the
# simulator delivers one decoded message to every receiver (nodes/sim.py), so the receivers
# after the first reuse the first one's (frozen, so sharing is safe).
_LAST: list[tuple[Message, Message] | None] = [None]


@dataclass(frozen=True)
class SwitchingParams(CommonParams):
    instances: list[dict[str, Any]] | None = param(
        None, "the total-order instances: a list of {name, protocol, params} (at least two; "
              "default: two sequencers named seq-a and seq-b)")
    initial: str | None = param(None, "the instance that starts (default: the first)")
    mode: str = param("live", "live (001 Fig. 2.1), rabp or stop (001 §2.2.2 baselines)",
                      pattern="^(live|rabp|stop)$")
    payload_once: bool = param(False, "while switching, send the payload on the new instance "
                                      "only (001 §2.2.1)")
    null_timeout_ms: float = ms("live: send a flagged NULL when nothing was sent this long "
                                "after SWITCH (prose §2.1; 0 = Fig. 2.1 l.13)", 30, ge=0)
    tick_ms: float = ms("period at which an idle node looks at management requests and the "
                        "policy (a busy node looks at every event)", 20)
    adapt_to_all: str | None = param(None, "policy: switch to this instance when every member "
                                           "has sent within adapt_window_ms")
    adapt_to_one: str | None = param(None, "policy: switch to this instance when at most one "
                                           "member has sent within adapt_window_ms")
    adapt_window_ms: float = ms("the policy's observation window", 500)
    exclude_after_ms: float = ms("a member suspected this long while a switch waits for it is "
                                 "excluded from the switch (agreed in the current order)", 1000)


DEFAULT_INSTANCES = [{"name": "seq-a", "protocol": "sequencer"},
                     {"name": "seq-b", "protocol": "sequencer"}]


def instance_specs(params: dict[str, Any]) -> list[dict[str, Any]]:
    return list(params.get("instances") or DEFAULT_INSTANCES)


def check_params(params: dict[str, Any], hosts: list[str], find: Callable[[str], Any],
                 params_model: Callable[[str], Any]) -> list[tuple[tuple[Any, ...], str]]:
    """Spec-time checks of the nested instances (001 §2.2.1: switching needs two or more):
    names unique, protocols from the catalogue (not `switching` itself), their params against
    that protocol's model, host-naming params against the topology; `initial` and the policy
    targets name instances. `find` and `params_model` are the catalogue's, which passes them
    (no protocol module imports the catalogue)."""
    from pydantic import ValidationError

    problems: list[tuple[tuple[Any, ...], str]] = []
    specs = instance_specs(params)
    base = ("protocol", "params", "instances")
    if len(specs) < 2:
        return [(base, f"switching needs at least two instances, got {len(specs)}")]
    names: list[str] = []
    for i, spec in enumerate(specs):
        if not isinstance(spec, dict) or set(spec) - {"name", "protocol", "params"} or \
                "name" not in spec or "protocol" not in spec:
            problems.append(((*base, i), "an instance is {name, protocol, params}"))
            continue
        name, proto = str(spec["name"]), str(spec["protocol"])
        if name in names:
            problems.append(((*base, i, "name"), f"duplicate instance name {name!r}"))
        names.append(name)
        entry = find(proto)
        if entry is None or proto == "switching":
            problems.append(((*base, i, "protocol"), f"unknown total-order protocol {proto!r}"))
            continue
        sub = spec.get("params") or {}
        try:
            params_model(proto).model_validate(sub)
        except ValidationError as exc:
            for err in exc.errors():
                msg = "unknown parameter" if err["type"] == "extra_forbidden" else err["msg"]
                problems.append(((*base, i, "params", *err["loc"]), str(msg)))
        for key in entry.host_params():
            if sub.get(key) is not None and sub[key] not in hosts:
                problems.append(((*base, i, "params", key), f"unknown {key} host {sub[key]!r}"))
    for key in ("initial", "adapt_to_all", "adapt_to_one"):
        if params.get(key) is not None and params[key] not in names:
            problems.append((("protocol", "params", key),
                             f"no instance named {params[key]!r}; instances: "
                             f"{', '.join(names)}"))
    return problems


def resolve_hosts(params: dict[str, Any], ids: dict[str, int],
                  find: Callable[[str], Any]) -> dict[str, Any]:
    """The instances' host-naming params as member ids (`<name>_id`), as the node core does for
    a top-level protocol (nodes/core.py `resolve_params`); `find` is the catalogue's."""
    specs = []
    for spec in instance_specs(params):
        sub = dict(spec.get("params") or {})
        entry = find(spec["protocol"])
        for key in entry.host_params() if entry is not None else ():
            if sub.get(key) is not None:
                sub[f"{key}_id"] = ids[sub.pop(key)]
        specs.append({**spec, "params": sub})
    return {**params, "instances": specs}


@dataclass
class Instance:
    """One total-order instance of one epoch."""

    tag: int
    index: int  # into the configured instances
    name: str
    epoch: int
    host: Hosted  # the instance's layer, edge gate and timer namespace (its tag)
    # (origin, instance mno) -> (flags, sn, size, control body): what the instance will
    # deliver, read from its data messages as they arrive (or are sent).
    ids: dict[tuple[int, int], tuple[int, int, int, bytes]] = field(default_factory=dict)
    label: str = ""  # deliveries' `proto`: switching#<name>, the instance that ordered them
    # nodes/wire.py's payload shapes when the instance's wire id is one they describe (the
    # node decoded the datagram under the tag, so they were not applied)
    rules: dict[MsgType, tuple[int, int, int]] | None = None

    def __post_init__(self) -> None:
        self.label = f"switching#{self.name}"


Entry = tuple[int, int, int, int, bytes]  # origin, flags, sn, size, control body


class Switching(LayerBase):
    proto = WIRE_ID

    def __init__(self, me: int, members: list[int], params: dict[str, Any], lookup: Lookup):
        self.lookup = lookup  # the catalogue's `get` (catalogue.py `_hosting`)
        self.me, self.members = me, list(members)
        self.all = frozenset(members)
        self.params = params
        self.specs = instance_specs(params)
        if len(self.specs) < 2:
            raise ValueError("switching needs at least two instances")
        self.names = [str(s["name"]) for s in self.specs]
        self.mode = str(params.get("mode", "live"))
        self.payload_once = bool(params.get("payload_once", False))
        self.null_ns = round(float(params.get("null_timeout_ms", 30)) * 1e6)
        self.tick_ns = round(float(params.get("tick_ms", 20)) * 1e6)
        self.adapt_all, self.adapt_one = params.get("adapt_to_all"), params.get("adapt_to_one")
        self.policy = self.adapt_all is not None or self.adapt_one is not None
        self.window_ns = round(float(params.get("adapt_window_ms", 500)) * 1e6)
        initial = params.get("initial") or self.names[0]
        self.initial = self.names.index(initial)
        self.incarnation = int(params.get("incarnation", 0))
        # Fig. 2.1 l.1-7.
        self.epoch = 0
        self.cur: Instance | None = None
        self.new: Instance | None = None
        self.old: Instance | None = None  # draining until DONE from every member (S8)
        # Old instances torn down (S8) before an excluded member said DONE: they keep
        # running, deliver nothing, and answer that member's repairs when it comes back
        # (a healed partition). switch epoch -> (instance, members whose DONE was seen).
        self.retired: dict[int, tuple[Instance, set[int]]] = {}
        self.switching = False
        self.stopped = False  # stop mode: application messages wait in `queue`
        self.flag_pending = False
        self.check: set[int] = set()
        self.done: set[int] = set()
        self.wm: dict[int, int] = {m: 0 for m in members}
        self.sn = self.incarnation * 1_000_000
        self.undeliv: list[Entry] = []
        self.early: list[tuple[int, Message]] = []  # datagrams for the next epoch's instance
        # Own messages not yet delivered, in sn order (RABP's R0; live and stop re-issue them
        # on the new instance too: `_reissue`).
        self.mine: dict[int, bytes] = {}
        self.queue: list[tuple[int, bytes]] = []  # stop: messages sent while stopped
        # payload_once: the current instance's deliveries behind a STUB without its payload
        self.held: list[tuple[Instance, Entry]] = []
        # payload_once: (origin, sn) -> payload size, as the new instance receives them
        self.payloads: dict[tuple[int, int], int] = {}
        self.recv_seen: set[tuple[int, int]] = set()
        self.last_sent: dict[int, int] = {}  # policy: origin -> local time of last delivery
        # (instance index, local time, why: "mgmt" for switchTo, "policy")
        self.requested: tuple[int, int, str] | None = None
        self.pending: int | None = None  # epoch of our SWITCH not yet delivered back
        self.delivered = 0
        # Statistics (testbed:type=TotalOrder,protocol=switching) and per-switch accounting.
        self.switch_count = 0
        self.last_switch_ms = 0.0
        self.started_at = 0
        self.dup_msgs = self.dup_bytes = 0
        self.last_old = (0, 0)  # the last delivery (origin, sn): `last_old` at a switch's end
        # (0, 0): none yet
        self.rejects: dict[str, int] = {}
        self.timer_keys = TimerKeys()  # "tag|key" -> (tag, key)
        # Members taken out of "every member" by an EXCLUDE delivered in the current order
        # (a crash during a switch must not block its end: `_on_membership`), and the
        # members this node's failure detector suspects now.
        self.excluded: set[int] = set()
        self.suspects: dict[int, int] = {}  # member -> local time suspected since
        self.proposed: set[int] = set()  # EXCLUDEs this node sent on the current instance
        self.exclude_after_ns = round(float(params.get("exclude_after_ms", 1000)) * 1e6)
        # Restarts (`_on_hello`): the newest incarnation announced per member, the members
        # restarted behind the group's switches (out for good: suspected in every instance),
        # and when this node (if restarted) last announced itself (-1: never).
        self.incarnations: dict[int, int] = {}
        self.gone: set[int] = set()
        self.hello_at = -1
        # A restarted process's admission (`_on_reply`): until every member it does not
        # suspect has answered its announcement with the same epoch, its deliveries wait
        # (`waiting`); an answer from a later epoch puts it out for good (`left`).
        self.waiting: list[Action] | None = [] if self.incarnation else None
        self.answered: set[int] = set()
        self.left = False

    # -- management (nodes/management/node_mbeans.py) ------------------------------------------
    @property
    def current(self) -> str:
        return self.cur.name if self.cur is not None else ""

    def managed(self, host: ManagedHost) -> list[Managed]:
        """The switching attributes and `switchTo` of `testbed:type=TotalOrder,protocol=
        switching` (001 §4.2: the protocol "can be changed at runtime"; Appia's
        getCurrentChannel and setCurrentChannel). A bad `switchTo` is a one-line error and
        changes nothing."""
        return [Managed("TotalOrder", (
            Attribute("CurrentAlgorithm", "str", lambda: self.current,
                      description="the instance whose order the application follows"),
            Attribute("Instances", "list", lambda: list(self.names),
                      description="the configured instances"),
            Attribute("Mode", "str", lambda: self.mode, description="live, rabp or stop"),
            Attribute("Switching", "bool", lambda: self.switching,
                      description="a switch is under way at this node"),
            Attribute("Epoch", "int", lambda: self.epoch, description="switches started"),
            Attribute("SwitchCount", "int", lambda: self.switch_count,
                      description="switches completed at this node"),
            Attribute("LastSwitchMs", "float", lambda: self.last_switch_ms,
                      description="duration of the last switch at this node (start to end), "
                                  "ms"),
            Attribute("Rejected", "dict", lambda: dict(self.rejects),
                      description="instance datagrams refused by the layer, per reason")),
            (Operation("switchTo", lambda name: self.request_switch(name, host.local_now()),
                       (("name", "str"),), "str", "switch the group to instance NAME"),))]

    def request_switch(self, name: str, now: int) -> str:
        """`switchTo NAME`: checked here, carried out at the next tick (a management call
        cannot emit actions). ValueError, with nothing changed, when it cannot be done."""
        if name not in self.names:
            raise ValueError(f"unknown instance {name!r}; instances: {', '.join(self.names)}")
        if self.switching or self.old is not None or self.requested is not None or \
                self.pending is not None:
            raise ValueError(f"a switch is in progress (epoch {self.epoch}); try again later")
        if name == self.current:
            raise ValueError(f"{name!r} is already the current instance")
        self.requested = (self.names.index(name), now, "mgmt")
        return f"switching to {name} (epoch {self.epoch + 1})"

    # -- Layer interface ------------------------------------------------------------------------
    def start(self, now: int) -> list[Action]:
        self.cur, out = self._create(self.initial, 0, now)
        if self.incarnation:
            out = self._gate(out + self._announce(now))
        return out + [SetTimer(TICK, self.tick_ns)]

    def broadcast(self, payload: bytes, now: int) -> list[Action]:
        self.sn += 1
        sn = self.sn
        out: list[Action] = [Log("send", {"mno": sn, "size": len(payload)})]
        self.mine[sn] = payload  # R1
        if self.requested is not None:
            out += self._tick(now)
        if self.stopped:
            self.queue.append((sn, payload))  # T2: no further messages until the switch ends
            return out
        out += self._send_app(sn, payload, now)
        return out if self.waiting is None else self._gate(out)

    def on_message(self, src: int, msg: Message, now: int) -> list[Action]:
        out = self._on_message(src, msg, now)
        return out if self.waiting is None else self._gate(out)

    def _on_message(self, src: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        tag = h.proto - TAG_BASE
        if not 1 <= tag <= TAGS:
            if h.proto == WIRE_ID and h.type is HELLO:
                return self._on_hello(h.sender, msg, now)
            return self._reject("sw:type", f"{h.type.name} under proto {h.proto}")
        cur = self.cur
        inst = cur if cur is not None and cur.tag == tag else self._by_tag(tag)
        if inst is None:
            if tag == self._tag(self.epoch + 1) and not self.switching:
                if len(self.early) < EARLY_LIMIT:
                    self.early.append((src, msg))  # S5: a faster node already uses it
                return []
            self.rejects["sw:stale"] = self.rejects.get("sw:stale", 0) + 1
            return []
        if self.requested is not None:
            return self._tick(now) + self._inner(inst, src, msg, now)
        return self._inner(inst, src, msg, now)

    def on_timer(self, key: str, now: int) -> list[Action]:
        out = self._on_timer(key, now)
        return out if self.waiting is None else self._gate(out)

    def _on_timer(self, key: str, now: int) -> list[Action]:
        if key == TICK:
            out = self._tick(now)
            if self.suspects:
                out += self._propose_exclusions(now)
            if self.waiting is not None and not self.left and \
                    now - self.hello_at >= HELLO_EVERY_NS:
                out += self._announce(now)
            return out + [SetTimer(TICK, self.tick_ns)]
        if key == NULL_KEY:
            return self._send_null(now)
        parsed = self.timer_keys.parse(key)
        if parsed is None or not parsed[0].isdigit():
            return []
        inst = self._by_tag(int(parsed[0]))
        return [] if inst is None else \
            self._lift(inst, inst.host.layer.on_timer(parsed[1], now), now)

    def on_suspect(self, member: int, suspected: bool, now: int) -> list[Action]:
        if member in self.gone:
            return []  # out for good (`_on_hello`): its instances keep it suspected
        out = self._suspicion(member, suspected, now) + self._each(
            lambda layer: layer.on_suspect(member, suspected, now), now)
        return out if self.waiting is None else self._gate(out)

    def on_view(self, members: list[int], now: int) -> list[Action]:
        return self._each(lambda layer: layer.on_view(members, now), now)

    def on_reserve_result(self, key: str, granted: bool, rate_bps: float, reason: str,
                          now: int) -> list[Action]:
        return self._each(
            lambda layer: layer.on_reserve_result(key, granted, rate_bps, reason, now), now)

    def on_new_rate(self, rates: dict[str, float], now: int) -> list[Action]:
        return self._each(lambda layer: layer.on_new_rate(rates, now), now)

    def _each(self, event: Callable[[Layer], list[Action]], now: int) -> list[Action]:
        """`event` on every live instance, its actions lifted."""
        instances = {inst.host: inst for inst in self._live()}
        return fan_out(list(instances), event,
                       lambda host, actions: self._lift(instances[host], actions, now))

    # -- instances ------------------------------------------------------------------------------
    @staticmethod
    def _tag(epoch: int) -> int:
        return epoch % TAGS + 1

    def _live(self) -> list[Instance]:
        return [i for i in (self.cur, self.new, self.old) if i is not None] + \
            [inst for inst, _ in self.retired.values()]

    def _by_tag(self, tag: int) -> Instance | None:
        for inst in (self.cur, self.new, self.old):
            if inst is not None and inst.tag == tag:
                return inst
        for inst, _ in self.retired.values():
            if inst.tag == tag:
                return inst
        return None

    def _create(self, index: int, epoch: int, now: int) -> tuple[Instance, list[Action]]:
        """A fresh instance of configured instance `index` for `epoch` (its tag the epoch's)."""
        spec = self.specs[index]
        sub = {**(spec.get("params") or {}), "incarnation": self.incarnation}
        tag = self._tag(epoch)
        host = Hosted(self.lookup(spec["protocol"]), self.me, self.members, sub, str(tag))
        if host.wire_id >= TAG_BASE:
            raise ValueError(f"{host.entry.name}: wire id {host.wire_id} collides with the "
                             f"switching tags ({TAG_BASE + 1}..{TAG_BASE + TAGS})")
        inst = Instance(tag, index, self.names[index], epoch, host)
        host.tag(TAG_BASE + tag)
        if host.wire_id in RULED_PROTOS:
            inst.rules = PAYLOAD_RULES
        layer = host.layer
        actions = layer.start(now)
        # What the failure detector says now, which a fresh instance would otherwise never
        # hear (it reports changes only): a member suspected before this epoch (crashed)
        # would hold the new instance's acknowledgement window forever.
        for member in sorted(self.suspects):
            actions = [*actions, *layer.on_suspect(member, True, now)]
        return inst, self._lift(inst, actions, now)

    def _inner(self, inst: Instance, src: int, msg: Message, now: int) -> list[Action]:
        """An instance's datagram (its tag in `proto`): the instance's wire id put back, the
        payload shape nodes/wire.py checks for that wire id, its gate, its data messages'
        prefixes read."""
        h = msg.header
        if h.proto - TAG_BASE != inst.tag:
            return self._reject("sw:proto", f"proto {h.proto} for instance {inst.name}")
        rules = inst.rules
        if rules is not None:
            rule = rules.get(h.type)
            if rule is not None and not _shape_ok(rule, len(msg.payload)):
                return self._reject("sw:payload",
                                    f"{h.type.name} payload of {len(msg.payload)} bytes")
        if inst.host.tagged:
            inner = msg  # the instance never reads `proto`; its gate expects the tag
        else:
            last = _LAST[0]
            if last is not None and last[0] is msg:
                inner = last[1]
            else:
                inner = Message(Header(h.type, inst.host.wire_id, h.flags, h.sender, h.rseq,
                                       h.origin, h.mno, h.seq, h.hint, h.slot, h.ts, h.aux,
                                       h.length), msg.payload)
                _LAST[0] = (msg, inner)
        reason = inst.host.gate.check(inner)
        if reason is not None:
            return self._reject(f"sw:rejected:{reason}", f"{h.type.name} from {h.sender}")
        if h.type is DATA:
            payload = msg.payload
            flags, sn = PREFIX.unpack_from(payload) if len(payload) >= PREFIX.size else (0, 0)
            if flags == 0 and sn >= 1:  # an application message, the common case
                parsed = (0, sn, len(payload) - PREFIX.size, b"")
            else:
                got = self._parse(payload)
                if isinstance(got, str):
                    return self._reject("sw:prefix", got)
                parsed = got
            inst.ids.setdefault((h.origin, h.mno), parsed)
            if inst is self.new and self.payload_once and \
                    not parsed[0] & (STUB | NULL | CTRL):
                self.payloads[(h.origin, parsed[1])] = parsed[2]
        out = self._lift(inst, inst.host.layer.on_message(src, inner, now), now)
        if self.held and self.payloads:
            out += self._release_held(now)
        return out

    def _parse(self, payload: bytes) -> tuple[int, int, int, bytes] | str:
        if len(payload) < PREFIX.size:
            return f"payload of {len(payload)} bytes has no switching prefix"
        flags, sn = PREFIX.unpack_from(payload)
        if flags & ~KNOWN_FLAGS:
            return f"unknown prefix flags {flags:#x}"
        if flags & CTRL:
            body = payload[PREFIX.size:]
            if len(body) != CONTROL.size:
                return f"control body of {len(body)} bytes"
            kind, value, index = CONTROL.unpack(body)
            if kind in (EXCLUDE, INCLUDE):
                if value not in self.all:
                    return f"control kind {kind} for member {value}"
            elif kind not in (SWITCH, DONE) or index >= len(self.specs):
                return f"control kind {kind} for instance {index}"
            return flags, 0, 0, body
        if not flags & NULL and sn < 1:
            return "application message numbered 0"
        return flags, sn, len(payload) - PREFIX.size, b""

    def _reject(self, reason: str, detail: str) -> list[Action]:
        n = self.rejects[reason] = self.rejects.get(reason, 0) + 1
        return [Log("drop", {"reason": reason, "detail": detail})] if n <= DROP_LOG_LIMIT else []

    def _lift(self, inst: Instance, actions: list[Action], now: int) -> list[Action]:
        """An instance's actions as this layer's: datagrams wrapped with the instance tag,
        timers namespaced, deliveries translated to the layer's ids (and routed by Fig. 2.1),
        everything else passed through."""
        out: list[Action] = []
        if not actions:
            return out
        ids = inst.ids
        wm = self.wm
        tagged = TAG_BASE + inst.tag
        # Not switching, nothing held, this instance current: a plain delivery needs none of
        # Fig. 2.1's routing (the common case, inlined for speed).
        plain = inst is self.cur and self.new is None and not self.held
        for a in cast(list[Any], actions):  # the receive path's hot loop: `type(a) is`
            kind = type(a)
            if kind is Send:
                h = a.msg.header
                if h.proto == tagged:
                    out.append(a)  # stamped by the instance's reliable layer already
                    continue
                header = Header(h.type, tagged, h.flags, h.sender, h.rseq,
                                h.origin, h.mno, h.seq, h.hint, h.slot, h.ts, h.aux, h.length)
                out.append(Send(a.dst, Message(header, a.msg.payload)))
            elif kind is Received:
                rcv = a
                known = ids.get((rcv.origin, rcv.mno))
                if known is not None and not known[0] & (NULL | CTRL | STUB) and \
                        known[1] > wm[rcv.origin]:
                    if plain and self.old is None:
                        out.append(Received(rcv.origin, known[1], known[2], inst.label))
                        continue  # one instance alive: no second copy to log
                    key = (rcv.origin, known[1])
                    if key not in self.recv_seen:
                        self.recv_seen.add(key)
                        out.append(Received(rcv.origin, known[1], known[2], inst.label))
            elif kind is FinalDeliver:
                fnl = a
                known = ids.pop((fnl.origin, fnl.mno), None)
                if known is None:
                    out.append(Log("switch_unknown", {"instance": inst.name,
                                                      "origin": fnl.origin,
                                                      "inner_mno": fnl.mno}))
                    continue
                flags, sn, size, body = known
                origin = fnl.origin
                if plain and not flags:
                    if sn > wm[origin]:  # _from_cur, l.22-25
                        wm[origin] = sn
                        self.delivered += 1
                        if self.recv_seen:
                            self.recv_seen.discard((origin, sn))
                        if self.policy:
                            self.last_sent[origin] = now
                        if self.mine:
                            self.mine.pop(sn if origin == self.me else -1, None)
                        if self.payloads:
                            size = self.payloads.pop((origin, sn), size)
                        self.last_old = (origin, sn)
                        out.append(FinalDeliver(origin, sn, self.delivered, size, inst.label))
                    continue
                out += self._to_deliver(inst, (origin, flags, sn, size, body), now)
                # A control delivery may have switched (RABP's CHANGE leaves this instance
                # at once) or held the sequence: the rest of the batch takes the full route.
                plain = inst is self.cur and self.new is None and not self.held
            elif kind is SetTimer:
                out.append(inst.host.timer(a))
            elif kind is OptDeliver:
                opt = a
                known = ids.get((opt.origin, opt.mno))
                if known is not None and inst is self.cur and not known[0] & (NULL | CTRL) \
                        and known[1] > self.wm[opt.origin]:
                    out.append(OptDeliver(opt.origin, known[1], known[2], inst.label))
            elif kind is Log and a.ev == "send":
                continue  # the layer logs its own `send` (its ids, not the instance's)
            else:
                out.append(a)
        return out

    # -- sending (Fig. 2.1 l.18-21) ---------------------------------------------------------------
    def _to_send(self, inst: Instance, flags: int, sn: int, body: bytes, now: int) -> list[Action]:
        actions = inst.host.layer.broadcast(PREFIX.pack(flags, sn) + body, now)
        for a in actions:
            if isinstance(a, Log) and a.ev == "send":
                size = 0 if flags & CTRL else len(body)
                inst.ids.setdefault((self.me, int(a.fields["mno"])),
                                    (flags, sn, size, body if flags & CTRL else b""))
        return self._lift(inst, actions, now)

    def _send_app(self, sn: int, payload: bytes, now: int) -> list[Action]:
        assert self.cur is not None
        if not self.switching or self.mode != "live":
            return self._to_send(self.cur, 0, sn, payload, now)
        assert self.new is not None
        flags = FLAG if self.flag_pending else 0  # S3: the first old-instance message is flagged
        self.flag_pending = False
        self.dup_msgs += 1
        self.dup_bytes += len(payload)
        if self.payload_once:
            out = self._to_send(self.cur, flags | STUB, sn, b"", now)
            self.payloads[(self.me, sn)] = len(payload)
        else:
            out = self._to_send(self.cur, flags, sn, payload, now)
        return out + self._to_send(self.new, 0, sn, payload, now)

    def _send_null(self, now: int) -> list[Action]:
        """S4: nothing was sent since SWITCH; a flagged NULL lets the switch end."""
        if not (self.switching and self.flag_pending and self.cur is not None):
            return []
        self.flag_pending = False
        return self._to_send(self.cur, FLAG | NULL, 0, b"", now)

    def _control(self, kind: int, epoch: int, index: int, now: int) -> list[Action]:
        assert self.cur is not None
        return self._to_send(self.cur, CTRL, 0, CONTROL.pack(kind, epoch, index), now)

    def _tick(self, now: int) -> list[Action]:
        out: list[Action] = []
        if self.requested is None and self.me == min(self.members):
            out += self._policy(now)
        if self.requested is not None and not self.switching and self.old is None:
            index, at, reason = self.requested
            self.requested = None
            if index != (self.cur.index if self.cur is not None else -1):
                out.append(Log("switch", {"phase": "request", "epoch": self.epoch + 1,
                                          "to": self.names[index], "mode": self.mode,
                                          "reason": reason,
                                          "wait_ms": round((now - at) / 1e6, 3)}))
                self.pending = self.epoch + 1
                out += self._control(SWITCH, self.epoch + 1, index, now)
        return out

    def _policy(self, now: int) -> list[Action]:
        """Ours (001 ch. 2): a sequencer suits one sender, a symmetric protocol all
        senders. The lowest member decides, so only one request goes out."""
        if self.switching or self.old is not None or self.cur is None or \
                self.pending is not None:
            return []  # one request at a time: ours may still be on its way to the order
        active = sum(1 for t in self.last_sent.values() if now - t <= self.window_ns)
        target = None
        if self.adapt_all is not None and active == len(self.members):
            target = self.adapt_all
        elif self.adapt_one is not None and active <= 1 and self.last_sent:
            target = self.adapt_one
        if target is None or target == self.cur.name:
            return []
        self.requested = (self.names.index(target), now, "policy")
        return [Log("switch_policy", {"to": target, "active_senders": active})]

    # -- delivery (Fig. 2.1 l.14-35) -------------------------------------------------------------
    def _to_deliver(self, inst: Instance, e: Entry, now: int) -> list[Action]:
        if inst is self.cur:
            if self.held:
                self.held.append((inst, e))
                return self._release_held(now)
            return self._from_cur(inst, e, now)
        if inst is self.new:
            self.undeliv.append(e)  # l.26-27, kept in the new instance's order
        elif e[1] & CTRL and self.retired:
            kind, epoch, _ = CONTROL.unpack(e[4])
            if kind == DONE:
                self._retired_done(e[0], epoch)  # bookkeeping only, no order depends on it
        return []  # an instance already left: its later deliveries are discarded (001 §2.1)

    def _release_held(self, now: int) -> list[Action]:
        out: list[Action] = []
        while self.held:
            inst, (origin, flags, sn, size, body) = self.held[0]
            if inst is not self.cur:
                self.held.pop(0)  # the switch ended meanwhile: a stale old-instance delivery
                continue
            if flags & STUB and (origin, sn) not in self.payloads and sn > self.wm[origin]:
                break
            self.held.pop(0)
            out += self._from_cur(inst, (origin, flags & ~STUB, sn, size, body), now)
        return out

    def _from_cur(self, inst: Instance, e: Entry, now: int) -> list[Action]:
        origin, flags, sn, size, body = e
        if flags & CTRL:
            kind, epoch, index = CONTROL.unpack(body)
            return self._on_control(origin, kind, epoch, index, now)
        if flags & STUB and (origin, sn) not in self.payloads and sn > self.wm[origin]:
            self.held.append((inst, e))  # S10: wait for the payload from the new instance
            return [Log("stub_wait", {"origin": origin, "mno": sn})]
        out: list[Action] = []
        if not flags & NULL and sn > self.wm[origin]:  # l.22-25
            self.wm[origin] = sn
            self.delivered += 1
            self.recv_seen.discard((origin, sn))
            size = self.payloads.pop((origin, sn), size)
            self.last_sent[origin] = now
            if origin == self.me:
                self.mine.pop(sn, None)
            self.last_old = (origin, sn)
            out.append(FinalDeliver(origin, sn, self.delivered, size, inst.label))
        if self.switching and flags & FLAG:
            self.check.add(origin)  # l.14-15
            if self.check >= self.all - self.excluded:
                out += self._end_switch(now)  # l.16-17
        return out

    def _on_control(self, origin: int, kind: int, epoch: int, index: int,
                    now: int) -> list[Action]:
        if kind in (EXCLUDE, INCLUDE):
            return self._on_membership(kind, epoch, now)
        if kind == DONE:
            if epoch == self.epoch and self.old is not None:
                self.done.add(origin)
                return self._maybe_done()
            self._retired_done(origin, epoch)
            return []
        # SWITCH (S1-S2): the first SWITCH(epoch+1) in this instance's order wins, and only
        # once every member finished the previous switch (001 §2.1).
        if self.pending is not None and epoch >= self.pending:
            self.pending = None  # ours, or a rival's for the same epoch that settles ours
        if epoch != self.epoch + 1 or self.switching or self.old is not None or \
                index == (self.cur.index if self.cur else -1):
            return [Log("switch_rejected", {"epoch": epoch, "to": self.names[index],
                                            "by": origin, "current_epoch": self.epoch})]
        self.epoch = epoch
        self.started_at = now
        self.dup_msgs = self.dup_bytes = 0
        new, out = self._create(index, epoch, now)
        assert self.cur is not None
        out.insert(0, Log("switch", {"phase": "start", "epoch": epoch, "from": self.cur.name,
                                     "to": new.name, "mode": self.mode, "by": origin}))
        if self.mode == "rabp":
            out += self._rabp_switch(new, now)
        else:
            self.new, self.switching, self.check = new, True, set()
            if self.mode == "stop":
                self.stopped = True  # T2, the confirmation is the flagged NULL below
                self.flag_pending = True
                out += self._send_null(now)
            else:
                out += self._reissue(new, set(), now)
                self.flag_pending = True
                out += self._send_null(now) if self.null_ns == 0 else \
                    [SetTimer(NULL_KEY, self.null_ns)]
        return out + self._replay_early(new, now)

    def _maybe_done(self) -> list[Action]:
        """S8: every member not excluded has left the old instance: tear it down."""
        if self.old is None or not self.done >= self.all - self.excluded:
            return []
        old, self.old = self.old, None
        if not self.done >= self.all:  # an excluded member may still need it: keep it
            self.retired[self.epoch] = (old, self.done)
            while len(self.retired) > RETIRED_LIMIT:
                del self.retired[min(self.retired)]
        self.done = set()
        return [Log("switch", {"phase": "done", "epoch": self.epoch, "from": old.name})]

    def _retired_done(self, member: int, epoch: int) -> None:
        """DONE(epoch) from a member that had been excluded from that switch: once every
        member said it, nobody needs the switch's old instance any more."""
        kept = self.retired.get(epoch)
        if kept is not None:
            kept[1].add(member)
            if kept[1] >= self.all:
                del self.retired[epoch]

    def _on_membership(self, kind: int, member: int, now: int) -> list[Action]:
        """EXCLUDE/INCLUDE delivered by the current instance (ours): every node
        meets it at the same point of that instance's order, so every node takes the crashed
        member out of "every member's flag" (Fig. 2.1 l.16) and "every member is done" (S8)
        at the same point, and a switch stuck on a crashed member ends at one switch point
        everywhere. (Dropping suspects locally, without this agreement, ends the switch at
        different points and breaks total order.)"""
        if kind == EXCLUDE:
            # Applied by every node alike, the excluded one too if it is alive (a false
            # suspicion): its flag is no longer awaited, and a message it sent on the old
            # instance only, after the switch point, is discarded everywhere (order and
            # integrity hold; the remedy is a view-synchronous membership, 001 §4.1).
            if member in self.excluded:
                return []
            self.excluded.add(member)
            out: list[Action] = [Log("switch_exclude", {"member": member, "epoch": self.epoch,
                                                        "switching": self.switching})]
            if self.switching and self.check >= self.all - self.excluded:
                out += self._end_switch(now)
            return out + self._maybe_done()
        if member not in self.excluded:
            return []
        self.excluded.discard(member)
        return [Log("switch_include", {"member": member, "epoch": self.epoch})]

    def _suspicion(self, member: int, suspected: bool, now: int) -> list[Action]:
        """The failure detector changed its mind. A suspect is proposed for exclusion by
        `_propose_exclusions`; a member heard again is proposed for return (INCLUDE) through
        the current instance's order (`_on_membership`)."""
        if member == self.me or member not in self.all or self.cur is None:
            return []
        if suspected:
            self.suspects.setdefault(member, now)
            return []
        self.suspects.pop(member, None)
        self.proposed.discard(member)
        return self._control(INCLUDE, member, 0, now) if member in self.excluded else []

    def _announce(self, now: int) -> list[Action]:
        """A restarted process says which incarnation it is and at which switch epoch it
        starts (0: it cannot learn the group's), until it switches (`_on_hello`)."""
        self.hello_at = now
        return [Send(None, Message(Header(HELLO, WIRE_ID, sender=self.me, seq=self.epoch,
                                          aux=self.incarnation)))]

    def _on_hello(self, member: int, msg: Message, now: int) -> list[Action]:
        """A member's new incarnation, first heard at epoch `seq`. If this node has met a
        SWITCH since that epoch, the member missed progress it cannot recover without a
        state transfer (it starts at epoch 0 on an instance the group has left): it is out
        of the group for good, as a member that lost a primary's progress is forced to leave
        (001 §4.1.2). Every instance here then holds it suspected, so no acknowledgement
        window waits for a process that can never acknowledge, and a switch that waits for
        its flag or DONE excludes it as a crashed member (EXCLUDE, agreed in the order). The
        decision is taken once per incarnation: a member restarted before the group's next
        SWITCH joins the current instance from the present and follows that switch."""
        h = msg.header
        if msg.payload or member not in self.all or member == self.me:
            return self._reject("sw:hello", f"incarnation {h.aux}, {len(msg.payload)} bytes")
        if h.aux == 0:
            return self._on_reply(member, h.seq)
        reply: list[Action] = [Send(member, Message(Header(HELLO, WIRE_ID, sender=self.me,
                                                           seq=self.epoch, aux=0)))]
        if h.aux <= self.incarnations.get(member, 0):
            return reply  # known (its announcements repeat until it is answered)
        self.incarnations[member] = h.aux
        if h.seq >= self.epoch:
            return reply
        self.gone.add(member)
        self.suspects.setdefault(member, now)
        out: list[Action] = reply + [Log("switch_gone", {
            "member": member, "incarnation": h.aux, "its_epoch": h.seq, "epoch": self.epoch})]
        return out + self._each(lambda layer: layer.on_suspect(member, True, now), now)

    def _on_reply(self, member: int, epoch: int) -> list[Action]:
        """A member's answer to this restarted process's announcement, with its epoch. A later
        epoch than this process's: the group has switched since it crashed, and it cannot
        learn where (no state transfer), so it is out for good (001 §4.1.2) and delivers
        nothing more: the instance it started on is one the group has left, whose later
        order nobody else delivers. Its own epoch from every member it does not suspect:
        it is admitted, and what it was to deliver meanwhile is delivered."""
        if self.waiting is None or self.left:
            return []
        if epoch > self.epoch:
            self.left, self.waiting = True, []
            return [Log("switch_left", {"epoch": self.epoch, "group_epoch": epoch,
                                        "answered_by": member})]
        if epoch == self.epoch:
            self.answered.add(member)
        return []

    def _gate(self, out: list[Action]) -> list[Action]:
        """A restarted process's outputs until it is admitted (`_on_reply`): deliveries wait
        in order, everything else goes; once out for good, deliveries are dropped."""
        waiting = self.waiting
        assert waiting is not None
        if self.left:
            return [a for a in out if not isinstance(a, FinalDeliver | OptDeliver)]
        kept: list[Action] = []
        for a in out:
            if isinstance(a, FinalDeliver | OptDeliver):
                waiting.append(a)
            else:
                kept.append(a)
        if self.answered >= self.all - {self.me} - set(self.suspects):
            self.waiting = None
            kept += [Log("switch_admitted", {"epoch": self.epoch,
                                             "answered_by": sorted(self.answered)})] + waiting
        return kept

    def _propose_exclusions(self, now: int) -> list[Action]:
        """EXCLUDE a member suspected for `exclude_after_ms` while it holds up a switch (its
        flag or its DONE awaited). Only then: an alive member excluded by a false suspicion
        may lose the messages it sent on the old instance alone (`_on_membership`), so a
        stall shorter than the failure detector's timeout plus this grace costs nothing, and
        nothing is excluded between switches."""
        if not (self.switching or self.old is not None) or self.cur is None:
            return []
        out: list[Action] = []
        waiting = self.check if self.switching else self.done
        for member, since in sorted(self.suspects.items()):
            if member in self.excluded or member in self.proposed or member in waiting or \
                    now - since < self.exclude_after_ns:
                continue
            self.proposed.add(member)
            out += self._control(EXCLUDE, member, 0, now)
        return out

    def _replay_early(self, inst: Instance, now: int) -> list[Action]:
        early, self.early = self.early, []
        out: list[Action] = []
        if early:
            out.append(Log("switch_early", {"epoch": self.epoch, "datagrams": len(early)}))
        for src, inner in early:
            out += self._inner(inst, src, inner, now)
        return out

    def _rabp_switch(self, new: Instance, now: int) -> list[Action]:
        """R3: stop the flow in the old instance, re-issue own undelivered messages (same ids,
        in order) on the new one, and continue there."""
        assert self.cur is not None
        old, self.cur, self.old = self.cur, new, self.cur
        self.done = set()
        self.proposed = set()
        out = self._reissue(new, set(), now)
        out.append(self._end_log(old, new, now))
        return out + self._control(DONE, self.epoch, new.index, now)

    def _end_switch(self, now: int) -> list[Action]:
        """l.28-35: deliver what the new instance ordered meanwhile, then continue on it."""
        assert self.new is not None and self.cur is not None
        old, new = self.cur, self.new
        out: list[Action] = [self._end_log(old, new, now)]
        self.cur, self.new, self.old = new, None, old
        self.switching, self.flag_pending = False, False
        self.check, self.done = set(), set()
        undeliv, self.undeliv = self.undeliv, []
        for e in undeliv:
            out += self._to_deliver(new, e, now)
        self.proposed = set()  # an EXCLUDE still on its way in the old instance is discarded
        if self.stopped:
            self.stopped = False
            queue, self.queue = self.queue, []
            out += self._reissue(new, {sn for sn, _ in queue}, now)  # T4, queue included
        return out + self._control(DONE, self.epoch, new.index, now)

    def _reissue(self, new: Instance, fresh: set[int], now: int) -> list[Action]:
        """Own messages not delivered yet, same ids, in order, on the new instance (RABP's R3;
        live at SWITCH, stop at its end). Without an exclusion they all precede this node's
        flag in the old instance, so they are delivered from there and the copies dropped by
        the watermark; a member excluded while it was cut off (a partition) sent them on
        the old instance after the switch point, where every node discards them: the copies
        are what delivers them. `fresh`: the stop queue's, sent for the first time."""
        out: list[Action] = []
        for sn, payload in list(self.mine.items()):  # a send may deliver at once
            if sn not in self.mine:
                continue  # delivered meanwhile
            if sn not in fresh:
                self.dup_msgs += 1
                self.dup_bytes += len(payload)
            out += self._to_send(new, 0, sn, payload, now)
        return out

    def _end_log(self, old: Instance, new: Instance, now: int) -> Log:
        self.switch_count += 1
        self.last_switch_ms = (now - self.started_at) / 1e6
        return Log("switch", {"phase": "end", "epoch": self.epoch, "from": old.name,
                              "to": new.name, "mode": self.mode,
                              "duration_ms": round(self.last_switch_ms, 3),
                              "last_old": _mid(self.last_old), "dup_msgs": self.dup_msgs,
                              "dup_bytes": self.dup_bytes})


def _mid(key: tuple[int, int]) -> str:
    return f"{key[0]}:{key[1]}" if key[1] else ""


def _shape_ok(rule: tuple[int, int, int], length: int) -> bool:
    """nodes/wire.py `decode`'s payload shape rule for a first protocol's message type."""
    size, fewest, most = rule
    if size == 0:
        return length == 0
    return not length % size and fewest <= length // size <= most
