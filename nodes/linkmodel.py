"""Per-destination path model with netem semantics, drawn from a seeded RNG.

Used by the `inprocess` shaping applier (the local backend's transport) and by the simulator,
so both realise the topology's delay, jitter, loss and bandwidth the same way.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from nodes.config import PathConfig


class LinkModel:
    def __init__(self, path: PathConfig, rng: random.Random):
        self.rng = rng
        self.path = path
        self._free_at = 0  # bandwidth: when the emulated link finishes the previous datagram

    @property
    def path(self) -> PathConfig:
        return self._path

    @path.setter
    def path(self, path: PathConfig) -> None:
        self._path = path
        # The common case -- no loss, no bandwidth limit, normal jitter -- as (delay, jitter,
        # rng.gauss), for the simulator's inlined copy of transit(); None otherwise.
        self.plain: tuple[int, int, Callable[[float, float], float]] | None = (
            (path.delay_ns, path.jitter_ns, self.rng.gauss)
            if not path.loss and not path.bandwidth_bps
            and (path.distribution != "uniform" or not path.jitter_ns) else None)

    def transit(self, now_ns: int, size: int) -> int | None:
        """Delay in ns for a datagram sent now, or None when it is lost."""
        p = self._path
        if p.loss and self.rng.random() < p.loss:
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
