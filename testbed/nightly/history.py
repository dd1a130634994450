"""The nightly history: append-only Parquet, one file per night (`<history>/<YYYY-MM-DD>.parquet`).

One row per experiment and tracked metric (one row with a null metric for an experiment that
tracks none or did not run), each carrying the night's verdict, the commit, the versions and the
machine, so pandas, DuckDB and Spark read a night without anything else (the asv/conbench idea:
a result is only comparable with its commit and machine next to it). A night that is run again
writes `<night>.2.parquet` and so on; readers keep the latest attempt of each night.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import socket
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema([
    ("night", pa.string()),
    ("attempt", pa.int32()),
    ("suite", pa.string()),
    ("experiment", pa.string()),
    ("protocol", pa.string()),
    ("backend", pa.string()),
    ("status", pa.string()),  # pass | fail | error | skipped
    ("reason", pa.string()),
    ("metric", pa.string()),
    ("value", pa.float64()),
    ("bad", pa.string()),  # the direction that is bad: up | down
    ("run_dir", pa.string()),
    ("wall_s", pa.float64()),
    ("started_at", pa.timestamp("us", tz="UTC")),
    ("commit", pa.string()),
    ("versions", pa.string()),  # JSON object
    ("machine", pa.string()),  # JSON object
])
STATUSES = ("pass", "fail", "error", "skipped")
_FILE = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:\.(\d+))?\.parquet$")


@dataclass
class Outcome:
    """What one experiment did tonight."""

    experiment: str
    protocol: str
    backend: str
    status: str
    reason: str = ""
    metrics: dict[str, tuple[float | None, str]] = field(default_factory=dict)  # value, bad
    run_dir: str | None = None
    wall_s: float = 0.0
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))


def commit_of(repo: Path) -> str:
    """The commit under test: $GITHUB_SHA in CI, else `git rev-parse HEAD`, else "unknown"."""
    sha = os.environ.get("GITHUB_SHA")
    if sha:
        return sha
    try:
        proc = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return proc.stdout.strip() if proc.returncode == 0 else "unknown"


def machine_facts() -> dict[str, Any]:
    mem = 0
    with contextlib.suppress(ValueError, OSError):
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {"host": socket.gethostname(), "cpus": os.cpu_count(), "memory_gib":
            round(mem / 2**30, 1), "kernel": platform.release(), "machine": platform.machine(),
            "os": platform.platform(terse=True), "runner": os.environ.get("RUNNER_NAME", "")}


def night_files(history: Path) -> dict[str, tuple[int, Path]]:
    """{night: (attempt, path)} of the latest attempt of every night in `history`."""
    latest: dict[str, tuple[int, Path]] = {}
    if not history.is_dir():
        return latest
    for p in history.iterdir():
        m = _FILE.match(p.name)
        if m:
            attempt = int(m[2] or 1)
            if attempt > latest.get(m[1], (0, p))[0]:
                latest[m[1]] = (attempt, p)
    return dict(sorted(latest.items()))


def write_night(history: Path, night: str, suite: str, outcomes: list[Outcome], commit: str,
                versions: dict[str, str], machine: dict[str, Any]) -> Path:
    """Write tonight's file, never touching an existing one; return its path."""
    history.mkdir(parents=True, exist_ok=True)
    attempt = night_files(history).get(night, (0, None))[0] + 1
    path = history / (f"{night}.parquet" if attempt == 1 else f"{night}.{attempt}.parquet")
    common = {"night": night, "attempt": attempt, "suite": suite, "commit": commit,
              "versions": json.dumps(versions, sort_keys=True),
              "machine": json.dumps(machine, sort_keys=True)}
    rows = []
    for o in outcomes:
        each = {**common, "experiment": o.experiment, "protocol": o.protocol,
                "backend": o.backend, "status": o.status, "reason": o.reason,
                "run_dir": o.run_dir, "wall_s": o.wall_s, "started_at": o.started_at}
        metrics: list[tuple[str | None, float | None, str | None]] = [
            (m, v, b) for m, (v, b) in o.metrics.items()] or [(None, None, None)]
        for metric, value, bad in metrics:
            rows.append({**each, "metric": metric, "value": value, "bad": bad})
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    tmp = path.with_suffix(".tmp")
    pq.write_table(table, tmp)
    # O_EXCL-like: a concurrent writer that took the same name loses instead of overwriting.
    os.link(tmp, path)
    tmp.unlink()
    return path


def read_history(history: Path, last: int | None = None) -> pd.DataFrame:
    """Every row of the latest attempt of each night (the last `last` nights), oldest first."""
    files = list(night_files(history).values())
    if last is not None:
        files = files[-last:]
    if not files:
        return SCHEMA.empty_table().to_pandas()
    return pd.concat([pq.read_table(p, schema=SCHEMA).to_pandas() for _, p in files],
                     ignore_index=True)


def read_night(path: Path) -> pd.DataFrame:
    """One night's file (for `testbed report NIGHT.parquet ...`)."""
    return pq.read_table(path, schema=SCHEMA).to_pandas()
