"""What `testbed run` prints while a run runs (testbed/runview.py), on a non-terminal: a line
per phase, the messages sent and final-delivered, each fault as it starts and heals; after
it the run id on one line and no expectation line for a run without any."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.eventlogs import run_dir_of
from tests.inproc import ROOT, run_cli

SPEC = f"""\
name: console-phases-and-faults
topology: {ROOT}/topologies/two-sites.yaml
backend: BACKEND
duration: 4s
drain: 1s
protocol: {{name: sequencer, params: {{sequencer: h1}}}}
workload: {{rate: 20/s, size: 100B}}
faults:
  - {{kind: partition, isolate: h3, at: 1s, for: 1s}}
  - {{kind: crash, host: h4, at: 1500ms, restart_after: 1s}}
"""

# Times as the faults were applied: on a loaded machine the local nodes (and so the nemesis)
# start late.
FAULT_LINES = [r"  \d+\.\d s: fault 0 partition starts: h3 \| h1 h2 h4",
               r"  \d+\.\d s: fault 1 crash starts: h4",
               r"  \d+\.\d s: fault 0 partition heals",
               r"  \d+\.\d s: fault 1 crash heals: h4"]


def phases_counts_and_faults(stdout: str, backend: str) -> None:
    lines = stdout.splitlines()
    phases = [line.split(":")[0] for line in lines
              if re.match(r"(bring-up|workload|drain|analysis): ", line)]
    assert phases[:3] == ["bring-up", "workload", "drain"], stdout
    assert f"bring-up: 4 {backend} hosts" in lines, stdout
    assert "workload: 4 s of 20 msgs/s per sender" in lines, stdout
    at = [next((i for i, line in enumerate(lines) if re.fullmatch(pattern, line)), None)
          for pattern in FAULT_LINES]
    assert None not in at, (FAULT_LINES, stdout)
    assert at[0] < at[2] and at[1] < at[3], stdout  # each starts before it heals
    done = [re.fullmatch(r"  nodes done: ([\d,]+) sent, ([\d,]+) final deliveries", line)
            for line in lines]
    sent, delivered = next(m.groups() for m in done if m)
    # 4 senders x 20/s x 4 s, less what h4 did not send while down and a late start
    assert 80 <= int(sent.replace(",", "")) <= 320, stdout
    assert int(delivered.replace(",", "")) > int(sent.replace(",", "")), stdout


def test_a_sim_run_prints_its_phases_counts_and_faults(tmp_path: Path) -> None:
    spec = tmp_path / "e.yaml"
    spec.write_text(SPEC.replace("BACKEND", "sim"))
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", str(spec), "--out",
                           str(tmp_path / "runs"), "--no-analyze"], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    phases_counts_and_faults(proc.stdout, "sim")


def test_a_local_run_prints_them_and_its_run_id_on_one_line(tmp_path: Path) -> None:
    spec = tmp_path / "e.yaml"
    spec.write_text(SPEC.replace("BACKEND", "local"))
    # In-process (tests/inproc.py): the analysis reuses this session's Spark.
    r = run_cli("run", str(spec), "--out", str(tmp_path / "runs"), env={"COLUMNS": "120"})
    assert r.returncode in (0, 1), r.stdout + r.stderr  # judged either way
    phases_counts_and_faults(r.stdout, "local")
    assert "analysis: Spark" in r.stdout.splitlines()
    run_id = run_dir_of(tmp_path / "runs").name
    assert f"run {run_id}" in r.stdout.splitlines(), r.stdout
    assert "expectation" not in r.stdout  # the spec has none
