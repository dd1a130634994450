"""The Spark session started while a run runs (analysis/engine.py `prepare`): the JVM's start
and its first queries are most of a small analysis's time, and the run leaves the machine
room for them.

`warm_up` starts the session analysis/session.py `spark_session` will return, in a
background thread, then rehearses the analysis there on a tiny run (analysis/job.py
`rehearse`); `spark_session` waits for the session and cancels what is left of the
rehearsal. This module imports no Spark: the thread does.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


def _has_context() -> bool:
    """Whether this process has a SparkContext (without importing Spark)."""
    pyspark = sys.modules.get("pyspark")
    return pyspark is not None and pyspark.SparkContext._active_spark_context is not None


#: the job group of `warm_up`'s rehearsal, which `spark_session` cancels
WARM_UP_GROUP = "testbed-warm-up"


@dataclass
class _WarmUp:
    thread: threading.Thread
    ready: Future[None] = field(default_factory=Future)  # the session is up (or failed)
    wanted: threading.Event = field(default_factory=threading.Event)  # the analysis waits
    done: threading.Event = field(default_factory=threading.Event)  # the thread has ended


# The session `warm_up` is starting, until `spark_session` has waited for it.
_warming: _WarmUp | None = None
_warming_lock = threading.Lock()


def warm_up(start: Callable[[], Any], rehearse: Callable[[], object] | None = None) -> None:
    """Call `start` (which starts the SparkSession the analysis's `spark_session` will
    return) in a background thread, then `rehearse` there (a small analysis: its first queries
    load and compile what the real one runs, its Python workers import the checkers and stay,
    `spark.python.worker.reuse`), unless the analysis is waiting by then; nothing if this
    process has a SparkContext already. Returns at once: the thread imports Spark too. The
    next `spark_session` waits for the session, raises what made its start fail, and cancels
    what is left of the rehearsal."""
    global _warming

    def run() -> None:
        try:
            spark = start()
        except BaseException as exc:  # raised in the thread that waits for the session
            warm.ready.set_exception(exc)
            warm.done.set()
            return
        warm.ready.set_result(None)
        try:
            if rehearse is not None and not warm.wanted.is_set():  # else it only delays
                spark.sparkContext.setJobGroup(WARM_UP_GROUP, "warm-up", interruptOnCancel=True)
                rehearse()
        except Exception as exc:  # cancelled; the analysis runs the same code, and says
            log.debug("warm-up ended: %s", exc)
        finally:
            warm.done.set()

    with _warming_lock:
        if _warming is not None or _has_context():
            return
        warm = _warming = _WarmUp(threading.Thread(target=run, name="spark-warm-up",
                                                   daemon=True))
    warm.thread.start()


def await_warm_up() -> None:
    """Wait for `warm_up`'s session (raising what made its start fail), then cancel its
    rehearsal until the thread has ended; nothing in the warm-up's own thread."""
    global _warming
    with _warming_lock:
        warm = _warming
        if warm is None or warm.thread is threading.current_thread():
            return
        _warming = None
    warm.wanted.set()
    warm.ready.result()
    while not warm.done.is_set():  # each job the rehearsal starts from now on is cancelled
        from pyspark import SparkContext

        sc = SparkContext._active_spark_context
        if sc is not None:
            sc.cancelJobGroup(WARM_UP_GROUP)
        warm.done.wait(0.05)
