"""The nemesis thread applies nothing once stopped, also when it runs late: a run whose nodes
booted past the workload's start (a hundred on two cores) had its whole timeline overdue, and
after `stop()` the thread went on crashing and restarting hosts whose namespaces teardown had
already removed (a restarted node's journal entry stayed live)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from analysis.fault_history import fault_history
from analysis.record import read_record
from testbed.faults.nemesis import AFTER_END, SKIPPED_FILE, Nemesis
from testbed.faults.schedule import Action


def test_a_stopped_nemesis_applies_no_overdue_action(tmp_path: Path) -> None:
    applied: list[str] = []
    first = threading.Event()
    release = threading.Event()

    def apply(action: Action) -> dict[str, Any]:
        applied.append(action.op)
        first.set()
        release.wait(5)  # the first fault is slow (a heal probing 100 nodes took 20 s)
        return {}

    actions = [Action(0, "crash", {"host": "h1"}), Action(1, "restart", {"host": "h1"}),
               Action(2, "crash", {"host": "h2"})]
    nemesis = Nemesis(actions, time.time_ns() - 10**9,  # every action overdue
                      tmp_path / "faults.jsonl", apply)
    nemesis.start()
    assert first.wait(5)
    nemesis.stopping.set()  # stop() while the first action is still being applied
    release.set()
    nemesis.join(5)
    assert not nemesis.is_alive()
    assert applied == ["crash"]


def test_an_unstopped_nemesis_applies_overdue_actions_in_order(tmp_path: Path) -> None:
    applied: list[str] = []

    def apply(action: Action) -> dict[str, Any]:
        applied.append(action.op)
        return {}

    actions = [Action(0, "crash", {"host": "h1"}), Action(1, "restart", {"host": "h1"})]
    nemesis = Nemesis(actions, time.time_ns() - 10**9, tmp_path / "faults.jsonl", apply)
    nemesis.start()
    nemesis.join(5)
    assert applied == ["crash", "restart"]


def test_an_action_reached_after_the_runs_end_is_not_applied(tmp_path: Path) -> None:
    """The partition of a run whose nodes booted past their own cap was applied after every
    node had exited and, never healed, read as a fault that voided the liveness promise. Such
    actions are recorded the one way a fault not applied is (faults.skipped.jsonl, the reason
    `after the run's end`), not as errors, and never in faults.jsonl."""
    applied: list[str] = []

    def apply(action: Action) -> dict[str, Any]:
        applied.append(action.op)
        return {}

    now = time.time_ns()
    actions = [Action(0, "crash", {"host": "h1"}), Action(1, "restart", {"host": "h1"})]
    nemesis = Nemesis(actions, now - 10**9, tmp_path / "faults.jsonl", apply, end_ns=now)
    nemesis.start()
    nemesis.join(5)
    nemesis.stop()  # as the runner does: records nothing twice
    assert applied == []
    assert nemesis.errors == []
    assert not (tmp_path / "faults.jsonl").exists() or \
        (tmp_path / "faults.jsonl").read_text() == ""
    skipped = [json.loads(x) for x in (tmp_path / SKIPPED_FILE).read_text().splitlines()]
    assert [(s["kind"], s["phase"], s["t"]) for s in skipped] == [
        ("crash", "start", now - 10**9), ("crash", "stop", now - 10**9 + 1)]
    assert all(s["measured"]["skipped"] == AFTER_END for s in skipped)
    assert 0.9 < skipped[0]["measured"]["reached_s"] < 5
    assert len(nemesis.skipped) == 2
    assert nemesis.skipped[0].startswith("crash at 0s: after the run's end (reached 1.")
    # What the analysis and the verdict read (faults.jsonl): no crash, h1 stayed correct.
    (tmp_path / "nodes").mkdir(exist_ok=True)
    assert read_record(tmp_path).faults == ()
    assert fault_history(["h1", "h2"], list(read_record(tmp_path).faults)).correct == ["h1", "h2"]
