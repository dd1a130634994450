"""Typed fault primitives (nodes/faults.py): every timeline entry becomes one typed value that
names its capability, and its history record is the one faults.jsonl always had."""

from __future__ import annotations

import json
from pathlib import Path

from analysis.record import read_record
from nodes.faults import (
    Block,
    Crash,
    FaultHistory,
    Heal,
    Management,
    Restart,
    SetClock,
    SetPath,
    primitive,
)
from testbed.faults.schedule import expand
from testbed.faults.spec import FaultSpec


def _timeline() -> list:  # type: ignore[type-arg]
    from pydantic import TypeAdapter

    faults = TypeAdapter(list[FaultSpec]).validate_python([
        {"kind": "partition", "at": "1s", "isolate": "h3", "for": "1s"},
        {"kind": "crash", "at": "1s", "host": "h2", "restart_after": "1s"},
        {"kind": "clock", "at": "2s", "host": "h1", "jump": "50ms"},
        {"kind": "link", "at": "2s", "between": ["h1", "h2"], "delay": "80ms", "for": "1s"},
        {"kind": "mgmt", "at": "3s", "host": "h1", "mbean": "testbed:type=Clock",
         "write": {"DriftPpm": 5}},
    ])
    return expand(faults, ["h1", "h2", "h3"], 10**10, seed=1)


def test_every_timeline_entry_is_a_typed_primitive_with_its_old_history_record(
        tmp_path: Path) -> None:
    history = FaultHistory(tmp_path / "faults.jsonl")
    for a in _timeline():
        prim = a.primitive()
        assert prim.op == a.op
        record = history.append(prim, 123, {"m": 1}, a.fault)
        # The record faults.jsonl had before the primitives were typed: params minus host.
        assert record["params"] == {k: v for k, v in a.params.items() if k != "host"}
        assert record["fault"] == a.fault and record["t"] == 123
    lines = [json.loads(x) for x in (tmp_path / "faults.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["phase"]) for r in lines] == [
        ("partition", "start"), ("crash", "start"), ("partition", "stop"), ("crash", "stop"),
        ("clock", "start"), ("link", "start"), ("link", "stop"), ("mgmt", "start")]
    assert lines[0]["hosts"] == ["h1", "h2", "h3"] and lines[1]["hosts"] == ["h2"]


def test_primitives_parse_to_the_typed_values() -> None:
    assert primitive("crash", {"host": "h1"}) == Crash("h1")
    assert primitive("restart", {"host": "h1"}) == Restart("h1")
    assert primitive("heal", {}) == Heal()
    assert primitive("block", {"cuts": [["a", "b"]]}) == Block((("a", "b"),))
    assert primitive("path", {"between": ["a", "b"], "loss": 0.1}) == SetPath(("a", "b"),
                                                                                 loss=0.1)
    assert SetPath(("a", "b"), reset=True).phase == "stop"
    assert primitive("clock", {"host": "a", "drift_ppm": 5}) == SetClock("a", drift_ppm=5)
    mgmt = primitive("mgmt", {"host": "a", "mbean": "m", "write": None, "exec": ["jump", 5]})
    assert mgmt == Management("a", "m", None, ("jump", 5))


def test_a_heal_stops_every_partition_then_on_in_the_history(tmp_path: Path) -> None:
    """Cuts add up and a heal lifts them all: a partition another partition's heal ended gets
    its stop at that heal, so readers pairing by fault id see it end when the network did
    (explore seed 20025 of primary: the first partition seemed to last to the end)."""
    from analysis.fault_history import intervals
    from analysis.membership import read_partitions

    path = tmp_path / "faults.jsonl"
    history = FaultHistory(path)
    cut = (("h2", "h3"), ("h3", "h2"))
    history.append(Block(cut), 100, {}, 0)
    history.append(Block(cut), 200, {}, 1)
    history.append(Heal(), 300, {"m": 1}, 1)
    later = FaultHistory(path)  # another writer (`testbed fault`) reads what is on back
    later.append(Block(cut), 400, {}, 2)
    later.append(Heal(), 500, {}, 3)  # a `heal` fault of its own
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    stops = [(r["fault"], r["t"], r["params"]) for r in lines if r["phase"] == "stop"]
    assert stops == [(1, 300, {}), (0, 300, {"healed_by": 1}), (3, 500, {}),
                     (2, 500, {"healed_by": 3})]
    spans = intervals(lines)
    assert [(f.fault, f.start, f.stop) for f in spans] == [(0, 100, 300), (1, 200, 300),
                                                           (2, 400, 500)]
    record = read_record(tmp_path, need_nodes=False)
    assert [(s, e) for s, e, _ in read_partitions(record, ["h2", "h3"])] == [
        (100, 300), (200, 300), (400, 500)]
