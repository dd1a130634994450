"""Latency, throughput and counts come out exactly as the hand-made logs dictate."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from analysis.__main__ import main
from analysis.ingest import ingest
from analysis.job import analyze
from analysis.metrics import fnl_latency, message_counts, throughput
from analysis.overview import overview
from analysis.record import read_record
from analysis.report import write_report
from analysis.session import spark_session
from analysis.synthetic import write_run

pytestmark = pytest.mark.spark

MS = 1_000_000
S = 1_000_000_000


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    # Shared by every Spark test file: spark_session() returns the active session.
    yield spark_session()


def latency_run(tmp_path: Path) -> Path:
    """h1 sends 100 messages; h1 delivers mid k after k ms, h2 after 2k ms (k = 1..100).

    h2 also sends one message that only h1 delivers (after 7 ms), and both nodes log an
    opt delivery that the metrics must ignore.
    """
    logs: dict[str, list[dict[str, Any]]] = {"h1": [], "h2": []}
    for k in range(1, 101):
        mid = f"h1:{k}"
        t0 = k * S
        logs["h1"].append({"t": t0, "ev": "send", "mid": mid})
        logs["h1"].append({"t": t0 + k * MS, "ev": "opt", "mid": mid})
        logs["h1"].append({"t": t0 + k * MS, "ev": "fnl", "mid": mid, "seq": k})
        logs["h2"].append({"t": t0 + 2 * k * MS, "ev": "fnl", "mid": mid, "seq": k})
    logs["h2"].append({"t": 500 * S, "ev": "send", "mid": "h2:1"})
    logs["h1"].append({"t": 500 * S + 7 * MS, "ev": "fnl", "mid": "h2:1", "seq": 101})
    for events in logs.values():
        events.sort(key=lambda e: e["t"])
    return write_run(tmp_path / "run", logs)


@pytest.fixture(scope="module")
def latency_data(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Any:
    data = ingest(spark, read_record(latency_run(tmp_path_factory.mktemp("lat"))), write=False)
    yield data
    data.release()


def test_latency_quantiles_are_exact_per_receiver_and_pair(latency_data: Any) -> None:
    lat = fnl_latency(latency_data.events)
    h1 = lat["per_pair"]["h1->h1"]
    assert h1["count"] == 100
    # percentile() interpolates linearly over the sorted values 1..100 ms.
    assert h1["p50_ms"] == pytest.approx(50.5)
    assert h1["p95_ms"] == pytest.approx(95.05)
    assert h1["p99_ms"] == pytest.approx(99.01)
    assert h1["max_ms"] == pytest.approx(100.0)
    assert lat["per_pair"]["h1->h2"]["max_ms"] == pytest.approx(200.0)
    assert lat["per_pair"]["h2->h1"] == {
        "p50_ms": pytest.approx(7.0),
        "p95_ms": pytest.approx(7.0),
        "p99_ms": pytest.approx(7.0),
        "max_ms": pytest.approx(7.0),
        "count": 1,
    }
    assert set(lat["per_pair"]) == {"h1->h1", "h1->h2", "h2->h1"}
    assert lat["per_receiver"]["h1"]["count"] == 101
    assert lat["per_receiver"]["h2"]["p50_ms"] == pytest.approx(101.0)
    assert lat["all"]["count"] == 201
    assert lat["all"]["max_ms"] == pytest.approx(200.0)


def _numpy_stats(values: list[float]) -> dict[str, Any]:
    """What fnl_latency must report for `values`: numpy's linear quantiles (the same
    interpolation as Spark's `percentile`), the maximum and the count."""
    import numpy as np

    v = np.array(values)
    p50, p95, p99 = (float(np.quantile(v, q, method="linear")) for q in (0.5, 0.95, 0.99))
    return {"p50_ms": pytest.approx(p50, abs=1e-9), "p95_ms": pytest.approx(p95, abs=1e-9),
            "p99_ms": pytest.approx(p99, abs=1e-9), "max_ms": float(v.max()), "count": len(v)}


@pytest.mark.parametrize("bracket", [3, 0])
def test_latency_quantiles_stay_exact_past_the_approximation(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        bracket: int) -> None:
    """30,000 deliveries, ties and all: fnl_latency's quantiles equal numpy's exact ones per
    pair, receiver, sender and overall, though percentile_approx alone (accuracy 100 here)
    may miss by 1% of the ranks; a bracket of width 0 misses and is widened."""
    import random

    from analysis import metrics

    monkeypatch.setattr(metrics, "LATENCY_ACCURACY", 100)
    monkeypatch.setattr(metrics, "LATENCY_BRACKET", bracket)
    monkeypatch.setattr(metrics, "LATENCY_DRIVER_MAX", 0)  # the passes, not the driver's sort
    passes: list[float] = []
    first_pass = metrics._latency_groups

    def counted(lat: Any, width: float) -> Any:
        passes.append(width)
        return first_pass(lat, width)

    monkeypatch.setattr(metrics, "_latency_groups", counted)
    rng = random.Random(7)
    logs: dict[str, list[dict[str, Any]]] = {"h1": [], "h2": [], "h3": []}
    values: dict[tuple[str, str], list[float]] = {}
    for k in range(1, 5001):
        for sender in ("h1", "h2"):
            mid, t0 = f"{sender}:{k}", k * S
            logs[sender].append({"t": t0, "ev": "send", "mid": mid})
            for node in logs:
                ns = rng.randrange(1, 400) * 25_000 + (rng.randrange(3) if node == "h3" else 0)
                logs[node].append({"t": t0 + ns, "ev": "fnl", "mid": mid})
                values.setdefault((sender, node), []).append(ns / MS)
    for events in logs.values():
        events.sort(key=lambda e: e["t"])
    data = ingest(spark, read_record(write_run(tmp_path / "run", logs)), write=False)
    try:
        lat = metrics.fnl_latency(data.events)
    finally:
        data.release()
    assert lat["all"] == _numpy_stats([v for vs in values.values() for v in vs])
    for (sender, node), vs in values.items():
        assert lat["per_pair"][f"{sender}->{node}"] == _numpy_stats(vs)
    for node in logs:
        assert lat["per_receiver"][node] == _numpy_stats(
            [v for (_, n), vs in values.items() if n == node for v in vs])
    for sender in ("h1", "h2"):
        assert lat["per_sender"][sender] == _numpy_stats(
            [v for (s, _), vs in values.items() if s == sender for v in vs])
    assert (len(passes) > 1) == (bracket == 0), passes  # widened only when it missed
    monkeypatch.setattr(metrics, "LATENCY_DRIVER_MAX", 10**9)  # the driver's one sort agrees
    data = ingest(spark, read_record(write_run(tmp_path / "run2", logs)), write=False)
    try:
        on_driver = metrics.fnl_latency(data.events)
    finally:
        data.release()
    assert on_driver["all"] == pytest.approx(lat["all"], abs=1e-9)
    for key in ("per_receiver", "per_sender", "per_pair"):
        assert on_driver[key].keys() == lat[key].keys()
        for group, stats in lat[key].items():
            assert on_driver[key][group] == pytest.approx(stats, abs=1e-9), (key, group)


def test_throughput_is_deliveries_over_each_nodes_span(latency_data: Any) -> None:
    tp = throughput(latency_data.events, ["h1", "h2", "h3"])
    # h1: 101 deliveries from 1.001 s to 500.007 s; h2: 100 from 1.002 s to 100.2 s.
    assert tp["per_node"]["h1"] == pytest.approx(101 / (500.007 - 1.001))
    assert tp["per_node"]["h2"] == pytest.approx(100 / (100.2 - 1.002))
    assert tp["per_node"]["h3"] == 0.0
    assert tp["min_msgs_per_s"] == 0.0


def test_counts_separate_sent_fnl_and_opt(latency_data: Any) -> None:
    counts = message_counts(overview(latency_data.events), ["h1", "h2"])
    assert counts == {"sent": 101, "fnl": {"h1": 101, "h2": 100}, "opt": {"h1": 100, "h2": 0}}


def test_analyze_cli_writes_summary_parquet_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = latency_run(tmp_path)
    (run / "nodes" / "h3").mkdir()  # a node that logged nothing
    crash = {"t": 1, "kind": "crash", "phase": "start", "hosts": ["h3"]}
    (run / "faults.jsonl").write_text(json.dumps(crash) + "\n")
    assert main([str(run)]) == 0
    printed = json.loads(capsys.readouterr().out)
    summary = json.loads((run / "summary.json").read_text())
    assert printed == summary
    assert summary["nodes"] == ["h1", "h2", "h3"]
    assert summary["messages"]["fnl"] == {"h1": 101, "h2": 100, "h3": 0}
    # h2 never delivered h2:1; h3 crashed, so only that one pair breaks agreement.
    assert summary["checks"]["agreement"]["violations"] == 1
    assert summary["checks"]["total_order"]["violations"] == 0
    assert summary["checks"]["integrity"]["violations"] == 0
    assert summary["ok"] is False
    assert summary["latency"]["fnl"]["per_pair"]["h1->h2"]["count"] == 100
    assert summary["throughput"]["min_msgs_per_s"] == 0.0
    table = pq.read_table(run / "parquet" / "events")
    assert table.num_rows == 100 * 3 + 100 + 2
    report = (run / "report.html").read_text()
    assert "FAIL" in report and "agreement: 1 violation(s)" in report
    # Self-contained: no scripts and nothing fetched (an SVG namespace URI is not a fetch).
    assert "<script" not in report
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", report), "external resource"


def test_analyze_a_run_where_no_node_logged_anything(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", {"h1": [], "h2": []})
    summary = analyze(read_record(run))
    assert summary["messages"] == {"sent": 0, "fnl": {"h1": 0, "h2": 0}, "opt": {"h1": 0, "h2": 0}}
    assert summary["latency"]["fnl"]["all"]["count"] == 0
    assert summary["latency"]["fnl"]["all"]["p99_ms"] is None
    assert {c["violations"] for c in summary["checks"].values()} == {0}
    assert summary["throughput"]["min_msgs_per_s"] == 0.0
    assert "PASS" in write_report(read_record(run), summary).read_text()


def test_analyze_cli_rejects_a_folder_that_is_not_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path)]) == 2
    assert "no nodes/ folder" in capsys.readouterr().err


def test_node_errors_fail_the_verdict(tmp_path: Path) -> None:
    """An ev=error (an exception caught in a node, nodes/runtime.py) fails the run even when
    every checker is clean: summary `node_errors`, `ok: false`, "node errors: N"."""
    from analysis.report import verdict

    logs: dict[str, list[dict[str, Any]]] = {
        "h1": [{"t": S, "ev": "send", "mid": "h1:1"}, {"t": S + MS, "ev": "fnl", "mid": "h1:1",
                                                       "seq": 1},
               {"t": 2 * S, "ev": "error", "where": "timer fd:tick", "error": "KeyError: 9"},
               {"t": 3 * S, "ev": "stop", "malformed": 2, "rejected": 3,
                "drops": {"malformed:length": 2, "rejected:tls": 3}},
               {"t": 4 * S, "ev": "stop", "malformed": 0, "rejected": 1,
                "drops": {"rejected:tls": 1}}],
        "h2": [{"t": S + 2 * MS, "ev": "fnl", "mid": "h1:1", "seq": 1}]}
    summary = analyze(read_record(write_run(tmp_path / "run", logs)))
    assert {c["violations"] for c in summary["checks"].values()} == {0}
    assert summary["node_errors"] == {"total": 1, "per_node": {"h1": 1}}
    assert summary["ok"] is False
    assert verdict(summary) == (False, ["node errors: 1"])
    assert summary["transport"]["h1"] == {"malformed": 2, "rejected": 4, "drops": {
        "malformed:length": 2, "rejected:tls": 4}}  # summed over the node's two lives
    assert summary["transport"]["h2"] == {"malformed": 0, "rejected": 0, "drops": {}}
