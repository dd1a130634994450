"""The local backend: real processes and UDP on loopback, no root."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.processes import is_alive
from testbed.rundir import RunDir
from tests.eventlogs import fnl_sequences, median_fnl_latency_ms, read_events, run_dir_of
from tests.inproc import run_cli
from tests.test_run_sim import predicted_ms, run

ROOT = Path(__file__).resolve().parents[1]


def node_pids(run_path: Path) -> list[tuple[int, int | None]]:
    return [(e["pid"], e.get("starttime")) for e in RunDir.open(run_path).journal.entries()
            if e["op"] == "create" and e.get("kind") == "process"]


@pytest.mark.timing
def test_local_median_latency_per_pair_matches_the_topology(tmp_path: Path) -> None:
    events = read_events(run(tmp_path, "lat", backend="local", duration="6s"))
    medians = median_fnl_latency_ms(events)
    assert len(medians) == 16
    for (s, r), got in medians.items():
        want = predicted_ms(s, r, "h3")
        # A margin a loaded machine keeps; an unshaped (~0 ms) or doubled path still fails.
        assert abs(got - want) <= 0.25 * want + 5.0, (s, r, got, want)
    seqs = fnl_sequences(events)
    assert all(seq == seqs["h3"] for seq in seqs.values())


def test_teardown_after_kill_9_of_run_leaves_no_node_processes(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "run",
                             "experiments/quickstart.yaml", "--out", str(out), "--no-analyze"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    pids: list[tuple[int, int | None]] = []
    while time.monotonic() < deadline and len(pids) < 4:
        time.sleep(0.2)
        if out.exists() and any(out.iterdir()):
            pids = node_pids(run_dir_of(out))
    assert len(pids) == 4, "nodes did not start"
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert all(is_alive(p, st) for p, st in pids), "nodes should outlive a killed orchestrator"
    down = subprocess.run([sys.executable, "-m", "testbed", "teardown", "--runs", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert down.returncode == 0, down.stderr
    assert "removed 4 resource(s)" in down.stdout
    assert not any(is_alive(p, st) for p, st in pids)
    again = subprocess.run([sys.executable, "-m", "testbed", "teardown", "--runs", str(out)],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "nothing to tear down" in again.stdout


def test_up_status_teardown_keeps_a_testbed_running_until_torn_down(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    up = subprocess.run([sys.executable, "-m", "testbed", "up", "topologies/two-sites.yaml",
                         "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                        timeout=60)
    assert up.returncode == 0, up.stderr
    run_path = run_dir_of(out)
    pids = node_pids(run_path)
    try:
        assert len(pids) == 4
        time.sleep(2.0)
        assert all(is_alive(p, st) for p, st in pids)
        st = subprocess.run([sys.executable, "-m", "testbed", "status", "--runs", str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert run_path.name in st.stdout and "node:h4" in st.stdout  # never truncated
    finally:
        down = subprocess.run([sys.executable, "-m", "testbed", "teardown",
                               run_path.name.rsplit("-", 1)[1], "--runs", str(out)],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert down.returncode == 0, down.stderr
    assert not any(is_alive(p, st) for p, st in pids)
    events = read_events(run_path)
    assert all(evs[-1]["ev"] == "stop" for evs in events.values()), "nodes flushed their logs"


@pytest.mark.timing
def test_quickstart_on_local_passes_its_expectations_with_spark(tmp_path: Path) -> None:
    """The quickstart (its topology, protocol, workload and `expect:` lines) with the Spark
    analysis, 8 s of workload instead of 20 s: the checks and expectations read the same."""
    spec = (ROOT / "experiments" / "quickstart.yaml").read_text()
    assert "duration: 20s" in spec
    spec = spec.replace("duration: 20s", "duration: 8s").replace(
        "../topologies/", str(ROOT / "topologies") + "/")
    (tmp_path / "quickstart.yaml").write_text(spec)
    out = tmp_path / "runs"
    # In-process (tests/inproc.py): the analysis reuses this session's Spark.
    proc = run_cli("run", str(tmp_path / "quickstart.yaml"), "--out", str(out),
                   env={"COLUMNS": "120"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_path = run_dir_of(out)
    for name in ("spec.lock.yaml", "journal.jsonl", "faults.jsonl", "summary.json",
                 "report.html"):
        assert (run_path / name).is_file(), name
    assert (run_path / "parquet").is_dir()
    for host in ("h1", "h2", "h3", "h4"):
        assert (run_path / "nodes" / host / "events.jsonl").stat().st_size > 0
    summary = json.loads((run_path / "summary.json").read_text())
    for check in ("total_order", "agreement", "integrity"):
        assert summary["checks"][check]["violations"] == 0
    # 4 hosts x 50/s x 8 s = 1,600 planned; nodes started 3 s late under load send 1,000.
    assert summary["messages"]["sent"] > 800
