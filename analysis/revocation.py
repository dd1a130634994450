"""Revoked deliveries: what the application finally holds (001 §4.1.2).

A `primary` member forced to leave has its state replaced on rejoin: the deliveries it made
outside the primary's history are revoked by an `ev=state` event (`revoked`: their mids) and
the primary's own deliveries follow as `fnl`. A node's history is therefore its `fnl` events
minus those revoked: an `fnl` of mid m at node n is not part of n's history when a later
`state` event at n (by ordinal `i`) lists m and no other `fnl` of m came in between (the one
a `state` revokes is the latest before it).

One pure function over plain rows (`revoked_fnl`) decides; `drop_revoked` (dict rows: the
in-process judge, analysis/membership.py) and `drop_revoked_table` (one node's Arrow table:
the Spark ingest, analysis/ingest.py) apply it, so every checker judges the same history.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

STATE_MARK = b'"state"'


def revoked_fnl(rows: Iterable[Mapping[str, Any]]) -> set[tuple[str, int]]:
    """(node, i) of every `fnl` row that a later `state` row of the same node revokes.
    Rows need `node`, `i`, `ev`, and `mid` (fnl) or `revoked` (state); any order, any
    nodes; rows missing those are ignored."""
    wanted = [r for r in rows if r.get("ev") in ("fnl", "state")
              and isinstance(r.get("i"), int) and r.get("node") is not None]
    wanted.sort(key=lambda r: (str(r["node"]), r["i"]))
    live: dict[tuple[str, str], int] = {}
    out: set[tuple[str, int]] = set()
    for r in wanted:
        node = str(r["node"])
        if r["ev"] == "fnl":
            if isinstance(r.get("mid"), str):
                live[(node, r["mid"])] = r["i"]
            continue
        revoked = r.get("revoked")
        for mid in revoked if isinstance(revoked, list) else ():
            i = live.pop((node, str(mid)), None)
            if i is not None:
                out.add((node, i))
    return out


def drop_revoked(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows without the revoked `fnl`s (order kept)."""
    gone = revoked_fnl(rows)
    if not gone:
        return rows
    return [r for r in rows
            if not (r.get("ev") == "fnl" and (str(r.get("node")), r.get("i")) in gone)]


def state_rows(data: bytes, node: str) -> list[dict[str, Any]]:
    """The `state` events of one node's raw log (a cheap byte scan, then JSON per hit)."""
    if STATE_MARK not in data:
        return []
    out = []
    for line in data.splitlines():
        if STATE_MARK in line:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and obj.get("ev") == "state":
                out.append({**obj, "node": node})
    return out


def drop_revoked_table(table: pa.Table, states: list[dict[str, Any]], node: str) -> pa.Table:
    """One node's events (columns ev, mid, i) without the fnl rows its `states` revoke."""
    if not states:
        return table
    fnl = table.filter(pc.equal(table["ev"], "fnl"))
    rows = [{"node": node, "ev": "fnl", "mid": m, "i": i}
            for m, i in zip(fnl["mid"].to_pylist(), fnl["i"].to_pylist(), strict=True)]
    gone = revoked_fnl(rows + [{**s, "node": node} for s in states])
    if not gone:
        return table
    ordinals = pa.array(sorted(i for _, i in gone), pa.int64())
    drop = pc.and_(pc.equal(table["ev"], "fnl"), pc.is_in(table["i"], value_set=ordinals))
    return table.filter(pc.invert(pc.fill_null(drop, False)))
