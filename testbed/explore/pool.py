"""Where seeds run: worker processes that stay alive (`--workers N`), or Spark tasks
(`--master URL`, one task per batch of seeds, `mapPartitions`).

Each worker loads the compiled simulator (nodes/fastpath.py `activate`) before anything
imports it, validates the explored experiment once, and keeps its run directories under one
temporary root (in /dev/shm when there is one). Nothing here starts a process per seed.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

_STATE: dict[str, Any] = {}
TMP_ENV = "TESTBED_EXPLORE_TMP"  # where temporary roots go (default /dev/shm, else the tmp dir)
PR_SET_PDEATHSIG = 1


def temp_root() -> Path:
    base: str | Path | None = os.environ.get(TMP_ENV)
    if not base:
        shm = Path("/dev/shm")
        base = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="testbed-explore-", dir=base))


def die_with_parent() -> None:
    """On Linux, have the kernel send this process SIGTERM when its parent dies (prctl
    PR_SET_PDEATHSIG): a worker never outlives a session killed outright. Elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before prctl: nobody will reap this worker
        os._exit(1)


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM (from the session, or the kernel when the session died): remove this worker's
    run directories and exit now. (An exception would not do: the pool's worker loop catches
    it, reports it to a parent that may be gone and waits for the next task.)"""
    root = _STATE.get("root")
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)
    os._exit(128 + signum)


def init_worker(data: dict[str, Any], checks: tuple[str, ...],
                parent_root: str | None = None) -> None:
    """Worker initialiser: tied to the session (dies with it, leaves Ctrl-C to it, removes its
    run directories on SIGTERM), then the compiled hot path, then the experiment, validated
    once. Its run directories go under `parent_root` (the session's, which the session
    removes whatever happens) or a temporary root of its own."""
    die_with_parent()
    if parent_root is not None:  # a session's worker, not a Spark executor
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, _terminate)
    from nodes.fastpath import activate

    activate()
    from testbed.explore.case import Base

    root = (Path(tempfile.mkdtemp(prefix="worker-", dir=parent_root)) if parent_root
            else temp_root())
    _STATE["root"] = root
    _STATE.update(base=Base.from_data(data, checks), key=_key(data, checks))
    import atexit

    atexit.register(shutil.rmtree, root, True)


def _key(data: dict[str, Any], checks: tuple[str, ...]) -> str:
    import json

    return json.dumps([data, list(checks)], sort_keys=True, default=str)


def run_seeds(seeds: list[int]) -> list[dict[str, Any]]:
    """A batch of seeds in this worker: draw, run, judge; one row each."""
    from nodes.fastpath import active
    from testbed.explore.case import InvalidCase, draw_case, run_case

    base, root = _STATE["base"], _STATE["root"]
    compiled = active()  # which simulator this worker runs (the CLI says when it is pure)
    rows = []
    for seed in seeds:
        try:
            case = draw_case(base, seed)
        except InvalidCase as exc:
            rows.append({"seed": seed, "faults": "[]", "params": "{}", "ok": True,
                         "verdict_ok": True, "liveness": "", "failing": [], "events": 0,
                         "checks": [], "error": f"invalid: {exc}", "wall_s": 0.0,
                         "compiled": compiled})
            continue
        row = run_case(base, case, root)
        row["case"] = case.record()
        row["compiled"] = compiled
        rows.append(row)
    return rows


def shrink_seed(case_record: dict[str, Any], keep: str) -> dict[str, Any]:
    """Shrink one failing case in this worker (shrink.py); the minimal run is kept at
    `keep`."""
    from testbed.explore.case import Case
    from testbed.explore.shrink import shrink

    return shrink(_STATE["base"], Case.from_record(case_record), _STATE["root"], Path(keep))


def spark_rows(master: str, data: dict[str, Any], checks: tuple[str, ...],
               batches: list[list[int]]) -> Iterable[dict[str, Any]]:
    """Every batch as one Spark task (mapPartitions); rows as the tasks finish, in batch
    order. The executors need this repository on their PYTHONPATH (docs/explore.md)."""
    from analysis.session import spark_session

    spark = spark_session(master, app="testbed-explore")
    sc = spark.sparkContext
    rdd = sc.parallelize(batches, max(1, len(batches)))

    def task(part: Iterable[list[int]]) -> Iterator[dict[str, Any]]:
        from testbed.explore import pool

        if pool._STATE.get("key") != pool._key(data, checks):
            pool.init_worker(data, checks)
        for batch in part:
            for row in pool.run_seeds(batch):
                row.pop("summary", None)
                yield row

    return rdd.mapPartitions(task).toLocalIterator()
