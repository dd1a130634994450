"""The run plan (testbed/runplan.py): built once from the spec, shaped by what the backend
says it can do, and written to plan.json for `testbed fault` and `testbed mgmt`."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from nodes.config import SIM_EPOCH_NS
from testbed.backends import backend_class
from testbed.backends.base import HostAddress
from testbed.rundir import RunDir
from testbed.runplan import LOCAL_STARTUP_NS, RunPlan, read_plan
from testbed.spec.loader import load_experiment

ROOT = Path(__file__).resolve().parent.parent


def test_capabilities_decide_clock_shaping_and_capture() -> None:
    assert backend_class("sim").capabilities.virtual_clock
    assert not backend_class("local").capabilities.virtual_clock
    assert backend_class("local").capabilities.inprocess_shaping
    for name in ("mininet", "docker", "remote"):
        caps = backend_class(name).capabilities
        assert caps.capture and not caps.inprocess_shaping and caps.management
        assert not caps.virtual_clock
    # Every wall-clock backend applies typed faults through its controls (one dispatcher).
    assert backend_class("sim").controls is None


@pytest.mark.parametrize("backend", ["sim", "local", "mininet", "remote"])
def test_one_plan_serves_dry_run_and_run(backend: str, tmp_path: Path) -> None:
    exp, topo = load_experiment(ROOT / "experiments" / "quickstart.yaml", backend)
    plan = RunPlan.build(exp, topo)
    assert plan.hosts == ["h1", "h2", "h3", "h4"] and plan.correct == plan.hosts
    # Only backends that shape real interfaces get a tc plan per host.
    assert bool(plan.shaping) == (backend in ("mininet", "remote"))
    start = plan.start_time(10**18)
    assert start == (SIM_EPOCH_NS + 500_000_000 if backend == "sim"
                     else 10**18 + LOCAL_STARTUP_NS)
    run = RunDir.create(tmp_path, "plan")
    addresses = {h: HostAddress(f"198.18.0.{i + 1}", 7000, "127.0.0.1")
                 for i, h in enumerate(plan.hosts)}
    planned = plan
    plan = plan.realise(run, addresses, start)
    configs = plan.configs
    # the plan is immutable: realising it gives a new one and leaves the built one as it was
    assert planned.configs == [] and planned.addresses == {} and planned.start_at_ns == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.shaping = {}  # type: ignore[misc]
    assert plan.shaping == planned.shaping and plan.start_at_ns == start
    assert [c.name for c in configs] == plan.hosts
    assert all(c.start_at_ns == start for c in configs)
    # In-process shaping puts the paths into the node configs; the simulator has no endpoint.
    assert bool(configs[0].paths) == (backend not in ("mininet", "remote"))
    assert (configs[0].control_port is None) == (backend == "sim")
    plan.write(run)
    written = read_plan(run)
    assert written["backend"] == backend and written["hosts"] == plan.hosts
    assert written["addresses"]["h2"]["data"] == "198.18.0.2"
    assert bool(written["shaping"]) == (backend in ("mininet", "remote"))
    if backend == "mininet":  # the tc commands --dry-run prints (remote: the host's device)
        assert any(line.startswith("tc qdisc add dev d0 root handle 1: htb")
                   for line in written["shaping"]["h1"])


def test_a_run_without_a_plan_is_a_lookup_error(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "empty")
    with pytest.raises(LookupError, match="no plan.json"):
        read_plan(run)


def test_the_runner_never_tests_a_backend_type() -> None:
    tree = ast.parse((ROOT / "testbed" / "runner.py").read_text())
    calls = [n.func.id for n in ast.walk(tree)
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    assert "isinstance" not in calls
