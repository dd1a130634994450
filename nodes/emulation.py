"""What a real node measures of the emulation it runs on; analysis/fidelity.py judges it.

An emulated WAN is the one configured only while the machine keeps up: a saturated CPU delays
the shapers, the kernel and the nodes' own event loops, and the datagrams' one-way transit
grows past the configured delay (docs/architecture.md "Emulation fidelity"). Each node counts,
at a cost of a header peek per datagram it accepted (a malformed or refused one measures
nothing):

- `transit`: per sender, the one-way transit of that sender's own data datagrams (DATA, no
  flag: neither a retransmission nor a relay, sent by their origin, with a stamp): the
  receiver's clock at arrival minus the header's `ts` (the origin's clock when it stamped
  the message), in histogram bins (`bin_us`);
- `hold`: the sender's own stamp-to-transmit time of those datagrams (a flow-control backlog,
  a burst), so that analysis does not charge the network with what the protocol held back;
- `sent` per destination and `received` per sender: those datagrams handed to the network
  (after policing, before the link model) and those that arrived, for the loss not explained
  by the configured loss. A destination counts from the first datagram heard from it: what
  was sent before it was up (a late start on a loaded machine) is not the network's loss;
- `lag`: the event loop's lateness, a probe timer every LAG_PERIOD_S.

At stop the node writes it all as one `ev=emulation` line (a restarted node: one per
incarnation). The simulator never runs this: its network is the configured one by
construction.
"""

from __future__ import annotations

import struct
from typing import Any, Final

from nodes.wire import HEADER_SIZE, MAGIC, MsgType

# type (3), flags (5), sender (6), origin (12), ts (30) of the header (nodes/wire.py)
_PEEK: Final = struct.Struct("!2s1xBxBH4xH16xQ")
_DATA: Final = int(MsgType.DATA)
LAG_PERIOD_S: Final = 0.01


def bin_us(ns: int) -> int:
    """A duration's histogram bin, its lower bound in µs: 0.1 ms wide below 100 ms, 1 ms below
    1 s, 10 ms above; negative durations (clocks apart) mirror the positive bins."""
    if ns < 0:
        return -bin_us(-ns)
    us = ns // 1000
    if us < 100_000:
        return us - us % 100
    if us < 1_000_000:
        return us - us % 1000
    return us - us % 10_000


def _count(hist: dict[int, int], ns: int) -> None:
    b = bin_us(ns)
    hist[b] = hist.get(b, 0) + 1


class EmulationProbe:
    """One node's measurements of its emulated network (module docstring)."""

    def __init__(self) -> None:
        self.transit: dict[int, dict[int, int]] = {}
        self.received: dict[int, int] = {}
        self.sent: dict[int, int] = {}
        self.hold: dict[int, int] = {}
        self.lag: dict[int, int] = {}
        self.heard: set[int] = set()  # peers heard from: up, so `sent` to them counts

    def arrived(self, data: bytes, t: int) -> None:
        """A datagram that arrived at true time `t` (before decoding: a peek at its header)."""
        if len(data) < HEADER_SIZE:
            return
        magic, typ, flags, sender, origin, ts = _PEEK.unpack_from(data)
        if sender not in self.heard and magic == MAGIC:
            self.heard.add(sender)
        if typ != _DATA or flags or sender != origin or ts <= 0 or magic != MAGIC:
            return
        hist = self.transit.get(sender)
        if hist is None:
            hist = self.transit[sender] = {}
        _count(hist, t - ts)
        self.received[sender] = self.received.get(sender, 0) + 1

    @staticmethod
    def original(header: Any, me: int) -> bool:
        """Whether an outgoing message is one of this node's own stamped data datagrams."""
        return (header.type == _DATA and not header.flags and header.sender == me
                and header.origin == me and header.ts > 0)

    def held(self, ns: int) -> None:
        _count(self.hold, ns)

    def handed(self, dst: int) -> None:
        if dst in self.heard:
            self.sent[dst] = self.sent.get(dst, 0) + 1

    def late(self, ns: int) -> None:
        _count(self.lag, ns)

    def fields(self, names: dict[int, str], skew_ns: int) -> dict[str, Any]:
        """The `ev=emulation` line's fields, peers by name; `skew_ns`: this node's emulated
        clock minus its host clock (the `ts` it stamps is on its emulated clock)."""
        def hist(h: dict[int, int]) -> dict[str, int]:
            return {str(k): v for k, v in sorted(h.items())}

        return {"transit": {names.get(s, str(s)): hist(h) for s, h in self.transit.items()},
                "received": {names.get(s, str(s)): n for s, n in self.received.items()},
                "sent": {names.get(d, str(d)): n for d, n in self.sent.items()},
                "hold": hist(self.hold), "lag": hist(self.lag),
                "lag_period_ms": LAG_PERIOD_S * 1e3, "skew_ns": skew_ns}
