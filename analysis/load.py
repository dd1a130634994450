"""Offered against accepted load (summary.json `load`; docs/architecture.md "Flow control and
overload").

A sender's workload offers a message at every arrival; the node runtime hands it to the
protocol (a `send` event: accepted) unless the sender already has `workload.window` of its
own messages not yet final-delivered, in which case it refuses it and counts it in an
`ev=refused` line (`n` messages since the previous line, nodes/runtime.py). A refused message
never got a message id, so no checker expects it delivered: refusal is push-back, not loss.
The simulator never refuses (virtual time has no overload).
"""

from __future__ import annotations

from typing import Any

from analysis.overview import Overview
from analysis.record import RunRecord


def refused_per_node(record: RunRecord) -> dict[str, int]:
    """Messages each node's workload refused: the sum of `n` over its `ev=refused` lines (at
    most ten a second, so a plain scan for them is cheap)."""
    out: dict[str, int] = {}
    for node, evs in record.events(("refused",)).items():
        out[node] = sum(e["n"] for e in evs if isinstance(e.get("n"), int) and e["n"] > 0)
    return out


def load_section(record: RunRecord, view: Overview, nodes: list[str]) -> dict[str, Any]:
    """`offered`, `accepted` (messages sent: send events, from the events' Overview),
    `refused` in total and `per_node`, and `accepted_fraction` (accepted / offered; 1.0 when
    nothing was offered)."""
    sends = view.per_node("send")
    refused = refused_per_node(record)
    per_node = {}
    for node in sorted(set(nodes) | set(sends) | {n for n, v in refused.items() if v}):
        acc, ref = sends.get(node, 0), refused.get(node, 0)
        per_node[node] = {"offered": acc + ref, "accepted": acc, "refused": ref}
    offered = sum(v["offered"] for v in per_node.values())
    accepted = sum(v["accepted"] for v in per_node.values())
    return {"offered": offered, "accepted": accepted, "refused": offered - accepted,
            "accepted_fraction": round(accepted / offered, 4) if offered else 1.0,
            "per_node": per_node}
