"""The edge gate's role rules (nodes/edge.py `RoleRule`, docs/security.md "Hostile
datagrams"): per rule, a forged datagram -- sent by, or to, a member that does not play the
role -- is counted as `rejected:role`, and the legitimate one passes the gate and reaches the
protocol. The roles come from the layers themselves (`Layer.roles()`); a rule whose role a
layer does not declare refuses everything.
"""

from __future__ import annotations

import struct
from typing import Any

from nodes.config import Member, NodeConfig, WorkloadConfig
from nodes.core import NodeCore
from nodes.edge import EdgeRules, Gate, RoleRule
from nodes.protocols import leader, membership, primary, timestamp_leader, token_ring
from nodes.protocols.fast_seto import RATE_ID
from nodes.protocols.sequencer import mid_key
from nodes.wire import Flag, Header, Message, MsgType, Proto, encode

N = 4
T0 = 1_000_000_000_000
ENTRY = struct.Struct("!Hi")


def make_core(protocol: str, me: int, params: dict[str, Any]) -> NodeCore:
    members = [Member(i, f"h{i}", "127.0.0.1", 7000 + i) for i in range(N)]
    cfg = NodeConfig(node_id=me, name=f"h{me}", members=members, protocol=protocol,
                     params=params, log_path="", seed=1, start_at_ns=T0, duration_ns=10**9,
                     drain_ns=0, workload=WorkloadConfig(True, 10.0, 16))
    core = NodeCore(cfg, T0)
    core.start(T0)
    return core


def send(core: NodeCore, mtype: MsgType, proto: int, payload: bytes = b"",
         **fields: Any) -> None:
    core.receive(encode(Message(Header(mtype, proto, **fields), payload)), T0)


def rejected(core: NodeCore) -> dict[str, int]:
    return dict(core.counters.reasons)


# -- Fast SETO (003 Fig. 7): ESTIMATE only to the coordinator, DELAY only from it ---------------
def estimate(sender: int) -> bytes:
    return b"".join(ENTRY.pack(m, 1000) for m in range(N) if m != sender) + ENTRY.pack(
        RATE_ID, 5000)


def test_fast_seto_estimate_only_to_the_coordinator() -> None:
    member = make_core("fast-seto", 1, {"min_samples": 1})
    send(member, MsgType.ESTIMATE, Proto.FAST_SETO, estimate(2), sender=2)
    assert rejected(member) == {"rejected:role": 1}
    coordinator = make_core("fast-seto", 0, {"min_samples": 1})
    send(coordinator, MsgType.ESTIMATE, Proto.FAST_SETO, estimate(2), sender=2)
    assert rejected(coordinator) == {}
    assert 2 in coordinator.protocol.policy.planner.estimates  # type: ignore[attr-defined]


def test_fast_seto_delay_only_from_the_coordinator() -> None:
    row = b"".join(ENTRY.pack(m, 2000 + m) for m in range(N))
    core = make_core("fast-seto", 1, {"min_samples": 1})
    planner = core.protocol.policy.planner  # type: ignore[attr-defined]
    send(core, MsgType.DELAY, Proto.FAST_SETO, row, sender=2, aux=1)
    assert rejected(core) == {"rejected:role": 1} and planner.applied_round == 0
    send(core, MsgType.DELAY, Proto.FAST_SETO, row, sender=0, aux=1)
    assert rejected(core) == {"rejected:role": 1} and planner.applied_round == 1


# -- the fixed sequencer (000 Fig. 1): ORDER only from it, FETCH only to it ----------------------
def test_sequencer_order_only_from_the_sequencer() -> None:
    core = make_core("sequencer", 1, {"sequencer": "h3"})
    entry = struct.pack("!HI", 2, 1)
    send(core, MsgType.ORDER, Proto.SEQUENCER, entry, sender=0, rseq=1, origin=0, seq=1)
    assert rejected(core) == {"rejected:role": 1}
    assert core.protocol.order == {}  # type: ignore[attr-defined]
    send(core, MsgType.ORDER, Proto.SEQUENCER, entry, sender=3, rseq=1, origin=3, seq=1)
    assert rejected(core) == {"rejected:role": 1}
    assert core.protocol.order == {1: mid_key(2, 1)}  # type: ignore[attr-defined]


def test_sequencer_fetch_only_to_the_sequencer() -> None:
    want = struct.pack("!HI", 2, 1)
    member = make_core("sequencer", 1, {"sequencer": "h3"})
    send(member, MsgType.FETCH, Proto.SEQUENCER, want, sender=2)
    assert rejected(member) == {"rejected:role": 1}
    seq = make_core("sequencer", 3, {"sequencer": "h3"})
    send(seq, MsgType.FETCH, Proto.SEQUENCER, want, sender=2)
    assert rejected(seq) == {}


# -- token-ring (002 "Total Ordering: Token Based", Totem): the token only from the predecessor --
def test_token_only_from_the_predecessor() -> None:
    core = make_core("token-ring", 2, {})
    ring = core.protocol
    assert isinstance(ring, token_ring.TokenRing)

    def token(sender: int, token_seq: int) -> None:
        send(core, MsgType.ORDER, token_ring.WIRE_ID, sender=sender, rseq=token_seq,
             origin=token_ring.NOBODY, aux=token_ring.RING_ID)

    token(0, 5)  # h0 is not h2's predecessor
    assert rejected(core) == {"rejected:role": 1} and ring.last_token_seq == 0
    token(1, 5)
    assert rejected(core) == {"rejected:role": 1} and ring.last_token_seq == 5


# -- leader (004 §8.1): relayed SEQDATA only from the leader, FWD only to it --------------------
def test_leader_relays_only_from_the_leader_and_forwards_only_to_it() -> None:
    core = make_core("leader", 1, {"leader": "h0"})
    lb = core.protocol
    assert isinstance(lb, leader.Leader)
    relayed = int(Flag.RELAYED)
    send(core, MsgType.DATA, leader.WIRE_ID, b"x", flags=relayed, sender=2, rseq=1, origin=2,
         mno=1, seq=1)  # a relay from a member that is not the leader
    send(core, MsgType.DATA, leader.WIRE_ID, b"x", sender=2, rseq=1, origin=2, mno=1)  # FWD
    assert rejected(core) == {"rejected:role": 2} and lb.next_seq == 1
    send(core, MsgType.DATA, leader.WIRE_ID, b"x", flags=relayed, sender=0, rseq=1, origin=2,
         mno=1, seq=1)
    assert rejected(core) == {"rejected:role": 2} and lb.next_seq == 2
    at_leader = make_core("leader", 0, {"leader": "h0"})
    send(at_leader, MsgType.DATA, leader.WIRE_ID, b"x", sender=2, rseq=1, origin=2, mno=1)
    assert rejected(at_leader) == {} and at_leader.protocol.g == 1  # type: ignore[attr-defined]


# -- timestamp-leader (004 §8.2): GRANT only from the leader, REQ only to it -------------------
def test_timestamp_leader_grants_only_from_the_leader() -> None:
    core = make_core("timestamp-leader", 1, {"leader": "h0"})
    ts = core.protocol
    assert isinstance(ts, timestamp_leader.TimestampLeader)

    def grant(sender: int) -> None:
        send(core, timestamp_leader.GRANT, timestamp_leader.WIRE_ID, sender=sender, rseq=1,
             origin=2, mno=1, seq=1, hint=3)

    grant(3)
    assert rejected(core) == {"rejected:role": 1} and not ts.grants
    grant(0)
    assert rejected(core) == {"rejected:role": 1} and list(ts.grants) == [(2, 1, 1, 3)]


def test_timestamp_leader_requests_only_to_the_leader() -> None:
    def request(core: NodeCore) -> None:
        send(core, timestamp_leader.REQ, timestamp_leader.WIRE_ID, sender=2, rseq=1, origin=2,
             seq=1, hint=3)

    member = make_core("timestamp-leader", 1, {"leader": "h0"})
    request(member)
    assert rejected(member) == {"rejected:role": 1}
    at_leader = make_core("timestamp-leader", 0, {"leader": "h0"})
    request(at_leader)
    assert rejected(at_leader) == {} and at_leader.protocol.g == 3  # type: ignore[attr-defined]


# -- primary (001 §4.1): a membership INSTALL only from the coordinator this member answered ----
def test_primary_view_installed_only_by_its_coordinator() -> None:
    core = make_core("primary", 1, {})
    p = core.protocol
    assert isinstance(p, primary.Primary)
    everyone = tuple(range(N))
    install = membership.pack_install(everyone, (1,) * N)

    def view_msg(sender: int, kind: int, payload: bytes) -> None:
        send(core, MsgType.DATA, membership.WIRE_ID, payload, sender=sender, seq=2, aux=kind)

    view_msg(0, membership.INSTALL, install)  # nobody's proposal answered yet
    assert rejected(core) == {"rejected:role": 1}
    view_msg(0, membership.PROPOSE, membership.pack_members(everyone))  # h1 answers h0's
    assert p.roles() == {"installer": 0}
    view_msg(2, membership.INSTALL, install)
    assert rejected(core) == {"rejected:role": 2} and p.membership.view.vid == 1
    view_msg(0, membership.INSTALL, install)
    assert rejected(core) == {"rejected:role": 2} and p.membership.view.vid == 2


# -- the rule itself -----------------------------------------------------------------------------
def test_an_undeclared_role_holds_for_no_one() -> None:
    """A layer that does not declare a role a rule names (no `roles()` entry) gets every
    datagram of that rule refused: no fallback lets a forged one through."""
    class Silent:
        def roles(self) -> dict[str, int]:
            return {}

    rules = EdgeRules(frozenset({MsgType.ESTIMATE}), checked=False,
                      roles=(RoleRule(MsgType.ESTIMATE, "coordinator", sender=False),))
    gate = Gate(0, [0, 1], Silent(), rules, Proto.FAST_SETO)
    msg = Message(Header(MsgType.ESTIMATE, Proto.FAST_SETO, sender=1), ENTRY.pack(0, 1))
    assert gate.check(msg) == "role"
