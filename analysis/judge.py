"""The in-process judge: a run record's checks and verdict without Spark.

`testbed explore` judges thousands of small runs; a JVM per run would cost more than the run.
`judge_run` reads the delivery logs with Arrow (analysis/ingest.py `read_tables`, the same
per-node reading the Spark job's ingestion does), runs the checker suite's two passes
(analysis/checks_mid.py MidPass, analysis/checks_node.py NodeChecks) over the whole table as
one partition, merges their records with the functions the Spark driver uses
(analysis/checks.py `judge_records`), and completes the summary with analysis/verdict.py
`finish`. One implementation of every rule serves both drivers; with TESTBED_CROSSCHECK=1
the Spark job (analysis/job.py) runs this judge too and fails when the two disagree
(`crosscheck`).

This module never imports pyspark.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from analysis.checks import log_claims, node_errors, table_check_suite
from analysis.fault_history import crashed_hosts
from analysis.ingest import read_tables
from analysis.maelstrom import agent_errors, emulation_records, maelstrom_checks, read_logs
from analysis.optimistic import optimistic_section
from analysis.record import RunRecord
from analysis.verdict import add_expectations, finish

CROSSCHECK_ENV = "TESTBED_CROSSCHECK"
# How a run is judged (`testbed run --engine`): the Spark job (analysis/job.py: the checks and
# the measurements, pcaps, a cluster with --master) or this module (the checks, the liveness
# and the verdict, no JVM).
ENGINES = ("spark", "in-process")


def judge_run(record: RunRecord, expect: Sequence[str] = ()) -> dict[str, Any]:
    """Judge the run in-process: a summary with the keys of summary.json that
    judging gives (`run`, `nodes`, `crashed`, `partitioned_at_end`, `checks`, `node_errors`,
    optimistic metrics when the run opt-delivers, `ingest.malformed_lines`, and from
    analysis/verdict.py `finish`: membership, qos, `liveness`, `verdict`, `ok`), equal to the
    Spark job's for the same directory; `expect` lines judged into the verdict
    (analysis/verdict.py `add_expectations`). Writes nothing."""
    if record.workload is not None:
        return add_expectations(judge_maelstrom(record, record.workload), expect)
    events, malformed = read_tables(record)
    nodes = list(record.nodes)
    faults = list(record.faults)
    history = record.history()
    summary: dict[str, Any] = {
        "run": record.name,
        "nodes": nodes,
        "crashed": sorted(crashed_hosts(faults)),
        "partitioned_at_end": sorted(history.partitioned_at_end),
        "checks": table_check_suite(events, history, record.params_by_protocol),
        "node_errors": node_errors(events),
        **optimistic_section(events),
        "ingest": {"malformed_lines": malformed},
    }
    return add_expectations(finish(summary, record, history,
                                   log_claims(events, record.params_by_protocol)), expect)


def judge_maelstrom(record: RunRecord, workload: str,
                    read: tuple[dict[str, list[dict[str, Any]]], int] | None = None
                    ) -> dict[str, Any]:
    """A run of a user's Maelstrom program (docs/maelstrom.md): the workload's checkers
    (analysis/maelstrom.py) instead of the delivery-log suite, the same `finish`. `read`:
    the logs as the Spark job read them (analysis/maelstrom.py `spark_logs`); default: read
    here."""
    nodes = list(record.nodes)
    faults = list(record.faults)
    history = record.history()
    read = read if read is not None else read_logs(record)
    checks, section = maelstrom_checks(record, workload, read)
    summary: dict[str, Any] = {
        "run": record.name,
        "nodes": nodes,
        "crashed": sorted(crashed_hosts(faults)),
        "partitioned_at_end": sorted(history.partitioned_at_end),
        "checks": checks,
        "node_errors": agent_errors(record, read[0]),
        "maelstrom": section,
        "ingest": {"malformed_lines": section["unreadable_log_lines"]},
    }
    return finish(summary, record, history, frozenset(), emulation_records(read[0]))


def crosscheck_enabled() -> bool:
    return os.environ.get(CROSSCHECK_ENV) == "1"


def differences(spark: dict[str, Any], judged: dict[str, Any]) -> list[str]:
    """The keys on which two judged summaries differ: every field of every check (examples
    included), `node_errors`, `liveness`, `verdict` and `ok`; empty when they agree."""
    out = []
    checks_a, checks_b = spark.get("checks", {}), judged.get("checks", {})
    for name in sorted(set(checks_a) | set(checks_b)):
        a, b = checks_a.get(name), checks_b.get(name)
        if a is None or b is None:
            where = "in-process" if b is None else "Spark"
            out.append(f"checks.{name}: missing in {where}")
            continue
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                out.append(f"checks.{name}.{key}: Spark {a.get(key)!r} != in-process "
                           f"{b.get(key)!r}")
    for key in ("node_errors", "liveness", "verdict", "ok", "crashed",
                "partitioned_at_end", "fidelity"):
        if spark.get(key) != judged.get(key):
            out.append(f"{key}: Spark {spark.get(key)!r} != in-process {judged.get(key)!r}")
    return out


def crosscheck(record: RunRecord, spark_summary: dict[str, Any]) -> None:
    """Judge the run in-process and raise AssertionError naming every differing key when
    the result differs from the Spark job's `spark_summary`."""
    diff = differences(spark_summary, judge_run(record))
    if diff:
        raise AssertionError(f"in-process judge disagrees with the Spark job on {record.path}:\n  "
                             + "\n  ".join(diff))
