"""The delivery log read in plain Python: one parsing of `nodes/<host>/events.jsonl` for every
reader that is not the Spark ingest (docs/architecture.md "Delivery log"); the run record
(analysis/record.py `RunRecord.events`) reads a run's logs through here.

The Spark job and the in-process judge read whole logs as Arrow tables (analysis/ingest.py
`node_table`); the sections that need only a few kinds of events -- QoS, load, transport,
switching, membership, the report without Parquet, the exploration report, the benchmarks --
read them here, under the same rules:

- an intact line is a JSON object with integer `t` and `i` and a string `ev` (what
  `ingest.log_table` keeps); anything else -- the truncated last line of a node killed
  mid-write, a corrupt line -- is skipped and counted (`NodeLog.malformed`);
- `node` falls back to the host's directory name;
- each event carries `inc`, its incarnation: how many `start` lines of its node come at or
  before it by ordinal `i`, less one (0 before the first), as `ingest.incarnations` gives it
  (000 §2.2: a restarted process is a new process, named `host@inc` by the checks);
- a `netrecv` (a datagram accepted from `member`) logs the sender's incarnation as its own
  `inc` (left out for incarnation 0, nodes/protocols/qos_common.py `netrecv`); the reader
  keeps it as `member_inc` before `inc` becomes the receiver's, so a datagram is paired with
  the `net` of the sender's incarnation that sent it (None, pairing with none, when the
  logged `inc` is not a non-negative integer);
- with `revoke=True` an `fnl` that a later `ev=state` revokes is dropped
  (analysis/revocation.py), so a reader sees the history the application finally holds.

`read_node(...)` filters by event kind cheaply: a line is parsed only when the quoted name of a
wanted kind (or `start`, for the incarnations; `state`, for revocation) occurs in it.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.revocation import drop_revoked

LOG = "events.jsonl"

Event = dict[str, Any]


def parse_line(line: bytes | str, node: str) -> Event | None:
    """One log line as an event, or None when it is not intact (not a JSON object, or without
    an integer `t` and `i` and a string `ev`); `node` fills in a missing `node`, and a
    `netrecv`'s `inc` (its sender's incarnation) becomes `member_inc`."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("ev"), str):
        return None
    if not all(isinstance(obj.get(k), int) and not isinstance(obj.get(k), bool)
               for k in ("t", "i")):
        return None
    if obj["ev"] == "netrecv":
        sender = obj.pop("inc", 0)
        valid = isinstance(sender, int) and not isinstance(sender, bool) and sender >= 0
        obj["member_inc"] = sender if valid else None  # None pairs with no `net`
    if not isinstance(obj.get("node"), str):
        obj["node"] = node
    return obj


@dataclass
class NodeLog:
    """One node's events (those asked for), sorted by ordinal `i`, each with `inc`."""

    node: str
    events: list[Event] = field(default_factory=list)
    malformed: int = 0  # lines looked at that were not intact


def _marks(kinds: Collection[str]) -> tuple[bytes, ...]:
    return tuple(json.dumps(k).encode() for k in kinds)


def read_node(path: Path, node: str, kinds: Collection[str] | None = None,
              revoke: bool = False) -> NodeLog:
    """The events of one log (all, or only those whose `ev` is in `kinds`)."""
    out = NodeLog(node)
    try:
        data = path.read_bytes()
    except OSError:
        return out
    wanted = None if kinds is None else set(kinds)
    need = None if wanted is None else wanted | {"start"} | ({"state", "fnl"} if revoke
                                                           else set())
    marks = None if need is None else _marks(need)
    parsed: list[Event] = []
    for line in data.splitlines():
        if not line.strip() or (marks is not None and not any(m in line for m in marks)):
            continue
        e = parse_line(line, node)
        if e is None:
            out.malformed += 1
        elif need is None or e["ev"] in need:
            parsed.append(e)
    parsed.sort(key=lambda e: e["i"])
    inc = -1
    for e in parsed:
        if e["ev"] == "start":
            inc += 1
        e["inc"] = max(inc, 0)
    if revoke:
        parsed = drop_revoked([{**e, "node": node} for e in parsed])
    out.events = parsed if wanted is None else [e for e in parsed if e["ev"] in wanted]
    return out
