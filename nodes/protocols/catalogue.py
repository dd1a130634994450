"""The protocol catalogue: one entry per protocol, read by everything that needs to know one.

An entry gives the protocol's name (as experiments spell it), its wire id (the header's
`proto` byte), the factory that builds its stack for one process, its parameter dataclass
(nodes/protocols/base.py: types, defaults, limits; `params_model` turns it into the pydantic
model that specs are validated with and `testbed schema` shows), and its **claims**: which
checks of the checker suite (the keys of summary.json's `checks`) it promises to pass, and
whether it opt-delivers, and its **liveness claim** (`Liveness`: the faults under which every
message a correct host sends is eventually final-delivered by every correct host) and, for a
protocol with a latency bound, the **model** the bound is proven in (`Model`: FIFO links,
loss, failures, clocks, delays), and its documented **hazards** (`Hazard`: schedules under
which the paper's rule itself is unsafe, so the claims a hazard names are not made for a run
that has it). All are plain data: analysis/verdict.py judges a run's stall against
`liveness` and voids the claims of the hazards a run matches, spec validation
(testbed/spec/qos.py) refuses a topology or fault plan outside `model`, and a fault
generator can draw only what they allow (never less because of a hazard). Spec validation,
node configs, the node core, the management MBeans and the checker suite all read it;
adding a protocol is its module plus one entry below (docs/protocols.md).

Importing this module needs no pydantic (the node image has none): only `params_model` does.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields
from typing import TYPE_CHECKING, Annotated, Any

from nodes import wire
from nodes.edge import EdgeRules, RoleRule
from nodes.protocols import (
    cbcast,
    fast_seto,
    fifo,
    lamport,
    leader,
    membership,
    moving_sequencer,
    primary,
    psync,
    psync_total,
    qos_cbr,
    qos_common,
    qos_vbr,
    reliable_ack,
    seto,
    switching,
    timestamp_leader,
    token_ring,
)
from nodes.protocols.base import CommonParams, Layer
from nodes.protocols.reliable import ReliableParams
from nodes.protocols.reliable_nack import ReliableNack
from nodes.protocols.sequencer import (
    JOIN_QUESTION,
    JOIN_TO_SEQUENCER,
    Sequencer,
    SequencerParams,
)
from nodes.wire import MsgType, Proto

if TYPE_CHECKING:
    from pydantic import BaseModel

# The checks a protocol can claim: the keys of summary.json's `checks` (analysis/checks.py).
CHECKS = ("total_order", "fifo_order", "causal_order", "agreement", "integrity", "validity")
# What reliable FIFO multicast promises (002, "Reliable FIFO"), and what a total order by one
# numbering authority (a fixed sequencer, 000 Fig. 1, 003 Fig. 2; or a token, 002 "Total
# Ordering: Token Based") adds to it: total order, and causal order too, since a message is numbered
# after everything its sender had delivered when sending it. Lamport timestamps order messages
# consistently with happened-before (the clock condition), so `lamport` claims the same.
RELIABLE_FIFO = frozenset({"fifo_order", "agreement", "integrity", "validity"})
SEQUENCER_TOTAL = RELIABLE_FIFO | {"total_order", "causal_order"}

# The fault kinds a liveness claim or a model names. Datagram faults come from the topology's
# links or from `link` faults: `loss` (loss, gemodel, corrupt), `duplicate`, `reorder` (jitter
# on a link that does not say `reorder: false`, or netem's reorder). Schedule faults are the
# kinds of faults.jsonl: `crash` (with or without a restart), `pause` (resumed), `partition`
# (healed before the run ends), `clock` (offset, drift, jump, strobe). `mgmt` requests are
# operations, never faults: every claim tolerates them.
LINK_FAULTS = ("loss", "duplicate", "reorder")
SCHEDULE_FAULTS = ("crash", "pause", "partition", "clock")
FAULT_KINDS = LINK_FAULTS + SCHEDULE_FAULTS
# What a hazard can name besides FAULT_KINDS: a partition that is not a split into disjoint
# groups cut off from each other both ways (a majorities ring, a bridge, a one-way cut: some
# host reaches two hosts that do not reach each other).
NONTRANSITIVE = "partition-nontransitive"
# ... and a partition still on when the run ends: the hosts it cuts off are faulty from then
# on, as a crashed host is (docs/architecture.md "Liveness": not correct).
UNHEALED = "partition-unhealed"
HAZARD_FAULTS = FAULT_KINDS + (NONTRANSITIVE, UNHEALED)
# What a hazard can void besides the checks of CHECKS: Local Order, the membership checks of
# `primary` (analysis/membership.py), and `liveness` (the liveness claim: a stall is then
# `stalled-as-claimed`).
MEMBERSHIP_CHECKS = ("split_brain", "blocked_delivery", "minority_blocked", "notification_order",
                     "uniform")
# `context_order`: psync-total's waves against Psync's context graph (analysis/context.py)
VOIDABLE = CHECKS + ("local_order", "context_order") + MEMBERSHIP_CHECKS + ("liveness",)


@dataclass(frozen=True)
class Liveness:
    """A liveness claim: under which faults the protocol promises that every message a correct
    host sends is eventually final-delivered by every correct host (the drain's quiescence,
    docs/architecture.md "Liveness").

    - `tolerates`: the fault kinds (FAULT_KINDS) under which the promise holds. A `pause` or
      `partition` is tolerated only once it ended (a pause never resumed, a partition never
      healed void the promise); a `crash` covers a restart too.
    - `roles`: parameters naming a host whose crash voids the promise even where `crash` is
      tolerated (`sequencer`: "the host of param `sequencer`"); an unset one means the
      parameter's default, the first host when that is None.
    - `nested`: a parameter holding nested protocol instances ({protocol, params} each, as
      `switching`'s `instances`, default nodes/protocols/switching.py `DEFAULT_INSTANCES`):
      the promise holds only where every instance's own claim holds too.
    - `quorum`: crashes are tolerated only while a strict majority of the hosts never crashed.
    - `note`: one line, why (rule and source).
    """

    tolerates: frozenset[str]
    roles: tuple[str, ...] = ()
    nested: str = ""
    quorum: bool = False
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        """As `testbed schema` shows it (x-protocols) and docs/protocols.md lists it."""
        return {"tolerates": sorted(self.tolerates), "roles": list(self.roles),
                "nested": self.nested, "quorum": self.quorum, "note": self.note}


@dataclass(frozen=True)
class Model:
    """The model a latency bound (Entry.bound) is proven in (004 §2.1 and the algorithm's
    section). Spec validation refuses a topology or fault plan outside it unless the
    experiment says `outside_model: true`; the run then measures each assumption
    (summary.json `qos.assumptions`). Every model also assumes the network carries the
    reserved rates (004 §2.1): no link bandwidth below a sending host's reservation.

    - `fifo`: links never reorder: every link with jitter says `reorder: false`, no netem
      reorder, no `link` fault adding jitter or changing a path's delay (but a raise for
      good), no management `setPath`.
    - `duplicate`: links may duplicate datagrams.
    - `loss`: links may lose datagrams (loss, gemodel, corrupt, a `link` fault's loss);
      `loss_param`: ...only when this protocol parameter is > 0 (`qos-vbr`'s §7 tolerance x).
    - `failures`: the schedule fault kinds allowed (crash, pause, partition; a management
      `Network` `block` is a partition, `Node` `stop` a crash).
    - `clocks`: clock offsets stay within Γ/2 (004 §2.2): no clock fault or management clock
      write but an offset within Γ/2, and the topology's clock offsets within Γ/2. False:
      the bound assumes no clock synchrony (clock faults allowed).
    - `delays`: every path's delay plus jitter within Δ, a `link` fault's delay too (refused
      at validation, testbed/spec/qos.py), measured as Δ_meas.
    - `reserved_rate`: the parameter holding each sender's reserved rate (messages/s): the
      application sends within it (004 §2.1); a sender beyond it is policed, its datagrams
      held, then dropped, and a protocol without loss recovery stalls. `slot_burst`: (k, Θ)
      parameters: at most k messages per slot of Θ (004 §8.2, AppMaxBurst).
    - `source`: the sections that state the model.
    """

    fifo: bool = True
    duplicate: bool = False
    loss: bool = False
    loss_param: str = ""
    failures: frozenset[str] = frozenset()
    clocks: bool = True
    delays: bool = True
    reserved_rate: str = ""
    slot_burst: tuple[str, ...] = ()
    source: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"fifo": self.fifo, "duplicate": self.duplicate, "loss": self.loss,
                "loss_param": self.loss_param, "failures": sorted(self.failures),
                "clocks": self.clocks, "delays": self.delays,
                "reserved_rate": self.reserved_rate, "slot_burst": list(self.slot_burst),
                "source": self.source}


@dataclass(frozen=True)
class Hazard:
    """A documented hazard: a schedule under which the protocol's own rule (its paper's) is
    unsafe, so some of its claims are not made for a run that has it. A run matches when its
    resolved params equal every `params` value (a param left out takes its default) and its
    faults include every kind of `faults` (HAZARD_FAULTS; a fault counts whether or not it
    ended, a `crash` with or without a restart); the checks of `voids` (VOIDABLE) are then
    reported with `claimed: false` and `hazard: <reason>`, and the verdict lists the hazard
    among its reasons without failing for it. A run without the hazard's schedule is held to
    every claim as before.

    - `voids`: the checks (and `liveness`) not claimed under the hazard.
    - `faults`: fault kinds that must all be in the run (empty: params alone decide).
    - `params`: (param, value) pairs the run's params must all equal.
    - `roles`: parameters naming a host (as `Liveness.roles`): a `crash` counts only when it
      hits the host of one of them (empty: any host's).
    - `reason`: one line, what goes wrong and the source.
    """

    voids: frozenset[str]
    faults: frozenset[str] = frozenset()
    params: tuple[tuple[str, Any], ...] = ()
    reason: str = ""
    roles: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """As `testbed schema` shows it (x-protocols) and docs/protocols.md lists it."""
        return {"voids": sorted(self.voids), "faults": sorted(self.faults),
                "params": {k: v for k, v in self.params}, "roles": list(self.roles),
                "reason": self.reason}

    def when(self) -> str:
        """The schedule as docs/protocols.md's hazard table writes it."""
        def kind(f: str) -> str:
            if f == "crash" and self.roles:
                return "`crash` of " + " or ".join(f"`{r}`" for r in self.roles)
            return f"`{f}`"
        return " and ".join([f"`{k}: {v}`" for k, v in self.params]
                            + [kind(f) for f in sorted(self.faults)])


@dataclass(frozen=True)
class ParamClaim:
    """Checks a protocol claims only under some parameter values: a theorem of its paper that
    holds under them. A run whose resolved params equal every `params` value (a param left
    out takes its default, as for a Hazard) is held to `claims` besides the entry's own.

    - `spares_faulty`: agreement spares the messages of faulty senders (a host that crashed
      for good, an incarnation before its restart, a host cut off at the end): a definition
      whose liveness binds only correct senders' messages (004 Definition 2) lets such a
      message reach some correct hosts and not others. The checks count those findings
      apart (`agreement.faulty_senders`) and the verdict does not fail for them.
    - `source`: the theorem or section that gives the claim.
    """

    claims: frozenset[str]
    params: tuple[tuple[str, Any], ...]
    source: str
    spares_faulty: bool = False

    def as_dict(self) -> dict[str, Any]:
        """As `testbed schema` shows it (x-protocols) and docs/protocols.md lists it."""
        return {"claims": sorted(self.claims), "params": {k: v for k, v in self.params},
                "spares_faulty": self.spares_faulty, "source": self.source}


# The common claims: reliable channels (NACK or ACK retransmission) deliver through loss,
# duplication, reordering, pauses, healed partitions and clock faults; a crashed member only
# stops its own stream.
RELIABLE_LIVE = frozenset(FAULT_KINDS)
LINK_LIVE = frozenset(LINK_FAULTS) | {"pause", "partition", "clock"}

# `primary_rule: majority` (P2, 001 §4.1.2): a member that misses the INSTALL its side's
# coordinator sent still holds the old last primary, and two primaries take one counter. A
# non-transitive partition does this readily (docs/protocols.md "Faults tolerated, hazards
# not claimed"); what follows a split brain is not claimed either: the two primaries' orders
# and deliveries (revoked when they meet, even those notified `uniform`), and re-forming the
# group (two sides holding one counter with different members never agree on a lineage).
SPLIT_BRAIN_VOIDS = frozenset({"split_brain", "total_order", "causal_order", "agreement",
                               "uniform", "notification_order", "liveness"})
# 001 §4.3: `fnl` is the regular total order, `ensured` the uniform one. The view's sequencer
# final-delivers what it orders at once; when it crashes before loss or a cut let its last
# ORDERs reach anyone, the next primary orders those messages anew (their senders broadcast
# them again, P8), maybe in another order: the crashed process's last `fnl` are no prefix of
# the survivors' order (the survivors agree with each other: P6 gives the ones behind the
# longest history). Its restarted incarnation adopts the primary's state and delivers them
# in the new order.
PRIMARY_HAZARDS = (
    Hazard(SPLIT_BRAIN_VOIDS, frozenset({NONTRANSITIVE}), (("primary_rule", "majority"),),
           reason="001 §4.1.2 P2 installs a majority view at once: under a non-transitive "
                  "partition a member misses the INSTALL and two primaries take one counter "
                  "(split brain); `primary_rule: attempt` claims it"),
) + tuple(
    Hazard(frozenset({"total_order", "causal_order"}), frozenset({"crash", cut}),
           reason="001 §4.3 makes `fnl` regular, not uniform (`ensured` is): a crashed "
                  "sequencer's last deliveries, whose ORDERs loss or a cut kept from the "
                  "others, are ordered anew by the next primary (explore seed 42913)")
    for cut in ("loss", "partition"))
# Chang-Maxemchuk without its reformation phase: after a crash the predecessor re-passes the
# token to the restarted member (M7); an ORDER the crashed member issued that, through loss,
# reached some members only is then numbered again (nodes/protocols/moving_sequencer.py):
# the two numberings' members then order, and deliver, different messages.
MOVING_SEQUENCER_HAZARDS = (
    Hazard(frozenset({"total_order", "causal_order", "agreement"}), frozenset({"crash"}),
           reason="001 ch. 2 (Chang-Maxemchuk) without token-site reformation: a token "
                  "re-passed after a crash conflicts with an ORDER of the crashed member that "
                  "some members never got (two numberings; with loss, or with two crashes and "
                  "restarts alone: explore seed 7266)"),
)
# Psync's waves (002 "Total Ordering: History Based") assume no failures: the survivors'
# waves can differ.
PSYNC_TOTAL_HAZARDS = tuple(
    Hazard(frozenset({"total_order", "causal_order", "context_order"}),
           frozenset({"crash", cut}),
           reason='002 "Total Ordering: History Based" is failure-free: a crashed sender\'s '
                  "last messages that loss or "
                  "a cut kept from some members make the survivors' waves differ (explore "
                  "seeds 5147, 9087)")
    for cut in ("partition", "loss"))

# Sender-based repair (002 "Recovering Lost Messages"; Lamport's
# order, "Total Order", and Psync over the same repair): only the sender answers a gap, no member
# relays another's message. A sender that crashes while loss or a cut kept its last messages
# from some members leaves them at the members that got them: agreement on a crashed
# sender's messages is not claimed then (found by `testbed explore`, seeds 18, 5015 and 30139), nor
# on those of a sender a partition cuts off for good before the others repaired (seed 9040).
# The fixed sequencer relays (FETCH), so `sequencer` and its kin keep it while the sequencer
# lives (SEQUENCER_HAZARDS).
SENDER_REPAIR_HAZARDS = tuple(
    Hazard(frozenset({"agreement"}), faults,
           reason='002 "Recovering Lost Messages" repairs from the sender only: the last '
                  "messages of a sender "
                  "that crashed or was cut off for good stay at the members they reached")
    for faults in (frozenset({"crash", "partition"}), frozenset({"crash", "loss"}),
                   frozenset({UNHEALED})))
# The fixed sequencer (000 §2.1) runs under a membership service whose view-synchronous
# multicast gives every correct process every ordered message; none runs here. Its ORDERs
# (and its own messages) are repaired by the sequencer alone, and FETCH asks the sequencer:
# once it crashed, what loss or a cut kept from some members stays at the members it reached
# (explore seeds in tests/reproducers/). A crash of another member keeps agreement.
SEQUENCER_HAZARDS = tuple(
    Hazard(frozenset({"agreement"}), frozenset({"crash", cut}), roles=("sequencer",),
           reason="000 §2.1 leaves a crashed sequencer to the membership service, not run "
                  "here: its last ORDERs, which loss or a cut kept from some members, are "
                  "repaired by the sequencer alone and stay at the members they reached")
    for cut in ("loss", "partition"))
# Totem's single ring (002 "Total Ordering: Token Based") leaves a crash to its membership
# protocol: the token is lost and with it the retransmission requests it carries (K3a), so what loss
# or a cut kept from some members stays at the members it reached.
TOKEN_RING_HAZARDS = tuple(
    Hazard(frozenset({"agreement"}), frozenset({"crash", cut}),
           reason='002 "Total Ordering: Token Based" (Totem single ring) leaves a crash to '
                  "its membership "
                  "protocol, not run here: the token stops and its retransmissions with it, "
                  "so messages loss or a cut kept from some members stay at the others")
    for cut in ("loss", "partition"))
# Switching (001 §4.1.2): a member that lost its progress (a crash and restart after the group's
# first switch) cannot rejoin the instance in use without a state transfer, which the paper
# does not give: it leaves the group for good, and its new incarnation's messages reach no one.
SWITCHING_HAZARDS = (
    Hazard(frozenset({"validity"}), frozenset({"crash"}),
           reason="001 §4.1.2: a member restarted after a switch lost its progress and leaves "
                  "the group for good; its new incarnation's messages are not delivered"),
)
# Psync (002 "Psync"): a restarted receiver joins each sender's chain where it finds it (C6)
# and takes what came before as delivered without its context, so its new incarnation may
# deliver a message before one its predecessor in the chain depended on.
PSYNC_HAZARDS = SENDER_REPAIR_HAZARDS + (
    Hazard(frozenset({"causal_order"}), frozenset({"crash"}),
           reason='002 "Psync" has no state transfer: a restarted receiver joins each chain '
                  "mid-way without the context of what it skipped"),
)

# qos-vbr without loss (`loss_tolerance: 0`, 004 §6): every message a correct sender sends
# reaches every correct process, which delivers every message it receives (Lemma 6.1; a
# joining process every one of the slots from its join on, §6.3, §6.6): agreement among the
# correct processes. Only a crashed sender's last messages may reach some of them and not
# others (§6.2: total order with gaps, Definition 2). With loss (§7) gaps come from the
# network too, and no agreement is claimed.
QOS_VBR_CLAIMS = (
    ParamClaim(frozenset({"agreement"}), (("loss_tolerance", 0),), spares_faulty=True,
               source="004 §6.4 Lemma 6.1 and Definition 2 (gaps only from faulty senders) "
                      "without loss"),
)
# ... but a partition or a pause is detected as a failure (§6.6): the others remove the
# detached processes, whose messages meanwhile reach the detached side only, and merge them
# later; a lost datagram (outside the model with x = 0) is a gap for good.
QOS_VBR_HAZARDS = tuple(
    Hazard(frozenset({"agreement"}), frozenset({kind}), (("loss_tolerance", 0),),
           reason="004 §6.6 detects a partition or pause as a failure (the detached processes "
                  "are removed and merged later: their messages meanwhile are gaps), and §6 "
                  "has no repair of a lost datagram")
    for kind in ("partition", "pause", "loss"))


# The fixed sequencer's messages (000 Fig. 1) over reliable FIFO (002), with the relay's FETCH:
# ORDERs only from the sequencer, FETCHes only to it, but the restarted sequencer's join
# question (header `aux`, nodes/protocols/sequencer.py "Restarts"), only from it.
SEQUENCER_EDGE = EdgeRules(frozenset({MsgType.DATA, MsgType.ORDER, MsgType.NACK, MsgType.ACK,
                                      MsgType.HEARTBEAT, MsgType.FETCH}),
                           roles=(RoleRule(MsgType.ORDER, "sequencer", sender=True),
                                  RoleRule(MsgType.FETCH, "sequencer", sender=False, aux=0),
                                  RoleRule(MsgType.FETCH, "sequencer", sender=False,
                                           aux=JOIN_TO_SEQUENCER),
                                  RoleRule(MsgType.FETCH, "sequencer", sender=True,
                                           aux=JOIN_QUESTION)))
# ... and Fast SETO's planning (003 Fig. 7): ESTIMATEs only to the designated process, DELAY
# rows only from it.
FAST_SETO_EDGE = EdgeRules(SEQUENCER_EDGE.types | {MsgType.PING, MsgType.PONG,
                                                   MsgType.ESTIMATE, MsgType.DELAY},
                           rate_id=fast_seto.RATE_ID,
                           roles=SEQUENCER_EDGE.roles + (
                               RoleRule(MsgType.ESTIMATE, "coordinator", sender=False),
                               RoleRule(MsgType.DELAY, "coordinator", sender=True)))
# The token (an ORDER under token-ring's id) only from the predecessor in the ring (K3).
TOKEN_RING_EDGE = EdgeRules(frozenset({MsgType.DATA, MsgType.ORDER}), checked=False,
                            roles=(RoleRule(MsgType.ORDER, "predecessor", sender=True),))
# 004 §8.1: relayed SEQDATA only from the leader, FWDs only to it (LB1, LB2).
LEADER_EDGE = EdgeRules(frozenset({MsgType.DATA}), checked=False,
                        roles=(RoleRule(MsgType.DATA, "leader", sender=True, relayed=True),
                               RoleRule(MsgType.DATA, "leader", sender=False, relayed=False)))
# 004 §8.2: GRANTs (ORDER) only from the leader, REQs (FETCH) only to it (TS1, TS3).
TIMESTAMP_LEADER_EDGE = EdgeRules(
    frozenset({timestamp_leader.REQ, timestamp_leader.GRANT, timestamp_leader.TSDATA,
               timestamp_leader.DUMMY}), checked=False,
    roles=(RoleRule(timestamp_leader.GRANT, "leader", sender=True),
           RoleRule(timestamp_leader.REQ, "leader", sender=False)))
# `primary`'s messages and its membership's (001 §4.1), all DATA: a membership INSTALL only
# from the coordinator whose proposal this member answered (membership M3, M5).
PRIMARY_EDGE = EdgeRules(frozenset({MsgType.DATA}), checked=False,
                         protos=frozenset({membership.WIRE_ID}),
                         roles=(RoleRule(MsgType.DATA, "installer", sender=True,
                                         proto=membership.WIRE_ID, aux=membership.INSTALL),))
# The analysis sections a protocol can add to summary.json, by key: analysis maps each key to
# the function that computes it (analysis/verdict.py `SECTIONS`, analysis/job.py
# `SPARK_SECTIONS`); a protocol with a latency bound adds `qos` (004) whatever it names.
SECTIONS = ("membership", "switching", "qos", "context")

Factory = Callable[[int, list[int], dict[str, Any]], Layer]


def _hosting(cls: Callable[..., Layer]) -> Factory:
    """The factory of a container of inner protocol instances (`switching`, `primary`): it
    gets the catalogue's lookup (`get`) from here, so that no protocol module imports the
    catalogue (which imports them all)."""
    def factory(me: int, members: list[int], params: dict[str, Any]) -> Layer:
        return cls(me, members, params, lookup=get)
    factory.__name__ = factory.__qualname__ = cls.__name__
    factory.__doc__ = cls.__doc__
    return factory
# A protocol whose params nest other protocols (switching's instances) checks and resolves
# them itself: (params, topology hosts) -> [(location, message)], (params, {host: id}) -> params.
ParamsCheck = Callable[[dict[str, Any], list[str]], list[tuple[tuple[Any, ...], str]]]
HostResolver = Callable[[dict[str, Any], dict[str, int]], dict[str, Any]]
# A protocol whose order has a throughput ceiling below the network's: (params, the hosts in
# id order, how many of them send, (one-way delay in seconds, loss fraction) from one host to
# another) -> messages per second at most.
Ceiling = Callable[[dict[str, Any], list[str], int, Callable[[str, str], tuple[float, float]]],
                   float]


@dataclass(frozen=True)
class Entry:
    name: str
    wire_id: int
    factory: Factory
    params: type[CommonParams]
    claims: frozenset[str]
    optimistic: bool = False  # opt-delivers (summary.json gets `local_order` and accuracy)
    summary: str = ""
    # A claimed latency bound (004): the formula analysis/qos.py judges the run's maximum
    # latency against -- "cbr" Δ+Γ, "vbr" Δ+Γ+Θ (Δ+2Γ+Θ with failures), "leader" 2Δ+pO,
    # "timestamp-leader" 2Δ+max(pO, Θ); "" claims none.
    bound: str = ""
    check_params: ParamsCheck | None = None
    resolve_hosts: HostResolver | None = None
    # The liveness claim (Liveness above); the default claims none.
    liveness: Liveness = Liveness(frozenset(), note="no liveness claimed")
    # The model the bound holds in (Model above); None for a protocol without a bound.
    model: Model | None = None
    # The documented hazards (Hazard above): schedules under which some claims are not made.
    hazards: tuple[Hazard, ...] = ()
    # Its receive path never reads a received header's `proto` (checked: grep `h.proto`), so
    # a container (nodes/protocols/stack.py) hands it datagrams under the container's tag as
    # they are; the others get a copy with their wire id put back.
    tagged_ok: bool = False
    # What the edge gate admits beyond the generic checks (nodes/edge.py EdgeRules; None: generic
    # checks only).
    edge: EdgeRules | None = None
    # The analysis sections (SECTIONS above) a run of it adds to summary.json.
    sections: tuple[str, ...] = ()
    # Its throughput ceiling (Ceiling above; None: none but the network's): a drawn world's
    # drain covers the backlog an offered load above it leaves (testbed/explore/case.py).
    ceiling: Ceiling | None = None
    # Checks claimed only under some params (ParamClaim above).
    param_claims: tuple[ParamClaim, ...] = ()

    def host_params(self) -> tuple[str, ...]:
        """Parameters that name a host: specs check them, nodes get the member id
        (`<name>_id`)."""
        return tuple(f.name for f in fields(self.params) if f.metadata.get("host"))

    def per_host_params(self) -> tuple[str, ...]:
        """Parameters that take one value or a mapping host -> value (specs check the
        hosts)."""
        return tuple(f.name for f in fields(self.params) if f.metadata.get("per_host"))

    def claims_check(self, check: str) -> bool:
        """Whether a check of the suite (or `local_order`) is among the claims."""
        if check == "local_order":
            return self.optimistic
        return check in self.claims

    def param_claims_of(self, params: Mapping[str, Any]) -> tuple[ParamClaim, ...]:
        """The ParamClaims a run with `params` matches (a param left out: its default)."""
        defaults = {f.name: f.default for f in fields(self.params)}
        return tuple(c for c in self.param_claims
                     if all(params.get(k, defaults.get(k)) == v for k, v in c.params))

    def claims_for(self, params: Mapping[str, Any]) -> frozenset[str]:
        """The checks a run with `params` is held to: the claims and the matching
        ParamClaims'."""
        return self.claims.union(*(c.claims for c in self.param_claims_of(params)))


CATALOGUE: tuple[Entry, ...] = (
    Entry("sequencer", Proto.SEQUENCER, Sequencer, SequencerParams, SEQUENCER_TOTAL,
          edge=SEQUENCER_EDGE,
          liveness=Liveness(RELIABLE_LIVE, roles=("sequencer",),
                            note="000 §2.1: the sequencer numbers every message and none "
                                 "takes its place"),
          hazards=SEQUENCER_HAZARDS,
          tagged_ok=True,
          summary="fixed-sequencer total order over reliable FIFO (000 sec. 2.1, Fig. 1)"),
    Entry("seto", Proto.SETO, seto.build, seto.SetoParams, SEQUENCER_TOTAL, optimistic=True,
          edge=SEQUENCER_EDGE,
          liveness=Liveness(RELIABLE_LIVE, roles=("sequencer",),
                            note="000 §2.1: the sequencer numbers every message and none "
                                 "takes its place"),
          hazards=SEQUENCER_HAZARDS,
          tagged_ok=True,
          summary="optimistic total order with delay compensation (000 sec. 3, Fig. 4)"),
    Entry("fast-seto", Proto.FAST_SETO, fast_seto.build, fast_seto.FastSetoParams,
          SEQUENCER_TOTAL, optimistic=True, edge=FAST_SETO_EDGE,
          liveness=Liveness(RELIABLE_LIVE, roles=("sequencer",),
                            note="000 §2.1: the sequencer numbers every message and none "
                                 "takes its place"),
          hazards=SEQUENCER_HAZARDS,
          tagged_ok=True,
          summary="SETO with planned delays (003 sec. 4.3, Fig. 7)"),
    Entry("reliable-nack", Proto.RELIABLE, ReliableNack, ReliableParams, RELIABLE_FIFO,
          liveness=Liveness(RELIABLE_LIVE, note="002: a gap is NACKed until retransmitted; "
                                                "a crash stops only the crashed sender"),
          hazards=SENDER_REPAIR_HAZARDS,
          summary="reliable FIFO multicast with negative acknowledgements (002)"),
    Entry("reliable-ack", reliable_ack.WIRE_ID, reliable_ack.ReliableAck,
          reliable_ack.ReliableAckParams, RELIABLE_FIFO,
          liveness=Liveness(RELIABLE_LIVE,
                            note='002 "Reliable FIFO: Positive Acknowledgement": a message is '
                                 "resent until acknowledged; a "
                                 "suspected receiver is parked and caught up when heard again"),
          hazards=SENDER_REPAIR_HAZARDS,
          summary="reliable FIFO multicast with positive acknowledgements (002 "
                  '"Reliable FIFO: Positive Acknowledgement")'),
    Entry("cbcast", cbcast.WIRE_ID, cbcast.Cbcast, ReliableParams,
          RELIABLE_FIFO | {"causal_order"},
          liveness=Liveness(LINK_LIVE, note='002 "ISIS: CBCAST": without ISIS\'s flush a crashed '
                                            "sender's lost message holds its dependants"),
          hazards=SENDER_REPAIR_HAZARDS,
          summary='causal order with vector clocks, ISIS CBCAST (002 "ISIS: CBCAST")'),
    Entry("token-ring", token_ring.WIRE_ID, token_ring.TokenRing, token_ring.TokenRingParams,
          SEQUENCER_TOTAL, edge=TOKEN_RING_EDGE,
          liveness=Liveness(LINK_LIVE, note="Totem: a crashed member breaks the ring "
                                            "(membership out of scope)"),
          hazards=TOKEN_RING_HAZARDS,
          tagged_ok=True, ceiling=token_ring.ceiling,
          summary="total order by a rotating token carrying the sequence number (002 "
                  '"Total Ordering: Token Based", Totem single ring)'),
    Entry("lamport", lamport.WIRE_ID, lamport.Lamport, lamport.LamportParams, SEQUENCER_TOTAL,
          liveness=Liveness(LINK_LIVE, note="Lamport 1978: delivery waits for a later "
                                            "message of every member; a crash stops it"),
          hazards=SENDER_REPAIR_HAZARDS,
          tagged_ok=True,
          summary="symmetric total order by Lamport timestamps and acknowledgements (002 "
                  '"Total Order", Lamport 1978)'),
    Entry("moving-sequencer", moving_sequencer.WIRE_ID, moving_sequencer.MovingSequencer,
          moving_sequencer.MovingSequencerParams, SEQUENCER_TOTAL,
          liveness=Liveness(LINK_LIVE, note="Chang-Maxemchuk: no token-site reformation, a "
                                            "crashed site stops the order"),
          hazards=MOVING_SEQUENCER_HAZARDS + SENDER_REPAIR_HAZARDS,
          tagged_ok=True,
          summary="total order by a sequencer role rotating with a token (001 ch. 2, "
                  "Chang-Maxemchuk)"),
    Entry("psync", psync.WIRE_ID, psync.Psync, ReliableParams, RELIABLE_FIFO | {"causal_order"},
          liveness=Liveness(LINK_LIVE, note='002 "Psync": a crashed sender\'s lost message '
                                            "holds its dependants in the context graph"),
          hazards=PSYNC_HAZARDS,
          summary='causal order by a context graph, Psync (002 "Psync")'),
    Entry("psync-total", psync_total.WIRE_ID, psync_total.PsyncTotal,
          psync_total.PsyncTotalParams, SEQUENCER_TOTAL,
          liveness=Liveness(LINK_LIVE, note='002 "Total Ordering: History Based": a wave '
                                            "waits for every "
                                            "participant; a crashed one stops it"),
          hazards=SENDER_REPAIR_HAZARDS + PSYNC_TOTAL_HAZARDS, sections=("context",),
          summary="total order from Psync's causal order by waves, with NULLs (002 "
                  '"Total Ordering: History Based")'),
    Entry("qos-vbr", qos_vbr.WIRE_ID, qos_vbr.QosVbr, qos_vbr.QosVbrParams,
          frozenset({"total_order", "integrity"}), bound="vbr",
          liveness=Liveness(frozenset({"crash"}),
                            note="004 §6: a crashed process is removed at its slot deadline; "
                                 "a lost or late datagram is a gap for good (§7)"),
          model=Model(loss=True, loss_param="loss_tolerance",
                      failures=frozenset({"crash", "pause", "partition"}),
                      reserved_rate="avg", slot_burst=("max_burst", "theta"),
                      source="004 §2.1, §6 (crashes, joins, merges), §7 (loss with x > 0)"),
          param_claims=QOS_VBR_CLAIMS, hazards=QOS_VBR_HAZARDS,
          summary="QoS-preserving total order for variable bit rate: slots of theta, latency "
                  "<= delta+gamma+theta, delta+2gamma+theta with a crash; total order with "
                  "gaps when loss_tolerance > 0 (004 secs. 5-7)"),
    Entry("primary", primary.WIRE_ID, _hosting(primary.Primary), primary.PrimaryParams,
          SEQUENCER_TOTAL, edge=PRIMARY_EDGE,
          sections=("membership",),
          liveness=Liveness(RELIABLE_LIVE, quorum=True,
                            note="001 §4.1: views exclude crashed members while a majority "
                                 "remains; a cut-off minority rejoins by state transfer"),
          hazards=PRIMARY_HAZARDS,
          summary="total order in primary views over partitionable membership: majority of "
                  "the last primary, blocked minorities, forced leave and rejoin (001 4.1)"),
    Entry("qos-cbr", qos_cbr.WIRE_ID, qos_cbr.QosCbr, qos_cbr.QosCbrParams,
          RELIABLE_FIFO | {"total_order"}, bound="cbr",
          liveness=Liveness(frozenset(), note="004 §4 assumes no failures and no loss: a "
                                              "lost datagram halts its sender's stream"),
          model=Model(reserved_rate="rate",
                      source="004 §2.1 (FIFO links, no loss), §4 (no failures)"),
          summary="QoS-preserving total order for constant bit rates, latency <= Δ+Γ (004 "
                  "§4, Figs. 3-5)"),
    Entry("leader", leader.WIRE_ID, leader.Leader, leader.LeaderParams,
          RELIABLE_FIFO | {"total_order"}, bound="leader", edge=LEADER_EDGE,
          liveness=Liveness(frozenset({"clock"}), note="004 §8 assumes no failures and no "
                                                       "loss; no clock synchrony"),
          model=Model(clocks=False, reserved_rate="rate", source="004 §2.1, §8 (no failures)"),
          summary="leader broadcast over reserved rates, latency <= 2Δ+pO (004 §8.1)"),
    Entry("timestamp-leader", timestamp_leader.WIRE_ID, timestamp_leader.TimestampLeader,
          timestamp_leader.TimestampLeaderParams, RELIABLE_FIFO | {"total_order"},
          bound="timestamp-leader", edge=TIMESTAMP_LEADER_EDGE,
          liveness=Liveness(frozenset({"clock"}), note="004 §8 assumes no failures and no "
                                                       "loss; no clock synchrony"),
          model=Model(clocks=False, reserved_rate="avg", slot_burst=("max_burst", "theta"),
                      source="004 §2.1, §8 (no failures)"),
          summary="blocks of timestamps granted by a leader, latency <= 2Δ+max(pO, Θ) (004 "
                  "§8.2.1 with unequal paths to the leader; Δ+max(Δ+pO, Θ) with equal ones)"),
    Entry("switching", switching.WIRE_ID, _hosting(switching.Switching), switching.SwitchingParams,
          SEQUENCER_TOTAL,
          summary="switches between total-order instances without stopping the flow, or by "
                  "the RABP and stop-the-flow baselines (001 ch. 2, Fig. 2.1)",
          check_params=lambda params, hosts: switching.check_params(params, hosts, find,
                                                                     params_model),
          resolve_hosts=lambda params, ids: switching.resolve_hosts(params, ids, find),
          sections=("switching",), hazards=SWITCHING_HAZARDS,
          liveness=Liveness(RELIABLE_LIVE, nested="instances",
                            note="001 §2.2: a member crashed during a switch is excluded; "
                                 "each instance must itself survive the fault plan")),
    Entry("fifo", fifo.WIRE_ID, fifo.Fifo, CommonParams, frozenset({"fifo_order", "integrity"}),
          liveness=Liveness(frozenset({"duplicate", "crash", "clock"}),
                            note='002 "FIFO Ordering: Implementation": a lost or overtaken '
                                 "datagram is never "
                                 "delivered"),
          summary="FIFO without reliability, late messages dropped (002 "
                  '"FIFO Ordering: Implementation")'),
)

_BY_NAME: dict[str, Entry] = {}
_BY_WIRE: dict[int, Entry] = {}


def register(entry: Entry) -> Entry:
    """Add `entry` to the catalogue after checking it against everything above (unique name
    and wire id, known checks, fault kinds, hazards and sections, a model exactly for a
    bound); its wire id is then accepted in decoded headers. Every entry of CATALOGUE is
    registered so; a protocol added later needs nothing else (docs/architecture.md, "Adding a
    protocol"). RuntimeError, with the catalogue unchanged, for an entry that does not hold."""
    e = entry
    if e.name in _BY_NAME or e.wire_id in _BY_WIRE:
        raise RuntimeError("protocol catalogue: names and wire ids must be unique "
                           f"({e.name!r}, {e.wire_id})")
    if not e.claims <= set(CHECKS):
        raise RuntimeError(f"protocol {e.name!r} claims unknown checks "
                           f"{sorted(e.claims - set(CHECKS))}")
    if not e.liveness.tolerates <= set(FAULT_KINDS):
        raise RuntimeError(f"protocol {e.name!r}: unknown fault kinds in its liveness claim")
    for h in e.hazards:
        if not h.voids or not h.voids <= set(VOIDABLE) or not h.faults <= set(HAZARD_FAULTS):
            raise RuntimeError(f"protocol {e.name!r}: a hazard voids unknown checks or names "
                               "unknown fault kinds")
        if not {k for k, _ in h.params} <= {f.name for f in fields(e.params)} or not h.reason:
            raise RuntimeError(f"protocol {e.name!r}: a hazard names unknown params or has "
                               "no reason")
    for c in e.param_claims:
        if not c.claims <= set(CHECKS) or not c.params or not c.source or not {
                k for k, _ in c.params} <= {f.name for f in fields(e.params)}:
            raise RuntimeError(f"protocol {e.name!r}: a param claim claims unknown checks, "
                               "names no or unknown params, or has no source")
    if not set(e.sections) <= set(SECTIONS):
        raise RuntimeError(f"protocol {e.name!r}: unknown analysis sections")
    if bool(e.bound) != (e.model is not None):
        raise RuntimeError(f"protocol {e.name!r}: a latency bound needs a model, and only "
                           "a bound has one")
    wire.register_proto(e.wire_id, e.name)
    _BY_NAME[e.name] = _BY_WIRE[e.wire_id] = e
    return e


for _e in CATALOGUE:
    register(_e)
wire.register_proto(membership.WIRE_ID, "membership")  # the primary layer's membership


def names() -> tuple[str, ...]:
    return tuple(_BY_NAME)


def get(name: str) -> Entry:
    """The entry of protocol `name`; KeyError naming the known ones."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown protocol {name!r}; known: {', '.join(_BY_NAME)}") from None


def find(name: str) -> Entry | None:
    return _BY_NAME.get(name)


def find_wire(wire_id: int) -> Entry | None:
    """The entry whose wire id is `wire_id` (None: no protocol's)."""
    return _BY_WIRE.get(wire_id)


def sections(name: str, params: dict[str, Any]) -> tuple[str, ...]:
    """The analysis sections a run of protocol `name` with `params` adds to summary.json: its
    entry's, `qos` for a latency bound, and those of the protocols it nests (switching's
    instances), in SECTIONS order; every section for a protocol the catalogue does not know
    (each finds nothing to say where its events are absent)."""
    entry = find(name)
    if entry is None:
        return SECTIONS
    wanted = set(entry.sections) | ({"qos"} if entry.bound else set())
    if entry.liveness.nested:
        nested = params.get(entry.liveness.nested) or switching.instance_specs({})
        for spec in nested if isinstance(nested, list) else []:
            if isinstance(spec, dict) and find(str(spec.get("protocol"))) is not None:
                wanted |= set(sections(str(spec["protocol"]), dict(spec.get("params") or {})))
    return tuple(k for k in SECTIONS if k in wanted)


def build(name: str, me: int, members: list[int], params: dict[str, Any]) -> Layer:
    """Build protocol `name`'s stack for process `me` (host params already resolved to ids)."""
    return get(name).factory(me, members, params)


def params_model(name: str) -> type[BaseModel]:
    """The pydantic model of protocol `name`'s parameters (unknown keys forbidden)."""
    return _model(get(name).params)


_MODELS: dict[type, Any] = {}


def _duration_ms(value: Any) -> float:
    return qos_common.duration_ns(value) / 1e6


def _model(cls: type[CommonParams]) -> type[BaseModel]:
    from pydantic import ConfigDict, Field, create_model

    if cls in _MODELS:
        return _MODELS[cls]  # type: ignore[no-any-return]
    from pydantic import BeforeValidator

    hints = typing.get_type_hints(cls)
    spec: dict[str, Any] = {}
    for f in fields(cls):
        meta = dict(f.metadata)
        doc = meta.pop("doc", None)
        meta.pop("host", None)
        default = f.default if f.default is not MISSING else ...
        hint: Any = hints[f.name]
        if meta.pop("duration", False):
            # `20ms` or a number of ms (nodes/protocols/qos_common.py `duration_ns`), as ms
            hint = Annotated[float, BeforeValidator(_duration_ms)]
        if meta.pop("per_host", False):
            # one value for every host, or a mapping host name -> value, each within limits
            one: Any = Annotated[typing.get_args(hint)[0], Field(**meta)]
            hint, meta = typing.Union[one, dict[str, one]], {}  # noqa: UP007 (runtime types)
        spec[f.name] = (hint, Field(default=default, description=doc, **meta))
    model = create_model(f"{cls.__name__}Model", __config__=ConfigDict(extra="forbid"),
                         __doc__=cls.__doc__, **spec)
    _MODELS[cls] = model
    return model
