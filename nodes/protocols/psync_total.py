"""`psync-total`: history-based total order built from Psync's causal order (lecture notes 002
"Total Ordering: History Based": "Total order is constructed from causal order", citing
Psync; 001 ch. 2: the symmetric family delivers "according to their partial order and concurrent
messages are totally ordered using some deterministic algorithm", with latency close to D + t).
*Reconstructed*: the notes give two lines; this is a wave algorithm (rules W0-W3 below).

- W0 U := the causally delivered (nodes/protocols/psync.py) but not yet totally delivered
  messages, NULLs included, with their causal edges (each message's deps);
- W1 a process that multicast nothing for `null_interval_ms` multicasts a NULL: it enters
  the context graph like any message, but is never delivered to the application;
- W2 the wave condition: U holds at least one message from every participant;
- W3 while W2 holds: the wave is the sources of U (its messages with no causal predecessor in
  U -- a predecessor in U is always a direct dependency in U, since U is closed under causal
  successors of its members); deliver its non-NULL messages by origin id, remove the wave
  from U.

Restarts (W3's "every process computes the same waves" holds by induction from the same
start): a restarted process joins each chain where reliable FIFO hands it its first message
(nodes/protocols/psync.py, C6), so its U starts mid-history and its waves differ from the
others' (405 pairs ordered differently in a five-region run). Without a state transfer it
cannot learn where the others' waves lie, so W4 (ours) a restarted process (incarnation > 0)
still multicasts, NULLs included (the others' W2 needs it), and computes its waves, but
totally delivers nothing: one `no_delivery` event says why. Its messages get new ids (C5) and
the others deliver them.

Every process computes the same waves: by induction the delivered sets are equal; a
participant's first undelivered message is then the same everywhere (causal delivery keeps
its chain in order, and W2 makes sure the process has it); whether it is a source depends only
on its context, fixed by its sender, and on the delivered set. Failure-free: a crashed
participant stops W2 for ever (membership is out of scope).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nodes.protocols.base import (
    Action,
    FinalDeliver,
    LayerBase,
    Log,
    SetTimer,
    ms,
    typed_params,
)
from nodes.protocols.psync import Id, Psync
from nodes.protocols.reliable import Below, ReliableParams
from nodes.wire import Message, MsgType

WIRE_ID = 12


@dataclass(frozen=True)
class PsyncTotalParams(ReliableParams):
    null_interval_ms: float = ms("silence after which a process multicasts a NULL (W1)", 100)


class PsyncTotal(LayerBase):
    """A layer over Psync's causal order (`causal`), which hands it every message as it
    enters the context graph (W0)."""

    def __init__(self, me: int, members: list[int], params: dict[str, Any],
                 scope: str = "rm"):
        self.members = sorted(members)
        self.causal = Psync(me, members, params, scope, "psync-total", WIRE_ID, self._causal)
        self.causal.log_context = True  # analysis/context.py judges the waves by it
        self.instance = self.causal.instance
        p = typed_params(PsyncTotalParams, params)
        self.null_ns = round(p.null_interval_ms * 1e6)
        self.null_key = f"pt:{scope}:null"
        self.last_multicast = 0
        # U: per origin, its undelivered messages in chain order (id, deps, is data, size).
        self.u: dict[int, list[tuple[Id, list[Id], bool, int]]] = {m: [] for m in self.members}
        self.in_u: set[Id] = set()
        self.nulls_sent = 0
        self.to_delivered = 0
        self.delivers = int(params.get("incarnation", 0)) == 0  # W4

    @property
    def rm(self) -> Below:
        """The reliable multicast at the bottom of the stack (the Transport MBean's
        retransmissions, the edge gate's windows)."""
        return self.causal.rm

    def start(self, now: int) -> list[Action]:
        self.last_multicast = now
        out = self.causal.start(now) + [SetTimer(self.null_key, self.null_ns)]
        if not self.delivers:
            out.append(Log("no_delivery", {"reason": "restarted: joined the chains mid-wave "
                                                     "and cannot learn the others' waves"}))
        return out

    def broadcast(self, payload: bytes, now: int) -> list[Action]:
        self.last_multicast = now
        return self.causal.broadcast(payload, now)

    def on_message(self, src: int, msg: Message, now: int) -> list[Action]:
        return self.causal.on_message(src, msg, now)

    def on_suspect(self, member: int, suspected: bool, now: int) -> list[Action]:
        return self.causal.on_suspect(member, suspected, now)

    def retag(self, proto: int) -> bool:
        return self.causal.retag(proto)

    def on_timer(self, key: str, now: int) -> list[Action]:
        if key != self.null_key:
            return self.causal.on_timer(key, now)
        out: list[Action] = []
        idle = now - self.last_multicast
        if idle >= self.null_ns:  # W1
            self.last_multicast = now
            self.nulls_sent += 1
            out += self.causal.multicast_null(now)
            idle = 0
        return out + [SetTimer(self.null_key, self.null_ns - idle)]

    def _causal(self, mid: Id, deps: list[Id], mtype: int, size: int, now: int
                ) -> list[Action]:
        """W0: a causal delivery enters U; then W2-W3."""
        self.u[mid[0]].append((mid, deps, mtype == MsgType.DATA, size))
        self.in_u.add(mid)
        return self._waves()

    def _waves(self) -> list[Action]:
        out: list[Action] = []
        while all(self.u.values()):  # W2
            wave = []
            for origin in self.members:  # W3: only a chain's first message can be a source
                mid, deps, data, size = self.u[origin][0]
                prev = (mid[0], mid[1] - 1)
                if prev not in self.in_u and not any(d in self.in_u for d in deps):
                    wave.append((origin, mid, data, size))
            for origin, mid, data, size in wave:  # by origin id
                self.u[origin].pop(0)
                self.in_u.discard(mid)
                if data and self.delivers:
                    self.to_delivered += 1
                    out.append(FinalDeliver(mid[0], mid[1], self.to_delivered, size,
                                            self.instance))
        return out
