"""SETO and Fast SETO beat the plain sequencer's optimistic accuracy on the local backend too
(real processes, real UDP, real timers), on the 5-region WAN with jitter."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.eventlogs import run_dir_of
from tests.test_seto import accuracy, assert_local_and_total_order, read_events

ROOT = Path(__file__).resolve().parents[1]


def run_local(tmp_path: Path, experiment: str) -> Path:
    spec = (ROOT / "experiments" / experiment).read_text()
    spec = re.sub(r"(?m)^duration: .*$", "duration: 12s", spec)
    spec = spec.replace("../topologies/", str(ROOT / "topologies") + "/")
    out = tmp_path / experiment.removesuffix(".yaml")
    out.mkdir()
    (out / "exp.yaml").write_text(spec)
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", str(out / "exp.yaml"),
                           "--backend", "local", "--out", str(out / "runs"), "--no-analyze"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run_dir_of(out / "runs")


@pytest.mark.timing
def test_seto_and_fast_seto_beat_plain_sequencer_on_local(tmp_path: Path) -> None:
    runs = {name: read_events(run_local(tmp_path, f"{name}.yaml")) for name in
            ("seto-vs-sequencer", "seto-vs-sequencer-seto", "seto-vs-sequencer-fast-seto")}
    start = min(e["t"] for e in runs["seto-vs-sequencer"]["virginia"] if e["ev"] == "send")
    after = start + 5_000_000_000  # past the learning and planning phases
    acc = {name: accuracy(events, after) for name, events in runs.items()}
    for name in ("seto-vs-sequencer-seto", "seto-vs-sequencer-fast-seto"):
        assert_local_and_total_order(runs[name])
        for node, base in acc["seto-vs-sequencer"].items():
            if node != "virginia":  # the sequencer is always right about its own order
                assert acc[name][node] > base + 0.2, (name, node, acc)
