"""A heartbeat failure detector (the basis for membership; GORDA D3.5 section 4.2 has its
timeouts tuned at run time through management, since a timeout too short for the WAN causes
false suspicions and needless view changes).

Every `interval` each process sends ALIVE to the others, unless it sent a datagram to all of
them (a multicast of its protocol) within that interval: any datagram proves it alive, so the
multicast stands for the ALIVE (a hundred members sending ALIVEs ten times a second is ~100,000
datagrams a second, which a busy group's own traffic makes redundant). A member not heard from
(any datagram counts) for `timeout` is suspected, and unsuspected as soon as it is heard again.
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
                 timeout_ns: int = 1_000_000_000):
        self.me = me
        self.others = [m for m in members if m != me]
        self.interval_ns = interval_ns
        self.timeout_ns = timeout_ns
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
        # Since our last multicast (local time): less than an interval, the ALIVE can wait;
        # negative, our clock went back since, and the multicast says nothing of the time
        # ahead (skipping until the clock caught up would keep us silent for the jump plus an
        # interval, and a jump back of a timeout would get us suspected).
        since = now - self.multicast_at
        if self.multicast_at < 0 or since >= self.interval_ns or since < 0:
            out.append(Send(None, Message(Header(MsgType.ALIVE, Proto.RAW, sender=self.me))))
        for m, heard in self.last_heard.items():
            if m not in self.suspected and now - heard > self.timeout_ns:
                self.suspected.add(m)
                self.changes.append((m, True))
                out.append(Log("suspect", {"member": m, "silent_ms": (now - heard) / 1e6}))
        return out

    def drain_changes(self) -> list[tuple[int, bool]]:
        changes, self.changes = self.changes, []
        return changes
