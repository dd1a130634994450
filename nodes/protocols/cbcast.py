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
  for it only through a dependant;
- B5 (ours) a restarted receiver joins each sender's stream at the first message reliable
  FIFO hands it (which joins from the present too): VT_j[i] := t_m[i] - 1 then, logged as
  `stream_join` naming that message (from it on, the receiver owes every message of i).
  A dependency on a sender it has not heard from since its restart holds until it does.
"""

from __future__ import annotations

import struct
from typing import Any

from nodes.protocols.base import JOIN_EVENT, Action, FinalDeliver, Log, Received
from nodes.protocols.reliable import Below, OnReliable
from nodes.protocols.sequencer import INCARNATION_SPAN
from nodes.wire import Header, Message, MsgType

WIRE_ID = 7


class Cbcast(OnReliable):
    def __init__(self, me: int, members: list[int], params: dict[str, Any],
                 scope: str = "rm"):
        self.me = me
        self.instance = "" if scope == "rm" else f"cbcast#{scope}"  # written as `proto`
        self.members = sorted(members)
        self.index = {m: k for k, m in enumerate(self.members)}
        self.vt_format = struct.Struct(f"!{len(self.members)}I")
        self.rm = Below(me, members, params, WIRE_ID, self._r_deliver, scope)
        self.vt = [0] * len(self.members)  # VT_j
        incarnation = int(params.get("incarnation", 0))
        self.vt[self.index[me]] = incarnation * INCARNATION_SPAN  # B4: mnos continue
        self.old: dict[int, int] = {}  # B4: OLD_j, i's previous incarnation's count
        # B5: the senders whose stream a restarted receiver has joined (all, otherwise).
        self.joined = set(range(len(self.members))) if incarnation == 0 else {self.index[me]}
        self.held: list[tuple[int, list[int], Message]] = []  # (origin, t_m, message)
        self.delivered = 0  # local delivery count: the `seq` of each fnl
        self.max_held = 0

    # -- Layer interface ----------------------------------------------------------------------
    def broadcast(self, payload: bytes, now: int) -> list[Action]:
        """B1."""
        i = self.index[self.me]
        self.vt[i] += 1
        mno = self.vt[i]
        header = Header(MsgType.DATA, origin=self.me, mno=mno, ts=now)
        out: list[Action] = [Log("send", {"mno": mno, "size": len(payload)})]
        sent = self.rm.multicast(header, self.vt_format.pack(*self.vt) + payload, now)
        self.delivered += 1
        out.append(FinalDeliver(self.me, mno, self.delivered, len(payload), self.instance))
        # The own R-delivery is skipped in _r_deliver (it is delivered above, at once).
        return out + sent

    # -- the algorithm ------------------------------------------------------------------------
    def _r_deliver(self, src: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        if h.type != MsgType.DATA or h.origin == self.me:
            return []
        return self._receive(msg)

    def _receive(self, msg: Message) -> list[Action]:
        """B2: discard a duplicate, deliver what the conditions allow, hold the rest."""
        h = msg.header
        size = self.vt_format.size
        if len(msg.payload) < size or h.origin not in self.index:
            return []
        t_m = list(self.vt_format.unpack_from(msg.payload))
        i = self.index[h.origin]
        moved = False
        # B5 starts i's stream here: logged, the checks hold this process to every message
        # of i from this one on (analysis/joins.py).
        joins: list[Action] = ([] if i in self.joined else
                               [Log(JOIN_EVENT, {"origin": h.origin, "mno": t_m[i]})])
        if i not in self.joined:  # B5
            self.joined.add(i)
            moved = t_m[i] - 1 > self.vt[i]
            self.vt[i] = max(self.vt[i], t_m[i] - 1)
        elif t_m[i] // INCARNATION_SPAN > self.vt[i] // INCARNATION_SPAN:  # B4
            self.old[i] = self.vt[i]
            self.vt[i] = t_m[i] // INCARNATION_SPAN * INCARNATION_SPAN
            moved = True
        if self._stale(i, t_m[i]):
            return joins + self._rescan() if moved else joins
        out: list[Action] = [*joins,
                             Received(h.origin, h.mno, len(msg.payload) - size, self.instance)]
        if not self._deliverable(i, t_m):
            self.held.append((i, t_m, msg))
            self.max_held = max(self.max_held, len(self.held))
            out.append(Log("hold", {"origin": h.origin, "mno": h.mno, "held": len(self.held)}))
            return out + self._rescan() if moved else out
        out += self._deliver(i, t_m, msg)
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

    def _deliverable(self, i: int, t_m: list[int]) -> bool:
        """B2's conditions (1) and (2), B4's old stream included."""
        if self._count(i, t_m[i]) != t_m[i] - 1:
            return False
        for k, x in enumerate(t_m):
            if k != i:
                count = self._count(k, x)
                if count is not None and count < x:
                    return False
        return True

    def _deliver(self, i: int, t_m: list[int], msg: Message) -> list[Action]:
        """B3; a late old-range message advances OLD_j[i] (B4)."""
        if t_m[i] // INCARNATION_SPAN < self.vt[i] // INCARNATION_SPAN:
            self.old[i] = t_m[i]
        for k, x in enumerate(t_m):
            if x > self.vt[k]:
                self.vt[k] = x
        self.delivered += 1
        h = msg.header
        return [FinalDeliver(h.origin, h.mno, self.delivered,
                             len(msg.payload) - self.vt_format.size, self.instance)]

    def _rescan(self) -> list[Action]:
        out: list[Action] = []
        progress = True
        while progress and self.held:
            progress = False
            for entry in list(self.held):
                i, t_m, msg = entry
                if self._stale(i, t_m[i]):
                    self.held.remove(entry)  # became a duplicate (or lost) meanwhile
                elif self._deliverable(i, t_m):
                    self.held.remove(entry)
                    out += self._deliver(i, t_m, msg)
                    progress = True
        return out
