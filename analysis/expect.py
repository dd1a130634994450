"""Expectations: one-line assertions over summary.json, e.g. `latency.fnl.all.p99_ms < 50`.

The path is dot-separated keys into the summary (a key may contain `->`, as in
`latency.fnl.per_pair.h1->h2.p99_ms`); the value is a number, or a boolean read as 1 or 0
(`ok == 1`: the verdict before the expectations, analysis/verdict.py).

`schema_problem` checks a path against summary.json's shape (analysis/summary_schema.py)
before the run; analysis/verdict.py `add_expectations` judges them after it, into the verdict.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from analysis.summary_schema import SPARK_ONLY, path_problem

OPS: dict[str, Callable[[float, float], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
}

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
# The path is lazy so that the operator is the last one before the trailing number; this lets
# keys such as "h1->h2" carry a '>' of their own.
_EXPECTATION = re.compile(
    rf"^\s*(?P<path>\S+?)\s*(?P<op>==|!=|<=|>=|<|>)\s*(?P<value>{_NUMBER})\s*$"
)


@dataclass(frozen=True)
class Expectation:
    path: tuple[str, ...]
    op: str
    value: float
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Result:
    expectation: Expectation
    ok: bool
    actual: float | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "expectation": str(self.expectation),
            "ok": self.ok,
            "actual": self.actual,
            "reason": self.reason,
        }


def parse_expectation(text: str) -> Expectation:
    """Parse `PATH OP NUMBER`; raise ValueError naming what is wrong."""
    m = _EXPECTATION.match(text)
    if m is None:
        raise ValueError(
            f"expectation {text!r} is not 'PATH OP NUMBER' with OP one of "
            f"{', '.join(OPS)}, e.g. 'latency.fnl.all.p99_ms < 50'."
        )
    path = tuple(m["path"].split("."))
    if any(not part for part in path):
        raise ValueError(f"expectation {text!r} has an empty key in its path {m['path']!r}.")
    return Expectation(path=path, op=m["op"], value=float(m["value"]), text=text.strip())


def _lookup(summary: Mapping[str, Any], path: tuple[str, ...]) -> tuple[Any, str | None]:
    node: Any = summary
    for depth, key in enumerate(path):
        where = ".".join(path[:depth]) or "the summary"
        if isinstance(node, Mapping):
            if key not in node:
                return None, f"{where} has no key {key!r}"
            node = node[key]
        elif isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                return None, f"{where} is a list of {len(node)} with no item {key!r}"
            node = node[int(key)]
        else:
            return None, f"{where} is not a mapping, so it has no key {key!r}"
    return node, None


def evaluate_one(expectation: Expectation, summary: Mapping[str, Any]) -> Result:
    """Check one expectation; a missing or non-numeric value is a failed result, not an error."""
    actual, missing = _lookup(summary, expectation.path)
    if missing is not None:
        return Result(expectation, False, None, f"{missing}")
    if isinstance(actual, bool):
        actual = int(actual)
    if not isinstance(actual, int | float):
        shown = "null" if actual is None else type(actual).__name__
        return Result(expectation, False, None, f"value is {shown}, not a number")
    value = float(actual)
    if math.isnan(value):
        return Result(expectation, False, value, "value is NaN")
    ok = OPS[expectation.op](value, expectation.value)
    verdict = "holds" if ok else "fails"
    shown = f"{value:g} {expectation.op} {expectation.value:g}"
    return Result(expectation, ok, value, f"{shown} {verdict}")


def evaluate(expectations: Iterable[Expectation | str], summary: Mapping[str, Any]) -> list[Result]:
    """Evaluate expectations (parsed or text) against a summary, in order."""
    return [
        evaluate_one(e if isinstance(e, Expectation) else parse_expectation(e), summary)
        for e in expectations
    ]


def schema_problem(expectation: Expectation, spark: bool = True) -> str | None:
    """What makes `expectation` unable to hold on any run: a path summary.json never has, a
    value that cannot compare, or (`spark` false: judged in-process) a section only the
    Spark analysis measures. None when it can be judged."""
    problem = path_problem(expectation.path)
    if problem is None and not spark and expectation.path[0] in SPARK_ONLY:
        problem = (f"{expectation.path[0]} is measured by the Spark analysis of a protocol's "
                   "run only; this run is judged in-process")
    return problem
