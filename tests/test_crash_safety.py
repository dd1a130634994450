"""Crash safety (docs/architecture.md decision 5): `testbed run --backend mininet` killed with
SIGKILL at a random moment leaves nothing behind once `testbed teardown` has run: no bridges or
veths, no namespaces (their holder processes), no qdiscs or iptables rules (they live in those
namespaces or in the run's own chain), no processes of the run."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.processes import run_processes
from testbed.rundir import find_runs
from tests.shaping_env import IN_CI, root_only

pytestmark = [pytest.mark.root, root_only]
REPO = Path(__file__).resolve().parents[1]
TRIALS = 20 if IN_CI else int(os.environ.get("CRASH_TRIALS", "3"))


def cli(*args: str, **kw: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen([str(Path(sys.executable).parent / "testbed"), *args], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, **kw)  # type: ignore[call-overload]


def leftovers(run_id: str) -> list[str]:
    prefix = f"tb{run_id}"
    out = [f"link {p.name}" for p in Path("/sys/class/net").iterdir()
           if p.name.startswith(prefix)]
    rules = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
    out += [f"iptables {line}" for line in rules.splitlines() if prefix in line]
    out += [f"process {pid}" for pid in run_processes(run_id)]
    return out


@pytest.mark.slow
@pytest.mark.timing
@pytest.mark.timeout(60 + 25 * TRIALS)
@pytest.mark.parametrize("trial", range(TRIALS))
def test_sigkill_at_a_random_point_then_teardown_leaves_nothing(trial: int,
                                                                  tmp_path: Path) -> None:
    rng = random.Random(trial)
    kill_after = rng.uniform(0.0, 6.5)
    proc = cli("run", "experiments/quickstart.yaml", "--backend", "mininet", "--out",
                   str(tmp_path), "--no-analyze")
    # The random moment counts from the run directory's creation (about 1 s after the start on
    # an idle machine, several on a loaded one), so that the kill interrupts a run: bring-up,
    # shaping, nodes or workload.
    deadline = time.monotonic() + 60
    while not find_runs(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(kill_after)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    runs = find_runs(tmp_path)
    assert runs, "no run directory 60 s after the start"
    td = cli("teardown", "--runs", str(tmp_path))
    assert td.wait(timeout=120) == 0
    for run in runs:
        time.sleep(0.2)
        assert leftovers(run.run_id) == [], f"killed after {kill_after:.1f} s"
        assert run.journal.live() == []
