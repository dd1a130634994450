"""The plain-Python reader of the delivery log (analysis/deliverylog.py): the rules of the
Arrow ingest (analysis/ingest.py), for every reader that is not Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analysis import deliverylog
from analysis.ingest import log_table
from analysis.load import refused_per_node
from analysis.membership import read_membership_events
from analysis.record import read_record


def _write(path: Path, lines: list[Any], compact: bool = True, tail: str = "") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    sep = (",", ":") if compact else (", ", ": ")
    text = "".join((json.dumps(x, separators=sep) if not isinstance(x, str) else x) + "\n"
                   for x in lines)
    (path / "events.jsonl").write_text(text + tail)
    return path / "events.jsonl"


LOG: list[Any] = [
    {"t": 10, "lt": 10, "i": 0, "ev": "start"},
    {"t": 11, "lt": 11, "i": 1, "ev": "send", "mid": "a:1"},
    {"t": 12, "lt": 12, "i": 2, "ev": "fnl", "mid": "a:1", "seq": 0},
    {"t": 13, "lt": 13, "i": 3, "ev": "fnl", "mid": "b:1", "seq": 1},
    "[1, 2]",                                   # not an object
    {"t": 14, "ev": "fnl", "mid": "b:2"},        # no ordinal
    {"t": 15, "lt": 15, "i": 4, "ev": "state", "view": 2, "revoked": ["b:1"]},
    {"t": 16, "lt": 16, "i": 5, "ev": "fnl", "mid": "c:1", "seq": 2},
    {"t": 20, "lt": 20, "i": 7, "ev": "refused", "n": 3},
    {"t": 19, "lt": 19, "i": 6, "ev": "start"},  # out of file order: `i` decides
    {"t": 21, "lt": 21, "i": 8, "ev": "fnl", "mid": "a:2", "seq": 3},
    {"t": 22, "lt": 22, "i": 9, "ev": "refused", "n": 4},
]


def test_lines_incarnations_and_revocations_as_the_ingest_reads_them(tmp_path: Path) -> None:
    """Truncated, non-object and incomplete lines are skipped and counted; `node` falls back
    to the host; `inc` counts the `start` lines before by ordinal; a `state` revokes the
    `fnl` it names; the result is the ingest's table, row for row."""
    path = _write(tmp_path / "nodes" / "h1", LOG, tail='{"t": 23, "i": 10, "ev": "fn')
    log = deliverylog.read_node(path, "h1")
    assert log.malformed == 3
    assert [e["i"] for e in log.events] == list(range(10))
    assert {e["node"] for e in log.events} == {"h1"}
    assert [e["inc"] for e in log.events] == [0, 0, 0, 0, 0, 0, 1, 1, 1, 1]
    kept = deliverylog.read_node(path, "h1", revoke=True).events
    assert [e["mid"] for e in kept if e["ev"] == "fnl"] == ["a:1", "c:1", "a:2"]
    table, malformed = log_table(path.read_bytes(), "h1")
    assert malformed == log.malformed
    rows = sorted(table.select(["i", "ev", "mid", "inc"]).to_pylist(), key=lambda r: r["i"])
    assert rows == [{k: e.get(k) for k in ("i", "ev", "mid", "inc")} for e in kept]


def test_kinds_filter_keeps_incarnations_and_revocation(tmp_path: Path) -> None:
    """Asking for a few kinds still counts every `start` and applies every `state`."""
    _write(tmp_path / "nodes" / "h1", LOG)
    _write(tmp_path / "nodes" / "h2", [{"t": 1, "i": 0, "ev": "fnl", "mid": "a:1"}])
    got = read_record(tmp_path).events(("fnl",), revoke=True)
    assert sorted(got) == ["h1", "h2"]
    assert [(e["mid"], e["inc"]) for e in got["h1"]] == [("a:1", 0), ("c:1", 0), ("a:2", 1)]
    assert [e["mid"] for e in got["h2"]] == ["a:1"]
    assert refused_per_node(read_record(tmp_path)) == {"h1": 7, "h2": 0}


def test_readers_do_not_depend_on_the_json_layout(tmp_path: Path) -> None:
    """A log written with spaces after the separators (json.dumps' default, as
    analysis/synthetic.py writes) reads the same as the nodes' compact one: the membership
    reader used to look for the compact bytes `"ev":"view"` and saw nothing."""
    view = {"t": 5, "lt": 5, "i": 1, "ev": "view", "primary": True, "counter": 1,
            "members": ["h1"]}
    lines = [LOG[0], view, *LOG[1:4], LOG[6]]
    _write(tmp_path / "compact" / "nodes" / "h1", lines, compact=True)
    _write(tmp_path / "spaced" / "nodes" / "h1", lines, compact=False)
    compact = read_membership_events(read_record(tmp_path / "compact"))
    spaced = read_membership_events(read_record(tmp_path / "spaced"))
    assert [e["ev"] for e in compact["h1"]] == ["start", "view", "fnl", "state"]
    assert spaced == compact
