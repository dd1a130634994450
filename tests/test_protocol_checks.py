"""The Spark checker suite on the protocols' simulated runs: every claimed check passes with
0 violations, unclaimed ones report their counts without failing the run, negative controls
are caught, and an anomaly seeded alone into a clean run's logs is one finding per node."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from analysis.checks import check_suite
from analysis.fault_history import fault_history
from analysis.ingest import ingest
from analysis.record import read_record
from analysis.session import spark_session
from analysis.verdict import checks_ok
from nodes.protocols import catalogue
from tests import protosim as ps
from tests.test_protocols import RELIABLE, TRIANGLE, ack_on_receipt, cbcast_on_receipt

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    yield spark_session()


def suite(spark: SparkSession, run: Path) -> dict[str, dict[str, Any]]:
    data = ingest(spark, read_record(run), write=False)
    try:
        return check_suite(data.events, fault_history(data.nodes, data.faults))
    finally:
        data.release()


def counts(checks: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {k: c["violations"] for k, c in checks.items() if c["violations"]}


def test_every_protocol_passes_its_claimed_checks_with_loss_and_jitter(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The acceptance runs: 10 s, 5 hosts all sending, 2% loss and 1 ms jitter everywhere."""
    for name in RELIABLE:
        run = tmp_path / name
        ps.run(ps.configs(name, run, loss=0.02, jitter_ms=1.0, duration_s=10.0))
        checks = suite(spark, run)
        claims = catalogue.get(name).claims
        assert {k for k, c in checks.items() if c["claimed"]} == claims, name
        assert {k: c["violations"] for k, c in checks.items() if c["claimed"]} == dict.fromkeys(
            claims, 0), (name, counts(checks))
        assert checks_ok({"checks": checks}), name


def test_triangle_reliable_ack_breaks_causal_order_unclaimed_and_cbcast_keeps_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    found = {}
    for name in ("reliable-ack", "cbcast"):
        ps.run(ps.configs(name, tmp_path / name, matrix_ms=TRIANGLE, loss=0.0, duration_s=5.0))
        found[name] = suite(spark, tmp_path / name)
    ack = found["reliable-ack"]["causal_order"]
    assert ack["violations"] > 0 and not ack["claimed"]
    assert set(ack["per_node"]) <= {"h1", "h3"}  # where h2's replies overtake h1 and h3's
    assert checks_ok({"checks": found["reliable-ack"]})  # unclaimed: the run passes
    assert found["cbcast"]["causal_order"]["claimed"]
    assert counts(found["cbcast"]) == {"total_order": found["cbcast"]["total_order"][
        "violations"]}  # concurrent messages in different orders: total order, unclaimed
    assert checks_ok({"checks": found["cbcast"]})


@pytest.mark.parametrize("name,patch,setup,check", [
    ("cbcast", cbcast_on_receipt, {"matrix_ms": TRIANGLE, "loss": 0.0}, "causal_order"),
    ("reliable-ack", ack_on_receipt, {"loss": 0.05}, "fifo_order"),
], ids=["cbcast", "reliable-ack"])
def test_negative_control_fails_the_claimed_check(spark: SparkSession, tmp_path: Path,
                                                  name: str, patch: Any,
                                                  setup: dict[str, Any], check: str) -> None:
    ps.run(ps.configs(name, tmp_path, duration_s=4.0, **setup), patch=patch)
    checks = suite(spark, tmp_path)
    assert checks[check]["claimed"] and checks[check]["violations"] > 0
    assert not checks_ok({"checks": checks})


# -- anomalies seeded one at a time into a clean run's logs -----------------------------------
def read_logs(run: Path) -> dict[str, list[dict[str, Any]]]:
    return {p.parent.name: [json.loads(x) for x in p.read_text().splitlines()]
            for p in sorted((run / "nodes").glob("*/events.jsonl"))}


def write_logs(run: Path, logs: dict[str, list[dict[str, Any]]]) -> Path:
    for host, events in logs.items():
        with (run / "nodes" / host / "events.jsonl").open("w") as f:
            for i, e in enumerate(events):
                f.write(json.dumps({**e, "i": i}) + "\n")
    return run


def fnl_index(events: list[dict[str, Any]], mid: str) -> int:
    return next(k for k, e in enumerate(events) if e["ev"] == "fnl" and e["mid"] == mid)


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("clean")
    ps.run(ps.configs("sequencer", run, n=4, loss=0.0, jitter_ms=1.0, duration_s=5.0))
    return run


def concurrent(logs: dict[str, list[dict[str, Any]]], m1: str, m2: str) -> bool:
    """Neither message's sender had delivered the other before sending it (swapping two
    such deliveries breaks total order only, not causal order)."""
    for m, other in ((m1, m2), (m2, m1)):
        sender = logs[m.split(":")[0]]
        sent = next(k for k, e in enumerate(sender) if e["ev"] == "send" and e["mid"] == m)
        if any(e["ev"] == "fnl" and e["mid"] == other for e in sender[:sent]):
            return False
    return True


def seeded(clean: Path, tmp_path: Path, how: str) -> Path:
    logs = read_logs(clean)
    h2 = logs["h2"]
    fnl = [k for k, e in enumerate(h2) if e["ev"] == "fnl"]
    if how == "swap":  # two adjacent deliveries of different senders at h2, concurrent
        k = next(k for a, k in zip(fnl[100:], fnl[101:], strict=False)
                 if h2[a]["mid"].split(":")[0] != h2[k]["mid"].split(":")[0]
                 and h2[a]["mid"].split(":")[0] != "h2" and h2[k]["mid"].split(":")[0] != "h2"
                 and all(h2[j]["ev"] != "send" for j in range(a, k))
                 and concurrent(logs, h2[a]["mid"], h2[k]["mid"]))
        a = fnl[fnl.index(k) - 1]
        h2[a], h2[k] = h2[k], h2[a]
    elif how == "drop":
        del h2[fnl[100]]
    elif how == "duplicate":
        h2.insert(fnl[120], dict(h2[fnl[100]]))
    elif how == "never_sent":
        h2.insert(fnl[100], {**h2[fnl[100]], "mid": "h1:999999"})
    elif how == "fifo_swap":  # two messages of h1 swapped at every node
        for events in logs.values():
            a, b = fnl_index(events, "h1:50"), fnl_index(events, "h1:51")
            events[a], events[b] = events[b], events[a]
    run = tmp_path / "run"
    (run / "nodes").mkdir(parents=True)
    for host in logs:
        (run / "nodes" / host).mkdir()
    return write_logs(run, logs)


@pytest.mark.parametrize("how,check,per_node", [
    ("swap", "total_order", None),
    ("drop", "agreement", {"h2": 1}),
    ("duplicate", "integrity", None),
    ("never_sent", "integrity", None),
    ("fifo_swap", "fifo_order", {h: 1 for h in ("h1", "h2", "h3", "h4")}),
])
def test_each_seeded_anomaly_is_at_most_one_finding_per_node(
    spark: SparkSession, clean: Path, tmp_path: Path, how: str, check: str,
    per_node: dict[str, int] | None
) -> None:
    assert counts(suite(spark, clean)) == {}
    checks = suite(spark, seeded(clean, tmp_path, how))
    found = counts(checks)
    assert found.get(check, 0) >= 1, found
    if how == "swap":
        assert found == {"total_order": 1}, found
    if how in ("duplicate", "never_sent"):
        assert found == {"integrity": 1}, found
    if how == "drop":
        assert checks["agreement"]["missing_per_node"] == per_node
        assert set(found) <= {"agreement", "validity"} and found["agreement"] == 1, found
    if how == "fifo_swap":
        # FIFO order is part of causal order, so the causal checker sees the same swap.
        assert found == {"fifo_order": 4, "causal_order": 4}, found
        assert {e["node"] for e in checks["fifo_order"]["examples"]} == set(per_node or {})
        assert checks["causal_order"]["per_node"] == per_node
    if how == "never_sent":
        assert checks["integrity"]["examples"][0]["mid"] == "h1:999999"
