"""Graceful overload on the node runtime (docs/architecture.md "Flow
control and overload"), and the plain-Python path (no uvloop) still running a cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from analysis.load import refused_per_node
from analysis.record import read_record
from tests.eventlogs import read_events, run_dir_of

ROOT = Path(__file__).resolve().parents[1]

TOPO = """\
name: t
hosts: [{name: h1}, {name: h2}, {name: h3}]
matrix:
  h1: {h2: 60ms, h3: 60ms}
  h2: {h1: 60ms, h3: 60ms}
  h3: {h1: 60ms, h2: 60ms}
"""

EXP = """\
name: overload
topology: topo.yaml
backend: local
duration: 2s
drain: 1s
seed: 5
protocol: {{name: sequencer, params: {{sequencer: h1}}}}
workload: {{rate: 100/s, size: 100B{window}}}
"""


def local_run(tmp_path: Path, window: str = "", env: dict[str, str] | None = None) -> Path:
    (tmp_path / "topo.yaml").write_text(TOPO)
    (tmp_path / "exp.yaml").write_text(EXP.format(window=window))
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", str(tmp_path / "exp.yaml"),
                           "--out", str(tmp_path / "runs"), "--no-analyze"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run_dir_of(tmp_path / "runs")


def outstanding_max(evs: list[dict[str, Any]], node: str) -> int:
    """The most own messages the node had sent and not yet final-delivered, in log order."""
    own, worst = 0, 0
    for e in sorted(evs, key=lambda e: e["i"]):
        if e["ev"] == "send":
            own += 1
            worst = max(worst, own)
        elif e["ev"] == "fnl" and e["mid"].startswith(f"{node}:"):
            own -= 1
    return worst


@pytest.mark.spark
def test_a_small_window_refuses_instead_of_queueing_and_nothing_refused_counts_as_lost(
        tmp_path: Path, spark: Any) -> None:
    """Two 60 ms hops to final delivery at 100 msgs/s keep ~12 own messages of h2 and h3
    outstanding (the sequencer h1 orders its own at once, unless a late burst of offers
    outruns its flush): a window of 4 must refuse many of their offers, hold the bound, and
    leave every checker clean."""
    from analysis.job import analyze

    run = local_run(tmp_path, ", window: 4")
    events = read_events(run)
    for node, evs in events.items():
        assert outstanding_max(evs, node) <= 4, node
    for node in ("h2", "h3"):
        lines = [e for e in events[node] if e["ev"] == "refused"]
        assert lines and all(e["window"] == 4 and e["n"] > 0 for e in lines), node
    refused = refused_per_node(read_record(run))
    # (A node that starts late on a loaded machine offers, and refuses, less.)
    assert refused["h2"] + refused["h3"] > 100, refused
    summary = analyze(read_record(run))
    load = summary["load"]
    assert load["refused"] == sum(refused.values())
    assert load["offered"] == load["accepted"] + load["refused"]
    assert load["accepted"] == summary["messages"]["sent"]
    # 3 senders x 100/s x 2 s offered (a late-starting node offers a little less).
    assert 300 <= load["offered"] <= 600, load
    assert 0.3 < load["accepted_fraction"] < 0.8, load
    assert all(c["violations"] == 0 for c in summary["checks"].values()), summary["checks"]
    assert summary["ok"], summary["checks"]


def test_the_pure_python_path_runs_a_cluster_and_the_default_window_refuses_nothing(
        tmp_path: Path) -> None:
    """TESTBED_PURE_PYTHON: plain asyncio instead of uvloop (a bare host); every node
    delivers every message, and the default window leaves this load alone."""
    run = local_run(tmp_path, env={"TESTBED_PURE_PYTHON": "1"})
    for node in ("h1", "h2", "h3"):
        log = (run / "nodes" / node / "node.log").read_text()
        assert f"node {node}: event loop asyncio" in log, log
    events = read_events(run)
    sent = {e["mid"] for evs in events.values() for e in evs if e["ev"] == "send"}
    # 3 senders x 100/s x 2 s; a node that starts late on a loaded machine offers less
    assert len(sent) > 300
    for node, evs in events.items():
        assert {e["mid"] for e in evs if e["ev"] == "fnl"} == sent, node
    # The window never refused; at most a planned message or two whose timer fired after the
    # workload's end count as refused (offered, never sent).
    refused = refused_per_node(read_record(run))
    assert set(refused) == {"h1", "h2", "h3"} and all(n <= 3 for n in refused.values()), refused


def test_uvloop_is_the_default_where_importable(tmp_path: Path) -> None:
    pytest.importorskip("uvloop")
    from nodes.loop import PURE_ENV, loop_factory

    assert PURE_ENV == "TESTBED_PURE_PYTHON"
    os.environ.pop(PURE_ENV, None)
    assert loop_factory() is not None
    os.environ[PURE_ENV] = "1"
    try:
        assert loop_factory() is None
    finally:
        del os.environ[PURE_ENV]


def test_refused_counts_survive_a_line_cut_short_and_ignore_bad_values(tmp_path: Path) -> None:
    log = tmp_path / "nodes" / "h1" / "events.jsonl"
    log.parent.mkdir(parents=True)
    lines = [{"t": 1, "lt": 1, "i": 0, "node": "h1", "ev": "refused", "n": 7},
             {"t": 2, "lt": 2, "i": 1, "node": "h1", "ev": "refused", "n": -3},
             {"t": 3, "lt": 3, "i": 2, "node": "h1", "ev": "refused", "n": "9"},
             {"t": 4, "lt": 4, "i": 3, "node": "h1", "ev": "send", "mid": "h1:1"}]
    text = "\n".join(json.dumps(x, separators=(",", ":")) for x in lines)
    log.write_text(text + '\n{"t":5,"lt":5,"i":4,"node":"h1","ev":"refused","n":4')
    assert refused_per_node(read_record(tmp_path)) == {"h1": 7}
