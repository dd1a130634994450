"""`testbed doctor`: what this machine can do."""

from __future__ import annotations

from rich.table import Table

from testbed.cli.common import console


def doctor() -> None:
    """Say what this machine can do and how to fix what is missing.

    Example: [bold]testbed doctor[/]
    """
    from testbed.doctor import checks

    table = Table("capability", "status", "enables", "fix")
    for c in checks():
        table.add_row(c.name, "[green]yes[/]" if c.ok else "[red]no[/]", c.enables,
                      "" if c.ok else c.fix)
    console.print(table)


