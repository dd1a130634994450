"""Expectations parse strictly, are checked against summary.json's shape before the run, and
evaluate against a summary without raising, into the run's verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.expect import Expectation, evaluate, parse_expectation, schema_problem
from analysis.report import render_report
from analysis.verdict import add_expectations, verdict, verdict_line
from tests.inproc import run_cli

SUMMARY = {
    "checks": {"total_order": {"violations": 0}, "agreement": {"violations": 2}},
    "latency": {
        "fnl": {
            "all": {"p99_ms": 42.5, "count": 10},
            "per_pair": {"h1->h2": {"p99_ms": 12.0}},
            "per_receiver": {"h9": {"p99_ms": None}},
        }
    },
    "throughput": {"min_msgs_per_s": 150.0},
    "nodes": ["h1", "h2"],
}


@pytest.mark.parametrize(
    ("text", "path", "op", "value"),
    [
        ("checks.total_order.violations == 0", ("checks", "total_order", "violations"), "==", 0),
        ("latency.fnl.all.p99_ms<50", ("latency", "fnl", "all", "p99_ms"), "<", 50),
        ("throughput.min_msgs_per_s >= 1e2", ("throughput", "min_msgs_per_s"), ">=", 100),
        ("a.b != -2.5", ("a", "b"), "!=", -2.5),
        ("a <= .5", ("a",), "<=", 0.5),
        (
            "latency.fnl.per_pair.h1->h2.p99_ms > 3",
            ("latency", "fnl", "per_pair", "h1->h2", "p99_ms"),
            ">",
            3,
        ),
    ],
)
def test_parse_reads_path_operator_and_number(
    text: str, path: tuple[str, ...], op: str, value: float
) -> None:
    e = parse_expectation(text)
    assert (e.path, e.op, e.value) == (path, op, value)
    assert str(e) == text.strip()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "checks.total_order.violations",
        "checks.total_order.violations = 0",
        "latency.fnl.all.p99_ms < fast",
        "< 5",
        "a..b == 1",
        "a b == 1",
        "a == 1 2",
        "a =< 1",
    ],
)
def test_bad_syntax_is_a_one_sentence_value_error(text: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_expectation(text)
    message = str(err.value)
    assert message.endswith(".") and "\n" not in message


def test_evaluate_reports_each_outcome_with_the_actual_value() -> None:
    results = evaluate(
        [
            "checks.total_order.violations == 0",
            "checks.agreement.violations == 0",
            "latency.fnl.all.p99_ms < 50",
            "latency.fnl.per_pair.h1->h2.p99_ms >= 12",
            "throughput.min_msgs_per_s > 150",
            parse_expectation("throughput.min_msgs_per_s <= 150"),
        ],
        SUMMARY,
    )
    assert [r.ok for r in results] == [True, False, True, True, False, True]
    assert evaluate(["nodes.1 == 0"], {"nodes": [3, 0]})[0].ok
    assert [r.ok for r in evaluate(["ok == 1", "ok == 0"], {"ok": True})] == [True, False]
    assert results[1].actual == 2.0
    assert "fails" in results[1].reason
    assert results[2].as_dict() == {
        "expectation": "latency.fnl.all.p99_ms < 50",
        "ok": True,
        "actual": 42.5,
        "reason": "42.5 < 50 holds",
    }


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("checks.integrity.violations == 0", "checks has no key 'integrity'"),
        ("latency.fnl.per_receiver.h9.p99_ms < 5", "value is null, not a number"),
        ("latency.fnl.all < 5", "value is dict, not a number"),
        ("throughput.min_msgs_per_s.x > 1", "is not a mapping"),
        ("nodes.7 == 1", "nodes is a list of 2 with no item '7'"),
        ("missing == 0", "the summary has no key 'missing'"),
    ],
)
def test_missing_or_non_numeric_value_fails_with_a_reason(text: str, reason: str) -> None:
    (result,) = evaluate([text], SUMMARY)
    assert isinstance(result.expectation, Expectation)
    assert result.ok is False
    assert result.actual is None
    assert reason in result.reason


def test_a_failed_expectation_turns_the_report_verdict_to_fail() -> None:
    clean = {"run": "r", "checks": {"total_order": {"violations": 0, "examples": []}}}
    assert '<div class="banner pass">PASS<small>' in render_report(clean)
    results = evaluate(["latency.fnl.all.p99_ms < 50", "checks.total_order.violations == 0"], clean)
    failed = render_report({**clean, "expectations": [r.as_dict() for r in results]})
    assert '<div class="banner fail">FAIL<small>' in failed
    assert "expectation failed: latency.fnl.all.p99_ms &lt; 50" in failed
    assert "the summary has no key &#x27;latency&#x27;" in failed


def test_a_failed_expectation_is_the_run_s_verdict() -> None:
    """analysis/verdict.py `add_expectations`: the lines read the summary as judged, then
    the verdict (and `ok`) says whether they held, naming each that failed."""
    judged = {"checks": {"total_order": {"violations": 0, "claimed": True}},
              "node_errors": {"total": 0}, "liveness": {"quiescent": True}, **SUMMARY}
    judged["checks"] = {"total_order": {"violations": 0, "claimed": True}}
    judged["verdict"] = verdict(judged)
    judged["ok"] = judged["verdict"]["ok"]
    add_expectations(judged, ["ok == 1", "latency.fnl.all.p99_ms < 50"])
    assert judged["ok"] is True and judged["verdict"]["reasons"] == []
    add_expectations(judged, ["ok == 1", "latency.fnl.all.p99_ms < 5"])
    assert judged["ok"] is False and judged["verdict"]["ok"] is False
    assert judged["verdict"]["reasons"] == [
        "expectation failed: latency.fnl.all.p99_ms < 5 (42.5 < 5 fails)"]
    assert [r["ok"] for r in judged["expectations"]] == [True, False]
    assert verdict_line(judged).startswith("verdict: NOT OK (safety held, quiescent): "
                                           "expectation failed: latency.fnl.all.p99_ms < 5")
    report = render_report(judged)
    assert '<div class="banner fail">FAIL<small>' in report


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("latency.fnl.al.p99_ms < 5",
         "latency.fnl has no key 'al'; did you mean 'latency.fnl.all.p99_ms'?"),
        ("checks.total_ordr.violations == 0",
         "checks has no key 'total_ordr'; did you mean 'checks.total_order.violations'?"),
        ("checks.agreement.violatons == 0", "did you mean 'checks.agreement.violations'?"),
        ("latenc.fnl.all.p99_ms < 5", "did you mean 'latency.fnl.all.p99_ms'?"),
        ("latency.fnl.all < 5", "latency.fnl.all is a section (p50_ms, p95_ms, p99_ms, "
                                "max_ms, count), which cannot compare with a number"),
        ("run == 1", "run is text, which cannot compare with a number"),
        ("verdict.reasons > 0", "verdict.reasons is a list, which cannot compare"),
        ("ok.x == 1", "ok is number, with no key 'x'"),
    ],
)
def test_a_path_summary_json_never_has_is_found_before_the_run(text: str, problem: str
                                                               ) -> None:
    found = schema_problem(parse_expectation(text))
    assert found is not None and problem in found, found


@pytest.mark.parametrize("text", [
    "checks.total_order.violations == 0", "latency.fnl.per_pair.h1->h2.p99_ms > 3",
    "latency.fnl.per_receiver.h9.p99_ms < 5", "ok == 1", "verdict.ok == 1",
    "qos.max_latency_ms <= 50", "membership.per_node.h3.excluded == 1",
    "checks.maelstrom_lost.violations == 0", "switching.switches >= 2",
    "liveness.undelivered_per_node.h2 == 0", "throughput.min_msgs_per_s > 10"])
def test_a_path_the_summary_can_have_passes(text: str) -> None:
    assert schema_problem(parse_expectation(text)) is None
    if text.startswith(("latency", "throughput", "switching")):  # measured by Spark only
        assert "Spark analysis" in str(schema_problem(parse_expectation(text), spark=False))


def test_a_bad_expect_line_stops_testbed_run_before_anything_starts(tmp_path: Path) -> None:
    spec = tmp_path / "exp.yaml"
    spec.write_text("""\
name: typo
topology: {name: t, hosts: [{name: h1}, {name: h2}]}
backend: sim
duration: 1s
protocol: {name: sequencer, params: {sequencer: h1}}
workload: {rate: 10/s, size: 100B}
expect:
  - checks.total_order.violations == 0
  - latency.fnl.al.p99_ms < 5
  - run == 1
""")
    out = tmp_path / "runs"
    proc = run_cli("run", str(spec), "--out", str(out))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [
        f"{spec}:9: expect[1]: latency.fnl has no key 'al'; did you mean "
        "'latency.fnl.all.p99_ms'?",
        f"{spec}:10: expect[2]: run is text, which cannot compare with a number"]
    assert not out.exists()
    spec.write_text(spec.read_text().replace("al.p99", "all.p99").replace("  - run == 1\n", ""))
    proc = run_cli("run", str(spec), "--out", str(out), "--engine", "in-process")
    assert proc.returncode == 2 and proc.stderr.startswith(
        f"{spec}:9: expect[1]: latency is measured by the Spark analysis"), proc.stderr
    assert not out.exists()
