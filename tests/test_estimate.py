"""The load estimate of `testbed run --dry-run` (testbed/estimate.py): datagrams counted by
simulating the experiment, CPU from a cost per datagram measured with real local nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.estimate import (
    Cost,
    Rates,
    cached_cost,
    fit,
    machine_key,
    measure_cost,
    simulated_rates,
)
from testbed.spec.loader import load_experiment
from tests.inproc import ROOT, run_cli


def spec(tmp_path: Path, hosts: int, rate: str, name: str = "exp") -> Path:
    host_lines = "\n".join(f"    - {{name: h{i + 1}, site: a}}" for i in range(hosts))
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"""\
name: {name}
topology:
  name: lan
  sites:
    a: {{lan: {{delay: 1ms}}}}
  hosts:
{host_lines}
backend: sim
duration: 3s
protocol: {{name: sequencer}}
workload: {{rate: {rate}, size: 100B}}
""")
    return path


def rates(path: Path) -> Rates:
    exp, topo = load_experiment(path, None)
    return simulated_rates(exp, topo)


def test_datagrams_follow_the_group_and_the_workload(tmp_path: Path) -> None:
    small, large = rates(spec(tmp_path, 3, "10/s", "s")), rates(spec(tmp_path, 9, "10/s", "l"))
    busier = rates(spec(tmp_path, 3, "200/s", "b"))
    assert 0 < small.idle_per_s < small.busy_per_s
    # every member heartbeats every other: idle traffic grows faster than the group
    assert large.idle_per_s > 3 * small.idle_per_s
    # 3 senders x 190 msgs/s more, each to two peers at least
    assert busier.busy_per_s - small.busy_per_s > 3 * 190 * 2 * 0.8
    assert busier.idle_per_s == small.idle_per_s  # idle ignores the workload


def test_fit_names_the_rate_that_fits() -> None:
    cost = Cost(100e-6, machine_key(), "now")
    r = Rates(hosts=10, idle_per_s=1_000, busy_per_s=21_000, rate=20, senders=10)
    f = fit(r, cost, cores=2)  # 0.1 cores idle, 2.1 busy: over half of 2
    assert not f.fits and "up to 9 msgs/s" in f.advice
    scaled = Rates(10, 1_000, 1_000 + 20_000 * 8.9 / 20, 8.9, 10)
    assert fit(scaled, cost, cores=2).fits
    idle_heavy = Rates(hosts=100, idle_per_s=20_000, busy_per_s=30_000, rate=1, senders=100)
    assert "idle group alone" in fit(idle_heavy, cost, cores=2).advice
    assert fit(Rates(4, 40, 600, 50, 4), cost, cores=2).fits


def test_dry_run_says_what_will_not_fit(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    path = spec(tmp_path, 4, "400/s")
    r = run_cli("run", str(path), "--dry-run", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "load (simulated):" in r.stdout and "testbed doctor --measure" in r.stdout
    cache = tmp_path / "cache" / "testbed" / "cost.json"
    cache.parent.mkdir(parents=True)
    # a machine ten thousand times slower than any: 4 hosts at 400 msgs/s cannot fit
    cache.write_text(json.dumps({"cpu_s_per_datagram": 0.01, "machine": machine_key(),
                                 "measured_at": "then"}))
    r = run_cli("run", str(path), "--dry-run", env=env)
    assert "will not fit this machine" in r.stdout and "msgs/s per sender fits" in r.stdout
    assert r.stdout.rstrip().endswith("dry run: nothing created")
    cache.write_text(json.dumps({"cpu_s_per_datagram": 0.01, "machine": "another machine",
                                 "measured_at": "then"}))
    r = run_cli("run", str(path), "--dry-run", env=env)
    assert "not estimated" in r.stdout  # another machine's cost is not this one's


def test_measure_cost_with_real_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cost = measure_cost(seconds=3)
    # a Python node spends microseconds to a few milliseconds of CPU on a datagram
    assert 1e-6 < cost.cpu_s_per_datagram < 5e-3
    assert cached_cost() == cost
    assert not list(Path(ROOT / "runs").glob("cost-*"))  # the measuring runs are gone
