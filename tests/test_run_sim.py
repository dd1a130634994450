"""The sim backend end to end: latency as the topology predicts, reproducible to the byte,
and the reliable layer repairing loss."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.eventlogs import fnl_sequences, median_fnl_latency_ms, read_events, run_dir_of

ROOT = Path(__file__).resolve().parents[1]

TOPO = """\
name: t
sites:
  a: {lan: {delay: 1ms}}
  b: {lan: {delay: 3ms}}
wan:
  - {from: a, to: b, delay: 20ms}
  - {from: b, to: a, delay: 30ms}
hosts:
  - {name: h1, site: a}
  - {name: h2, site: a}
  - {name: h3, site: b}
  - {name: h4, site: b}
"""

EXP = """\
name: simtest
topology: topo.yaml
backend: sim
duration: {duration}
drain: 1s
seed: {seed}
protocol: {{name: sequencer, params: {{sequencer: {seq}}}}}
workload: {{rate: 40/s, size: 200B, arrival: poisson}}
"""


def predicted_ms(sender: str, receiver: str, sequencer: str) -> float:
    """Sender -> sequencer + sequencer -> receiver, from the spec's numbers above."""
    site = {"h1": "a", "h2": "a", "h3": "b", "h4": "b"}
    lan = {"a": 1.0, "b": 3.0}
    wan = {("a", "b"): 20.0, ("b", "a"): 30.0}

    def d(x: str, y: str) -> float:
        if x == y:
            return 0.0
        if site[x] == site[y]:
            return lan[site[x]]
        return lan[site[x]] / 2 + wan[(site[x], site[y])] + lan[site[y]] / 2

    return d(sender, sequencer) + d(sequencer, receiver)


def run(tmp_path: Path, name: str, *, seed: int = 7, duration: str = "10s", seq: str = "h3",
        topo: str = TOPO, backend: str = "sim") -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "topo.yaml").write_text(topo)
    (d / "exp.yaml").write_text(EXP.format(seed=seed, duration=duration, seq=seq))
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", str(d / "exp.yaml"),
                           "--backend", backend, "--out", str(d / "runs"), "--no-analyze"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run_dir_of(d / "runs")


def test_sim_median_latency_per_pair_matches_the_topology(tmp_path: Path) -> None:
    events = read_events(run(tmp_path, "lat"))
    medians = median_fnl_latency_ms(events)
    assert len(medians) == 16
    for (s, r), got in medians.items():
        want = predicted_ms(s, r, "h3")
        assert abs(got - want) <= 0.2 * want + 2.0, (s, r, got, want)


def test_sim_same_seed_gives_byte_identical_logs(tmp_path: Path) -> None:
    a = run(tmp_path, "a", seed=11, duration="3s")
    b = run(tmp_path, "b", seed=11, duration="3s")
    c = run(tmp_path, "c", seed=12, duration="3s")
    for host in ("h1", "h2", "h3", "h4"):
        la = (a / "nodes" / host / "events.jsonl").read_bytes()
        assert la == (b / "nodes" / host / "events.jsonl").read_bytes()
        assert la != (c / "nodes" / host / "events.jsonl").read_bytes()


@pytest.mark.parametrize("loss", ["5%", "20%"])
def test_sim_sequencer_delivers_everything_in_one_order_despite_loss(
        tmp_path: Path, loss: str) -> None:
    lossy = TOPO.replace("delay: 20ms}", f"delay: 20ms, loss: {loss}}}").replace(
        "delay: 30ms}", f"delay: 30ms, loss: {loss}}}")
    events = read_events(run(tmp_path, "loss", topo=lossy, duration="5s"))
    seqs = fnl_sequences(events)
    sent = {e["mid"] for evs in events.values() for e in evs if e["ev"] == "send"}
    ref = seqs["h1"]
    assert sorted(ref) == sorted(sent) and len(ref) == len(set(ref))
    for node, seq in seqs.items():
        assert seq == ref, node
