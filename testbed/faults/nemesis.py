"""Doing the faults in real time: a thread walks the timeline and asks the backend to apply
each primitive, then appends the fault and its *measured* effect to `faults.jsonl`
(nodes/faults.py `FaultHistory`, the record shared with the simulator).

A fault never delays the next one past its time: what a fault asks of the nodes
(testbed/faults/nodeside.py) is answered by the next fault's time (`answers_by`), at most
`ANSWER_S` later; nodes that had not answered are named in its measurement (`no_answer`) and in
`notes`. `stop()` returns once no fault is being applied and none will be: the runner calls it
before it collects and tears down, so no fault ever acts on a backend that is going away.

A fault that was not applied is never in `faults.jsonl` (whose every record the analysis reads
as a fault of the run): it is a line of `faults.skipped.jsonl`, the record it would have had at
its planned time with `measured.skipped` saying why -- `stopped` (`stop()` came first: the run
was ending) or `after the run's end` (reached only past the nodes' cap, `end_ns`; with
`measured.reached_s`) -- and a line of `skipped` for the console. `errors` are faults that
were tried and failed (in `faults.jsonl` with `measured.error`)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodes.faults import FaultHistory
from testbed.faults.nodeside import ANSWER_S, answers_by
from testbed.faults.schedule import Action

SKIPPED_FILE = "faults.skipped.jsonl"
#: `measured.skipped` of a fault not applied: why
STOPPED = "stopped"
AFTER_END = "after the run's end"
#: the least time a fault waits for the nodes' answers, however close the next fault is
MIN_ANSWER_S = 1.0
#: how long stop() waits for the fault being applied (each is bounded by its deadlines: the
#: nodes' answers, the engine's and iptables' timeouts)
STOP_WAIT_S = 120.0


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
        self.skipped_path = history.with_name(SKIPPED_FILE)
        self.apply = apply
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self.notes: list[str] = []
        self.skipped: list[str] = []
        self.applied = 0  # actions done (applied or failed), in timeline order

    def run(self) -> None:
        why, reached_ns = STOPPED, 0
        try:
            for k, action in enumerate(self.actions):
                delay = (self.start_at_ns + action.at_ns - time.time_ns()) / 1e9
                if self.stopping.wait(max(0.0, delay)):  # also when overdue as the run ends
                    return
                reached_ns = time.time_ns()
                if self.end_ns is not None and reached_ns >= self.end_ns:
                    why = AFTER_END  # and so is every action after it
                    return
                self._apply(action, self._deadline(k))
                self.applied = k + 1
        finally:
            self._skip(self.actions[self.applied:], why, reached_ns)

    def _deadline(self, k: int) -> float:
        """time.monotonic() by which action k's answers are in: the next action's time, at
        most ANSWER_S and at least MIN_ANSWER_S from now (a loaded machine's nodes answer
        local HTTP in well under a second; a fault 0.25 s before the next one still gets that
        long, so the next may begin up to MIN_ANSWER_S late when nodes are slow)."""
        limit = ANSWER_S
        if k + 1 < len(self.actions):
            due_ns = self.start_at_ns + self.actions[k + 1].at_ns
            limit = min(limit, max(MIN_ANSWER_S, (due_ns - time.time_ns()) / 1e9))
        return time.monotonic() + limit

    def _apply(self, action: Action, deadline: float) -> None:
        t = time.time_ns()
        try:
            with answers_by(deadline):
                measured = self.apply(action)
        except Exception as exc:  # a failed fault is history too, never a crash
            measured = {"error": str(exc)}
            self.errors.append(f"{action.op} at {action.at_ns / 1e9:g}s: {exc}")
        late = measured.get("no_answer") if isinstance(measured, dict) else None
        if late:
            self.notes.append(f"{action.op} at {action.at_ns / 1e9:g}s: no answer from "
                              f"{len(late)} host(s) by the next fault's time: "
                              f"{', '.join(late[:8])}{' ...' if len(late) > 8 else ''}")
        self.history.append(action.primitive(), t, measured, action.fault)

    def _skip(self, actions: list[Action], why: str, reached_ns: int) -> None:
        """Record `actions` as not applied, `why` (STOPPED or AFTER_END, reached at
        `reached_ns`)."""
        if not actions:
            return
        measured: dict[str, Any] = {"skipped": why}
        detail = "the run ended before its time"
        if why == AFTER_END:
            measured["reached_s"] = round((reached_ns - self.start_at_ns) / 1e9, 3)
            detail = f"reached {measured['reached_s']:.1f} s after the workload's start"
        lines = []
        for action in actions:
            lines.append(json.dumps(action.primitive().record(
                self.start_at_ns + action.at_ns, measured, action.fault)) + "\n")
            self.skipped.append(f"{action.op} at {action.at_ns / 1e9:g}s: {why} ({detail})")
        with self.skipped_path.open("a", encoding="utf-8") as f:
            f.writelines(lines)

    def stop(self) -> None:
        """No fault is applied after this returns: the one being applied finishes (its
        deadlines bound it), those not yet applied are recorded as not applied (STOPPED)."""
        self.stopping.set()
        if self.is_alive():
            self.join(timeout=STOP_WAIT_S)
        if self.is_alive():
            self.errors.append(f"a fault was still being applied {STOP_WAIT_S:g} s after the "
                               "run ended")
