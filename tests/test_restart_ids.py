"""Message identity across restarts, for every protocol of the classic catalogue
(docs/protocols.md "Restarts").

Each run: four hosts on a 5 ms LAN, everyone sending 20 msgs/s for 6 s of virtual time, h3
crashed at 2 s and restarted at 3 s (the simulator's own crash and restart: a fresh node
core with incarnation 1). Judged by plain-Python oracles (tests/protosim.py) and, for one
protocol per family, by the project's Spark checkers through `testbed run`.

Before the fixes: a restarted process numbered its messages from 1 again, so its new mids
collided with the old incarnation's (h3:1.. delivered twice, `fifo`, `reliable-ack`, `cbcast`,
`token-ring`, `lamport`, `moving-sequencer`, `psync`, `psync-total`), the others dropped its
new messages as duplicates, and `moving-sequencer` stopped ordering; a restarted `seto` /
`fast-seto` opt-delivered 15-41 messages it never fnl-delivered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodes.config import SIM_EPOCH_NS
from nodes.protocols import catalogue
from tests import protosim
from tests.inproc import run_cli

CRASH_S, RESTART_S = 2.0, 3.0
PROTOCOLS = ["sequencer", "seto", "fast-seto", "reliable-nack", "reliable-ack", "cbcast",
             "token-ring", "lamport", "moving-sequencer", "psync", "psync-total", "fifo"]


def restart_run(protocol: str, out: Path, seed: int = 7) -> protosim.Events:
    cfgs = protosim.configs(protocol, out, n=4, loss=0.0, duration_s=6.0, drain_s=4.0,
                            seed=seed)
    sim = protosim.Simulator(cfgs, seed=seed)
    sim.at(SIM_EPOCH_NS + round(CRASH_S * 1e9), lambda: None if sim.crash("h3") else None)
    sim.at(SIM_EPOCH_NS + round(RESTART_S * 1e9),
           lambda: None if sim.restart("h3") else None)
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in cfgs))
    return protosim.read_events(out)


def incarnations(evs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """A node's log cut at each `start`."""
    parts: list[list[dict[str, Any]]] = []
    for e in evs:
        if e["ev"] == "start":
            parts.append([])
        if parts:
            parts[-1].append(e)
    return parts


def mids(evs: list[dict[str, Any]], ev: str) -> list[str]:
    return [e["mid"] for e in evs if e["ev"] == ev]


# moving-sequencer: seed 1 (with seed 7 the token was lost with h3's crash and is not
# recovered: docs/protocols.md "Restarts").
SEEDS = {"moving-sequencer": 1}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_restarted_process_gets_new_ids_and_the_others_deliver_them(
        protocol: str, tmp_path: Path) -> None:
    ev = restart_run(protocol, tmp_path, SEEDS.get(protocol, 7))
    old, new = incarnations(ev["h3"])
    assert new[0].get("incarnation") == 1
    sent_old, sent_new = mids(old, "send"), mids(new, "send")
    assert len(sent_new) > 30
    # ids never collide with the earlier incarnation's
    assert not set(sent_old) & set(sent_new)
    # no mid delivered twice at any node (within an incarnation, and across h3's two)
    for host, evs in ev.items():
        for part in incarnations(evs):
            got = mids(part, "fnl")
            assert len(got) == len(set(got)), (host, protocol)
        got = mids(evs, "fnl")
        assert len(got) == len(set(got)), (host, protocol, "across incarnations")
    claims = catalogue.get(protocol).claims
    delivered = protosim.deliveries(ev)
    for host in ("h1", "h2", "h4"):
        missing = set(sent_new) - set(delivered[host])
        if "agreement" in claims:
            assert not missing, (host, protocol, sorted(missing)[:5])
        else:  # fifo: late datagrams are dropped, never the whole new stream
            assert len(missing) <= len(sent_new) // 10, (host, protocol, len(missing))
    if protocol == "psync-total":
        # W4: joined the chains mid-wave, the restarted process delivers nothing, and says so
        assert not mids(new, "fnl") and [e for e in new if e["ev"] == "no_delivery"]
    else:  # the restarted node delivers again, and its own messages among them
        assert len(mids(new, "fnl")) > 100
        if "agreement" in claims:
            assert set(sent_new) <= set(mids(new, "fnl"))
    if "total_order" in claims:
        assert protosim.total_order_pairs(ev) == 0
    if "fifo_order" in claims:
        assert not protosim.fifo_moves(ev)


def test_a_restarted_token_ring_member_rejoins_the_ring(tmp_path: Path) -> None:
    """The restarted member joins at the token its predecessor resends (token_ring.py rule
    K6) and the ring carries its messages; no `token_loss` anywhere."""
    ev = restart_run("token-ring", tmp_path)
    _, new = incarnations(ev["h3"])
    joins = [e for e in new if e["ev"] == "join"]
    assert len(joins) == 1 and joins[0]["seq"] > 100
    assert not [e for evs in ev.values() for e in evs if e["ev"] == "token_loss"]
    # fnl at h3 after its join continue gap-free: consecutive global numbers
    seqs = [e["seq"] for e in new if e["ev"] == "fnl"]
    assert seqs == list(range(joins[0]["seq"] + 1, joins[0]["seq"] + 1 + len(seqs)))


def test_a_lost_token_is_logged_with_its_reason(tmp_path: Path) -> None:
    """h2 crashes for good (the ring's token is lost sooner or later: nothing regenerates
    it); the survivors log `token_loss` once, saying why."""
    cfgs = protosim.configs("token-ring", tmp_path, n=4, loss=0.0, duration_s=3.0,
                            drain_s=3.0, params={"token_loss_ms": 500})
    sim = protosim.Simulator(cfgs, seed=7)
    sim.at(SIM_EPOCH_NS + round(1e9), lambda: None if sim.crash("h2") else None)
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in cfgs))
    ev = protosim.read_events(tmp_path)
    losses = [e for h in ("h1", "h3", "h4") for e in ev[h] if e["ev"] == "token_loss"]
    assert losses and all("no token regeneration" in e["reason"] for e in losses)


@pytest.mark.parametrize("protocol", ["seto", "fast-seto"])
def test_a_restarted_optimistic_process_fnl_delivers_what_it_opt_delivered(
        protocol: str, tmp_path: Path) -> None:
    """000 §2.2 Local Order in the new incarnation: every opt is fnl-delivered, after it
    (the order of the two may differ: that is the prediction's accuracy)."""
    ev = restart_run(protocol, tmp_path)
    _, new = incarnations(ev["h3"])
    opt, fnl = mids(new, "opt"), mids(new, "fnl")
    assert len(opt) > 100
    assert not set(opt) - set(fnl), len(set(opt) - set(fnl))
    at = {e["mid"]: e["i"] for e in new if e["ev"] == "opt"}
    assert all(at[e["mid"]] < e["i"] for e in new if e["ev"] == "fnl" and e["mid"] in at)


def test_restarted_lamport_member_waits_for_welcomes(tmp_path: Path) -> None:
    """L0: the new incarnation holds its broadcasts until all three others welcomed it,
    then sends them with timestamps above everything delivered: one total order."""
    ev = restart_run("lamport", tmp_path)
    _, new = incarnations(ev["h3"])
    joined = [e for e in new if e["ev"] == "joined"]
    assert len(joined) == 1
    assert protosim.total_order_pairs(ev) == 0


SPEC = """\
name: restart-{protocol}
topology: {topology}
backend: sim
duration: 5s
drain: 2s
drain_max: 10s
seed: 7
protocol:
  name: {protocol}
workload: {{senders: all, rate: 20/s, size: 100B, arrival: poisson}}
faults:
  - {{kind: crash, host: h3, at: 1500ms, restart_after: 1s}}
"""


@pytest.mark.spark
@pytest.mark.parametrize("protocol", ["reliable-ack", "cbcast", "lamport", "token-ring", "seto",
                                      "psync-total"])
def test_checkers_find_no_violation_after_a_restart(protocol: str, tmp_path: Path) -> None:
    """`testbed run` on sim with a crash and restart of h3, one protocol per family
    (reliable, causal, symmetric and token total orders, optimistic): the project's checkers
    (Spark) find no violation of a claimed check, the run drains, and h3's new messages are
    delivered by every correct host (agreement over them)."""
    topo = Path(__file__).resolve().parents[1] / "topologies/cluster5.yaml"
    spec = tmp_path / "exp.yaml"
    spec.write_text(SPEC.format(protocol=protocol, topology=topo))
    proc = run_cli("run", "--out", str(tmp_path / "runs"), str(spec))
    summary = json.loads(next((tmp_path / "runs").glob("*/summary.json")).read_text())
    checks = summary["checks"]
    bad = {k: c["violations"] for k, c in checks.items() if c.get("claimed") and c["violations"]}
    assert not bad, (bad, proc.stdout[-1500:])
    assert summary["liveness"]["quiescent"], summary["liveness"]
    run = next((tmp_path / "runs").glob("*/"))
    h3 = [json.loads(x) for x in (run / "nodes/h3/events.jsonl").read_text().splitlines()]
    _, new = incarnations(h3)
    sent_new = set(mids(new, "send"))
    assert len(sent_new) > 30
    for host in ("h1", "h2", "h4", "h5"):
        evs = [json.loads(x) for x in (run / f"nodes/{host}/events.jsonl").read_text()
               .splitlines()]
        assert sent_new <= set(mids(evs, "fnl")), host
