"""A run past the runner's wall limit is cut short the same way on every backend
(testbed/runner.py `_watch`): the nodes are stopped, drain.json says `cut_short`, and the
verdict on what they logged is not ok and says why -- never a silent ok, never no verdict.
The simulator used to raise a BackendError there (no verdict) while real backends were
stopped and judged."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from analysis.judge import judge_run
from analysis.liveness import liveness_line, liveness_section
from analysis.record import read_record
from analysis.verdict import verdict, verdict_line
from testbed import runner
from testbed.spec.loader import load_experiment

# Eight hosts at 200 msgs/s each for 30 s of virtual time: several seconds of simulator work,
# far past the half second the test allows it.
EXP = """\
name: cut-short
backend: sim
topology:
  name: eight
  sites: {a: {lan: {delay: 1ms}}}
  hosts: [{name: h1, site: a}, {name: h2, site: a}, {name: h3, site: a}, {name: h4, site: a},
          {name: h5, site: a}, {name: h6, site: a}, {name: h7, site: a}, {name: h8, site: a}]
duration: 30s
drain: 1s
drain_max: 2s
protocol: {name: sequencer, params: {sequencer: h1}}
workload: {rate: 200/s, size: 100B}
"""


def test_a_simulator_past_its_wall_limit_stops_itself_with_complete_logs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator gets the runner's limit (sim.json `max_wall_s`) and stops every node at
    one virtual instant before it: cut short and judged, and every node's log is complete up
    to that instant, so nothing reads as an integrity violation."""
    (tmp_path / "exp.yaml").write_text(EXP)
    exp, topo = load_experiment(tmp_path / "exp.yaml")
    monkeypatch.setattr(runner, "wall_limit_s", lambda *_: 1.0)
    out = io.StringIO()
    result = runner.run_experiment(exp, topo, tmp_path / "runs", Console(file=out, width=200),
                                   analyze=False)
    assert len(result.failures) == 1 and result.failures[0].startswith("cut short: ")
    assert json.loads((result.run.path / "sim.json").read_text())["max_wall_s"] == 0.8
    drain = json.loads((result.run.path / "drain.json").read_text())
    assert "the simulator stopped every node at one instant (wall-clock budget of 0.8 s " \
        "exceeded at virtual time" in drain["cut_short"]
    summary = judge_run(read_record(result.run.path))
    assert summary["verdict"]["liveness"] == "cut-short" and summary["ok"] is False
    assert summary["checks"]["integrity"]["violations"] == 0
    assert summary["checks"]["total_order"]["violations"] == 0
    # It exited by itself: the process is recorded removed, the statistics line says why.
    assert not [e for e in result.run.journal.live() if e["id"] == "sim"]
    stats = json.loads((result.run.path / "sim.log").read_text().splitlines()[-1])
    assert stats["cut_short"].startswith("wall-clock budget of 0.8 s exceeded")


def test_a_simulator_that_does_not_stop_itself_is_stopped_and_judged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner's backstop: a simulator still running past the limit is killed mid-run, the
    run cut short and judged all the same."""
    (tmp_path / "exp.yaml").write_text(EXP)
    exp, topo = load_experiment(tmp_path / "exp.yaml")
    monkeypatch.setattr(runner, "wall_limit_s", lambda *_: 0.5)
    monkeypatch.setattr(runner, "SIM_BACKSTOP_S", -0.4)  # before the simulator's own stop
    out = io.StringIO()
    result = runner.run_experiment(exp, topo, tmp_path / "runs", Console(file=out, width=200),
                                   analyze=False)
    # Not judged (--no-analyze), yet not ok: the run was cut short.
    assert len(result.failures) == 1 and result.failures[0].startswith("cut short: ")
    assert "cut short: the nodes had not finished 0 s (wall clock)" in out.getvalue()
    drain = json.loads((result.run.path / "drain.json").read_text())
    assert drain["quiescent"] is False and drain["in_flight"] is None
    assert "the simulator was stopped mid-run" in drain["cut_short"]
    # what the nodes logged until they were stopped
    summary = judge_run(read_record(result.run.path))
    assert summary["verdict"]["liveness"] == "cut-short" and summary["ok"] is False
    assert any(r.startswith("cut short: the nodes had not finished")
               for r in summary["verdict"]["reasons"])
    assert summary["checks"]["agreement"]["judged"] is False  # not quiescent: unproven
    assert summary["liveness"]["cut_short"] == drain["cut_short"]
    assert (liveness_line(summary) or "").startswith("cut short: the nodes had not finished")
    # The simulator is gone: its journaled process was stopped and recorded removed.
    assert not [e for e in result.run.journal.live() if e["id"] == "sim"]

def test_a_cut_short_run_is_never_ok_whatever_the_claims() -> None:
    """Quiescent before it was stopped, or stalled as the protocol claims: still not ok."""
    checks = {"total_order": {"violations": 0, "claimed": True}}
    drain = {"quiescent": True, "drain_s": 1.0, "drain_min_s": 1.0, "drain_max_s": 2.0,
             "in_flight": 0, "undelivered_per_node": {}, "cut_short": "stopped at 40 s"}
    live = liveness_section(drain, checks)
    assert live["cut_short"] == "stopped at 40 s"
    v = verdict({"checks": checks, "node_errors": {"total": 0}, "liveness": live})
    assert v == {"ok": False, "safety": "held", "liveness": "cut-short",
                 "reasons": ["cut short: stopped at 40 s"]}
    stalled = {**drain, "quiescent": False, "in_flight": 7}
    live = {**liveness_section(stalled, checks), "promised": False, "promise": "no sequencer"}
    v = verdict({"checks": checks, "node_errors": {"total": 0}, "liveness": live})
    assert not v["ok"] and v["liveness"] == "cut-short"
    assert v["reasons"] == ["cut short: stopped at 40 s (7 deliveries of correct hosts' "
                            "messages missing at correct hosts when stopped)"]
    assert verdict_line({"checks": checks, "node_errors": {"total": 0}, "liveness": live}) \
        .startswith("verdict: NOT OK (safety held, cut-short): cut short: stopped at 40 s")
    # Without it, the same records are judged as before.
    plain = {k: v for k, v in drain.items() if k != "cut_short"}
    assert verdict({"checks": checks, "node_errors": {"total": 0},
                    "liveness": liveness_section(plain, checks)})["ok"] is True


def test_a_simulated_run_within_its_limit_is_not_cut_short_nor_late(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same run, short: not cut short; and no warning that the nodes were up late (the
    simulator's start is a virtual instant, which the check read as decades ago)."""
    (tmp_path / "exp.yaml").write_text(EXP.replace("duration: 30s", "duration: 1s")
                                       .replace("200/s", "20/s"))
    exp, topo = load_experiment(tmp_path / "exp.yaml")
    out = io.StringIO()
    result = runner.run_experiment(exp, topo, tmp_path / "runs", Console(file=out, width=200),
                                   analyze=False)
    assert result.failures == []
    drain = json.loads((result.run.path / "drain.json").read_text())
    assert drain["quiescent"] is True and "cut_short" not in drain
    assert "simulated " in out.getvalue() and "cut short" not in out.getvalue()
    assert "after the workload's start" not in capsys.readouterr().out
