"""The runs' resources: `testbed status`, `testbed teardown`, `testbed clean`."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from testbed.cli.common import RunsOpt, console, fail
from testbed.rundir import DEFAULT_RUNS, find_runs, resolve_run
from testbed.teardown import is_active, teardown


def status(runs: RunsOpt = DEFAULT_RUNS) -> None:
    """List runs that still hold resources.

    Example: [bold]testbed status[/]
    """
    from testbed.processes import is_alive

    found = find_runs(runs)
    table = Table()
    # The run id in full, whatever the width: `testbed teardown` takes it.
    table.add_column("run", no_wrap=True, min_width=max((len(r.path.name) for r in found),
                                                         default=3))
    table.add_column("state", no_wrap=True)
    table.add_column("live resources")
    for r in found:
        live = r.journal.live()
        procs = [e for e in live if e.get("kind") == "process"
                 and is_alive(e["pid"], e.get("starttime"))]
        state = "active" if is_active(r) else "finished"
        if state == "active" or procs:
            table.add_row(r.path.name, state, ", ".join(e["id"] for e in procs) or "-")
    console.print(table if table.rows else "no active runs")


def teardown_cmd(
    name: Annotated[str | None, typer.Argument(help="run id or directory; default: all",
                                               metavar="RUN")] = None,
    runs: RunsOpt = DEFAULT_RUNS,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list, remove nothing")] = False,
) -> None:
    """Remove everything a run created, from its journal (safe after a crash, idempotent).

    Example: [bold]testbed teardown 3fa2c1[/]
    """
    try:
        targets = [resolve_run(runs, name)] if name else [r for r in find_runs(runs)
                                                          if is_active(r)]
    except LookupError as exc:
        raise fail(str(exc)) from None
    if dry_run:
        for r in targets:
            live = r.journal.live()
            console.print(f"{r.path.name}: would remove {len(live)} resource(s)")
            for e in reversed(live):
                console.print(f"  {e.get('kind')} {e['id']}", highlight=False)
        return
    for r in targets:
        removed = teardown(r)
        console.print(f"{r.path.name}: removed {len(removed)} resource(s)")
        for line in removed:
            console.print(f"  {line}")
    if not targets:
        console.print("nothing to tear down")


def clean(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list, remove nothing")] = False,
) -> None:
    """Remove leftovers that carry testbed's name prefix (namespaces, links, chains), even
    when no journal is left. Never touches anything else.

    Example: [bold]sudo testbed clean --dry-run[/]
    """
    from testbed.clean import clean as clean_leftovers

    removed = clean_leftovers(dry_run)
    verb = "would remove" if dry_run else "removed"
    console.print(f"{verb} {len(removed)} resource(s)")
    for line in removed:
        console.print(f"  {line}")


