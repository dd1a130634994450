"""Idle means idle: a group with nothing to send wakes for its failure detector and little
else (nodes/protocols/reliable.py "Control traffic": the tick runs only while there is work;
nodes/protocols/sequencer.py `CHECK`), and messages sent after idle spells on a lossy link
are still repaired. Whole nodes on the simulator."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from bench.idle_control import idle_datagrams
from testbed.explore.case import Base, Case, materialise, simulate

ON_RELIABLE = ("sequencer", "cbcast", "reliable-nack")


@pytest.mark.parametrize("protocol", ON_RELIABLE)
def test_an_idle_group_wakes_for_little_but_its_failure_detector(protocol: str) -> None:
    """Ten members, one 64-byte message in ten seconds (bench/idle_control.py): each member
    handles under 30 events a second -- the failure detector's probes and their timers.
    Failed before (the reliable layer's 10 ms tick at every member: 118 a second)."""
    r = idle_datagrams(10, protocol)
    assert r["events_per_member_per_s"] < 30, r
    assert r["datagrams"] > 0


def sparse_spec(protocol: str) -> dict[str, object]:
    """Three hosts on a LAN that loses 10 % of datagrams, each multicasting one message
    every 2.5 s (an idle spell before each) for 20 s."""
    names = ["h1", "h2", "h3"]
    return {
        "name": "sparse",
        "topology": {"name": "lossy-lan",
                     "sites": {"lan": {"lan": {"delay": "2ms", "loss": "10%"}}},
                     "hosts": [{"name": n, "site": "lan"} for n in names]},
        "backend": "sim",
        "duration": "20s",
        "drain": "5s",
        "seed": 7,
        "protocol": {"name": protocol},
        "workload": {"senders": "all", "rate": "0.4/s", "size": "64B",
                     "arrival": "constant"},
    }


@pytest.mark.parametrize("protocol", ("sequencer", "cbcast"))
def test_losses_after_idle_spells_are_repaired(protocol: str) -> None:
    """Every message sent after an idle spell on a 10 % lossy LAN is final-delivered by every
    host: the first message wakes the sleeping ticks, and the lost ones are NACKed (a gap, or
    a heartbeat that exposes a lost tail) and resent."""
    base = Base.from_data(sparse_spec(protocol))
    exp, topo = materialise(base, Case(1))
    with tempfile.TemporaryDirectory() as tmp:
        run, stats = simulate(exp, topo, Path(tmp), max_events=0, max_wall_s=0)
        sent: set[str] = set()
        fnl: dict[str, set[str]] = {}
        for log in sorted((run / "nodes").glob("*/events.jsonl")):
            got = fnl.setdefault(log.parent.name, set())
            for line in log.read_text().splitlines():
                e = json.loads(line)
                if e["ev"] == "send":
                    sent.add(e["mid"])
                elif e["ev"] == "fnl":
                    got.add(e["mid"])
    assert stats["lost"] > 0  # the link lost some
    assert len(sent) >= 3 * 7
    assert all(got == sent for got in fnl.values()), {h: sent - g for h, g in fnl.items()}
