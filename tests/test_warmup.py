"""analysis/warmup.py: the Spark session started while a run runs. What its waiter sees when the
start fails, and the runner's estimate of a run's events that sizes the session (no JVM here:
tests/test_run_console_analysis.py runs `testbed run` through a warm-up to its verdict)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from analysis import warmup
from testbed.runner import expected_events
from testbed.runplan import RunPlan
from testbed.spec.loader import load_experiment

ROOT = Path(__file__).resolve().parents[1]


class StartFailed(Exception):
    """What the start below raises."""


def test_a_failed_start_is_raised_by_the_analysis_that_waits_for_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # as in a fresh `testbed run`, which has no SparkContext (this test process may have one)
    monkeypatch.setattr(warmup, "_has_context", lambda: False)
    started = threading.Event()

    def start() -> None:
        started.set()
        raise StartFailed("no JVM here")

    rehearsed: list[bool] = []
    warmup.warm_up(start, lambda: rehearsed.append(True))
    assert started.wait(30)
    with pytest.raises(StartFailed, match="no JVM here"):
        warmup.await_warm_up()
    assert not rehearsed  # nothing rehearses without a session
    warmup.await_warm_up()  # waited for once: nothing left to wait for


def test_an_analysis_waiting_for_the_session_is_not_kept_waiting_by_a_rehearsal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warmup, "_has_context", lambda: False)
    up = threading.Event()

    def start() -> object:
        assert up.wait(30)
        return object()  # no session: a rehearsal would fail on it

    rehearsed: list[bool] = []
    warmup.warm_up(start, lambda: rehearsed.append(True))
    threading.Timer(0.5, up.set).start()
    warmup.await_warm_up()  # waits from before the session is up
    assert not rehearsed


def test_the_quickstart_estimate_is_near_its_logs() -> None:
    exp, topo = load_experiment(ROOT / "experiments" / "quickstart.yaml", "sim")
    plan = RunPlan.build(exp, topo)
    # 4 senders, 50 msgs/s, 20 s: each message's send and two deliveries at 4 hosts; its logs
    # hold 35,198 events (seed 1)
    assert 30_000 < expected_events(exp, plan.hosts) < 40_000
