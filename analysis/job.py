"""The analysis job for one run: ingest, check, measure, write summary.json."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from analysis.checks import check_suite, log_claims
from analysis.fault_history import fault_history
from analysis.ingest import EVENTS_PARQUET, ingest
from analysis.liveness import liveness_section, read_drain
from analysis.metrics import clock_offsets, fnl_latency, message_counts, recovery, throughput
from analysis.optimistic import optimistic_metrics
from analysis.session import EVENT_LINE_BYTES, spark_session
from analysis.transit import transit_section

SUMMARY = "summary.json"


def checks_ok(summary: dict[str, Any]) -> bool:
    """True when every claimed checker in the summary found no violation (a check without
    `claimed`, from an older summary, counts as claimed)."""
    return all(c.get("violations", 0) == 0 for c in summary.get("checks", {}).values()
               if c.get("claimed", True))


def optimistic_section(events: Any) -> dict[str, Any]:
    """Optimistic delivery metrics and the Local Order check, for runs that opt-deliver."""
    if events.filter(events.ev == "opt").limit(1).count() == 0:
        return {}
    opt = optimistic_metrics(events)
    return {"optimistic": {k: v for k, v in opt.items() if k != "local_order"},
            "local_order": opt["local_order"]}


def analyze(run_dir: Path, master: str | None = None) -> dict[str, Any]:
    """Analyse the run in `run_dir`, write `parquet/events/` and `summary.json`; return it."""
    run_dir = Path(run_dir)
    if not (run_dir / "nodes").is_dir():
        raise FileNotFoundError(f"{run_dir} has no nodes/ folder; is it a run directory?")
    started = time.monotonic()
    logs = sum(p.stat().st_size for p in (run_dir / "nodes").glob("*/events.jsonl"))
    spark = spark_session(master, app=f"testbed-analyze-{run_dir.name}",
                          events=logs // EVENT_LINE_BYTES)
    data = ingest(spark, run_dir)
    events = data.events
    history = fault_history(data.nodes, data.faults)
    claims = log_claims(events)
    try:
        summary: dict[str, Any] = {
            "run": run_dir.name,
            "nodes": data.nodes,
            "crashed": sorted(data.crashed),
            "partitioned_at_end": sorted(history.partitioned_at_end),
            "messages": message_counts(events, data.nodes),
            "checks": check_suite(events, history),
            "latency": {"fnl": fnl_latency(events)},
            "throughput": throughput(events, data.nodes),
            "recovery": recovery(events, history),
            "clock": clock_offsets(events),
            **optimistic_section(events),
            "ingest": {
                "malformed_lines": data.malformed,
                "parquet": str(EVENTS_PARQUET / ""),
            },
        }
        network = transit_section(spark, run_dir, events, data.nodes)
        if network:
            summary["network"] = network
    finally:
        data.release()
    if "local_order" in summary:
        summary["checks"]["local_order"] = summary.pop("local_order")
        summary["checks"]["local_order"]["claimed"] = "local_order" in claims
    summary["liveness"] = liveness_section(read_drain(run_dir), summary["checks"])
    summary["ok"] = checks_ok(summary)
    summary["analysis_s"] = round(time.monotonic() - started, 3)
    (run_dir / SUMMARY).write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n")
    return summary
