"""`reliable-nack`: reliable FIFO multicast with negative acknowledgements as a protocol of its
own (lecture notes 002, "Reliable FIFO: Negative Acknowledgement"; the layer is
`nodes/protocols/reliable.py`, which the sequencer family sits on).

Each broadcast is R-multicast as a DATA message; every R-delivery (own messages at once, as
the notes' sender delivers to itself) is the protocol's delivery, logged as `fnl` with `seq` the
local delivery count. It promises FIFO order, agreement, integrity and validity among correct
processes -- not total or causal order (002, "Messages may not be received in causal order,
even if ... FIFO").
"""

from __future__ import annotations

from typing import Any

from nodes.protocols.base import Action, FinalDeliver, Log
from nodes.protocols.reliable import Below, OnReliable
from nodes.protocols.sequencer import INCARNATION_SPAN
from nodes.wire import Header, Message, MsgType, Proto


class ReliableNack(OnReliable):
    proto = Proto.RELIABLE

    def __init__(self, me: int, members: list[int], params: dict[str, Any]):
        self.me = me
        self.rm = Below(me, members, params, self.proto, self._r_deliver)
        # A restarted process numbers in a fresh range so mids stay unique (as sequencer.py).
        self.mno = int(params.get("incarnation", 0)) * INCARNATION_SPAN
        self.delivered = 0  # local delivery count: the `seq` of each fnl

    def broadcast(self, payload: bytes, now: int) -> list[Action]:
        self.mno += 1
        header = Header(MsgType.DATA, origin=self.me, mno=self.mno, ts=now)
        out: list[Action] = [Log("send", {"mno": self.mno, "size": len(payload)})]
        return out + self.rm.multicast(header, payload, now)

    def _r_deliver(self, src: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        if h.type != MsgType.DATA:
            return []
        self.delivered += 1
        return [FinalDeliver(h.origin, h.mno, self.delivered, len(msg.payload))]
