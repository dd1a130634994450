"""The workload generator: when a sending node TO-multicasts, and how big the messages are."""

from __future__ import annotations

import random
from collections.abc import Iterator

from nodes.config import WorkloadConfig


def intervals(workload: WorkloadConfig, rng: random.Random) -> Iterator[int]:
    """Gaps in ns between successive broadcasts: constant rate, or Poisson arrivals."""
    mean_ns = 1e9 / workload.rate
    if workload.arrival == "poisson":
        while True:
            yield max(1, round(rng.expovariate(1.0) * mean_ns))
    # A constant-rate sender still starts at a random phase, so that senders do not march in
    # lockstep (which would hide ordering races).
    yield round(rng.random() * mean_ns)
    while True:
        yield round(mean_ns)


def workload_rng(seed: int, node_id: int) -> random.Random:
    return random.Random(f"{seed}:{node_id}:workload")
