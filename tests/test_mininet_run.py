"""Experiments on the mininet backend (root): the quickstart with capture passes its
expectations, and the fault schedule behaves as on sim and local."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import test_faults
from tests.eventlogs import run_dir_of
from tests.inproc import run_cli

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.root
@pytest.mark.timing  # a real-time run asserting counts
def test_quickstart_on_mininet_passes_expectations_and_captures_data(tmp_path: Path) -> None:
    spec = (ROOT / "experiments" / "quickstart.yaml").read_text()
    # 8 s of the quickstart's workload (not 20 s): still thousands of datagrams per capture.
    assert "duration: 20s" in spec
    spec = spec.replace("duration: 20s", "duration: 8s")
    spec = spec.replace("backend: local", "backend: mininet").replace(
        "../topologies/two-sites.yaml", str(ROOT / "topologies" / "two-sites.yaml"))
    spec += "capture: {pcap: true, snaplen: 128}\n"
    (tmp_path / "exp.yaml").write_text(spec)
    # In-process (tests/inproc.py): the analysis reuses this session's Spark.
    proc = run_cli("run", str(tmp_path / "exp.yaml"), "--out", str(tmp_path / "runs"),
                   env={"COLUMNS": "120"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = run_dir_of(tmp_path / "runs")
    summary = json.loads((run / "summary.json").read_text())
    assert all(summary["checks"][c]["violations"] == 0
               for c in ("total_order", "agreement", "integrity"))
    manifest = json.loads((run / "pcaps" / "manifest.json").read_text())
    assert len(manifest) == 4
    from analysis.pcap import read_pcap

    for entry in manifest:
        table = read_pcap(run / "pcaps" / Path(entry["file"]).name)
        data = table.filter(table.column("tb_type").is_valid()).num_rows
        assert data > 1000, entry  # the nodes' wire-format datagrams were captured


@pytest.mark.root
@pytest.mark.timing  # a real-time run asserting counts
def test_faults_on_mininet_keep_order_and_agreement(tmp_path: Path) -> None:
    test_faults.test_partition_crash_and_clock_jump_keep_order_and_agreement(tmp_path, "mininet")


@pytest.mark.root
def test_up_on_mininet_prints_measured_rtts_and_teardown_removes_it(tmp_path: Path) -> None:
    out = str(tmp_path / "runs")
    up = subprocess.run([sys.executable, "-m", "testbed", "up", "topologies/two-sites.yaml",
                         "--backend", "mininet", "--out", out], cwd=ROOT, capture_output=True,
                        text=True, timeout=300, env=dict(os.environ, COLUMNS="150"))
    run = run_dir_of(Path(out))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "measured RTT ms" in up.stdout and "h1->h3" in up.stdout
        assert "OFF" not in up.stdout  # every pair within 10% + 1 ms of the plan
        assert "checked 12 pairs (every pair): 0 flagged" in up.stdout
        with (run / "check.csv").open() as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == 12 and {r["off"] for r in rows} == {"0"}
        assert len((run / "paths.csv").read_text().splitlines()) == 13
        assert subprocess.run(["ip", "link", "show", f"tb{run.name.rsplit('-', 1)[1]}d"],
                              capture_output=True).returncode == 0
    finally:
        down = subprocess.run([sys.executable, "-m", "testbed", "teardown", "--runs", out],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert subprocess.run(["ip", "link", "show", f"tb{run.name.rsplit('-', 1)[1]}d"],
                          capture_output=True).returncode != 0
