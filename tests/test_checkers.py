"""The safety checkers report each kind of fault as exactly that violation and nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from analysis.checks import run_checks
from analysis.fault_history import crashed_hosts
from analysis.ingest import ingest, read_events
from analysis.record import read_record
from analysis.session import spark_session
from analysis.synthetic import write_run

pytestmark = pytest.mark.spark

HOSTS = ["h1", "h2", "h3"]
MIDS = ["h1:1", "h2:1", "h3:1", "h1:2", "h2:2"]


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    # Shared by every Spark test file: spark_session() returns the active session.
    yield spark_session()


def sends(mids: list[str]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {h: [] for h in HOSTS}
    for k, mid in enumerate(mids):
        out[mid.split(":")[0]].append({"t": 1_000 + k, "ev": "send", "mid": mid})
    return out


def run_with(
    tmp_path: Path,
    order: dict[str, list[str]] | None = None,
    faults: list[dict[str, Any]] | None = None,
) -> Path:
    """Every host sends its MIDS, then fnl-delivers `order[host]` (default: MIDS in order)."""
    logs = sends(MIDS)
    order = order or {}
    for h in HOSTS:
        for k, mid in enumerate(order.get(h, MIDS)):
            logs[h].append({"t": 10_000 + k, "ev": "fnl", "mid": mid, "seq": k + 1})
    return write_run(tmp_path / "run", logs, faults or [])


def checks_of(spark: SparkSession, run_dir: Path) -> dict[str, dict[str, Any]]:
    data = ingest(spark, read_record(run_dir), write=False)
    return run_checks(data.events, data.nodes, data.crashed)


def violations(checks: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {name: c["violations"] for name, c in checks.items()}


def test_clean_log_has_no_violations(spark: SparkSession, tmp_path: Path) -> None:
    checks = checks_of(spark, run_with(tmp_path))
    assert violations(checks) == {"total_order": 0, "agreement": 0, "integrity": 0}
    assert checks["total_order"]["reference"] == "h1"


def test_swapped_pair_at_one_node_is_one_total_order_violation(
    spark: SparkSession, tmp_path: Path
) -> None:
    swapped = ["h1:1", "h3:1", "h2:1", "h1:2", "h2:2"]
    checks = checks_of(spark, run_with(tmp_path, order={"h2": swapped}))
    assert violations(checks) == {"total_order": 1, "agreement": 0, "integrity": 0}
    example = checks["total_order"]["examples"][0]
    assert example["mids"] == ["h2:1", "h3:1"]
    assert example["nodes"] == ["h2"]


def test_swap_at_the_reference_node_still_counts_once(spark: SparkSession, tmp_path: Path) -> None:
    # h1 is the reference (ties broken by name); the two others each disagree with it.
    swapped = ["h1:1", "h3:1", "h2:1", "h1:2", "h2:2"]
    checks = checks_of(spark, run_with(tmp_path, order={"h1": swapped}))
    assert checks["total_order"]["reference"] == "h1"
    assert violations(checks) == {"total_order": 1, "agreement": 0, "integrity": 0}
    assert checks["total_order"]["examples"][0]["nodes"] == ["h2", "h3"]


def test_two_separate_swaps_count_two(spark: SparkSession, tmp_path: Path) -> None:
    order = {
        "h2": ["h2:1", "h1:1", "h3:1", "h1:2", "h2:2"],
        "h3": ["h1:1", "h2:1", "h3:1", "h2:2", "h1:2"],
    }
    checks = checks_of(spark, run_with(tmp_path, order=order))
    assert checks["total_order"]["violations"] == 2


def test_duplicate_delivery_is_only_an_integrity_violation(
    spark: SparkSession, tmp_path: Path
) -> None:
    # h3 logs its send at i=0, so its fnl of h1:1 is i=1; the late copy (i=6) would look like
    # a reordering if copies were not dropped.
    checks = checks_of(spark, run_with(tmp_path, order={"h3": [*MIDS, "h1:1"]}))
    assert violations(checks) == {"total_order": 0, "agreement": 0, "integrity": 1}
    assert checks["integrity"]["duplicates"] == 1
    assert checks["integrity"]["never_sent"] == 0
    assert checks["integrity"]["examples"] == [
        {"kind": "duplicate", "node": "h3", "mid": "h1:1", "i": [1, 6], "extra": 1}
    ]


def test_message_missing_at_a_correct_node_is_only_an_agreement_violation(
    spark: SparkSession, tmp_path: Path
) -> None:
    checks = checks_of(spark, run_with(tmp_path, order={"h2": MIDS[:-1]}))
    assert violations(checks) == {"total_order": 0, "agreement": 1, "integrity": 0}
    assert checks["agreement"]["examples"] == [
        {"mid": "h2:2", "node": "h2", "delivered_by": ["h1", "h3"]}
    ]
    assert checks["agreement"]["missing_per_node"] == {"h2": 1}


def test_message_missing_at_a_crashed_node_is_no_violation(
    spark: SparkSession, tmp_path: Path
) -> None:
    crash = [{"t": 5, "kind": "crash", "phase": "start", "hosts": ["h2"]}]
    checks = checks_of(spark, run_with(tmp_path, order={"h2": MIDS[:2]}, faults=crash))
    assert violations(checks) == {"total_order": 0, "agreement": 0, "integrity": 0}
    assert checks["agreement"]["crashed_nodes"] == ["h2"]


def test_delivery_of_a_never_sent_message_is_only_an_integrity_violation(
    spark: SparkSession, tmp_path: Path
) -> None:
    forged = [*MIDS, "h3:9"]
    run = run_with(tmp_path, order={h: forged for h in HOSTS})
    checks = checks_of(spark, run)
    assert violations(checks) == {"total_order": 0, "agreement": 0, "integrity": 3}
    assert checks["integrity"]["never_sent"] == 3
    assert checks["integrity"]["duplicates"] == 0
    assert {e["mid"] for e in checks["integrity"]["examples"]} == {"h3:9"}


def test_truncated_last_line_is_counted_and_intact_rows_are_kept(
    spark: SparkSession, tmp_path: Path
) -> None:
    run = run_with(tmp_path)
    log = run / "nodes" / "h3" / "events.jsonl"
    log.write_text(log.read_text() + '{"t": 99999, "lt": 99999, "i": 7, "node": "h3", "ev": "f')
    events, malformed = read_events(spark, read_record(run))
    assert malformed == {"h3": 1}
    assert events.filter("node = 'h3' and ev = 'fnl'").count() == len(MIDS)
    assert violations(checks_of(spark, run)) == {"total_order": 0, "agreement": 0, "integrity": 0}


def test_node_without_events_misses_every_message(spark: SparkSession, tmp_path: Path) -> None:
    run = run_with(tmp_path)
    (run / "nodes" / "h4").mkdir()
    (run / "nodes" / "h4" / "events.jsonl").write_text("")
    checks = checks_of(spark, run)
    assert violations(checks) == {"total_order": 0, "agreement": len(MIDS), "integrity": 0}


@pytest.mark.parametrize(
    ("faults", "crashed"),
    [
        ([], set()),
        ([{"t": 1, "kind": "crash", "phase": "start", "hosts": ["h1"]}], {"h1"}),
        (
            [
                {"t": 1, "kind": "crash", "phase": "start", "hosts": ["h1", "h2"]},
                {"t": 2, "kind": "restart", "phase": "start", "hosts": ["h1"]},
            ],
            {"h1", "h2"},
        ),
        (
            [
                {"t": 1, "kind": "crash", "phase": "start", "hosts": ["h1"]},
                {"t": 2, "kind": "crash", "phase": "stop", "hosts": ["h1"]},
                {"t": 3, "kind": "partition", "phase": "start", "hosts": ["h3"]},
            ],
            {"h1"},
        ),
    ],
)
def test_every_host_that_crashed_is_not_correct_even_after_restart(
    faults: list[dict[str, Any]], crashed: set[str]
) -> None:
    assert crashed_hosts(faults) == crashed


def test_a_log_line_naming_a_host_without_a_directory_is_checked_like_any_other(
    spark: SparkSession, tmp_path: Path
) -> None:
    # a0 has no directory of its own (its lines sit in h1's log): not held to agreement, but a
    # holder like any other. Its name sorts before the run's hosts, so it is the first bit of
    # every holder bitmap. The consensus (lower-median time) orders h2:1 first, as h3 does;
    # a0, h1 and h2 deliver h1:1 first: three of the four holders invert the pair, one does
    # not -- a violation, visible only if all four holders are counted.
    logs = sends(MIDS)
    logs["h3"] += [{"t": 100, "ev": "fnl", "mid": "h2:1"}, {"t": 101, "ev": "fnl", "mid": "h1:1"}]
    for h in ("h1", "h2"):
        logs[h] += [{"t": 200, "ev": "fnl", "mid": "h1:1"}, {"t": 201, "ev": "fnl", "mid": "h2:1"}]
    logs["h1"] += [{"t": 50, "ev": "fnl", "mid": "h1:1", "node": "a0"},
                   {"t": 51, "ev": "fnl", "mid": "h2:1", "node": "a0"}]
    data = ingest(spark, read_record(write_run(tmp_path / "run", logs)), write=False)
    checks = run_checks(data.events, data.nodes, data.crashed)
    assert violations(checks) == {"total_order": 1, "agreement": 0, "integrity": 0}
    order = checks["total_order"]
    assert order["inverted_per_node"] == {"a0": 1, "h1": 1, "h2": 1}
    assert order["examples"][0]["orders"] == {"h2:1 before h1:1": ["h3"],
                                             "h1:1 before h2:1": ["a0", "h1", "h2"]}
