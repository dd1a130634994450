"""Claims under a parameter (catalogue `ParamClaim`): `qos-vbr` without loss
(`loss_tolerance: 0`, 004 §6.4 Lemma 6.1) claims agreement among the correct processes, a
joined incarnation from its join on; only a faulty sender's messages may reach some of them
and not others (Definition 2), and those are spared. With `loss_tolerance` > 0 (§7) it claims
none. Each is proven on the simulator's run of a crash and a join and on copies of it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from analysis.checks import claims_of
from analysis.judge import judge_run
from analysis.record import read_record
from nodes.protocols import catalogue
from tests.eventlogs import run_dir_of
from tests.inproc import run_cli

SPEC = """\
name: vbr-restart
topology:
  name: vbr
  hosts:
    - {name: h1}
    - {name: h2}
    - {name: h3}
    - {name: h4}
  matrix:
    h1: {h2: 5ms, h3: 5ms, h4: 5ms}
    h2: {h1: 5ms, h3: 5ms, h4: 5ms}
    h3: {h1: 5ms, h2: 5ms, h4: 5ms}
    h4: {h1: 5ms, h2: 5ms, h3: 5ms}
backend: sim
duration: 3s
drain: 1s
seed: 1
protocol:
  name: qos-vbr
  params: {delta: 40ms, gamma: 10ms, theta: 20ms, avg: 100, max_burst: 5}
workload: {senders: all, rate: 20/s, size: 100B, arrival: poisson}
faults:
  - {kind: crash, host: h2, at: 1s, restart_after: 500ms}
"""


@pytest.fixture(scope="module")
def vbr_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("vbr")
    (d / "exp.yaml").write_text(SPEC)
    proc = run_cli("run", str(d / "exp.yaml"), "--backend", "sim", "--no-analyze",
                   "--out", str(d / "runs"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run_dir_of(d / "runs")


def events(run: Path, host: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in
            (run / "nodes" / host / "events.jsonl").read_text().splitlines()]


def sends(run: Path, host: str, later: bool) -> list[str]:
    """The mids `host` sent, of its incarnation after the restart (`later`) or before it."""
    return [e["mid"] for e in events(run, host) if e["ev"] == "send"
            and (int(e["mid"].rpartition(":")[2]) > 1_000_000) == later]


def copy_without(run: Path, dest: Path, drop: set[str], hosts: set[str]) -> Path:
    """A copy of `run` whose `hosts` never fnl-delivered the mids `drop`."""
    shutil.copytree(run, dest)
    for host in hosts:
        log = dest / "nodes" / host / "events.jsonl"
        kept = [line for line in log.read_text().splitlines()
                if not (json.loads(line).get("mid") in drop and json.loads(line)["ev"] == "fnl")]
        log.write_text("\n".join(kept) + "\n")
    return dest


def with_params(run: Path, **params: Any) -> Path:
    """`run` with its spec.lock.yaml protocol params updated."""
    lock = run / "spec.lock.yaml"
    doc = yaml.safe_load(lock.read_text())
    doc["experiment"]["protocol"].setdefault("params", {}).update(params)
    lock.write_text(yaml.safe_dump(doc, sort_keys=False))
    return run


def test_qos_vbr_claims_agreement_only_without_loss() -> None:
    assert "agreement" in claims_of({"qos-vbr"})  # loss_tolerance defaults to 0
    assert "agreement" in claims_of({"qos-vbr"}, {"qos-vbr": {"loss_tolerance": 0}})
    assert "agreement" not in claims_of({"qos-vbr"}, {"qos-vbr": {"loss_tolerance": 2}})
    assert "agreement" not in catalogue.get("qos-vbr").claims  # a claim under a param only
    assert claims_of({"sequencer"}, {"qos-vbr": {"loss_tolerance": 2}}) == claims_of(
        {"sequencer"})


def test_a_crash_and_join_without_loss_is_judged_for_agreement_and_holds(
        vbr_run: Path) -> None:
    s = judge_run(read_record(vbr_run))
    agreement = s["checks"]["agreement"]
    assert s["verdict"]["ok"], s["verdict"]
    assert agreement["claimed"] is True and agreement["violations"] == 0
    assert agreement["restarted_nodes"] == ["h2@1"]
    assert set(agreement["restarted_joins"]["h2@1"]) == {"h1", "h3", "h4"}


def test_a_joiner_whose_messages_the_others_skip_fails_agreement(vbr_run: Path,
                                                                 tmp_path: Path) -> None:
    """A join-slot bug as the log shows it: the others leave out the joined incarnation's
    first messages, which it delivered itself. Claimed with x = 0; not with x > 0."""
    first = set(sends(vbr_run, "h2", later=True)[:3])
    assert len(first) == 3
    run = copy_without(vbr_run, tmp_path / "run", first, {"h1", "h3", "h4"})
    s = judge_run(read_record(run))
    agreement = s["checks"]["agreement"]
    assert agreement["claimed"] is True and agreement["violations"] == 9
    assert agreement["missing_per_node"] == {"h1": 3, "h3": 3, "h4": 3}
    assert all(e["delivered_by"] == ["h2@1"] for e in agreement["examples"])
    assert not s["verdict"]["ok"] and s["verdict"]["safety"] == "violated"
    lossy = judge_run(read_record(with_params(run, loss_tolerance=1)))["checks"]["agreement"]
    assert lossy["claimed"] is False and lossy["violations"] == 9


def test_a_joiner_that_skips_the_others_messages_fails_agreement(vbr_run: Path,
                                                                tmp_path: Path) -> None:
    """After its first delivery of h3's messages (its join point in h3's stream: qos-vbr logs
    no `stream_join`), the joiner owes every one of h3's that the others deliver."""
    joined = judge_run(read_record(vbr_run))["checks"]["agreement"]["restarted_joins"]
    origin, _, first = joined["h2@1"]["h3"].partition(":")
    mid = f"{origin}:{int(first) + 2}"
    s = judge_run(read_record(copy_without(vbr_run, tmp_path / "run", {mid}, {"h2"})))
    agreement = s["checks"]["agreement"]
    assert (agreement["violations"], agreement["missing_per_node"]) == (1, {"h2@1": 1})
    assert not s["verdict"]["ok"]


def test_a_crashed_senders_last_message_at_some_hosts_only_is_spared(vbr_run: Path,
                                                                     tmp_path: Path) -> None:
    """004 §6.2: a process that sends m and fails at once may have m delivered by one correct
    process and not another. Counted (`faulty_senders`), spared, not a violation."""
    last = sends(vbr_run, "h2", later=False)[-1]
    assert any(e["ev"] == "fnl" and e["mid"] == last for e in events(vbr_run, "h3"))
    s = judge_run(read_record(copy_without(vbr_run, tmp_path / "run", {last}, {"h3"})))
    agreement = s["checks"]["agreement"]
    assert agreement["faulty_senders"] == 1 and agreement["spared"] == 1
    assert agreement["violations"] == 0 and s["verdict"]["ok"], s["verdict"]
