"""`testbed up`: a topology brought up and left running."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from testbed.backends import BackendError, make_backend
from testbed.cli.common import console, fail, print_paths, spec_errors
from testbed.cli.run import print_shaping_plan
from testbed.pathcheck import (
    CHECK_CSV,
    CHECK_MODES,
    CONSOLE_HOSTS,
    check_pairs,
    check_summary,
    sites_of,
    write_check_csv,
)
from testbed.rundir import DEFAULT_RUNS, RunDir
from testbed.runplan import shaping_plans
from testbed.spec.loader import SpecError, load_topology
from testbed.teardown import teardown


def up(
    topology: Annotated[Path, typer.Argument(help="topology YAML")],
    backend: Annotated[str, typer.Option(help="local (no root) or mininet (root)",
                                         metavar="local|mininet")] = "local",
    protocol: Annotated[str, typer.Option(help="protocol the idle nodes run",
                                          metavar="PROTOCOL")] = "sequencer",
    applier: Annotated[str, typer.Option(help="mininet shaping: auto, netem or userspace",
                                         metavar="auto|netem|userspace")] = "auto",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the plan, change nothing")] = (
        False),
    out: Annotated[Path, typer.Option("--out", help="runs directory")] = DEFAULT_RUNS,
    transport: Annotated[str, typer.Option(help="local: udp, udp-aead or tls",
                                           metavar="udp|udp-aead|tls")] = "udp",
    mgmt_tls: Annotated[bool, typer.Option("--mgmt-tls", help="local: HTTPS management with "
                                           "the run's certificates")] = False,
    check: Annotated[str, typer.Option(
        "--check", help="mininet: the measured-vs-configured RTT check on `sample` (every pair "
        f"up to {CONSOLE_HOSTS} hosts, above a sample covering every site pair and every "
        "host), `all` pairs or `none`; the table goes to check.csv",
        metavar="sample|all|none")] = "sample",
) -> None:
    """Bring a topology up and leave it running (inspect it, then [bold]testbed teardown[/]).

    Examples: [bold]testbed up topologies/two-sites.yaml --dry-run[/],
    [bold]testbed up topologies/two-sites.yaml --transport tls --mgmt-tls[/],
    [bold]sudo testbed up topologies/two-sites.yaml --backend mininet[/],
    [bold]sudo testbed up topologies/regions-100.yaml --backend mininet --check all[/]
    """
    if check not in CHECK_MODES:
        raise fail(f"--check must be {', '.join(CHECK_MODES)}, not {check!r}")
    if check != "sample" and backend != "mininet":
        raise fail("--check applies to the mininet backend only")
    if transport not in ("udp", "udp-aead", "tls"):
        raise fail(f"--transport must be udp, udp-aead or tls, not {transport!r}")
    if backend != "local" and (transport != "udp" or mgmt_tls):
        raise fail("--transport and --mgmt-tls apply to the local backend only")
    try:
        topo = load_topology(topology)
    except SpecError as exc:
        raise spec_errors(exc) from None
    paths = topo.paths()
    print_paths(paths, sites_of(topo))
    if backend not in ("local", "mininet"):
        raise fail(f"`testbed up` keeps hosts running on local or mininet, not {backend}")
    if dry_run:
        if backend == "mininet":
            print_shaping_plan(shaping_plans(topo, paths))
        pinged = (f" and ping {len(check_pairs(paths.hosts, sites_of(topo), check))} pairs "
                  f"(--check {check})" if backend == "mininet" else "")
        console.print(f"dry run: would start {len(paths.hosts)} {backend} hosts{pinged}; "
                      "nothing changed", highlight=False)
        return
    run_dir = RunDir.create(out, topo.name)
    run_dir.journal.append("begin", topology=topo.name, backend=backend, mode="up")
    try:
        _up(run_dir, topo, topology, paths, backend, protocol, applier, transport, mgmt_tls,
            check)
    except BackendError as exc:
        teardown(run_dir)
        raise fail(str(exc)) from None
    except BaseException:  # nothing stays up half made
        teardown(run_dir)
        raise
    console.print(f"run {run_dir.run_id} in {run_dir.path}; stop it with "
                  f"[bold]testbed teardown {run_dir.run_id}[/]")


def _up(run_dir: RunDir, topo: Any, topology: Path, paths: Any, backend: str, protocol: str,
        applier: str = "auto", transport: str = "udp", mgmt_tls: bool = False,
        check: str = "sample") -> None:
    """The runner without a workload (testbed/runner.py `start_nodes`): the backend up, the
    plan as realised in plan.json, idle nodes on every host (so `testbed mgmt` and `testbed
    fault` work on it); on mininet then the measured RTTs beside the configured ones, on the
    pairs `check` names (testbed/pathcheck.py `check_pairs`), into check.csv."""
    from testbed.runner import start_nodes, write_lock
    from testbed.runplan import RunPlan
    from testbed.spec.experiment import ExperimentSpec

    exp = ExperimentSpec.model_validate({
        "name": topo.name, "topology": topology.name, "backend": backend, "duration": "1s",
        "protocol": {"name": protocol}, "workload": {"senders": [], "rate": "1/s"},
        "transport": transport, "management": {"tls": mgmt_tls}})
    write_lock(run_dir, exp, topo, paths)
    plan = RunPlan.build(exp, topo)
    options: dict[str, Any] = {"applier": applier, "capture": None} if backend == "mininet" else {}
    be = make_backend(backend, run_dir, topo, plan.paths, **options)
    plan, _ = start_nodes(plan, run_dir, be, workload=False)
    title = f"{topo.name} is up" + (f" ({backend})" if backend != "local" else "")
    table = Table("host", "data address", "control", title=title)
    for host, addr in plan.addresses.items():
        table.add_row(host, f"{addr.data}:{addr.port}", addr.control)
    console.print(table)
    if backend == "mininet" and check != "none":
        _rtt_check(run_dir, be, sites_of(topo), check)


def _rtt_check(run_dir: RunDir, be: Any, sites: dict[str, str | None], check: str) -> None:
    from testbed.backends.mininet import rtt_report
    from testbed.hosts.base import HostError

    pairs = check_pairs(be.paths.hosts, sites, check)
    try:
        report = rtt_report(be.paths, be.measure_rtt(pairs=pairs))
    except (OSError, subprocess.SubprocessError, HostError) as exc:
        raise BackendError(f"measuring the RTT matrix failed: {exc}") from exc
    write_check_csv(run_dir.path, report, sites)
    print_check(report, len(be.paths.hosts))


def print_check(report: list[dict[str, Any]], hosts: int) -> None:
    """Every checked pair up to CONSOLE_HOSTS hosts' worth of rows, else the summary and the
    worst few (the full table is check.csv)."""
    summary = check_summary(report, hosts)
    rows: Sequence[Mapping[str, Any]] = report
    title = "ping all pairs (flagged: off by more than 10% + 1 ms)"
    if len(report) > CONSOLE_HOSTS * (CONSOLE_HOSTS - 1):
        rows = summary.worst
        title = (f"the {len(rows)} furthest off of {len(report)} checked pairs (flagged: off by "
                 f"more than 10% + 1 ms; all in {CHECK_CSV})")
    rtt = Table("pair", "configured RTT ms", "measured RTT ms", "", title=title)
    for row in rows:
        measured = row["measured_ms"]
        rtt.add_row(f"{row['src']}->{row['dst']}", f"{row['configured_ms']:.2f}",
                    "no reply" if measured is None else f"{measured:.2f}",
                    "[red]OFF[/]" if row["off"] else "ok")
    console.print(rtt)
    console.print(summary.line(), style="red" if summary.flagged else "green", highlight=False)
