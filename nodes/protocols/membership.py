"""Partitionable, view-synchronous group membership (001 §4.1, the service the
primary-partition layer needs; coordinator-based, as docs/protocols.md "primary" describes).

It is fed by the node's heartbeat failure detector (nodes/protocols/failure_detector.py): a
process's *reachable set* is itself plus every member it does not suspect. Rules:

- M1 propose: the lowest process of its reachable set R, when R differs from its installed
  view, proposes V = (vid, R) with vid one above every view id it has seen, and retransmits
  PROPOSE every `retry` to the members that have not answered;
- M2 flush: a member accepts a PROPOSE with a higher vid than anything it accepted, from the
  lowest member of the proposed set, and answers FLUSH_OK carrying its owner's flush state
  (what it has delivered in the old view); it stops sending new messages (the owner queues
  them) and re-sends FLUSH_OK every `retry` while its state changes or the INSTALL is lost;
- M3 install: the coordinator installs V once every proposed member has answered and the
  flush states of members of one old view agree (the members that move together delivered
  the same messages: view synchrony), or after `flush_timeout` (logged `flush_timeout`);
  it multicasts INSTALL, answers any later FLUSH_OK for an installed view with the INSTALL
  again, and a member installs the highest view it accepted. INSTALL says whether the flush
  agreed (`View.synced`): after a timeout the members that moved together may have delivered
  different messages, view synchrony does not hold for that view, and the owner must not
  act as if it did (the primary layer's P2);
- M5 transitional set (view synchrony's "moved together"): FLUSH_OK carries the view its
  sender is in, and INSTALL the view each member comes from (`View.prev`). A member
  installs only the view of its latest FLUSH_OK (from that proposal's coordinator) and
  REJECTs a proposal below it, so what FLUSH_OK reported is where it really comes from: a
  member never passes through another view between its FLUSH_OK and the INSTALL.
  Cause once seen: a paused member came back into a view holding the members that had
  formed a primary without it, and nothing told it they had not come from its own view:
  the primary layer's P2 installed at once a second primary with their counter.
- M7 a member's FLUSH_OK binds it (`bound`): its owner changes the reported state no
  further in the old view (the primary layer delivers nothing more of the old instance and
  decides nothing in its held view), so the state the coordinator compared is the state the
  member installs with.
  It stays bound until it installs a view (a later proposal gets the same report): a member
  that dropped its flush (its coordinator suspected, or no longer the lowest it reaches, M4)
  may still take that proposal's INSTALL (M5), so it asks for a view (JOIN to the lowest it
  reaches every `retry`, or a proposal of its own when that is itself) until one comes.
  Cause once seen: a member reported its history, then delivered its sequencer's late ORDER
  in the old view; the coordinator installed on the stale report and the new primary's
  members disagreed on the old view, so a message sent after that one was delivered before
  it (fifo_order, world seed 5044 of `primary`).
- a proposal whose member becomes suspected is abandoned: the next tick proposes anew; so is
  one a member REJECTs because it installed that view id already (on another side of a
  partition): the coordinator proposes again above it;
- M6 a member that is not in one view with the lowest process it reaches (it is not the
  coordinator) sends that process JOIN every `retry`, which makes it propose a view with
  both. Cause once seen (liveness, 001 §4.1: the membership supports join): a
  clock jump made h3's detector suspect everyone, h3 installed the view {h3} and blocked;
  when it unsuspected them, the lowest process had never suspected h3 and its view was
  still everyone's, so no one proposed and h3 stayed alone for good (explore seed 40869).
  Only the coordinator's absence from my view counts: asking whenever my view lacks some
  process I reach would make a new view every `retry` under a non-transitive partition
  (the coordinator cannot reach that process, so each new view lacks it again).
- M4 a flush once started ends in a view: the coordinator installs one even when its
  reachable set is back to the installed view's, and a member whose flush coordinator is no
  longer the lowest it reaches drops that flush and sends JOIN to the one that is, every
  `retry` until it answers a proposal or installs a view (a JOIN can be lost too). Causes
  once seen: a proposal dropped because the partition healed first left its members flushing
  (sending nothing) for good, the group split over two primary counters; a member that
  dropped its own proposal (it had suspected the coordinator for a moment) while the
  coordinator installed a view with it sent one JOIN, which was lost: it stayed in its old
  view and the others waited for its probe for good (world seed 0 of `primary`).

Views are partitionable: each side of a partition installs its own. The first view (id 1,
every configured member) is installed by configuration, as all nodes of a run start together.
A restarted process (a new incarnation) starts with no view and multicasts JOIN every
`retry` until it is in one: the coordinator proposes a new view even if its failure detector
never noticed the crash.

Wire (id 19, `membership`): type DATA, the kind in `aux`, the view id in `seq`; PROPOSE
carries the members as u16s, INSTALL a u16 count, the members as u16s and the view each
comes from as u32s, `hint` 1 when the flush timed out (states not agreed); FLUSH_OK the
sender's view id in `mno` and the owner's opaque flush state.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from nodes.protocols.base import Action, Log, Send, SetTimer
from nodes.wire import Header, Message, MsgType

WIRE_ID = 19
TICK = "mb:tick"
PROPOSE, FLUSH_OK, INSTALL, REJECT, JOIN = 1, 2, 3, 4, 5
U16 = struct.Struct("!H")
U32 = struct.Struct("!I")


def pack_members(members: tuple[int, ...]) -> bytes:
    return b"".join(U16.pack(m) for m in members)


def unpack_members(payload: bytes) -> tuple[int, ...]:
    """Members from a payload; ValueError when it is not a sorted set of u16s."""
    if len(payload) % 2 or not payload:
        raise ValueError("member list of odd or zero length")
    out = tuple(U16.unpack_from(payload, i)[0] for i in range(0, len(payload), 2))
    if list(out) != sorted(set(out)):
        raise ValueError("member list not sorted and unique")
    return out


def pack_install(members: tuple[int, ...], prev: tuple[int, ...]) -> bytes:
    return (U16.pack(len(members)) + pack_members(members)
            + b"".join(U32.pack(p) for p in prev))


def unpack_install(payload: bytes) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """INSTALL's members and the view each comes from (M5); ValueError when malformed."""
    if len(payload) < 2:
        raise ValueError("install shorter than its member count")
    (n,) = U16.unpack_from(payload, 0)
    if n == 0 or len(payload) != 2 + 6 * n:
        raise ValueError("install of a wrong length")
    members = unpack_members(payload[2:2 + 2 * n])
    prev = tuple(U32.unpack_from(payload, 2 + 2 * n + 4 * k)[0] for k in range(n))
    return members, prev


@dataclass
class View:
    vid: int
    members: tuple[int, ...]
    # M5: per member, the view id it installed this view from (0: none, the configured or a
    # restarted process's first view)
    prev: tuple[int, ...] = ()
    # M3: the flush states of the members that moved together agreed (False: installed after
    # `flush_timeout`, view synchrony does not hold for this view)
    synced: bool = True


@dataclass
class Proposal:
    vid: int
    members: tuple[int, ...]
    started: int
    states: dict[int, bytes]
    prevs: dict[int, int]


class Membership:
    """One process's membership state machine. `flush_state()` is the owner's flush state
    (bytes; the first 4 name the old view's instance, members of one instance must agree).
    Installed views are queued in `installed` for the owner to drain."""

    def __init__(self, me: int, members: list[int], flush_state: Callable[[], bytes],
                 retry_ns: int = 50_000_000, flush_timeout_ns: int = 1_000_000_000,
                 restarted: bool = False):
        self.me = me
        self.all = tuple(sorted(members))
        self.flush_state = flush_state
        self.retry_ns = retry_ns
        self.flush_timeout_ns = flush_timeout_ns
        # A restarted process (a new incarnation) knows no view: it asks to join (JOIN) until
        # a coordinator installs one with it, even if nobody suspected it meanwhile.
        self.view = View(0, (me,)) if restarted else View(1, self.all)
        self.max_vid = self.view.vid
        self.joiners: set[int] = set()  # JOINs a coordinator has to answer with a view
        self.suspected: set[int] = set()
        self.proposal: Proposal | None = None  # coordinated by me
        self.accepted: tuple[int, int, tuple[int, ...]] | None = None  # (vid, coord, members)
        # M5: the proposal (vid, coordinator) of my latest FLUSH_OK: the only view I install
        self.flushed: tuple[int, int] = (self.view.vid, -1)
        self.last_state = b""
        self.installed: list[View] = []
        self.rejected = 0
        self.asking = False  # M4: JOIN every retry until a proposal or a view comes
        self.dropped = False  # M7: I dropped the flush of `flushed`; its INSTALL may still come

    @property
    def flushing(self) -> bool:
        return self.accepted is not None

    @property
    def bound(self) -> bool:
        """M7: the state of my latest FLUSH_OK may still be what I install a view with."""
        return self.accepted is not None or self.dropped

    def roles(self) -> dict[str, int]:
        """The `installer`: the coordinator of the proposal this member last answered
        (FLUSH_OK), the only one whose INSTALL it takes (M5); none before its first."""
        coordinator = self.flushed[1]
        return {"installer": coordinator} if coordinator >= 0 else {}

    def reachable(self) -> tuple[int, ...]:
        return tuple(m for m in self.all if m not in self.suspected)

    def start(self, now: int) -> list[Action]:
        return [SetTimer(TICK, self.retry_ns)]

    def on_suspect(self, member: int, suspected: bool, now: int) -> list[Action]:
        if suspected:
            self.suspected.add(member)
        else:
            self.suspected.discard(member)
        if self.accepted is not None and suspected and member == self.accepted[1]:
            self.accepted = None  # the coordinator is gone: the next lowest proposes (M1)
            self.dropped = True  # M7
        return []

    def on_timer(self, now: int) -> list[Action]:
        out: list[Action] = [SetTimer(TICK, self.retry_ns)]
        reach = self.reachable()
        if self.accepted is not None and self.accepted[1] != reach[0]:
            # M4: the coordinator of the flush I joined is no longer the lowest I reach; it
            # will not install, so I ask the one that is (my flush must end in a view)
            self.accepted = None
            self.dropped = True
        if self.dropped and self.accepted is None:
            # M4, M7: a dropped flush binds me until a view comes; I ask for one
            if reach[0] == self.me:
                self.joiners.add(self.me)
            else:
                self.asking = True
        if reach[0] == self.me and (reach != self.view.members or self.joiners & set(reach)
                                    or self.accepted is not None):
            # M1; a flush once started (members stopped sending) ends in a new view even
            # when the reachable set is back to the installed view's
            out += self._coordinate(reach, now)
        elif self.proposal is not None:
            self.proposal = None  # no longer the coordinator, or nothing left to change
        if self.view.vid == 0 and self.accepted is None:
            out += [self._msg(m, JOIN, 0, b"") for m in reach if m != self.me]
        elif self.accepted is None and reach[0] != self.me and (
                self.asking or reach[0] not in self.view.members):
            # M4: I dropped a flush, and the lowest I reach may have installed a view with me
            # that I never took; M6: the lowest I reach is not in my view and may never
            # notice (it suspected nobody). Either way I ask it for a view with me
            out.append(self._msg(reach[0], JOIN, self.view.vid, b""))
        if self.accepted is not None and self.accepted[1] != self.me:
            state = self.flush_state()
            out.append(self._msg(self.accepted[1], FLUSH_OK, self.accepted[0], state,
                                 self.view.vid))
            self.last_state = state
        return out

    def _coordinate(self, reach: tuple[int, ...], now: int) -> list[Action]:
        """M1 and M3 at the coordinator."""
        p = self.proposal
        if p is None or p.members != reach:
            self.max_vid += 1
            p = self.proposal = Proposal(self.max_vid, reach, now, {}, {})
            self.accepted = (p.vid, self.me, reach)
            self.flushed = (p.vid, self.me)
            self.dropped = False
            return [Log("propose", {"vid": p.vid, "members": list(reach)})]
        p.states[self.me] = self.flush_state()
        p.prevs[self.me] = self.view.vid
        missing = [m for m in p.members if m not in p.states]
        if missing:
            return [self._msg(m, PROPOSE, p.vid, pack_members(p.members)) for m in missing]
        by_instance: dict[bytes, set[bytes]] = {}
        for state in p.states.values():
            by_instance.setdefault(state[:4], set()).add(state)
        agreed = all(len(s) == 1 for s in by_instance.values())
        timed_out = now - p.started > self.flush_timeout_ns
        if not agreed and not timed_out:
            return []
        out: list[Action] = []
        if not agreed:
            out.append(Log("flush_timeout", {"vid": p.vid}))
        view = View(p.vid, p.members, tuple(p.prevs[m] for m in p.members), agreed)
        out.append(self._install_msg(None, view))
        self.proposal = None
        return out + self._install(view)

    def on_message(self, src: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        kind = h.aux
        try:
            if kind == PROPOSE:
                return self._on_propose(src, h.seq, unpack_members(msg.payload))
            if kind == FLUSH_OK:
                return self._on_flush_ok(src, h.seq, h.mno, msg.payload)
            if kind == INSTALL:
                if h.hint not in (0, 1):
                    raise ValueError(f"install flush flag {h.hint}")
                return self._on_install(src, h.seq, *unpack_install(msg.payload),
                                        synced=not h.hint)
            if kind == JOIN:
                self.joiners.add(src)
                return []
            if kind == REJECT:
                if self.proposal is not None and h.seq >= self.proposal.vid:
                    self.max_vid = max(self.max_vid, h.seq)
                    self.proposal = None  # propose again above the rejecter's view id
                return []
        except ValueError as exc:
            self.rejected += 1
            return [Log("drop", {"reason": "membership", "detail": str(exc)})]
        self.rejected += 1
        return [Log("drop", {"reason": "membership", "detail": f"unknown kind {kind}"})]

    def _on_propose(self, src: int, vid: int, members: tuple[int, ...]) -> list[Action]:
        """M2."""
        self.max_vid = max(self.max_vid, vid)
        if self.me not in members or src != members[0]:
            return []
        if vid <= self.view.vid:  # the coordinator has not heard of my view (another side's)
            return [self._msg(src, REJECT, self.view.vid, b"")]
        if vid < self.flushed[0] or vid == self.flushed[0] and src != self.flushed[1]:
            # M5: I answered a later proposal (or another coordinator's with this id): only
            # that one may install me; this coordinator proposes again above it
            return [self._msg(src, REJECT, self.flushed[0], b"")]
        self.accepted = (vid, src, members)
        self.flushed = (vid, src)
        self.dropped = False
        self.asking = False
        if self.proposal is not None and self.proposal.vid < vid:
            self.proposal = None
        state = self.flush_state()
        self.last_state = state
        return [self._msg(src, FLUSH_OK, vid, state, self.view.vid)]

    def _on_flush_ok(self, src: int, vid: int, prev: int, state: bytes) -> list[Action]:
        if len(state) < 4:
            raise ValueError("flush state shorter than its instance id")
        p = self.proposal
        if p is not None and p.vid == vid and src in p.members:
            p.states[src] = state
            p.prevs[src] = prev
            return []
        if (vid == self.view.vid and src in self.view.members and self.view.members[0] == self.me
                and self.view.prev):
            return [self._install_msg(src, self.view)]  # M3 resend
        return []

    def _on_install(self, src: int, vid: int, members: tuple[int, ...],
                    prev: tuple[int, ...], synced: bool = True) -> list[Action]:
        self.max_vid = max(self.max_vid, vid)
        if (self.me not in members or src != members[0] or vid <= self.view.vid
                or (vid, src) != self.flushed):
            return []  # M5: not the proposal of my latest FLUSH_OK
        if prev[members.index(self.me)] != self.view.vid:
            raise ValueError(f"install says I come from view {prev[members.index(self.me)]}, "
                             f"I am in {self.view.vid}")
        return self._install(View(vid, members, prev, synced))

    def _install(self, view: View) -> list[Action]:
        self.view = view
        self.joiners -= set(view.members)
        self.accepted = None
        self.asking = self.dropped = False
        self.installed.append(view)
        return [Log("view", {"layer": "membership", "vid": view.vid,
                             "members": list(view.members)})]

    def _msg(self, dst: int | None, kind: int, vid: int, payload: bytes, mno: int = 0,
             hint: int = 0) -> Send:
        return Send(dst, Message(Header(MsgType.DATA, WIRE_ID, sender=self.me, seq=vid,
                                        mno=mno, hint=hint, aux=kind), payload))

    def _install_msg(self, dst: int | None, view: View) -> Send:
        return self._msg(dst, INSTALL, view.vid, pack_install(view.members, view.prev),
                         hint=int(not view.synced))
