"""Reservations on mininet and docker (root): experiments/qos-htb-mininet.yaml. One HTB class per
reservation with the reserved rate (`tc -s class show`), a reservation over the host's
capacity refused with a one-line reason, `newRate` through the management endpoint changing
the class live without losing a message, and a misbehaving sender policed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from analysis.qos import qos_for_run
from analysis.record import read_record
from tests.eventlogs import run_dir_of

ROOT = Path(__file__).resolve().parents[1]


def _events(run: Path, host: str) -> list[dict[str, Any]]:
    path = run / "nodes" / host / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]


def _classes(ns_pid: int) -> list[dict[str, Any]]:
    """`tc -s class show dev qos0` in the host's namespace, parsed."""
    out = subprocess.run(["nsenter", "-t", str(ns_pid), "-n", "tc", "-s", "class", "show",
                          "dev", "qos0"], capture_output=True, text=True, timeout=10).stdout
    classes = []
    for block in re.split(r"\n(?=class )", out.strip()):
        m = re.search(r"class htb (\S+) .*?rate (\S+) ceil (\S+).*?Sent (\d+) bytes (\d+) pkt "
                      r"\(dropped (\d+)", block, re.S)
        if m:
            classes.append({"id": m[1], "rate": m[2], "ceil": m[3], "bytes": int(m[4]),
                            "dropped": int(m[6])})
    return classes


def _wait(run_dir: Path | None, out: Path, host: str, ev: str, timeout: float = 60
          ) -> tuple[Path, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if run_dir is None and any(out.glob("*/journal.jsonl")):
            run_dir = run_dir_of(out)
        if run_dir is not None:
            for e in _events(run_dir, host):
                if e["ev"] == ev:
                    return run_dir, e
        time.sleep(0.05)
    raise AssertionError(f"no ev={ev} at {host} within {timeout} s")


@pytest.mark.root
@pytest.mark.parametrize("backend", ["mininet", "docker"])
def test_reservations_are_htb_classes_renegotiated_live_and_policing(tmp_path: Path,
                                                                     backend: str) -> None:
    # Not under tmp_path: concurrent pytest sessions prune each other's old base temp
    # directories, and a run's journal must outlive this test's teardown.
    out = Path(tempfile.mkdtemp(prefix="testbed-qos-")) / "runs"
    # The spec's newRate is a timed mgmt fault; here `testbed mgmt` sends it as soon as the
    # class exists (a loaded machine may start nodes seconds late), and the overrun comes later.
    spec = (ROOT / "experiments" / "qos-htb-mininet.yaml").read_text()
    spec = spec[:spec.index("faults:")].replace("duration: 7s", "duration: 11s").replace(
        "{at: 5s, rate: 400/s", "{at: 9s, rate: 400/s")
    (tmp_path / "exp.yaml").write_text(spec)
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "run", str(tmp_path / "exp.yaml"),
                             "--backend", backend, "--out", str(out), "--no-analyze"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        run, granted = _wait(None, out, "h1", "reserve")
        journal = [json.loads(x) for x in (run / "journal.jsonl").read_text().splitlines()]
        ns_pid = next(e["ns_pid"] for e in journal if e.get("id") == "qos:h1")
        first = _classes(ns_pid)
        time.sleep(0.5)
        mgmt = subprocess.run([sys.executable, "-m", "testbed", "mgmt", "h1", "exec",
                               "testbed:type=QoS", "newRate", "100", "--runs", str(out)],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert mgmt.returncode == 0, mgmt.stderr
        assert json.loads(mgmt.stdout)["workload"]["rate_bps"] == 360_000
        _, renegotiated = _wait(run, out, "h1", "new-rate")
        assert not [e for e in _events(run, "h1") if e["ev"] == "overrun"], "machine too slow"
        time.sleep(0.3)
        second = _classes(ns_pid)
        used = subprocess.run([sys.executable, "-m", "testbed", "mgmt", "h1", "read",
                               "testbed:type=QoS", "Used", "--runs", str(out)], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        overran = any(e["ev"] == "overrun" for e in _events(run, "h1"))
        _, overrun = _wait(run, out, "h1", "overrun")
        time.sleep(1.0)
        third = _classes(ns_pid)
        log, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # a failed assertion above: undo what the run made
            proc.kill()
            proc.wait()
            subprocess.run([sys.executable, "-m", "testbed", "teardown", "--runs", str(out)],
                           cwd=ROOT, capture_output=True, timeout=120)
    assert proc.returncode == 0, log
    # One class per reservation, at the reserved rate (ceil = rate: held to it).
    assert granted["granted"] and granted["rate_bps"] == 180_000
    assert [(c["id"], c["rate"], c["ceil"]) for c in first] == [("1:10", "180Kbit", "180Kbit")]
    # newRate 100 through the management endpoint: the same class, changed in place (its
    # counters carry on: no rebuild), to the application's new rate.
    assert renegotiated["source"] == "mgmt"
    assert [(c["id"], c["rate"]) for c in second] == [("1:10", "360Kbit")]
    assert second[0]["bytes"] > first[0]["bytes"] and second[0]["dropped"] == 0
    # `Used` counts what the node sent since the change: 100/s x 2 x 144 B = 230 kbit/s (more
    # if the overrun, timed from the workload start, began before the read: nodes may start
    # seconds late on a loaded machine).
    assert used.returncode == 0, used.stderr
    assert 180_000 < json.loads(used.stdout)["workload"] < (10**7 if overran else 280_000)
    # The overrun (400/s against 360 kbit/s) is policed: the class drops.
    assert third[0]["dropped"] > 100
    # h3's capacity (100 kbit/s) cannot hold 180 kbit/s: refused, one line, said why.
    (h3,) = [e for e in _events(run, "h3") if e["ev"] == "reserve"]
    assert h3["granted"] is False and "\n" not in h3["reason"]
    assert "capacity 100 kbit/s (qos.rate)" in h3["reason"]
    # Nothing lost while the sender kept to its reservation, across the renegotiation:
    # every message h1 sent after h2 was up and before the overrun reached h2.
    h1, h2 = _events(run, "h1"), _events(run, "h2")
    up = next(e["t"] for e in h2 if e["ev"] == "start") + 200_000_000
    sent = {e["mid"] for e in h1 if e["ev"] == "send" and up <= e["t"] < overrun["t"]}
    assert len(sent) > 100
    assert sent <= {e["mid"] for e in h2 if e["ev"] == "fnl"}
    # Teardown removed the IFB device and clsact with the run.
    assert any(e.get("id") == "qos:h1" and e["op"] == "remove"
               for e in map(json.loads, (run / "journal.jsonl").read_text().splitlines()))
    shutil.rmtree(out.parent, ignore_errors=True)


def _bits(rate: str) -> float:
    """tc's rate ("86400bit", "180Kbit", "1Mbit") in bit/s."""
    m = re.fullmatch(r"([\d.]+)([KMG]?)bit", rate)
    assert m, rate
    return float(m[1]) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[m[2]]


def _wait_until(t_ns: int) -> None:
    time.sleep(max(0.0, (t_ns - time.time_ns()) / 1e9))


@pytest.mark.root
def test_qos_cbr_on_mininet_reserves_refuses_renegotiates_and_is_policed(tmp_path: Path) -> None:
    """Reservations on mininet with `qos-cbr` itself: experiments/qos-cbr-mininet.yaml
    as it is (its timed `newRate` faults), the classes read while the run is up."""
    out = Path(tempfile.mkdtemp(prefix="testbed-qoscbr-")) / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "run",
                             str(ROOT / "experiments" / "qos-cbr-mininet.yaml"), "--out", str(out),
                             "--no-analyze"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        run, _ = _wait(None, out, "h4", "reserve")
        start = json.loads((run / "plan.json").read_text())["start_at_ns"]
        journal = [json.loads(x) for x in (run / "journal.jsonl").read_text().splitlines()]
        ns = {h: next(e["ns_pid"] for e in journal if e.get("id") == f"qos:{h}")
              for h in ("h1", "h2", "h3", "h4")}
        first = {h: _classes(pid) for h, pid in ns.items()}
        # 3 s: `newRate 50` at h1 (granted), read before h2's at 5 s.
        _, renegotiated = _wait(run, out, "h1", "new-rate")
        time.sleep(0.3)
        second = _classes(ns["h1"])
        # 5 s: `newRate 50` at h2 (refused); qos-cbr ticks at 50/s over its 25/s class.
        _, refused = _wait(run, out, "h2", "refused")
        _wait_until(start + 6_700_000_000)
        policed = _classes(ns["h2"])
        # 7 s: the applications overrun to 100/s; h1's wire stays at its reserved 50/s.
        _, overrun = _wait(run, out, "h1", "overrun")
        _wait_until(overrun["t"] + 1_200_000_000)
        held = _classes(ns["h1"])
        log, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # a failed assertion above: undo what the run made
            proc.kill()
            proc.wait()
            subprocess.run([sys.executable, "-m", "testbed", "teardown", "--runs", str(out)],
                           cwd=ROOT, capture_output=True, timeout=120)
    assert proc.returncode == 0, log
    ev = {h: _events(run, h) for h in ("h1", "h2", "h3", "h4")}
    # One HTB class per reservation at the reserved rate: 3 peers x 25/s x 144 B = 86.4 kbit/s
    # (ceil = rate: held to it); h3's was refused, so h3 has none.
    for h in ("h1", "h2", "h4"):
        assert [(c["id"], _bits(c["rate"]), _bits(c["ceil"])) for c in first[h]] == [
            ("1:10", 86_400, 86_400)], (h, first[h])
    assert first["h3"] == []
    # h3's capacity (50 kbit/s) cannot hold it: refused, one line, said why, in `ev=reserve`.
    (h3,) = [e for e in ev["h3"] if e["ev"] == "reserve" and "granted" in e]
    assert h3["granted"] is False and "\n" not in h3["reason"]
    assert "86.4 kbit/s does not fit" in h3["reason"]
    assert "capacity 50 kbit/s (qos.rate)" in h3["reason"]
    # newRate through the management endpoint: the same class changed in place (its
    # counters carry on) to the new reservation, 172.8 kbit/s.
    assert renegotiated["source"] == "mgmt" and renegotiated["rate"] == 50
    (regrant,) = [e for e in ev["h1"] if e["ev"] == "reserve" and e.get("granted")
                  and e["t"] >= renegotiated["t"]]
    assert regrant["rate_bps"] == 172_800
    assert [(c["id"], _bits(c["rate"])) for c in second] == [("1:10", 172_800)]
    assert second[0]["bytes"] > first["h1"][0]["bytes"] and second[0]["dropped"] == 0
    # A misbehaving sender: h2's renegotiation was refused (the old class stays), yet it
    # sends at 50/s, twice its reservation: the class polices it (drops).
    assert "does not fit" in refused["reason"]
    assert [(c["id"], _bits(c["rate"])) for c in policed] == [("1:10", 86_400)]
    assert policed[0]["dropped"] > 20, policed
    sec = [e for e in ev["h2"] if e["ev"] == "net" and refused["t"] + 500_000_000 <= e["t"]
           < refused["t"] + 1_500_000_000]
    assert 45 <= len(sec) <= 55  # qos-cbr's own ticks: 50/s on the wire
    # The application's overrun does not reach the wire: qos-cbr sends one datagram per tick
    # (50/s at h1), the application's surplus waits in its queue, the class drops nothing.
    sec = [e for e in ev["h1"] if e["ev"] == "net" and overrun["t"] + 200_000_000 <= e["t"]
           < overrun["t"] + 1_200_000_000]
    apps = [e for e in ev["h1"] if e["ev"] == "send" and overrun["t"] + 200_000_000 <= e["t"]
            < overrun["t"] + 1_200_000_000]
    assert 45 <= len(sec) <= 55 and len(apps) >= 90
    assert held[0]["dropped"] == 0 and _bits(held[0]["rate"]) == 172_800
    # Nothing lost while every sender kept to its reservation, across h1's renegotiation:
    # every message sent before h2's refusal (h1, h3, h4: before their overrun) is delivered
    # at every node.
    fnl = {h: {e["mid"] for e in evs if e["ev"] == "fnl"} for h, evs in ev.items()}
    for h, evs in ev.items():
        until = refused["t"] if h == "h2" else next(e["t"] for e in evs if e["ev"] == "overrun")
        sent = {e["mid"] for e in evs if e["ev"] == "send" and e["t"] < until}
        assert len(sent) > 40, h
        for other in ev:
            assert sent <= fnl[other], (h, other, sorted(sent - fnl[other])[:5])
    # One total order: any two nodes deliver the messages they share in the same order.
    order = {h: [e["mid"] for e in evs if e["ev"] == "fnl"] for h, evs in ev.items()}
    for a in ev:
        for b in ev:
            common = fnl[a] & fnl[b]
            assert [m for m in order[a] if m in common] == [m for m in order[b] if m in common]
    # The analysis's `qos` section (summary.json `qos`, analysis/qos.py; Spark's checks are
    # left out for time): both refusals counted, Porders equal everywhere.
    qos = qos_for_run(read_record(run), SimpleNamespace(crashed=[], intervals=[]), list(ev))
    assert qos["refused"] == 2 and qos["assumptions_hold"] is False
    assert "2 reservation(s) refused" in qos["assumptions_violated"]
    assert qos["porder_mismatches"] == 0
    # Teardown removed every IFB device with the run.
    entries = [json.loads(x) for x in (run / "journal.jsonl").read_text().splitlines()]
    for h in ("h1", "h2", "h3", "h4"):
        assert any(e.get("id") == f"qos:{h}" and e["op"] == "remove" for e in entries), h
    shutil.rmtree(out.parent, ignore_errors=True)
