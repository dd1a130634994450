"""Management of running nodes: `testbed up`, then `testbed mgmt` and third-party clients."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testbed.mgmt import MgmtClient
from testbed.rundir import RunDir
from tests.eventlogs import run_dir_of

ROOT = Path(__file__).resolve().parents[1]
UP_SINCE: dict[str, float] = {}  # time.time() just before `testbed up`: the nodes' t0 is later


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "testbed", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def testbed_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, RunDir]]:
    out = tmp_path_factory.mktemp("up") / "runs"
    UP_SINCE["t"] = time.time()
    assert cli("up", "topologies/two-sites.yaml", "--out", str(out)).returncode == 0
    run = RunDir.open(run_dir_of(out))
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not all(
                (run.path / "nodes" / h / "control.json").exists() for h in ("h1", "h2", "h3")):
            time.sleep(0.1)
        yield out, run
    finally:
        assert cli("teardown", run.run_id, "--runs", str(out)).returncode == 0


@pytest.mark.timing  # the clock check depends on the nodes' uptime
def test_mgmt_cli_reads_writes_and_executes_on_a_running_node(testbed_up) -> None:
    out, run = testbed_up
    r = cli("mgmt", "h2", "read", "testbed:type=Node", "Name", "--runs", str(out))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == "h2"
    j = cli("mgmt", "h2", "exec", "testbed:type=Clock", "jump", "50", "--runs", str(out))
    assert j.returncode == 0 and json.loads(j.stdout) == pytest.approx(50.0)
    w = cli("mgmt", "h2", "write", "testbed:type=Clock", "DriftPpm", "25", "--runs", str(out))
    assert w.returncode == 0 and json.loads(w.stdout) == 0.0  # write returns the old value
    clock = json.loads(cli("mgmt", "h2", "read", "testbed:type=Clock", "--runs",
                           str(out)).stdout)
    # A drift change keeps the local clock continuous: the offset at t0 moves back by the
    # drift over the time the node has been up (0.025 ms per s of uptime: 0.7 ms after 28 s on
    # a loaded machine), never by more than that bound.
    up_s = time.time() - UP_SINCE["t"]
    assert clock["DriftPpm"] == 25.0
    assert 50.0 - 25e-6 * up_s * 1e3 - 0.01 <= clock["OffsetMs"] <= 50.0, (clock, up_s)
    bad = cli("mgmt", "h2", "read", "testbed:type=Nope", "--runs", str(out))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_third_party_jolokia_client_and_prometheus_parser_talk_to_a_node(testbed_up) -> None:
    from jolokia import JolokiaClient

    _, run = testbed_up
    url = run.control_url("h3")
    client = JolokiaClient(url)
    client.session.headers["Authorization"] = f"Bearer {run.token}"
    reply = client.get_attribute(mbean="testbed:type=Node", attribute="Protocol")
    assert reply["status"] == 200 and reply["value"] == "sequencer"
    client.execute(mbean="testbed:type=Clock", operation="jump", arguments=[5])
    assert MgmtClient(url, run.token).read("testbed:type=Clock", "OffsetMs") == pytest.approx(5)
    text = MgmtClient(url, run.token).metrics()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert "testbed_clock_offset_ms" in names
    with pytest.raises(Exception, match="401|token|auth"):
        MgmtClient(url, "wrong-token").read("testbed:type=Node", "Name")


def eventually(cond: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


@pytest.mark.timing
def test_writing_fd_timeout_through_mgmt_changes_when_suspicions_fire(testbed_up) -> None:
    out, run = testbed_up
    h1 = MgmtClient(run.control_url("h1"), run.token)
    assert cli("mgmt", "h1", "write", "testbed:type=FailureDetector", "TimeoutMs", "4000",
               "--runs", str(out)).returncode == 0
    # h4 stops talking to h1 (a one-way cut at h4's egress).
    MgmtClient(run.control_url("h4"), run.token).exec("testbed:type=Network", "block",
                                                      ["h1"], [])
    try:
        time.sleep(1.5)
        assert h1.read("testbed:type=FailureDetector", "SuspectedMembers") == []
        raised = h1.read("testbed:type=FailureDetector", "Suspicions")
        w = cli("mgmt", "h1", "write", "testbed:type=FailureDetector", "TimeoutMs", "300",
                "--runs", str(out))
        assert w.returncode == 0 and json.loads(w.stdout) == 4000.0
        # 300 ms without hearing from h4: suspected within a few ticks (a loaded machine
        # delays ticks, hence the wait for it rather than a fixed sleep).
        assert eventually(lambda: h1.read("testbed:type=FailureDetector",
                                          "SuspectedMembers") == ["h4"])
        assert h1.read("testbed:type=FailureDetector", "Suspicions") >= raised + 1
    finally:
        MgmtClient(run.control_url("h4"), run.token).exec("testbed:type=Network", "heal")
    assert eventually(lambda: h1.read("testbed:type=FailureDetector",
                                      "SuspectedMembers") == [])
    bad = cli("mgmt", "--runs", str(out), "--", "h1", "write", "testbed:type=FailureDetector",
              "TimeoutMs", "-5")
    assert bad.returncode == 2 and "positive" in bad.stderr
