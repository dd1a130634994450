"""Emulation fidelity (analysis/fidelity.py, nodes/emulation.py): the checker's arithmetic on
synthetic measurements, the verdict it feeds, the spec key, and real local runs: a quiet one
reads faithful, one whose node is starved (stopped by signal, as a saturated CPU would
deschedule it) reads degraded with the transit named."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from analysis.fidelity import (
    MIN_SAMPLES,
    ConfiguredPath,
    by_construction,
    fidelity,
    parse_paths,
    quantiles,
)
from analysis.verdict import verdict
from nodes.emulation import EmulationProbe, bin_us
from nodes.wire import Header, Message, MsgType, encode
from testbed.spec.loader import SpecError, load_experiment

ROOT = Path(__file__).resolve().parents[1]
HOSTS = ("h1", "h2", "h3")


def hist(ms: list[float]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in ms:
        k = str(bin_us(round(v * 1e6)))
        out[k] = out.get(k, 0) + 1
    return out


def record(host: str, transit_ms: dict[str, list[float]], lost: int = 0) -> dict[str, Any]:
    """An `ev=emulation` event of `host`: datagrams from each peer with these transits, and
    as many sent to each peer as it sent itself (less `lost` arrivals at each peer)."""
    return {"ev": "emulation", "transit": {s: hist(v) for s, v in transit_ms.items()},
            "received": {s: len(v) - lost for s, v in transit_ms.items()},
            "sent": {d: len(next(iter(transit_ms.values()))) for d in HOSTS if d != host},
            "hold": hist([0.2] * 10), "lag": hist([1.0] * 50), "skew_ns": 0}


def paths(delay_ms: float = 20.0, loss: float = 0.0) -> dict[tuple[str, str], ConfiguredPath]:
    return {(a, b): ConfiguredPath(delay_ms, 0.0, loss) for a in HOSTS for b in HOSTS if a != b}


def records(transit: dict[tuple[str, str], list[float]]) -> dict[str, list[dict[str, Any]]]:
    """Per host its one event, from transits by (src, dst)."""
    return {h: [record(h, {s: v for (s, d), v in transit.items() if d == h})] for h in HOSTS}


def quiet(n: int = 200, delay: float = 20.0) -> dict[tuple[str, str], list[float]]:
    return {(a, b): [delay + 0.5 + (i % 10) * 0.3 for i in range(n)]
            for a in HOSTS for b in HOSTS if a != b}


def test_quantiles_of_bins() -> None:
    q = quantiles({int(k): v for k, v in hist([float(i) for i in range(1, 101)]).items()})
    assert q["count"] == 100 and q["p50_ms"] == 50.0 and q["p99_ms"] == 99.0
    assert bin_us(-2_345_678) == -2300 and bin_us(123_456_789) == 123_000
    assert bin_us(2_345_678_901) == 2_340_000


def test_faithful_when_transit_and_loss_are_as_configured() -> None:
    out = fidelity(records(quiet()), paths())
    assert out["status"] == "faithful", out
    assert out["judged_pairs"] == 6 and out["degraded_pairs"] == 0
    row = out["pairs"][0]
    assert row["p99_ms"] == pytest.approx(23.0, abs=0.2) and row["measured_loss"] == 0.0
    assert verdict({"fidelity": out})["ok"]


def test_transit_far_over_the_delay_is_degraded_with_the_pair_named() -> None:
    transit = quiet()
    transit[("h1", "h3")] = [20.5] * 190 + [2700.0] * 10  # a saturated machine's seconds
    out = fidelity(records(transit), paths(),
                   cpu_text='{"t": 1, "busy": 1.0, "cpus": 2, "load1": 9.5}\n')
    assert out["status"] == "degraded" and out["degraded_pairs"] == 1, out
    bad = [p for p in out["pairs"] if p["degraded"]]
    assert (bad[0]["src"], bad[0]["dst"], bad[0]["why"]) == ("h1", "h3", ["transit"])
    assert "h1->h3: 2700 ms for 20 ms configured" in out["cause"]
    assert "saturated in 1 of 1 samples" in out["cause"]
    v = verdict({"fidelity": out})
    assert not v["ok"] and v["reasons"] == [f"emulation degraded: {out['cause']}"]
    # `fidelity: best-effort`: still said, no longer failing
    v = verdict({"fidelity": {**out, "policy": "best-effort"}})
    assert v["ok"] and v["reasons"][0].startswith("emulation degraded: ")


def test_excess_within_the_allowance_is_faithful() -> None:
    # 0.5 x 100 ms is allowed over a 100 ms path: 140 ms at p99 is not degraded, 160 ms is
    ok = {k: [100.5] * 190 + [140.0] * 10 for k in quiet()}
    assert fidelity(records(ok), paths(100.0))["status"] == "faithful"
    bad = {k: [100.5] * 190 + [160.0] * 10 for k in quiet()}
    assert fidelity(records(bad), paths(100.0))["status"] == "degraded"


def test_loss_beyond_the_configured_is_degraded_within_it_is_not() -> None:
    recs = {h: [record(h, {s: v for (s, d), v in quiet().items() if d == h}, lost=20)]
            for h in HOSTS}  # 10% lost of 200
    out = fidelity(recs, paths())
    assert out["status"] == "degraded" and "loss beyond the configured" in out["cause"], out
    assert fidelity(recs, paths(loss=0.1))["status"] == "faithful"


def test_few_samples_and_faulted_hosts_are_not_judged() -> None:
    out = fidelity(records(quiet(n=MIN_SAMPLES - 1)), paths())
    assert out["status"] == "not judged" and out["judged_pairs"] == 0
    assert "fewer than" in out["pairs"][0]["note"]
    transit = quiet()
    transit[("h1", "h3")] = [3000.0] * 200
    out = fidelity(records(transit), paths(), faulted={"h3": "pause fault"})
    assert out["status"] == "faithful", out
    assert {p["note"] for p in out["pairs"] if not p["judged"]} == {"h3: pause fault"}
    out = fidelity(records(transit), paths(), not_judged="transport: tls")
    assert out["status"] == "not judged" and out["judged_pairs"] == 0, out


def test_clock_offsets_and_emulated_skew_are_taken_off() -> None:
    # dst's host clock 500 ms ahead (remote offsets), src's emulated clock 200 ms ahead of its
    # host clock: measured = 20 + 500 - 200
    transit = {k: [320.5] * 200 for k in quiet()}
    recs = records(transit)
    for r in recs["h1"]:
        r["skew_ns"] = 200_000_000
    offsets = {"h2": 500_000_000, "h3": 500_000_000, "h1": 0}
    out = fidelity(recs, {("h1", "h2"): ConfiguredPath(20.0), ("h1", "h3"): ConfiguredPath(20)},
                   offsets=offsets)
    assert out["status"] == "faithful", out
    assert {p["p99_ms"] for p in out["pairs"]} == {20.0}  # 1 ms bins above 100 ms


def test_paths_csv_and_the_simulator() -> None:
    got = parse_paths("src,dst,src_site,dst_site,delay_ms,jitter_ms,loss,bandwidth_bps\n"
                      "h1,h2,,,10.5,1,0.01,\nh2,h1,,,bad,0,0,\n")
    assert got == {("h1", "h2"): ConfiguredPath(10.5, 1.0, 0.01, None)}
    assert by_construction()["status"] == "faithful"


def test_probe_counts_own_stamped_data_only() -> None:
    probe = EmulationProbe()
    own = encode(Message(Header(MsgType.DATA, sender=2, origin=2, mno=1, ts=1_000_000_000)))
    relayed = encode(Message(Header(MsgType.DATA, sender=1, origin=2, mno=1, ts=1_000_000_000)))
    probe.arrived(own, 1_020_000_000)
    probe.arrived(relayed, 1_900_000_000)
    probe.arrived(b"garbage", 0)
    assert probe.transit == {2: {20_000: 1}} and probe.received == {2: 1}
    probe.handed(3)  # never heard from 3: not counted
    probe.handed(1)  # heard (the relay came from 1)
    assert probe.sent == {1: 1}
    fields = probe.fields({1: "h1", 2: "h2"}, 0)
    assert fields["transit"] == {"h2": {"20000": 1}} and fields["sent"] == {"h1": 1}


def test_spec_key_and_its_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "exp.yaml").write_text(spec("x", "fidelity: best-effort\n"))
    assert load_experiment(tmp_path / "exp.yaml")[0].fidelity == "best-effort"
    (tmp_path / "exp.yaml").write_text(spec("x", "fidelity: loose\n"))
    with pytest.raises(SpecError) as info:
        load_experiment(tmp_path / "exp.yaml")
    assert len(info.value.problems) == 1
    assert re.match(r".*exp\.yaml:\d+: fidelity: ", info.value.problems[0]), info.value.problems


# -- real runs -------------------------------------------------------------------------------

def spec(name: str, extra: str = "", duration: str = "6s") -> str:
    return (f"name: {name}\n"
            "topology:\n"
            "  name: three\n"
            "  hosts: [{name: h1}, {name: h2}, {name: h3}]\n"
            "  matrix:\n"
            "    h1: {h2: {delay: 20ms}, h3: {delay: 20ms}}\n"
            "    h2: {h1: {delay: 20ms}, h3: {delay: 20ms}}\n"
            "    h3: {h1: {delay: 20ms}, h2: {delay: 20ms}}\n"
            f"backend: local\nduration: {duration}\ndrain: 1s\nseed: 1\n"
            "protocol: {name: sequencer, params: {sequencer: h1}}\n"
            "workload: {rate: 60/s, size: 100B}\n" + extra)


def run(tmp_path: Path, text: str, during: Any = None) -> tuple[int, dict[str, Any], Path]:
    (tmp_path / "exp.yaml").write_text(text)
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "run", str(tmp_path / "exp.yaml"),
                             "--out", str(out), "--engine", "in-process"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    worker = None
    if during is not None:
        worker = threading.Thread(target=during, args=(out,), daemon=True)
        worker.start()
    text_out, _ = proc.communicate(timeout=240)
    if worker is not None:
        worker.join(timeout=30)
    runs = [p for p in out.iterdir() if p.is_dir()]
    assert len(runs) == 1, text_out
    return proc.returncode, json.loads((runs[0] / "summary.json").read_text()), runs[0]


def test_a_quiet_local_run_reads_faithful(tmp_path: Path) -> None:
    code, summary, _ = run(tmp_path, spec("quiet"))
    fid = summary["fidelity"]
    assert fid["status"] == "faithful", fid
    assert fid["judged_pairs"] >= 1 and fid["cpu"]["samples"] >= 1
    assert summary["ok"] and code == 0, summary["verdict"]


def starve(host: str, pauses: int = 2, stop_s: float = 0.8) -> Any:
    """Stop `host`'s node process (SIGSTOP, by pid from the run journal) `pauses` times once
    it is up (its `start` line) and the workload runs: what a saturated CPU does to a
    process, with no testbed fault recorded."""

    def act(out: Path) -> None:
        deadline = time.monotonic() + 120
        pid = start = None
        up = False
        while time.monotonic() < deadline and not (pid and start and up):
            for journal in out.glob("*/journal.jsonl"):
                for line in journal.read_text().splitlines():
                    rec = json.loads(line)
                    if rec.get("id") == f"node:{host}" and rec.get("op") == "create":
                        pid = int(rec["pid"])
                plan = journal.parent / "plan.json"
                if plan.is_file():
                    with contextlib.suppress(ValueError, KeyError):
                        start = int(json.loads(plan.read_text())["start_at_ns"])
                log = journal.parent / "nodes" / host / "events.jsonl"
                up = log.is_file() and '"ev":"start"' in log.read_text()
            time.sleep(0.05)
        assert pid is not None and start is not None and up
        time.sleep(max(1.0, (start - time.time_ns()) / 1e9 + 1.0))
        for _ in range(pauses):
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(stop_s)
            finally:
                os.kill(pid, signal.SIGCONT)
            time.sleep(1.0)

    return act


def test_a_starved_node_reads_degraded_with_the_transit_named(tmp_path: Path) -> None:
    # 10 s: a node that starts seconds late on a loaded machine still sends for long enough
    code, summary, run_dir = run(tmp_path, spec("starved", duration="10s"),
                                 during=starve("h2"))
    fid = summary["fidelity"]
    assert fid["status"] == "degraded", fid
    bad = {(p["src"], p["dst"]) for p in fid["pairs"] if p["degraded"]}
    # what reached h2 waited in its socket; on the local backend h2 shapes its own datagrams
    # too (nodes/linkmodel.py in its loop), so what it sent can be late as well
    assert bad & {("h1", "h2"), ("h3", "h2")} and all("h2" in pair for pair in bad), bad
    assert "p99 one-way transit over the configured delay" in fid["cause"]
    assert summary["verdict"]["safety"] == "held"
    assert f"emulation degraded: {fid['cause']}" in summary["verdict"]["reasons"]
    assert not summary["ok"] and code != 0
    report = (run_dir / "report.html").read_text()
    assert "Emulation fidelity" in report and "DEGRADED" in report


def test_a_starved_maelstrom_agent_makes_the_verdict_unknown(tmp_path: Path) -> None:
    """A Maelstrom program's messages are measured by their agents (`nsend` to `nrecv`):
    a stopped agent's pairs read degraded, the verdict says the emulation was, and
    Maelstrom's `valid?` is unknown (exit 2), not the program's fault."""
    out = tmp_path / "runs"
    program = ROOT / "tests" / "maelstrom_nodes" / "broadcast.py"
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "maelstrom", "test", "-w",
                             "broadcast", "--bin", str(program), "--node-count", "3",
                             "--time-limit", "8", "--rate", "100", "--latency", "5",
                             "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    worker = threading.Thread(target=starve("n1", pauses=2, stop_s=1.0), args=(out,),
                              daemon=True)
    worker.start()
    text_out, _ = proc.communicate(timeout=240)
    worker.join(timeout=30)
    run_dir = next(p for p in out.iterdir() if p.is_dir())
    summary = json.loads((run_dir / "summary.json").read_text())
    fid = summary["fidelity"]
    assert fid["status"] == "degraded", (fid, text_out)
    bad = {(p["src"], p["dst"]) for p in fid["pairs"] if p["degraded"]}
    assert bad and all("n1" in pair for pair in bad), bad
    assert f"emulation degraded: {fid['cause']}" in summary["verdict"]["reasons"]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid?"] == "unknown" and proc.returncode == 2, (results, text_out)
    assert any("harness was saturated" in n for n in results["notes"]), results["notes"]
