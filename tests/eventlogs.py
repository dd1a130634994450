"""Reading delivery logs in tests, independently of analysis/ (so tests can judge it)."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any


def read_events(run: Path) -> dict[str, list[dict]]:
    out = {}
    for f in sorted((run / "nodes").glob("*/events.jsonl")):
        out[f.parent.name] = [json.loads(line) for line in f.read_text().splitlines()]
    return out


def fnl_sequences(events: dict[str, list[dict]]) -> dict[str, list[str]]:
    return {n: [e["mid"] for e in evs if e["ev"] == "fnl"] for n, evs in events.items()}


def median_fnl_latency_ms(events: dict[str, list[dict]]) -> dict[tuple[str, str], float]:
    """Median (fnl t - send t) per (sender, receiver), in ms."""
    sent = {e["mid"]: e["t"] for evs in events.values() for e in evs if e["ev"] == "send"}
    lat: dict[tuple[str, str], list[float]] = defaultdict(list)
    for node, evs in events.items():
        for e in evs:
            if e["ev"] == "fnl":
                lat[(e["mid"].split(":")[0], node)].append((e["t"] - sent[e["mid"]]) / 1e6)
    return {k: statistics.median(v) for k, v in lat.items()}


def run_dir_of(out: Path) -> Path:
    runs = sorted(p for p in out.iterdir() if p.is_dir())
    assert len(runs) == 1, runs
    return runs[0]


def read_faults(run: Path) -> list[dict[str, Any]]:
    """A run's fault history (faults.jsonl), a record a line."""
    return [json.loads(x) for x in (run / "faults.jsonl").read_text().splitlines()]


def agent_ops(faults: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """Each management fault's operation and the value it answered: a Maelstrom nemesis acting
    on the program through its agent, e.g. ("kill", "killed")."""
    return [(f["params"]["exec"][0], f["measured"]["value"]) for f in faults]
