"""`testbed fault ...` against a running `testbed up`: each fault acts now, is recorded in
faults.jsonl with its measured effect, and bad requests are one sentence."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.processes import is_alive
from testbed.rundir import RunDir
from tests.eventlogs import run_dir_of

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "testbed", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.timing
def test_fault_cli_partitions_crashes_restarts_and_jumps_a_running_testbed(tmp_path: Path
                                                                          ) -> None:
    out = str(tmp_path / "runs")
    assert cli("up", "topologies/two-sites.yaml", "--out", out).returncode == 0
    run = RunDir.open(run_dir_of(Path(out)))
    try:
        # The failure detector (1 s timeout) sees the cut from both sides before the heal
        # (3 s: room for a loaded machine's late ticks).
        p = cli("fault", "partition", "--isolate", "h3", "--for", "3s", "--runs", out)
        assert p.returncode == 0, p.stderr
        assert cli("fault", "crash", "h4", "--runs", out).returncode == 0
        assert cli("fault", "restart", "h4", "--runs", out).returncode == 0
        assert cli("fault", "clock", "h2", "--jump", "50ms", "--runs", out).returncode == 0
        bad = cli("fault", "crash", "h9", "--runs", out)
        assert bad.returncode == 2 and "unknown host 'h9'" in bad.stderr
        history = [json.loads(x) for x in (run.path / "faults.jsonl").read_text().splitlines()]
        assert [(h["kind"], h["phase"]) for h in history] == [
            ("partition", "start"), ("partition", "stop"), ("crash", "start"),
            ("crash", "stop"), ("clock", "start")]
        suspected = history[1]["measured"]["suspected_before_heal"]
        assert suspected["h1"] == ["h3"] and suspected["h3"] == ["h1", "h2", "h4"]
        assert history[2]["measured"]["alive"] is False
        assert history[3]["measured"]["incarnation"] == 1
        assert history[4]["measured"]["clock"]["OffsetMs"] == 50.0
    finally:
        assert cli("teardown", run.run_id, "--runs", out).returncode == 0
    pids = [e["pid"] for e in run.journal.entries() if e.get("kind") == "process"]
    assert len(pids) == 5 and not any(is_alive(p, None) for p in pids)
