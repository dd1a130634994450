"""The same Maelstrom broadcast program (tests/maelstrom_nodes/broadcast.py) on local, mininet
and docker over the two-sites WAN (docs/maelstrom.md, "Backends"): valid, its node-to-node
messages take the topology's delays (10 ms across the WAN, 0.5 ms within a site), the stable
latency is no shorter than the WAN, and on mininet the packet captures decode the agents'
datagrams."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.eventlogs import agent_ops, read_faults
from tests.inproc import maelstrom_run, run_cli

ROOT = Path(__file__).resolve().parents[1]
NODES = Path(__file__).resolve().parent / "maelstrom_nodes"
SITES = {"n0": "lisbon", "n1": "lisbon", "n2": "boston", "n3": "boston"}
NEEDS = {"mininet": "mininet", "docker": "docker"}  # the backend's Python module


def _run(tmp_path: Path, backend: str) -> tuple[int, dict[str, Any], Path, str]:
    r = run_cli("maelstrom", "test", "-w", "broadcast", "--bin", str(NODES / "broadcast.py"),
                "--net", str(ROOT / "topologies" / "two-sites.yaml"), "--time-limit", "4",
                "--rate", "20", "--settle", "1", "--backend", backend, "--out", str(tmp_path))
    runs = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    assert runs, r.stdout + r.stderr
    assert (runs[-1] / "summary.json").exists(), r.stdout + r.stderr  # the run's own words
    summary = json.loads((runs[-1] / "summary.json").read_text())
    return r.returncode, summary, runs[-1], r.stdout + r.stderr


@pytest.mark.root
@pytest.mark.timing  # real time: asserts latencies
@pytest.mark.parametrize("backend", ["local", "mininet", "docker"])
def test_broadcast_follows_the_wan_on_every_backend(tmp_path: Path, backend: str) -> None:
    if backend in NEEDS:
        pytest.importorskip(NEEDS[backend])
    code, s, run, out = _run(tmp_path, backend)
    m = s["maelstrom"]
    assert code == 0, out
    assert m["valid"] and m["lost"] == 0 and m["unexpected"] == 0
    # The clients ran during the workload, not only the final reads (4 per run).
    assert m["ops"]["total"] > 20 and m["acknowledged"] > 5, m["ops"]
    transit = m["transit_ms"]
    wan = {p: q["p50"] for p, q in transit.items() if SITES[p[:2]] != SITES[p[-2:]]}
    lan = {p: q["p50"] for p, q in transit.items() if SITES[p[:2]] == SITES[p[-2:]]}
    assert len(wan) == 8 and len(lan) == 4, transit
    assert min(wan.values()) >= 10.0, wan  # never faster than the WAN's 10 ms
    assert max(lan.values()) < 8.0, lan  # a LAN hop (0.5 ms) plus the agents' share
    # A value is stable once every node reads it: it had to cross the WAN first.
    assert m["stable_latency_ms"]["p50"] >= 10.0, m["stable_latency_ms"]
    print(f"{backend}: stable latency {m['stable_latency_ms']} ms, WAN transit p50 "
          f"{sorted(wan.values())}, LAN {sorted(lan.values())}")
    if backend != "mininet":
        return
    from analysis.pcap import read_pcap

    sent: Counter[str] = Counter()
    for events in sorted((run / "nodes").glob("*/events.jsonl")):
        for line in events.read_text().splitlines():
            ev = json.loads(line)
            if ev["ev"] == "nsend" and ev["dest"] != ev["src"]:
                sent[ev["type"]] += 1
    captured: Counter[str | None] = Counter()
    pcaps = sorted((run / "pcaps").glob("*.pcap"))
    assert len(pcaps) == 4
    for pcap in pcaps:
        rows = read_pcap(pcap).to_pylist()
        captured.update(r["tm_type"] for r in rows if r["tm_number"] is not None)
    # Each message leaves in at least one datagram, captured at the sender's interface and
    # again at the receiver's; the whole ones (within the snap length) show their type.
    assert set(sent) == {"gossip", "gossip_ok"}, sent
    assert sum(captured.values()) >= sum(sent.values()), (captured, sent)
    assert set(captured) - {None} == {"gossip", "gossip_ok"}, captured
    assert captured["gossip"] >= sent["gossip"] // 2, (captured, sent)


@pytest.mark.root
@pytest.mark.timing
@pytest.mark.parametrize("backend", ["mininet", "docker"])
def test_partition_kill_and_pause_reach_programs_on_emulated_hosts(tmp_path: Path,
                                                                   backend: str) -> None:
    """The nemeses as on local: a partition (iptables in the namespaces) cuts the program's
    messages between the halves and its retries carry them across after; `kill` and `pause`
    act on the program through its agent, whose clients see it go and come back."""
    pytest.importorskip(NEEDS[backend])
    run, _ = maelstrom_run(tmp_path / "p", "-w", "broadcast", "--bin", str(NODES / "broadcast.py"),
                        "--node-count", "4", "--time-limit", "4", "--rate", "20", "--settle",
                        "2", "--nemesis", "partition", "--nemesis-interval", "2.5", "--backend",
                        backend)
    faults = read_faults(run)
    start, stop = (next(f["t"] for f in faults if f["phase"] == phase)
                   for phase in ("start", "stop"))
    sent: set[tuple[str, str, int, int]] = set()
    got: set[tuple[str, str, int, int]] = set()
    for events in (run / "nodes").glob("*/events.jsonl"):
        for line in events.read_text().splitlines():
            ev = json.loads(line)
            if ev["ev"] in ("nsend", "nrecv") and ev.get("msg_id") is not None and \
                    ev["src"] != ev["dest"]:
                (sent if ev["ev"] == "nsend" else got).add(
                    (ev["src"], ev["dest"], ev["msg_id"], ev["t"] if ev["ev"] == "nsend" else 0))
    during = {(s, d, m) for s, d, m, t in sent if start + 50_000_000 < t < stop}
    arrived = {(s, d, m) for s, d, m, _ in got}
    assert during - arrived, "the partition cut nothing"  # messages between the halves lost
    summary = json.loads((run / "summary.json").read_text())["maelstrom"]
    assert summary["valid"] and summary["lost"] == 0  # ... and the retries made up for them

    run, _ = maelstrom_run(tmp_path / "k", "-w", "echo", "--bin", str(NODES / "clock.py"),
                        "--node-count", "2", "--time-limit", "3.2", "--rate", "30", "--settle",
                        "1", "--nemesis", "kill,pause", "--nemesis-interval", "1.5",
                        "--backend", backend)
    assert agent_ops(read_faults(run)) == [
        ("kill", "killed"), ("start", "starting"), ("pause", "paused"), ("resume", "running")]
    m = json.loads((run / "summary.json").read_text())["maelstrom"]
    assert m["restarts"] == 1 and m["program_exits"] == 0 and m["ops"]["info"] > 0


@pytest.mark.root
@pytest.mark.timing
def test_clock_nemesis_skews_a_program_in_a_docker_node(tmp_path: Path) -> None:
    """The node image carries Debian's libfaketime (testbed/images.py NODE_DEBS): the agent in
    the container preloads it, and one program's wall clock is off by the skew while the
    other's keeps true time, as on local."""
    pytest.importorskip("docker")
    r = run_cli("maelstrom", "test", "-w", "echo", "--bin", str(NODES / "clock.py"),
                "--node-count", "2", "--time-limit", "3", "--rate", "40", "--settle", "1",
                "--nemesis", "clock", "--nemesis-interval", "2", "--backend", "docker",
                "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    run = sorted(p for p in tmp_path.iterdir() if p.is_dir())[-1]
    faults = [json.loads(x) for x in (run / "faults.jsonl").read_text().splitlines()]
    assert [f["params"]["exec"][0] for f in faults] == ["skew", "skew"]
    skew_ms, host = faults[0]["params"]["exec"][1], faults[0]["hosts"][0]

    def offsets(h: str) -> list[float]:  # the program's wall clock minus its monotonic one
        return [float(w) - float(m) for line in (run / "nodes" / h / "node.log").read_text()
                .splitlines() if line.startswith("clock ") for _, w, m in [line.split()]]

    mine = offsets(host)
    assert len(mine) > 8
    shifts = [round((o - mine[-1]) * 1000) for o in mine]  # the last ones: true time again
    assert any(abs(d - skew_ms) < 100 for d in shifts), (skew_ms, shifts)
    assert all(abs(d - skew_ms) < 100 or abs(d) < 100 for d in shifts), shifts
    theirs = offsets(next(h for h in ("n0", "n1") if h != host))
    assert theirs and max(theirs) - min(theirs) < 0.1
    clock = json.loads((run / "summary.json").read_text())["maelstrom"]["clock"]
    assert clock["faked"] == [host] and clock["not_faked"] == [] and clock["skews"] == 2
    start = next(json.loads(x) for x in (run / "nodes" / host / "events.jsonl").read_text()
                 .splitlines() if '"ev":"start"' in x)
    assert start["faketime"].endswith("/faketime/libfaketime.so.1"), start
