"""`testbed explore`: seeded fault schedules on the simulator, judged by the protocol's
claims, failures shrunk to reproducers (docs/explore.md)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from testbed.cli.common import console, err, fail, spec_errors
from testbed.spec.loader import SpecError


def explore(
    experiment: Annotated[Path | None, typer.Argument(help="experiment YAML")] = None,
    seeds: Annotated[int | None, typer.Option(help="how many seeds (default 100)")] = None,
    budget: Annotated[str | None, typer.Option(help="or: seeds for this long, e.g. 1h",
                                               metavar="DURATION")] = None,
    first_seed: Annotated[int, typer.Option(help="the first seed")] = 0,
    workers: Annotated[int, typer.Option(help="worker processes; 0: one per core",
                                         metavar="N")] = 0,
    master: Annotated[str | None, typer.Option(help="run seeds as Spark tasks on this "
                                               "master, e.g. spark://h:7077",
                                               metavar="URL")] = None,
    check: Annotated[list[str] | None, typer.Option(
        "--check", help="also judge this check when the protocol does not claim it "
        "(repeatable)", metavar="CHECK")] = None,
    protocol: Annotated[str | None, typer.Option(help="explore this protocol instead of the "
                                                 "spec's (its params are dropped)",
                                                 metavar="PROTOCOL")] = None,
    duration: Annotated[str | None, typer.Option(help="override the spec's duration, "
                                                 "e.g. 10s", metavar="DURATION")] = None,
    backend: Annotated[str | None, typer.Option(help="sim only", metavar="sim")] = None,
    shrink: Annotated[int, typer.Option(help="failing seeds to shrink (distinct failures "
                                        "first)")] = 5,
    out: Annotated[Path | None, typer.Option(help="output directory (default "
                                             "runs/explore/<UTC time>-<name>/)")] = None,
    replay: Annotated[Path | None, typer.Option(help="re-run a reproducer and compare its "
                                                "delivery logs with the recorded digests")
                      ] = None,
) -> None:
    """Search fault schedules on the simulator; shrink each failure to a minimal reproducer.

    Each seed draws partitions, crashes, pauses, clock and link faults, runs, and is judged
    by the protocol's claims.

    Example: [bold]testbed explore experiments/quickstart.yaml --seeds 300 --protocol
    reliable-nack --check total_order[/]
    """
    if backend is not None and backend != "sim":
        raise fail(f"testbed explore runs on the sim backend only, not {backend}")
    if replay is not None:
        raise typer.Exit(_replay(replay, out))
    if experiment is None:
        raise fail("give an experiment YAML (or --replay FILE)")
    if seeds is not None and budget is not None:
        raise fail("give --seeds or --budget, not both")
    if master is not None and budget is not None:
        raise fail("--master runs a fixed number of seeds: give --seeds, not --budget")
    budget_s = None
    if budget is not None:
        from testbed.spec.units import parse_duration

        try:
            budget_s = parse_duration(budget) / 1e9
        except ValueError as exc:
            raise fail(f"--budget: {exc}") from None
    check_overrides(protocol, duration)
    from testbed.explore.case import Base, InvalidCase, load_base

    checks = tuple(check or ())
    try:
        base = load_base(experiment, checks)
        if protocol is not None or duration is not None:
            data = dict(base.data)
            if protocol is not None:
                data["protocol"] = {"name": protocol}
            if duration is not None:
                data["duration"] = duration
            base = Base.from_data(data, checks)
    except SpecError as exc:
        raise spec_errors(exc) from None
    except InvalidCase as exc:
        raise fail(f"{experiment}: {exc}") from None
    try:
        import analysis.judge  # noqa: F401
    except ImportError as exc:
        raise fail(f"the in-process judge is missing ({exc})") from None
    from testbed.explore.session import Options
    from testbed.explore.session import explore as run_session

    if out is None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        out = Path("runs") / "explore" / f"{stamp}-{base.exp.name}"
    opts = Options(seeds=seeds if seeds is not None or budget_s is not None else 100,
                   budget_s=budget_s, first_seed=first_seed,
                   workers=workers or os.cpu_count() or 1, master=master, shrink=shrink,
                   source=str(experiment))
    if budget_s is not None:
        opts.seeds = None

    def known_checks(row: dict[str, object]) -> None:
        names = row.get("checks")
        if isinstance(names, list) and names:
            unknown = [c for c in checks if c not in names]
            if unknown:
                raise fail(f"--check {unknown[0]}: no such check; known: {', '.join(names)}")

    existed = out.exists()
    try:
        outcome = run_session(base, opts, out, console, on_row=known_checks)
    except typer.Exit:  # an unknown --check: nothing left behind
        if not existed:
            import shutil

            shutil.rmtree(out, ignore_errors=True)
        raise
    failing = outcome.failures
    rate = len(outcome.rows) / max(outcome.explore_s, 1e-9)
    console.print(f"{len(outcome.rows)} seeds in {outcome.explore_s:.1f} s ({rate:.1f} seeds/s, "
                  f"{rate * 3600:,.0f} schedules/hour): "
                  + (f"[red]{len(failing)} failing[/]" if failing else "[green]no failure[/]"))
    pure = sum(1 for row in outcome.rows if row.get("compiled") is False)
    if pure:
        console.print(f"[yellow]{pure} of them on the pure-Python simulator[/]: `python -m "
                      "nodes.fastpath build` (or `make venv`) compiles it")
    for seed, s in sorted(outcome.shrunk.items()):
        items = s["case"]["items"]
        console.print(f"seed {seed}: {', '.join(s['target'])}; shrunk from {s['from_items']} to "
                      f"{len(items)} fault item(s) in {s['runs']} runs -> "
                      f"{out / 'reproducers' / f'seed-{seed}.yaml'}", highlight=False)
    console.print(f"results in {out} (seeds.parquet, index.html)")
    raise typer.Exit(1 if failing else 0)


def check_overrides(protocol: str | None, duration: str | None) -> None:
    """--protocol and --duration are the flags' errors, not the spec's."""
    import difflib

    from nodes.protocols import catalogue
    from testbed.spec.units import parse_duration

    if protocol is not None and catalogue.find(protocol) is None:
        close = difflib.get_close_matches(protocol, catalogue.names(), n=1)
        raise fail(f"--protocol: unknown protocol {protocol!r}"
                   + (f" (did you mean {close[0]!r}?)" if close else
                      f"; known: {', '.join(catalogue.names())}"))
    if duration is not None:
        try:
            parse_duration(duration)
        except ValueError as exc:
            raise fail(f"--duration: {exc}") from None


def _replay(path: Path, out: Path | None) -> int:
    import shutil

    from testbed.explore.case import (
        LIVELOCK,
        digests,
        failing_checks,
        judge,
        recorded_budget,
        recorded_digests,
        simulate,
    )
    from testbed.explore.pool import temp_root
    from testbed.spec.loader import load_experiment

    try:
        exp, topo = load_experiment(path, "sim")
    except SpecError as exc:
        raise spec_errors(exc) from None
    text = path.read_text()
    recorded = recorded_digests(text)
    root = temp_root() if out is None else out
    root.mkdir(parents=True, exist_ok=True)
    try:
        run_dir, stats = simulate(exp, topo, root, max_events=recorded_budget(text))
        summary = {} if LIVELOCK in stats else judge(run_dir)
        got = digests(run_dir)
    finally:
        if out is None:
            shutil.rmtree(root, ignore_errors=True)
    if LIVELOCK in stats:
        stop = stats[LIVELOCK]
        failing = [LIVELOCK]
        console.print(f"{LIVELOCK}: {stop['reason']} at virtual time {stop['virtual_s']:.3f} s",
                      highlight=False)
    else:
        extra = tuple(c for c in (summary.get("checks") or {}) if f"checks.{c}.violations" in
                      " ".join(exp.expect))
        failing = failing_checks(summary, extra)
    console.print(f"failing: {', '.join(failing) or 'none'}", highlight=False)
    if not recorded:
        err.print(f"{path} records no digests (# sha256 lines); nothing to compare")
        return 1
    same = got == recorded
    for host in sorted(set(got) | set(recorded)):
        mark = "identical" if got.get(host) == recorded.get(host) else "DIFFERENT"
        console.print(f"nodes/{host}/events.jsonl {mark} {got.get(host, '-')[:16]}",
                      highlight=False)
    console.print("[green]delivery logs byte-identical[/]" if same else
                  "[red]delivery logs differ from the recorded digests[/]")
    return 0 if same else 1
