"""A heartbeat failure detector (the basis for membership; GORDA D3.5 section 4.2 has its
timeouts tuned at run time through management, since a timeout too short for the WAN causes
false suspicions and needless view changes).

Every `interval` each process checks its peers, and sends ALIVE to the others once it has
been silent towards all of them (no ALIVE, no multicast of its protocol: any datagram proves it
alive, so a multicast stands for the ALIVE) for `timeout / alives_per_timeout` -- by default a
quarter of the timeout, and never less than one interval. A member not heard from (any datagram
counts) for `timeout` is suspected, and unsuspected as soon as it is heard again; the check
runs every `interval`, so how fast a crash is suspected does not depend on the ALIVEs' period.

Why a quarter: a peer suspects us only after `timeout` of silence, so ALIVEs every
`timeout / 4` (at most that plus an interval apart, the tick's granularity) let three in a row
be lost, or one be late by half the timeout, without a false suspicion. An ALIVE every
interval (100 ms, a tenth of the timeout: nine losses in a row) was ~100,000 datagrams a second
among a hundred idle members, 237,229 of the 1,576,631 events of the simulator's 100x10 bench
(a busy group's own multicasts skip most of them: a member multicasting ten times a second is
silent for 100 ms 37 % of the time, for 250 ms 8 %).
It is a side layer: the node core routes ALIVE datagrams and `fd:` timers here and tells the
protocol about suspicions, so the total-order stack itself does not change.
"""

from __future__ import annotations

from typing import Final

from nodes.protocols.base import Action, Log, Send, SetTimer
from nodes.wire import Header, Message, MsgType, Proto

TICK: Final = "fd:tick"


class FailureDetector:
    def __init__(self, me: int, members: list[int], interval_ns: int = 100_000_000,
                 timeout_ns: int = 1_000_000_000, alives_per_timeout: int = 4):
        self.me = me
        self.others = [m for m in members if m != me]
        self.interval_ns = interval_ns
        self.timeout_ns = timeout_ns
        self.alives_per_timeout = max(1, alives_per_timeout)
        self.alive_at = -1  # local time of our last ALIVE (-1: none)
        self.last_heard: dict[int, int] = {}
        self.suspected: set[int] = set()
        self.changes: list[tuple[int, bool]] = []  # (member, now suspected?) since last drain
        # Local time of our last datagram to every member (the node core sets it; -1: none).
        self.multicast_at = -1

    def start(self, now: int) -> list[Action]:
        self.last_heard = {m: now for m in self.others}
        return [SetTimer(TICK, self.interval_ns)]

    def heard(self, src: int, now: int) -> list[Action]:
        """Any datagram from src proves it alive."""
        if src in self.last_heard:
            self.last_heard[src] = now
            if src in self.suspected:
                self.suspected.discard(src)
                self.changes.append((src, False))
                return [Log("unsuspect", {"member": src})]
        return []

    def on_timer(self, now: int) -> list[Action]:
        out: list[Action] = [SetTimer(TICK, self.interval_ns)]
        # Since our last ALIVE or multicast (local time): less than the silence allowed, the
        # ALIVE can wait; negative, our clock went back since, and that datagram says nothing
        # of the time ahead (skipping until the clock caught up would keep us silent for the
        # jump plus an interval, and a jump back of a timeout would get us suspected).
        last = self.multicast_at if self.multicast_at > self.alive_at else self.alive_at
        since = now - last
        if last < 0 or since >= self.silence_ns() or since < 0:
            self.alive_at = now
            out.append(Send(None, Message(Header(MsgType.ALIVE, Proto.RAW, sender=self.me))))
        for m, heard in self.last_heard.items():
            if m not in self.suspected and now - heard > self.timeout_ns:
                self.suspected.add(m)
                self.changes.append((m, True))
                out.append(Log("suspect", {"member": m, "silent_ms": (now - heard) / 1e6}))
        return out

    def silence_ns(self) -> int:
        """How long we may stay silent towards the group before an ALIVE goes out:
        `timeout / alives_per_timeout`, at least one interval (read at every tick: management
        may change the interval and the timeout at run time)."""
        silence = self.timeout_ns // self.alives_per_timeout
        return silence if silence > self.interval_ns else self.interval_ns

    def drain_changes(self) -> list[tuple[int, bool]]:
        changes, self.changes = self.changes, []
        return changes
