"""`lamport`'s restart handshake L0 (nodes/protocols/lamport.py) on a hand-run network: a
restarted process holds its broadcasts until every other member welcomed it, because a
WELCOME from a member that is behind does not put the joiner's clock past what the others
already delivered.

The run: 1 crashes and restarts while 2 is cut off from 1 and 3 (what 3 sent waits on the
way; the old 1's last messages never reach 2: repair is from the sender only). 3 delivered m,
whose timestamp exceeds 2's clock, on the old 1's timestamps and 2's acknowledgement. The
restarted 1 reaches 2 first (2 welcomes it) and 3 later. Waiting for 3's WELCOME as well gives
its message y a timestamp past m at both; ending the join at 2's WELCOME (the bench's mutant
`lamport-join-first-welcome`) gives y a timestamp below m: 2 delivers y before m, 3 after.
Explore does not draw this within 500 seeds: it needs the restart between a heal and the
repair of what 2 missed, and the restarted 1 sending before any datagram of 3 reaches it, yet
late enough that 3 delivered m first (docs/benchmarks.md, "Explorer mutation score"). This
test fails on the mutant by total order."""

from __future__ import annotations

from collections import deque

from nodes.protocols.base import Action, FinalDeliver, Send
from nodes.protocols.lamport import Lamport
from nodes.wire import Message

MEMBERS = [1, 2, 3]
PARAMS = {"ack_mode": "immediate"}


class Net:
    """R-deliveries by hand: per-pair FIFO queues a step delivers from, in order."""

    def __init__(self) -> None:
        self.nodes = {m: Lamport(m, MEMBERS, dict(PARAMS)) for m in MEMBERS}
        self.queues: dict[tuple[int, int], deque[Message]] = {
            (a, b): deque() for a in MEMBERS for b in MEMBERS if a != b}
        self.delivered: dict[int, list[tuple[int, int]]] = {m: [] for m in MEMBERS}
        for m, node in self.nodes.items():
            self.run(m, node.start(0))

    def run(self, me: int, actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, Send):
                for dst in [a.dst] if a.dst is not None else [m for m in MEMBERS if m != me]:
                    self.queues[(me, dst)].append(a.msg)
            elif isinstance(a, FinalDeliver):
                self.delivered[me].append((a.origin, a.mno))

    def broadcast(self, me: int, payload: bytes) -> None:
        self.run(me, self.nodes[me].broadcast(payload, 0))

    def step(self, src: int, dst: int) -> None:
        """R-deliver at dst everything src sent it so far."""
        queue = self.queues[(src, dst)]
        while queue:
            msg = queue.popleft()
            self.run(dst, self.nodes[dst]._receive(src, msg, 0))

    def restart(self, me: int) -> None:
        """Crash `me` (what it sent and what was on the way to it is lost), start it again."""
        for pair, queue in self.queues.items():
            if me in pair:
                queue.clear()
        self.nodes[me] = Lamport(me, MEMBERS, {**PARAMS, "incarnation": 1})
        self.run(me, self.nodes[me].start(0))

    def settle(self) -> None:
        while any(self.queues.values()):
            for src, dst in list(self.queues):
                self.step(src, dst)


def order(log: list[tuple[int, int]], a: tuple[int, int], b: tuple[int, int]) -> bool:
    """a before b in log (both in it)."""
    return log.index(a) < log.index(b)


def test_a_restarted_process_waits_for_every_welcome() -> None:
    net = Net()
    one, three = net.nodes[1], net.nodes[3]
    # 2 is cut off; 1 and 3 exchange messages, 3's for 2 wait on the way
    net.broadcast(1, b"w")
    net.step(1, 3)
    net.broadcast(3, b"m")
    m, m_ts = (3, three.mno), three.clock
    net.step(3, 1)
    net.broadcast(1, b"x")
    net.step(1, 3)
    assert net.delivered[3] == []  # nothing from 2 yet
    assert one.clock > m_ts  # the old 1's last timestamps lie past m
    net.restart(1)  # the old 1's w and x never reach 2
    net.broadcast(1, b"y")
    y = (1, net.nodes[1].mno)
    net.step(1, 2)  # the JOIN: 2 welcomes the restarted 1
    assert net.nodes[2].clock < m_ts  # 2 is behind: its WELCOME's timestamp is below m's
    net.step(2, 1)
    net.step(3, 2)  # 2 hears 3 again: m, and 2 acknowledges it
    net.step(2, 3)
    assert m in net.delivered[3]  # 3 delivered m before anything of the restarted 1
    net.settle()
    net.broadcast(2, b"z")  # later traffic: every member delivers everything it got
    net.broadcast(3, b"z")
    net.settle()
    two_log, three_log = net.delivered[2], net.delivered[3]
    assert {m, y} <= set(two_log) and {m, y} <= set(three_log)
    assert order(two_log, m, y) == order(three_log, m, y)  # total order
    assert order(three_log, m, y)
