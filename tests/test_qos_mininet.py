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
from typing import Any

import pytest

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
