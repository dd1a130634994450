"""The in-process judge: a run directory's checks and verdict without Spark.

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
from pathlib import Path
from typing import Any

from analysis.checks import log_claims, node_errors, table_check_suite
from analysis.fault_history import fault_history
from analysis.ingest import crashed_hosts, node_names, read_faults, read_tables
from analysis.maelstrom import agent_errors, maelstrom_checks, maelstrom_workload, read_logs
from analysis.optimistic import optimistic_section
from analysis.verdict import add_expectations, finish

CROSSCHECK_ENV = "TESTBED_CROSSCHECK"
# How a run is judged (`testbed run --engine`): the Spark job (analysis/job.py: the checks and
# the measurements, pcaps, a cluster with --master) or this module (the checks, the liveness
# and the verdict, no JVM).
ENGINES = ("spark", "in-process")


def judge_run(run_dir: Path, expect: Sequence[str] = ()) -> dict[str, Any]:
    """Judge the run in `run_dir` in-process: a summary with the keys of summary.json that
    judging gives (`run`, `nodes`, `crashed`, `partitioned_at_end`, `checks`, `node_errors`,
    optimistic metrics when the run opt-delivers, `ingest.malformed_lines`, and from
    analysis/verdict.py `finish`: membership, qos, `liveness`, `verdict`, `ok`), equal to the
    Spark job's for the same directory; `expect` lines judged into the verdict
    (analysis/verdict.py `add_expectations`). Writes nothing."""
    run_dir = Path(run_dir)
    if not (run_dir / "nodes").is_dir():
        raise FileNotFoundError(f"{run_dir} has no nodes/ folder; is it a run directory?")
    workload = maelstrom_workload(run_dir)
    if workload is not None:
        return add_expectations(judge_maelstrom(run_dir, workload), expect)
    events, malformed = read_tables(run_dir)
    nodes = node_names(run_dir)
    faults = read_faults(run_dir)
    history = fault_history(nodes, faults)
    summary: dict[str, Any] = {
        "run": run_dir.name,
        "nodes": nodes,
        "crashed": sorted(crashed_hosts(faults)),
        "partitioned_at_end": sorted(history.partitioned_at_end),
        "checks": table_check_suite(events, history),
        "node_errors": node_errors(events),
        **optimistic_section(events),
        "ingest": {"malformed_lines": malformed},
    }
    return add_expectations(finish(summary, run_dir, history, log_claims(events)), expect)


def judge_maelstrom(run_dir: Path, workload: str,
                    read: tuple[dict[str, list[dict[str, Any]]], int] | None = None
                    ) -> dict[str, Any]:
    """A run of a user's Maelstrom program (docs/maelstrom.md): the workload's checkers
    (analysis/maelstrom.py) instead of the delivery-log suite, the same `finish`. `read`:
    the logs as the Spark job read them (analysis/maelstrom.py `spark_logs`); default: read
    here."""
    nodes = node_names(run_dir)
    faults = read_faults(run_dir)
    history = fault_history(nodes, faults)
    read = read if read is not None else read_logs(run_dir)
    checks, section = maelstrom_checks(run_dir, workload, read)
    summary: dict[str, Any] = {
        "run": run_dir.name,
        "nodes": nodes,
        "crashed": sorted(crashed_hosts(faults)),
        "partitioned_at_end": sorted(history.partitioned_at_end),
        "checks": checks,
        "node_errors": agent_errors(run_dir, read[0]),
        "maelstrom": section,
        "ingest": {"malformed_lines": section["unreadable_log_lines"]},
    }
    return finish(summary, run_dir, history, frozenset())


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


def crosscheck(run_dir: Path, spark_summary: dict[str, Any]) -> None:
    """Judge `run_dir` in-process and raise AssertionError naming every differing key when
    the result differs from the Spark job's `spark_summary`."""
    diff = differences(spark_summary, judge_run(run_dir))
    if diff:
        raise AssertionError(f"in-process judge disagrees with the Spark job on {run_dir}:\n  "
                             + "\n  ".join(diff))
