"""psync-total's wave rule W3 (nodes/protocols/psync_total.py) on a hand-built U: a chain's
first message is a source only when none of its causal predecessors from other chains is
still in U. The bench's mutant `psync-total-wave-ignores-deps` (W3 looks at the sender's own
chain only) delivers such a message in the same wave as its predecessor, before it when its
origin id is the lower: this test fails on it. Explore cannot see it (docs/benchmarks.md
"Mutation score"): the waves stay the same at every process, and a message sent after its
sender fnl-delivered another is in a later wave everywhere, so total order and causal order
among fnl deliveries (what the logs show) hold; only Psync's context graph, which no log
records, is broken."""

from __future__ import annotations

from nodes.protocols.base import FinalDeliver
from nodes.protocols.psync_total import PsyncTotal
from nodes.wire import MsgType


def delivered(actions: list[object]) -> list[tuple[int, int]]:
    return [(a.origin, a.mno) for a in actions if isinstance(a, FinalDeliver)]


def test_a_message_waits_for_its_predecessor_from_another_chain() -> None:
    p = PsyncTotal(3, [1, 2, 3], {})
    d, m, c = (2, 1), (1, 1), (3, 1)  # m (from 1) depends on d (from 2); c is concurrent
    assert delivered(p._causal(d, [], MsgType.DATA, 10, 0)) == []  # W2: chains 1, 3 empty
    assert delivered(p._causal(m, [d], MsgType.DATA, 10, 0)) == []  # W2: chain 3 empty
    # W2 holds: the sources of U are d and c; m has its predecessor d in U
    assert delivered(p._causal(c, [], MsgType.DATA, 10, 0)) == [d, c]
    # m is chain 1's head with nothing of its context left in U: a source once W2 holds
    assert delivered(p._causal((2, 2), [d], MsgType.DATA, 10, 0)) == []
    assert delivered(p._causal((3, 2), [c], MsgType.DATA, 10, 0)) == [m, (2, 2), (3, 2)]
