"""`psync`: causal order by a context graph (lecture notes 002, "Psync"; Peterson, Buchholz
and Schlichting, *Preserving and using context information in IPC*, TOCS 7, 1989), over
reliable FIFO multicast (the NACK layer, the recovery of "Psync: Observations").

Message ids are <sender, n>. The context graph G holds the delivered messages,
with an edge from each message to those sent in its context; `leaves(G)` are the messages no
delivered message depends on yet. The rules, numbered here:
- C1 multicast m: deps := leaves(G); attach deps; add m to G (an edge from every
  leaf to m, so m is now the only leaf of that context); deliver m to self;
- C2 receive m: once every id in deps is in G, add m to G and deliver it; until
  then hold it, and retry the held messages whenever a message enters G.

G is kept compact (C4, answering "Causal ordering: Issues": "When can a message be purged
from context graph?"): delivery is causal, so what G holds of each sender's chain is a prefix, and G
is one number per sender plus the current leaves; nothing else needs keeping. Recovery of a lost
dependency (C3) is the reliable layer's. The trade-off against CBCAST (002 "CBCAST
Observations"): a deps list costs 2 + 6k bytes for k leaves (k is at most n and usually smaller:
concurrent messages only) against CBCAST's fixed 4n.

Restarts (C2 reads "every id in deps is in G" off one prefix number per sender, which
assumes a sender's numbers never go back; integrity): numbered from 1 again, a restarted
process's new messages would be taken for ones already in G and dropped (their mids collide
with the old incarnation's), and a restarted receiver, whose G is empty, would hold every
message for ever behind the history it lost. So a chain counts in its sender's incarnation
range, `incarnation * INCARNATION_SPAN` + n (the sequencer's convention), and
- C5 (ours) a message whose number lies in a newer incarnation range than G's prefix for its
  sender starts that sender's new chain: the prefix := the range's base (reliable FIFO hands
  the new incarnation's messages up from its first, and the old incarnation's tail that
  reaches it later, over a slower path, in order after them). The old chain's prefix is kept,
  one incarnation back: a late old-range message enters G once it is next in that chain and
  its deps are in G, like any other; a dependency on the old chain is in G once it entered
  (causal order), one in a range older still, or of a chain this receiver never counted, is
  lost with it and counts as in G. An old tail lost for good holds only its own dependants,
  as a crashed sender's lost message does (002 "Causal ordering: Issues"; no liveness is
  claimed under a crash): the new chain waits for it only through a dependant;
- C6 (ours) a restarted receiver's G holds its own old chain (the prefix starts at its base)
  and joins each sender's chain at the first message reliable FIFO hands it (prefix := n - 1).
  A dependency on a sender it has not heard from since its restart holds until it does.

Wire: the payload starts with the deps list, a u16 count then (origin u16, n u32) per entry;
each held message is logged as `hold`; under `psync-total` each multicast's deps too, as a
`context` event (`deps`, `null` for a NULL). `psync-total` (nodes/protocols/psync_total.py)
builds a total order on this causal one.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from nodes.protocols.base import (
    Action,
    FinalDeliver,
    Log,
    Received,
)
from nodes.protocols.reliable import Below, OnReliable
from nodes.protocols.sequencer import INCARNATION_SPAN
from nodes.wire import Header, Message, MsgType

WIRE_ID = 11
COUNT = struct.Struct("!H")
ENTRY = struct.Struct("!HI")

Id = tuple[int, int]  # (sender, n)


def pack_deps(deps: list[Id]) -> bytes:
    return COUNT.pack(len(deps)) + b"".join(ENTRY.pack(o, n) for o, n in deps)


def unpack_deps(payload: bytes) -> tuple[list[Id], int] | None:
    """The deps list and where the application payload starts; None if malformed."""
    if len(payload) < COUNT.size:
        return None
    (k,) = COUNT.unpack_from(payload)
    end = COUNT.size + k * ENTRY.size
    if len(payload) < end:
        return None
    return [ENTRY.unpack_from(payload, COUNT.size + j * ENTRY.size) for j in range(k)], end


# A layer over Psync's causal order (psync-total): each message as it enters the context
# graph, NULLs included -- (id, deps, message type, payload size, now) -> its actions.
CausalUp = Callable[[Id, list[Id], int, int, int], list[Action]]


class Psync(OnReliable):
    def __init__(self, me: int, members: list[int], params: dict[str, Any],
                 scope: str = "rm", name: str = "psync", wire_id: int = WIRE_ID,
                 up: CausalUp | None = None):
        """`name` and `wire_id` are those of the protocol the stack is (`psync`, or the
        layer above: `psync-total`), `up` that layer's handler of causal deliveries (None:
        psync delivers them itself)."""
        self.me = me
        self.members = sorted(members)
        self.rm = Below(me, members, params, wire_id, self._r_deliver, scope)
        self.up = up
        self.instance = "" if scope == "rm" else f"{name}#{scope}"
        self.in_g = dict.fromkeys(self.members, 0)  # G: the prefix of each sender's chain
        self.old_g: dict[int, int] = {}  # C5: the prefix of a sender's previous chain
        self.leaves: set[Id] = set()
        self.held: list[tuple[Id, list[Id], Message, int]] = []  # H: (id, deps, msg, offset)
        incarnation = int(params.get("incarnation", 0))
        self.next_n = incarnation * INCARNATION_SPAN  # our own chain (C5)
        self.in_g[me] = self.next_n  # C6: our old chain counts as in G
        # C6: the senders whose chain a restarted receiver has joined (all, otherwise).
        self.joined = set(self.members) if incarnation == 0 else {me}
        self.delivered = 0  # local delivery count: the `seq` of each fnl
        self.max_held = 0
        self.dep_bytes = 0  # deps-list bytes sent (the overhead against CBCAST's 4n)
        # Each multicast's deps logged as a `context` event (psync-total: its waves must
        # respect the context graph, which its deliveries alone do not show).
        self.log_context = False

    # -- Layer interface ----------------------------------------------------------------------
    def broadcast(self, payload: bytes, now: int) -> list[Action]:
        out: list[Action] = [Log("send", {"mno": self.next_n + 1, "size": len(payload)})]
        return out + self._multicast(MsgType.DATA, payload, now)

    def multicast_null(self, now: int) -> list[Action]:
        """Multicast a NULL: it enters the context graph like any message but is never
        delivered (psync-total's W1)."""
        return self._multicast(MsgType.DUMMY, b"", now)

    # -- the algorithm ------------------------------------------------------------------------
    def _multicast(self, mtype: MsgType, payload: bytes, now: int) -> list[Action]:
        """C1."""
        self.next_n += 1
        mid = (self.me, self.next_n)
        deps = sorted(self.leaves)
        prefix = pack_deps(deps)
        self.dep_bytes += len(prefix)
        header = Header(mtype, origin=self.me, mno=self.next_n, ts=now)
        out = self.rm.multicast(header, prefix + payload, now)
        if self.log_context:
            out.append(Log("context", {"mno": self.next_n, "deps": deps,
                                       "null": mtype != MsgType.DATA}))
        return out + self._enter(mid, deps, mtype, len(payload), now)

    def _r_deliver(self, src: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        if h.origin == self.me or h.type not in (MsgType.DATA, MsgType.DUMMY):
            return []
        return self._receive(msg, now)

    def _receive(self, msg: Message, now: int) -> list[Action]:
        """C2."""
        h = msg.header
        parsed = unpack_deps(msg.payload)
        if parsed is None or h.origin not in self.in_g:
            return []
        deps, offset = parsed
        mid = (h.origin, h.mno)
        moved = False
        if h.origin not in self.joined:  # C6
            self.joined.add(h.origin)
            moved = h.mno - 1 > self.in_g[h.origin]
            self.in_g[h.origin] = max(self.in_g[h.origin], h.mno - 1)
        elif h.mno // INCARNATION_SPAN > self.in_g[h.origin] // INCARNATION_SPAN:  # C5
            self.old_g[h.origin] = self.in_g[h.origin]
            self.in_g[h.origin] = h.mno // INCARNATION_SPAN * INCARNATION_SPAN
            moved = True
        if self._has(mid):
            return self._retry(now) if moved else []
        out: list[Action] = []
        if h.type == MsgType.DATA:
            out.append(Received(h.origin, h.mno, len(msg.payload) - offset, self.instance))
        if not self._ready(mid, deps):
            self.held.append((mid, deps, msg, offset))
            self.max_held = max(self.max_held, len(self.held))
            out.append(Log("hold", {"origin": h.origin, "mno": h.mno, "held": len(self.held)}))
            return out + self._retry(now) if moved else out
        out += self._enter(mid, deps, h.type, len(msg.payload) - offset, now)
        return out + self._retry(now)

    def _prefix(self, sender: int, n: int) -> int | None:
        """The prefix of sender's chain n belongs to: G's, the old chain's for n in the
        previous range (C5), None for a range older still or one never counted (lost)."""
        prefix = self.in_g.get(sender, 0)
        if n // INCARNATION_SPAN >= prefix // INCARNATION_SPAN:
            return prefix
        old = self.old_g.get(sender)
        if old is not None and n // INCARNATION_SPAN == old // INCARNATION_SPAN:
            return old
        return None

    def _has(self, mid: Id) -> bool:
        prefix = self._prefix(*mid)
        return prefix is None or mid[1] <= prefix

    def _ready(self, mid: Id, deps: list[Id]) -> bool:
        """Every id in deps is in G (and, implied by the sender's chain, its own previous
        message)."""
        if self._prefix(*mid) != mid[1] - 1:
            return False
        return all(self._has(d) for d in deps)

    def _enter(self, mid: Id, deps: list[Id], mtype: int, size: int, now: int
               ) -> list[Action]:
        """Add m to G: it depends on deps, so they are no longer leaves; m is one."""
        if mid[1] // INCARNATION_SPAN < self.in_g[mid[0]] // INCARNATION_SPAN:
            self.old_g[mid[0]] = mid[1]  # C5: the old chain goes on
        else:
            self.in_g[mid[0]] = mid[1]
        self.leaves.difference_update(deps)
        self.leaves.discard((mid[0], mid[1] - 1))
        self.leaves.add(mid)
        return self._causal(mid, deps, mtype, size, now)

    def _causal(self, mid: Id, deps: list[Id], mtype: int, size: int, now: int
                ) -> list[Action]:
        """m is causally delivered: psync delivers it (the layer above, if any, orders it
        first)."""
        if self.up is not None:
            return self.up(mid, deps, mtype, size, now)
        if mtype != MsgType.DATA:
            return []
        self.delivered += 1
        return [FinalDeliver(mid[0], mid[1], self.delivered, size, self.instance)]

    def _retry(self, now: int) -> list[Action]:
        out: list[Action] = []
        progress = True
        while progress and self.held:
            progress = False
            for entry in list(self.held):
                mid, deps, msg, offset = entry
                if self._has(mid):
                    self.held.remove(entry)
                elif self._ready(mid, deps):
                    self.held.remove(entry)
                    out += self._enter(mid, deps, msg.header.type, len(msg.payload) - offset,
                                       now)
                    progress = True
        return out
