"""cbcast across restarts (nodes/protocols/cbcast.py). A sender's (B4): a late message of the
sender's previous incarnation, overtaken by its new incarnation's first message on a slower
path, is still delivered, and only after what it depends on and before what depends on it
(causal order, 002 "ISIS: CBCAST"). A receiver's (B5, B6): a restarted process takes the
counts the members answer its ASK with for every sender whose stream it has not joined, so a
dependency on a sender silent since its restart does not hold a message for ever, and it
delivers every message of a sender after its join point."""

from __future__ import annotations

from nodes.protocols.base import JOIN_EVENT, Action, FinalDeliver, Log, Send
from nodes.protocols.cbcast import ASK, COUNTS, JOIN_RETRY_NS, OLD, WIRE_ID, Cbcast
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


def sent(actions: list[Action]) -> Message:
    (msg,) = [a.msg for a in actions if isinstance(a, Send)]
    return msg


def test_a_message_sent_after_a_late_old_message_carries_it() -> None:
    """h3 switched to h4's new range, then delivered h4:28 and multicast: its t_m[h4] is in
    the new range and says nothing of h4:28, its OLD_j does. h2, switched too but without
    h4:28 yet, holds h3's message until h4:28 (causal order)."""
    c, _ = h3_after_h4_27()
    c._receive(data(c, H4, [0, 0, NEW + 1]))
    c._receive(data(c, H4, [0, 0, 28]))
    msg = sent(c.broadcast(b"y", 0))
    assert msg.header.slot == OLD
    assert list(c.vt_format.unpack_from(msg.payload, c.vt_format.size)) == [0, 0, 28]
    d = Cbcast(H2, MEMBERS, {})
    for n in range(1, 28):
        d._receive(data(d, H4, [0, 0, n]))
    d._receive(data(d, H4, [0, 0, NEW + 1]))
    assert delivered(d._receive(msg)) == []
    out = d._receive(data(d, H4, [0, 0, 28]))
    assert delivered(out) == [(H4, 28), (H3, 1)]
    (fnl,) = [a for a in out if isinstance(a, FinalDeliver) and a.origin == H3]
    assert fnl.size == 1  # the payload after both vectors
    # Without OLD_j it is what the restart did before, and is delivered at once:
    e = Cbcast(H2, MEMBERS, {})
    e._receive(data(e, H4, [0, 0, NEW + 1]))
    assert delivered(e._receive(data(e, H3, [0, 1, NEW + 1]))) == [(H3, 1)]


def test_an_entry_at_a_range_base_counts_as_met_and_is_not_merged() -> None:
    """h4's new incarnation took h2's count from COUNTS: h2 restarted and sent nothing, its
    count is its range's base. h3, which never heard from h2's new incarnation, delivers."""
    c = Cbcast(H3, MEMBERS, {})
    assert delivered(c._receive(data(c, H4, [NEW, 0, NEW + 1]))) == [(H4, NEW + 1)]
    assert c.vt[c.index[H2]] == 0  # h2's old stream still counts here
    assert delivered(c._receive(data(c, H2, [1, 0, 0]))) == [(H2, 1)]


def test_a_range_two_incarnations_back_counts_as_lost() -> None:
    c, _ = h3_after_h4_27()
    c._receive(data(c, H4, [0, 0, NEW + 1]))
    c._receive(data(c, H4, [0, 0, 2 * NEW + 1]))
    assert delivered(c._receive(data(c, H4, [0, 0, 28]))) == []  # two ranges back: dropped
    assert delivered(c._receive(data(c, H2, [1, 0, 28]))) == [(H2, 1)]
    assert delivered(c._receive(data(c, H4, [0, 0, NEW + 2]))) == [(H4, NEW + 2)]


# -- the join handshake (B6) ------------------------------------------------------------------
H1 = 1
GROUP = [H1, H2, H3, H4]


def restarted_h1() -> Cbcast:
    return Cbcast(H1, GROUP, {"incarnation": 1})


def counts(c: Cbcast, sender: int, vt: list[int], slot: int = COUNTS) -> Message:
    return Message(Header(MsgType.DUMMY, WIRE_ID, sender=sender, slot=slot),
                   c.vt_format.pack(*vt))


def asks(actions: list[Action]) -> list[Send]:
    return [a for a in actions if isinstance(a, Send) and a.msg.header.type == MsgType.DUMMY
            and a.msg.header.slot == ASK]


def joins(actions: list[Action]) -> list[dict[str, int]]:
    return [a.fields for a in actions if isinstance(a, Log) and a.ev == JOIN_EVENT]


def test_a_restarted_process_asks_every_member_at_its_start() -> None:
    assert [a.dst for a in asks(restarted_h1().start(0))] == [None]
    assert asks(Cbcast(H1, GROUP, {}).start(0)) == []  # a first incarnation has nothing to ask


def test_a_dependency_on_a_silent_sender_is_met_by_its_counts() -> None:
    """h4 sent h4:52 before h1 restarted and then fell silent; h3:65 depends on it."""
    c = restarted_h1()
    c.start(0)
    assert delivered(c._receive(data(c, H3, [40, 0, 65, 52]))) == []  # held: h4 unknown
    assert delivered(c.on_message(H4, counts(c, H4, [40, 30, 64, 52]), 0)) == [(H3, 65)]
    # h4's next message is owed and delivered, its stream joined from there:
    out = c._receive(data(c, H4, [40, 30, 65, 53]))
    assert delivered(out) == [(H4, 53)]
    assert joins(out) == [{"origin": H4, "mno": 53}]


def test_a_message_at_or_below_the_counts_is_not_delivered_and_the_join_names_the_next() -> None:
    c = restarted_h1()
    c.on_message(H2, counts(c, H2, [0, 30, 0, 52]), 0)
    out = c._receive(data(c, H4, [0, 0, 0, 51]))  # in flight at the restart: reported already
    assert delivered(out) == []
    assert joins(out) == [{"origin": H4, "mno": 53}]
    assert delivered(c._receive(data(c, H4, [0, 0, 0, 52]))) == []
    assert delivered(c._receive(data(c, H4, [0, 0, 0, 54]))) == []  # waits for h4:53
    assert delivered(c._receive(data(c, H4, [0, 0, 0, 53]))) == [(H4, 53), (H4, 54)]


def test_counts_do_not_move_a_joined_stream() -> None:
    c = restarted_h1()
    assert delivered(c._receive(data(c, H4, [0, 0, 0, 10]))) == [(H4, 10)]
    c.on_message(H3, counts(c, H3, [0, 0, 0, 12]), 0)
    assert delivered(c._receive(data(c, H4, [0, 0, 0, 11]))) == [(H4, 11)]  # not skipped


def test_every_member_answers_an_ask_with_its_vector() -> None:
    c = Cbcast(H2, GROUP, {})
    c.broadcast(b"x", 0)
    c._receive(data(c, H4, [0, 0, 0, 1]))
    ask = Message(Header(MsgType.DUMMY, WIRE_ID, sender=H1, slot=ASK))
    (answer,) = c.on_message(H1, ask, 0)
    assert isinstance(answer, Send) and answer.dst == H1 and answer.msg.header.slot == COUNTS
    assert list(c.vt_format.unpack(answer.msg.payload)) == [0, 1, 0, 1]


def test_a_blocked_joiner_asks_again_and_an_unblocked_one_does_not() -> None:
    c = restarted_h1()
    c.start(0)
    assert asks(c.on_timer(c.join_key, JOIN_RETRY_NS)) == []  # nothing waits
    c._receive(data(c, H3, [0, 0, 65, 52]))
    assert len(asks(c.on_timer(c.join_key, 2 * JOIN_RETRY_NS))) == 1


def test_malformed_handshake_datagrams_are_refused_and_counted() -> None:
    c = restarted_h1()
    bad = [counts(c, H4, [0, 0, 0, 52], slot=7),  # unknown slot
           Message(Header(MsgType.DUMMY, WIRE_ID, sender=H4, slot=COUNTS), b"\0" * 5),
           Message(Header(MsgType.DUMMY, WIRE_ID, sender=H4, slot=ASK), b"x"),
           counts(c, 9, [0, 0, 0, 52])]  # not a member
    for msg in bad:
        out = c.on_message(msg.header.sender, msg, 0)
        assert [a.ev for a in out if isinstance(a, Log)] == ["reject"]
    assert c.rejected == len(bad)
    assert c.vt[c.index[H4]] == 0
    assert c._receive(Message(Header(MsgType.DATA, origin=H4, mno=1), b"\0" * 3))[0].ev == "reject"  # type: ignore[union-attr]
    assert c.rejected == len(bad) + 1
    vt = c.vt_format.pack(0, 0, 0, 1)
    for slot, payload in ((OLD, vt + b"x"), (7, vt + vt)):  # OLD_j short; unknown slot
        out = c._receive(Message(Header(MsgType.DATA, origin=H4, mno=1, slot=slot), payload))
        assert [a.ev for a in out if isinstance(a, Log)] == ["reject"]
    assert c.rejected == len(bad) + 3
