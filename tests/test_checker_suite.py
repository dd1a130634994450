"""The checker suite finds each crafted bad history, judged against the crash and partition
history, and names the faults active at the time of each violation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from analysis.checks import check_suite
from analysis.fault_history import cut_off, fault_history, intervals
from analysis.ingest import ingest
from analysis.record import read_record
from analysis.session import spark_session
from analysis.synthetic import write_run

pytestmark = pytest.mark.spark

HOSTS = ["h1", "h2", "h3"]
ISOLATE_H3 = [["h1", "h3"], ["h2", "h3"], ["h3", "h1"], ["h3", "h2"]]


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    yield spark_session()


def history_run(
    tmp_path: Path,
    sends: list[tuple[str, str]],
    fnl: dict[str, list[str]],
    faults: list[dict[str, Any]] | None = None,
    proto: str = "sequencer",
    extra: dict[str, list[dict[str, Any]]] | None = None,
) -> Path:
    """Each (host, mid) in `sends` is sent at t = 1000 + k; then host h fnl-delivers fnl[h] in
    order, the k-th at t = 10_000 + k. `extra` events are appended per host as given."""
    logs: dict[str, list[dict[str, Any]]] = {h: [] for h in HOSTS}
    for k, (host, mid) in enumerate(sends):
        logs[host].append({"t": 1000 + k, "ev": "send", "mid": mid, "proto": proto})
    for host, mids in fnl.items():
        for k, mid in enumerate(mids):
            logs[host].append({"t": 10_000 + k, "ev": "fnl", "mid": mid, "seq": k + 1,
                               "proto": proto})
    for host, events in (extra or {}).items():
        logs[host] += events
    return write_run(tmp_path / "run", logs, faults or [])


def suite(spark: SparkSession, run: Path) -> dict[str, dict[str, Any]]:
    data = ingest(spark, read_record(run), write=False)
    try:
        return check_suite(data.events, fault_history(data.nodes, data.faults))
    finally:
        data.release()


def counts(checks: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {k: c["violations"] for k, c in checks.items() if c["violations"]}


MIDS = ["h1:1", "h2:1", "h3:1", "h1:2"]
SENDS = [(m.split(":")[0], m) for m in MIDS]


def test_clean_history_passes_every_checker(spark: SparkSession, tmp_path: Path) -> None:
    checks = suite(spark, history_run(tmp_path, SENDS, {h: MIDS for h in HOSTS}))
    assert set(checks) == {"total_order", "agreement", "validity", "integrity", "fifo_order",
                           "causal_order"}
    assert counts(checks) == {}
    assert checks["causal_order"]["claimed"] is True


def test_disagreement_between_two_nodes_on_messages_the_reference_lacks(
    spark: SparkSession, tmp_path: Path
) -> None:
    # h1 (the reference: most deliveries) never delivers h2:7 / h2:8, so comparing against it
    # alone would miss that h2 and h3 deliver them in opposite orders (gaps, 004 Def. 2).
    sends = [*SENDS, ("h2", "h2:7"), ("h2", "h2:8")]
    fnl = {"h1": [*MIDS, "h1:3", "h1:4"], "h2": [*MIDS, "h2:7", "h2:8"],
           "h3": [*MIDS, "h2:8", "h2:7"]}
    sends += [("h1", "h1:3"), ("h1", "h1:4")]
    crash = [{"t": 1, "kind": "crash", "phase": "start", "hosts": ["h1"], "fault": 0}]
    checks = suite(spark, history_run(tmp_path, sends, fnl, crash, proto="raw"))
    assert checks["total_order"]["violations"] == 1
    example = checks["total_order"]["examples"][0]
    assert example["mids"] == ["h2:7", "h2:8"]
    assert example["orders"] == {"h2:7 before h2:8": ["h2"], "h2:8 before h2:7": ["h3"]}
    # The crash of h1 was active when h3 delivered the pair, and the example says so.
    assert [f["kind"] for f in example["faults_active"]] == ["crash"]
    # h3 also breaks FIFO for h2. h1's own h1:3 and h1:4 are missing at h2 and h3, but only
    # h1 delivered them and h1 crashed: agreement binds what a correct host delivered (000
    # sec. 2.2), so neither that nor h1 missing h2:7 and h2:8 is a violation. The FIFO swap is
    # a causal one too (not claimed by "raw").
    assert counts(checks) == {"total_order": 1, "fifo_order": 1, "causal_order": 1}
    assert not checks["causal_order"]["claimed"]


def test_total_order_counts_each_misordered_pair_once_over_all_node_pairs(
    spark: SparkSession, tmp_path: Path
) -> None:
    reversed_ = list(reversed(MIDS))
    checks = suite(spark, history_run(tmp_path, SENDS, {"h1": MIDS, "h2": MIDS, "h3": reversed_},
                                      proto="raw"))
    assert checks["total_order"]["violations"] == 6  # every pair of 4 messages
    assert checks["total_order"]["inverted_per_node"] == {"h3": 6}


def test_fifo_violation_that_every_node_agrees_on_is_not_a_total_order_one(
    spark: SparkSession, tmp_path: Path
) -> None:
    order = ["h1:2", "h2:1", "h3:1", "h1:1"]
    checks = suite(spark, history_run(tmp_path, SENDS, {h: order for h in HOSTS}))
    # FIFO order is part of causal order (h1 sent h1:1 before h1:2), so both see it, once
    # per node.
    assert counts(checks) == {"fifo_order": 3, "causal_order": 3}
    assert {(e["node"], e["mid"], e["delivered_after"]) for e in checks["fifo_order"]["examples"]
            } == {(h, "h1:1", "h1:2") for h in HOSTS}


def causal_break(tmp_path: Path, proto: str) -> Path:
    # h2 delivers h1:1 and then sends h2:1, yet every node orders h2:1 before h1:1.
    logs: dict[str, list[dict[str, Any]]] = {
        "h1": [{"t": 1, "ev": "send", "mid": "h1:1"}],
        "h2": [{"t": 5, "ev": "fnl", "mid": "h1:1"}, {"t": 6, "ev": "send", "mid": "h2:1"}],
        "h3": [],
    }
    for h in ("h1", "h3"):
        logs[h] += [{"t": 100, "ev": "fnl", "mid": "h2:1"}, {"t": 101, "ev": "fnl", "mid": "h1:1"}]
    logs["h2"].append({"t": 100, "ev": "fnl", "mid": "h2:1"})
    for events in logs.values():
        for e in events:
            e["proto"] = proto
    return write_run(tmp_path / "run", logs)


def test_causal_violation_counts_when_the_protocol_claims_causal_order(
    spark: SparkSession, tmp_path: Path
) -> None:
    checks = suite(spark, causal_break(tmp_path, "sequencer"))
    causal = checks["causal_order"]
    # One misplaced delivery at each of h1 and h3: h2:1 before h1:1, which h2 had delivered
    # before sending h2:1.
    assert causal["violations"] == 2
    assert causal["per_node"] == {"h1": 1, "h3": 1}
    assert [(e["node"], e["mid"], e["delivered_before"]) for e in causal["examples"]] == [
        ("h1", "h2:1", "h1:1"), ("h3", "h2:1", "h1:1")]
    assert causal["claimed"] is True


def test_causal_break_is_only_observed_for_a_protocol_without_the_claim(
    spark: SparkSession, tmp_path: Path
) -> None:
    causal = suite(spark, causal_break(tmp_path, "raw"))["causal_order"]
    assert (causal["claimed"], causal["violations"], causal["observed"]) == (False, 2, 2)


def test_validity_flags_own_and_received_messages_a_correct_host_never_delivered(
    spark: SparkSession, tmp_path: Path
) -> None:
    sends = [*SENDS, ("h1", "h1:9")]
    recv = {"h2": [{"t": 20_000, "ev": "recv", "mid": "h1:9", "proto": "sequencer"}]}
    checks = suite(spark, history_run(tmp_path, sends, {h: MIDS for h in HOSTS}, extra=recv))
    validity = checks["validity"]
    assert (validity["not_self_delivered"], validity["received_not_delivered"]) == (1, 1)
    assert {(e["kind"], e["node"]) for e in validity["examples"]} == {
        ("not_self_delivered", "h1"), ("received_not_delivered", "h2")}
    assert counts(checks) == {"validity": 2}


def test_validity_ignores_a_crashed_sender(spark: SparkSession, tmp_path: Path) -> None:
    crash = [{"t": 1, "kind": "crash", "phase": "start", "hosts": ["h1"], "fault": 0}]
    sends = [*SENDS, ("h1", "h1:9")]
    checks = suite(spark, history_run(tmp_path, sends, {h: MIDS for h in HOSTS}, crash))
    assert counts(checks) == {}


def partition(stop: bool) -> list[dict[str, Any]]:
    start = {"t": 9_000, "kind": "partition", "phase": "start", "hosts": HOSTS, "fault": 3,
             "params": {"cuts": ISOLATE_H3}}
    return [start, {"t": 50_000, "kind": "partition", "phase": "stop", "hosts": [], "fault": 3}
            ] if stop else [start]


def test_host_cut_off_until_the_end_is_not_held_to_agreement(
    spark: SparkSession, tmp_path: Path
) -> None:
    fnl = {"h1": MIDS, "h2": MIDS, "h3": MIDS[:1]}
    checks = suite(spark, history_run(tmp_path, SENDS, fnl, partition(stop=False)))
    assert checks["agreement"]["partitioned_at_end"] == ["h3"]
    # h3's own h3:1 is not held to validity either: h3 is not correct.
    assert counts(checks) == {}


def test_host_that_never_caught_up_after_the_heal_breaks_agreement_during_the_partition(
    spark: SparkSession, tmp_path: Path
) -> None:
    fnl = {"h1": MIDS, "h2": MIDS, "h3": MIDS[:1]}
    checks = suite(spark, history_run(tmp_path, SENDS, fnl, partition(stop=True)))
    agreement = checks["agreement"]
    assert agreement["violations"] == 3
    assert agreement["missing_per_node"] == {"h3": 3}
    assert [f["kind"] for f in agreement["examples"][0]["faults_active"]] == ["partition"]
    assert agreement["examples"][0]["faults_active"][0]["stop"] == 50_000
    assert checks["validity"]["not_self_delivered"] == 1  # h3:1, h3 is correct


def test_fault_intervals_pair_starts_and_stops_and_find_the_cut_off_side() -> None:
    faults = [
        {"t": 5, "kind": "crash", "phase": "start", "hosts": ["h2"], "fault": 1},
        {"t": 1, "kind": "partition", "phase": "start", "hosts": HOSTS, "fault": 0,
         "params": {"cuts": ISOLATE_H3}},
        {"t": 9, "kind": "crash", "phase": "stop", "hosts": ["h2"], "fault": 1},
    ]
    spans = intervals(faults)
    assert [(f.kind, f.start, f.stop) for f in spans] == [
        ("partition", 1, float("inf")), ("crash", 5, 9)]
    assert cut_off(HOSTS, spans[0].cuts) == {"h3"}
    assert cut_off(["a", "b"], (("a", "b"),)) == {"b"}
    history = fault_history(HOSTS, faults)
    assert history.correct == ["h1"]
    assert [f["kind"] for f in history.active_at(6)] == ["partition", "crash"]
    assert [f["kind"] for f in history.active_at(10)] == ["partition"]


def test_batch_delivered_at_one_instant_is_judged_by_order_not_by_time(
    spark: SparkSession, tmp_path: Path
) -> None:
    # A sequencer batch: every host fnl-delivers three messages at the same instant, so their
    # consensus times tie and the mid breaks the tie ("h1:10" < "h1:9" < "h3:1"), against the
    # delivery order. Every host inverts h1:9/h1:10 the same way: no violation. h3 alone
    # delivers h3:1 before h1:10: one violation, shown with each holder's log ordinals.
    batch = {"h1": ["h1:9", "h1:10", "h3:1"], "h2": ["h1:9", "h1:10", "h3:1"],
             "h3": ["h1:9", "h3:1", "h1:10"]}
    logs: dict[str, list[dict[str, Any]]] = {
        "h1": [{"t": 10, "ev": "send", "mid": "h1:9"}, {"t": 11, "ev": "send", "mid": "h1:10"}],
        "h2": [], "h3": [{"t": 12, "ev": "send", "mid": "h3:1"}]}
    for host, mids in batch.items():
        logs[host] += [{"t": 5_000, "ev": "fnl", "mid": m} for m in mids]
    for events in logs.values():
        for e in events:
            e["proto"] = "sequencer"
    checks = suite(spark, write_run(tmp_path / "run", logs))
    assert counts(checks) == {"total_order": 1}
    order = checks["total_order"]
    assert order["inverted_per_node"] == {"h1": 1, "h2": 1, "h3": 2}
    example = order["examples"][0]
    assert example["mids"] == ["h1:10", "h3:1"]
    assert example["orders"] == {"h1:10 before h3:1": ["h1", "h2"],
                                 "h3:1 before h1:10": ["h3"]}
    assert example["node_ordinals"] == {"h1": [3, 4], "h2": [1, 2], "h3": [3, 2]}
    assert example["t"] == 5_000
