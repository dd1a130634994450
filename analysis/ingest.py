"""Reading a run's delivery logs (the run record's paths, analysis/record.py) into one typed
DataFrame; faults into hosts.

Every node writes `nodes/<host>/events.jsonl` (docs/architecture.md, "Delivery log"). A node
killed mid-write leaves a truncated last line; such lines are counted and skipped, never fatal.

Every log is parsed by Arrow's JSON reader (bench/analyze_scale.py, 2.2M lines: 3.6 s, against
10.4 s for Spark's from_json on the same logs) and kept as one Parquet file per node. A small
record (below LARGE_JOB_EVENTS, analysis/session.py) is parsed here in the driver and handed
to Spark from memory as Arrow batches: no Python task, no Parquet read back. A large one is
parsed in one Spark task per log, and the analysis reads the Parquet. A file that Arrow refuses
(a truncated last line, a corrupt line) is parsed again without its unfinished tail, then line
by line, so every intact line is kept.
"""

from __future__ import annotations

import io
import json
import logging
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from analysis.fault_history import crashed_hosts
from analysis.revocation import drop_revoked_table, state_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from analysis.record import RunRecord

log = logging.getLogger(__name__)

# The delivery-log columns (docs/architecture.md "Delivery log"). This module imports no
# Spark: the in-process judge (analysis/judge.py) reads logs with the same functions.
LOG_SCHEMA = pa.schema([
    ("t", pa.int64()), ("lt", pa.int64()), ("i", pa.int64()), ("node", pa.string()),
    ("ev", pa.string()), ("mid", pa.string()), ("seq", pa.int64()), ("slot", pa.int64()),
    ("proto", pa.string()), ("size", pa.int64()),
])
# What the analysis reads: the log's columns and `inc`, the incarnation each event belongs to
# (000 sec. 2.2: a restarted process is a new process). Events after a node's k-th `start`
# line (by ordinal `i`, from 0) belong to incarnation k; a log without one is incarnation 0.
ARROW_SCHEMA = LOG_SCHEMA.append(pa.field("inc", pa.int64()))

EVENTS_PARQUET = Path("parquet") / "events"


def __getattr__(name: str) -> Any:
    """`EVENT_SCHEMA`, ARROW_SCHEMA as a Spark StructType, built on first use (so that
    importing this module does not import pyspark)."""
    if name == "EVENT_SCHEMA":
        from pyspark.sql.types import LongType, StringType, StructField, StructType

        return StructType([StructField(f.name, LongType() if f.type == pa.int64()
                                       else StringType()) for f in ARROW_SCHEMA])
    raise AttributeError(name)


_PARSE = pj.ParseOptions(explicit_schema=LOG_SCHEMA, unexpected_field_behavior="ignore")
_READ = pj.ReadOptions(use_threads=False, block_size=1 << 24)


@dataclass
class Ingested:
    """What analysis needs from one run directory."""

    events: DataFrame
    nodes: list[str]
    malformed: dict[str, int] = field(default_factory=dict)
    faults: list[dict[str, Any]] = field(default_factory=list)
    crashed: set[str] = field(default_factory=set)
    scratch: Path | None = None  # the Parquet behind `events` when it is not the run's own

    def release(self) -> None:
        """Drop the scratch Parquet of an ingestion that did not write (call when done)."""
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None


def read_events(spark: SparkSession, record: RunRecord,
                out: Path | None = None) -> tuple[DataFrame, dict[str, int]]:
    """Parse every node's delivery log (the record's `log_paths`) into Parquet at `out`
    (default: the run's `parquet/events/`); return the intact rows and the malformed-line
    counts per node.

    The node column falls back to the directory name, so a log line without `node` still
    lands at the right host.
    """
    from analysis.session import EVENT_LINE_BYTES, LARGE_JOB_EVENTS

    out = record.path / EVENTS_PARQUET if out is None else out
    logs = [p for _, p in record.log_paths() if p.stat().st_size]
    if out.is_dir():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    schema = __getattr__("EVENT_SCHEMA")
    if not logs:
        return spark.createDataFrame([], schema), {}
    offsets = record.clock_offsets_ns()
    tasks = [(str(p), p.parent.name, str(out / f"{p.parent.name}.parquet"),
              offsets.get(p.parent.name, 0)) for p in logs]
    small = sum(p.stat().st_size for p in logs) // EVENT_LINE_BYTES < LARGE_JOB_EVENTS
    if small:
        tables = [_write(task) for task in tasks]
        done = [(node, n) for node, n, _ in tables]
    else:
        done = spark.sparkContext.parallelize(tasks, len(tasks)).map(_convert).collect()
    malformed = {node: n for node, n in done if n}
    for node, n in sorted(malformed.items()):
        log.warning("skipped %d malformed line(s) in the delivery log of %s", n, node)
    if small:
        return spark.createDataFrame(pa.concat_tables([t for _, _, t in tables]), schema), malformed
    return spark.read.schema(schema).parquet(str(out)), malformed


def _write(task: tuple[str, str, str, int]) -> tuple[str, int, pa.Table]:
    """A node's log to Parquet (node_table); returns (node, malformed lines, the table)."""
    src, node, dst, offset_ns = task
    table, malformed = node_table(Path(src), node, offset_ns)
    pq.write_table(table, dst)
    return node, malformed, table


def _convert(task: tuple[str, str, str, int]) -> tuple[str, int]:
    """One Spark task: _write; returns (node, malformed lines)."""
    node, malformed, _ = _write(task)
    return node, malformed


def node_table(src: Path, node: str, offset_ns: int = 0) -> tuple[pa.Table, int]:
    """A node's log as the analysis reads it, its `t` moved onto the orchestrator's clock
    (minus the host's measured offset `offset_ns`); and its malformed-line count. Both judges
    read every log through here (Spark per node in a task, analysis/judge.py in-process)."""
    table, malformed = log_table(src.read_bytes(), node)
    if offset_ns:
        at = table.schema.get_field_index("t")
        table = table.set_column(at, "t", pc.subtract(table["t"], pa.scalar(offset_ns,
                                                                             pa.int64())))
    return table, malformed


def read_tables(record: RunRecord) -> tuple[pa.Table, dict[str, int]]:
    """Every node's log as one Arrow table (node_table each, in host order) and the
    malformed-line counts per node: what `read_events` writes as Parquet, without Spark."""
    logs = [p for _, p in record.log_paths() if p.stat().st_size]
    offsets = record.clock_offsets_ns() if logs else {}
    tables, malformed = [], {}
    for p in logs:
        table, bad = node_table(p, p.parent.name, offsets.get(p.parent.name, 0))
        tables.append(table)
        if bad:
            malformed[p.parent.name] = bad
    return (pa.concat_tables(tables) if tables else ARROW_SCHEMA.empty_table()), malformed


def log_table(data: bytes, node: str) -> tuple[pa.Table, int]:
    """The intact events of one log (ARROW_SCHEMA) and how many lines were malformed: not a
    JSON object, or without one of t, i and ev, which every intact line carries."""
    table, bad = _parse_log(data)
    ok = pc.and_(pc.and_(table["t"].is_valid(), table["i"].is_valid()), table["ev"].is_valid())
    intact = table.filter(ok)
    nodes = pc.fill_null(intact["node"], node)
    intact = intact.set_column(LOG_SCHEMA.get_field_index("node"), "node", nodes)
    malformed = bad + table.num_rows - intact.num_rows
    intact = intact.append_column("inc", incarnations(intact))
    # what the application finally holds: fnl revoked by a later state transfer is not
    # part of the node's history (analysis/revocation.py)
    return drop_revoked_table(intact, state_rows(data, node), node), malformed


def incarnations(log: pa.Table) -> pa.Array:
    """The incarnation of each event of one node's log (rows in any order): how many `start`
    lines come at or before it by ordinal `i`, less one (0 before the first).

    This is the one place where a node's log is read as a whole before the checks; a rule
    that needs a node's earlier events (which deliveries a later event revokes) belongs
    here too, so that both judges apply it."""
    n = log.num_rows
    if not n:
        return pa.array([], pa.int64())
    i = log["i"].to_numpy(zero_copy_only=False)
    start = pc.fill_null(pc.equal(log["ev"], "start"), False).to_numpy(zero_copy_only=False)
    order = np.argsort(i, kind="stable")
    inc = np.empty(n, dtype=np.int64)
    inc[order] = np.maximum(np.cumsum(start[order]) - 1, 0)
    return pa.array(inc)


def _parse_log(data: bytes) -> tuple[pa.Table, int]:
    """All JSON objects of the log, and the count of lines that are not one."""
    if not data.strip():
        return LOG_SCHEMA.empty_table(), 0
    try:
        return pj.read_json(io.BytesIO(data), read_options=_READ, parse_options=_PARSE), 0
    except pa.ArrowInvalid:
        pass
    # The usual damage: a node killed mid-write left its last line unfinished.
    cut = data.rfind(b"\n") + 1
    if 0 < cut < len(data):
        try:
            head = pj.read_json(io.BytesIO(data[:cut]), read_options=_READ,
                                parse_options=_PARSE)
        except pa.ArrowInvalid:
            return _parse_lines(data)
        tail, bad = _parse_lines(data[cut:])
        return pa.concat_tables([head, tail]), bad
    return _parse_lines(data)


def _parse_lines(data: bytes) -> tuple[pa.Table, int]:
    """Line by line: each JSON object line, its fields of the wrong type left null."""
    rows: list[dict[str, Any]] = []
    bad = 0
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if not isinstance(obj, dict):
            bad += 1
            continue
        rows.append({f.name: _typed(obj.get(f.name), f.type) for f in LOG_SCHEMA})
    return pa.Table.from_pylist(rows, schema=LOG_SCHEMA), bad


def _typed(value: Any, kind: pa.DataType) -> Any:
    if kind == pa.int64():
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(value, str):
        return value
    return json.dumps(value) if isinstance(value, int | float) else None


def ingest(spark: SparkSession, record: RunRecord, write: bool = True) -> Ingested:
    """Read a run's logs and faults; with `write`, the events' Parquet is the run's own
    `parquet/events/` (one file per node), else a scratch folder that `release()` removes."""
    scratch = None if write else Path(tempfile.mkdtemp(prefix=".ingest-", dir=record.path))
    events, malformed = read_events(spark, record, scratch)
    faults = list(record.faults)
    return Ingested(
        events=events,
        nodes=list(record.nodes),
        malformed=malformed,
        faults=faults,
        crashed=crashed_hosts(faults),
        scratch=scratch,
    )
