"""Doing the faults in real time: a thread walks the timeline and asks the backend to apply
each primitive, then appends the fault and its *measured* effect to `faults.jsonl`.

History record (one JSON object per line, shared with the simulator's own writer):
`{"t": true ns, "kind": partition|crash|pause|clock|link|mgmt, "phase": start|stop,
  "hosts": [...], "fault": index in faults:, "params": {...}, "measured": {...}}`
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.faults.schedule import Action

KIND_PHASE = {
    "block": ("partition", "start"), "heal": ("partition", "stop"),
    "crash": ("crash", "start"), "restart": ("crash", "stop"),
    "pause": ("pause", "start"), "resume": ("pause", "stop"),
    "clock": ("clock", "start"), "path": ("link", "start"), "mgmt": ("mgmt", "start"),
}


def hosts_of(action: Action) -> list[str]:
    p = action.params
    if "host" in p:
        return [p["host"]]
    if "cuts" in p:
        return sorted({h for c in p["cuts"] for h in c})
    return list(p.get("between", []))


def history_record(action: Action, t: int, measured: dict[str, Any]) -> dict[str, Any]:
    kind, phase = KIND_PHASE[action.op]
    if action.op == "path" and action.params.get("reset"):
        phase = "stop"
    params = {k: v for k, v in action.params.items() if k != "host"}
    return {"t": t, "kind": kind, "phase": phase, "hosts": hosts_of(action),
            "fault": action.fault, "params": params, "measured": measured}


class Nemesis(threading.Thread):
    def __init__(self, actions: list[Action], start_at_ns: int, history: Path,
                 apply: Callable[[Action], dict[str, Any]]):
        super().__init__(name="nemesis", daemon=True)
        self.actions = actions
        self.start_at_ns = start_at_ns
        self.history = history
        self.apply = apply
        self.stopping = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        for action in self.actions:
            delay = (self.start_at_ns + action.at_ns - time.time_ns()) / 1e9
            if delay > 0 and self.stopping.wait(delay):
                return
            t = time.time_ns()
            try:
                measured = self.apply(action)
            except Exception as exc:  # a failed fault is history too, never a crash
                measured = {"error": str(exc)}
                self.errors.append(f"{action.op} at {action.at_ns / 1e9:g}s: {exc}")
            with self.history.open("a", encoding="utf-8") as f:
                f.write(json.dumps(history_record(action, t, measured)) + "\n")

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=10)
