"""What every command group shares: the consoles, one-sentence user errors, the run a command
acts on, and the tables `run` and `analyze` print."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from testbed.pathcheck import (
    CONSOLE_HOSTS,
    PATHS_CSV,
    collapses,
    path_cell,
    site_matrix,
    span,
)
from testbed.rundir import RunDir, find_runs, resolve_run
from testbed.spec.loader import SpecError
from testbed.teardown import is_active

console = Console()
err = Console(stderr=True, soft_wrap=True)

RunsOpt = Annotated[Path, typer.Option("--runs", help="where run directories live")]
RunOpt = Annotated[str | None, typer.Option("--run", help="run id; default: newest active",
                                            metavar="RUN")]


def fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[red]error:[/] {message}", highlight=False)
    return typer.Exit(code)


def spec_errors(exc: SpecError) -> typer.Exit:
    for line in exc.problems:
        err.print(line, highlight=False, markup=False)
    return typer.Exit(2)


def active_run(run_name: str | None, runs: Path) -> RunDir:
    """The run a command acts on: the one named, or the newest still active."""
    if run_name:
        return resolve_run(runs, run_name)
    active = [r for r in find_runs(runs) if is_active(r)]
    if not active:
        raise LookupError(f"no active run under {runs}/; start one with testbed up")
    return active[-1]


def cli_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def print_paths(paths: Any, sites: Mapping[str, str | None] | None = None) -> None:
    """The one-way delay matrix: per host up to CONSOLE_HOSTS hosts, above per site pair
    (testbed/pathcheck.py `site_matrix`; the full table is the run directory's paths.csv)."""
    if collapses(paths.hosts):
        grouped = site_matrix(paths, sites or {})
        if len(grouped.sites) > CONSOLE_HOSTS:  # no sites to group by: the ranges only
            delays = [p.delay_ns / 1e6 for p in paths.paths.values()]
            console.print(f"one-way delays of {len(paths.hosts)} hosts: "
                          f"{span(min(delays), max(delays), ' ms')}, jitter "
                          f"{span(*grouped.jitter_ms, ' ms')}, loss "
                          f"{span(*grouped.loss, '%', 100)} (every pair in {PATHS_CSV} of the "
                          "run)", highlight=False)
            return
        console.print(f"one-way delay (ms) per site pair, {len(paths.hosts)} hosts in "
                      f"{len(grouped.sites)} sites: row sends to column; a..b: the site "
                      "pair's host pairs differ", highlight=False)
        short = [site[:5] for site in grouped.sites]  # the columns: the sites' first letters
        if len(set(short)) < len(short):
            short = [str(i) for i, _ in enumerate(grouped.sites, 1)]
        table = Table(box=box.SIMPLE_HEAD, padding=0, pad_edge=False, show_edge=False)
        table.add_column("from \\ to", no_wrap=True)
        table.add_column("hosts", justify="right", no_wrap=True)
        for name in short:
            table.add_column(name, justify="right", no_wrap=True)
        for a, name in zip(grouped.sites, short, strict=True):
            label = a if name == a[:5] else f"{name} {a}"
            table.add_row(label, str(grouped.counts[a]),
                          *(grouped.cells.get((a, b), "-") for b in grouped.sites))
        console.print(table)
        console.print(f"jitter {span(*grouped.jitter_ms, ' ms')}, loss "
                      f"{span(*grouped.loss, '%', 100)}; every pair in {PATHS_CSV} of the run",
                      highlight=False)
        return
    table = Table(title="one-way delay matrix (ms): row sends to column")
    table.add_column("from \\ to")
    for h in paths.hosts:
        table.add_column(h, justify="right")
    for a in paths.hosts:
        table.add_row(a, *("-" if a == b else path_cell(paths.get(a, b)) for b in paths.hosts))
    console.print(table)


def print_verdict(summary: dict[str, Any]) -> None:
    """The console's last line after an analysis: `verdict.ok` and why (analysis/verdict.py)."""
    from analysis.verdict import verdict_line

    ok = (summary.get("verdict") or {}).get("ok")
    console.print(verdict_line(summary), style="green" if ok else "red", highlight=False,
                  soft_wrap=True)  # one line, whatever the terminal width: scripts read it


def print_expectations(summary: dict[str, Any]) -> None:
    """Each failed `expect:` line with why, or that all hold (the verdict names the failed)."""
    results = summary.get("expectations") or []
    failed = [r for r in results if not r.get("ok")]
    for r in failed:
        err.print(f"[red]expectation failed:[/] {r.get('expectation')}: {r.get('reason')}",
                  highlight=False)
    if results and not failed:
        n = len(results)
        console.print("[green]" + (f"all {n} expectations hold" if n > 1
                                   else "the expectation holds") + "[/]")


def print_summary(summary: dict[str, Any]) -> None:
    checks = summary.get("checks", {})
    # The run id on a line of its own: a table title wraps to the table's width.
    console.print(f"run {summary.get('run', '')}", highlight=False, soft_wrap=True)
    table = Table("check", "violations")
    for name, res in checks.items():
        v = res.get("violations", 0)
        # a check the run could not judge has no count (its note says why)
        shown = "not judged" if res.get("judged") is False else str(v)
        if not res.get("claimed", True):  # not promised by the protocol: greyed out
            table.add_row(f"[grey50]{name} (not claimed)[/]", f"[grey50]{shown}[/]")
            continue
        if res.get("judged") is False:
            why = str(res.get("note") or "").removeprefix("not judged: ")
            table.add_row(name, f"[yellow]{shown}[/]" + (f" ({escape(why)})" if why else ""))
            continue
        table.add_row(name, f"[green]{v}[/]" if v == 0 else f"[red]{v}[/]")
    console.print(table)
    from analysis.liveness import liveness_line

    line = liveness_line(summary)
    if line:
        console.print(f"[yellow]{line}[/]")
    from analysis.qos import qos_line

    if qos_line(summary):
        console.print(qos_line(summary), highlight=False)
    errors = summary.get("node_errors", {}).get("total", 0)
    if errors:
        console.print(f"[red]node errors: {errors}[/] (ev=error; tracebacks in node.log)")
    refused = {h: t for h, t in summary.get("transport", {}).items()
               if t.get("malformed") or t.get("rejected")}
    for host, t in sorted(refused.items()):
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(t.get("drops", {}).items()))
        console.print(f"{host} refused {t['malformed'] + t['rejected']} datagram(s): {reasons}",
                      highlight=False)
    lat = summary.get("latency", {}).get("fnl", {})
    per = lat.get("per_receiver", {})
    if per:
        t = Table("receiver", "p50 ms", "p95 ms", "p99 ms", "max ms", "msgs/s",
                  title="final-delivery latency")
        thr = summary.get("throughput", {}).get("per_node", {})
        for node, q in sorted(per.items()):
            t.add_row(node, *(f"{q.get(k, float('nan')):.2f}" for k in
                              ("p50_ms", "p95_ms", "p99_ms", "max_ms")),
                      f"{thr.get(node, 0):.0f}")
        console.print(t)
    acc = summary.get("optimistic", {}).get("accuracy", {}).get("per_node", {})
    if acc:
        window = summary["optimistic"].get("window", {}).get("per_node", {})
        o = Table("node", "opt accuracy", "window p50 ms", title="optimistic delivery")
        for node, a in sorted(acc.items()):
            w = window.get(node, {}).get("p50_ms")
            o.add_row(node, f"{a['accuracy']:.3f}", "-" if w is None else f"{w:.2f}")
        console.print(o)


