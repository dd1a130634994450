"""`fifo`: FIFO multicast without reliability, late messages dropped (lecture notes 002,
"FIFO Ordering: Implementation").

The rules, with the project's 1-based numbers (002 starts C_i at 0 and V at -1):
- A0.1 send m: attach <i, C_i> (header `rseq`), C_i += 1;
- A0.2 receive m = <i, c>: if V[i] < c, deliver m and V[i] := c; else discard it.

Nothing is retransmitted ("FIFO Ordering: Observation": "no reliability"), so a lost datagram
is a gap for good and a reordered one arrives late and is dropped: the baseline that shows what loss
does to every check. It claims FIFO order and integrity only. Each discard is logged as `late`.

Restarts (integrity; A0.2's V[i] assumes C_i never goes back): C_i starts at
`incarnation * INCARNATION_SPAN` (the sequencer's convention), a counter that continues above
anything the earlier incarnation sent; numbered from 1 again, a restarted process's new
messages would be dropped as `late` by receivers whose V[i] holds the old count, and their
mids would collide with the old ones. A restarted receiver starts with V = 0 and takes each
sender from its next message.
"""

from __future__ import annotations

from typing import Any

from nodes.protocols.base import Action, FinalDeliver, LayerBase, Log, Send
from nodes.protocols.sequencer import INCARNATION_SPAN
from nodes.wire import Header, Message, MsgType

WIRE_ID = 6


class Fifo(LayerBase):
    def __init__(self, me: int, members: list[int], params: dict[str, Any]):
        self.me = me
        # C_i: continues across restarts (module docstring, "Restarts").
        self.next_c = int(params.get("incarnation", 0)) * INCARNATION_SPAN + 1
        self.seen = {m: 0 for m in members if m != me}  # V[i]
        self.delivered = 0  # local delivery count: the `seq` of each fnl
        self.late = 0

    def start(self, now: int) -> list[Action]:
        return []

    def broadcast(self, payload: bytes, now: int) -> list[Action]:
        c = self.next_c
        self.next_c += 1
        msg = Message(Header(MsgType.DATA, WIRE_ID, sender=self.me, rseq=c, origin=self.me,
                             mno=c, ts=now), payload)
        self.delivered += 1
        return [Log("send", {"mno": c, "size": len(payload)}), Send(None, msg),
                FinalDeliver(self.me, c, self.delivered, len(payload))]

    def on_message(self, src: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        if h.type != MsgType.DATA or h.sender not in self.seen:
            return []
        if h.rseq <= self.seen[h.sender]:  # A0.2: V[i] >= c, late or duplicate
            self.late += 1
            return [Log("late", {"origin": h.origin, "mno": h.mno})]
        self.seen[h.sender] = h.rseq
        self.delivered += 1
        return [FinalDeliver(h.origin, h.mno, self.delivered, len(msg.payload))]

    def on_timer(self, key: str, now: int) -> list[Action]:
        return []
