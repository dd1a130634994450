"""`primary`: total order in primary views only, over partitionable membership (001 §4.1-4.3;
rules P1-P10 of docs/protocols.md "Primary partitions", after Appia's PrimaryViewSession).

Stack (one process):
```
 application: broadcast / fnl / ensured (4.3)
 └── primary layer (this module): views, probes, blocking, exclusion, state transfer
     ├── membership (nodes/protocols/membership.py, wire id 19), fed by the failure detector
     └── one total-order instance per primary view (`protocol`: sequencer or lamport), over
         the view's members only; its datagrams travel wrapped in ours, tagged with the
         primary counter, so a stale instance's traffic is recognised by that tag alone
```

Rules (P-numbers are docs/protocols.md's; "paper" is 001 §4.1.1-4.1.2):
- P1 bootstrap: the `bootstrap` host starts as primary with counter 1 and last primary
  {itself}; everyone else is fresh and joins it through P4/P6 in the first view.
- P2 (paper rule, `primary_rule: majority`) a primary member seeing a view V that holds a
  strict majority of its last primary installs V at once when V holds no one outside it,
  every member of V comes straight from the membership view in which I installed my primary
  (membership's M5, `View.prev`) and that flush agreed (`View.synced`); a primary member
  without that majority blocks (`blocked`). The shortcut stands on view synchrony (001
  §4.1: the members that move together delivered the same in the old view): "V within my
  last primary" alone is not "everyone in V moved with me" (a paused member may come back
  into a view whose other members formed a primary without it, and must be forced to leave,
  4.1.2), and a flush that timed out may leave them with different histories. Otherwise V
  is probed (P3): a member that missed an intermediate primary is excluded (P7), the members
  behind get the leader's history (P6). Once every probe of a view P2 installed at once is
  in, the installed members plan the state transfer (a member still primary leads, P6), so
  a lineage member that blocked and is behind gets it.
  Hazard, not claimed: under flapping partitions this immediate installation is ambiguous
  (a member cut off right after the coordinator's INSTALL still holds the old last primary)
  and two primaries take the same counter (split brain); what one of them delivered, even
  notified `uniform`, is revoked when they meet, and two sides holding the same counter with
  different members never agree on a lineage again. `attempt` is the rule that holds.
- P3 every member multicasts PROBE(counter, status, last primary, attempt, delivered vector)
  in each new view; the decision below is taken once all of V has probed (every member sees
  the same probes, so every member decides the same). A decided member answers a probe with
  its own, marked as an answer (`rseq` 1), which is never answered: two decided members
  exchange one probe each, not one for ever (with duplicating links every copy would start
  another exchange).
- P4/P5/P7 a non-fresh member whose counter is below the highest probed counter missed an
  intermediate primary (4.1.2): it is **excluded** (`excluded`), becomes fresh and probes
  again; the others wait for its fresh probe (the paper's KICK is this self-detection).
- P5 the members with the highest counter (the lineage) form a primary iff V holds a strict
  majority of their last primary; otherwise they stay blocked.
- P6 the lineage member that delivered most sends DELIVER_VIEW(counter, state) to every
  fresh member and every lineage member whose history differs: where their common history
  ends and its own from there. 4.1.2: a member forced to leave has its state replaced: what
  it delivered beyond the common prefix is revoked (`state`, its own messages broadcast
  again), the leader's deliveries follow as `fnl`, then it installs (`join`). Histories are
  compared by their segments (the instance that ordered each delivery: the same instances,
  each a prefix of that instance's total order), not by per-origin watermarks: a member cut
  off with the sequencer may hold deliveries the primary never ordered, and appending what
  it lacks after its own would break total order. A receiver whose DELIVER_VIEW is lost
  probes the leader again every tick until the transfer comes (decided, it would otherwise
  probe no more and stay blocked).
- P8 install: counter + 1, last primary := V, a fresh total-order instance; own messages
  not yet delivered are broadcast again on it (`view`, primary=true). The instance is new at
  every member, a restarted one's included (incarnation 0): every member takes every stream
  from its first message, gaps repaired (inheriting the process's incarnation would make a
  restarted member join each stream "from the present" and skip the first messages jitter
  or loss kept from it); mids stay unique by the layer's own sn (below). Instance traffic of
  a later counter (a member that installed first broadcasts at once; I may still wait for
  my state transfer) is kept (bounded) and replayed when that instance starts. A relayed
  DATA copy (the sequencer answering a FETCH for a crashed origin's message keeps the
  origin as sender) passes; any other inner message must name its datagram's source.
- P9 `setPrimary` (management): a blocked member with a view becomes primary with it and
  sends DELIVER_VIEW to the rest; a fresh member becomes a bootstrap primary (P1).
- P10 while blocked, application broadcasts are refused (counted, `RefusedBroadcasts`) and
  nothing is delivered.
- View synchrony in the flush (membership's M2-M3): while a flush stops the instance, every
  member of the primary view whose reported history is a prefix of mine gets the rest of
  mine (CATCH_UP), so the members that move together agree even when the instance's
  sequencer is gone with its last ORDERs at some members only (crashed, or cut off).
  A member's flush state binds it (membership's M7): while `bound` (which ends only in a
  view) it delivers nothing of the instance (the view ends the instance; their senders
  broadcast those messages again, P8) and takes no decision of its held view (no
  installation, no state transfer received, no `setPrimary`; the coming view replaces it),
  so the history the coordinator compared is the one it installs with. Only CATCH_UP moves
  it, towards a longer reported history of its instance: the coordinator then sees the
  states differ until the new report comes. Without this a member that reported its history
  and then delivered its sequencer's late ORDER (or installed a primary) moved on with a
  history its new view's members lacked.
- `primary_rule: attempt` (two-phase, after Keidar-Dolev dynamic voting; ours): no P2
  shortcut; a decision first records an *attempt* (counter + 1, V) and sends ATT_ACK to the
  lineage, installing once all of it acked; a later view must also hold a strict majority of
  every attempt newer than the lineage's counter that a probe reports. This closes the
  ambiguous installation (docs/protocols.md), which P2 leaves open. An installed member
  answers a late ATT_ACK with its own (marked as an answer, never answered): installed
  members send no more ATT_ACKs by themselves, and one whose ACK was lost would wait for
  ever.
- Notifications (4.3): `fnl` is regular total order; every `stable` period the members of a
  primary view exchange their history's length and digest, and a message in the prefix all
  of them hold (digests equal) is `ensured` with service `uniform`. The exchange stops while
  every member has reported the same history and seen the others' (`_stable`): an idle view
  is silent. Per-origin watermarks
  would not do: they stop being prefixes once the lineage skips a message (revoked, or
  never ordered by the primary).

Message identity: the layer numbers its own messages (sn) and sets the instance's counter so
the instance's mno is that sn: a message broadcast again in a later view keeps its mid, and
the exact delivered set filters any second copy (a watermark would not: a sender's
delivered sns have gaps once deliveries are revoked).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from nodes.protocols.base import (
    Action,
    Attribute,
    EnsuredDeliver,
    FinalDeliver,
    LayerBase,
    Log,
    Managed,
    ManagedHost,
    Operation,
    OptDeliver,
    Send,
    SetTimer,
    ms,
    param,
    typed_params,
)
from nodes.protocols.membership import WIRE_ID as MEMBERSHIP_WIRE_ID
from nodes.protocols.membership import Membership, View, pack_members, unpack_members
from nodes.protocols.reliable import ReliableParams
from nodes.protocols.stack import Hosted, Lookup
from nodes.wire import Flag, Header, Message, MsgType, WireError, decode, encode

WIRE_ID = 18
TICK = "pv:tick"
INNER, PROBE, DELIVER_VIEW, STABLE, ATT_ACK, CATCH_UP = 0, 1, 2, 3, 4, 5
FRESH, PRIMARY, BLOCKED = 0, 1, 2
STATUS_NAMES = {FRESH: "fresh", PRIMARY: "primary", BLOCKED: "blocked"}
U16 = struct.Struct("!H")
U32 = struct.Struct("!I")
SEG = struct.Struct("!II")  # instance id, deliveries made in it
XFER_ENTRY = struct.Struct("!HII")  # origin, sn, size
XFER_MAX = 4000  # transferred deliveries per DELIVER_VIEW (fits one UDP datagram)
STABLE_BODY = struct.Struct("!IQ")  # history length, digest of that history
# a STABLE's `rseq` flags: the sender holds every member's report equal to its own (SETTLED),
# and holds a SETTLED report equal to its own from every member (DONE)
SETTLED, DONE = 1, 2
CATCH_UP_HEAD = STABLE_BODY  # where the receiver's history ends, its digest there
MASK64 = (1 << 64) - 1
DIGEST0 = 0xCBF29CE484222325
EARLY_MAX = 256  # view messages kept for a view not installed yet


@dataclass(frozen=True)
class PrimaryParams(ReliableParams):
    protocol: Literal["sequencer", "lamport"] = param(
        "sequencer", "the total-order protocol run inside each primary view")
    bootstrap: str | None = param(None, "the host configured as the first primary (P1; "
                                        "default: the first)", host=True)
    primary_rule: Literal["majority", "attempt"] = param(
        "majority", "majority: the paper's rule (001 4.1); attempt: two-phase, safe against "
                    "an ambiguous installation")
    retry_ms: float = ms("membership and probe retransmission period", 50)
    flush_timeout_ms: float = ms("longest wait for members' flush states to agree", 1000)
    stable_ms: float = ms("period of the delivered-vector exchange behind `ensured`", 50)
    pending_limit: int = param(10000, "own undelivered messages kept; more are refused", ge=1)


@dataclass
class Probe:
    counter: int
    status: int
    lp: tuple[int, ...]
    att_counter: int
    att: tuple[int, ...]
    segs: tuple[tuple[int, int], ...]  # its history: (instance id, deliveries) in order


def strict_majority(view: tuple[int, ...], of: tuple[int, ...]) -> bool:
    return len(of) > 0 and len(set(view) & set(of)) >= len(of) // 2 + 1


def chain(digest: int, origin: int, sn: int) -> int:
    """The history digest after one more delivery (FNV-style, order-sensitive)."""
    return ((digest ^ ((origin << 32) | sn)) * 0x100000001B3) & MASK64


def instance_id(counter: int, vid: int, members: tuple[int, ...]) -> int:
    """32-bit name of one primary view's total-order instance."""
    d = chain(chain(DIGEST0, 0, counter), 0, vid)
    for m in members:
        d = chain(d, m, 0)
    return d & 0xFFFFFFFF


def pack_segs(segs: list[list[int]] | tuple[tuple[int, int], ...]) -> bytes:
    return U16.pack(len(segs)) + b"".join(SEG.pack(i, n) for i, n in segs)


def unpack_segs(payload: bytes, at: int) -> tuple[tuple[tuple[int, int], ...], int]:
    (n,) = U16.unpack_from(payload, at)
    end = at + 2 + SEG.size * n
    if end > len(payload):
        raise ValueError("history segments run past the payload")
    segs = tuple(SEG.unpack_from(payload, at + 2 + SEG.size * k) for k in range(n))
    if any(c == 0 for _, c in segs):
        raise ValueError("empty history segment")
    return segs, end


def common_prefix(a: Any, b: Any) -> int:
    """Length of the history two members certainly share, from their segments: the same
    instances in the same order, each a prefix of that instance's total order; the first
    instance where they differ in length (or name) ends it."""
    n = 0
    for (ia, ca), (ib, cb) in zip(a, b, strict=False):
        if ia != ib:
            break
        n += min(ca, cb)
        if ca != cb:
            break
    return n


def _take_members(payload: bytes, at: int) -> tuple[tuple[int, ...], int]:
    (n,) = U16.unpack_from(payload, at)
    end = at + 2 + 2 * n
    if end > len(payload):
        raise ValueError("member list runs past the payload")
    return (unpack_members(payload[at + 2:end]) if n else ()), end


def _members_field(members: tuple[int, ...]) -> bytes:
    return U16.pack(len(members)) + pack_members(members)


class Primary(LayerBase):
    def __init__(self, me: int, members: list[int], params: dict[str, Any], lookup: Lookup):
        p = typed_params(PrimaryParams, params)
        self.lookup = lookup  # the catalogue's `get` (catalogue.py `_hosting`)
        self.me = me
        self.all = tuple(sorted(members))
        self.member_set = frozenset(members)
        self.params = params
        self.inner_name = p.protocol
        self.rule = p.primary_rule
        self.retry_ns = round(p.retry_ms * 1e6)
        self.stable_ns = round(p.stable_ms * 1e6)
        self.pending_limit = p.pending_limit
        self.incarnation = int(params.get("incarnation", 0))
        self.membership = Membership(me, members, self._flush_state, self.retry_ns,
                                     round(p.flush_timeout_ms * 1e6),
                                     restarted=self.incarnation > 0)
        # P1; a restarted process (its log continues, its state is gone) is never the
        # bootstrap again: it rejoins fresh
        bootstrap = (int(params.get("bootstrap_id", min(members))) if self.incarnation == 0
                     else -1)
        # P1: the configured primary; everyone else starts fresh (counter 0).
        self.status = PRIMARY if me == bootstrap else FRESH
        self.counter = 1 if me == bootstrap else 0
        self.lp: tuple[int, ...] = (me,) if me == bootstrap else ()
        self.attempt: tuple[int, tuple[int, ...]] | None = None
        self.held: View | None = None
        self.probes: dict[int, Probe] = {}
        self.decided = False
        self.att_acks: set[int] = set()
        self.early: list[tuple[int, Header, bytes]] = []
        # instance traffic of a primary view I have not installed yet (the state transfer
        # is on its way): replayed when I install it
        self.early_inner: list[tuple[int, int, bytes]] = []
        self.my_probe: Message | None = None
        self.leader: int | None = None  # sends the state transfer of the current view
        self.receivers: set[int] = set()  # ... to these members (P6)
        self.installed = False  # the held view is installed as primary
        self.primary_vid = -1  # the membership view my primary was installed in (P2)
        self.by_operator = False  # ... by setPrimary (P9)
        self.phase1 = False  # attempt rule: recorded, waiting for the lineage's ATT_ACKs
        self.operator = False
        # the total-order instance of the current primary view
        self.inner: Any = None
        self.gate: Any = None
        self.host: Any = None  # the instance's Hosted (nodes/protocols/stack.py)
        self.epoch = 0
        self.inst_members: tuple[int, ...] = ()
        # deliveries: the exact delivered set (a sender's sns are not a prefix once a
        # partition's deliveries are revoked or an incarnation restarts), the history in
        # delivery order with its chained digests and its segments (instance id, count), own
        # pending, own delivered payloads until ensured (a revoked one is broadcast again)
        self.delivered: set[tuple[int, int]] = set()
        self.history: list[tuple[int, int, int]] = []
        self.digests: list[int] = []
        self.segments: list[list[int]] = []
        self.cur_iid = 0
        self.own: dict[int, bytes] = {}
        self.ensured_pos = 0
        self.names: dict[int, str] = dict(params.get("member_names") or {})
        self.seq = 0
        self.sn = int(params.get("incarnation", 0)) * 1_000_000
        self.pending: dict[int, bytes] = {}
        self.unsent: list[int] = []  # pending, not yet broadcast on the current instance
        self.vectors: dict[int, tuple[int, int]] = {}
        self.settled_of: dict[int, bool] = {}  # each member's last STABLE: was it SETTLED?
        self.answer: set[int] = set()  # members whose last STABLE was not DONE
        # a new incarnation's first state transfer is adopted, not delivered: its previous
        # incarnation may have delivered any of it, and one log must not show a message twice
        self.recovering = self.incarnation > 0
        # counters for management (testbed:type=Membership)
        self.refused = 0
        self.refused_logged = 0
        self.duplicates = 0
        self.rejected = 0
        self.transferred = 0

    # -- Layer interface ----------------------------------------------------------------------
    def start(self, now: int) -> list[Action]:
        out = self.membership.start(now) + [SetTimer(TICK, self.stable_ns)]
        return out + self._new_view(self.membership.view, now)  # the configured first view

    def broadcast(self, payload: bytes, now: int) -> list[Action]:
        if self.status == BLOCKED or len(self.pending) >= self.pending_limit:
            self.refused += 1  # P10
            return []
        self.sn += 1
        self.pending[self.sn] = payload
        self.unsent.append(self.sn)
        out: list[Action] = [Log("send", {"mno": self.sn, "size": len(payload)})]
        return out + self._send_unsent(now)

    def _send_unsent(self, now: int) -> list[Action]:
        """Own messages not yet on the current instance, in sn order (FIFO): those broadcast
        during a flush that ended without a new view are sent before any later one."""
        if (not self.unsent or self.status != PRIMARY or self.inner is None
                or self.membership.flushing):
            return []
        out: list[Action] = []
        for sn in self.unsent:
            if sn in self.pending:
                out += self._inner_broadcast(sn, self.pending[sn], now)
        self.unsent.clear()
        return out

    def on_message(self, src: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        try:
            if h.proto == MEMBERSHIP_WIRE_ID:
                out = self.membership.on_message(src, msg, now)
                return out + self._views(now)
            if h.proto != WIRE_ID:
                raise ValueError(f"protocol {h.proto} is neither primary nor membership")
            kind = h.aux
            if kind in (PROBE, DELIVER_VIEW, ATT_ACK) and self._early(src, h, msg.payload):
                return []
            if kind == INNER:
                return self._on_inner(src, h.seq, msg.payload, now)
            if kind == PROBE:
                return self._on_probe(src, h, msg.payload, now)
            if kind == DELIVER_VIEW:
                return self._on_deliver_view(src, h, msg.payload, now)
            if kind == STABLE:
                if self.status == PRIMARY and h.seq == self.epoch and src in self.lp:
                    if len(msg.payload) != STABLE_BODY.size:
                        raise ValueError("stable vector of a wrong length")
                    self.vectors[src] = STABLE_BODY.unpack(msg.payload)
                    self.settled_of[src] = bool(h.rseq & SETTLED)
                    if not h.rseq & DONE:
                        self.answer.add(src)
                return self._ensure()
            if kind == ATT_ACK:
                return self._on_att_ack(src, h.seq, now, answer=bool(h.rseq))
            if kind == CATCH_UP:
                return self._on_catch_up(src, h.seq, msg.payload)
            raise ValueError(f"unknown kind {kind}")
        except (ValueError, struct.error, WireError) as exc:
            self.rejected += 1
            return [Log("drop", {"reason": "primary", "detail": str(exc)})]

    def on_timer(self, key: str, now: int) -> list[Action]:
        if key == "mb:tick":
            return self.membership.on_timer(now) + self._views(now)
        if key == TICK:
            return [SetTimer(TICK, self.stable_ns)] + self._tick(now)
        scope, _, inner_key = key.partition("|")  # the instance's namespace (Hosted.timer)
        if self.inner is not None and scope == f"pv{self.epoch}":
            return self._lift(self.inner.on_timer(inner_key, now), now)
        return []  # a timer of an instance that is gone

    def on_suspect(self, member: int, suspected: bool, now: int) -> list[Action]:
        out = self.membership.on_suspect(member, suspected, now)
        if self.inner is not None and member in self.inst_members:
            out += self._lift(self.inner.on_suspect(member, suspected, now), now)
        return out + self._views(now)

    def roles(self) -> dict[str, int]:
        """The membership's roles: the `installer` of this member's next view."""
        return self.membership.roles()

    # -- management (testbed:type=Membership) -----------------------------------------------
    def managed(self, host: ManagedHost) -> list[Managed]:
        """`testbed:type=Membership` (001 4.2, Appia's `view`, `blocked`,
        `set_primary`): the view, whether it is primary, blocked, the primary counter; the
        operation `setPrimary` makes a blocked (or fresh) node's view the primary one (P9).
        On a node already in a primary view it is refused with a one-line error and changes
        nothing."""
        def names(ids: list[int]) -> list[str]:
            return [host.name(m) for m in ids]

        def info(key: str) -> Callable[[], Any]:
            return lambda: self.view_info()[key]

        def set_primary() -> str:
            try:
                accepted = self.set_primary()
            except ValueError as exc:
                raise ValueError(f"{host.name(self.me)}: {exc} (members "
                                 f"{names(self.view_info()['last_primary'])})") from None
            return f"{accepted}: view {names(self.view_info()['members'])}"

        return [Managed("Membership", (
            Attribute("View", "list", lambda: names(self.view_info()["members"]),
                      description="members of the membership view"),
            Attribute("ViewId", "int", info("vid")),
            Attribute("IsPrimary", "bool", info("primary"),
                      description="the view is a primary view"),
            Attribute("Blocked", "bool", info("blocked"),
                      description="no primary here: nothing is delivered, broadcasts refused"),
            Attribute("PrimaryCounter", "int", info("counter"),
                      description="primary views this node installed (its primary epoch)"),
            Attribute("LastPrimary", "list", lambda: names(self.view_info()["last_primary"])),
            Attribute("Status", "str", info("status"),
                      description="primary, blocked, or fresh (excluded or not joined yet)"),
            Attribute("RefusedBroadcasts", "int", lambda: self.refused),
            Attribute("TransferredDeliveries", "int", lambda: self.transferred,
                      description="deliveries received by state transfer when rejoining"),
            Attribute("RejectedMessages", "int",
                      lambda: self.rejected + self.membership.rejected,
                      description="view and membership messages refused as malformed")),
            (Operation("setPrimary", set_primary, (), "str",
                       "make this blocked node's view the primary (operator recovery, 4.2)"),),
            "Primary-partition membership (001 section 4.1)")]

    def view_info(self) -> dict[str, Any]:
        v = self.membership.view
        return {"vid": v.vid, "members": list(v.members), "primary": self.status == PRIMARY,
                "blocked": self.status == BLOCKED, "counter": self.counter,
                "status": STATUS_NAMES[self.status], "last_primary": list(self.lp)}

    def set_primary(self) -> str:
        """P9, checked now, carried out at the next tick (the node core sends what it
        produces); ValueError (one line) when this node is in a primary view already."""
        if self.status == PRIMARY:
            raise ValueError(f"already in primary view {self.counter}; setPrimary is for a "
                             f"blocked or fresh node")
        if self.operator:
            raise ValueError("a setPrimary is already pending")
        self.operator = True
        return f"setPrimary accepted ({STATUS_NAMES[self.status]})"

    # -- views and the primary decision --------------------------------------------------------
    def _views(self, now: int) -> list[Action]:
        out: list[Action] = []
        while self.membership.installed:
            view = self.membership.installed.pop(0)
            out += self._new_view(view, now)
        return out

    def _new_view(self, view: View, now: int) -> list[Action]:
        """P3: the old instance is flushed (membership waited for that); probe V."""
        self.held, self.probes, self.decided, self.att_acks = view, {}, False, set()
        self.phase1 = self.installed = self.by_operator = False
        self.leader, self.receivers = None, set()
        self.inner = None
        out: list[Action] = []
        if self.status == PRIMARY:
            out.append(Log("unview", {"counter": self.counter}))
        out += self._probe(now)
        out += self._decide(now)
        early, self.early = self.early, []
        for src, h, payload in early:
            if h.seq > view.vid:
                self.early.append((src, h, payload))
            elif h.seq == view.vid:
                out += self.on_message(src, Message(h, payload), now)
        return out

    def _probe(self, now: int) -> list[Action]:
        assert self.held is not None
        att_c, att = self.attempt if self.attempt is not None else (0, ())
        self.probes[self.me] = Probe(self.counter, self.status, self.lp, att_c, att,
                                     self._segs())
        payload = (_members_field(self.lp) + _members_field(att) + pack_segs(self.segments))
        h = Header(MsgType.DATA, WIRE_ID, sender=self.me, seq=self.held.vid, mno=self.counter,
                   hint=self.status, slot=att_c, aux=PROBE)
        self.my_probe = Message(h, payload)
        return [Send(m, self.my_probe) for m in self.held.members if m != self.me]

    def _early(self, src: int, h: Header, payload: bytes) -> bool:
        """A view message that overtook membership's INSTALL of its view: kept (bounded) and
        replayed when that view is installed."""
        if h.seq <= self.membership.view.vid:
            return False
        if len(self.early) < EARLY_MAX:
            self.early.append((src, h, payload))
        return True

    def _on_probe(self, src: int, h: Header, payload: bytes, now: int) -> list[Action]:
        lp, at = _take_members(payload, 0)
        att, at = _take_members(payload, at)
        segs, at = unpack_segs(payload, at)
        if at != len(payload):
            raise ValueError("probe longer than its fields")
        if h.hint not in STATUS_NAMES:
            raise ValueError(f"probe status {h.hint}")
        if self.held is None or h.seq != self.held.vid or src not in self.held.members:
            return []  # a probe of another view
        self.probes[src] = Probe(h.mno, h.hint, lp, h.slot, att, segs)
        if self.decided:
            # an answer (rseq 1) is never answered: two decided members would play probe
            # ping-pong for ever, and each duplicated datagram starts one more game
            return self._answer(src, reply=not h.rseq)
        return self._decide(now)

    def _answer(self, q: int, reply: bool = True) -> list[Action]:
        """q probes again: it missed something of this view (the network loses datagrams).
        Send it my probe again (unless its probe is itself an answer), the state transfer if
        I lead and it is fresh, my ATT_ACK."""
        assert self.held is not None and self.my_probe is not None
        out: list[Action] = []
        if reply:
            out.append(Send(q, Message(self.my_probe.header.with_(rseq=1),
                                       self.my_probe.payload)))
        if (self.installed and self.leader is None
                and all(m in self.probes for m in self.held.members)):
            # installed by P2 at once: the plan (who leads, who is behind) is made now that
            # every probe is in, or a blocked lineage member behind us would wait for ever
            cmax = max(p.counter for p in self.probes.values())
            lineage = sorted(m for m, p in self.probes.items()
                             if p.status != FRESH and p.counter == cmax)
            if lineage:
                self._plan(lineage)
            if self.leader == self.me:
                out += [self._deliver_view(r, self.counter - 1) for r in sorted(self.receivers)
                        if r != q and self.probes[r].status != PRIMARY]
        if self.installed and (self.leader == self.me and q in self.receivers
                               or self.probes[q].status == FRESH):
            # a fresh prober after an installation without it (it restarted into a view the
            # others installed by P2): every installed member answers, it takes the first
            out.append(self._deliver_view(q, self.counter - 1))
        if self.att_acks and self.me in self.att_acks:
            h = Header(MsgType.DATA, WIRE_ID, sender=self.me, seq=self.held.vid, aux=ATT_ACK)
            out.append(Send(q, Message(h)))
        return out

    def _block(self, why: str) -> list[Action]:
        if self.status == BLOCKED:
            return []
        self.status = BLOCKED
        assert self.held is not None
        return [Log("blocked", {"counter": self.counter, "members": list(self.held.members),
                                "why": why})]

    def _decide(self, now: int) -> list[Action]:
        if self.held is None or self.decided:
            return []
        if self.membership.bound:
            return []  # M7: my flush report binds me; the view it ends in replaces this one
        v = self.held.members
        out: list[Action] = []
        if self.status == PRIMARY:
            if not strict_majority(v, self.lp):
                out += self._block("no majority of the last primary")  # P2
            elif (self.rule == "majority" and set(v) <= set(self.lp)
                  and len(self.held.prev) == len(v) and self.held.synced
                  and all(p == self.primary_vid for p in self.held.prev)):
                return out + self._install(self.counter, now)  # P2, the paper's shortcut
        if any(m not in self.probes for m in v):
            return out
        cmax = max(p.counter for p in self.probes.values())
        if self.status != FRESH and self.counter < cmax:
            return out + self._exclude(cmax, now)  # P5/P7: I missed a primary
        if any(p.status != FRESH and p.counter < cmax for p in self.probes.values()):
            return out  # stale members exclude themselves and probe again
        lineage = sorted(q for q, p in self.probes.items() if p.status != FRESH)
        if not lineage or self.status == FRESH:
            return out  # fresh: wait for DELIVER_VIEW (P6) or setPrimary (P9)
        lp = self.probes[lineage[0]].lp
        if not strict_majority(v, lp):
            return out + self._block("no majority of the last primary")
        self._plan(lineage)
        if self.rule == "attempt":
            for p in self.probes.values():
                if p.att_counter > cmax and not strict_majority(v, p.att):
                    return out + self._block(f"no majority of attempt {p.att_counter}")
            self.decided = self.phase1 = True
            self.attempt = (cmax + 1, v)
            self.att_acks.add(self.me)
            h = Header(MsgType.DATA, WIRE_ID, sender=self.me, seq=self.held.vid, aux=ATT_ACK)
            out += [Log("attempt", {"counter": cmax + 1, "members": list(v)})]
            out += [Send(q, Message(h)) for q in lineage if q != self.me]
            return out + self._on_att_ack(self.me, self.held.vid, now)
        return out + self._ready(cmax, now)

    def _plan(self, lineage: list[int]) -> None:
        """Who leads the view and who gets a state transfer (P6): the lineage member that
        delivered most leads; fresh members and lineage members behind it (they left the
        last primary view at different points, e.g. one was cut off in its flush) receive
        the deliveries they lack before they install."""
        assert self.held is not None
        probes = self.probes
        def size(q: int) -> int:
            return sum(n for _, n in probes[q].segs)

        # a member still primary leads before one that blocked (after P2 installed at once,
        # only the installed ones can serve the transfer), then the longest history
        leader = max(lineage, key=lambda q: (probes[q].status == PRIMARY, size(q), -q))
        top = probes[leader].segs
        self.leader = leader
        self.receivers = {q for q in self.held.members if probes[q].status == FRESH} | {
            q for q in lineage
            if q != leader and (common_prefix(probes[q].segs, top) != size(q)
                                or size(q) < size(leader))}

    def _ready(self, counter: int, now: int) -> list[Action]:
        self.decided = True
        if self.me in self.receivers:
            return []  # wait for the leader's DELIVER_VIEW
        return self._install(counter, now)

    def _on_att_ack(self, src: int, vid: int, now: int, answer: bool = False) -> list[Action]:
        if self.held is None or vid != self.held.vid:
            return []
        self.att_acks.add(src)
        if not self.phase1 or self.attempt is None:
            if self.decided and self.me in self.att_acks and src != self.me and not answer:
                # src still waits for mine (lost): I recorded it and may have installed
                # already, which sends no more ATT_ACKs by itself; marked as an answer
                # (rseq 1), which is not answered again (no ATT_ACK ping-pong)
                h = Header(MsgType.DATA, WIRE_ID, sender=self.me, seq=self.held.vid,
                           rseq=1, aux=ATT_ACK)
                return [Send(src, Message(h))]
            return []
        lineage = [q for q, p in self.probes.items() if p.status != FRESH]
        if all(q in self.att_acks for q in lineage):
            if self.membership.bound:
                return []  # M7: the view my flush ends in replaces this one
            self.phase1 = False
            return self._ready(self.attempt[0] - 1, now)
        return []

    def _exclude(self, cmax: int, now: int) -> list[Action]:
        """P7 (4.1.2 forced leave): rejoin as a fresh member; the state comes by P6."""
        out: list[Action] = [Log("excluded", {"counter": self.counter, "newer": cmax})]
        self.status, self.counter, self.lp, self.attempt = FRESH, 0, (), None
        return out + self._probe(now) + self._decide(now)

    def _install(self, counter: int, now: int) -> list[Action]:
        """P8: the held view becomes primary view counter + 1."""
        assert self.held is not None
        v = self.held.members
        out: list[Action] = []
        if self.leader == self.me:
            out += [self._deliver_view(q, counter) for q in sorted(self.receivers)]  # P6
        self.decided, self.installed, self.attempt = True, True, None
        self.status, self.counter, self.lp = PRIMARY, counter + 1, v
        self.primary_vid = self.held.vid
        fields: dict[str, Any] = {"primary": True, "counter": self.counter,
                                  "members": list(v), "vid": self.held.vid}
        if self.by_operator:
            fields["operator"] = True  # P9: the majority rule was overridden on purpose
        out.append(Log("view", fields))
        if self.refused > self.refused_logged:
            out.append(Log("refused", {"count": self.refused - self.refused_logged}))
            self.refused_logged = self.refused
        return out + self._start_instance(now)

    def _deliver_view(self, q: int, counter: int) -> Send:
        assert self.held is not None
        # what q holds beyond the common prefix is replaced: the suffix of my history from
        # there, with its segments, in my delivery order
        at = common_prefix(self.segments, self.probes[q].segs)
        payload = _members_field(self.held.members) + U32.pack(at) + self._suffix(at)
        h = Header(MsgType.DATA, WIRE_ID, sender=self.me, seq=self.held.vid, mno=counter,
                   hint=int(self.by_operator), aux=DELIVER_VIEW)
        return Send(q, Message(h, payload))

    def _suffix(self, at: int) -> bytes:
        """My history from position `at` (at most XFER_MAX deliveries), with its segments."""
        suffix = self.history[at:at + XFER_MAX]
        segs: list[list[int]] = []
        pos = 0
        for iid, n in self.segments:
            lo, hi = max(pos, at), min(pos + n, at + len(suffix))
            if hi > lo:
                segs.append([iid, hi - lo])
            pos += n
        return pack_segs(segs) + b"".join(XFER_ENTRY.pack(*e) for e in suffix)

    def _take_suffix(self, payload: bytes, at: int) -> list[tuple[tuple[int, int, int], int]]:
        """The deliveries of a `_suffix`, each with the instance that ordered it."""
        segs, at = unpack_segs(payload, at)
        if (len(payload) - at) % XFER_ENTRY.size or sum(c for _, c in segs) * \
                XFER_ENTRY.size != len(payload) - at:
            raise ValueError("state transfer of a wrong length")
        entries = [XFER_ENTRY.unpack_from(payload, i)
                   for i in range(at, len(payload), XFER_ENTRY.size)]
        for o, _, _ in entries:
            if o not in self.member_set:
                raise ValueError(f"state transfer names non-member {o}")
        labels = [iid for iid, c in segs for _ in range(c)]
        return list(zip(entries, labels, strict=True))

    def _catch_up(self) -> list[Action]:
        """View synchrony in the flush (M2-M3; 001 §4.1 sits on a view-synchronous
        membership: the members that move together delivered the same in the old view).
        While a flush stops the instance, a member of my primary view whose reported history
        (STABLE) is a prefix of mine gets the rest of mine, in my order. The instance's
        sequencer may be gone (crashed, or on the other side of a cut) with its last ORDERs
        at some members only; without this the flush times out and those members keep
        different histories for as long as they stay blocked."""
        out: list[Action] = []
        for q in self.lp:
            n, digest = self.vectors.get(q, (len(self.history), 0))
            if q == self.me or n >= len(self.history) or (
                    self.digests[n - 1] if n else DIGEST0) != digest:
                continue
            h = Header(MsgType.DATA, WIRE_ID, sender=self.me, seq=self.epoch, aux=CATCH_UP)
            out.append(Send(q, Message(h, CATCH_UP_HEAD.pack(n, digest) + self._suffix(n))))
        return out

    def _on_catch_up(self, src: int, epoch: int, payload: bytes) -> list[Action]:
        """The rest of a member's history, when mine is a prefix of it (`_catch_up`)."""
        if len(payload) < CATCH_UP_HEAD.size:
            raise ValueError("catch-up shorter than its head")
        at, digest = CATCH_UP_HEAD.unpack_from(payload, 0)
        entries = self._take_suffix(payload, CATCH_UP_HEAD.size)
        if (self.status != PRIMARY or self.inner is None or epoch != self.epoch
                or src not in self.inst_members or at != len(self.history)
                or digest != (self.digests[-1] if self.digests else DIGEST0)):
            return []  # not my instance, or my history moved on since my report
        out: list[Action] = []
        for (o, sn, size), iid in entries:
            out += self._deliver(o, sn, size, iid)
        return out

    def _on_deliver_view(self, src: int, h: Header, payload: bytes, now: int) -> list[Action]:
        """P6: state transfer, then install."""
        members, at = _take_members(payload, 0)
        (keep,) = U32.unpack_from(payload, at)
        transfer = self._take_suffix(payload, at + 4)
        if (self.held is None or h.seq != self.held.vid or members != self.held.members
                or self.installed or src not in members
                or (self.status == PRIMARY and self.me not in self.receivers)
                or self.membership.bound):
            return []  # not mine; or my flush state binds me (M7): I probe again
        if keep > len(self.history):
            raise ValueError(f"state transfer keeps {keep} of my {len(self.history)} "
                             f"deliveries")
        # `join` comes first: the transferred deliveries below are the rejoin's, not
        # deliveries of a blocked node (analysis/membership.py blocked_delivery)
        join = Log("join", {"counter": h.mno + 1, "member": src})
        out: list[Action] = [join]
        # 001 4.1.2: my state is replaced by the primary's. What I delivered beyond the
        # common prefix was ordered outside the primary's history: revoked (`state`), my own
        # messages among it are broadcast again, the primary's suffix is delivered in its order
        revoked = self._truncate(keep)
        if revoked:
            out.append(Log("state", {"view": h.mno + 1, "revoked": [
                f"{self.names.get(o, o)}:{sn}" for o, sn, _ in revoked],
                "adopted": len(transfer)}))
        n = 0
        for (o, sn, size), iid in transfer:
            if (o, sn) in self.delivered:
                continue
            n += 1
            if self.recovering:
                self._record(o, sn, size, iid)  # the state, not deliveries this log repeats
            else:
                out += self._deliver(o, sn, size, iid)
        if self.recovering:
            self.ensured_pos = len(self.history)
        self.transferred += n
        join.fields["adopted" if self.recovering else "transferred"] = n
        self.recovering = False
        self.leader = src
        self.by_operator = bool(h.hint)
        return out + self._install(h.mno, now)

    def _tick(self, now: int) -> list[Action]:
        out: list[Action] = []
        if self.operator and not self.membership.bound:  # M7: in the flush's view
            self.operator = False
            out += self._operator_primary(now)
        if self.held is not None and not self.decided and self.my_probe is not None:
            out += [Send(m, self.my_probe) for m in self.held.members if m != self.me]
        elif self.phase1 and self.held is not None:
            h = Header(MsgType.DATA, WIRE_ID, sender=self.me, seq=self.held.vid, aux=ATT_ACK)
            out += [Send(q, Message(h)) for q in self.held.members if q not in self.att_acks]
        elif (self.decided and not self.installed and self.me in self.receivers
              and self.leader is not None and self.my_probe is not None):
            # waiting for the leader's DELIVER_VIEW, which the network may have lost: my
            # probe again makes it answer (_answer)
            out.append(Send(self.leader, self.my_probe))
        out += self._send_unsent(now)
        if self.status == PRIMARY and self.inner is not None:
            out += self._stable()
            out += self._ensure()
            if self.membership.flushing:
                out += self._catch_up()
        return out

    def _stable(self) -> list[Action]:
        """4.3's periodic exchange of history length and digest, to every member while any
        report differs or is not known to be seen; once every member reported SETTLED on the
        same history (DONE), only to a member still asking (its report not DONE). An idle
        primary view then sends nothing, where an exchange to every member every period
        costs n(n-1) datagrams per period for nothing new: every message is `ensured` once
        the reports agree, and the next delivery (or view, or flush) starts the exchange
        again."""
        mine = (len(self.history), self.digests[-1] if self.digests else DIGEST0)
        self.vectors[self.me] = mine
        peers = [q for q in self.lp if q != self.me]
        settled = all(self.vectors.get(q) == mine for q in peers)
        done = settled and all(self.settled_of.get(q, False) for q in peers)
        to = peers if not done or self.membership.flushing else [
            q for q in peers if q in self.answer]
        self.answer.clear()
        h = Header(MsgType.DATA, WIRE_ID, sender=self.me, seq=self.epoch, aux=STABLE,
                   rseq=(SETTLED if settled else 0) | (DONE if done else 0))
        msg = Message(h, STABLE_BODY.pack(*mine))
        return [Send(q, msg) for q in to]

    def _operator_primary(self, now: int) -> list[Action]:
        """P9."""
        if self.status == PRIMARY:
            return []
        out: list[Action] = [Log("set_primary", {"status": STATUS_NAMES[self.status]})]
        if self.held is None or self.status == FRESH:
            self.status, self.counter, self.lp = PRIMARY, max(self.counter, 1), (self.me,)
            self.probes[self.me] = Probe(self.counter, PRIMARY, self.lp, 0, (), self._segs())
            return out + self._decide(now)
        # blocked with a view: it becomes primary; the others get DELIVER_VIEW
        cmax = max(p.counter for p in self.probes.values())
        self.leader, self.by_operator = self.me, True
        self.receivers = {q for q in self.held.members if q != self.me and q in self.probes}
        return out + self._install(cmax, now)

    # -- the total-order instance ------------------------------------------------------------
    def _start_instance(self, now: int) -> list[Action]:
        assert self.held is not None
        members = list(self.held.members)
        params = dict(self.params)
        params.pop("bootstrap_id", None)
        params["sequencer_id"] = members[0]
        # the instance is new at every member, a restarted process's included: it takes
        # every stream from its first message, as the others do (see P8 in the docstring)
        params["incarnation"] = 0
        self.epoch = self.counter
        self.cur_iid = instance_id(self.counter, self.held.vid, self.held.members)
        self.inst_members = self.held.members
        # the container's instance (nodes/protocols/stack.py): its own edge gate, its timers
        # in the view's namespace `pv<counter>`
        self.host = Hosted(self.lookup(self.inner_name), self.me, members, params,
                           f"pv{self.epoch}")
        self.inner, self.gate = self.host.layer, self.host.gate
        self.vectors, self.settled_of, self.answer = {}, {}, set()
        out = self._lift(self.inner.start(now) + self.inner.on_view(members, now), now)
        self.unsent.clear()
        for sn, payload in sorted(self.pending.items()):
            out += self._inner_broadcast(sn, payload, now)  # P8: ours not yet delivered
        early, self.early_inner = self.early_inner, []
        for src, epoch, payload in early:
            if epoch == self.epoch:
                try:
                    out += self._on_inner(src, epoch, payload, now)
                except (ValueError, struct.error, WireError) as exc:
                    self.rejected += 1
                    out.append(Log("drop", {"reason": "primary", "detail": str(exc)}))
            elif epoch > self.epoch:
                self.early_inner.append((src, epoch, payload))
        return out

    def _inner_broadcast(self, sn: int, payload: bytes, now: int) -> list[Action]:
        self.inner.renumber(sn - 1)  # P8: the primary's numbering, across views
        return self._lift(self.inner.broadcast(payload, now), now)

    def _on_inner(self, src: int, epoch: int, payload: bytes, now: int) -> list[Action]:
        if (epoch > self.epoch or self.inner is None) and len(self.early_inner) < EARLY_MAX:
            if epoch > self.epoch:
                self.early_inner.append((src, epoch, payload))  # my install comes later
            return []
        if self.inner is None or epoch != self.epoch or src not in self.inst_members:
            return []  # an instance that is gone (or not ours)
        msg = decode(payload)
        if msg.header.sender != src and not (msg.header.type == MsgType.DATA
                                             and msg.header.flags & Flag.RELAYED):
            # a relayed copy (the sequencer answering a FETCH) keeps its origin as sender
            raise ValueError(f"inner message from {src} names sender {msg.header.sender}")
        reason = self.gate.check(msg)
        if reason is not None:
            raise ValueError(f"inner message rejected: {reason}")
        return self._lift(self.inner.on_message(src, msg, now), now)

    def _lift(self, actions: list[Action], now: int) -> list[Action]:
        out: list[Action] = []
        epoch = self.epoch
        for a in actions:
            if isinstance(a, Send):
                h = Header(MsgType.DATA, WIRE_ID, sender=self.me, seq=epoch, aux=INNER)
                out.append(Send(a.dst, Message(h, encode(a.msg))))
            elif isinstance(a, SetTimer):
                out.append(self.host.timer(a))
            elif isinstance(a, FinalDeliver):
                if not self.membership.bound:  # M7: the flush's view ends this instance
                    out += self._deliver(a.origin, a.mno, a.size)
            elif isinstance(a, OptDeliver):
                if (a.origin, a.mno) not in self.delivered:
                    out.append(a)
            elif isinstance(a, Log) and a.ev == "send":
                continue  # logged by broadcast() once, whatever the instance
            else:
                out.append(a)
        return out

    def _segs(self) -> tuple[tuple[int, int], ...]:
        return tuple((i, n) for i, n in self.segments)

    def _record(self, origin: int, sn: int, size: int, iid: int) -> None:
        self.delivered.add((origin, sn))
        self.history.append((origin, sn, size))
        self.digests.append(chain(self.digests[-1] if self.digests else DIGEST0, origin, sn))
        if self.segments and self.segments[-1][0] == iid:
            self.segments[-1][1] += 1
        else:
            self.segments.append([iid, 1])

    def _truncate(self, keep: int) -> list[tuple[int, int, int]]:
        """Drop my history beyond `keep` deliveries (they are revoked); return them."""
        revoked = self.history[keep:]
        del self.history[keep:]
        del self.digests[keep:]
        extra = len(revoked)
        while extra:
            last = self.segments[-1]
            cut = min(extra, last[1])
            last[1] -= cut
            extra -= cut
            if not last[1]:
                self.segments.pop()
        self.ensured_pos = min(self.ensured_pos, keep)
        for o, sn, _ in revoked:
            self.delivered.discard((o, sn))
            if o == self.me and sn in self.own:
                self.pending[sn] = self.own.pop(sn)  # mine: broadcast again (P8)
        return revoked

    def _deliver(self, origin: int, sn: int, size: int,
                 iid: int | None = None) -> list[Action]:
        if (origin, sn) in self.delivered:
            self.duplicates += 1  # a copy broadcast again in a later view
            return []
        self._record(origin, sn, size, self.cur_iid if iid is None else iid)
        self.seq += 1
        if origin == self.me and sn in self.pending:
            self.own[sn] = self.pending.pop(sn)
        return [FinalDeliver(origin, sn, self.seq, size)]

    def _ensure(self) -> list[Action]:
        """4.3: `uniform` once every member of the primary view has delivered it: each member
        reports its history's length and digest; a report that is a prefix of my history
        (same digest at that length) vouches for that prefix, anything else for nothing new."""
        if self.status != PRIMARY or any(q not in self.vectors for q in self.lp):
            return []
        upto = len(self.history)
        for q in self.lp:
            n, digest = self.vectors[q]
            if n > len(self.history) or (n and self.digests[n - 1] != digest):
                return []  # ahead of me (I learn it later) or diverged: nothing to vouch for
            upto = min(upto, n)
        out: list[Action] = []
        for o, sn, _ in self.history[self.ensured_pos:upto]:
            if o == self.me:
                self.own.pop(sn, None)
            out.append(EnsuredDeliver(o, sn))
        self.ensured_pos = max(self.ensured_pos, upto)
        return out

    def _flush_state(self) -> bytes:
        """What membership compares in the flush: this instance and its history (length,
        digest): members of one instance agree iff they delivered the same."""
        if self.status != PRIMARY or self.inner is None:
            return bytes(4)  # no instance: nothing to agree on
        return struct.pack("!I", self.epoch) + STABLE_BODY.pack(
            len(self.history), self.digests[-1] if self.digests else DIGEST0)
