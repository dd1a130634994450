"""After the run: `testbed pcap`, `testbed analyze`, `testbed report`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from testbed.cli.common import (
    console,
    fail,
    print_expectations,
    print_summary,
    print_verdict,
)


def pcap(
    files: Annotated[list[Path], typer.Argument(help="pcap or pcapng files")],
    out: Annotated[Path, typer.Option("--out", help="directory for the Parquet files")] = (
        Path("pcap-parquet")),
) -> None:
    """Turn captures (ours or anyone's) into Parquet: timestamps, addresses, ports, lengths,
    and the testbed wire header where present.

    Example: [bold]testbed pcap runs/*/pcaps/*.pcap --out /tmp/packets[/]
    """
    from analysis.pcap import pcap_to_parquet

    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise fail(f"no such capture file: {', '.join(missing)}")
    stats = pcap_to_parquet(files, out)
    print(json.dumps(stats, indent=2, default=str))


def analyze_cmd(
    run_dir: Annotated[Path, typer.Argument(help="run directory")],
    master: Annotated[str | None, typer.Option(help="Spark master URL", metavar="URL")] = None,
    inventory: Annotated[Path | None, typer.Option(
        "--inventory", help="the hosts `testbed spark up` started Spark on: their executor "
        "Python and shared directory (docs/remote.md); default master: its first host")] = None,
    engine: Annotated[str, typer.Option(
        help="how to judge: spark (checks and measurements) or in-process (the checks, the "
        "liveness and the verdict, no JVM)", metavar="ENGINE")] = "spark",
) -> None:
    """(Re)analyse a run: parquet/, summary.json, report.html; the verdict of its checks and
    its `expect:` lines is the last line (exit 1 when not ok).

    Examples: [bold]testbed analyze runs/20261121T053000Z-quickstart-3fa2c1[/],
    [bold]testbed analyze RUN --master spark://198.19.128.1:7077 --inventory
    lab/latest/inventory.yaml[/]
    """
    from analysis.judge import ENGINES
    from analysis.record import read_record
    from testbed.runner import analyze_run

    if engine not in ENGINES:
        raise fail(f"--engine {engine}: one of {', '.join(ENGINES)}")
    if not (run_dir / "nodes").is_dir():
        raise fail(f"{run_dir} is not a run directory (no nodes/ inside)")
    record = read_record(run_dir)
    exp = record.expect  # the run's `expect:` lines, judged into its verdict
    if inventory is not None:
        from testbed.spark import SparkError, master_url, staged, start_driver

        try:
            master = master or master_url(inventory)
            with staged(run_dir, inventory) as stage:
                start_driver(stage, master, inventory)
                result = analyze_run(read_record(stage), exp, console, master)
        except SparkError as exc:
            raise fail(str(exc)) from None
    else:
        result = analyze_run(record, exp, console, master, engine)
    print_summary(result.summary)
    print_expectations(result.summary)
    print_verdict(result.summary)
    raise typer.Exit(0 if result.ok else 1)


def report(
    runs_: Annotated[list[Path], typer.Argument(
        metavar="RUN...", help="run directories, or nightly history files (NIGHT.parquet)")],
    out: Annotated[Path | None, typer.Option(help="file or directory for a comparison")] = None,
) -> None:
    """Write a run's self-contained HTML report, or compare several runs side by side.

    Examples: [bold]testbed report runs/20261121T060012Z-quickstart-c1712e[/],
    [bold]testbed report runs/*seto* --out /tmp/seto.html[/],
    [bold]testbed report history/smoke/2026-11-16.parquet history/smoke/2026-11-23.parquet[/]
    """
    from analysis.record import read_record
    from analysis.report import write_comparison, write_report
    from testbed.nightly.command import is_night_file, write_nights_comparison

    if runs_ and all(is_night_file(r) for r in runs_):
        console.print(f"wrote {write_nights_comparison(runs_, out or Path('comparison.html'))}")
        return
    for r in runs_:
        if not (r / "nodes").is_dir():
            raise fail(f"{r} is not a run directory (no nodes/ inside)")
    if len(runs_) == 1 and out is None:
        summary_path = runs_[0] / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
        console.print(f"wrote {write_report(read_record(runs_[0]), summary)}")
        return
    records = [read_record(r) for r in runs_]
    console.print(f"wrote {write_comparison(records, out or Path('comparison.html'))}")


