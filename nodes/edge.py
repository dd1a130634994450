"""Validation at the edge: every decoded datagram is checked once, here, before any protocol
sees it, against what the node knows (members, roles, its own windows).

`nodes.wire.decode` already refused what is not one well-formed message (lengths, payload
entry sizes and counts). What is left needs the node's view: who may send a message type, and
which numbers are plausible now. A refused datagram is counted per reason (`Rejected`, with
`DropReasons` in `testbed:type=Transport`), never raised.

The check table (`CHECKS`) holds one function per message type. The rules come from the
protocols they protect:

- every message: the sender is a member other than this node, but for a RELAYED DATA copy
  of a message an earlier incarnation of this node sent (header `aux`, the reliable layer's
  incarnation, below this node's): a restarted member FETCHes from the sequencer what that
  incarnation sent and the order names after its join, and the copy keeps its origin's
  header (see DATA below); the header's protocol is the
  node's (or a layer's beside it, `EdgeRules.protos`; ALIVE: the failure detector's RAW, a
  known kind about a member), and the type is one that protocol uses;
- DATA (reliable FIFO multicast, 002 "Reliable FIFO: Negative Acknowledgement"): the origin
  R-multicasts its own messages, so origin == sender (a RELAYED copy, 000 sec. 2.1 and the
  relay in nodes/protocols/sequencer.py, keeps its origin's header too); the reliable
  number lies in a window above what this node delivered from that sender (an honest sender
  is at most its flow-control `window` ahead of every receiver; a partitioned receiver may be
  further behind, hence the generous `RSEQ_WINDOW`), so a forged number cannot make a node
  buffer or NACK without bound; the SETO hint (000 Fig. 4 line 10) is non-negative and below
  `HINT_MAX_US`;
- ORDER (000 Fig. 1): numbers inside `SEQ_WINDOW` of the next one to deliver, entries
  naming members;
- NACK/ACK: ranges that are non-empty and inside what this node has sent (a forged ACK
  cannot purge a send buffer); FETCH: at most 64 entries (decode), and the delivered number
  it reports (header `seq`) at most what the sequencer numbered (a forged one would drop from
  the relay store what a member still needs);
- ESTIMATE/DELAY (003 Fig. 7): an ESTIMATE carries a delay for every other member, a DELAY
  one per member; delays between 0 and `HINT_MAX_US`.

Roles: who may send or receive a message type is a `RoleRule` of the protocol's edge rules,
checked against the roles the protocol's layers say they play now (`Layer.roles()`, nodes/
protocols/base.py: member id by role name). A rule whose role the layer does not declare
refuses the datagram (`role`): a missing declaration never lets a forged one through. The
rules (each with its protocol): ORDER only from the `sequencer`, FETCH only to it (000
Fig. 1 and the relay); ESTIMATE only to the `coordinator`, DELAY only from it (003 Fig. 7);
the token only from the `predecessor` in the ring (Totem's ring, 002 "Total Ordering: Token
Based"); the `leader`'s relayed data and grants only from it, forwarded data and requests only to it
(004 §8.1, §8.2); a membership INSTALL only from the `installer`, the coordinator of the proposal
this member answered (001 §4.1, nodes/protocols/membership.py M3, M5).

Which message types a protocol's datagrams may carry, and its role rules, are its catalogue
entry's `edge` (nodes/protocols/catalogue.py, `EdgeRules`), given with the entry's wire id by
whoever builds the gate (the node core, a container for each instance); a protocol without
one (a layer stack added later: give it `edge` rules, and its payloads a rule here or in
`nodes.wire.PAYLOAD_RULES`) gets the generic checks only. Without authentication
(`transport: udp-aead` or `tls`) a process that can reach the data plane can still forge a
member's messages within these bounds; docs/security.md says what that leaves open.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nodes.protocols.failure_detector import KINDS as ALIVE_KINDS
from nodes.wire import Flag, Header, Message, MsgType, Proto

RSEQ_WINDOW = 1 << 16  # reliable numbers ahead of the last delivered from that sender
INCARNATION_WINDOW = 1024  # restarts a sender may be ahead of what we last saw
SEQ_WINDOW = 1 << 20  # global sequence numbers ahead of the next to final-deliver
HINT_MAX_US = 60_000_000  # delay hints and planned delays: at most a minute
RELAYED = int(Flag.RELAYED)
_ENTRY = struct.Struct("!HI")  # (origin, mno) and (member, us): both 6 bytes
_SIGNED = struct.Struct("!Hi")



@dataclass(frozen=True)
class RoleRule:
    """Only the member playing `role` (a key of `Layer.roles()`) sends (`sender`) or receives
    (not `sender`) datagrams of type `type`; narrowed to those under wire id `proto` (None:
    any the gate admits), with header `aux` (None: any) and with (True) or without (False)
    the RELAYED flag (None: either)."""

    type: MsgType
    role: str
    sender: bool
    proto: int | None = None
    aux: int | None = None
    relayed: bool | None = None


@dataclass(frozen=True)
class EdgeRules:
    """What the edge gate (below) admits of a protocol's datagrams beyond the generic
    checks: the message types they may carry under its wire id (and the wire ids in
    `protos`, a layer it runs beside: primary's membership), checked by the gate's rule for
    each type (`CHECKS`) when `checked` (the sequencer's message formats; a protocol that
    gives the types other meanings says False), its role rules (`roles`), and, for an
    ESTIMATE, the entry id that carries the sender's own send rate instead of a delay (003
    Fig. 7, fast_seto.py)."""

    types: frozenset[MsgType]
    rate_id: int | None = None
    roles: tuple[RoleRule, ...] = ()
    checked: bool = True
    protos: frozenset[int] = frozenset()


class Gate:
    """The checks for one node; `check(msg)` returns None or the reason to reject it."""

    def __init__(self, me: int, members: list[int], protocol: Any,
                 rules: EdgeRules | None, wire_id: int | None, incarnation: int = 0):
        # `protocol`: a `Layer` (nodes/protocols/base.py) whose `roles()` the role rules read.
        self.me = me
        self.incarnation = incarnation  # this process's: its earlier ones' relayed copies pass
        self.members = frozenset(members)
        self.protocol = protocol
        # The wire id datagrams carry: any int (nodes/protocols/switching.py sets its tags),
        # as mypyc (nodes/fastpath.py) checks this annotation at run time.
        self.proto: int | None = None if wire_id is None else int(wire_id)
        # `rules` and `wire_id`: the protocol's catalogue entry's (`Entry.edge`,
        # `Entry.wire_id`, nodes/protocols/catalogue.py), given by whoever builds the gate
        # (the node core, a container for its instances): the gate knows no catalogue.
        self.allowed: frozenset[MsgType] | None = rules.types if rules is not None else None
        self.rate_id: int | None = rules.rate_id if rules is not None else None
        self.checked = rules is None or rules.checked
        self.protos: frozenset[int] = rules.protos if rules is not None else frozenset()
        # The role rules by message type: one dict look-up per datagram.
        self.role_rules: dict[MsgType, list[RoleRule]] = {}
        for r in rules.roles if rules is not None else ():
            self.role_rules.setdefault(r.type, []).append(r)
        # The reliable multicast under the protocol (the `layer` of its `Below`, nodes/
        # protocols/reliable.py), whose windows bound the numbers a datagram may carry.
        self.rm: Any = getattr(getattr(protocol, "rm", None), "layer", None)

    def expect(self, proto: int) -> None:
        """Datagrams carry `proto` (a container's instance tag, nodes/protocols/stack.py)
        instead of the protocol's wire id; every other check stays."""
        self.proto = proto

    def check(self, msg: Message) -> str | None:
        h = msg.header
        if h.sender == self.me:
            if not (h.type == MsgType.DATA and h.flags & RELAYED and h.aux < self.incarnation):
                return "sender"
        elif h.sender not in self.members:
            return "sender"
        if h.type == MsgType.ALIVE:  # the failure detector's: a known kind about a member
            if h.proto != Proto.RAW:
                return "proto"
            return None if h.aux in ALIVE_KINDS and h.origin in self.members else "alive"
        if self.allowed is None:
            return None  # a protocol this table does not describe: generic checks only
        if h.proto != self.proto and h.proto not in self.protos:
            return "proto"
        if h.type not in self.allowed:
            return "type"
        roles = self.role_rules.get(h.type)
        if roles is not None and not self._roles_hold(roles, h):
            return "role"
        if not self.checked or h.proto != self.proto:
            return None
        rule = CHECKS.get(h.type)
        return None if rule is None else rule(self, h, msg)

    def _roles_hold(self, rules: list[RoleRule], h: Header) -> bool:
        """Every rule that applies to `h` names the sender (or this node) as the member
        playing its role now; a role the layer does not declare holds for no one."""
        playing: dict[str, int] | None = None
        for r in rules:
            if ((r.proto is not None and h.proto != r.proto)
                    or (r.aux is not None and h.aux != r.aux)
                    or (r.relayed is not None and bool(h.flags & RELAYED) != r.relayed)):
                continue
            if playing is None:
                playing = self.protocol.roles()
            holder = playing.get(r.role)
            if holder is None or holder != (h.sender if r.sender else self.me):
                return False
        return True

    # -- helpers ------------------------------------------------------------------------------
    def _reliable(self, h: Header) -> str | None:
        """A reliable-multicast number inside the receiver's window for that sender."""
        rm = self.rm
        stream = None if rm is None else rm.streams.get(h.sender)
        if stream is None:
            return None
        if h.aux < stream.incarnation:
            return None  # from before the sender restarted: reliable multicast discards it
        if h.aux > stream.incarnation + INCARNATION_WINDOW:
            return "incarnation"
        if h.aux == stream.incarnation and stream.adopt:
            return None if h.rseq >= 1 else "window"  # a restarted receiver joins anywhere
        base = stream.delivered if h.aux == stream.incarnation else 0
        return None if 1 <= h.rseq <= base + RSEQ_WINDOW else "window"

    def _sent_range(self, first: int, last: int) -> str | None:
        rm = self.rm
        if rm is None:
            return None
        return None if last <= rm.next_rseq - 1 and first <= last else "range"

    def _origins(self, payload: bytes) -> str | None:
        for i in range(0, len(payload), _ENTRY.size):
            origin, mno = _ENTRY.unpack_from(payload, i)
            if origin not in self.members or mno < 1:
                return "entries"
        return None

    def _vector(self, payload: bytes, expected: frozenset[int], rate: bool) -> str | None:
        seen: set[int] = set()
        for i in range(0, len(payload), _SIGNED.size):
            member, value = _SIGNED.unpack_from(payload, i)
            if member in seen:
                return "entries"
            seen.add(member)
            if rate and member == self.rate_id:
                if value < 0:
                    return "value"
                continue
            if member not in expected:
                return "entries"
            if not 0 <= value <= HINT_MAX_US:
                return "value"
        return None if expected <= seen else "entries"


def _data(g: Gate, h: Header, msg: Message) -> str | None:
    if h.origin not in g.members or h.mno < 1:
        return "origin"
    if not 0 <= h.hint <= HINT_MAX_US:
        return "hint"
    if h.origin != h.sender:
        return "origin"
    # A RELAYED copy (the sequencer answering a FETCH) keeps its origin's header, so its
    # numbers are the origin's and it bypasses the reliable layer: no window to check.
    return None if h.flags & RELAYED else g._reliable(h)


def _order(g: Gate, h: Header, msg: Message) -> str | None:
    p = g.protocol
    if h.origin != h.sender:  # the sequencer's own ORDER (its sender: the role rule)
        return "role"
    nxt = getattr(p, "next_deliver", None)
    if h.seq < 1 or (nxt is not None and not getattr(p, "joining", False)
                     and h.seq > nxt + SEQ_WINDOW):
        return "window"
    return g._reliable(h) or g._origins(msg.payload)


def _heartbeat(g: Gate, h: Header, msg: Message) -> str | None:
    return g._reliable(h)


def _nack(g: Gate, h: Header, msg: Message) -> str | None:
    return "range" if h.rseq < 1 else g._sent_range(h.rseq, h.seq)


def _ack(g: Gate, h: Header, msg: Message) -> str | None:
    return g._sent_range(0, h.rseq)


def _fetch(g: Gate, h: Header, msg: Message) -> str | None:
    if h.aux == 0 and h.seq > getattr(g.protocol, "g", h.seq):  # the role is the RoleRule's
        return "window"  # a delivery report beyond what the sequencer numbered
    return g._origins(msg.payload)


def _estimate(g: Gate, h: Header, msg: Message) -> str | None:
    return g._vector(msg.payload, g.members - {h.sender}, rate=True)


def _delay(g: Gate, h: Header, msg: Message) -> str | None:
    return g._vector(msg.payload, g.members, rate=False)


CHECKS: dict[MsgType, Callable[[Gate, Header, Message], str | None]] = {
    MsgType.DATA: _data,
    MsgType.ORDER: _order,
    MsgType.HEARTBEAT: _heartbeat,
    MsgType.NACK: _nack,
    MsgType.ACK: _ack,
    MsgType.FETCH: _fetch,
    MsgType.ESTIMATE: _estimate,
    MsgType.DELAY: _delay,
}
