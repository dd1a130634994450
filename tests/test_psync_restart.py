"""psync across a sender's restart (C5 in nodes/protocols/psync.py): a late message of the
sender's previous incarnation, overtaken by its new incarnation's first message on a slower
path, still enters the context graph, after its deps and before its dependants (causal
order, 002 "Psync")."""

from __future__ import annotations

from nodes.protocols.base import Action, FinalDeliver
from nodes.protocols.psync import Id, Psync, pack_deps
from nodes.protocols.sequencer import INCARNATION_SPAN
from nodes.wire import Header, Message, MsgType

H2, H3, H4 = 2, 3, 4
MEMBERS = [H2, H3, H4]
NEW = INCARNATION_SPAN  # h4's restarted incarnation's range base


def data(origin: int, n: int, deps: list[Id]) -> Message:
    return Message(Header(MsgType.DATA, origin=origin, mno=n), pack_deps(deps) + b"x")


def delivered(actions: list[Action]) -> list[tuple[int, int]]:
    return [(a.origin, a.mno) for a in actions if isinstance(a, FinalDeliver)]


def h3_after_h4_27() -> Psync:
    p = Psync(H3, MEMBERS, {})
    for n in range(1, 28):
        assert delivered(p._receive(data(H4, n, []), 0)) == [(H4, n)]
    return p


def test_a_late_old_incarnation_message_enters_after_the_new_first() -> None:
    p = h3_after_h4_27()
    assert delivered(p._receive(data(H4, NEW + 1, []), 0)) == [(H4, NEW + 1)]
    assert delivered(p._receive(data(H4, 28, []), 0)) == [(H4, 28)]
    assert delivered(p._receive(data(H4, 28, []), 0)) == []  # in G now
    assert delivered(p._receive(data(H4, 29, []), 0)) == [(H4, 29)]


def test_a_dependant_of_a_late_old_message_waits_for_it() -> None:
    p = h3_after_h4_27()
    p._receive(data(H4, NEW + 1, []), 0)
    assert delivered(p._receive(data(H2, 1, [(H4, 28)]), 0)) == []
    assert delivered(p._receive(data(H4, 29, []), 0)) == []  # behind h4:28 in its chain
    assert delivered(p._receive(data(H4, 28, []), 0)) == [(H4, 28), (H2, 1), (H4, 29)]


def test_a_lost_old_tail_holds_only_its_dependants() -> None:
    p = h3_after_h4_27()
    p._receive(data(H4, NEW + 1, []), 0)
    assert delivered(p._receive(data(H2, 1, [(H4, 28)]), 0)) == []  # h4:28 never comes
    assert delivered(p._receive(data(H4, NEW + 2, []), 0)) == [(H4, NEW + 2)]
    q = Psync(H3, MEMBERS, {})
    q._receive(data(H4, NEW + 1, []), 0)
    assert delivered(q._receive(data(H2, 1, [(H4, NEW + 1)]), 0)) == [(H2, 1)]


def test_a_chain_two_incarnations_back_counts_as_lost() -> None:
    p = h3_after_h4_27()
    p._receive(data(H4, NEW + 1, []), 0)
    p._receive(data(H4, 2 * NEW + 1, []), 0)
    assert delivered(p._receive(data(H4, 28, []), 0)) == []
    assert delivered(p._receive(data(H2, 1, [(H4, 28)]), 0)) == [(H2, 1)]
