"""Typed fault primitives (nodes/faults.py): every timeline entry becomes one typed value that
names its capability, and its history record is the one faults.jsonl always had."""

from __future__ import annotations

import json
from pathlib import Path

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
