"""The probing failure detector (nodes/protocols/failure_detector.py): an idle group's control
traffic per member does not grow with the group, a crashed member is still suspected by every
member within the documented time, and a suspected member that is heard again is unsuspected.

The unit tests run detectors over a tiny in-memory network (every datagram delivered after
`DELAY`, the node core's routing: any datagram is heard, ALIVEs go to `on_alive`); the count
runs whole idle groups on the simulator."""

from __future__ import annotations

from collections.abc import Iterable

from bench.idle_control import idle_datagrams
from nodes.protocols.base import Action, Send
from nodes.protocols.failure_detector import FailureDetector
from nodes.wire import Message

MS = 1_000_000
T0 = 10_000 * MS
DELAY = 1 * MS
INTERVAL, TIMEOUT = 100 * MS, 1000 * MS
PERIOD = TIMEOUT // 4


class Group:
    """`n` detectors ticking every interval; `down` members neither send nor receive,
    datagrams from src to dst are dropped for every (src, dst) in `cut`."""

    def __init__(self, n: int, start: int = T0, announce: Iterable[int] = ()):
        self.fds = {m: FailureDetector(m, list(range(n)), INTERVAL, TIMEOUT,
                                       announce=m in set(announce)) for m in range(n)}
        self.down: set[int] = set()
        self.cut: set[tuple[int, int]] = set()
        self.inflight: list[tuple[int, int, int, Message]] = []  # (at, src, dst, msg)
        self.sent = 0
        self.now = start
        for m, fd in self.fds.items():
            self._out(m, fd.start(start))

    def _out(self, src: int, actions: list[Action]) -> None:
        for a in actions:
            if type(a) is Send:
                dsts = [a.dst] if a.dst is not None else [m for m in self.fds if m != src]
                for d in dsts:
                    self.sent += 1
                    if src not in self.down and (src, d) not in self.cut:
                        self.inflight.append((self.now + DELAY, src, d, a.msg))

    def run(self, until: int) -> None:
        while self.now < until:
            step = self.now + INTERVAL
            while True:
                due = sorted((x for x in self.inflight if x[0] <= step), key=lambda x: x[0])
                if not due:
                    break
                for x in due:
                    self.inflight.remove(x)
                    at, src, dst, msg = x
                    if dst in self.down:
                        continue
                    fd = self.fds[dst]
                    self.now = at
                    self._out(dst, fd.heard(src, at) + fd.on_alive(src, msg.header, at))
            self.now = step
            for m, fd in self.fds.items():
                if m not in self.down:
                    self._out(m, fd.on_timer(step))

    def suspecting(self, member: int) -> set[int]:
        return {m for m, fd in self.fds.items() if member in fd.suspected and m not in self.down}


def test_an_idle_member_sends_one_ping_and_one_ack_a_round_whatever_the_group_size() -> None:
    """Per member, at most one PING and one ACK per round of a quarter timeout (8 a second), at
    5 and at 40 members alike (fewer when a PING heard from the target stands for the probe);
    the heartbeat to every member this replaces sent (n - 1) x 4."""
    rates = []
    for n in (5, 40):
        g = Group(n)
        g.run(T0 + 2000 * MS)  # settle
        before = g.sent
        g.run(T0 + 12_000 * MS)
        rates.append((g.sent - before) / n / 10)
        assert not any(fd.suspected for fd in g.fds.values())
    assert all(3 <= r <= 8.5 for r in rates), rates


def test_a_crashed_member_is_suspected_by_all_within_the_documented_time() -> None:
    """The bound of the module docstring with one crash, no loss: the first PING by 2 periods
    + an interval after the crash, suspicion a timeout + an interval after that, plus a delay."""
    bound = 2 * PERIOD + INTERVAL + TIMEOUT + INTERVAL + DELAY
    for n, victim in ((3, 1), (12, 7), (30, 0)):
        g = Group(n)
        g.run(T0 + 3000 * MS)
        crash = g.now
        g.down.add(victim)
        while g.suspecting(victim) != set(g.fds) - {victim}:
            g.run(g.now + INTERVAL)
            assert g.now - crash <= bound + INTERVAL, (n, g.suspecting(victim))
        others = [fd for m, fd in g.fds.items() if m != victim]
        assert all(fd.suspected == {victim} for fd in others)


def test_a_suspected_member_that_is_heard_again_is_unsuspected() -> None:
    """Cut off from everyone, member 2 is suspected by all (and suspects all); after the heal
    a PING marked as from a member that suspects it makes it multicast ALIVE, and within a
    few rounds nobody suspects anybody."""
    n = 8
    g = Group(n)
    g.run(T0 + 2000 * MS)
    g.cut = {p for m in range(n) if m != 2 for p in ((2, m), (m, 2))}
    g.run(g.now + 3 * TIMEOUT + 10 * PERIOD)
    assert g.suspecting(2) == set(range(n)) - {2}
    healed = g.now
    g.cut = set()
    while any(fd.suspected for fd in g.fds.values()):
        g.run(g.now + INTERVAL)
        assert g.now - healed <= 2 * (n - 1) * PERIOD, {m: fd.suspected
                                                         for m, fd in g.fds.items()}


def test_a_one_way_cut_is_suspected_by_the_member_cut_off_only() -> None:
    """Member 3 cannot send to 0 (the management test's cut): 0 suspects 3 once its rotation
    reaches 3, within n - 1 periods plus the timeout and two intervals; the others, who still
    hear 3, do not take 0's SUSPECT, and 3 suspects no one. After the heal 0 hears 3 again (a
    PING marked as from a suspecting member makes 3 announce itself)."""
    n = 4
    g = Group(n)
    g.run(T0 + 2000 * MS)
    g.cut = {(3, 0)}
    cut = g.now
    while 3 not in g.fds[0].suspected:
        g.run(g.now + INTERVAL)
        assert g.now - cut <= (n - 1) * PERIOD + TIMEOUT + 2 * INTERVAL
    g.run(g.now + 3 * TIMEOUT)
    assert g.suspecting(3) == {0}
    assert not any(fd.suspected for m, fd in g.fds.items() if m != 0)
    g.cut = set()
    healed = g.now
    while g.suspecting(3):
        g.run(g.now + INTERVAL)
        assert g.now - healed <= (n - 1) * PERIOD + INTERVAL


def test_a_restarted_member_announces_itself() -> None:
    """A restart (announce) multicasts ALIVE at start: whoever suspected it stops at once."""
    g = Group(4)
    g.run(T0 + 1000 * MS)
    g.down.add(3)
    g.run(g.now + 3 * TIMEOUT)
    assert g.suspecting(3) == {0, 1, 2}
    g.down.discard(3)
    g.fds[3] = FailureDetector(3, [0, 1, 2, 3], INTERVAL, TIMEOUT, announce=True)
    g._out(3, g.fds[3].start(g.now))
    g.run(g.now + INTERVAL)
    assert g.suspecting(3) == set()


def test_a_clock_jump_does_not_make_an_answered_probe_a_suspicion() -> None:
    """A probe waits in checks of the interval, not on the clock: member 0's clock jumping a
    second ahead or back (explore draws clock faults up to 1 s) suspects no one."""
    for jump in (1000 * MS, -1000 * MS):
        g = Group(3)
        g.run(T0 + 2000 * MS)
        fd = g.fds[0]
        at = g.now
        fd.last_heard = {m: t + jump for m, t in fd.last_heard.items()}
        for k in range(1, 40):
            for m, f in g.fds.items():
                t = at + k * INTERVAL
                g.now = t
                g._out(m, f.on_timer(t + (jump if m == 0 else 0)))
            for x in list(g.inflight):
                g.inflight.remove(x)
                _, src, dst, msg = x
                f = g.fds[dst]
                lt = g.now + (jump if dst == 0 else 0)
                g._out(dst, f.heard(src, lt) + f.on_alive(src, msg.header, lt))
        assert not any(f.suspected for f in g.fds.values()), jump


def test_an_idle_group_on_the_simulator_stays_under_the_bound_and_grows_linearly() -> None:
    """Whole nodes on the simulator (bench/idle_control.py: one message in 10 s): 50 idle
    members send under 500 datagrams a second (the 1,000 a second bound of a hundred, halved),
    and the count grows at most linearly: per member, 50 send no more than 10 do (+15 %).
    The heartbeat to every member sent 8,321 a second at 50."""
    small, large = idle_datagrams(10), idle_datagrams(50)
    assert large["per_s"] < 500, large
    assert large["per_member_per_s"] <= small["per_member_per_s"] * 1.15, (small, large)
    assert small["datagrams"] > 0
