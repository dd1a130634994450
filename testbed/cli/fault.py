"""`testbed fault`: a fault injected into a running testbed now."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from testbed.backends import BackendError
from testbed.cli.common import RunOpt, RunsOpt, active_run, console, fail
from testbed.rundir import DEFAULT_RUNS

fault_app = typer.Typer(
    help="Inject a fault into a running testbed (`testbed up`), now; `--for` heals it later."
    "\n\nExample: [bold]testbed fault partition --isolate h3 --for 5s[/]",
    no_args_is_help=True)
ForOpt = Annotated[str | None, typer.Option("--for", help="heal after this long, e.g. 5s",
                                            metavar="DURATION")]


def _inject(entry: dict[str, Any], run_name: str | None, runs: Path) -> None:
    from pydantic import TypeAdapter, ValidationError

    from testbed.faults.live import inject
    from testbed.faults.spec import FaultSpec

    try:
        fault = TypeAdapter(FaultSpec).validate_python({"at": "0s", **entry})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"][1:]) or entry["kind"]
        raise fail(f"{where}: {first['msg'].removeprefix('Value error, ')}") from None
    try:
        target = active_run(run_name, runs)
        inject(target, fault, lambda r: console.print(
            f"{r['kind']} {r['phase']} {' '.join(r['hosts'])}: {json.dumps(r['measured'])}",
            highlight=False))
    except (LookupError, BackendError) as exc:
        raise fail(str(exc)) from None


def _timing(for_: str | None) -> dict[str, Any]:
    return {} if for_ is None else {"for": for_}


@fault_app.command("partition")
def fault_partition(
    isolate: Annotated[str | None, typer.Option(help="cut one host off", metavar="HOST")] = None,
    groups: Annotated[str | None, typer.Option(help="sides, e.g. h1,h2/h3,h4",
                                               metavar="GROUPS")] = None,
    shape: Annotated[str | None, typer.Option(
        help="halves, majority, minority, bridge or majorities-ring", metavar="SHAPE")] = None,
    one_way: Annotated[bool, typer.Option(help="cut only traffic from the first group")] = False,
    for_: ForOpt = None, run_name: RunOpt = None, runs: RunsOpt = DEFAULT_RUNS,
) -> None:
    """Partition the data plane. Example: [bold]testbed fault partition --isolate h3 --for 5s[/]"""
    entry: dict[str, Any] = {"kind": "partition", "one_way": one_way, **_timing(for_)}
    if isolate:
        entry["isolate"] = isolate
    if groups:
        entry["groups"] = [g.split(",") for g in groups.split("/")]
    if shape:
        entry["shape"] = shape
    _inject(entry, run_name, runs)


@fault_app.command("heal")
def fault_heal(run_name: RunOpt = None, runs: RunsOpt = DEFAULT_RUNS) -> None:
    """Remove every partition. Example: [bold]testbed fault heal[/]"""
    _inject({"kind": "heal"}, run_name, runs)


def _host_fault(kind: str) -> Any:
    def command(host: Annotated[str, typer.Argument(help="host name", metavar="HOST")],
                run_name: RunOpt = None, runs: RunsOpt = DEFAULT_RUNS) -> None:
        _inject({"kind": kind, "host": host}, run_name, runs)

    command.__doc__ = {"crash": "Kill a node (SIGKILL).", "restart": "Start a crashed node "
                       "again as a new incarnation.", "pause": "Freeze a node (SIGSTOP).",
                       "resume": "Thaw a paused node."}[kind] + \
        f" Example: [bold]testbed fault {kind} h2[/]"
    return command


for _kind in ("crash", "restart", "pause", "resume"):
    fault_app.command(_kind)(_host_fault(_kind))


@fault_app.command("link")
def fault_link(
    a: Annotated[str, typer.Argument(help="one host", metavar="HOST_A")],
    b: Annotated[str, typer.Argument(help="the other host", metavar="HOST_B")],
    delay: Annotated[str | None, typer.Option(help="new one-way delay, e.g. 80ms",
                                              metavar="DELAY")] = None,
    jitter: Annotated[str | None, typer.Option(help="new jitter", metavar="JITTER")] = None,
    loss: Annotated[str | None, typer.Option(help="new loss, e.g. 5%", metavar="LOSS")] = None,
    for_: ForOpt = None, run_name: RunOpt = None, runs: RunsOpt = DEFAULT_RUNS,
) -> None:
    """Change the path between two hosts (both directions).
    Example: [bold]testbed fault link h1 h3 --delay 80ms --for 10s[/]"""
    entry: dict[str, Any] = {"kind": "link", "between": [a, b], **_timing(for_)}
    for key, value in (("delay", delay), ("path_jitter", jitter), ("loss", loss)):
        if value is not None:
            entry[key] = value
    _inject(entry, run_name, runs)


@fault_app.command("clock")
def fault_clock(
    host: Annotated[str, typer.Argument(help="host name", metavar="HOST")],
    jump: Annotated[str | None, typer.Option(help="step the clock, e.g. 50ms or -20ms",
                                             metavar="DURATION")] = None,
    offset: Annotated[str | None, typer.Option(help="set the offset", metavar="DURATION")] = None,
    drift: Annotated[str | None, typer.Option(help="set the drift, e.g. 50ppm",
                                              metavar="PPM")] = None,
    run_name: RunOpt = None, runs: RunsOpt = DEFAULT_RUNS,
) -> None:
    """Change a node's clock. Example: [bold]testbed fault clock h2 --jump 50ms[/]"""
    entry: dict[str, Any] = {"kind": "clock", "host": host}
    for key, value in (("jump", jump), ("offset", offset), ("drift", drift)):
        if value is not None:
            entry[key] = value
    _inject(entry, run_name, runs)


