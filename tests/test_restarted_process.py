"""A restarted process is a process (000 sec. 2.2): the last incarnation of a host that
restarts and stays up to the end is correct from its restart on. Its messages must reach
the correct hosts and what it delivers binds them (agreement, validity); it is not held to
what was sent while it was down. A log whose restarted host's messages reach nobody fails;
the same run as the simulator wrote it is ok."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from analysis.fault_history import fault_history
from analysis.judge import judge_run
from analysis.liveness import excuse_restarted
from analysis.record import read_record
from tests.eventlogs import run_dir_of
from tests.inproc import TWO_SITES, run_cli

SPEC = """\
name: restarted
""" + TWO_SITES + """\
backend: sim
duration: 3s
drain: 1s
seed: 1
protocol: {name: sequencer}
workload: {senders: all, rate: 20/s, size: 512B, arrival: poisson}
faults:
  - {kind: crash, host: h3, at: 1000ms, restart_after: 500ms}
"""


@pytest.fixture(scope="module")
def restarted_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("restarted")
    (d / "exp.yaml").write_text(SPEC)
    proc = run_cli("run", str(d / "exp.yaml"), "--backend", "sim", "--no-analyze",
                   "--out", str(d / "runs"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run_dir_of(d / "runs")


def copy_without(run: Path, dest: Path, drop: set[str], hosts: set[str]) -> Path:
    """A copy of `run` whose `hosts` never fnl-delivered (nor received) the mids `drop`."""
    shutil.copytree(run, dest)
    for host in hosts:
        log = dest / "nodes" / host / "events.jsonl"
        kept = [line for line in log.read_text().splitlines()
                if not (json.loads(line).get("mid") in drop
                        and json.loads(line)["ev"] in ("fnl", "recv"))]
        log.write_text("\n".join(kept) + "\n")
    return dest


def after_restart(run: Path) -> set[str]:
    """The mids h3's second incarnation sent (numbered from 1,000,001)."""
    lines = (run / "nodes" / "h3" / "events.jsonl").read_text().splitlines()
    return {e["mid"] for e in map(json.loads, lines)
            if e["ev"] == "send" and int(e["mid"].split(":")[1]) > 1_000_000}


def test_a_normal_restart_is_ok_and_its_incarnation_is_correct(restarted_run: Path) -> None:
    s = judge_run(read_record(restarted_run))
    assert s["verdict"]["ok"], s["verdict"]
    agreement = s["checks"]["agreement"]
    assert agreement["restarted_nodes"] == ["h3@1"] and "h3" not in agreement["correct_nodes"]
    assert agreement["violations"] == 0 and s["checks"]["validity"]["violations"] == 0
    assert after_restart(restarted_run)  # the new incarnation sent, and was judged on it


def test_a_restarted_hosts_messages_that_reach_nobody_fail(restarted_run: Path,
                                                           tmp_path: Path) -> None:
    mids = after_restart(restarted_run)
    run = copy_without(restarted_run, tmp_path / "run", mids, {"h1", "h2", "h4"})
    s = judge_run(read_record(run))
    assert not s["verdict"]["ok"] and s["verdict"]["safety"] == "violated"
    agreement = s["checks"]["agreement"]
    delivered = {e["mid"] for e in map(json.loads, (run / "nodes" / "h3" / "events.jsonl")
                                       .read_text().splitlines())
                 if e["ev"] == "fnl" and e["mid"] in mids}
    assert agreement["violations"] == 3 * len(delivered) > 0
    assert agreement["missing_per_node"] == {h: len(delivered) for h in ("h1", "h2", "h4")}
    assert all(e["delivered_by"] == ["h3@1"] for e in agreement["examples"])
    assert f"agreement: {3 * len(delivered)} violation(s)" in s["verdict"]["reasons"]


def test_a_restarted_host_that_never_delivers_its_own_messages_fails(
        restarted_run: Path, tmp_path: Path) -> None:
    mids = after_restart(restarted_run)
    run = copy_without(restarted_run, tmp_path / "run", mids, {"h1", "h2", "h3", "h4"})
    s = judge_run(read_record(run))
    validity = s["checks"]["validity"]
    assert validity["not_self_delivered"] == len(mids) and not s["verdict"]["ok"]
    assert validity["restarted_senders"] == len(mids) == validity["violations"]
    assert {e["node"] for e in validity["examples"]} == {"h3@1"}


def test_a_restarted_process_s_progress_is_excused_only_where_none_is_claimed() -> None:
    """The drain waits for the correct hosts' messages only: where the claims promise no
    progress under the run's faults, validity's findings among a restarted process's own
    messages are unproven, not violations; where they do, they fail."""
    def checks() -> dict[str, dict[str, object]]:
        return {"validity": {"violations": 5, "restarted_senders": 3, "claimed": True}}

    excused = checks()
    excuse_restarted(excused, {"quiescent": True, "promised": False})
    assert excused["validity"]["violations"] == 2 and excused["validity"]["unproven"] == 3
    held = checks()
    excuse_restarted(held, {"quiescent": True, "promised": True})
    assert held == checks()


def crash(host: str, t: int, phase: str, fault: int) -> dict[str, object]:
    return {"t": t, "kind": "crash", "phase": phase, "hosts": [host], "fault": fault}


def test_only_a_last_incarnation_that_stays_up_is_correct() -> None:
    hosts = ["h1", "h2", "h3"]
    twice = [crash("h2", 1, "start", 0), crash("h2", 2, "stop", 0),
             crash("h2", 3, "start", 1), crash("h2", 4, "stop", 1)]
    assert fault_history(hosts, twice).restarted == ["h2@2"]
    for_good = twice + [crash("h2", 5, "start", 2)]
    assert fault_history(hosts, for_good).restarted == []
    cut = twice + [{"t": 6, "kind": "partition", "phase": "start", "hosts": [], "fault": 3,
                    "params": {"cuts": [["h2", "h1"], ["h1", "h2"], ["h2", "h3"],
                                        ["h3", "h2"]]}}]
    assert fault_history(hosts, cut).restarted == []
