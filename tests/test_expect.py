"""Expectations parse strictly and evaluate against a summary without raising."""

from __future__ import annotations

import pytest

from analysis.expect import Expectation, evaluate, parse_expectation
from analysis.report import render_report

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
