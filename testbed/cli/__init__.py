"""The `testbed` command line (README.md "The CLI"): one module per command group, assembled
here in the order `testbed --help` lists them.

Every command is one function with typed parameters and an example in its help (how help
reads: testbed/cli/help.py); user errors are one sentence (`file:line: field: message` for
specs) and exit code 2, never a traceback.
"""

from __future__ import annotations

# ruff: noqa: E402 -- the compiled simulator is activated before the command modules load
import sys

# The compiled simulator (nodes/fastpath.py) loads only before anything imports its modules,
# and the commands below import some of them: activated first, so that `testbed explore`'s
# workers -- spawned processes, which import this module again as the `testbed` script's --
# and a simulation run in this process get it. Quiet: a missing or stale build is the pure
# path, as everywhere.
from nodes.fastpath import activate

activate(quiet=True)

import typer

from testbed.cli import analysis, doctor, explore, mgmt, run, runs, serve, specs, up
from testbed.cli.common import err
from testbed.cli.fault import fault_app
from testbed.cli.help import plain_help
from testbed.cli.image import image_app
from testbed.cli.maelstrom import maelstrom_app
from testbed.cli.topology import topology_app
from testbed.lab import lab_app
from testbed.nightly.command import nightly as nightly_command
from testbed.spark import spark_app

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode="rich",
    help="Emulate a WAN, run a total-order multicast protocol on it, inject faults, and judge "
    "the result.\n\nExample: [bold]testbed run experiments/quickstart.yaml[/]",
)
app.command()(run.run)
app.command()(up.up)
app.command()(explore.explore)
app.command()(runs.status)
app.command(name="teardown")(runs.teardown_cmd)
app.add_typer(image_app, name="image")
app.add_typer(fault_app, name="fault")
app.add_typer(topology_app, name="topology")  # testbed/cli/topology.py: measured WANs
app.command()(analysis.pcap)
app.command()(runs.clean)
app.command(name="analyze")(analysis.analyze_cmd)
app.command()(analysis.report)
app.command()(specs.schema)
app.command()(specs.plan)
app.command()(doctor.doctor)
app.command()(mgmt.certs)
app.command()(mgmt.mgmt)
app.command(name="nightly")(nightly_command)
app.command()(serve.serve)  # testbed/serve.py: runs, nightlies, explorations in the browser
app.add_typer(maelstrom_app, name="maelstrom")  # Maelstrom node programs, docs/maelstrom.md
app.add_typer(lab_app, name="lab")  # testbed/lab.py: SSH hosts for the remote backend
app.add_typer(spark_app, name="spark")  # testbed/spark.py: Spark standalone on those hosts
plain_help(app)

__all__ = ["app", "main"]


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
