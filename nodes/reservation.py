"""Network reservations of one node: admission control, a token bucket per reservation, and
the counters `testbed:type=QoS` shows (docs/reservations.md).

The QoS protocols of paper 004 assume reserved bandwidth (§2.1): a process reserves
its rate, and a sender that exceeds it has no guarantee (§2.1). A layer asks with a `Reserve`
action (nodes/protocols/base.py); the node core hands it to `Reservations.reserve`, which
admits it when the sum of the node's reservations fits the host's capacity (the topology's
`qos.rate`), and answers through `Layer.on_reserve_result`.

Policing is *delay, then drop*, like the HTB class a reservation becomes on mininet and docker:
a datagram leaves when the reservation's token bucket has tokens for it; a sender above its
rate queues, and a datagram that would wait more than `MAX_HOLD_NS` is dropped (the HTB
class's leaf is a `bfifo` of the rate's worth of `MAX_HOLD_NS`, nodes/htb.py). Both outcomes
are counted (`delayed`, `dropped`). Rates count datagram bytes (the 44-byte header and the
payload), as the protocols compute them: the bucket charges `len(datagram)`, and the HTB
qdisc subtracts the `WIRE_OVERHEAD` bytes of Ethernet, IPv4 and UDP headers (`stab overhead
-42`). One multicast costs one datagram per destination (no IP multicast: 004 §2.1's
multicast reservation costs `(n-1)·NetRate`). The failure detector's heartbeats are not the
protocol's and are not charged in process.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

#: Ethernet (14) + IPv4 (20) + UDP (8) header bytes: what HTB sees beyond the datagram.
WIRE_OVERHEAD = 42
#: The default and smallest burst: one MTU-sized frame.
DEFAULT_BURST = 1514
#: The longest a reservation holds a datagram back before it drops instead: the queue of a
#: sender above its rate is this much of its rate (the HTB leaf's `bfifo` limit too).
MAX_HOLD_NS = 200_000_000
#: Capacity assumed when the topology gives the host no `qos.rate` (the shaping plan's
#: default root rate, testbed/shaping/plan.py DEFAULT_LINK_BPS).
DEFAULT_CAPACITY_BPS = 1_000_000_000
#: The key whose reservation carries the node's datagrams (the one the QoS protocols make).
CHARGED_KEY = "default"


class TokenBucket:
    """A token bucket as a shaper, in the virtual-scheduling form (GCRA, ITU-T I.371).

    `tat` is when the bucket would be full again; a datagram of `inc` ns worth of tokens may
    leave at `d` once the debt after it, `max(tat, d) + inc - d`, fits the burst `tau`.
    Departures are FIFO: each is at or after the previous one.
    """

    __slots__ = ("rate_bps", "burst_bytes", "tau", "tat", "last", "delayed", "dropped",
                 "bytes", "datagrams")

    def __init__(self, rate_bps: float, burst_bytes: int):
        self.rate_bps = rate_bps
        self.burst_bytes = burst_bytes
        self.tau = burst_bytes * 8e9 / rate_bps
        self.tat = 0.0
        self.last = 0  # departure of the latest datagram admitted
        self.delayed = 0
        self.dropped = 0
        self.bytes = 0
        self.datagrams = 0

    def set_rate(self, rate_bps: float, burst_bytes: int, now: int) -> None:
        """Renegotiate in place (as `tc class change` keeps the class's queue): datagrams
        already held keep their departure times, and the debt owed after the last of them
        is rescaled to the new rate."""
        base = float(max(now, self.last))
        debt = max(0.0, self.tat - base) * self.rate_bps / rate_bps
        self.rate_bps, self.burst_bytes = rate_bps, burst_bytes
        self.tau = burst_bytes * 8e9 / rate_bps
        self.tat = base + debt

    def depart(self, now: int, size: int) -> int | None:
        """When a datagram of `size` bytes handed over at `now` leaves, or None when
        it would wait longer than MAX_HOLD_NS and is dropped."""
        inc = size * 8e9 / self.rate_bps
        tat = self.tat if self.tat > now else float(now)
        dep = max(now, self.last, math.ceil(tat + inc - self.tau))  # FIFO: never overtakes
        if dep - now > MAX_HOLD_NS:
            self.dropped += 1
            return None
        if dep > now:
            self.delayed += 1
        self.tat = tat + inc
        self.last = dep
        self.bytes += size
        self.datagrams += 1
        return dep


@dataclass
class Reservation:
    key: str
    rate_bps: float
    burst_bytes: int
    granted_at: int  # true ns of the grant (or of the last renegotiation)
    bucket: TokenBucket
    changes: int = 0  # renegotiations granted after the first grant
    bytes_mark: int = 0  # bucket.bytes at granted_at: `used` counts from there


@dataclass
class Answer:
    """Admission control's answer to one `Reserve`."""

    key: str
    granted: bool
    rate_bps: float
    burst_bytes: int
    reason: str  # "" when granted


#: Realises a granted reservation on the host (an HTB class, nodes/htb.py): called with the
#: reservation and whether it is new; returns a one-line error, or None when it took effect.
Realiser = Callable[[Reservation, bool], "str | None"]


@dataclass
class Reservations:
    """One node's reservations by key; `capacity_bps` is the host's link capacity."""

    capacity_bps: float = DEFAULT_CAPACITY_BPS
    by_key: dict[str, Reservation] = field(default_factory=dict)
    refused: int = 0
    realiser: Realiser | None = None
    #: Police in process (local, sim). False when the host's HTB class does it (mininet,
    #: docker): policing twice would halve the rate's headroom.
    police: bool = True

    def reserved_bps(self) -> float:
        return sum(r.rate_bps for r in self.by_key.values())

    def reserve(self, key: str, rate_bps: float, burst_bytes: int, now: int) -> Answer:
        """Admit (or refuse) a reservation; the same key again is a renegotiation, and a
        refused renegotiation leaves the old reservation in force."""
        # Never below one MTU-sized frame, as an HTB class's burst (tc warns below it): a
        # smaller bucket would delay every full-size datagram even at the reserved rate.
        burst = max(burst_bytes, DEFAULT_BURST) if burst_bytes >= 0 else burst_bytes
        reason = ""
        if not isinstance(rate_bps, int | float) or not math.isfinite(rate_bps) or rate_bps <= 0:
            reason = f"rate {rate_bps!r} bit/s is not a positive number"
        elif burst < 0:
            reason = f"burst {burst_bytes} bytes is negative"
        else:
            others = sum(r.rate_bps for k, r in self.by_key.items() if k != key)
            if others + rate_bps > self.capacity_bps:
                reason = (f"{_bps(rate_bps)} does not fit: {_bps(others)} already reserved of "
                          f"the host's capacity {_bps(self.capacity_bps)} (qos.rate)")
        old = self.by_key.get(key)
        if not reason:
            res = old or Reservation(key, rate_bps, burst, now, TokenBucket(rate_bps, burst))
            previous = (res.rate_bps, res.burst_bytes)
            res.rate_bps, res.burst_bytes = rate_bps, burst
            error = self.realiser(res, old is None) if self.realiser is not None else None
            if error is not None:
                res.rate_bps, res.burst_bytes = previous
                reason = f"the host could not realise it: {error}"
            else:
                if old is not None:
                    res.bucket.set_rate(rate_bps, burst, now)
                    res.changes += 1
                res.granted_at, res.bytes_mark = now, res.bucket.bytes
                self.by_key[key] = res
        if reason:
            self.refused += 1
            return Answer(key, False, rate_bps, burst, reason)
        return Answer(key, True, rate_bps, burst, "")

    def charged(self) -> TokenBucket | None:
        """The bucket that polices the node's datagrams: the `default` reservation's, else
        the first one granted; None without a reservation or when the host polices."""
        if not self.police or not self.by_key:
            return None
        res = self.by_key.get(CHARGED_KEY) or next(iter(self.by_key.values()))
        return res.bucket

    def count(self, size: int) -> None:
        """A datagram the host's HTB class polices: only counted, for `Used`."""
        if self.by_key:
            res = self.by_key.get(CHARGED_KEY) or next(iter(self.by_key.values()))
            res.bucket.bytes += size
            res.bucket.datagrams += 1

    def used_bps(self, now: int) -> dict[str, float]:
        """The average wire rate (bit/s) each reservation carried since it was granted or last
        renegotiated."""
        return {k: (r.bucket.bytes - r.bytes_mark) * 8e9 / max(1, now - r.granted_at)
                for k, r in self.by_key.items()}


def _bps(v: float) -> str:
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if v >= scale:
            return f"{v / scale:g} {unit}"
    return f"{v:g} bit/s"
