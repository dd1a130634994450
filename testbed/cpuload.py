"""The orchestrator machine's CPU while a run's nodes run: `cpu.jsonl` in the run directory.

A saturated machine emulates a slower WAN than the one configured (analysis/fidelity.py): the
runner samples /proc/stat and /proc/loadavg about once a second while it watches the nodes
and writes one line per sample: `t` (ns), `busy` (the fraction of all CPUs' time not idle
since the previous sample), `cpus`, `load1`. On the remote backend this is the orchestrator's
machine, not the hosts'.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

CPU_FILE = "cpu.jsonl"
PERIOD_NS = 1_000_000_000


def _stat() -> tuple[int, int] | None:
    """(idle, total) jiffies of all CPUs, or None without /proc/stat."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            line = f.readline().split()
    except OSError:
        return None
    if not line or line[0] != "cpu":
        return None
    values = [int(v) for v in line[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return idle, sum(values[:8])


def _load1() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class CpuSampler:
    """Appends a sample to `run_dir/cpu.jsonl` when `poll(now_ns)` finds one due."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / CPU_FILE
        self._last = _stat()
        self._due = time.time_ns() + PERIOD_NS

    def poll(self, now_ns: int) -> None:
        if now_ns < self._due:
            return
        self._due = now_ns + PERIOD_NS
        cur = _stat()
        if cur is None or self._last is None:
            self._last = cur
            return
        idle, total = cur[0] - self._last[0], cur[1] - self._last[1]
        self._last = cur
        if total <= 0:
            return
        rec = {"t": now_ns, "busy": round(1 - idle / total, 3), "cpus": os.cpu_count() or 1,
               "load1": _load1()}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
