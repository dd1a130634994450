"""The failure detector's ALIVE, sent after a quarter of the timeout of silence towards the group
and skipped when the node multicast meanwhile (any datagram proves it alive,
nodes/protocols/failure_detector.py): the skip must never keep a live node silent for long
enough that its peers suspect it."""

from __future__ import annotations

from nodes.protocols.base import Action, Send
from nodes.protocols.failure_detector import FailureDetector
from nodes.wire import MsgType

MS = 1_000_000
T0 = 10_000 * MS


def _alive(actions: list[Action]) -> bool:
    return any(type(a) is Send and a.msg.header.type == MsgType.ALIVE for a in actions)


def _watch(jump_ns: int) -> set[int]:
    """Node 0 multicasts once at T0 + 50 ms, its clock jumps by `jump_ns` at T0 + 60 ms and it
    stays idle (a drain); node 1 hears every ALIVE at once. Both tick every 100 ms for 3 s of
    true time; returns whom node 1 ever suspected."""
    quiet, watcher = (FailureDetector(m, [0, 1], 100 * MS, 1000 * MS) for m in (0, 1))
    quiet.start(T0)
    watcher.start(T0)
    quiet.multicast_at = T0 + 50 * MS  # what the node core records for a multicast
    watcher.heard(0, T0 + 50 * MS)
    suspected: set[int] = set()
    for k in range(1, 31):
        t = T0 + k * 100 * MS
        local = t + (jump_ns if t > T0 + 60 * MS else 0)
        if _alive(quiet.on_timer(local)):
            watcher.heard(0, t)
        watcher.on_timer(t)
        suspected |= watcher.suspected
    return suspected


def test_a_multicast_stands_for_an_alive() -> None:
    """ALIVEs go out after a quarter of the timeout of silence (250 ms), and a multicast
    counts as one: it restarts that silence."""
    fd = FailureDetector(0, [0, 1, 2], 100 * MS, 1000 * MS)
    fd.start(T0)
    assert _alive(fd.on_timer(T0 + 100 * MS))  # nothing sent yet
    fd.multicast_at = T0 + 150 * MS
    for k in (2, 3):
        assert not _alive(fd.on_timer(T0 + k * 100 * MS))  # 50, 150 ms ago
    assert _alive(fd.on_timer(T0 + 400 * MS))  # 250 ms ago: the silence allowed passed


def test_a_silent_node_sends_an_alive_per_quarter_timeout_not_per_interval() -> None:
    """An ALIVE every interval (100 ms, a tenth of the timeout) was a hundred members' ~100,000
    datagrams a second; now a silent node sends one per quarter of the timeout (three may be
    lost in a row) while the check still runs every interval: the peers of a node that stops
    suspect it as fast as before. Failed before: ten ALIVEs a second."""
    quiet, watcher = (FailureDetector(m, [0, 1], 100 * MS, 1000 * MS) for m in (0, 1))
    quiet.start(T0)
    watcher.start(T0)
    alives = []
    for k in range(1, 31):  # 3 s, both idle
        t = T0 + k * 100 * MS
        if _alive(quiet.on_timer(t)):
            alives.append(t)
            watcher.heard(0, t)
        watcher.on_timer(t)
    assert watcher.suspected == set()
    assert len(alives) == 10  # one every 300 ms (250 ms, at the 100 ms tick), not 30
    assert max(b - a for a, b in zip(alives, alives[1:], strict=False)) == 300 * MS
    # The node stops: suspected at the first check past the timeout, as with an ALIVE per tick.
    stopped = alives[-1]
    t = T0 + 30 * 100 * MS
    while not watcher.suspected:
        t += 100 * MS
        watcher.on_timer(t)
    assert t - stopped == 1100 * MS
    # A short timeout: never less than an interval between ALIVEs (timeout 300 ms, 75 ms).
    fast = FailureDetector(0, [0, 1], 50 * MS, 300 * MS)
    assert fast.silence_ns() == 75 * MS
    assert FailureDetector(0, [0, 1], 100 * MS, 200 * MS).silence_ns() == 100 * MS


def test_a_clock_that_jumps_back_does_not_silence_the_alives() -> None:
    """A jump back of a second (what `testbed explore` draws: clock faults up to 1 s) made
    the multicast look `now - multicast_at` < 0 old, so the ALIVE was skipped until the clock
    caught up -- 1.1 s of silence, and node 1 suspected a live node 0; every ALIVE went out
    before the skip existed."""
    assert _watch(0) == set()
    assert _watch(-1000 * MS) == set()
    assert _watch(+1000 * MS) == set()
