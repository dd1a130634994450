"""The remote backend on a lab of SSH hosts (root: containers): `testbed lab up`, quickstart
end to end over Ansible and SSH, idempotent prepare and shape, bad inventories failing in
prepare with one line naming the host, SIGKILL of the orchestrator then `testbed teardown`
with one lab host unreachable, and `testbed lab down` leaving nothing (docs/remote.md)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.eventlogs import median_fnl_latency_ms, read_events, run_dir_of
from tests.remotelab import testbed as _testbed

pytestmark = pytest.mark.root
ROOT = Path(__file__).resolve().parent.parent


def _ssh_processes(run_id: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if f"tb-ssh-{run_id}" in ln]


def _host_leftovers(inventory: Path, run_id: str) -> dict[str, str]:
    """On every lab host: the run's directory, processes, qdisc and iptables rules."""
    from testbed.backends.ansible import load_inventory

    out = {}
    probe = (f"ls -d /var/tmp/tb-{run_id} 2>/dev/null; "
             f"grep -l TESTBED_RUN_ID={run_id} /proc/[0-9]*/environ 2>/dev/null; "
             f"iptables-save | grep -- 'tb-{run_id}'; "
             "tc qdisc show | grep htb; pgrep -x tcpdump; true")
    for name, host in load_inventory(inventory).items():
        res = host.ssh().run(["sh", "-c", probe], check=False, timeout=60)
        lines = [ln for ln in res.stdout.splitlines() if ln.strip() and "/self/" not in ln]
        if lines:
            out[name] = "; ".join(lines)
    return out


def _spec(tmp_path: Path, duration: str = "6s") -> Path:
    spec = (ROOT / "experiments" / "quickstart.yaml").read_text()
    spec = re.sub(r"(?m)^duration: .*$", f"duration: {duration}", spec)
    spec = spec.replace("../topologies/", str(ROOT / "topologies") + "/")
    path = tmp_path / "exp.yaml"
    path.write_text(spec)
    return path


@pytest.mark.timing
def test_quickstart_on_the_remote_backend_total_order_pcaps_and_latency_per_pair(
        lab: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    proc = _testbed("run", str(_spec(tmp_path)), "--backend", "remote", "--inventory",
                    str(lab), "--out", str(out), "--no-analyze", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = run_dir_of(out)
    events = read_events(run)
    # one total order: every node's final deliveries are a prefix-consistent sequence
    orders = {n: [e["mid"] for e in evs if e["ev"] == "fnl"] for n, evs in events.items()}
    sent = {e["mid"] for evs in events.values() for e in evs if e["ev"] == "send"}
    assert len(sent) > 4 * 6 * 50 * 0.7
    for n, order in orders.items():
        assert sorted(order) == sorted(sent), n  # agreement and validity: all, once
        assert order == orders["h1"], n
    # latency per pair against the topology (sequencer h1: s -> h1 -> r), 20% + 4 ms: a loaded
    # machine adds scheduling delay to the containers' nodes (a 0.5 ms pair read 2.7 ms once),
    # and 4 ms still tells a LAN pair (0.5-1 ms) from a WAN one (10.5 ms and more)
    from testbed.spec.loader import load_topology

    paths = load_topology(ROOT / "topologies" / "two-sites.yaml").paths()

    def d(a: str, b: str) -> float:
        return 0.0 if a == b else paths.get(a, b).delay_ns / 1e6

    for (s, r), got in median_fnl_latency_ms(events).items():
        want = d(s, "h1") + d("h1", r)
        assert abs(got - want) <= 0.2 * want + 4.0, (s, r, got, want)
    manifest = yaml.safe_load((run / "pcaps" / "manifest.json").read_text())
    assert {m["host"] for m in manifest} == {"h1", "h2", "h3", "h4"}
    assert all(m["packets"] > 100 for m in manifest)
    lock = yaml.safe_load((run / "spec.lock.yaml").read_text())
    assert set(lock["clocks"]) == {"h1", "h2", "h3", "h4"}
    # one kernel clock in the lab: the measured offsets are within their uncertainty + 1 ms
    assert all(abs(c["offset_ms"]) <= c["uncertainty_ms"] + 1.0
               for c in lock["clocks"].values())
    # plan.json holds the shaping as realised on the hosts: their data interface and address
    from testbed.backends.ansible import load_inventory

    inv = load_inventory(lab)
    tc = json.loads((run / "plan.json").read_text())["shaping"]["h1"]
    assert f"tc qdisc add dev {inv['h1'].data_interface} root handle 1: htb default 2" in tc
    assert any(f"match ip dst {inv['h2'].data_address}/32" in line for line in tc)
    run_id = run.name.rsplit("-", 1)[1]
    assert _host_leftovers(lab, run_id) == {}
    time.sleep(6)  # the SSH masters' ControlPersist
    assert _ssh_processes(run_id) == []


def _backend(tmp_path: Path, inventory: Path, hosts: list[str] | None = None) -> Any:
    from testbed.backends.remote import RemoteBackend
    from testbed.rundir import RunDir
    from testbed.spec.loader import load_topology

    topo = load_topology(ROOT / "topologies" / "two-sites.yaml")
    if hosts is not None:
        topo = topo.model_copy(update={"hosts": [h for h in topo.hosts if h.name in hosts]})
    run = RunDir.create(tmp_path / "runs", "remote-test")
    return RemoteBackend(run, topo, topo.paths(), inventory=inventory, capture=None)


def test_prepare_and_shape_twice_the_second_run_changes_nothing(lab: Path,
                                                                tmp_path: Path) -> None:
    from testbed.teardown import teardown

    b = _backend(tmp_path, lab)
    try:
        b.up()  # prepare, clocks, shape
        again = [b.prepare(), b.shape()]
        for res in again:
            assert res.problems == {}
            assert res.changed == {"h1": 0, "h2": 0, "h3": 0, "h4": 0}, res.step
        # and the shaping is there: the HTB root and the delay line's rule on h1
        qdisc = b.hosts["h1"].run(["tc", "qdisc", "show", "dev", b.plans["h1"].dev]).stdout
        assert "htb 1: root" in qdisc
    finally:
        b.down()
        teardown(b.run)
    assert _host_leftovers(lab, b.run.run_id) == {}


def test_bad_inventories_fail_in_prepare_with_one_line_naming_each_host(
        lab: Path, tmp_path: Path) -> None:
    """Unknown host (h1), unreachable address (h2), wrong key (h3), missing interface (h4)."""
    from testbed.backends.base import BackendError

    inv = yaml.safe_load(lab.read_text())
    hosts = inv["hosts"]
    hosts["h1"]["address"] = "no-such-host.invalid"
    # in the lab's control /24, held by nobody
    hosts["h2"]["address"] = re.sub(r"\.\d+$", ".200", hosts["h2"]["address"])
    key = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    hosts["h3"]["key"] = str(key)
    hosts["h4"]["data_interface"] = "eth9"
    bad = tmp_path / "hosts.yaml"
    bad.write_text(yaml.safe_dump(inv))
    b = _backend(tmp_path, bad)
    with pytest.raises(BackendError) as exc:
        b.up()
    message = str(exc.value)
    assert "\n" not in message and message.startswith("prepare failed on h1: "), message
    reasons = dict(part.split(": ", 1) for part in message[len("prepare failed "):].split("; on "))
    reasons = {k.removeprefix("on "): v for k, v in reasons.items()}
    assert set(reasons) == {"h1", "h2", "h3", "h4"}, message
    assert "unreachable" in reasons["h1"] and "resolve" in reasons["h1"], reasons["h1"]
    assert "unreachable" in reasons["h2"], reasons["h2"]
    assert "unreachable" in reasons["h3"] and "ermission denied" in reasons["h3"], reasons["h3"]
    assert "no data interface eth9" in reasons["h4"], reasons["h4"]
    shaped = [e for e in b.run.journal.entries() if e.get("step") in ("shape", "start")]
    assert shaped == []  # nothing shaped or started
    b.down()


def test_sigkill_mid_run_then_teardown_leaves_nothing_and_names_a_stopped_host(
        lab: Path, tmp_path: Path) -> None:
    import docker

    out = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "run", str(_spec(tmp_path, "30s")),
                             "--backend", "remote", "--inventory", str(lab), "--out", str(out),
                             "--no-analyze"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=(tmp_path / "stderr").open("w"))
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:  # mid-run: every node reported its endpoint
            if out.exists() and any(out.iterdir()) and len(
                    list(run_dir_of(out).glob("nodes/*/control.json"))) == 4:
                break
            assert proc.poll() is None, (tmp_path / "stderr").read_text()
            time.sleep(0.2)
        time.sleep(1.0)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    run = run_dir_of(out)
    run_id = run.name.rsplit("-", 1)[1]
    inv = yaml.safe_load(lab.read_text())
    stopped = f"{inv['lab']}-h4"
    c = docker.from_env()
    try:
        c.api.pause(stopped)  # h4 unreachable: teardown must still clean h1-h3 and name h4
        down = _testbed("teardown", run.name, "--runs", str(out))
        assert down.returncode == 0, down.stdout + down.stderr
        assert "NOT cleaned: h4" in down.stdout, down.stdout
        left = _host_leftovers_some(lab, run_id, ["h1", "h2", "h3"])
        assert left == {}
    finally:
        c.api.unpause(stopped)
        c.close()
    again = _testbed("teardown", run.name, "--runs", str(out))  # h4 back: cleaned now
    assert again.returncode == 0, again.stdout + again.stderr
    assert _host_leftovers(lab, run_id) == {}


def _host_leftovers_some(inventory: Path, run_id: str, hosts: list[str]) -> dict[str, str]:
    data = yaml.safe_load(inventory.read_text())
    data["hosts"] = {h: s for h, s in data["hosts"].items() if h in hosts}
    part = inventory.parent / f"part-{run_id}.yaml"
    part.write_text(yaml.safe_dump(data))
    try:
        return _host_leftovers(part, run_id)
    finally:
        part.unlink()


FAULTS_EXP = """\
name: remote-faults
topology:
  name: four
  sites:
    a: {lan: {delay: 1ms}}
    b: {lan: {delay: 1ms}}
  wan: [{between: [a, b], delay: 15ms}]
  hosts:
    - {name: h1, site: a}
    - {name: h2, site: a}
    - {name: h3, site: a}
    - {name: h4, site: b}
duration: 11s
drain: 3s
protocol: {name: sequencer, params: {sequencer: h1}}
workload: {rate: 30/s, size: 200B, arrival: poisson}
faults:
  - {kind: partition, isolate: h4, at: 2s, for: 4s}
  - {kind: crash, host: h3, at: 3s, restart_after: 3s}
  - {kind: clock, host: h2, at: 5s, jump: 50ms}
  - {kind: link, between: [h1, h2], at: 7s, for: 2s, delay: 30ms}
"""


@pytest.mark.timing
def test_the_fault_schedule_runs_on_the_remote_backend_with_measured_effects(
        lab: Path, tmp_path: Path) -> None:
    import json

    from tests.eventlogs import fnl_sequences

    (tmp_path / "exp.yaml").write_text(FAULTS_EXP)
    out = tmp_path / "runs"
    proc = _testbed("run", str(tmp_path / "exp.yaml"), "--backend", "remote", "--inventory",
                    str(lab), "--out", str(out), "--no-analyze", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = run_dir_of(out)
    events = read_events(run)
    seqs = fnl_sequences(events)
    sent = {e["mid"] for evs in events.values() for e in evs if e["ev"] == "send"}
    ref = seqs["h1"]
    pos = {m: i for i, m in enumerate(ref)}
    for node, seq in seqs.items():
        assert len(seq) == len(set(seq)) and set(seq) <= sent, node  # integrity
        idx = [pos[m] for m in seq]
        assert idx == sorted(idx), node  # one total order (h3 per incarnation)
    for node in ("h2", "h4"):  # agreement among the correct, the isolated h4 caught up
        assert seqs[node] == ref, node
    history = [json.loads(x) for x in (run / "faults.jsonl").read_text().splitlines()]
    by = {(h["kind"], h["phase"]): h["measured"] for h in history}
    # iptables on the hosts: one DROP rule on h4 per peer, and one on each peer towards h4
    assert by[("partition", "start")]["drop_rules"] == {"h4": 3, "h1": 1, "h2": 1, "h3": 1}
    suspected = by[("partition", "stop")]["suspected_before_heal"]
    assert "h4" in suspected["h1"] and "h2" not in suspected["h1"]
    assert by[("crash", "start")]["alive"] is False
    assert by[("crash", "stop")]["alive"] is True
    assert by[("clock", "start")]["clock"]["OffsetMs"] == 50.0
    assert by[("link", "start")]["paths"]["h1"]["delay_ms"] == 30.0
    assert by[("link", "stop")]["paths"]["h2"]["delay_ms"] == 1.0
    starts = [e for e in events["h3"] if e["ev"] == "start"]
    assert [s.get("incarnation") for s in starts] == [0, 1]
    # the +50 ms jump shows in lt - t on h2, from the fault time on
    h2_skew = [e["lt"] - e["t"] for e in events["h2"] if e["ev"] == "fnl"]
    assert h2_skew[0] == 0 and h2_skew[-1] == 50_000_000


MAELSTROM_NODES = ROOT / "tests" / "maelstrom_nodes"


@pytest.mark.timing
def test_a_maelstrom_program_runs_on_the_remote_hosts_valid_and_invalid(
        lab: Path, tmp_path: Path) -> None:
    """`testbed maelstrom test --backend remote` (docs/maelstrom.md): the program's directory
    (broadcast.py imports mnode.py beside it) is copied into the run's directory on every
    host, the agents run it there; gossip with retries is valid, a broadcast that never
    forwards loses values and is invalid. Nothing is left on the hosts."""
    def run(out: Path, *extra: str) -> tuple[int, dict[str, Any], Path, str]:
        proc = _testbed("maelstrom", "test", "-w", "broadcast", "--bin",
                        str(MAELSTROM_NODES / "broadcast.py"), "--node-count", "4",
                        "--time-limit", "4", "--rate", "20", "--settle", "2", "--latency", "2",
                        "--backend", "remote", "--inventory", str(lab), "--out", str(out),
                        *extra, timeout=600)
        run_dir = run_dir_of(out)
        summary = json.loads((run_dir / "summary.json").read_text())
        return proc.returncode, summary, run_dir, proc.stdout

    code, s, run_dir, out = run(tmp_path / "ok")
    m = s["maelstrom"]
    assert code == 0, out
    assert out.rstrip().splitlines()[-1].startswith("Everything looks good!"), out
    assert m["valid"] and m["lost"] == 0 and m["acknowledged"] > 5, m
    assert m["names"] == {"h1": "n0", "h2": "n1", "h3": "n2", "h4": "n3"}, m["names"]
    assert m["server_messages"] > 0 and min(q["p50"] for q in m["transit_ms"].values()) >= 1.5
    run_id = run_dir.name.rsplit("-", 1)[1]
    starts = [e for e in read_events(run_dir)["h1"] if e["ev"] == "start"]
    # the agent ran the copy on the host, not a path of this machine
    assert starts[0]["program"] == [f"/var/tmp/tb-{run_id}/program/0/broadcast.py"], starts
    lock = yaml.safe_load((run_dir / "spec.lock.yaml").read_text())
    assert lock["experiment"]["inventory"] == str(lab) and set(lock["clocks"]) == {
        "h1", "h2", "h3", "h4"}
    assert _host_leftovers(lab, run_id) == {}

    code, s, run_dir, out = run(tmp_path / "lost", "--", "--no-forward")
    assert code == 1, out
    assert out.rstrip().splitlines()[-1].startswith("Analysis invalid!"), out
    assert s["maelstrom"]["lost"] > 0 and s["checks"]["maelstrom_lost"]["violations"] > 0
    assert s["maelstrom"]["ops"]["total"] > 20
    assert _host_leftovers(lab, run_dir.name.rsplit("-", 1)[1]) == {}
