"""One experiment run, end to end (docs/architecture.md "Data flow"):
spec -> run directory -> backend up/deploy -> workload -> drain -> collect -> down -> analysis
-> expectations -> exit code."""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from rich.console import Console

from testbed.backends import Backend, make_backend
from testbed.cpuload import CpuSampler
from testbed.drain import DrainWatch, mark_cut_short
from testbed.faults.nemesis import Nemesis
from testbed.faults.schedule import restarted_up
from testbed.pathcheck import lock_paths, sites_of, write_paths_csv
from testbed.rundir import RunDir
from testbed.runplan import RunPlan
from testbed.runview import RunCounts, RunView, counts_text, fault_text
from testbed.spec.experiment import ExperimentSpec
from testbed.spec.topology import PathMatrix, TopologySpec
from testbed.teardown import teardown

if TYPE_CHECKING:
    from analysis.record import RunRecord


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


def write_lock(run: RunDir, exp: ExperimentSpec, topo: TopologySpec, paths: PathMatrix,
               command: str | None = None) -> None:
    lock: dict[str, Any] = {
        "run_id": run.run_id,
        "experiment": exp.model_dump(mode="json", by_alias=True,
                                     exclude={"topology"}),
        "topology": topo.model_dump(mode="json", by_alias=True, exclude_none=True),
        # by site pair (every host pair's path, without one entry each: testbed/pathcheck.py)
        "paths_by_site_ms": lock_paths(paths, sites_of(topo)),
        "seed": exp.seed,
        "versions": versions(),
        **({"command": command} if command else {}),  # what reproduces the run (its report)
    }
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's when PyYAML has it
    (run.path / "spec.lock.yaml").write_text(yaml.dump(lock, Dumper=dumper, sort_keys=False))
    write_paths_csv(run.path, paths, sites_of(topo))  # the console may show it per site pair


def run_experiment(exp: ExperimentSpec, topo: TopologySpec, out: Path, console: Console,
                   master: str | None = None, analyze: bool = True,
                   inventory: Path | None = None,
                   on_start: Callable[[RunDir], None] | None = None,
                   command: str | None = None, engine: str = "spark") -> RunResult:
    """Run `exp` on `topo` under `out`, then judge it with `engine` unless told not to
    (`begin` in the journal says which, for the live view); `on_start` is told the run
    directory once its lock and journal exist; `command` (the command line that reproduces
    the run) goes to the lock."""
    plan = RunPlan.build(exp, topo)
    run = RunDir.create(out, exp.name)
    write_lock(run, exp, topo, plan.paths, command)
    run.journal.append("begin", experiment=exp.name, backend=exp.backend, analyze=analyze)
    console.print(f"run directory [bold]{run.path}[/]", soft_wrap=True)
    if on_start is not None:
        on_start(run)
    options: dict[str, Any] = {"seed": exp.seed}
    if plan.capabilities.capture:
        from testbed.capture import CaptureOptions

        # Backends with real interfaces capture unless the spec says `pcap: false`.
        wanted = exp.capture.pcap if "pcap" in exp.capture.model_fields_set else True
        options["capture"] = CaptureOptions(exp.capture.snaplen, exp.capture.rotate_mb,
                                            exp.capture.rotate_s) if wanted else None
    if exp.backend == "remote":  # --inventory, else the spec's (docs/remote.md)
        options["inventory"] = inventory or exp.inventory
    backend = make_backend(exp.backend, run, topo, plan.paths, **options)
    # The engine starts up while a simulated run runs; never beside real-time nodes, whose
    # emulated WAN a starting JVM would slow (docs/architecture.md "Emulation fidelity").
    if analyze and not exp.maelstrom and plan.capabilities.virtual_clock:
        from analysis.engine import prepare

        prepare(engine, run.path.name, expected_events(exp, plan.hosts), master)
    try:
        cut = _execute(plan, run, backend, console)
        backend.collect()
    finally:
        backend.down()
        teardown(run)
    if not analyze:  # not judged; a run cut short still fails (the verdict would say so)
        return RunResult(run, {}, [f"cut short: {cut}"] if cut else [])
    from analysis.record import read_record

    return analyze_run(read_record(run.path), exp.expect, console, master, engine)


def expected_events(exp: ExperimentSpec, hosts: list[str]) -> int:
    """About how many events the run's delivery logs will hold: each message's send, and its
    optimistic and final delivery at every host."""
    w = exp.workload
    senders = len(hosts) if w.senders == "all" else len(w.senders)
    return int(senders * w.msgs_per_s * exp.duration / 1e9 * (1 + 2 * len(hosts)))


def start_nodes(plan: RunPlan, run: RunDir, backend: Backend,
                workload: bool = True) -> tuple[RunPlan, Nemesis | None]:
    """The part of a run before its workload: the backend's `up()`, the plan as realised
    (written to plan.json), the fault timeline handed to whoever times it, the nodes deployed.
    `testbed up` is this with `workload=False` (nodes idle from now on, no workload); a run
    then watches the nodes until they end (`run_experiment`)."""
    realised = backend.up()
    # A backend whose start takes longer (remote: a playbook) says how long.
    start = (plan.start_time(time.time_ns(), backend.startup_ns) if workload
             else time.time_ns())
    # the shaping as applied (docker renumbers)
    plan = plan.realise(run, realised, start, duration_ns=None if workload else 0)
    plan.write(run)
    # Fault timing: the simulator applies the timeline in virtual time; on the wall clock the
    # nemesis thread walks it from the workload's start and applies each primitive through
    # the backend's controls (backend.fault), recording faults.jsonl.
    nemesis = None
    if backend.capabilities.virtual_clock:
        backend.schedule_faults(plan.actions, start)
    elif plan.actions:
        end = start + cap_ns(plan.experiment) if workload else None
        nemesis = Nemesis(plan.actions, start, run.path / "faults.jsonl", backend.fault,
                          end_ns=end)
    backend.wall_limit_s = wall_limit_s(cap_ns(plan.experiment) / 1e9, backend.startup_ns,
                                        len(plan.hosts), backend.capabilities.virtual_clock)
    backend.deploy(plan.configs)
    # On the wall clock only: a simulator's start is a virtual instant (decades ago).
    late = 0.0 if backend.capabilities.virtual_clock else (time.time_ns() - start) / 1e9
    if workload and late > 0:
        # Printed by `testbed run`; the nodes' event logs show who joined when.
        print(f"warning: the nodes were up {late:.1f} s after the workload's start "
              f"({len(plan.configs)} nodes; the start left {backend.startup_ns / 1e9:.1f} s)",
              flush=True)
    if nemesis is not None:
        if late > 0 and plan.experiment.maelstrom:
            # Maelstrom's nemesis counts from the workload's start, which the agents take
            # once their programs are up (nodes/agent.py `_window`): late nodes move both.
            nemesis.start_at_ns += int(late * 1e9)
        nemesis.start()
    return plan, nemesis


def _execute(plan: RunPlan, run: RunDir, backend: Backend, console: Console) -> str | None:
    """Start the nodes and watch them until they end; why the run was cut short, if it was."""
    console.print(f"bring-up: {len(plan.hosts)} {backend.name} hosts", highlight=False)
    plan, nemesis = start_nodes(plan, run, backend)
    try:
        cut, stats = _watch(plan, run, backend, console, plan.start_at_ns)
    finally:
        # Before the caller collects and tears down: no fault acts on a backend going away.
        if nemesis is not None:
            nemesis.stop()
    if nemesis is not None:
        for problem in nemesis.errors:
            console.print(f"[yellow]fault failed:[/] {problem}")
        for note in nemesis.notes:
            console.print(f"[yellow]fault:[/] {note}")
        for skipped in nemesis.skipped:  # faults.skipped.jsonl
            console.print(f"[yellow]fault not applied:[/] {skipped}")
    if stats:  # none from a simulator that was stopped
        console.print(f"simulated {stats.get('virtual_s', 0):.1f} s: "
                      f"{stats.get('events', 0)} events at {stats.get('events_per_s', 0)}/s")
    return cut


def cap_ns(exp: ExperimentSpec) -> int:
    """The nodes' cap after the workload's start: the workload and the longest drain."""
    return exp.duration + max(exp.drain, exp.drain_max)


# The simulator's wall time is its work, not the virtual time it covers: at ten hosts it runs
# faster than real time, and the events of a virtual second grow with the hosts (every
# datagram of a multicast is one event at each of the others). Its limit scales with them.
SIM_HOSTS_AT_REAL_TIME = 10
#: what the wall limit leaves beyond the run's own time
WALL_SLACK_S = 30.0
#: how long past the wall limit the runner waits for a simulator to stop itself
SIM_BACKSTOP_S = 10.0


def wall_limit_s(cap_s: float, startup_ns: int, hosts: int, virtual: bool) -> float:
    """How long the nodes may take, wall clock, before the run is cut short: the run's longest
    duration (workload and the longest drain, `cap_s`) and start-up, plus WALL_SLACK_S; on a
    virtual clock the simulated part scaled by hosts / SIM_HOSTS_AT_REAL_TIME (at least 1)."""
    scale = max(1.0, hosts / SIM_HOSTS_AT_REAL_TIME) if virtual else 1.0
    return cap_s * scale + startup_ns / 1e9 + WALL_SLACK_S


def _watch(plan: RunPlan, run: RunDir, backend: Backend, console: Console,
           start: int) -> tuple[str | None, dict[str, Any]]:
    """Until every node has exited: the phases, counts and faults (testbed/runview.py), and
    on the wall clock the drain watch. Past the
    wall limit (`backend.wall_limit_s`, set by `start_nodes`) the nodes are stopped, on every
    backend, and the run is cut short: drain.json says so (`cut_short`), its verdict is not ok
    and says why. Returns that reason (None: not cut short) and the backend's statistics
    (`Backend.stats`). What the nodes logged is judged all the same, never no verdict."""
    exp, virtual = plan.experiment, backend.capabilities.virtual_clock
    # Real nodes are watched during the drain and stopped once quiescent; the simulator does
    # the same in virtual time and writes drain.json itself.
    watch = None if virtual else DrainWatch(run, plan.hosts, plan.correct,
                                            start + exp.duration, exp.drain, exp.drain_max,
                                            restarted_up(plan.hosts, plan.actions))
    limit_s = backend.wall_limit_s
    # The simulator stops itself before the limit (testbed/backends/sim.py); stopping it from
    # here is the backstop, for one that does not.
    stop_s = limit_s + (SIM_BACKSTOP_S if virtual else 0.0)
    cut = None
    counts = RunCounts(run, plan.hosts, backend.capabilities.management)
    # the machine's CPU on the wall clock (cpu.jsonl, analysis/fidelity.py)
    cpu = None if virtual else CpuSampler(run.path)
    with RunView(console, f"{exp.backend}: {exp.name}") as view:
        began = time.monotonic()
        while not backend.wait(timeout_s=0.25):
            elapsed = time.monotonic() - began
            counts.poll()
            if cpu is not None:
                cpu.poll(time.time_ns())
            if watch is not None and watch.due(time.time_ns()):
                watch.poll()
            _show(view, counts, plan, None if virtual else time.time_ns(), start, watch)
            if elapsed > stop_s:
                # Starved nodes miss their own cap; a simulator slower than its limit (or in an
                # event storm) has not reached its end.
                cut = f"the nodes had not finished {limit_s:.0f} s (wall clock) after their deploy"
                if virtual:  # killed mid-run: no consistent cut of the nodes' logs
                    cut += ("; the simulator was stopped mid-run, each node's log ends at its "
                            "last write (a delivery whose send was not yet written reads as "
                            "an integrity violation)")
                else:
                    cut += "; the nodes were stopped"
                view.print(f"cut short: {cut}", style="yellow")
                backend.collect()
                break
        counts.poll(force=True)
        _show(view, counts, plan, None if virtual else time.time_ns(), start, watch)
        view.event(f"nodes done: {counts_text(counts.sent, counts.delivered)}")
    stats = backend.stats() if virtual else {}
    stopped = stats.get("cut_short") if cut is None else None
    if stopped:
        cut = (f"the nodes had not finished {limit_s:.0f} s (wall clock) after their deploy; "
               f"the simulator stopped every node at one instant ({stopped}), their logs "
               "complete up to it")
        console.print(f"[yellow]cut short: {cut}[/]")
    if watch is not None:
        watch.write(cut_short=cut)
    elif cut is not None:
        mark_cut_short(run, cut, plan.correct, exp.drain, exp.drain_max)
    return cut, stats


def _show(view: RunView, counts: RunCounts, plan: RunPlan, now_ns: int | None, start: int,
          watch: DrainWatch | None) -> None:
    """The run's phase, the faults recorded since the last look, the counts: on the wall clock
    by `now_ns`, on the simulator's (`now_ns` None) by the latest time its nodes logged."""
    exp = plan.experiment
    now = now_ns if now_ns is not None else counts.reached_ns
    end = start + exp.duration
    drain = (f"until every message is delivered everywhere, {exp.drain / 1e9:g} to "
             f"{max(exp.drain, exp.drain_max) / 1e9:g} s")
    faults = counts.faults()  # each at or after the workload's start
    if faults or (now is not None and now >= start):
        view.phase("workload", f"{exp.duration / 1e9:g} s of {exp.workload.msgs_per_s:g} "
                   "msgs/s per sender")
    for rec in faults:
        if int(rec.get("t") or 0) >= end:
            view.phase("drain", drain)
        view.event(fault_text(rec, start, plan.hosts))
    if now is not None and now >= end:
        view.phase("drain", drain)
    text = counts_text(counts.sent, counts.delivered)
    if watch is not None and watch.progress:  # polled once the minimum drain is over
        text += f", {watch.in_flight:,} in flight"
    done_s = max(0.0, (now - start) / 1e9) if now is not None else 0.0
    view.update(done_s, (exp.duration + exp.drain) / 1e9, text)


def analyze_run(record: RunRecord, expect: list[str], console: Console,
                master: str | None = None, engine: str = "spark") -> RunResult:
    """Judge the run record with `engine` (analysis/engine.py `judge`), its `expect` lines
    into the verdict, then write summary.json and report.html. The result fails when the
    verdict is not ok (analysis/verdict.py), whatever failed: every surface reads that one
    verdict."""
    from analysis.engine import judge
    from analysis.report import write_report

    # A Maelstrom program's run is judged in-process (analysis/judge.py, docs/maelstrom.md).
    spark = engine == "spark" and not record.is_maelstrom
    console.print("analysis: " + ("Spark" if spark else "judged in-process"))
    with console.status("analysing with Spark" if spark else "judging"):
        summary = judge(record, engine, expect, master)
        (record.path / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        write_report(record, summary)
    judged = summary["verdict"]
    return RunResult(RunDir.open(record.path), summary,
                     [] if judged["ok"] else list(judged["reasons"]) or ["not ok"])
