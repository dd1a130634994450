"""SETO's delay estimation after a healed partition (nodes/protocols/seto.py, "Delta compares o
as the current delays plan it"): `testbed explore` seed 2042 -- h4 crashes at 262 ms and
restarts 149 ms later, a majorities-ring partition holds from 841 ms for 854 ms. At the heal a
burst of ORDERs named messages h4 had received ~750 ms apart; every pair of the burst applied
the same correction again, h4's delay for h2 grew to seconds, its hint made the sequencer hold
its own messages that long, and the run stalled (liveness) with h1:41.. never delivered."""

from __future__ import annotations

from pathlib import Path

from testbed.explore.case import failing_checks, judge, simulate
from testbed.spec.loader import load_experiment
from tests.inproc import TWO_SITES

SPEC = """\
name: seto-burst
""" + TWO_SITES + """\
backend: sim
duration: 3s
drain: 1s
drain_max: 5s
seed: 2042
protocol:
  name: seto
workload:
  senders: all
  rate: 20/s
  size: 512B
  arrival: poisson
faults:
- kind: crash
  host: h4
  at: 262ms
  restart_after: 149ms
- kind: partition
  shape: majorities-ring
  at: 841ms
  for: 854ms
"""


def test_a_burst_of_orders_after_a_heal_does_not_stall_seto(tmp_path: Path) -> None:
    path = tmp_path / "seto-burst.yaml"
    path.write_text(SPEC)
    exp, topo = load_experiment(path, "sim")
    run_dir, _ = simulate(exp, topo, tmp_path / "run")
    summary = judge(run_dir)
    assert failing_checks(summary, ()) == []
    sent = sum((run_dir / "nodes" / h / "events.jsonl").read_text().count('"ev":"send"')
               for h in ("h1", "h2", "h3", "h4"))
    for host in ("h1", "h2", "h3"):  # never crashed: every message final-delivered
        log = (run_dir / "nodes" / host / "events.jsonl").read_text()
        assert log.count('"ev":"fnl"') == sent
