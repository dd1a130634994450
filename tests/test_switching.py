"""The `switching` layer (001 ch. 2, Fig. 2.1; RABP and stop-the-flow baselines of §2.2.2) on
the deterministic simulator, its management operation, its spec checks, and one short full
run on sim and on local.

Why the properties hold (001 §2.1, Fig. 2.1): every member's flag goes through the old instance,
which is total and FIFO, so the prefix of the old order delivered before the switch ends is
the same everywhere; every message outside it was also sent on the new instance; the layer's
watermark drops the second copy. So the per-node delivery sequences are identical, with no
duplicate and no loss, whatever the loss, jitter and switch timing.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from analysis.record import read_record
from nodes.management.jolokia import Jolokia
from nodes.management.node_mbeans import build_node_registry
from nodes.protocols.base import Layer
from nodes.protocols.switching import Switching
from nodes.sim import SIM_EPOCH_NS, Simulator
from testbed.spec.loader import SpecError, load_experiment
from tests import protosim
from tests.eventlogs import read_events, run_dir_of

ROOT = Path(__file__).resolve().parents[1]
MBEAN = "testbed:type=TotalOrder,protocol=switching"
TWO_SEQUENCERS = [{"name": "a", "protocol": "sequencer", "params": {"sequencer": "h1"}},
                  {"name": "b", "protocol": "sequencer", "params": {"sequencer": "h3"}}]


def switch_every_second(sim: Simulator, seconds: int) -> None:
    """A management `switchTo` each second, from a different host each time, alternating."""
    def request(k: int) -> None:
        core = sim.cores[k % len(sim.cores)]
        layer = core.protocol
        assert isinstance(layer, Switching)
        target = next(n for n in layer.names if n != layer.current)
        # refused while the previous switch has not finished everywhere (negative control)
        with contextlib.suppress(ValueError):
            layer.request_switch(target, core.clock.local(sim.now))

    for k in range(1, seconds):
        sim.at(SIM_EPOCH_NS + k * 1_000_000_000, functools.partial(request, k))


def run_switching(out: Path, params: dict[str, Any], *, seconds: int = 6, loss: float = 0.02,
                  matrix_ms: list[list[float]] | None = None,
                  patch: Any = None) -> protosim.Events:
    cfgs = protosim.configs("switching", out, params=params, duration_s=seconds, loss=loss,
                            rate=25, n=4, drain_s=2, matrix_ms=matrix_ms)
    sim = Simulator(cfgs, seed=7)
    if patch is not None:
        for nid, core in sim.cores.items():
            patch(nid, core.protocol)
    switch_every_second(sim, seconds)
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in cfgs))
    return protosim.read_events(out)


def findings(events: protosim.Events) -> dict[str, Any]:
    sent = {e["mid"] for evs in events.values() for e in evs if e["ev"] == "send"}
    fnl = protosim.deliveries(events)
    return {
        "duplicates": sum(n - 1 for mids in fnl.values()
                          for n in collections.Counter(mids).values()),
        "missing": sum(len(sent - set(mids)) for mids in fnl.values()),
        "total_order": protosim.total_order_pairs(events),
        "fifo": sum(protosim.fifo_moves(events).values()),
        "same_sequence": len({tuple(m) for m in fnl.values()}) == 1,
    }


def ends(events: protosim.Events, host: str) -> list[dict[str, Any]]:
    return [e for e in events[host] if e["ev"] == "switch" and e.get("phase") == "end"]


def rendered_switches(run: Path) -> tuple[list[dict[str, Any]], str]:
    """The per-switch rows analysis/switching.py computes for a run (without Spark: the
    deliveries straight from the logs) and the report's rendering of them."""
    from analysis.report import render_report
    from analysis.switching import _per_switch, scheduled_switches, switch_events

    events = read_events(run)
    sends = {e["mid"]: e["t"] for evs in events.values() for e in evs if e["ev"] == "send"}
    per_node = {h: [(e["t"], e.get("proto") or "", sends.get(e["mid"])) for e in evs
                    if e["ev"] == "fnl"] for h, evs in events.items()}
    record = read_record(run)
    per = _per_switch(switch_events(record), per_node, scheduled_switches(record))
    return per, render_report({"run": run.name, "switching": {"per_switch": per}})


CASES: dict[str, dict[str, Any]] = {
    "live": {"mode": "live"},
    "rabp": {"mode": "rabp"},
    "stop": {"mode": "stop"},
    "payload-once": {"mode": "live", "payload_once": True},
    "null-timeout-0": {"mode": "live", "null_timeout_ms": 0},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_switching_between_two_sequencers_keeps_one_total_order(tmp_path: Path,
                                                               case: str) -> None:
    events = run_switching(tmp_path, {**CASES[case], "instances": TWO_SEQUENCERS})
    got = findings(events)
    assert got == {"duplicates": 0, "missing": 0, "total_order": 0, "fifo": 0,
                   "same_sequence": True}
    for host in events:
        assert len(ends(events, host)) == 5, host
        labels = {e["proto"] for e in events[host] if e["ev"] == "fnl"}
        assert labels == {"switching#a", "switching#b"}  # each delivery names its instance


@pytest.mark.parametrize("other", ["lamport", "token-ring"])
def test_switching_between_a_sequencer_and_a_symmetric_protocol(tmp_path: Path,
                                                               other: str) -> None:
    instances = [{"name": "seq", "protocol": "sequencer"}, {"name": "sym", "protocol": other}]
    events = run_switching(tmp_path, {"instances": instances})
    assert findings(events)["duplicates"] == 0
    assert findings(events)["missing"] == 0
    assert findings(events)["same_sequence"]
    assert len(ends(events, "h1")) == 5


def test_early_deliveries_of_the_new_instance_are_kept_at_a_late_node(tmp_path: Path) -> None:
    """h5 is 40 ms from everyone, the others 1 ms apart: they finish each switch and send on
    the new instance long before h5 meets SWITCH, so h5 gets the new instance's datagrams
    before it has created the instance (`switch_early`,
    docs/protocols.md): dropping them would lose them."""
    far = 40.0
    matrix = [[0.0 if i == j else (far if 4 in (i, j) else 1.0) for j in range(5)]
              for i in range(5)]
    events = run_switching(tmp_path, {"instances": TWO_SEQUENCERS}, matrix_ms=matrix)
    assert sum(e["datagrams"] for e in events["h5"] if e["ev"] == "switch_early") > 0
    assert findings(events) == {"duplicates": 0, "missing": 0, "total_order": 0, "fifo": 0,
                                "same_sequence": True}


def test_a_node_ending_the_switch_on_its_own_flag_is_caught(tmp_path: Path) -> None:
    """Negative control: ending the switch without every member's flag (Fig. 2.1 l.16 read
    as "my flag") puts nodes at different switch points; the oracles must see it."""
    def patch(nid: int, layer: Layer) -> None:
        assert isinstance(layer, Switching)
        layer.all = frozenset({nid})

    events = run_switching(tmp_path, {"instances": TWO_SEQUENCERS}, patch=patch, loss=0.0)
    got = findings(events)
    assert got["duplicates"] + got["missing"] + got["total_order"] > 0
    assert not got["same_sequence"]


def test_switch_to_over_jolokia_and_its_bad_input(tmp_path: Path) -> None:
    cfgs = protosim.configs("switching", tmp_path, params={"instances": TWO_SEQUENCERS},
                            duration_s=3, rate=20, loss=0.0)
    sim = Simulator(cfgs, seed=3)
    core = sim.cores[1]
    jolokia = Jolokia(build_node_registry(core, true_now=lambda: sim.now))
    layer = core.protocol
    assert isinstance(layer, Switching)
    replies: dict[str, Any] = {}

    def call(tag: str, *args: str) -> None:
        replies[tag] = jolokia.handle({"type": "exec", "mbean": MBEAN, "operation": "switchTo",
                                       "arguments": list(args)})

    sim.at(SIM_EPOCH_NS + 500_000_000, lambda: call("unknown", "zz"))
    sim.at(SIM_EPOCH_NS + 600_000_000, lambda: call("current", "a"))
    sim.at(SIM_EPOCH_NS + 1_000_000_000, lambda: call("ok", "b"))
    sim.at(SIM_EPOCH_NS + 1_001_000_000, lambda: call("busy", "a"))
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in cfgs))
    for tag in ("unknown", "current", "busy"):
        assert replies[tag]["status"] == 400, replies[tag]
        assert "\n" not in replies[tag]["error"]
    assert "unknown instance 'zz'; instances: a, b" in replies["unknown"]["error"]
    assert replies["ok"]["status"] == 200
    read = jolokia.handle({"type": "read", "mbean": MBEAN})["value"]
    assert read["CurrentAlgorithm"] == "b"
    assert read["Epoch"] == 1 and read["SwitchCount"] == 1
    assert read["LastSwitchMs"] > 0
    events = protosim.read_events(tmp_path)
    # the refused requests changed nothing: one switch, from a to b, at every node
    assert all([e["to"] for e in ends(events, h)] == ["b"] for h in events)


def test_policy_switches_to_the_symmetric_protocol_when_every_host_sends(
        tmp_path: Path) -> None:
    instances = [{"name": "seq", "protocol": "sequencer"}, {"name": "sym", "protocol": "lamport"}]
    cfgs = protosim.configs("switching", tmp_path, duration_s=4, rate=30, loss=0.0,
                            params={"instances": instances, "adapt_to_all": "sym",
                                    "adapt_window_ms": 300})
    sim = Simulator(cfgs, seed=5)
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in cfgs))
    events = protosim.read_events(tmp_path)
    assert [e["to"] for e in ends(events, "h2")] == ["sym"]
    assert findings(events)["same_sequence"]


SPEC = """\
name: sw-{name}
topology:
  name: t
  sites: {{s: {{lan: {{delay: 1ms}}}}}}
  hosts: [{{name: h1, site: s}}, {{name: h2, site: s}}, {{name: h3, site: s}}]
backend: {backend}
duration: {duration}
drain: 1s
protocol:
  name: switching
  params:
    instances:
{instances}
workload: {{senders: all, rate: 50/s, size: 200B}}
{faults}"""
FAULTS = """\
faults:
  - {{kind: mgmt, at: 1s, host: h2, mbean: "{mbean}", exec: [switchTo, b]}}
  - {{kind: mgmt, at: 3s, host: h3, mbean: "{mbean}", exec: [switchTo, a]}}
"""
INSTANCES = """\
      - {name: a, protocol: sequencer, params: {sequencer: h1}}
      - {name: b, protocol: sequencer, params: {sequencer: h2}}"""


def write_spec(path: Path, *, name: str = "x", backend: str = "sim", duration: str = "4s",
               instances: str = INSTANCES, faults: bool = True) -> Path:
    path.write_text(SPEC.format(name=name, backend=backend, duration=duration,
                                instances=instances, mbean=MBEAN,
                                faults=FAULTS.format(mbean=MBEAN) if faults else ""))
    return path


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=timeout)


@pytest.mark.parametrize("instances,message", [
    ("      - {name: a, protocol: sequencer}\n      - {name: b, protocol: nope}",
     "protocol.params.instances.1.protocol: unknown total-order protocol 'nope'"),
    ("      - {name: a, protocol: sequencer}\n"
     "      - {name: b, protocol: sequencer, params: {sequencer: h9}}",
     "protocol.params.instances.1.params.sequencer: unknown sequencer host 'h9'"),
    ("      - {name: a, protocol: sequencer}\n"
     "      - {name: a, protocol: lamport, params: {bogus: 1}}",
     "protocol.params.instances.1.name: duplicate instance name 'a'"),
])
def test_bad_nested_instances_are_located_lines(tmp_path: Path, instances: str,
                                                message: str) -> None:
    spec = write_spec(tmp_path / "bad.yaml", instances=instances)
    with pytest.raises(SpecError) as err:
        load_experiment(spec)
    lines = str(err.value).splitlines()
    assert any(x.startswith(f"{spec}:1") and x.split(": ", 1)[1] == message
               for x in lines), lines
    assert all("\n" not in x for x in lines)


def test_a_scheduled_switch_to_an_unknown_instance_is_a_located_line(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "bad.yaml")
    spec.write_text(spec.read_text().replace("exec: [switchTo, b]", "exec: [switchTo, zz]"))
    with pytest.raises(SpecError) as err:
        load_experiment(spec)
    assert str(err.value) == (f"{spec}:17: faults.0.exec: switchTo needs one instance name "
                              "of a, b; got ['zz']")


def test_a_switching_spec_with_one_instance_is_one_line_and_creates_nothing(
        tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "bad.yaml", instances="      - {name: a, protocol: sequencer}")
    proc = run_cli("run", str(spec), "--out", str(tmp_path / "runs"), "--no-analyze")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [x for x in (proc.stdout + proc.stderr).splitlines() if "bad.yaml:" in x]
    assert lines == [f"{spec}:12: protocol.params.instances: switching needs at least two "
                     "instances, got 1"], proc.stdout + proc.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.parametrize("backend", ["sim", "local"])
def test_full_run_switches_twice_on_schedule(tmp_path: Path, backend: str) -> None:
    spec = write_spec(tmp_path / "exp.yaml", name=backend, backend=backend, duration="4s")
    proc = run_cli("run", str(spec), "--out", str(tmp_path / "runs"), "--no-analyze",
                   timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = run_dir_of(tmp_path / "runs")
    events = read_events(run)
    for host, evs in events.items():
        got = [(e["epoch"], e["to"]) for e in evs if e["ev"] == "switch"
               and e.get("phase") == "end"]
        assert got == [(1, "b"), (2, "a")], host
    seqs = {h: [e["mid"] for e in evs if e["ev"] == "fnl"] for h, evs in events.items()}
    assert len({tuple(s) for s in seqs.values()}) == 1
    assert all(len(set(s)) == len(s) for s in seqs.values())
    faults = [json.loads(x) for x in (run / "faults.jsonl").read_text().splitlines()]
    assert any("switching to b" in json.dumps(f) for f in faults)
    # the report: who asked for each switch and why (the fault schedule's mgmt entries)
    per, html = rendered_switches(run)
    assert [(s["requested_by"], s["reason"]) for s in per] == [("h2", "schedule"),
                                                               ("h3", "schedule")]
    assert "<h2>Switches</h2>" in html
    assert "<td>a → b</td><td>h2</td><td>schedule</td>" in html
    assert "<td>b → a</td><td>h3</td><td>schedule</td>" in html


def test_a_third_party_jolokia_client_switches_a_local_run_mid_run(tmp_path: Path) -> None:
    """The `jolokia` package from PyPI calls `switchTo` on h3 of a running local run; every
    node logs the switch, and a bad name is refused with nothing changed."""
    from jolokia import JolokiaClient

    from testbed.rundir import RunDir

    spec = write_spec(tmp_path / "exp.yaml", name="jolokia", backend="local", duration="5s",
                      faults=False)
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "run", str(spec), "--out",
                             str(out), "--no-analyze"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            runs = list(out.iterdir()) if out.exists() else []
            if runs and (runs[0] / "nodes" / "h3" / "control.json").exists():
                break
            time.sleep(0.2)
        run = RunDir.open(runs[0])
        client = JolokiaClient(f"{run.control_url('h3')}/jolokia")
        client.session.headers["Authorization"] = f"Bearer {run.token}"
        time.sleep(1.0)
        bad = client.execute(mbean=MBEAN, operation="switchTo", arguments=["nope"])
        assert bad["status"] == 400 and "unknown instance 'nope'" in bad["error"]
        ok = client.execute(mbean=MBEAN, operation="switchTo", arguments=["b"])
        assert ok["status"] == 200, ok
        time.sleep(1.0)
        read = client.get_attribute(mbean=MBEAN, attribute=["CurrentAlgorithm", "Epoch"])
        assert [r["value"] for r in read] == ["b", 1]
    finally:
        stdout, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, stdout
    events = read_events(run_dir_of(out))
    for host, evs in events.items():
        got = [(e["epoch"], e["to"]) for e in evs if e["ev"] == "switch"
               and e.get("phase") == "end"]
        assert got == [(1, "b")], host
    requests = [e for e in events["h3"] if e["ev"] == "switch" and e.get("phase") == "request"]
    assert len(requests) == 1
    # the report names the client's call: requested by h3, why mgmt (not the schedule)
    per, html = rendered_switches(run_dir_of(out))
    assert [(s["requested_by"], s["reason"], s["completed"]) for s in per] == [
        ("h3", "mgmt", True)]
    assert "<td>a → b</td><td>h3</td><td>mgmt</td>" in html


def test_per_switch_metrics_measure_the_gap_and_the_switch_time(tmp_path: Path) -> None:
    """analysis/switching.py on a hand-made history: two nodes, one switch requested at
    t=1000 ms, window 1010-1030 ms; h2 delivers nothing between 990 and 1100 ms."""
    from analysis.switching import _per_switch, switch_windows

    ms = 1_000_000
    sw = [{"ev": "switch", "node": "h1", "t": 1000 * ms, "phase": "request", "epoch": 1},
          *({"ev": "switch", "node": h, "t": t * ms, "phase": "start", "epoch": 1,
             "from": "a", "to": "b"} for h, t in (("h1", 1010), ("h2", 1015))),
          *({"ev": "switch", "node": h, "t": t * ms, "phase": "end", "epoch": 1,
             "dup_msgs": 2, "dup_bytes": 200, "duration_ms": 15.0}
            for h, t in (("h1", 1025), ("h2", 1030)))]
    per_node = {
        "h1": [(t * ms, "switching#a" if t < 1025 else "switching#b", (t - 5) * ms)
               for t in range(900, 1200, 10)],
        "h2": [(t * ms, "switching#a" if t < 1030 else "switching#b", (t - 5) * ms)
               for t in [*range(900, 1000, 10), *range(1100, 1200, 10)]],
    }
    (got,) = _per_switch(sw, per_node)
    assert got["completed"] and got["window_ms"] == 20.0
    assert got["max_gap_ms"] == 110.0  # h2: 990 -> 1100
    assert got["switch_ms"] == 100.0  # h2's first delivery from b (1100) - request (1000)
    assert got["extra_bytes"] == 400 and got["max_latency_ms"] == 5.0
    node = tmp_path / "nodes" / "h1"
    node.mkdir(parents=True)
    (node / "events.jsonl").write_text("\n".join(json.dumps({**e, "i": i})
                                                for i, e in enumerate(sw)) + "\n")
    assert switch_windows(read_record(tmp_path)) == {1: (1010 * ms, 1030 * ms)}


def test_a_restarted_node_rejoins_through_relayed_copies(tmp_path: Path) -> None:
    """No switch: a crashed and restarted member rejoins the current instance as it would the
    plain sequencer, fetching ordered messages it missed; the relayed copies keep their
    origin's header, so their inner sender differs from the datagram's (not a forgery)."""
    cfgs = protosim.configs("switching", tmp_path, params={"instances": TWO_SEQUENCERS},
                            duration_s=4, rate=50, n=4, loss=0.0, delay_ms=40)
    sim = Simulator(cfgs, seed=3)
    sim.schedule_faults([
        {"t_ns": SIM_EPOCH_NS + 1_000_000_000, "op": "crash", "params": {"host": "h2"},
         "record": {}},
        {"t_ns": SIM_EPOCH_NS + 2_000_000_000, "op": "restart", "params": {"host": "h2"},
         "record": {}}], tmp_path / "faults.jsonl")
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in cfgs))
    events = protosim.read_events(tmp_path)
    h2 = events["h2"]
    restart = [i for i, e in enumerate(h2) if e["ev"] == "start"][1]
    post = [e["mid"] for e in h2[restart:] if e["ev"] == "fnl"]
    reference = protosim.deliveries(events)["h1"]
    assert len(post) > 50
    k = reference.index(post[0])
    assert reference[k:k + len(post)] == post
    assert not [e for e in h2 if e["ev"] == "drop"]


def restart_around_a_switch(out: Path, restart_s: float) -> protosim.Events:
    """h2 crashes 200 ms before `restart_s` and restarts then (down for less than the failure
    detector's timeout: never suspected); h1 asks for a switch (a to b) at 1 s and one back
    at 2.5 s; 200 msgs/s per host for 4 s, so that a window (1,024) fills."""
    cfgs = protosim.configs("switching", out, params={"instances": TWO_SEQUENCERS},
                            duration_s=4, drain_s=2, rate=200, n=4, loss=0.0, delay_ms=5)
    sim = Simulator(cfgs, seed=5)

    def request(to: str) -> None:
        core = sim.cores[0]
        assert isinstance(core.protocol, Switching)
        core.protocol.request_switch(to, core.clock.local(sim.now))

    at = SIM_EPOCH_NS + round(restart_s * 1e9)
    sim.schedule_faults([
        {"t_ns": at - 200_000_000, "op": "crash", "params": {"host": "h2"}, "record": {}},
        {"t_ns": at, "op": "restart", "params": {"host": "h2"}, "record": {}}],
        out / "faults.jsonl")
    sim.at(SIM_EPOCH_NS + 1_000_000_000, lambda: request("b"))
    sim.at(SIM_EPOCH_NS + 2_500_000_000, lambda: request("a"))
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in cfgs))
    return protosim.read_events(out)


def test_a_member_restarted_after_a_switch_is_out_and_one_restarted_before_follows(
        tmp_path: Path) -> None:
    """A restarted process starts at switch epoch 0. Restarted after the switch to b it can
    never rejoin (no state transfer): the others take it out for good (001 §4.1.2,
    `switch_gone`), so their windows do not wait for it, and the next switch excludes it;
    every survivor delivers everything the survivors sent. Restarted before the switch it
    rejoins instance a and follows both switches: nobody takes it out, its flag ends them."""
    events = restart_around_a_switch(tmp_path / "after", 1.5)
    survivors = {h: evs for h, evs in events.items() if h != "h2"}
    sent = {e["mid"] for evs in survivors.values() for e in evs if e["ev"] == "send"}
    assert len(sent) > 1500
    for host, mids in protosim.deliveries(survivors).items():
        assert sent <= set(mids), host
    got = findings(survivors)
    assert got["duplicates"] == 0 and got["total_order"] == 0 and got["same_sequence"]
    for host, evs in survivors.items():
        assert [(e["epoch"], e["to"]) for e in ends(events, host)] == [(1, "b"), (2, "a")]
        assert [e["member"] for e in evs if e["ev"] == "switch_gone"] == ["h2"], host

    events = restart_around_a_switch(tmp_path / "before", 0.5)
    assert not [e for evs in events.values() for e in evs if e["ev"] in
                ("switch_gone", "switch_exclude")]
    for host in events:
        assert [(e["epoch"], e["to"]) for e in ends(events, host)] == [(1, "b"), (2, "a")]
    h2 = events["h2"]
    restart = [i for i, e in enumerate(h2) if e["ev"] == "start"][1]
    post = [e["mid"] for e in h2[restart:] if e["ev"] == "fnl"]
    reference = protosim.deliveries(events)["h1"]
    k = reference.index(post[0])
    assert len(post) > 1000 and reference[k:k + len(post)] == post


def crash_in_switch_window(out: Path, patch: Any = None) -> protosim.Events:
    """h4 crashes 3 ms after h1 asks for a switch (a to b), before it meets SWITCH, so its
    flag never comes; a second switch (b to a) is asked at 2.5 s."""
    cfgs = protosim.configs("switching", out, n=4, duration_s=4, drain_s=2, rate=25,
                            loss=0.01, params={"instances": TWO_SEQUENCERS,
                                               "fd_interval_ms": 50, "fd_timeout_ms": 300,
                                               "exclude_after_ms": 200})
    sim = Simulator(cfgs, seed=11)
    if patch is not None:
        for nid, core in sim.cores.items():
            patch(nid, core.protocol)

    def request(to: str) -> None:
        core = sim.cores[0]
        assert isinstance(core.protocol, Switching)
        with contextlib.suppress(ValueError):  # the negative control is still switching
            core.protocol.request_switch(to, core.clock.local(sim.now))

    sim.at(SIM_EPOCH_NS + 1_000_000_000, lambda: request("b"))
    sim.schedule_faults([{"t_ns": SIM_EPOCH_NS + 1_003_000_000, "op": "crash",
                          "params": {"host": "h4"}, "record": {}}], out / "faults.jsonl")
    sim.at(SIM_EPOCH_NS + 2_500_000_000, lambda: request("a"))
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in cfgs))
    return protosim.read_events(out)


def test_a_crash_during_a_switch_does_not_block_its_end(tmp_path: Path) -> None:
    """A member that crashes mid-switch never sends its flag (Fig. 2.1 alone: the switch would
    never end, and no later switch could start). The survivors' failure detectors propose
    its exclusion through the old instance's order, so every survivor stops waiting for it
    at the same point of that order: the switch ends, the next one too, with one total
    order and no loss among the survivors. Negative control: without the exclusion the
    switch never ends."""
    events = crash_in_switch_window(tmp_path / "fixed")
    survivors = {h: evs for h, evs in events.items() if h != "h4"}
    for host, evs in survivors.items():
        assert [(e["epoch"], e["to"]) for e in ends(events, host)] == [(1, "b"), (2, "a")], host
        assert any(e["ev"] == "switch_exclude" and e["member"] == "h4" for e in evs), host
    got = findings(survivors)
    assert got["duplicates"] == 0 and got["total_order"] == 0 and got["fifo"] == 0
    assert got["same_sequence"]
    sent_by_survivors = {e["mid"] for evs in survivors.values() for e in evs
                         if e["ev"] == "send"}
    for host, mids in protosim.deliveries(survivors).items():
        assert sent_by_survivors <= set(mids), host  # nothing a survivor sent is lost
    # h4 delivered a prefix of the survivors' sequence before it crashed
    h4 = protosim.deliveries(events)["h4"]
    assert h4 == protosim.deliveries(survivors)["h1"][:len(h4)]

    def no_exclusion(nid: int, layer: Layer) -> None:
        assert isinstance(layer, Switching)
        layer._suspicion = lambda member, suspected, now: []  # type: ignore[method-assign]

    blocked = crash_in_switch_window(tmp_path / "control", patch=no_exclusion)
    assert all(not ends(blocked, h) for h in blocked), "the switch ended without exclusion"


def test_policy_follows_the_workload_from_one_sender_to_all_and_back(tmp_path: Path) -> None:
    """Beyond the paper (001 ch. 2): h1 sends alone, all four send from 2 s to 4 s
    (`workload.sending`), then h1 alone again. The lowest member's policy switches
    sequencer -> lamport when every member sends and back when one does; each switch is
    logged with reason `policy`, and the deliveries keep one total order."""
    instances = [{"name": "seq", "protocol": "sequencer"}, {"name": "lam", "protocol": "lamport"}]
    cfgs = protosim.configs("switching", tmp_path, n=4, duration_s=6, drain_s=2, rate=30,
                            loss=0.01, params={"instances": instances, "adapt_to_all": "lam",
                                               "adapt_to_one": "seq", "adapt_window_ms": 300})
    cfgs = [dataclasses.replace(c, workload=dataclasses.replace(
        c.workload, start_ns=2_000_000_000 if c.node_id else 0,
        stop_ns=4_000_000_000 if c.node_id else 0)) for c in cfgs]
    sim = Simulator(cfgs, seed=5)
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in cfgs))
    events = protosim.read_events(tmp_path)
    sends = [(e["t"] - SIM_EPOCH_NS) / 1e9 for h in ("h2", "h3", "h4") for e in events[h]
             if e["ev"] == "send"]
    assert sends and min(sends) >= 2.0 and max(sends) < 4.0  # the send windows held
    requests = [e for e in events["h1"] if e["ev"] == "switch" and e["phase"] == "request"]
    assert [(e["to"], e["reason"]) for e in requests] == [("lam", "policy"), ("seq", "policy")]
    at = [(e["t"] - SIM_EPOCH_NS) / 1e9 for e in requests]
    assert 2.0 < at[0] < 3.0 and 4.0 < at[1] < 5.5, at
    assert [e["active_senders"] for e in events["h1"] if e["ev"] == "switch_policy"] == [4, 1]
    per, html = rendered_switches(tmp_path)
    assert [(s["requested_by"], s["reason"]) for s in per] == [("h1", "policy")] * 2
    assert "<td>seq → lam</td><td>h1</td><td>policy</td>" in html
    for host in events:
        assert [e["to"] for e in ends(events, host)] == ["lam", "seq"], host
    assert findings(events) == {"duplicates": 0, "missing": 0, "total_order": 0, "fifo": 0,
                                "same_sequence": True}


@pytest.mark.parametrize("windows,message", [
    ("{h9: {start: 1s}}", "workload.sending.h9: unknown host 'h9'"),
    ("{h2: {start: 2s, stop: 1s}}", "workload.sending.h2.stop: 1 s is not after start 2 s"),
])
def test_bad_send_windows_are_located_lines(tmp_path: Path, windows: str, message: str) -> None:
    spec = write_spec(tmp_path / "bad.yaml", faults=False)
    spec.write_text(spec.read_text().replace("size: 200B}", f"size: 200B, sending: {windows}}}"))
    with pytest.raises(SpecError) as err:
        load_experiment(spec)
    assert str(err.value) == f"{spec}:15: {message}"  # the workload line


def test_malformed_instance_datagrams_are_counted_not_raised(tmp_path: Path) -> None:
    """Instance datagrams carry their tag in the header's `proto` (TAG_BASE + tag) and are
    decoded once: what nodes/wire.py would have refused for the instance's own wire id (an
    ORDER that is not whole entries), a stale or unknown tag, a bad switching prefix, a
    forged ORDER from a non-sequencer are each counted under a reason, never raised."""
    from nodes.core import NodeCore
    from nodes.protocols.switching import TAG_BASE
    from nodes.wire import Header, Message, MsgType, encode

    cfgs = protosim.configs("switching", tmp_path, n=3, params={"instances": TWO_SEQUENCERS})
    core = NodeCore(cfgs[1], 0)
    core.start(0)
    layer = core.protocol
    assert isinstance(layer, Switching) and layer.cur is not None
    tag = TAG_BASE + layer.cur.tag

    def datagram(mtype: MsgType, proto: int, sender: int, payload: bytes, **kw: int) -> bytes:
        return encode(Message(Header(mtype, proto, 0, sender, **kw), payload))

    bad = [
        datagram(MsgType.ORDER, tag, 0, b"\x00" * 5, rseq=1, origin=0, seq=1),
        datagram(MsgType.DATA, TAG_BASE + 77, 0, b"x" * 8, rseq=1, origin=0, mno=1),
        datagram(MsgType.DATA, tag, 2, bytes([0x80, 0, 0, 0, 1]) + b"x", rseq=1, origin=2,
                 mno=1),
        datagram(MsgType.ORDER, tag, 2, b"\x00\x00\x00\x00\x00\x01", rseq=1, origin=2, seq=1),
    ]
    for k, data in enumerate(bad):
        out = core.receive(data, 1_000_000 * (k + 1))
        assert not [m for _, _, m in out.sends if m.header.type == MsgType.NACK]
    assert core.counters.errors == 0
    assert layer.rejects == {"sw:payload": 1, "sw:stale": 1, "sw:prefix": 1,
                             "sw:rejected:role": 1}
    assert layer.delivered == 0


# -- reproducers: schedules that once broke total order, as specs judged by the checkers -----

def judged_run(tmp_path: Path, spec: str) -> dict[str, Any]:
    """`testbed run experiments/SPEC` on the simulator with the Spark analysis, in this
    process (tests/inproc.py); the run's summary.json."""
    from tests.inproc import run_cli as run_inproc

    proc = run_inproc("run", "--out", str(tmp_path), str(ROOT / "experiments" / spec))
    summary: dict[str, Any] = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return summary


def assert_safe_and_quiescent(summary: dict[str, Any]) -> None:
    checks = summary["checks"]
    assert {k: checks[k]["violations"] for k in ("total_order", "agreement", "integrity",
                                                  "fifo_order")} == \
        {"total_order": 0, "agreement": 0, "integrity": 0, "fifo_order": 0}
    assert summary["switching"]["duplicates"] == 0
    assert summary["switching"]["order_violations"] == 0
    assert summary["liveness"]["quiescent"] is True, summary["liveness"]
    assert all(e["ok"] for e in summary["expectations"]), summary["expectations"]


@pytest.mark.spark
def test_rabp_discards_old_instance_deliveries_batched_after_the_change(
        tmp_path: Path, spark: Any) -> None:
    """RABP (001 §2.2.2): at CHANGE a node leaves the old instance and its senders re-issue
    what it had not delivered on the new one. The old instance hands up an ORDER's entries in
    one batch; entries after the CHANGE in that batch were once delivered too (the layer
    decided "current instance, nothing switching" once per batch), so h1 delivered a message
    the others took from the new instance in another place (8 total-order pairs)."""
    summary = judged_run(tmp_path, "switching-rabp-400ms.yaml")
    assert_safe_and_quiescent(summary)
    assert summary["switching"]["switches"] >= 6


@pytest.mark.spark
def test_a_stub_waiting_for_its_payload_holds_the_rest_of_its_batch(
        tmp_path: Path, spark: Any) -> None:
    """Payload-once (001 §2.2.1): a stub delivered by the old instance before its
    payload reached the new one holds the old instance's sequence (`stub_wait`). Under loss
    and duplication an ORDER batch can carry the SWITCH, then such a stub, then more: the
    entries after the stub were once delivered past it (the batch had started with nothing
    held and no switch under way), 56 total-order pairs."""
    summary = judged_run(tmp_path, "switching-payload-once-lossy.yaml")
    assert_safe_and_quiescent(summary)
    assert summary["switching"]["switches"] >= 6
    waits = sum(1 for f in tmp_path.glob("*/nodes/*/events.jsonl")
                for line in f.read_text().splitlines() if '"ev":"stub_wait"' in line)
    assert waits > 0  # the schedule does make stubs wait


@pytest.mark.spark
@pytest.mark.parametrize("mode", ["live", "stop"])
def test_members_excluded_by_a_partition_catch_up_after_the_heal(
        tmp_path: Path, spark: Any, mode: str) -> None:
    """{h1, h5} | {h2, h3, h4} while a switch is under way: the side with the old instance's
    sequencer excludes h1 and h5 (EXCLUDE in that order) and ends the switch without them.
    After the heal h1 and h5 meet the same switch point. Before the fix the others had torn
    the old instance down (DONE from every non-excluded member), so h1 and h5 never got their
    repairs and stopped delivering (live: 1,063 messages missing at each for the whole drain),
    and what they sent on the old instance while cut off came after the switch point, where
    everyone discards it (189 and 278 messages lost everywhere); now the old instance is kept
    for the excluded members and each member re-issues its undelivered messages on the new
    instance (same ids, in order)."""
    summary = judged_run(tmp_path, f"switching-partition-heal-{mode}.yaml")
    assert_safe_and_quiescent(summary)
    assert summary["checks"]["validity"]["violations"] == 0
    undelivered = summary["liveness"]["undelivered_per_node"]
    assert set(undelivered) == {"h1", "h2", "h3", "h4", "h5"}
    assert not any(undelivered.values()), undelivered
    excluded = {json.loads(line)["member"] for f in tmp_path.glob("*/nodes/*/events.jsonl")
                for line in f.read_text().splitlines() if '"ev":"switch_exclude"' in line}
    assert excluded == {"h1", "h5"}  # the schedule does exclude the cut-off pair


@pytest.mark.parametrize("mode", ["stop", "rabp"])
def test_reissuing_on_an_instance_that_delivers_at_once(tmp_path: Path, mode: str) -> None:
    """A token holder orders its own message as it sends it: re-issuing undelivered messages
    on a `moving-sequencer` instance delivers some of them during the re-issue (the set of
    undelivered messages changed while it was walked: RuntimeError, the node's run ended)."""
    instances = [{"name": "a", "protocol": "token-ring"},
                 {"name": "b", "protocol": "moving-sequencer"}]
    cfgs = protosim.configs("switching", tmp_path, n=5, duration_s=3, drain_s=2, rate=50,
                            loss=0.02, delay_ms=2, params={"instances": instances,
                                                           "mode": mode})
    sim = Simulator(cfgs, seed=33)
    for k in range(1, 12):
        sim.at(SIM_EPOCH_NS + k * 250_000_000, functools.partial(
            lambda k: _switch_from(sim, k), k))
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in cfgs))
    events = protosim.read_events(tmp_path)
    assert all(e["errors"] == 0 for evs in events.values() for e in evs if e["ev"] == "stop")
    assert findings(events) == {"duplicates": 0, "missing": 0, "total_order": 0, "fifo": 0,
                                "same_sequence": True}
    assert min(len(ends(events, h)) for h in events) >= 5


def _switch_from(sim: Simulator, k: int) -> None:
    core = sim.cores[k % len(sim.cores)]
    layer = core.protocol
    assert isinstance(layer, Switching)
    with contextlib.suppress(ValueError):
        layer.request_switch(next(n for n in layer.names if n != layer.current),
                             core.clock.local(sim.now))


@pytest.mark.spark
def test_an_instance_created_after_a_crash_learns_the_suspicion(
        tmp_path: Path, spark: Any) -> None:
    """h2 crashes between two switches; the second creates a fresh instance. The failure
    detector reports changes only, so the fresh instance never heard h2 was suspected: its
    reliable layer waited for h2's acknowledgements and, under 2 % loss, stopped ordering
    (361 messages undelivered at every survivor for the whole drain). The layer now tells a
    new instance who is suspected."""
    summary = judged_run(tmp_path, "switching-crash-fresh-instance.yaml")
    assert_safe_and_quiescent(summary)
    assert summary["crashed"] == ["h2"]
    assert summary["checks"]["validity"]["violations"] == 0
    undelivered = summary["liveness"]["undelivered_per_node"]
    assert not any(n for h, n in undelivered.items() if h != "h2"), undelivered
