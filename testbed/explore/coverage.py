"""What a `testbed explore` session drew and reached (coverage.json, docs/explore.md
"Coverage"): per protocol, how many seeds drew each world feature, fault kind, parameter
bucket (decades) and topology shape, and how many reached each of the protocol's own events
(its counters: the integer attributes of its MBeans, case.py `counters`)."""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any

from testbed.explore.ranges import split_value


def bucket(value: Any) -> str | None:
    """The decade of a drawn value: 137 -> `100-1000`, `20/s` -> `10-100/s`; None when the
    value is not a number (a list of senders, an arrival's name)."""
    if isinstance(value, bool | list | dict):
        return None
    try:
        x, unit = split_value(value)
    except ValueError:
        return None
    if x <= 0:
        return f"0{unit}"
    lo = 10 ** math.floor(math.log10(x))
    return f"{lo:g}-{lo * 10:g}{unit}"


def _kind(item: dict[str, Any]) -> str:
    kind = str(item.get("kind", ""))
    if kind == "mgmt":
        target = (item.get("write") or {}) or (item.get("exec") or ["?"])[0]
        name = ",".join(sorted(target)) if isinstance(target, dict) else str(target)
        return f"mgmt:{name}"
    return kind


def coverage(protocol: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One protocol's coverage over a session's rows."""
    features: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    shapes: Counter[str] = Counter()
    params: dict[str, Counter[str]] = {}
    reached: Counter[str] = Counter()
    seen: set[str] = set()
    refused = 0
    for row in rows:
        features.update(row.get("features") or [])
        kinds.update({_kind(i) for i in json.loads(row.get("faults") or "[]")})
        if row.get("shape"):
            shapes[row["shape"]] += 1
        refused += bool(row.get("refused"))
        drawn = json.loads(row.get("params") or "{}")
        drawn["duration"] = f"{row.get('duration_s', 0):g}s" if row.get("duration_s") else None
        for key, value in drawn.items():
            b = bucket(value) if value is not None else None
            if b is None and isinstance(value, str):
                b = value  # an arrival, `all`
            if b is not None:
                params.setdefault(key, Counter())[b] += 1
        counts = json.loads(row.get("counters") or "{}")
        seen |= set(counts)
        reached.update(k for k, v in counts.items() if v > 0)
    return {"seeds": len(rows), "refused_worlds": refused,
            "features": dict(sorted(features.items())),
            "fault_kinds": dict(sorted(kinds.items())),
            "topology_shapes": dict(sorted(shapes.items())),
            "param_buckets": {k: dict(sorted(v.items())) for k, v in sorted(params.items())},
            "events": {k: reached.get(k, 0) for k in sorted(seen)},
            "events_never_reached": sorted(seen - set(reached))}


def shares(cov: dict[str, Any]) -> dict[str, float]:
    """One protocol's coverage as the share of seeds reaching each of its events
    (`event:<counter>`) and drawing each fault kind (`fault:<kind>`), 0 for an event counted
    but never reached: what the nightly compares night to night (a share, so nights of
    different seed counts compare)."""
    seeds = max(1, int(cov.get("seeds") or 0))
    out = {f"event:{k}": v / seeds for k, v in (cov.get("events") or {}).items()}
    out.update({f"fault:{k}": v / seeds for k, v in (cov.get("fault_kinds") or {}).items()})
    return out


def coverage_html(cov: dict[str, dict[str, Any]]) -> str:
    """The coverage section of index.html."""
    from html import escape

    def table(title: str, counts: dict[str, int]) -> str:
        cells = "".join(f"<tr><td>{escape(k)}</td><td>{v}</td></tr>" for k, v in counts.items())
        return f"<h4>{escape(title)}</h4><table>{cells or '<tr><td>none</td></tr>'}</table>"

    parts = ["<h2>Coverage</h2>"]
    for protocol, c in cov.items():
        parts.append(f"<h3>{escape(protocol)}: {c['seeds']} seeds, "
                     f"{c['refused_worlds']} drawn worlds refused</h3>")
        parts.append(table("world features", c["features"]))
        parts.append(table("fault kinds", c["fault_kinds"]))
        parts.append(table("topology shapes", c["topology_shapes"]))
        for key, counts in c["param_buckets"].items():
            parts.append(table(key, counts))
        parts.append(table("protocol events (seeds reaching each counter)", c["events"]))
    return "\n".join(parts)
