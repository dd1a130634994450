"""The nemesis on the wall clock (testbed/faults/nemesis.py): a fault whose nodes do not answer
never delays the next fault past its time, and no fault runs once the run has begun to end --
the ones left are recorded as not applied (faults.skipped.jsonl)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from testbed.faults.nemesis import SKIPPED_FILE, Nemesis
from testbed.faults.schedule import Action
from tests.eventlogs import run_dir_of

ROOT = Path(__file__).resolve().parents[1]

# h4 is paused (SIGSTOP) from 1 s to 7 s: its management endpoint accepts connections and
# answers nothing, as an overloaded or unreachable node does. The partition's block (1.5 s)
# and heal (3.5 s) ask every node; the crash of h2 is due at 5 s.
EXP = """\
name: slow-nodes
topology:
  name: four
  sites: {a: {lan: {delay: 1ms}}}
  hosts: [{name: h1, site: a}, {name: h2, site: a}, {name: h3, site: a}, {name: h4, site: a}]
duration: 8s
drain: 1s
drain_max: 4s
protocol: {name: sequencer, params: {sequencer: h1}}
workload: {rate: 10/s, size: 100B}
faults:
  - {kind: pause, host: h4, at: 1s, for: 6s}
  - {kind: partition, isolate: h3, at: 1500ms, for: 2s}
  - {kind: crash, host: h2, at: 5s, restart_after: 1s}
"""


@pytest.mark.timing
def test_a_node_that_does_not_answer_never_delays_the_next_fault(tmp_path: Path,
                                                                 backend: str = "local") -> None:
    """Also on docker (tests/test_docker.py), whose partitions are iptables rules: there the
    heal's probe asks the nodes."""
    (tmp_path / "exp.yaml").write_text(EXP)
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", str(tmp_path / "exp.yaml"),
                           "--backend", backend, "--out", str(tmp_path / "runs"),
                           "--no-analyze"], cwd=ROOT, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = run_dir_of(tmp_path / "runs")
    start = json.loads((run / "plan.json").read_text())["start_at_ns"]
    history = [json.loads(x) for x in (run / "faults.jsonl").read_text().splitlines()]
    by = {(h["kind"], h["phase"]): h for h in history}
    # Each fault began by its time (a loaded machine's margin): before, the paused h4 held
    # the block and the heal 5 s per request (the heal began 3 s late, the crash ~8 s).
    for (kind, phase), due_s in {("pause", "start"): 1.0, ("partition", "start"): 1.5,
                                 ("partition", "stop"): 3.5, ("crash", "start"): 5.0,
                                 ("crash", "stop"): 6.0, ("pause", "stop"): 7.0}.items():
        late = (by[(kind, phase)]["t"] - start) / 1e9 - due_s
        assert late < 1.5, f"{kind} {phase} began {late:.2f} s late"
    # What h4 did not answer is named, not waited for; the others answered.
    block, heal = by[("partition", "start")]["measured"], by[("partition", "stop")]["measured"]
    if backend == "local":  # node-side filters: the block asks the nodes too
        assert block["no_answer"] == ["h4"]
        assert block["blocked_to"]["h3"] == ["h1", "h2", "h4"]
    assert heal["no_answer"] == ["h4"]
    assert "h3" in heal["suspected_before_heal"]["h1"]
    assert by[("crash", "start")]["measured"]["alive"] is False
    assert "no answer from 1 host(s) by the next fault's time: h4" in proc.stdout
    assert not (run / SKIPPED_FILE).exists()


def test_no_fault_runs_once_the_run_ends_and_the_rest_is_skipped(tmp_path: Path) -> None:
    """The run ends while a fault is being applied and the next ones are overdue: stop()
    waits for that one, applies none of the others and records them as skipped."""
    applied: list[str] = []

    def apply(action: Action) -> dict[str, Any]:
        applied.append(action.op)
        if action.op == "pause":
            time.sleep(0.5)  # a slow fault: the run ends meanwhile
        return {}

    actions = [Action(0, "pause", {"host": "h1"}, 0), Action(50_000_000, "crash",
                                                              {"host": "h2"}, 1),
               Action(100_000_000, "restart", {"host": "h2"}, 1),
               Action(60 * 10**9, "resume", {"host": "h1"}, 0)]
    nemesis = Nemesis(actions, time.time_ns(), tmp_path / "faults.jsonl", apply)
    nemesis.start()
    time.sleep(0.25)  # the pause is being applied; the crash and the restart are due
    nemesis.stop()
    assert not nemesis.is_alive()
    assert applied == ["pause"]
    time.sleep(0.3)
    assert applied == ["pause"]  # nothing after stop() either
    assert nemesis.errors == []
    history = [json.loads(x) for x in (tmp_path / "faults.jsonl").read_text().splitlines()]
    assert [(h["kind"], h["phase"]) for h in history] == [("pause", "start")]
    skipped = [json.loads(x) for x in (tmp_path / SKIPPED_FILE).read_text().splitlines()]
    assert [(s["kind"], s["phase"], s["hosts"]) for s in skipped] == [
        ("crash", "start", ["h2"]), ("crash", "stop", ["h2"]), ("pause", "stop", ["h1"])]
    assert all(s["measured"] == {"skipped": "stopped"} for s in skipped)
    assert skipped[0]["t"] == nemesis.start_at_ns + 50_000_000
    assert nemesis.skipped == ["crash at 0.05s: stopped (the run ended before its time)",
                               "restart at 0.1s: stopped (the run ended before its time)",
                               "resume at 60s: stopped (the run ended before its time)"]
