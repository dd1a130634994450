"""What an experiment will ask of this machine, before it runs (`testbed run --dry-run`).

Datagrams per second come from simulating the experiment itself for a few seconds (its
protocol, parameters, timers, topology and workload; no faults): once idle (one sender at one
message every ten seconds, what `testbed up` leaves running) and once under its workload.
The simulator counts every datagram the nodes hand to the network, so the figure follows the
protocol's code, not a formula of it.

CPU comes from a per-datagram cost measured once on this machine by `testbed doctor
--measure` (`measure_cost`): two short runs of real node processes on the `local` backend
at two rates, their CPU seconds (the runner's reaped children) against the datagrams the
simulator counts for the same two experiments; the marginal cost is the difference of the
two over the difference of datagrams, so process start and idle timers cancel. It is cached
per machine (CPU model and count) in `$XDG_CACHE_HOME/testbed/cost.json`. Mininet and Docker
add a shaper per host on each datagram's path, which the local backend does in the node: the
estimate is a floor there.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WINDOW_S = 1.0  # simulated seconds of workload per estimate
IDLE_RATE = "0.1/s"  # one sender, one message every ten seconds: an idle group
FIT = 0.5  # share of the machine's cores the nodes may need: shapers, capture, orchestrator
MEASURE_RATES = (20, 300)  # msgs/s per host of measure_cost's two runs
MEASURE_HOSTS = 3


class EstimateError(Exception):
    """The experiment cannot be estimated (a user's node program, a spec the simulator refuses)."""


@dataclass(frozen=True)
class Rates:
    """Datagrams per simulated second, in all, idle and under the workload."""

    hosts: int
    idle_per_s: float
    busy_per_s: float
    rate: float  # the workload's msgs/s per sender
    senders: int


@dataclass(frozen=True)
class Cost:
    """CPU seconds per datagram on this machine, as `measure_cost` found it."""

    cpu_s_per_datagram: float
    machine: str
    measured_at: str


def machine_key() -> str:
    """This machine as the cost cache knows it: CPU model and count."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model} x{os.cpu_count() or 1}"


def cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "testbed" / "cost.json"


def cached_cost() -> Cost | None:
    """The cost measured on this machine, or None (never measured, or another machine's)."""
    try:
        data = json.loads(cache_file().read_text())
        cost = Cost(float(data["cpu_s_per_datagram"]), str(data["machine"]),
                    str(data["measured_at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return cost if cost.machine == machine_key() and cost.cpu_s_per_datagram > 0 else None


def _simulated(exp: Any, topo: Any, seconds: float, idle_sender: str | None) -> float:
    """Datagrams per simulated second of `exp` for `seconds` of workload, without faults;
    with `idle_sender`, that host alone sends, at IDLE_RATE."""
    from testbed.explore.case import simulate as simulate_case
    from testbed.spec.units import parse_frequency

    workload = exp.workload
    if idle_sender is not None:
        workload = workload.model_copy(update={"senders": [idle_sender],
                                               "rate": parse_frequency(IDLE_RATE)})
    window = exp.model_copy(update={
        "backend": "sim", "faults": [], "expect": [], "explore": None, "workload": workload,
        "duration": int(seconds * 1e9), "drain": 500_000_000, "drain_max": 500_000_000})
    with tempfile.TemporaryDirectory(prefix="testbed-estimate-") as tmp:
        _, stats = simulate_case(window, topo, Path(tmp), max_events=0, max_wall_s=0)
    return float(stats["datagrams"]) / float(stats["virtual_s"])


def simulated_rates(exp: Any, topo: Any, seconds: float = WINDOW_S) -> Rates:
    """Datagrams per second of a loaded experiment, idle and under its workload."""
    if exp.maelstrom:
        raise EstimateError("a node program's traffic cannot be simulated")
    hosts = list(topo.paths().hosts)
    seconds = min(seconds, exp.duration / 1e9)
    idle = _simulated(exp, topo, seconds, hosts[0])
    busy = _simulated(exp, topo, seconds, None)
    senders = exp.workload.senders
    count = len(hosts) if senders == "all" else len(senders)
    return Rates(len(hosts), idle, busy, float(exp.workload.rate or 0), count)


def _measure_spec(rate: int, seconds: int) -> dict[str, Any]:
    names = [f"h{i + 1}" for i in range(MEASURE_HOSTS)]
    return {
        "name": f"cost-{rate}",
        "topology": {"name": "cost-lan", "sites": {"lan": {"lan": {"delay": "1ms"}}},
                     "hosts": [{"name": n, "site": "lan"} for n in names]},
        "backend": "local", "duration": f"{seconds}s", "drain": "1s", "drain_max": "5s",
        "seed": 1, "protocol": {"name": "sequencer"},
        "workload": {"senders": "all", "rate": f"{rate}/s", "size": "256B"},
    }


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _sends(run_dir: Path) -> int:
    from analysis.record import read_record

    return sum(len(evs) for evs in read_record(run_dir).events(kinds=("send",)).values())


def measure_cost(seconds: int = 4) -> Cost:
    """Measure CPU seconds per datagram with real nodes on the `local` backend (no root) and
    cache it. Two runs at MEASURE_RATES; each run's datagrams are the simulator's count for
    the same experiment, scaled by the multicasts the real nodes made against the simulated
    ones (a node up late on a loaded machine sends less of its workload)."""
    import contextlib
    import datetime
    import io

    from rich.console import Console

    from testbed.explore.case import simulate as simulate_case
    from testbed.explore.case import validate_data
    from testbed.runner import run_experiment

    points = []
    with tempfile.TemporaryDirectory(prefix="testbed-cost-") as tmp:
        for rate in MEASURE_RATES:
            exp, topo = validate_data(_measure_spec(rate, seconds))
            sim_dir, stats = simulate_case(exp.model_copy(update={"backend": "sim"}), topo,
                                           Path(tmp) / "sim", max_events=0, max_wall_s=0)
            before = _children_cpu_s()
            with contextlib.redirect_stdout(io.StringIO()):  # the runner's warnings
                result = run_experiment(exp, topo, Path(tmp) / "local",
                                        Console(file=io.StringIO()), analyze=False)
            cpu = _children_cpu_s() - before
            share = _sends(result.run.path) / max(1, _sends(sim_dir))
            points.append((int(stats["datagrams"]) * share, cpu))
    (low_n, low_cpu), (high_n, high_cpu) = points
    if high_n <= low_n or high_cpu <= low_cpu:
        raise EstimateError(f"the two measuring runs did not differ ({points}): the machine "
                            "is too busy to measure; try again")
    cost = Cost((high_cpu - low_cpu) / (high_n - low_n), machine_key(),
                datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"))
    target = cache_file()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(cost.__dict__, indent=1) + "\n")
    return cost


@dataclass(frozen=True)
class Fit:
    """The estimate's verdict: the cores the nodes need idle and busy, and what would fit."""

    idle_cores: float
    busy_cores: float
    cores: int
    fits: bool
    advice: str


def fit(rates: Rates, cost: Cost, cores: int | None = None) -> Fit:
    """Whether the experiment fits FIT of this machine's cores, and if not, what would: the
    workload rate that fits (busy traffic is idle traffic plus a part proportional to the
    rate), or, when the idle group alone does not fit, that it does not."""
    cores = cores or os.cpu_count() or 1
    idle = rates.idle_per_s * cost.cpu_s_per_datagram
    busy = rates.busy_per_s * cost.cpu_s_per_datagram
    room = FIT * cores
    if busy <= room:
        return Fit(idle, busy, cores, True, "")
    if idle >= room:
        advice = (f"the idle group alone needs {idle:.1f} cores: fewer hosts, or the protocol's "
                  "timers longer (its failure detector's interval)")
    else:
        per_rate = (busy - idle) / rates.rate if rates.rate > 0 else 0.0
        fitting = (room - idle) / per_rate if per_rate > 0 else rates.rate
        advice = f"a workload rate up to {fitting:.3g} msgs/s per sender fits"
    return Fit(idle, busy, cores, False, advice)


def describe(rates: Rates, cost: Cost | None) -> list[str]:
    """The dry run's lines about load."""
    lines = [f"load (simulated): {rates.idle_per_s:,.0f} datagrams/s idle, "
             f"{rates.busy_per_s:,.0f} under the workload ({rates.hosts} hosts, "
             f"{rates.senders} senders at {rates.rate:g} msgs/s)"]
    if cost is None:
        lines.append("CPU: not estimated; `testbed doctor --measure` measures this machine's "
                     "cost per datagram once")
        return lines
    f = fit(rates, cost)
    lines.append(f"CPU: {f.idle_cores:.2f} cores idle, {f.busy_cores:.2f} under the workload, "
                 f"of {f.cores} ({cost.cpu_s_per_datagram * 1e6:.0f} µs per datagram, measured "
                 f"{cost.measured_at}; a floor on mininet and docker, whose shapers add to it)")
    lines.append(f"fits this machine (under {FIT:.0%} of its cores)" if f.fits else
                 f"will not fit this machine (over {FIT:.0%} of its cores): {f.advice}")
    return lines
