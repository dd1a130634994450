"""One `testbed explore` session: seeds through the workers (or Spark), failures shrunk,
seeds.parquet, reproducers and index.html written (docs/explore.md)."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from testbed.explore import pool
from testbed.explore.case import Base, Case, reproducer_text

BATCH = 4  # seeds per task: few round trips, still a smooth progress bar


@dataclass
class Options:
    seeds: int | None = None  # how many seeds, from `first_seed`
    budget_s: float | None = None  # or: as many as fit in this many seconds
    first_seed: int = 0
    seed_list: list[int] | None = None  # explicit seeds (the nightly's)
    workers: int = 1
    master: str | None = None
    shrink: int = 5  # failing seeds to shrink (distinct failures first)
    source: str = ""  # the experiment file, for the reproducers' comments


@dataclass
class Outcome:
    rows: list[dict[str, Any]] = field(default_factory=list)
    shrunk: dict[int, dict[str, Any]] = field(default_factory=dict)
    wall_s: float = 0.0
    explore_s: float = 0.0  # seeds only, shrinking not counted

    @property
    def failures(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if not r["ok"]]


def _seed_iter(opts: Options) -> Iterator[int]:
    if opts.seed_list is not None:
        yield from opts.seed_list
        return
    s = opts.first_seed
    while opts.seeds is None or s < opts.first_seed + opts.seeds:
        yield s
        s += 1


def _batches(seeds: Iterator[int], size: int) -> Iterator[list[int]]:
    batch: list[int] = []
    for s in seeds:
        batch.append(s)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def executor(base: Base, workers: int, root: Path) -> ProcessPoolExecutor:
    """Workers that stay alive, each with the compiled simulator and the experiment loaded
    (spawned, not forked: the parent has imported the pure-Python simulator already), their
    run directories under `root`."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(
        "spawn"), initializer=pool.init_worker, initargs=(base.data, base.checks, str(root)))


def stop(ex: ProcessPoolExecutor, interrupted: bool) -> None:
    """Shut the pool down; when interrupted, terminate the workers first (a seed can run for
    minutes) and wait for them, so that nothing outlives the session."""
    procs = list((getattr(ex, "_processes", None) or {}).values())
    if interrupted:
        for p in procs:
            with contextlib.suppress(Exception):
                p.terminate()
    ex.shutdown(wait=True, cancel_futures=True)
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in the main thread (as Ctrl-C does), so that the
    session's cleanup runs; the previous handler is restored afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _local_rows(ex: ProcessPoolExecutor, opts: Options, deadline: float | None
                ) -> Iterable[dict[str, Any]]:
    batches = _batches(_seed_iter(opts), BATCH)
    pending: set[Future[list[dict[str, Any]]]] = set()
    exhausted = False
    while True:
        while not exhausted and len(pending) < 2 * opts.workers and (
                deadline is None or time.monotonic() < deadline):
            batch = next(batches, None)
            if batch is None:
                exhausted = True
                break
            pending.add(ex.submit(pool.run_seeds, batch))
        if not pending:
            return
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        for fut in done:
            yield from fut.result()
        if deadline is not None and time.monotonic() >= deadline:
            exhausted = True


def explore(base: Base, opts: Options, out: Path, console: Console,
            on_row: Callable[[dict[str, Any]], None] | None = None) -> Outcome:
    """Run the session; write seeds.parquet, reproducers/ and index.html under `out`."""
    from testbed.explore.coverage import coverage
    from testbed.explore.report import write_index, write_parquet

    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    deadline = None if opts.budget_s is None else began + opts.budget_s
    outcome = Outcome()
    total = opts.seeds if opts.seed_list is None else len(opts.seed_list)
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[rate]:.1f} seeds/s"),
               TextColumn("[red]{task.fields[failures]} failing[/]"), TimeElapsedColumn()]
    root = pool.temp_root()  # every worker's run directories: removed whatever happens
    interrupted = True
    try:
        with sigterm_as_interrupt():
            ex = executor(base, opts.workers, root)
            try:
                _run(ex, base, opts, out, outcome, console, columns, total, deadline, began,
                     on_row)
                interrupted = False
            finally:
                stop(ex, interrupted)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    write_parquet(out / "seeds.parquet", outcome.rows)
    cov = {base.exp.protocol.name: coverage(base.exp.protocol.name, outcome.rows)}
    (out / "coverage.json").write_text(json.dumps(cov, indent=1) + "\n")
    write_index(out, base, outcome, cov)
    outcome.wall_s = time.monotonic() - began
    return outcome


def _run(ex: ProcessPoolExecutor, base: Base, opts: Options, out: Path, outcome: Outcome,
         console: Console, columns: list[Any], total: int | None, deadline: float | None,
         began: float, on_row: Callable[[dict[str, Any]], None] | None) -> None:
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(f"exploring {base.exp.name}", total=total, rate=0.0,
                                 failures=0)
        if opts.master:
            seeds = list(_seed_iter(opts)) if total is not None else []
            rows: Iterable[dict[str, Any]] = pool.spark_rows(
                opts.master, base.data, base.checks,
                [seeds[i:i + BATCH] for i in range(0, len(seeds), BATCH)])
        else:
            rows = _local_rows(ex, opts, deadline)
        for row in rows:
            row.pop("summary", None)
            outcome.rows.append(row)
            if on_row is not None:
                on_row(row)
            elapsed = max(time.monotonic() - began, 1e-9)
            progress.update(task, advance=1, rate=len(outcome.rows) / elapsed,
                            failures=len(outcome.failures))
        outcome.explore_s = time.monotonic() - began
        outcome.rows.sort(key=lambda r: r["seed"])
        _shrink_failures(ex, base, opts, out, outcome, progress)


def _to_shrink(outcome: Outcome, limit: int) -> list[dict[str, Any]]:
    """Failing seeds to shrink: one per distinct set of failing checks first (the simplest
    first: fewest failing checks, then fewest fault items), then more."""
    failing = sorted((r for r in outcome.failures if "case" in r),
                     key=lambda r: (len(r["failing"]), len(r["case"]["items"]), r["seed"]))
    seen: set[tuple[str, ...]] = set()
    first: list[dict[str, Any]] = []
    rest: list[dict[str, Any]] = []
    for r in failing:
        key = tuple(r["failing"])
        (rest if key in seen else first).append(r)
        seen.add(key)
    return (first + rest)[:limit]


def _shrink_failures(ex: ProcessPoolExecutor, base: Base, opts: Options, out: Path,
                     outcome: Outcome, progress: Progress) -> None:
    repro = out / "reproducers"
    picked = _to_shrink(outcome, opts.shrink)
    if not outcome.failures:
        return
    repro.mkdir(exist_ok=True)
    task = progress.add_task("shrinking", total=len(picked), rate=0.0,
                             failures=len(outcome.failures))
    futures = {ex.submit(pool.shrink_seed, r["case"], str(out / "runs" / f"seed-{r['seed']}")):
               r for r in picked}
    for fut in futures:
        row = futures[fut]
        result = fut.result()
        case = Case.from_record(result["case"])
        final = result["row"]
        result["from_items"] = len(row["case"]["items"])
        outcome.shrunk[row["seed"]] = result
        path = repro / f"seed-{row['seed']}.yaml"
        path.write_text(reproducer_text(base, case, final, opts.source, result["from_items"]))
        row["reproducer"] = str(path.relative_to(out))
        row["shrunk_faults"] = json.dumps(list(case.items))
        row["shrunk_failing"] = final["failing"]
        progress.update(task, advance=1)
    # The failing seeds not shrunk: their reproducers as drawn.
    for row in outcome.failures:
        if row["seed"] in outcome.shrunk or "case" not in row:
            continue
        path = repro / f"seed-{row['seed']}.yaml"
        path.write_text(reproducer_text(base, Case.from_record(row["case"]), row, opts.source,
                                        None))
        row["reproducer"] = str(path.relative_to(out))
