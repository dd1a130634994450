"""Faults on a running testbed (`testbed fault ...` against a `testbed up`): the same
primitives as a schedule, applied now, recorded in the run's faults.jsonl with what they
measured. A fault given `--for` heals itself after that time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from nodes.faults import Controls, FaultHistory, apply
from testbed.backends.base import BackendError
from testbed.backends.nodeprocs import NodeProcesses
from testbed.faults.nodeside import NodeSideFaults
from testbed.faults.schedule import check_faults, expand
from testbed.rundir import RunDir
from testbed.runplan import read_plan

FOREVER_NS = 10**18


def attach(run: RunDir) -> tuple[list[str], Controls]:
    """The hosts of a running local testbed (from the run's plan.json) and its process,
    network and node control."""
    try:
        plan = read_plan(run)
    except LookupError as exc:
        raise BackendError(str(exc)) from None
    backend = plan["backend"]
    if backend != "local":
        raise BackendError(f"testbed fault acts on local testbeds started with `testbed up`; "
                           f"run {run.run_id} is a {backend} run (use a `faults:` schedule)")
    hosts = list(plan["hosts"])
    nodes = NodeProcesses.attach(run)
    node_side = NodeSideFaults(run, hosts, nodes.alive)
    return hosts, Controls(process=nodes, network=node_side, node=node_side)


def inject(run: RunDir, fault: Any, report: Callable[[dict[str, Any]], None]) -> None:
    hosts, controls = attach(run)
    problems = check_faults([fault], hosts, FOREVER_NS)
    if problems:
        raise BackendError(problems[0][1])
    history = FaultHistory(run.path / "faults.jsonl")
    started = time.time_ns()
    for action in expand([fault], hosts, FOREVER_NS, seed=started):
        time.sleep(max(0.0, (started + action.at_ns - time.time_ns()) / 1e9))
        prim = action.primitive()
        report(history.append(prim, time.time_ns(), apply(controls, prim), action.fault))
