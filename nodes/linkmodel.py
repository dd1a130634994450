"""Per-destination path model with netem semantics, drawn from a seeded RNG.

Used by the `inprocess` shaping applier (the local backend's transport), by the simulator and
by the userspace shaper's daemon (testbed/shaping/userspace_daemon.py), so all three realise a
path's delay, jitter, loss, duplication, corruption, reordering, queue limit and rates the same
way (docs/link-model.md). The order of the steps is netem's (`netem_enqueue` in
net/sched/sch_netem.c): duplicate, loss, corrupt, queue limit, then the delay line.

- Correlations are netem's `get_crandom`: each draw is `(1 - rho) * fresh + rho * previous`.
- Gilbert-Elliott loss (`gemodel p r h k`): the state moves first (good->bad with p, bad->good
  with r), and the datagram is lost with 1-k in the good state, 1-h in the bad one, both
  judged on the state it arrived in (netem's `loss_gilb_ell`).
- A corrupted datagram has one bit flipped after its UDP checksum was computed, so the
  receiver's kernel discards it: here it is counted (`corrupted`) and not delivered.
- A duplicate is a second copy that goes through the model again, without duplication
  (netem re-enqueues it at the root); its delay is left in `dup_ns` by `transit`.
- Reordering (`reorder P gap G`): after G-1 delayed datagrams, the next is sent at once with
  probability P, overtaking those in the delay line.
- FIFO (`reorder: false`, the per-pair FIFO network of 004 §2.1): arrive = max(send + delay, last
  arrival on this path), so jitter never lets a datagram overtake an earlier one. netem
  itself behaves so once a `rate` is set (`netem_enqueue` schedules after the last queued
  packet), which is the FIFO plan of testbed/shaping/netem.py.
- `rate` is netem's: serialisation in the delay line after the last queued datagram;
  `bandwidth_bps` is the HTB class in front of the wire (serialisation before the delay).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from statistics import NormalDist

from nodes.config import PathConfig
from nodes.wire import mypyc_attr

_NORMAL = NormalDist()
_EPS = 1e-12


@mypyc_attr(allow_interpreted_subclasses=True)  # tests subclass it
class LinkModel:
    def __init__(self, path: PathConfig, rng: random.Random):
        self.rng = rng
        self.lost = self.corrupted = self.duplicated = self.reordered = self.overflow = 0
        # The userspace shaper flips the bit for real: it wants corrupted datagrams delayed
        # like the others, marked by `was_corrupted`, instead of dropped here.
        self.deliver_corrupted = False
        self.was_corrupted = False
        self.path = path

    @property
    def path(self) -> PathConfig:
        return self._path

    @path.setter
    def path(self, path: PathConfig) -> None:
        self._path = path
        self._free_at = 0  # bandwidth: when the emulated link finishes the previous datagram
        self._last_arrive = 0  # FIFO and rate: the latest release time handed out
        self._in_flight: list[int] = []  # release times, kept only when a limit is set
        self._last: dict[str, float] = {}  # correlated draws: the previous value per stream
        self._bad = False  # Gilbert-Elliott state
        self._counter = 0  # reorder: delayed datagrams since the last one sent at once
        self.dup_ns: int | None = None
        # The netem model beyond delay/jitter/loss/bandwidth is off: transit() keeps its short
        # path, whose draws are exactly those of the model before it grew (same seeds, same
        # logs).
        self.simple = not (path.jitter_corr or path.fifo or path.loss_corr or path.gemodel
                           or path.duplicate or path.corrupt or path.reorder or path.limit
                           or path.rate_bps
                           or path.distribution in ("pareto", "paretonormal", "exponential"))
        # The common case -- no loss, no bandwidth limit, normal jitter -- as (delay, jitter,
        # rng.gauss), for the simulator's inlined copy of transit(); None otherwise.
        self.plain: tuple[int, int, Callable[[float, float], float]] | None = (
            (path.delay_ns, path.jitter_ns, self.rng.gauss)
            if self.simple and not path.loss and not path.bandwidth_bps
            and (path.distribution != "uniform" or not path.jitter_ns) else None)

    def transit(self, now_ns: int, size: int) -> int | None:
        """Delay in ns for a datagram sent now, or None when it is lost. When the model
        duplicated it, `dup_ns` holds the copy's delay (else None)."""
        if self.simple:
            return self._simple(now_ns, size)
        self.dup_ns = None
        p = self._path
        copies = 1
        if p.duplicate and self._draw("dup", p.duplicate_corr) < p.duplicate:
            copies = 2
        if self._lose():
            copies -= 1
        if copies == 0:
            self.lost += 1
            return None
        if copies == 2:
            self.duplicated += 1
            self.dup_ns = self._enqueue(now_ns, size)
        self.was_corrupted = False
        if p.corrupt and self._draw("corrupt", p.corrupt_corr) < p.corrupt:
            self.corrupted += 1
            if not self.deliver_corrupted:
                return None
            self.was_corrupted = True
        return self._enqueue(now_ns, size)

    def _simple(self, now_ns: int, size: int) -> int | None:
        p = self._path
        self.dup_ns = None
        self.was_corrupted = False
        if p.loss and self.rng.random() < p.loss:
            self.lost += 1
            return None
        delay = p.delay_ns
        if p.jitter_ns:
            if p.distribution == "uniform":
                delay += round(self.rng.uniform(-p.jitter_ns, p.jitter_ns))
            else:
                delay += round(self.rng.gauss(0.0, p.jitter_ns))
            delay = max(0, delay)
        if p.bandwidth_bps:
            start = max(now_ns, self._free_at)
            self._free_at = start + (size * 8 * 1_000_000_000) // p.bandwidth_bps
            delay += self._free_at - now_ns
        return delay

    def _enqueue(self, now: int, size: int) -> int | None:
        """The delay line: limit, then delay and jitter (or reordering), rates, FIFO."""
        p = self._path
        if p.limit:
            flight = self._in_flight
            while flight and flight[0] <= now:
                heapq.heappop(flight)
            if len(flight) >= p.limit:
                self.overflow += 1
                return None
        if p.bandwidth_bps:
            start = max(now, self._free_at)
            self._free_at = start + (size * 8 * 1_000_000_000) // p.bandwidth_bps
            ready = self._free_at
        else:
            ready = now
        if p.reorder and p.reorder_gap and self._counter >= p.reorder_gap - 1 and \
                self._draw("reorder", p.reorder_corr) < p.reorder:
            # netem: "Do re-ordering by putting one out of N packets at the front of the queue"
            self._counter = 0
            self.reordered += 1
            return self._release(now, ready)
        self._counter += 1
        at = ready + p.delay_ns
        if p.jitter_ns:
            at = max(ready, at + round(p.jitter_ns * self._offset()))
        if p.rate_bps:
            # netem_enqueue with a rate: the last packet in the queue is the reference point
            at = max(at, self._last_arrive) + (size * 8 * 1_000_000_000) // p.rate_bps
        elif p.fifo:
            at = max(at, self._last_arrive)
        self._last_arrive = max(self._last_arrive, at)
        return self._release(now, at)

    def _release(self, now: int, at: int) -> int:
        if self._path.limit:
            heapq.heappush(self._in_flight, at)
        return at - now

    def _draw(self, stream: str, rho: float) -> float:
        """netem's get_crandom: a uniform draw in [0, 1) leaning `rho` on the stream's last."""
        fresh = self.rng.random()
        if not rho:
            return fresh
        value = (1.0 - rho) * fresh + rho * self._last.get(stream, fresh)
        self._last[stream] = value
        return value

    def _lose(self) -> bool:
        p = self._path
        if p.gemodel is not None:
            ge_p, ge_r, ge_h, ge_k = p.gemodel
            rng = self.rng
            if self._bad:
                if rng.random() < ge_r:
                    self._bad = False
                return rng.random() >= ge_h
            if rng.random() < ge_p:
                self._bad = True
            return rng.random() >= ge_k
        return bool(p.loss) and self._draw("loss", p.loss_corr) < p.loss

    def _offset(self) -> float:
        """A zero-mean, unit-spread jitter draw in the path's distribution (uniform is bounded:
        [-1, 1]); correlated through the inverse CDF when `jitter_corr` is set."""
        p = self._path
        dist = p.distribution
        if not p.jitter_corr:
            r = self.rng
            if dist == "uniform":
                return r.uniform(-1.0, 1.0)
            if dist == "normal":
                return r.gauss(0.0, 1.0)
            u = r.random()
        else:
            u = self._draw("jitter", p.jitter_corr)
            if dist == "uniform":
                return 2.0 * u - 1.0
            if dist == "normal":
                return _NORMAL.inv_cdf(min(max(u, _EPS), 1.0 - _EPS))
        if dist == "exponential":  # by its inverse CDF, standardised (mean 0, spread 1)
            return -math.log(1.0 - min(u, 1.0 - _EPS)) - 1.0
        # pareto (alpha 3) by its inverse CDF, standardised; paretonormal mixes it with a
        # normal as iproute2's paretonormal table does (a quarter normal, three quarters pareto)
        pareto = ((1.0 - u) ** (-1.0 / 3.0) - 1.5) / 0.8660254
        if dist == "pareto":
            return pareto
        return 0.25 * self.rng.gauss(0.0, 1.0) + 0.75 * pareto
