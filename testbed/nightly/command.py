"""`testbed nightly`: run a suite of the catalogue as tonight's night, append it to the
history, judge the history, write nightly.html; exit 1 on a hard failure or an open regression.
Also the nights comparison behind `testbed report NIGHT.parquet NIGHT.parquet`."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from testbed.nightly.catalogue import CATALOGUE_DIR, Entry, load_catalogue
from testbed.spec.loader import SpecError
from testbed.spec.units import parse_duration

if TYPE_CHECKING:
    from testbed.nightly.detect import Judgement

REPO = Path(__file__).resolve().parents[2]
console = Console()
err = Console(stderr=True, soft_wrap=True)


def _fail(message: str) -> typer.Exit:
    err.print(f"[red]error:[/] {message}", highlight=False)
    return typer.Exit(2)


def nightly(
    suite: Annotated[str, typer.Option(help="smoke (sim/local, minutes) or full",
                                       metavar="smoke|full")] = "smoke",
    backends: Annotated[str | None, typer.Option(
        help="only these backends, comma-separated, e.g. sim,local", metavar="BACKENDS")] = None,
    history: Annotated[Path | None, typer.Option(
        help="history folder, one Parquet file per night (default: history/SUITE)")] = None,
    budget: Annotated[str, typer.Option(help="stop starting experiments after this, e.g. 2h",
                                        metavar="DURATION")] = "2h",
    night: Annotated[str | None, typer.Option(
        "--date", help="the night's date, YYYY-MM-DD (default: today, UTC)",
        metavar="YYYY-MM-DD")] = None,
    runs: Annotated[Path, typer.Option(
        help="run directories go to RUNS/SUITE/NIGHT/, the trend report to RUNS/SUITE/")] = (
        Path("runs/nightly")),
    report: Annotated[Path | None, typer.Option(
        help="trend report to write (default: RUNS/SUITE/nightly.html)")] = None,
    catalogue: Annotated[Path, typer.Option(
        help="catalogue folder", show_default="experiments/nightly")] = (
        CATALOGUE_DIR),
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="list what would run or be skipped, run nothing")] = False,
) -> None:
    """Run the nightly catalogue, record it in the history, judge trends, write nightly.html.

    Example: [bold]testbed nightly --suite smoke --history history/smoke --budget 30m[/]
    """
    # pandas and pyarrow load here, not when the CLI starts.
    from testbed.nightly.detect import judge
    from testbed.nightly.history import commit_of, machine_facts, read_history, write_night
    from testbed.nightly.runner import blockers, run_night
    from testbed.nightly.trend import REPORT, write_trend
    from testbed.runner import versions

    if night is None:
        night = datetime.now(UTC).date().isoformat()
    try:
        date.fromisoformat(night)
    except ValueError:
        raise _fail(f"--date must be YYYY-MM-DD, got {night!r}") from None
    try:
        budget_s = parse_duration(budget) / 1e9
    except ValueError as exc:
        raise _fail(f"--budget: {exc}") from None
    try:
        cat = load_catalogue(catalogue)
        wanted = backends.split(",") if backends else None
        entries = cat.suite(suite, wanted)
    except SpecError as exc:
        for line in exc.problems:
            err.print(line, highlight=False, markup=False)
        raise typer.Exit(2) from None
    if not entries:
        raise _fail(f"suite {suite} has no experiment on backends {backends}")
    history = history or Path("history") / suite
    previous = read_history(history)
    others = set(previous["suite"]) - {suite}
    if others:
        raise _fail(f"{history} holds the {', '.join(sorted(others))} suite's nights; give "
                    f"suite {suite} its own --history folder")
    if night in set(previous["night"]):
        console.print(f"[yellow]night {night} is already in {history}; recording another "
                      "attempt (the latest attempt counts)[/]")
    done = previous[previous["status"].isin(["pass", "fail"])]
    estimates = done.groupby("experiment")["wall_s"].median().to_dict() if len(done) else {}
    skip = blockers({e.backend for e in entries})
    if dry_run:
        _print_plan(entries, skip, estimates)
        return
    console.print(f"night {night}: suite {suite}, {len(entries)} experiment(s), budget "
                  f"{budget}, history {history}")
    outcomes = run_night(entries, runs / suite / night, budget_s, console, estimates, skip)
    path = write_night(history, night, suite, outcomes, commit_of(REPO), versions(),
                       machine_facts())
    j = judge(read_history(history), cat.thresholds, cat.index.flaky)
    page = write_trend(j, report or runs / suite / REPORT, f"testbed nightly: {suite}")
    code = summarise(j, night)
    console.print(f"history {path}; trend report {page}")
    raise typer.Exit(code)


def _print_plan(entries: list[Entry], skip: dict[str, str], estimates: dict[str, float]
                ) -> None:
    table = Table()
    # The id is what a user copies into --only: never wrapped or cut, whatever the width.
    table.add_column("experiment", no_wrap=True,
                     min_width=max((len(e.id) for e in entries), default=10))
    for name in ("protocol", "backend", "about", "skipped because"):
        table.add_column(name)
    total = 0.0
    for e in entries:
        guess = estimates.get(e.id, e.estimate_s)
        total += 0 if e.backend in skip else guess
        table.add_row(e.id, e.protocol, e.backend, f"{guess:.0f} s", skip.get(e.backend, ""))
    console.print(table)
    console.print(f"dry run: {sum(e.backend not in skip for e in entries)} to run in about "
                  f"{total / 60:.1f} min; nothing run")


def summarise(j: Judgement, night: str) -> int:
    """Print tonight's verdict; 0 when nothing failed and no regression is open, else 1."""
    failing = j.failures(night)
    for exp in failing:
        tag = " (flaky)" if exp in j.flaky else ""
        err.print(f"[red]failed{tag}:[/] {exp}: {j.reasons.get((night, exp), '')}",
                  highlight=False)
    for exp, k in sorted(j.flaky.items()):
        console.print(f"[magenta]flaky:[/] {exp} ({k} pass/fail flips)", highlight=False)
    opened = j.open_regressions()
    for r in opened:
        err.print(f"[red]regression:[/] {r.experiment} {r.metric} {r.baseline:.4g} -> "
                  f"{r.value:.4g} ({r.change:+.0%}, bad: {r.bad}), first bad night "
                  f"{r.first_night}, commits {r.commits}", highlight=False)
    skipped = sum(1 for (n, _), s in j.status.items() if n == night and s == "skipped")
    passed = sum(1 for (n, _), s in j.status.items() if n == night and s == "pass")
    console.print(f"{night}: {passed} passed, {len(failing)} failed, {skipped} skipped, "
                  f"{len(opened)} open regression(s)")
    return 1 if failing or opened else 0


_NIGHT_FILE = re.compile(r"^\d{4}-\d{2}-\d{2}(\.\d+)?\.parquet$")


def is_night_file(path: Path) -> bool:
    return path.is_file() and _NIGHT_FILE.match(path.name) is not None


def write_nights_comparison(files: list[Path], out: Path) -> Path:
    """`testbed report` over history files: every experiment and metric, one column per night,
    with the change from the first night given (e.g. tonight against last week)."""
    import pandas as pd

    from testbed.nightly.history import read_night

    frames = [read_night(f) for f in files]
    nights = [str(f["night"].iloc[0]) if len(f) else p.stem for f, p in zip(frames, files,
                                                                           strict=True)]
    keys: dict[tuple[str, str], str] = {}
    values: list[dict[tuple[str, str], float | None]] = []
    status: list[dict[str, str]] = []
    for f in frames:
        v: dict[tuple[str, str], float | None] = {}
        for r in f.itertuples():
            if isinstance(r.metric, str):
                keys[(r.experiment, r.metric)] = str(r.bad)
                v[(r.experiment, r.metric)] = None if pd.isna(r.value) else float(r.value)
        values.append(v)
        status.append(dict(zip(f["experiment"], f["status"], strict=False)))
    head = "".join(f"<th>{escape(n)}</th>" for n in nights)
    rows = []
    for exp in sorted({e for s in status for e in s}):
        verdicts = [s.get(exp, "–") for s in status]
        cells = "".join(f"<td>{escape(v)}</td>" for v in verdicts)
        broke = verdicts[0] == "pass" and verdicts[-1] in ("fail", "error")
        note = '<td class="worse">now failing</td>' if broke else "<td></td>"
        rows.append(f"<tr><td>{escape(exp)}</td><td>verdict</td>{cells}{note}</tr>")
        for (e, metric), bad in sorted(keys.items()):
            if e != exp:
                continue
            vs = [v.get((e, metric)) for v in values]
            cells = "".join(f"<td>{'–' if x is None else f'{x:,.4g}'}</td>" for x in vs)
            first, last = vs[0], vs[-1]
            change = ""
            cls = ""
            if first and last is not None:
                rel = (last - first) / abs(first)
                change = f"{rel:+.1%}"
                cls = ' class="worse"' if (rel > 0) == (bad == "up") and rel != 0 else ""
            rows.append(f"<tr><td>{escape(exp)}</td><td><code>{escape(metric)}</code> "
                        f"(bad: {escape(bad)})</td>{cells}<td{cls}>{change}</td></tr>")
    html = ("<!doctype html><html lang=en><head><meta charset=utf-8><title>nights compared"
            "</title><style>body{font-family:system-ui,sans-serif;margin:1.5em}table{"
            "border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ddd;padding:.2em "
            ".5em}td.worse{color:#c62828;font-weight:600}</style></head><body>"
            f"<h1>Nights compared: {escape(' vs '.join(nights))}</h1>"
            f"<table><tr><th>experiment</th><th>metric</th>{head}<th>change</th></tr>"
            + "".join(rows) + "</table></body></html>\n")
    path = out / "comparison.html" if out.is_dir() else out
    path.write_text(html)
    return path
