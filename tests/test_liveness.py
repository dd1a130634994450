"""Liveness apart from safety: the drain waits for quiescence, a run cut short reports the
messages still in flight under `liveness` (not as agreement or validity violations), and a
real agreement violation in a quiescent run is still caught."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from analysis.job import analyze
from analysis.liveness import liveness_line
from analysis.record import read_record
from tests.eventlogs import run_dir_of

ROOT = Path(__file__).resolve().parents[1]

# Two sites 200 ms apart: a message sent in the last 0.4 s of the workload is still in flight
# when a run without a drain stops.
TOPO = """\
name: slow
sites:
  a: {lan: {delay: 1ms}}
  b: {lan: {delay: 1ms}}
wan:
  - {between: [a, b], delay: 200ms}
hosts:
  - {name: h1, site: a}
  - {name: h2, site: a}
  - {name: h3, site: b}
  - {name: h4, site: b}
"""

EXP = """\
name: drain
topology: topo.yaml
backend: sim
duration: 2s
drain: 0s
drain_max: {drain_max}
seed: 3
protocol: {{name: sequencer, params: {{sequencer: h1}}}}
workload: {{rate: 40/s, size: 200B, arrival: poisson}}
"""


def sim_run(tmp_path: Path, drain_max: str) -> Path:
    d = tmp_path / f"max{drain_max}"
    d.mkdir()
    (d / "topo.yaml").write_text(TOPO)
    (d / "exp.yaml").write_text(EXP.format(drain_max=drain_max))
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", str(d / "exp.yaml"),
                           "--out", str(d / "runs"), "--no-analyze"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run_dir_of(d / "runs")


@pytest.mark.spark
def test_a_run_cut_short_reports_messages_in_flight_under_liveness(
        tmp_path: Path, spark: Any) -> None:
    run = sim_run(tmp_path, "0s")
    drain = json.loads((run / "drain.json").read_text())
    assert drain["quiescent"] is False and drain["in_flight"] > 0
    summary = analyze(read_record(run))
    live, checks = summary["liveness"], summary["checks"]
    assert live["quiescent"] is False and live["in_flight"] == drain["in_flight"]
    assert checks["agreement"]["violations"] == 0 and checks["validity"]["violations"] == 0
    assert checks["agreement"]["judged"] is False
    assert live["unproven"]["agreement"] + live["unproven"]["validity"] > 0
    # Safety held, but the claims promise progress without faults: a stall is not ok.
    assert checks["total_order"]["violations"] == 0 and not summary["ok"]
    assert summary["verdict"]["safety"] == "held"
    assert summary["verdict"]["liveness"] == "stalled" and summary["liveness"]["promised"]
    line = liveness_line(summary)
    assert line is not None and line.startswith("not quiescent after 0 s: ")
    assert f"{drain['in_flight']} messages in flight" in line


@pytest.mark.spark
def test_the_drain_waits_for_quiescence_and_a_dropped_delivery_is_one_violation(
        tmp_path: Path, spark: Any) -> None:
    run = sim_run(tmp_path, "5s")
    drain = json.loads((run / "drain.json").read_text())
    # Two WAN hops (sender -> sequencer -> receiver) are 0.4 s: the drain stops soon after.
    assert drain["quiescent"] is True and drain["in_flight"] == 0
    assert 0.3 <= drain["drain_s"] <= 1.5, drain
    summary = analyze(read_record(run))
    assert summary["liveness"]["quiescent"] is True and summary["ok"], summary["checks"]
    assert liveness_line(summary) is None
    # Drop one final delivery (of h2's 10th message) from h4's log: a real agreement violation.
    log = run / "nodes" / "h4" / "events.jsonl"
    lines = log.read_text().splitlines()
    victim = next(i for i, line in enumerate(lines)
                  if '"ev":"fnl"' in line and '"mid":"h2:10"' in line)
    log.write_text("\n".join(lines[:victim] + lines[victim + 1:]) + "\n")
    mutated = analyze(read_record(run))
    agreement = mutated["checks"]["agreement"]
    assert agreement["violations"] == 1 and agreement["missing_per_node"] == {"h4": 1}
    assert agreement["examples"][0]["mid"] == "h2:10" and not mutated["ok"]


def test_the_drain_also_waits_for_a_faulty_hosts_message_that_a_correct_host_delivered() -> None:
    """h4 crashed; h1 delivered 20 of its messages, h2 19 and h3 18: h2 and h3 still owe
    agreement one and two. Those keep the drain going but do not decide quiescence (the
    correct hosts' own messages do)."""
    from nodes.quiescence import drain_record, undelivered, unsettled

    correct = ["h1", "h2", "h3"]
    progress = {"h1": {"sent": 5, "delivered": {"h1": 5, "h2": 4, "h3": 3, "h4": 20}},
                "h2": {"sent": 4, "delivered": {"h1": 5, "h2": 4, "h3": 3, "h4": 19}},
                "h3": {"sent": 3, "delivered": {"h1": 5, "h2": 4, "h3": 3, "h4": 18}}}
    assert unsettled(progress, correct) == {"h1": 0, "h2": 1, "h3": 2}
    assert not any(undelivered(progress, correct).values())
    rec = drain_record(True, 5_000_000_000, 1_000_000_000, 5_000_000_000, correct,
                       undelivered(progress, correct), unsettled(progress, correct))
    assert rec["quiescent"] and rec["in_flight"] == 0 and rec["faulty_in_flight"] == 3
    # Once every correct host has what one of them delivered, nothing is owed: the record
    # says nothing of faulty hosts.
    for p in progress.values():
        p["delivered"]["h4"] = 20
    assert unsettled(progress, correct) == {"h1": 0, "h2": 0, "h3": 0}
    assert "faulty_in_flight" not in drain_record(True, 0, 0, 0, correct, {}, {"h1": 0})


def test_the_drain_waits_for_a_restarted_host_to_deliver_its_own_messages() -> None:
    """h2 restarted and stays up: its current incarnation sent 6 and delivered 5 of them
    itself, so one is still owed (validity, and agreement at the correct hosts); a host that
    has all of its own owes nothing, and one that did not answer owes nothing either."""
    from nodes.quiescence import unsent_own

    progress = {"h2": {"sent": 6, "delivered": {"h1": 40, "h2": 5}},
                "h3": {"sent": 2, "delivered": {"h3": 2}}}
    assert unsent_own(progress, ["h2", "h3", "h4"]) == {"h2": 1, "h3": 0, "h4": 0}
    progress["h2"]["delivered"]["h2"] = 6
    assert not any(unsent_own(progress, ["h2"]).values())


def test_the_drain_waits_for_the_correct_hosts_to_deliver_a_restarted_hosts_new_messages(
) -> None:
    """h2 crashed after 20 messages, all delivered everywhere, and its incarnation 1 sent 2
    more: h1 has one of them, h3 none. A count per origin (22 against 21 and 20 delivered)
    cannot tell those from the earlier incarnation's; the count of incarnation 1 can. A host
    that does not report its incarnation is not counted."""
    from nodes.quiescence import owed_restarted

    progress = {"h1": {"sent": 5, "delivered": {"h2": 21}, "incarnations": {"h2": {"1": 1}}},
                "h3": {"sent": 5, "delivered": {"h2": 20}},
                "h2": {"incarnation": 1, "sent": 2, "delivered": {"h2": 2}}}
    assert owed_restarted(progress, ["h1", "h3"], ["h2"]) == {"h1": 1, "h3": 2}
    progress["h1"]["incarnations"]["h2"]["1"] = 2
    progress["h3"]["incarnations"] = {"h2": {"1": 2}}
    assert owed_restarted(progress, ["h1", "h3"], ["h2"]) == {"h1": 0, "h3": 0}
    progress["h3"]["incarnations"] = {"h2": {"2": 2}}  # another incarnation's: still owed
    assert owed_restarted(progress, ["h1", "h3"], ["h2"]) == {"h1": 0, "h3": 2}
    del progress["h2"]["incarnation"]
    assert owed_restarted(progress, ["h1", "h3"], ["h2"]) == {"h1": 0, "h3": 0}


def test_the_drain_waits_for_a_restarted_host_to_deliver_what_it_owes_from_its_join() -> None:
    """h3 restarted and joined h1's stream at h1:114 (its first delivery of h1): the correct
    hosts delivered h1:1..h1:150, so it owes 37 and has 30; a correct host further behind
    does not lower what is owed. h1's restarted incarnation counts from its own join point:
    h3 joined it at h1:1000002, h2 has h1:1000001..1000004, so h3 owes 3 and has 1. h3's own
    messages are `unsent_own`'s."""
    from nodes.quiescence import behind_restarted

    progress = {"h1": {"delivered": {"h1": 150}},
                "h2": {"delivered": {"h1": 140, "h3": 9}},
                "h3": {"incarnation": 1, "delivered": {"h1": 30, "h3": 2},
                       "first": {"h1": 114, "h3": 1_000_001}}}
    assert behind_restarted(progress, ["h1", "h2"], ["h3"]) == {"h3": 7}
    progress["h3"]["delivered"]["h1"] = 37
    assert behind_restarted(progress, ["h1", "h2"], ["h3"]) == {"h3": 0}
    progress["h2"]["delivered"]["h1"] = 144
    progress["h2"]["incarnations"] = {"h1": {"1": 4}}
    progress["h3"]["first"]["h1"] = 1_000_002
    progress["h3"]["delivered"]["h1"] = 1
    assert behind_restarted(progress, ["h2"], ["h3"]) == {"h3": 2}
