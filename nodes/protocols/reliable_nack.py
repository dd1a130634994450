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

from nodes.protocols.base import Action, FinalDeliver, LayerBase, Log, RDeliver
from nodes.protocols.reliable import ReliableMulticast, reliable_kwargs
from nodes.protocols.sequencer import INCARNATION_SPAN
from nodes.wire import Header, Message, MsgType, Proto


class ReliableNack(LayerBase):
    proto = Proto.RELIABLE

    def __init__(self, me: int, members: list[int], params: dict[str, Any]):
        self.me = me
        self.rm = ReliableMulticast(me, members, proto=self.proto, **reliable_kwargs(params))
        # A restarted process numbers in a fresh range so mids stay unique (as sequencer.py).
        self.mno = int(params.get("incarnation", 0)) * INCARNATION_SPAN
        self.delivered = 0  # local delivery count: the `seq` of each fnl

    def start(self, now: int) -> list[Action]:
        return self.rm.start(now)

    def broadcast(self, payload: bytes, now: int) -> list[Action]:
        self.mno += 1
        header = Header(MsgType.DATA, origin=self.me, mno=self.mno, ts=now)
        out: list[Action] = [Log("send", {"mno": self.mno, "size": len(payload)})]
        return out + self._up(self.rm.multicast(header, payload, now))

    def on_message(self, src: int, msg: Message, now: int) -> list[Action]:
        return self._up(self.rm.on_message(src, msg, now))

    def on_timer(self, key: str, now: int) -> list[Action]:
        return self._up(self.rm.on_timer(key, now))

    def on_suspect(self, member: int, suspected: bool, now: int) -> list[Action]:
        return self._up(self.rm.on_suspect(member, suspected, now))

    def _up(self, actions: list[Action]) -> list[Action]:
        out: list[Action] = []
        for a in actions:
            if type(a) is RDeliver:
                h = a.msg.header
                if h.type == MsgType.DATA:
                    self.delivered += 1
                    out.append(FinalDeliver(h.origin, h.mno, self.delivered, len(a.msg.payload)))
            else:
                out.append(a)
        return out
