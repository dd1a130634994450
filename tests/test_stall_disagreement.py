"""An excused stall excuses missing progress, not disagreement (docs/architecture.md
"Liveness"): on a run `stalled-as-claimed`, messages some correct host delivered and another
never did fail agreement, unless a documented hazard voids it, and the verdict names the
disagreement either way."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from analysis.judge import judge_run
from analysis.record import read_record
from analysis.verdict import Fault, matching_hazards
from nodes.protocols import catalogue
from tests.eventlogs import run_dir_of
from tests.inproc import TWO_SITES, run_cli

# The sequencer crashes for good: a stall its claim excuses. No loss, so the survivors got
# every ORDER it sent and agree.
SPEC = """\
name: seqcrash
""" + TWO_SITES + """\
backend: sim
duration: 3s
drain: 1s
drain_max: 2s
seed: 1
protocol: {name: sequencer}
workload: {senders: all, rate: 20/s, size: 512B, arrival: poisson}
faults:
  - {kind: crash, host: h1, at: 1500ms}
"""


@pytest.fixture(scope="module")
def stalled_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("stalled")
    (d / "exp.yaml").write_text(SPEC)
    proc = run_cli("run", str(d / "exp.yaml"), "--backend", "sim", "--no-analyze",
                   "--out", str(d / "runs"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run_dir_of(d / "runs")


def test_an_excused_stall_where_the_survivors_agree_is_ok(stalled_run: Path) -> None:
    s = judge_run(read_record(stalled_run))
    assert s["verdict"]["ok"] and s["verdict"]["liveness"] == "stalled-as-claimed"
    assert s["checks"]["agreement"] == {**s["checks"]["agreement"], "violations": 0,
                                        "judged": True}
    assert not s["liveness"].get("disagreement")
    assert not any("disagree" in r for r in s["verdict"]["reasons"])


def test_an_excused_stall_where_correct_hosts_disagree_fails(stalled_run: Path,
                                                             tmp_path: Path) -> None:
    """h4's log loses its last two deliveries, which h2 and h3 made: two deliveries h4 never
    makes, on a run whose stall is excused."""
    run = tmp_path / "run"
    shutil.copytree(stalled_run, run)
    log = run / "nodes" / "h4" / "events.jsonl"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    last = [e["mid"] for e in events if e["ev"] == "fnl"][-2:]
    log.write_text("".join(json.dumps(e) + "\n" for e in events
                           if not (e["ev"] == "fnl" and e["mid"] in last)))
    s = judge_run(read_record(run))
    v = s["verdict"]
    assert not v["ok"] and v["safety"] == "violated" and v["liveness"] == "stalled-as-claimed"
    agreement = s["checks"]["agreement"]
    assert agreement["violations"] == 2 and agreement["claimed"] and agreement["judged"]
    assert agreement["missing_per_node"] == {"h4": 2}
    assert s["liveness"]["disagreement"] == 2 and "agreement" not in s["liveness"]["unproven"]
    assert "agreement: 2 violation(s)" in v["reasons"]
    assert ("correct hosts disagree: 2 deliveries some correct host made and another never "
            "did (agreement claimed: the stall excuses no disagreement)") in v["reasons"]


def test_the_sequencers_hazard_needs_the_sequencers_crash() -> None:
    """A crashed sequencer's lost ORDERs are repaired by nobody (000 §2.1 leaves it to a
    membership service); another member's crash keeps agreement (the sequencer relays)."""
    hosts = ["h1", "h2", "h3", "h4"]
    loss = Fault("loss", "lan loss")
    for name in ("sequencer", "seto", "fast-seto"):
        entry = catalogue.get(name)
        (only,) = matching_hazards(entry, {}, [Fault("crash", "h1", ("h1",)), loss], hosts)
        assert only[0].voids == {"agreement"}
        assert not matching_hazards(entry, {}, [Fault("crash", "h2", ("h2",)), loss], hosts)
        assert matching_hazards(entry, {"sequencer": "h2"},
                                [Fault("crash", "h2", ("h2",)), loss], hosts)
        assert not matching_hazards(entry, {}, [Fault("crash", "h1", ("h1",))], hosts)
