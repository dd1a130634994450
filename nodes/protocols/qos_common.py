"""Shared pieces of the QoS-preserving total orders of paper 004 (Bar-Joseph, Anker, Keidar,
Lynch): the common epoch, integer tick arithmetic, durations given as numbers or with units,
the unreliable per-pair FIFO channel they sit on, and the rate-message flags.

Decisions (docs/qos.md "Model"):
- **Common epoch E** (004 §2.2; one common epoch is our choice): one local-clock value
  shared by all nodes, the run's configured start plus `epoch_ms`, read by each node on its own
  clock. Node i reaches it at true time `E - offset_i`, within Γ/2 of E: exactly §2.2's model.
- **Ticks** are `E + (K * 10**9) // r` ns, computed with integers so every node agrees.
- **Channel**: the QoS layers sit directly on an unreliable per-pair FIFO channel (002 "FIFO
  Ordering: Implementation"; 004 §2.1 footnote 1): each datagram carries the sender's
  datagram number `rseq`, a receiver drops any `rseq` it has passed. Never the NACK layer:
  a retransmission arrives later than Δ and breaks every bound.
"""

from __future__ import annotations

import re
from typing import Any

from nodes.protocols.base import Log
from nodes.wire import Header

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000

# Header `flags` bits of the QoS protocols (protocol-specific; the generic bits 1 and 2 are
# RETRANSMIT and RELAYED in nodes/wire.py). A rate message is a DUMMY carrying one of them,
# the rate in `hint` (004 Fig. 4 "init-rate" and "new-rate" messages).
FLAG_RATE_INIT = 0x10
FLAG_RATE_NEW = 0x20

_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(ns|us|ms|s)?\s*$")
_UNIT_NS = {"ns": 1, "us": 1_000, "ms": NS_PER_MS, "s": NS_PER_S, None: NS_PER_MS}


def duration_ns(value: Any) -> int:
    """A QoS duration parameter in ns: a number of milliseconds (`50`) or a text with a unit
    (`50ms`, `0.5s`, `200us`). ValueError for anything else."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        return round(float(value) * NS_PER_MS)
    m = _DURATION.match(str(value))
    if m is None:
        raise ValueError(f"not a duration: {value!r} (a number of ms, or e.g. '50ms')")
    return round(float(m.group(1)) * _UNIT_NS[m.group(2)])


def epoch_ns(params: dict[str, Any]) -> int:
    """E: the run's configured start (`start_at_ns`, added by the node core) plus `epoch_ms`,
    on the local clock."""
    return int(params.get("start_at_ns", 0)) + duration_ns(params.get("epoch_ms", 100))


def tick_ns(base: int, k: int, rate: int) -> int:
    """The k-th point of the grid of `rate` per second starting at `base` (exact)."""
    return base + (k * NS_PER_S) // rate


_REQUIRED = object()


def own_value(value: Any, params: dict[str, Any], me: int, default: Any = _REQUIRED) -> Any:
    """A per-host parameter: one value for every host, or a mapping host name -> value (the
    node core gives the member names as `member_names`). A host the mapping leaves out gets
    `default`; without one it is a ValueError."""
    if not isinstance(value, dict):
        return value
    names = params.get("member_names") or {}
    name = names.get(me, names.get(str(me)))
    if name not in value:
        if default is not _REQUIRED:
            return default
        raise ValueError(f"no value for host {name!r} in {value!r}")
    return value[name]


class FifoChannel:
    """The unreliable per-pair FIFO channel under a QoS layer (002 A0.1/A0.2,
    "FIFO Ordering: Implementation").

    A restarted sender numbers its datagrams from 1 again under a higher incarnation (header
    `aux`, 004 §6 joins): its first datagram of the new incarnation resets V[sender];
    datagrams of an older incarnation are dropped."""

    def __init__(self, me: int, members: list[int]):
        self.next_rseq = 1  # C_i
        self.seen = {m: 0 for m in members if m != me}  # V[j]
        self.incarnation = {m: 0 for m in members if m != me}
        self.late = 0

    def stamp(self) -> int:
        """The rseq of the next datagram this process sends."""
        r = self.next_rseq
        self.next_rseq += 1
        return r

    def accept(self, sender: int, rseq: int, incarnation: int = 0) -> bool:
        """A0.2: deliver iff rseq > V[sender]; else it is late or a duplicate."""
        known = self.incarnation.get(sender)
        if known is None or incarnation < known:
            self.late += 1
            return False
        if incarnation > known:
            self.incarnation[sender], self.seen[sender] = incarnation, 0
        if rseq <= self.seen[sender]:
            self.late += 1
            return False
        self.seen[sender] = rseq
        return True


def wire_rate_bps(n: int, msgs_per_s: float, wire_bytes: int) -> float:
    """Egress bits/s of a multicast at `msgs_per_s` without IP multicast: n-1 unicasts of
    `wire_bytes` each (004 §3 reservations)."""
    return float((n - 1) * msgs_per_s * wire_bytes * 8)


def netrecv(h: Header, kind: str) -> Log:
    """`netrecv`: a datagram accepted from `h.sender` (analysis pairs it with the sender's
    `net` by rseq, and by incarnation `inc` once the sender restarted, for the empirical Δ)."""
    fields: dict[str, Any] = {"member": h.sender, "rseq": h.rseq, "kind": kind}
    if h.aux:
        fields["inc"] = h.aux
    return Log("netrecv", fields)
