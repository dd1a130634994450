"""`testbed doctor`: what this machine can do."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from testbed.cli.common import console, fail


def doctor(
    measure: Annotated[bool, typer.Option(
        "--measure", help="also measure this machine's CPU per datagram with real nodes "
        "(local backend, about half a minute) for `testbed run --dry-run`'s load estimate")] = (
        False),
) -> None:
    """Say what this machine can do and how to fix what is missing.

    Examples: [bold]testbed doctor[/], [bold]testbed doctor --measure[/]
    """
    from testbed.doctor import checks

    table = Table("capability", "status", "enables", "fix")
    for c in checks():
        table.add_row(c.name, "[green]yes[/]" if c.ok else "[red]no[/]", c.enables,
                      "" if c.ok else c.fix)
    console.print(table)
    from testbed.estimate import EstimateError, cache_file, cached_cost, measure_cost

    if measure:
        with console.status("measuring CPU per datagram: two short runs of three local nodes"):
            try:
                cost = measure_cost()
            except EstimateError as exc:
                raise fail(str(exc)) from None
        console.print(f"CPU per datagram: {cost.cpu_s_per_datagram * 1e6:.0f} µs on "
                      f"{cost.machine} (cached in {cache_file()})", highlight=False)
    else:
        cached = cached_cost()
        if cached is not None:
            console.print(f"CPU per datagram: {cached.cpu_s_per_datagram * 1e6:.0f} µs, "
                          f"measured {cached.measured_at} (`testbed doctor --measure` measures "
                          "again)", highlight=False)
