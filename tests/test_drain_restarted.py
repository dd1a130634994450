"""The real-node drain waits for a restarted host that stays up: its messages since the
restart are held to agreement and validity (docs/architecture.md "Liveness"), so the drain
polls it with the correct hosts and keeps going, up to its cap, until it has delivered its
own messages (nodes/quiescence.py `unsent_own`)."""

from __future__ import annotations

import json
from pathlib import Path

from testbed.faults.schedule import Action, restarted_up
from tests.eventlogs import run_dir_of
from tests.inproc import run_cli

SPEC = """\
name: drain-restarted
topology:
  name: three
  hosts: [{name: h1}, {name: h2}, {name: h3}]
  matrix:
    h1: {h2: 2ms, h3: 800ms}
    h2: {h1: 2ms, h3: 800ms}
    h3: {h1: 2ms, h2: 2ms}
backend: local
duration: 6s
drain: 100ms
drain_max: 5s
seed: 1
protocol: {name: sequencer}
workload: {senders: all, rate: 20/s, size: 256B}
faults:
  - {kind: crash, host: h3, at: 1000ms, restart_after: 500ms}
"""


def act(op: str, at_ms: int, **params: object) -> Action:
    return Action(at_ns=at_ms * 1_000_000, op=op, params=dict(params))


def test_restarted_up_is_a_last_incarnation_that_stays_up() -> None:
    hosts = ["h1", "h2", "h3"]
    back = [act("crash", 1, host="h2"), act("restart", 2, host="h2")]
    assert restarted_up(hosts, back) == ["h2"]
    assert restarted_up(hosts, [*back, act("crash", 3, host="h2")]) == []
    cut = [*back, act("block", 4, cuts=[["h2", "h1"], ["h1", "h2"], ["h2", "h3"],
                                         ["h3", "h2"]])]
    assert restarted_up(hosts, cut) == []  # cut off at the end: not held to agreement
    assert restarted_up(hosts, [*cut, act("heal", 5)]) == ["h2"]


def test_a_restarted_hosts_own_messages_are_delivered_before_the_local_drain_stops(
        tmp_path: Path) -> None:
    """Paths to h3 are 800 ms long: the correct hosts have every message soon after the
    workload ends, h3 (crashed and restarted) gets the order of its own last messages 800 ms
    later; a drain that stopped at the correct hosts' quiescence would cut them off."""
    (tmp_path / "exp.yaml").write_text(SPEC)
    proc = run_cli("run", str(tmp_path / "exp.yaml"), "--no-analyze", "--out",
                   str(tmp_path / "runs"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = run_dir_of(tmp_path / "runs")
    events = {h: [json.loads(x) for x in (run / "nodes" / h / "events.jsonl").read_text()
                  .splitlines()] for h in ("h1", "h2", "h3")}
    # h3's second incarnation numbers its messages from 1,000,001
    own = {e["mid"] for e in events["h3"]
           if e["ev"] == "send" and int(e["mid"].split(":")[1]) > 1_000_000}
    assert len(own) > 10  # a restart that takes seconds on a loaded machine still leaves 3 s
    for host, evs in events.items():
        delivered = {e["mid"] for e in evs if e["ev"] == "fnl"}
        assert own <= delivered, (host, sorted(own - delivered)[:5])
    drain = json.loads((run / "drain.json").read_text())
    assert drain["quiescent"] is True and not drain.get("faulty_in_flight"), drain
