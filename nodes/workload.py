"""The workload generator: when a sending node TO-multicasts, and how big the messages are.

Arrivals (docs/reservations.md "Workloads"):
- `constant`: one message every 1/rate, from a random phase;
- `poisson`: exponential gaps of mean 1/rate;
- `ticks`: the CBR application of 004 §2.1 -- at each 1/rate tick it "can either send or
  not send a message"; it sends with probability `send_prob`;
- `vbr`: 004 §2.1 -- slots of `slot_ns`; in each slot a burst of k messages, k drawn
  binomially with at most `max_burst` and mean `avg`·slot, sent back to back at the slot's
  start.

A send window (`WorkloadConfig.start_ns`/`stop_ns`, the spec's `workload.sending`) delays the
first message by `start_ns` and stops the host sending once the next one would fall at or
after `stop_ns` (001 §2.2 beyond the paper: one sender, then all, then one again).

A rate change (`WorkloadConfig.rate_changes`, or a management `newRate` through the core)
moves the generator to the new rates from its next gap on.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from nodes.config import WorkloadConfig

SILENT = 10**15  # a gap past any run's end: the host's send window has closed


class Arrivals(Iterator[int]):
    """Gaps in ns between successive broadcasts; an iterator whose rates can change."""

    def __init__(self, workload: WorkloadConfig, rng: random.Random):
        self.arrival = workload.arrival
        self.rng = rng
        self.rate = workload.rate
        self.send_prob = workload.send_prob
        self.slot_ns = workload.slot_ns
        self.avg = workload.avg or workload.rate
        self.max_burst = workload.max_burst
        self._first = True
        self._pos = 0  # ns since the workload start of the last broadcast (ticks, vbr)
        self._slot = -1  # the vbr slot whose burst is being sent
        self._left = 0  # messages of that burst still to send
        self.start_ns, self.stop_ns = workload.start_ns, workload.stop_ns
        self._t = 0  # ns since the workload start of the next broadcast (send windows)

    def renegotiate(self, rates: dict[str, float]) -> None:
        """The application's new rates (the keys of `Layer.on_new_rate`)."""
        if "rate" in rates:
            self.rate = rates["rate"]
        if "avg" in rates:
            self.avg = rates["avg"]
        if "max_burst" in rates:
            self.max_burst = int(rates["max_burst"])

    def __next__(self) -> int:
        if not (self.start_ns or self.stop_ns):
            return self._gap()
        gap = self._gap()
        if self._t == 0:
            gap += self.start_ns  # the first message, at the window's start
        if self.stop_ns and self._t + gap >= self.stop_ns:
            return SILENT
        self._t += gap
        return gap

    def _gap(self) -> int:
        if self.arrival == "ticks":
            return self._tick()
        if self.arrival == "vbr":
            return self._vbr()
        mean_ns = 1e9 / self.rate
        if self.arrival == "poisson":
            return max(1, round(self.rng.expovariate(1.0) * mean_ns))
        if self._first:
            # A constant-rate sender still starts at a random phase, so that senders do not
            # march in lockstep (which would hide ordering races).
            self._first = False
            return round(self.rng.random() * mean_ns)
        return round(mean_ns)

    def _tick(self) -> int:
        tick = 1e9 / self.rate
        k = int(self._pos // tick) + 1  # the next tick after the last send
        while self.rng.random() >= self.send_prob:  # skip this tick
            k += 1
        at = round(k * tick)
        gap, self._pos = at - self._pos, at
        return gap

    def _vbr(self) -> int:
        while self._left == 0:
            self._slot += 1
            mean = min(float(self.max_burst), self.avg * self.slot_ns / 1e9)
            p = mean / self.max_burst
            self._left = sum(self.rng.random() < p for _ in range(self.max_burst))
            start = self._slot * self.slot_ns
            if self._left:
                at = start
                gap, self._pos = at - self._pos, at
                self._left -= 1
                return gap
        self._left -= 1
        return 0  # the rest of the burst, back to back


def intervals(workload: WorkloadConfig, rng: random.Random) -> Arrivals:
    """The sender's arrival process (see the module docstring)."""
    return Arrivals(workload, rng)


def workload_rng(seed: int, node_id: int) -> random.Random:
    return random.Random(f"{seed}:{node_id}:workload")
