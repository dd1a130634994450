"""Faults on a running testbed (`testbed fault ...` against a `testbed up`): the same
primitives as a schedule, applied now, recorded in the run's faults.jsonl with what they
measured. A fault given `--for` heals itself after that time."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import yaml

from testbed.backends.base import BackendError
from testbed.backends.local import PROCESS_FAULTS
from testbed.backends.nodeprocs import NodeProcesses
from testbed.faults.nemesis import history_record
from testbed.faults.nodeside import NodeSideFaults
from testbed.faults.schedule import Action, check_faults, expand
from testbed.rundir import RunDir

FOREVER_NS = 10**18


def attach(run: RunDir) -> tuple[list[str], Callable[[Action], dict[str, Any]]]:
    """The hosts of a running local testbed and a function that applies one primitive."""
    lock_path = run.path / "spec.lock.yaml"
    if not lock_path.exists():
        raise BackendError(f"run {run.run_id} has no nodes to fault (no spec.lock.yaml); "
                           "start one with `testbed up TOPOLOGY`")
    lock = yaml.safe_load(lock_path.read_text())
    backend = lock.get("experiment", {}).get("backend")
    if backend != "local":
        raise BackendError(f"testbed fault acts on local testbeds started with `testbed up`; "
                           f"run {run.run_id} is a {backend} run (use a `faults:` schedule)")
    hosts = [h["name"] for h in lock["topology"]["hosts"]]
    nodes = NodeProcesses.attach(run)
    node_side = NodeSideFaults(run, hosts, nodes.alive)

    def apply(action: Action) -> dict[str, Any]:
        if action.op in PROCESS_FAULTS:
            return nodes.fault(action.op, action.params["host"])
        return node_side.apply(action)

    return hosts, apply


def inject(run: RunDir, fault: Any, report: Callable[[dict[str, Any]], None]) -> None:
    hosts, apply = attach(run)
    problems = check_faults([fault], hosts, FOREVER_NS)
    if problems:
        raise BackendError(problems[0][1])
    started = time.time_ns()
    for action in expand([fault], hosts, FOREVER_NS, seed=started):
        time.sleep(max(0.0, (started + action.at_ns - time.time_ns()) / 1e9))
        record = history_record(action, time.time_ns(), apply(action))
        with (run.path / "faults.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        report(record)
