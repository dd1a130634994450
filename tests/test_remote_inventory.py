"""The remote backend's inputs without hosts (no root): inventory problems are one line
`file: host: message`; a backend without an inventory or with a topology host missing from it
refuses before touching anything; analysis moves a host's `t` by its measured clock offset
(docs/remote.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from analysis.record import read_record
from testbed.backends.ansible import InventoryError, load_inventory

ROOT = Path(__file__).resolve().parent.parent
GOOD = {"address": "198.19.128.1", "user": "root", "key": "k", "data_interface": "eth1",
        "data_address": "198.18.128.1", "control_address": "198.19.128.1"}


def _inv(tmp_path: Path, doc: object) -> Path:
    p = tmp_path / "hosts.yaml"
    p.write_text(yaml.safe_dump(doc) if not isinstance(doc, str) else doc)
    return p


def test_a_good_inventory_resolves_the_key_next_to_the_file(tmp_path: Path) -> None:
    hosts = load_inventory(_inv(tmp_path, {"hosts": {"h1": GOOD}}))
    assert hosts["h1"].key == str(tmp_path / "k")
    assert hosts["h1"].port == 22 and hosts["h1"].data_interface == "eth1"


@pytest.mark.parametrize(("doc", "needle"), [
    ({"hosts": {"h1": {**GOOD, "data_interface": ""}}}, "h1: missing data_interface"),
    ({"hosts": {"h2": "198.19.0.1"}}, "h2: expected a mapping"),
    ({"hosts": {"h1": {**GOOD, "port": "ssh"}}}, "h1: port must be a number"),
    ({"nodes": {}}, "hosts: a mapping"),
    ("hosts: [", "not YAML"),
])
def test_inventory_problems_are_one_line_naming_file_and_host(tmp_path: Path, doc: object,
                                                             needle: str) -> None:
    with pytest.raises(InventoryError) as exc:
        load_inventory(_inv(tmp_path, doc))
    assert needle in str(exc.value) and "\n" not in str(exc.value)
    assert str(exc.value).startswith(str(tmp_path / "hosts.yaml"))


def test_the_backend_refuses_a_missing_inventory_or_host_before_touching_anything(
        tmp_path: Path) -> None:
    from testbed.backends import BackendError, make_backend
    from testbed.rundir import RunDir
    from testbed.spec.loader import load_topology

    topo = load_topology(ROOT / "topologies" / "two-sites.yaml")
    run = RunDir.create(tmp_path, "r")
    with pytest.raises(BackendError, match="needs an inventory"):
        make_backend("remote", run, topo, topo.paths())
    b = make_backend("remote", run, topo, topo.paths(),
                     inventory=_inv(tmp_path, {"hosts": {"h1": GOOD}}))
    with pytest.raises(BackendError, match="host h2 is not in the inventory"):
        b.up()
    assert list(run.journal.live()) == []


def test_analysis_subtracts_each_hosts_measured_clock_offset(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from analysis.ingest import _convert
    from analysis.job import clock_uncertainty_ms

    (tmp_path / "spec.lock.yaml").write_text(yaml.safe_dump({"clocks": {
        "h1": {"offset_ms": 2.5, "uncertainty_ms": 0.05},
        "h2": {"offset_ms": 0.0, "uncertainty_ms": 0.02}}}))
    (tmp_path / "nodes").mkdir()
    log = tmp_path / "events.jsonl"
    log.write_text(json.dumps({"t": 10_000_000, "lt": 1, "i": 0, "node": "h1", "ev": "send",
                               "mid": "h1:1"}) + "\n")
    assert read_record(tmp_path).clock_offsets_ns() == {"h1": 2_500_000, "h2": 0}
    _convert((str(log), "h1", str(tmp_path / "h1.parquet"), 2_500_000))
    assert pq.read_table(tmp_path / "h1.parquet")["t"].to_pylist() == [7_500_000]
    assert clock_uncertainty_ms(read_record(tmp_path)) == pytest.approx(0.07)
    (tmp_path / "spec.lock.yaml").write_text("seed: 1\n")
    assert clock_uncertainty_ms(read_record(tmp_path)) is None


def test_a_remote_run_without_an_inventory_file_fails_and_creates_nothing(
        tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from testbed.cli import app

    out = tmp_path / "runs"
    res = CliRunner().invoke(app, ["run", str(ROOT / "experiments" / "quickstart.yaml"),
                                   "--backend", "remote", "--out", str(out), "--inventory",
                                   str(tmp_path / "missing.yaml")])
    assert res.exit_code == 2
    assert "needs an inventory file" in res.output
    assert not out.exists()


def test_remote_faults_go_through_the_one_dispatcher_to_its_controls(tmp_path: Path) -> None:
    """No if-chain on `op`: Backend.fault() hands the typed primitive to the remote backend's
    Controls (process and network: itself over SSH; node: the management endpoint). With every
    node down nothing is sent, so this runs without hosts."""
    from nodes.faults import Controls
    from testbed.backends import make_backend
    from testbed.faults.schedule import Action
    from testbed.rundir import RunDir
    from testbed.spec.loader import load_topology

    topo = load_topology(ROOT / "topologies" / "two-sites.yaml")
    run = RunDir.create(tmp_path, "r")
    b = make_backend("remote", run, topo, topo.paths(),
                     inventory=_inv(tmp_path, {"hosts": {"h1": GOOD}}))
    assert isinstance(b.controls, Controls)
    assert b.controls.process is b and b.controls.network is b
    b.crashed = set(topo.paths().hosts)  # type: ignore[attr-defined]
    assert b.fault(Action(0, "crash", {"host": "h1"})) == {"alive": False,
                                                          "note": "already down"}
    assert b.fault(Action(0, "pause", {"host": "h2"})) == {"note": "host is down"}
    healed = b.fault(Action(0, "heal", {}))["suspected_before_heal"]
    assert healed == {h: "down" for h in topo.paths().hosts}


def test_an_ssh_host_is_a_host_and_fails_with_the_seams_error(tmp_path: Path) -> None:
    from testbed.hosts.base import Host, HostError
    from testbed.hosts.ssh import SSHHost

    key = tmp_path / "k"
    key.write_text("")
    host: Host = SSHHost("h1", "127.0.0.1", "root", str(key), port=1)  # nothing listens on 1
    with pytest.raises(HostError, match="^h1: `true` failed"):
        host.run(["true"], timeout=20)
