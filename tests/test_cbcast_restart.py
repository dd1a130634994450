"""cbcast across a sender's restart (B4 in nodes/protocols/cbcast.py): a late message of the
sender's previous incarnation, overtaken by its new incarnation's first message on a slower
path, is still delivered, and only after what it depends on and before what depends on it
(causal order, 002 "ISIS: CBCAST")."""

from __future__ import annotations

from nodes.protocols.base import Action, FinalDeliver
from nodes.protocols.cbcast import Cbcast
from nodes.protocols.sequencer import INCARNATION_SPAN
from nodes.wire import Header, Message, MsgType

H2, H3, H4 = 2, 3, 4
MEMBERS = [H2, H3, H4]
NEW = INCARNATION_SPAN  # h4's restarted incarnation's range base


def data(c: Cbcast, origin: int, vt: list[int]) -> Message:
    mno = vt[c.index[origin]]
    return Message(Header(MsgType.DATA, origin=origin, mno=mno), c.vt_format.pack(*vt) + b"x")


def delivered(actions: list[Action]) -> list[tuple[int, int]]:
    return [(a.origin, a.mno) for a in actions if isinstance(a, FinalDeliver)]


def h3_after_h4_27() -> tuple[Cbcast, list[tuple[int, int]]]:
    """h3 has delivered h4:1..27 of h4's first incarnation."""
    c = Cbcast(H3, MEMBERS, {})
    out: list[tuple[int, int]] = []
    for n in range(1, 28):
        out += delivered(c._receive(data(c, H4, [0, 0, n])))
    return c, out


def test_a_late_old_incarnation_message_is_delivered_after_the_new_first() -> None:
    c, out = h3_after_h4_27()
    assert out == [(H4, n) for n in range(1, 28)]
    assert delivered(c._receive(data(c, H4, [0, 0, NEW + 1]))) == [(H4, NEW + 1)]
    assert delivered(c._receive(data(c, H4, [0, 0, 28]))) == [(H4, 28)]
    assert delivered(c._receive(data(c, H4, [0, 0, 28]))) == []  # a duplicate now
    assert delivered(c._receive(data(c, H4, [0, 0, 29]))) == [(H4, 29)]


def test_a_dependant_of_a_late_old_message_waits_for_it() -> None:
    c, _ = h3_after_h4_27()
    c._receive(data(c, H4, [0, 0, NEW + 1]))
    # h2 delivered h4:28, then multicast: its t_m[h4] = 28, of h4's old range.
    assert delivered(c._receive(data(c, H2, [1, 0, 28]))) == []
    assert delivered(c._receive(data(c, H4, [0, 0, 28]))) == [(H4, 28), (H2, 1)]


def test_an_old_message_out_of_turn_waits_for_its_predecessor() -> None:
    c, _ = h3_after_h4_27()
    c._receive(data(c, H4, [0, 0, NEW + 1]))
    assert delivered(c._receive(data(c, H4, [0, 0, 29]))) == []
    assert delivered(c._receive(data(c, H4, [0, 0, 28]))) == [(H4, 28), (H4, 29)]


def test_a_lost_old_tail_holds_only_its_dependants() -> None:
    c, _ = h3_after_h4_27()
    c._receive(data(c, H4, [0, 0, NEW + 1]))
    assert delivered(c._receive(data(c, H2, [1, 0, 28]))) == []  # h4:28 never comes
    assert delivered(c._receive(data(c, H4, [0, 0, NEW + 2]))) == [(H4, NEW + 2)]
    assert delivered(c._receive(data(c, H2, [2, 0, NEW + 2]))) == []  # FIFO behind h2:1
    # A message of h2 that does not depend on h4's old tail is not held:
    d = Cbcast(H3, MEMBERS, {})
    d._receive(data(d, H4, [0, 0, NEW + 1]))
    assert delivered(d._receive(data(d, H2, [1, 0, NEW + 1]))) == [(H2, 1)]


def test_a_range_two_incarnations_back_counts_as_lost() -> None:
    c, _ = h3_after_h4_27()
    c._receive(data(c, H4, [0, 0, NEW + 1]))
    c._receive(data(c, H4, [0, 0, 2 * NEW + 1]))
    assert delivered(c._receive(data(c, H4, [0, 0, 28]))) == []  # two ranges back: dropped
    assert delivered(c._receive(data(c, H2, [1, 0, 28]))) == [(H2, 1)]
    assert delivered(c._receive(data(c, H4, [0, 0, NEW + 2]))) == [(H4, NEW + 2)]
