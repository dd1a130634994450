"""A probing failure detector whose idle traffic per member does not grow with the group
(SWIM, `swim` section 3; GORDA D3.5 section 4.2 has its timeouts tuned at run time through
management, since a timeout too short for the WAN causes false suspicions and needless view
changes).

Rounds of `period` = `timeout / alives_per_timeout` (at least one `interval`; 250 ms by
default) on the local clock: in round r the member at index i of the sorted member list probes
the member at i + 1 + (r mod (n - 1)), so every member is probed by exactly one other each
round (a rotation: the round-robin probe order of `swim` section 4.3, fixed so that clocks
that agree to within a round also agree on who probes whom) and probes every other member
once in n - 1 rounds. A probe is a PING answered by an ACK; it is skipped when the target was
heard from during the last period (any datagram proves a member alive, so a busy group sends
no probes). An idle member sends one PING and one ACK a round: 8 datagrams a second by
default, whatever the group's size (the ALIVEs to every member this replaces were 33,600 a
second among a hundred idle members on the simulator: docs/benchmarks.md).

An unanswered PING is repeated every period. A target still silent `timeout` after the first
PING (counted in checks of `interval`, not on the clock, which a clock fault may jump) is
suspected, and the prober multicasts SUSPECT about it (suspicion spread to the group, `swim`
section 4.2; here by one multicast rather than piggybacked, so every member has it within a
one-way delay). A member that gets a SUSPECT adopts it unless it heard from the member within
the timeout itself; then it probes the member on its own. A suspected member that hears of it
(a SUSPECT, or a PING marked as from a member that suspects it) multicasts ALIVE; any datagram
from a suspected member unsuspects it at once. A process that restarts multicasts ALIVE on
start.

No indirect probes (`swim` section 3.1's PING-REQ through k members): a relayed ACK would
keep a member that cannot hear another directly from suspecting it, and the protocols need
exactly that suspicion (the membership's reachable set, the reliable layers' direct paths: a
one-way cut must make a view change or a suspect, not a stall). Loss is ridden out by the
repeated PINGs instead: four by default before a suspicion, as there were four ALIVEs.

Detection time: a member that crashes at c is probed by the prober of the first round that
starts more than a period after the last datagram a member got from it, so the first PING
leaves by c + 2 periods + an interval (plus a period for each crashed prober in the rounds
after it), and it is suspected everywhere `timeout` plus an interval after that plus a one-way
delay; a member that heard the crashed one within the timeout of the SUSPECT suspects it
itself at most `timeout` + a period + 2 intervals later. A cut of the path between two members
alone (the others still hear both) is noticed when the rotation brings one to the other: within
n - 1 periods plus the timeout (docs/protocols.md "Failure detector").

It is a side layer: the node core routes ALIVE datagrams and `fd:` timers here and tells the
protocol about suspicions, so the total-order stack itself does not change.
"""

from __future__ import annotations

from typing import Final

from nodes.protocols.base import Action, Log, Send, SetTimer
from nodes.wire import Header, Message, MsgType, Proto

TICK: Final = "fd:tick"

# The kinds of ALIVE datagrams (header `aux`; `origin` names the member it is about).
ANNOUNCE: Final = 0  # multicast: I am alive (after a restart, or refuting a suspicion)
PING: Final = 1  # answer with an ACK
PING_SUSPECTED: Final = 2  # a PING from a member that suspects the target
ACK: Final = 3  # the answer to a PING
SUSPECT: Final = 4  # multicast: I suspect `origin`
KINDS: Final = frozenset((ANNOUNCE, PING, PING_SUSPECTED, ACK, SUSPECT))


class Probe:
    """An unanswered probe: the target's last-heard time when it went out (answered once that
    changes), how long it has waited and since its last PING (in check intervals)."""

    __slots__ = ("mark", "waited_ns", "since_ping_ns")

    def __init__(self, mark: int):
        self.mark = mark
        self.waited_ns = 0
        self.since_ping_ns = 0


class FailureDetector:
    def __init__(self, me: int, members: list[int], interval_ns: int = 100_000_000,
                 timeout_ns: int = 1_000_000_000, alives_per_timeout: int = 4,
                 announce: bool = False):
        self.me = me
        self.members = sorted(members)
        self.index = self.members.index(me) if me in self.members else 0
        self.others = [m for m in self.members if m != me]
        self.interval_ns = interval_ns
        self.timeout_ns = timeout_ns
        self.alives_per_timeout = max(1, alives_per_timeout)
        self.announce = announce  # a restarted process: tell the group at start
        self.alive_at = -1  # local time of our last ANNOUNCE (-1: none)
        self.round = -1
        self.last_heard: dict[int, int] = {}
        self.suspected: set[int] = set()
        self.probes: dict[int, Probe] = {}
        self.changes: list[tuple[int, bool]] = []  # (member, now suspected?) since last drain
        self.suspicions = 0  # suspicions raised since start (a false one costs a view change)

    def start(self, now: int) -> list[Action]:
        self.last_heard = {m: now for m in self.others}
        out: list[Action] = [SetTimer(TICK, self.interval_ns)]
        if self.announce and self.others:
            out.append(self._alive(now))
        return out

    def heard(self, src: int, now: int) -> list[Action]:
        """Any datagram from src proves it alive."""
        if src in self.last_heard:
            self.last_heard[src] = now
            if src in self.suspected:
                self.suspected.discard(src)
                self.changes.append((src, False))
                return [Log("unsuspect", {"member": src})]
        return []

    def on_alive(self, src: int, h: Header, now: int) -> list[Action]:
        """An ALIVE datagram from src (already counted as hearing from src, which answers our
        probe of it; the edge checked its kind and that `origin` is a member)."""
        kind, about = h.aux, h.origin
        if kind in (PING, PING_SUSPECTED):
            out: list[Action] = [self._send(src, ACK, self.me)]
            if kind == PING_SUSPECTED:
                out += self._refute(now)
            return out
        if kind == SUSPECT:
            return self._suspicion_of(about, now)
        return []  # ANNOUNCE, ACK: hearing it was all

    def _suspicion_of(self, member: int, now: int) -> list[Action]:
        if member == self.me:
            return self._refute(now)
        if member not in self.last_heard or member in self.suspected:
            return []
        if now - self.last_heard[member] > self.timeout_ns:
            return self._suspect(member, now)
        if member not in self.probes:  # we heard it lately: see for ourselves
            self.probes[member] = Probe(self.last_heard[member])
            return [self._send(member, PING, member)]
        return []

    def on_timer(self, now: int) -> list[Action]:
        out: list[Action] = [SetTimer(TICK, self.interval_ns)]
        period = self.period_ns()
        last_heard = self.last_heard
        for m, probe in list(self.probes.items()):
            if last_heard[m] != probe.mark or m in self.suspected:
                del self.probes[m]  # answered (or suspected meanwhile)
                continue
            probe.waited_ns += self.interval_ns
            probe.since_ping_ns += self.interval_ns
            if probe.waited_ns > self.timeout_ns:
                del self.probes[m]
                out += self._suspect(m, now)
                out.append(Send(None, Message(Header(MsgType.ALIVE, Proto.RAW, sender=self.me,
                                                     origin=m, aux=SUSPECT))))
            elif probe.since_ping_ns >= period:
                probe.since_ping_ns = 0
                out.append(self._send(m, PING, m))
        rnd = now // period
        if rnd != self.round and self.others:
            self.round = rnd
            n = len(self.members)
            target = self.members[(self.index + 1 + rnd % (n - 1)) % n]
            if target in self.suspected:
                out.append(self._send(target, PING_SUSPECTED, target))
            elif target not in self.probes and not 0 <= now - last_heard[target] < period:
                self.probes[target] = Probe(last_heard[target])
                out.append(self._send(target, PING, target))
        return out

    def period_ns(self) -> int:
        """The probe round: `timeout / alives_per_timeout`, at least one interval (read at
        every check: management may change the interval and the timeout at run time)."""
        period = self.timeout_ns // self.alives_per_timeout
        return period if period > self.interval_ns else self.interval_ns

    def _suspect(self, member: int, now: int) -> list[Action]:
        self.suspected.add(member)
        self.suspicions += 1
        self.changes.append((member, True))
        return [Log("suspect", {"member": member,
                                "silent_ms": (now - self.last_heard[member]) / 1e6})]

    def _refute(self, now: int) -> list[Action]:
        """We are suspected: multicast ALIVE, at most once a period."""
        if self.alive_at >= 0 and 0 <= now - self.alive_at < self.period_ns():
            return []
        return [self._alive(now)]

    def _alive(self, now: int) -> Send:
        self.alive_at = now
        return Send(None, Message(Header(MsgType.ALIVE, Proto.RAW, sender=self.me,
                                         origin=self.me, aux=ANNOUNCE)))

    def _send(self, dst: int, kind: int, about: int) -> Send:
        return Send(dst, Message(Header(MsgType.ALIVE, Proto.RAW, sender=self.me, origin=about,
                                        aux=kind)))

    def drain_changes(self) -> list[tuple[int, bool]]:
        changes, self.changes = self.changes, []
        return changes
