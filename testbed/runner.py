"""One experiment run, end to end (docs/architecture.md "Data flow"):
spec -> run directory -> backend up/deploy -> workload -> drain -> collect -> down -> analysis
-> expectations -> exit code."""

from __future__ import annotations

import json
import platform
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from nodes.config import SIM_EPOCH_NS
from testbed.backends import Backend, BackendError, make_backend
from testbed.backends.base import HostAddress
from testbed.backends.sim import SimBackend
from testbed.deploy import node_configs
from testbed.drain import DrainWatch
from testbed.faults.schedule import correct_hosts, expand
from testbed.rundir import RunDir
from testbed.spec.experiment import ExperimentSpec
from testbed.spec.topology import PathMatrix, TopologySpec
from testbed.teardown import teardown

CAPTURING_BACKENDS = ("mininet", "docker", "remote")
# Time for node processes to start, bind and arm timers before the workload begins.
LOCAL_STARTUP_NS = 1_500_000_000
SIM_STARTUP_NS = 500_000_000


@dataclass
class RunResult:
    run: RunDir
    summary: dict[str, Any]
    failures: list[str]

    @property
    def ok(self) -> bool:
        return not self.failures


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("testbed", "pyspark", "pydantic"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def write_lock(run: RunDir, exp: ExperimentSpec, topo: TopologySpec, paths: PathMatrix) -> None:
    lock = {
        "run_id": run.run_id,
        "experiment": exp.model_dump(mode="json", by_alias=True,
                                     exclude={"topology"}),
        "topology": topo.model_dump(mode="json", by_alias=True, exclude_none=True),
        "paths_ms": {f"{a}->{b}": {"delay": p.delay_ns / 1e6, "jitter": p.jitter_ns / 1e6,
                                   "loss": p.loss, "bandwidth_bps": p.bandwidth_bps}
                     for (a, b), p in paths.paths.items()},
        "seed": exp.seed,
        "versions": versions(),
    }
    (run.path / "spec.lock.yaml").write_text(yaml.safe_dump(lock, sort_keys=False))


def run_experiment(exp: ExperimentSpec, topo: TopologySpec, out: Path, console: Console,
                   master: str | None = None, analyze: bool = True,
                   inventory: Path | None = None) -> RunResult:
    paths = topo.paths()
    run = RunDir.create(out, exp.name)
    write_lock(run, exp, topo, paths)
    run.journal.append("begin", experiment=exp.name, backend=exp.backend)
    console.print(f"run directory [bold]{run.path}[/]")
    options: dict[str, Any] = {"seed": exp.seed}
    if exp.backend in CAPTURING_BACKENDS:
        from testbed.capture import CaptureOptions

        # Backends with real interfaces capture unless the spec says `pcap: false`.
        wanted = exp.capture.pcap if "pcap" in exp.capture.model_fields_set else True
        options["capture"] = CaptureOptions(exp.capture.snaplen, exp.capture.rotate_mb,
                                            exp.capture.rotate_s) if wanted else None
    if exp.backend == "remote":  # --inventory, else the spec's (docs/remote.md)
        options["inventory"] = inventory or exp.inventory
    backend = make_backend(exp.backend, run, topo, paths, **options)
    try:
        _execute(exp, topo, paths, run, backend, console)
        backend.collect()
    finally:
        backend.down()
        teardown(run)
    if not analyze:
        return RunResult(run, {}, [])
    return analyze_run(run, exp.expect, console, master)


def security(run: RunDir, exp: ExperimentSpec, addresses: dict[str, HostAddress],
             is_sim: bool = False) -> dict[str, Any]:
    """The run's credentials for node_configs: management token and Basic login, the
    udp-aead key, and for TLS (management or transport) the run's CA and node certificates
    (with the orchestrator's client certificate for mutual TLS)."""
    out: dict[str, Any] = {"mgmt_token": run.token, "mgmt_basic": run.basic_auth}
    if exp.transport == "udp-aead":
        out["transport_key"] = run.transport_key
    if (exp.management.tls or exp.transport == "tls") and not is_sim:
        from testbed.certs import make_run_certs

        made = make_run_certs(run.path, run.run_id,
                              {h: sorted({a.control, a.data}) for h, a in addresses.items()},
                              exp.management.key)
        if exp.management.mutual:  # the client certificate of testbed mgmt and faults
            make_run_certs(run.path, run.run_id, {"orchestrator": []}, exp.management.key)
        out["certs"] = {h: (c.cert_pem, c.key_pem) for h, c in made.items()}
        out["ca_pem"] = (run.path / "certs" / "ca.pem").read_text()
        run.journal.append("certs", hosts=sorted(made), key=exp.management.key)
    return out


def _execute(exp: ExperimentSpec, topo: TopologySpec, paths: PathMatrix, run: RunDir,
             backend: Backend, console: Console) -> None:
    addresses = backend.up()
    is_sim = isinstance(backend, SimBackend)
    # A backend whose start takes longer (remote: a playbook) says how long (`startup_ns`).
    startup_ns = getattr(backend, "startup_ns", LOCAL_STARTUP_NS)
    start = SIM_EPOCH_NS + SIM_STARTUP_NS if is_sim else time.time_ns() + startup_ns
    configs = node_configs(exp, topo, paths, addresses, run.path, start,
                           backend.inprocess_shaping, control_port=None if is_sim else 0,
                           **security(run, exp, addresses, is_sim))
    actions = expand(exp.faults, paths.hosts, exp.duration, exp.seed)
    backend.schedule_faults(actions, start)
    backend.deploy(configs)
    backend.start_faults()
    # Real nodes are watched during the drain and stopped once quiescent; the simulator does
    # the same in virtual time and writes drain.json itself.
    watch = None if is_sim else DrainWatch(run, paths.hosts, correct_hosts(paths.hosts, actions),
                                           start + exp.duration, exp.drain, exp.drain_max)
    cap_s = (exp.duration + max(exp.drain, exp.drain_max)) / 1e9
    total_s = (exp.duration + exp.drain) / 1e9 + (0 if is_sim else startup_ns / 1e9)
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeRemainingColumn(),
                  console=console, transient=True) as progress:
        label = f"{exp.backend}: {exp.name}"
        task = progress.add_task(label, total=total_s)
        began = time.monotonic()
        while not backend.wait(timeout_s=0.25):
            elapsed = time.monotonic() - began
            progress.update(task, completed=min(elapsed, total_s))
            if watch is not None and watch.due(time.time_ns()) and not watch.poll():
                progress.update(task, description=f"{label}: draining, {watch.in_flight} "
                                                  "messages in flight")
            if elapsed > cap_s + startup_ns / 1e9 + 30:
                raise BackendError(f"nodes did not finish within {cap_s + 30:.0f} s")
    if watch is not None:
        watch.write()
    for problem in backend.stop_faults():
        console.print(f"[yellow]fault not applied:[/] {problem}")
    if is_sim:
        stats = backend.stats()  # type: ignore[attr-defined]
        console.print(f"simulated {stats.get('virtual_s', 0):.1f} s: "
                      f"{stats.get('events', 0)} events at {stats.get('events_per_s', 0)}/s")


def analyze_run(run: RunDir, expect: list[str], console: Console,
                master: str | None = None) -> RunResult:
    from analysis.expect import evaluate, parse_expectation
    from analysis.job import analyze
    from analysis.report import write_report

    with console.status("analysing with Spark"):
        summary = analyze(run.path, master=master)
        results = evaluate([parse_expectation(e) for e in expect], summary)
        summary["expectations"] = [r.as_dict() for r in results]
        (run.path / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        write_report(run.path, summary)
    failures = [f"{r.expectation}: {r.reason}" for r in results if not r.ok]
    errors = summary.get("node_errors", {}).get("total", 0)
    if errors:
        # An exception inside a node is a bug whatever the expectations say (nodes/runtime.py).
        failures.append(f"node errors: {errors} (ev=error in the event logs, tracebacks in "
                        f"nodes/*/node.log)")
    return RunResult(run, summary, failures)
