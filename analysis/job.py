"""The analysis job for one run record: ingest, check, measure, write summary.json."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from analysis.checks import check_suite, claims_of, node_errors
from analysis.fault_history import fault_history
from analysis.ingest import EVENTS_PARQUET, ingest
from analysis.judge import crosscheck, crosscheck_enabled, judge_maelstrom
from analysis.load import load_section
from analysis.maelstrom import spark_logs
from analysis.metrics import clock_offsets, delivery_metrics, message_counts, recovery
from analysis.optimistic import optimistic_section
from analysis.overview import overview
from analysis.record import RunRecord, read_record
from analysis.session import EVENT_LINE_BYTES, spark_session
from analysis.switching import switching_section
from analysis.synthetic import generate_run
from analysis.transit import transit_section
from analysis.verdict import add_expectations, finish, run_sections

SUMMARY = "summary.json"
# The analysis sections a protocol's catalogue entry names (`Entry.sections`) that need the
# Spark events; analysis/verdict.py `SECTIONS` has the others.
SPARK_SECTIONS = {"switching": switching_section}


def analysis_app(run: str) -> str:
    """The Spark application's name for the analysis of the run named `run`."""
    return f"testbed-analyze-{run}"


def transport_section(record: RunRecord) -> dict[str, Any]:
    """What each node refused on its data plane (its `stop` events, nodes/core.py), summed
    over restarts: malformed and rejected datagrams, and the counts per reason. A refused TLS
    handshake (a certificate from another CA) shows as `rejected:tls`."""
    out: dict[str, Any] = {}
    for host, stops in record.events(("stop",)).items():
        node: dict[str, Any] = {"malformed": 0, "rejected": 0, "drops": {}}
        for stop in stops:
            node["malformed"] += int(stop.get("malformed", 0))
            node["rejected"] += int(stop.get("rejected", 0))
            for reason, n in (stop.get("drops") or {}).items():
                node["drops"][reason] = node["drops"].get(reason, 0) + int(n)
        out[host] = node
    return out


def clock_uncertainty_ms(record: RunRecord) -> float | None:
    """With clocks measured per host (remote backend, spec.lock.yaml `clocks`): the largest
    error a latency between two hosts can carry, the sum of the two worst half round trips.
    None when all hosts share the orchestrator's clock."""
    lock = record.lock
    worst = sorted((float(c.get("uncertainty_ms", 0)) for c in (lock.get("clocks") or {})
                    .values() if isinstance(c, dict)), reverse=True)
    if not worst:
        return None
    return round(sum(worst[:2]), 4)


def analyze(record: RunRecord, master: str | None = None, expect: Sequence[str] = ()
            ) -> dict[str, Any]:
    """Analyse the run, write `parquet/events/` and `summary.json`; return it. `expect`: the
    experiment's `expect:` lines, judged into the verdict before the write."""
    run_dir = record.path
    started = time.monotonic()
    if record.workload is not None:  # a user's Maelstrom program (docs/maelstrom.md)
        judged = judge_maelstrom(record, record.workload, spark_logs(record, master))
        if crosscheck_enabled():
            crosscheck(record, judged)
        add_expectations(judged, expect)
        judged["analysis_s"] = round(time.monotonic() - started, 3)
        (run_dir / SUMMARY).write_text(json.dumps(judged, indent=2) + "\n")
        return judged
    spark = spark_session(master, app=analysis_app(record.name),
                          events=record.log_bytes() // EVENT_LINE_BYTES)
    data = ingest(spark, record)
    events = data.events
    history = fault_history(data.nodes, data.faults)
    try:
        # the counts, the protocols and the clock's origin that many parts read: one job
        view = overview(events)
        claims = claims_of(view.protos(), record.params_by_protocol)
        latency, delivered = delivery_metrics(events, data.nodes, view.total("fnl"))
        summary: dict[str, Any] = {
            "run": record.name,
            "nodes": data.nodes,
            "crashed": sorted(data.crashed),
            "partitioned_at_end": sorted(history.partitioned_at_end),
            "messages": message_counts(view, data.nodes),
            "checks": check_suite(events, history, record.params_by_protocol, view),
            "node_errors": node_errors(view),
            "transport": transport_section(record),
            "latency": {"fnl": latency},
            "throughput": delivered,
            "load": load_section(record, view, data.nodes),
            "recovery": recovery(events, history),
            "clock": clock_offsets(events, view),
            **optimistic_section(events, view),
            "ingest": {
                "malformed_lines": data.malformed,
                "parquet": str(EVENTS_PARQUET / ""),
            },
        }
        for key in run_sections(record):
            section = SPARK_SECTIONS[key](events, record) if key in SPARK_SECTIONS else None
            if section:
                summary[key] = section
        network = transit_section(spark, record, events, data.nodes)
        if network:
            summary["network"] = network
    finally:
        data.release()
    uncertainty = clock_uncertainty_ms(record)
    if uncertainty is not None:  # next to the latencies that depend on it (docs/remote.md)
        summary["latency"]["fnl"]["clock_uncertainty_ms"] = uncertainty
    finish(summary, record, history, claims)
    if crosscheck_enabled():  # the in-process judge must agree (analysis/judge.py)
        crosscheck(record, summary)
    add_expectations(summary, expect)
    summary["analysis_s"] = round(time.monotonic() - started, 3)
    (run_dir / SUMMARY).write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n")
    return summary


def rehearse() -> None:
    """`analyze` of a tiny clean run (analysis/synthetic.py) in a scratch folder: what
    analysis/warmup.py runs while a run runs, so that the JVM has loaded and compiled the
    analysis's queries and its Python workers hold the checkers before the real one."""
    with tempfile.TemporaryDirectory(prefix="testbed-rehearsal-") as scratch:
        analyze(read_record(generate_run(Path(scratch) / "rehearsal", nodes=2,
                                         duration_s=1.0, rate=4.0)))


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--rehearse"]:
        sys.exit("usage: python -m analysis.job --rehearse")
    # analysis/cds.py's training child: the rehearsal, then a JVM that exits whole
    from analysis.cds import end_jvm

    rehearse()
    end_jvm()
