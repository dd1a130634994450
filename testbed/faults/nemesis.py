"""Doing the faults in real time: a thread walks the timeline and asks the backend to apply
each primitive, then appends the fault and its *measured* effect to `faults.jsonl`
(nodes/faults.py `FaultHistory`, the record shared with the simulator)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodes.faults import FaultHistory
from testbed.faults.schedule import Action


class Nemesis(threading.Thread):
    def __init__(self, actions: list[Action], start_at_ns: int, history: Path,
                 apply: Callable[[Action], dict[str, Any]], end_ns: int | None = None):
        super().__init__(name="nemesis", daemon=True)
        self.actions = actions
        self.start_at_ns = start_at_ns
        # The nodes' cap (workload end + drain_max): an action due before it but reached only
        # after it (nodes that booted past the workload's start made the whole timeline late)
        # would change nothing of the run and would read as a fault of it; it is not applied.
        self.end_ns = end_ns
        self.history = FaultHistory(history)
        self.apply = apply
        self.stopping = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        for action in self.actions:
            delay = (self.start_at_ns + action.at_ns - time.time_ns()) / 1e9
            # Also when the action is overdue (the nodes booted past the workload's start): a
            # stopped run's hosts may already be torn down.
            if self.stopping.is_set() or (delay > 0 and self.stopping.wait(delay)):
                return
            t = time.time_ns()
            if self.end_ns is not None and t >= self.end_ns:
                self.errors.append(f"{action.op} at {action.at_ns / 1e9:g}s: not applied, "
                                   f"reached {(t - self.start_at_ns) / 1e9:.1f} s after the "
                                   "workload's start, after the run's end")
                continue
            try:
                measured = self.apply(action)
            except Exception as exc:  # a failed fault is history too, never a crash
                measured = {"error": str(exc)}
                self.errors.append(f"{action.op} at {action.at_ns / 1e9:g}s: {exc}")
            self.history.append(action.primitive(), t, measured, action.fault)

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=10)
