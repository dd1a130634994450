"""Synthetic run directories: hand-written or generated delivery logs for tests and benchmarks.

The generated log is what a correct sequencer-style protocol would produce: every message
is fnl-delivered once at every node, in one global order, with a per-pair latency.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

_NS_PER_MS = 1_000_000


def write_run(
    run_dir: Path,
    logs: Mapping[str, Iterable[Mapping[str, Any]]],
    faults: Iterable[Mapping[str, Any]] = (),
) -> Path:
    """Write `nodes/<host>/events.jsonl` per host (adding `node` and ordinal `i`) and faults.

    Events keep the given order; `i` counts from 0 per node, as the node runtime does.
    """
    for host, events in logs.items():
        node_dir = run_dir / "nodes" / host
        node_dir.mkdir(parents=True, exist_ok=True)
        with (node_dir / "events.jsonl").open("w") as f:
            for i, event in enumerate(events):
                f.write(json.dumps({"i": i, "node": host, "lt": event.get("t", 0), **event}) + "\n")
    with (run_dir / "faults.jsonl").open("w") as f:
        for fault in faults:
            f.write(json.dumps(dict(fault)) + "\n")
    return run_dir


def generate_run(
    run_dir: Path,
    nodes: int = 4,
    duration_s: float = 20.0,
    rate: float = 200.0,
    seed: int = 0,
    base_latency_ms: float = 10.0,
) -> Path:
    """A clean run: `rate` messages/s in total, round-robin senders, one global order.

    Each message is ordered when it reaches the sequencer (h1), then delivered at every node
    after a seeded random delay, never before the previous message (total order holds).
    """
    rng = random.Random(seed)
    hosts = [f"h{k + 1}" for k in range(nodes)]
    logs: dict[str, list[dict[str, Any]]] = {h: [] for h in hosts}
    last_fnl = {h: 0 for h in hosts}
    count = {h: 0 for h in hosts}
    gap_ns = int(1e9 / rate)
    for seq in range(int(duration_s * rate)):
        t_send = 1_000_000_000 + seq * gap_ns
        sender = hosts[seq % nodes]
        count[sender] += 1
        mid = f"{sender}:{count[sender]}"
        logs[sender].append({"t": t_send, "ev": "send", "mid": mid, "proto": "seq", "size": 64})
        for h in hosts:
            delay = int((base_latency_ms + rng.expovariate(1 / 2.0)) * _NS_PER_MS)
            t = max(t_send + delay, last_fnl[h] + 1)
            last_fnl[h] = t
            base = {"mid": mid, "proto": "seq", "size": 64}
            logs[h].append({"t": t - 1000, "ev": "recv", **base})
            logs[h].append({"t": t, "ev": "fnl", "seq": seq + 1, **base})
    for h in hosts:
        logs[h].sort(key=lambda e: e["t"])
    return write_run(run_dir, logs)
