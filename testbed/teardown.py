"""Undo a run from its journal, in reverse creation order; idempotent, and it works after the
orchestrator was killed (ARCHITECTURE.md decision 5)."""

from __future__ import annotations

from testbed.processes import run_processes, start_time, stop_pid
from testbed.rundir import RunDir


def teardown(run: RunDir) -> list[str]:
    """Remove what the run left; return a line per resource removed."""
    journal = run.journal
    removed = []
    for entry in reversed(journal.live()):
        if entry.get("kind") == "process":
            if stop_pid(entry["pid"], entry.get("starttime")):
                removed.append(f"process {entry['id']} (pid {entry['pid']})")
        journal.append("remove", id=entry["id"])
    # A kill between spawn() and its journal line leaves a process only its environment names.
    for pid in run_processes(run.run_id):
        if stop_pid(pid, start_time(pid)):
            removed.append(f"process pid {pid} (found by run id)")
    if not journal.finished():
        journal.append("down")
    return removed


def is_active(run: RunDir) -> bool:
    return not run.journal.finished()
