"""`context_order` (analysis/context.py): psync-total's deliveries against the context graph
its multicasts log; proven by a log it must flag and one it must not, and by a run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analysis.context import context_order
from tests.inproc import run_cli


def ctx(mid: str, deps: list[str], null: bool = False) -> dict[str, Any]:
    return {"ev": "context", "mid": mid, "deps": deps, "null": null}


def fnl(*mids: str, inc: int = 0) -> list[dict[str, Any]]:
    return [{"ev": "fnl", "mid": m, "inc": inc} for m in mids]


# h2:1 is in h1's graph when h1 multicasts a NULL (h1:1); h1:2 follows that NULL in h1's chain,
# so it depends on h2:1 through a message nobody delivers.
SENT = {"h1": [ctx("h1:1", ["h2:1"], null=True), ctx("h1:2", [])],
        "h2": [ctx("h2:1", [])]}


def test_a_delivery_before_a_predecessor_behind_a_null_is_flagged() -> None:
    events = {"h1": SENT["h1"] + fnl("h2:1", "h1:2"), "h2": SENT["h2"] + fnl("h1:2", "h2:1")}
    found = context_order(events)
    assert found["violations"] == 1 and found["claimed"], found
    assert found["examples"][0] == {"node": "h2", "incarnation": 0, "mid": "h1:2",
                                    "delivered_before": ["h2:1"]}


def test_deliveries_in_context_order_are_not_flagged() -> None:
    events = {"h1": SENT["h1"] + fnl("h2:1", "h1:2"), "h2": SENT["h2"] + fnl("h2:1", "h1:2")}
    assert context_order(events)["violations"] == 0
    # a predecessor never delivered there (lost with a crash) is agreement's, not this check's;
    # another incarnation's log is another process
    assert context_order({"h1": SENT["h1"], "h2": SENT["h2"] + fnl("h1:2")})["violations"] == 0
    split = {"h1": SENT["h1"], "h2": SENT["h2"] + fnl("h1:2") + fnl("h2:1", inc=1)}
    assert context_order(split)["violations"] == 0


def test_a_psync_total_run_is_judged_by_its_context(tmp_path: Path) -> None:
    spec = tmp_path / "exp.yaml"
    root = Path(__file__).resolve().parents[1]
    spec.write_text(f"name: ctx\ntopology: {root}/topologies/two-sites.yaml\nbackend: sim\n"
                    "duration: 1s\ndrain: 1s\nseed: 1\nprotocol: {name: psync-total}\n"
                    "workload: {senders: all, rate: 20/s, size: 16B}\n")
    proc = run_cli("run", str(spec), "--engine", "in-process", "--out", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(next((tmp_path / "r").glob("*/summary.json")).read_text())
    check = summary["checks"]["context_order"]
    assert check == {"violations": 0, "claimed": True, "examples": []}, check
