"""`cbcast`: causal order with vector clocks, ISIS CBCAST (lecture notes 002, "ISIS:
CBCAST"), over reliable FIFO multicast (the NACK layer; "CBCAST Observations": "positive
ack or negative ack techniques can be used in conjunction to recover from message losses").

State: the vector VT_j and a hold-back buffer. The notes start VT at -1; here, as
everywhere in the project, numbers start at 1, so VT_j[k] = how many of k's messages j has
delivered (initially 0) and a message's own entry equals its `mno`.
- B1 multicast m at i: VT_i[i] += 1; t_m := VT_i; R-multicast (m, t_m); deliver m
  to self at once;
- B2 receive (m, t_m) from i != j: t_m[i] <= VT_j[i] is a duplicate (ours, needed
  over retransmissions): discard. Otherwise hold m until (1) VT_j[i] = t_m[i] - 1 and
  (2) VT_j[k] >= t_m[k] for every k != i;
- B3 deliver m: VT_j[k] := max(VT_j[k], t_m[k]) for every k, then re-scan the
  hold-back buffer until nothing more is deliverable.

Wire: t_m is a payload prefix of n unsigned 32-bit entries in member order (4n bytes,
"CBCAST Observations"), then the application payload; each message held back is logged as `hold`.
Group membership and flush (ISIS) are out of scope: a crashed sender's lost message holds its
dependants for ever (002 "Causal ordering: Issues").

Restarts (B2's conditions compare counts that never go back; integrity): a restarted process
used to start VT_i[i] at 0 again, so its new messages carried t_m[i] <= VT_j[i] and every
receiver discarded them as duplicates (and their mids collided with the old incarnation's);
a restarted receiver, with VT_j = 0, held every message for ever (condition (1) waits for
messages sent before it restarted). Now an entry of VT counts in its member's incarnation
range, `incarnation * INCARNATION_SPAN` + messages (the sequencer's convention), so mnos
continue and
- B4 (ours) a message whose own entry lies in a newer incarnation range than VT_j[i] starts
  i's new stream: OLD_j[i] := VT_j[i], VT_j[i] := the range's base (reliable FIFO hands the
  new incarnation's messages up from its first, and the old incarnation's tail that reaches
  it later, over a slower path, in order after them). OLD_j[i] goes on counting i's old
  stream, one incarnation back: a late old-range message is a duplicate if t_m[i] <=
  OLD_j[i], and is otherwise held like any other until OLD_j[i] = t_m[i] - 1 and (2) holds;
  delivering it sets OLD_j[i] := t_m[i]. A dependency t_m[k] in k's old range is met once
  OLD_j[k] >= t_m[k] (delivered here: causal order, B2 (2)); one in a range older still, or
  of a stream this receiver never counted, is lost with it and counts as met. An old tail
  lost for good holds only its own dependants, as a crashed sender's lost message does
  (002 "Causal ordering: Issues"; no liveness is claimed under a crash): the new stream waits
  for it only through a dependant. Once VT_j[i] holds the new range it no longer says how
  much of i's old stream j delivered, so j's messages carry OLD_j beside t_m (`slot` OLD:
  n more entries, 0 where j counts no old stream), each entry met as one of t_m (B2 (2)):
  a message j sends after delivering the old tail waits for that tail everywhere (without
  it, a receiver that had switched already delivered it first: causal order). An entry at
  a range's base (no message of that incarnation) depends on nothing and counts as met:
  what j delivered of the previous incarnation is in OLD_j, and a count taken from COUNTS
  (B6) or a join (B5) is no delivery (a restarted member's own count, its base until it
  sends, held a joiner's messages for ever). B3 merges no base entry (it would end the old
  stream's count unseen);
- B5 (ours) a restarted receiver joins each sender's stream at the first message reliable
  FIFO hands it (which joins from the present too): VT_j[i] := max(VT_j[i], t_m[i] - 1)
  then, logged as `stream_join` naming i's message VT_j[i] + 1 (from it on, the receiver
  owes every message of i; one at or below it is a duplicate);
- B6 (ours) the join handshake. 002 gives no rule for a restarted process (its "Group
  Communication Protocols" name a member recovery protocol, "Causal ordering: Issues" leaves
  a failed receiver open). A message of k may depend on i's messages sent before j
  restarted, which reliable FIFO never hands j: with VT_j[i] still at its start, condition
  (2) would hold it for ever once i falls silent. So a restarted j sends every member an ASK
  at its start, and again every JOIN_RETRY_NS while a held message waits on a sender whose
  stream it has not joined (an ASK or its answer may be lost; a member that answered may
  have delivered more since). Every member answers an ASK with COUNTS, its VT (its own
  entry: how many messages it sent). For each sender i whose stream j has not joined,
  VT_j[i] := max(VT_j[i], COUNTS[i]): i's messages up to there were sent before the answer,
  are owed by no join point j logs (B5 names one above them) and count as met, and the ones
  after it come from reliable FIFO. The stream of a sender j has joined is not touched.

Wire: ASK and COUNTS are single datagrams beside reliable FIFO, MsgType.DUMMY with `slot`
ASK (no payload) or COUNTS (t_m's format: n unsigned 32-bit entries); a DATA of `slot` OLD
carries OLD_j after t_m, in the same format (B4). Datagrams are untrusted: a DUMMY of another
slot or payload size, or a DATA of another slot or shorter than its vectors, is refused,
counted (`RejectedMessages`) and logged as `reject`.
"""

from __future__ import annotations

import struct
from typing import Any

from nodes.protocols.base import (
    JOIN_EVENT,
    Action,
    Attribute,
    FinalDeliver,
    Log,
    Managed,
    ManagedHost,
    Received,
    Send,
    SetTimer,
)
from nodes.protocols.reliable import Below, OnReliable
from nodes.protocols.sequencer import INCARNATION_SPAN
from nodes.wire import Header, Message, MsgType

WIRE_ID = 7
ASK, COUNTS = 1, 2  # `slot` of the join handshake's datagrams (B6)
OLD = 1  # `slot` of a DATA that carries OLD_j after t_m (B4)
JOIN_RETRY_NS = 200_000_000


class Cbcast(OnReliable):
    def __init__(self, me: int, members: list[int], params: dict[str, Any],
                 scope: str = "rm"):
        self.me = me
        self.instance = "" if scope == "rm" else f"cbcast#{scope}"  # written as `proto`
        self.members = sorted(members)
        self.index = {m: k for k, m in enumerate(self.members)}
        self.vt_format = struct.Struct(f"!{len(self.members)}I")
        self.rm = Below(me, members, params, WIRE_ID, self._r_deliver, scope)
        self.proto = WIRE_ID  # stamped on the handshake's datagrams (B6)
        self.join_key = f"cbcast:{scope}:join"
        self.vt = [0] * len(self.members)  # VT_j
        incarnation = int(params.get("incarnation", 0))
        self.vt[self.index[me]] = incarnation * INCARNATION_SPAN  # B4: mnos continue
        self.old: dict[int, int] = {}  # B4: OLD_j, i's previous incarnation's count
        # B5: the senders whose stream a restarted receiver has joined (all, otherwise).
        self.joined = set(range(len(self.members))) if incarnation == 0 else {self.index[me]}
        # (origin, t_m, the sender's OLD vector or [], message)
        self.held: list[tuple[int, list[int], list[int], Message]] = []
        self.delivered = 0  # local delivery count: the `seq` of each fnl
        self.max_held = 0
        self.rejected = 0  # datagrams refused as malformed

    def start(self, now: int) -> list[Action]:
        """B6: a restarted process asks every member for its counts."""
        out = self.rm.start(now)
        if len(self.joined) < len(self.members):
            out += [self._ask(), SetTimer(self.join_key, JOIN_RETRY_NS)]
        return out

    def on_timer(self, key: str, now: int) -> list[Action]:
        """B6: ask again while a held message waits on a sender not joined yet."""
        if key != self.join_key:
            return self.rm.on_timer(key, now)
        if len(self.joined) == len(self.members):
            return []
        out: list[Action] = [self._ask()] if self._waits_on_unjoined() else []
        return out + [SetTimer(self.join_key, JOIN_RETRY_NS)]

    def on_message(self, src: int, msg: Message, now: int) -> list[Action]:
        if msg.header.type == MsgType.DUMMY:
            return self._handshake(msg)
        return self.rm.on_message(src, msg, now)

    def retag(self, proto: int) -> bool:
        self.proto = proto
        return super().retag(proto)

    def managed(self, host: ManagedHost) -> list[Managed]:
        return super().managed(host) + [Managed("TotalOrder", (
            Attribute("RejectedMessages", "int", lambda: self.rejected,
                      description="datagrams refused as malformed (short t_m, bad handshake)"),
        ))]

    # -- Layer interface ----------------------------------------------------------------------
    def broadcast(self, payload: bytes, now: int) -> list[Action]:
        """B1."""
        i = self.index[self.me]
        self.vt[i] += 1
        mno = self.vt[i]
        prefix = self.vt_format.pack(*self.vt)
        if self.old:  # B4: what we delivered of old streams, which VT no longer says
            prefix += self.vt_format.pack(*(self.old.get(k, 0) for k in range(len(self.vt))))
        header = Header(MsgType.DATA, origin=self.me, mno=mno, ts=now,
                        slot=OLD if self.old else 0)
        out: list[Action] = [Log("send", {"mno": mno, "size": len(payload)})]
        sent = self.rm.multicast(header, prefix + payload, now)
        self.delivered += 1
        out.append(FinalDeliver(self.me, mno, self.delivered, len(payload), self.instance))
        # The own R-delivery is skipped in _r_deliver (it is delivered above, at once).
        return out + sent

    # -- the join handshake (B6) --------------------------------------------------------------
    def _ask(self) -> Send:
        return Send(None, Message(Header(MsgType.DUMMY, self.proto, sender=self.me, slot=ASK)))

    def _handshake(self, msg: Message) -> list[Action]:
        """B6: answer an ASK with our counts; take a COUNTS' entries for the senders whose
        stream we have not joined."""
        h = msg.header
        if h.sender not in self.index or h.sender == self.me:
            return self._reject("sender", h)
        if h.slot == ASK and not msg.payload:
            counts = self.vt_format.pack(*self.vt)
            return [Send(h.sender, Message(Header(MsgType.DUMMY, self.proto, sender=self.me,
                                                  slot=COUNTS), counts))]
        if h.slot != COUNTS or len(msg.payload) != self.vt_format.size:
            return self._reject("handshake", h)
        moved = False
        for k, x in enumerate(self.vt_format.unpack(msg.payload)):
            if k not in self.joined and x > self.vt[k]:
                self.vt[k] = x
                moved = True
        return self._rescan() if moved else []

    def _waits_on_unjoined(self) -> bool:
        """Whether a held message waits on a sender whose stream we have not joined."""
        for i, t_m, olds, _ in self.held:
            for k, x in enumerate(t_m + olds):
                k %= len(t_m)
                if k != i and k not in self.joined and not self._met(k, x):
                    return True
        return False

    def _reject(self, reason: str, h: Header) -> list[Action]:
        self.rejected += 1
        return [Log("reject", {"reason": reason,
                               "detail": f"{h.type.name} slot {h.slot} from {h.sender}"})]

    # -- the algorithm ------------------------------------------------------------------------
    def _r_deliver(self, src: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        if h.type != MsgType.DATA or h.origin == self.me:
            return []
        return self._receive(msg)

    def _receive(self, msg: Message) -> list[Action]:
        """B2: discard a duplicate, deliver what the conditions allow, hold the rest."""
        h = msg.header
        size = self.vt_format.size * (2 if h.slot == OLD else 1)
        if h.slot not in (0, OLD) or len(msg.payload) < size or h.origin not in self.index:
            return self._reject("data", h)
        t_m = list(self.vt_format.unpack_from(msg.payload))
        olds = list(self.vt_format.unpack_from(msg.payload, size // 2)) if h.slot == OLD else []
        i = self.index[h.origin]
        moved = False
        joins: list[Action] = []
        if i not in self.joined:  # B5
            self.joined.add(i)
            first = max(self.vt[i] + 1, t_m[i])  # i's first message owed here
            moved = first - 1 > self.vt[i]
            self.vt[i] = first - 1
            # Logged: the checks hold this process to every message of i from `first` on
            # (analysis/joins.py).
            joins.append(Log(JOIN_EVENT, {"origin": h.origin, "mno": first}))
        elif t_m[i] // INCARNATION_SPAN > self.vt[i] // INCARNATION_SPAN:  # B4
            self.old[i] = self.vt[i]
            self.vt[i] = t_m[i] // INCARNATION_SPAN * INCARNATION_SPAN
            moved = True
        if self._stale(i, t_m[i]):
            return joins + self._rescan() if moved else joins
        out: list[Action] = [*joins,
                             Received(h.origin, h.mno, len(msg.payload) - size, self.instance)]
        if not self._deliverable(i, t_m, olds):
            self.held.append((i, t_m, olds, msg))
            self.max_held = max(self.max_held, len(self.held))
            out.append(Log("hold", {"origin": h.origin, "mno": h.mno, "held": len(self.held)}))
            return out + self._rescan() if moved else out
        out += self._deliver(i, t_m, olds, msg)
        return out + self._rescan()

    def _count(self, k: int, x: int) -> int | None:
        """The count entry x of k is compared with: VT_j[k], OLD_j[k] for x in k's previous
        range (B4), None for a range older still or one never counted here (lost)."""
        vt = self.vt[k]
        if x // INCARNATION_SPAN >= vt // INCARNATION_SPAN:
            return vt
        old = self.old.get(k)
        if old is not None and x // INCARNATION_SPAN == old // INCARNATION_SPAN:
            return old
        return None

    def _stale(self, i: int, x: int) -> bool:
        """B2's duplicate test, B4's old stream included."""
        count = self._count(i, x)
        return count is None or x <= count

    def _met(self, k: int, x: int) -> bool:
        """B2 (2) for the entry x of k: B4's old stream and base entries included."""
        if x % INCARNATION_SPAN == 0:
            return True
        count = self._count(k, x)
        return count is None or count >= x

    def _deliverable(self, i: int, t_m: list[int], olds: list[int]) -> bool:
        """B2's conditions (1) and (2), B4's old stream and the sender's OLD_j included."""
        if self._count(i, t_m[i]) != t_m[i] - 1:
            return False
        n = len(t_m)
        return all(self._met(k % n, x) for k, x in enumerate(t_m + olds) if k % n != i)

    def _deliver(self, i: int, t_m: list[int], olds: list[int], msg: Message) -> list[Action]:
        """B3 (no base entry merged); a late old-range message advances OLD_j[i] (B4)."""
        if t_m[i] // INCARNATION_SPAN < self.vt[i] // INCARNATION_SPAN:
            self.old[i] = t_m[i]
        for k, x in enumerate(t_m):
            if x > self.vt[k] and x % INCARNATION_SPAN:
                self.vt[k] = x
        self.delivered += 1
        h = msg.header
        prefix = self.vt_format.size * (2 if olds else 1)
        return [FinalDeliver(h.origin, h.mno, self.delivered, len(msg.payload) - prefix,
                             self.instance)]

    def _rescan(self) -> list[Action]:
        out: list[Action] = []
        progress = True
        while progress and self.held:
            progress = False
            for entry in list(self.held):
                i, t_m, olds, msg = entry
                if self._stale(i, t_m[i]):
                    self.held.remove(entry)  # became a duplicate (or lost) meanwhile
                elif self._deliverable(i, t_m, olds):
                    self.held.remove(entry)
                    out += self._deliver(i, t_m, olds, msg)
                    progress = True
        return out
