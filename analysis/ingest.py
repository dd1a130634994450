"""Reading a run directory: delivery logs into one typed DataFrame, faults into hosts.

Every node writes `nodes/<host>/events.jsonl` (brief, "Delivery log"). A node killed
mid-write leaves a truncated last line; such lines are counted and skipped, never fatal.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

log = logging.getLogger(__name__)

EVENT_SCHEMA = StructType(
    [
        StructField("t", LongType()),
        StructField("lt", LongType()),
        StructField("i", LongType()),
        StructField("node", StringType()),
        StructField("ev", StringType()),
        StructField("mid", StringType()),
        StructField("seq", LongType()),
        StructField("slot", LongType()),
        StructField("proto", StringType()),
        StructField("size", LongType()),
    ]
)

EVENTS_PARQUET = Path("parquet") / "events"


@dataclass
class Ingested:
    """What analysis needs from one run directory."""

    events: DataFrame
    nodes: list[str]
    malformed: dict[str, int] = field(default_factory=dict)
    faults: list[dict[str, Any]] = field(default_factory=list)
    crashed: set[str] = field(default_factory=set)
    cached: list[DataFrame] = field(default_factory=list)

    def release(self) -> None:
        """Drop the cached parse of the logs (call when done with `events`)."""
        for df in self.cached:
            df.unpersist()


def node_names(run_dir: Path) -> list[str]:
    """Hosts that have a directory under `nodes/`, whether or not they logged anything."""
    nodes_dir = run_dir / "nodes"
    if not nodes_dir.is_dir():
        return []
    return sorted(p.name for p in nodes_dir.iterdir() if p.is_dir())


def read_events(spark: SparkSession, run_dir: Path) -> tuple[DataFrame, dict[str, int]]:
    """Parse every node's events.jsonl; return intact rows and malformed-line counts per node.

    The node column falls back to the directory name, so a log line without `node` still
    lands at the right host. The rows stay cached until `Ingested.release()` or the session ends.
    """
    _, events, malformed = _parse(spark, run_dir)
    return events, malformed


def _parse(
    spark: SparkSession, run_dir: Path
) -> tuple[DataFrame | None, DataFrame, dict[str, int]]:
    files = sorted(str(p) for p in (run_dir / "nodes").glob("*/events.jsonl") if p.stat().st_size)
    if not files:
        return None, spark.createDataFrame([], EVENT_SCHEMA), {}
    lines = (
        spark.read.text(files)
        .withColumn(
            "dir_node", F.regexp_extract(F.input_file_name(), r"/([^/]+)/events\.jsonl$", 1)
        )
        .filter(F.trim("value") != "")
    )
    # Cached so that the files are parsed once for the malformed count, Parquet and every check.
    parsed = lines.select("dir_node", F.from_json("value", EVENT_SCHEMA).alias("e")).cache()
    # A truncated line never closes its object, so from_json yields nulls for it; t, i and ev
    # are the fields every intact line carries.
    bad = (
        F.col("e").isNull() | F.col("e.t").isNull() | F.col("e.i").isNull() | F.col("e.ev").isNull()
    )
    malformed = {
        r["dir_node"]: int(r["count"])
        for r in parsed.filter(bad).groupBy("dir_node").count().collect()
    }
    for node, n in sorted(malformed.items()):
        log.warning("skipped %d malformed line(s) in nodes/%s/events.jsonl", n, node)
    events = parsed.filter(~bad).select(
        *[
            F.coalesce(F.col("e.node"), F.col("dir_node")).alias("node")
            if f.name == "node"
            else F.col(f"e.{f.name}").alias(f.name)
            for f in EVENT_SCHEMA.fields
        ]
    )
    return parsed, events, malformed


def write_events(events: DataFrame, run_dir: Path) -> Path:
    """Write events as Parquet under `<run>/parquet/events/`, partitioned by node."""
    out = run_dir / EVENTS_PARQUET
    events.write.mode("overwrite").partitionBy("node").parquet(str(out))
    return out


def read_faults(run_dir: Path) -> list[dict[str, Any]]:
    """Fault history from faults.jsonl; missing file, blank or broken lines give fewer entries."""
    path = run_dir / "faults.jsonl"
    if not path.is_file():
        return []
    faults = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            log.warning("skipped a malformed line in faults.jsonl")
            continue
        if isinstance(entry, dict):
            faults.append(entry)
    return faults


def _fault_hosts(entry: dict[str, Any]) -> list[str]:
    hosts = entry.get("hosts") or []
    if isinstance(hosts, str):
        hosts = [hosts]
    if "host" in entry:
        hosts = [*hosts, entry["host"]]
    return [str(h) for h in hosts]


def crashed_hosts(faults: list[dict[str, Any]]) -> set[str]:
    """Hosts that did not stay correct: every host that crashed during the run.

    A restarted host is a new incarnation that joined from the present (nodes/protocols/
    reliable.py): it is not expected to deliver what was ordered while it was down, so
    agreement is judged among the hosts that never crashed.
    """
    return {host for entry in faults
            if entry.get("kind") == "crash" and entry.get("phase", "start") == "start"
            for host in _fault_hosts(entry)}


def ingest(spark: SparkSession, run_dir: Path, write: bool = True) -> Ingested:
    """Read a run's logs and faults; with `write`, also store the events as Parquet."""
    parsed, events, malformed = _parse(spark, run_dir)
    if write:
        write_events(events, run_dir)
    faults = read_faults(run_dir)
    return Ingested(
        events=events,
        nodes=node_names(run_dir),
        malformed=malformed,
        faults=faults,
        crashed=crashed_hosts(faults),
        cached=[parsed] if parsed is not None else [],
    )
