"""One night: run a suite's experiments one after another, keep going past failures, record.

What this machine cannot run is skipped with the reason `testbed doctor` gives; what does not
fit in the budget is skipped as well. Each experiment is a normal run (`testbed/runner.py`) in
`<runs>/<night>/`, so its run directory and report.html are there to open from the trend report.
An entry with `explore:` explores fault schedules instead (`testbed explore`, new seeds each
night); its folder holds index.html and the shrunk reproducers.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from testbed.doctor import Check
from testbed.nightly.catalogue import Entry
from testbed.nightly.detect import COVERAGE
from testbed.nightly.history import Outcome

# The doctor checks each backend needs beyond Java (which the analysis of every run needs).
BACKEND_NEEDS: dict[str, tuple[str, ...]] = {
    "sim": (), "local": (),
    "mininet": ("root", "iproute2 (ip, tc)", "iptables", "Mininet (mnexec)"),
    "docker": ("root", "Docker engine"),
}
JAVA = Check("java", False, "Spark analysis", "apt-get install -y openjdk-17-jre-headless")
RunOne = Callable[[Entry, Path, Console], Outcome]
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def blockers(backends: Iterable[str], checks: Callable[[], list[Check]] | None = None
             ) -> dict[str, str]:
    """{backend: why it cannot run here}, from `testbed doctor`'s checks. The doctor probes
    (which make a scratch namespace) run only when a wanted backend needs one."""
    wanted = sorted(set(backends))
    out: dict[str, str] = {}
    missing: list[Check] = [] if shutil.which("java") else [JAVA]
    if any(BACKEND_NEEDS.get(b) for b in wanted):
        if checks is None:
            from testbed.doctor import checks as doctor_checks

            checks = doctor_checks
        by_name = {c.name: c for c in checks()}
        for b in wanted:
            bad = [by_name[n] for n in BACKEND_NEEDS.get(b, ()) if n in by_name
                   and not by_name[n].ok]
            if bad:
                out[b] = "; ".join(f"doctor: no {c.name} ({c.fix})" for c in bad)
    for b in wanted:
        if b not in BACKEND_NEEDS:
            out[b] = f"the {b} backend is not available yet"
        elif missing and b not in out:
            out[b] = "; ".join(f"doctor: no {c.name} ({c.fix})" for c in missing)
    return out


def metric_value(summary: Mapping[str, Any], path: str) -> float | None:
    """The number at a dot path of summary.json (as in `expect:`), or None."""
    node: Any = summary
    for key in path.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    if isinstance(node, bool) or not isinstance(node, int | float):
        return None
    return float(node)


def nightly_seeds(night: str, protocol: str, n: int) -> list[int]:
    """The night's explore seeds for one protocol: new every night, the same for a rerun of
    that night (48-bit, from sha256 of night, protocol and k)."""
    return [int(hashlib.sha256(f"{night}:{protocol}:{k}".encode()).hexdigest()[:12], 16)
            for k in range(n)]


def coverage_metrics(where: Path, protocol: str) -> dict[str, tuple[float | None, str]]:
    """The session's coverage (testbed/explore/coverage.py `shares`) as history metrics
    `coverage.<item>`, bad when down; the trend report lists those that dropped to zero."""
    import json

    from testbed.explore.coverage import shares

    try:
        cov = json.loads((where / "coverage.json").read_text()).get(protocol) or {}
    except (OSError, ValueError):
        return {}
    return {f"{COVERAGE}{k}": (v, "down") for k, v in sorted(shares(cov).items())}


def explore_entry(entry: Entry, out: Path, console: Console) -> Outcome:
    """Explore one protocol with the night's seeds (`out` ends with the night's date):
    fail when a seed fails, with its shrunk reproducer named in the reason."""
    from testbed.explore.case import Base, raw_data
    from testbed.explore.session import Options, explore

    started = datetime.now(UTC)
    began = time.monotonic()
    night = out.name if _DATE.match(out.name) else started.date().isoformat()
    where = out / f"explore-{entry.id}"
    try:
        data = raw_data(entry.source, drop=("nightly",))
        data.update(name=entry.spec.name, protocol={"name": entry.protocol,
                                                    "params": entry.spec.protocol.params})
        base = Base.from_data(data)
        seeds = nightly_seeds(night, entry.protocol, entry.seeds)
        result = explore(base, Options(seed_list=seeds, workers=os.cpu_count() or 1, shrink=1,
                                       source=str(entry.source)), where, console)
    except Exception as exc:  # noqa: BLE001 - one broken experiment must not stop the night
        return Outcome(entry.id, entry.protocol, entry.backend, "error",
                       f"{type(exc).__name__}: {exc}", metrics=_empty(entry),
                       wall_s=time.monotonic() - began, started_at=started)
    failing = result.failures
    reason = ""
    if failing:
        checks = sorted({c for r in failing for c in r["failing"]})
        reason = f"explore: {len(failing)} of {len(result.rows)} seeds failing " \
                 f"({', '.join(checks)})"
        shrunk = [r for r in failing if r["seed"] in result.shrunk]
        if shrunk:
            reason += f"; shrunk reproducer {shrunk[0]['reproducer']}"
    metrics: dict[str, tuple[float | None, str]] = {
        t.metric: ((float(len(failing)) if t.metric == "explore.failing_seeds" else None), t.bad)
        for t in entry.trend}
    metrics.update(coverage_metrics(where, entry.protocol))
    return Outcome(entry.id, entry.protocol, entry.backend, "fail" if failing else "pass",
                   reason, metrics=metrics, run_dir=str(where.resolve()),
                   wall_s=time.monotonic() - began, started_at=started)


def run_entry(entry: Entry, out: Path, console: Console) -> Outcome:
    """Run one catalogue experiment for real and judge it (checkers and `expect:`); an
    explore entry explores its seeds instead."""
    if entry.seeds:
        return explore_entry(entry, out, console)
    from analysis.report import verdict
    from testbed.runner import run_experiment

    started = datetime.now(UTC)
    began = time.monotonic()
    try:
        result = run_experiment(entry.spec, entry.topology, out, console)
    except Exception as exc:  # noqa: BLE001 - one broken experiment must not stop the night
        return Outcome(entry.id, entry.protocol, entry.backend, "error",
                       f"{type(exc).__name__}: {exc}", metrics=_empty(entry),
                       wall_s=time.monotonic() - began, started_at=started)
    ok, reasons = verdict(result.summary)
    metrics: dict[str, tuple[float | None, str]] = {
        t.metric: (metric_value(result.summary, t.metric), t.bad) for t in entry.trend}
    return Outcome(entry.id, entry.protocol, entry.backend, "pass" if ok else "fail",
                   "; ".join(reasons), metrics=metrics, run_dir=str(result.run.path.resolve()),
                   wall_s=time.monotonic() - began, started_at=started)


def run_night(entries: list[Entry], runs: Path, budget_s: float, console: Console,
              estimates: Mapping[str, float] | None = None,
              skip: Mapping[str, str] | None = None, run_one: RunOne = run_entry
              ) -> list[Outcome]:
    """Run `entries` in order; never stop on a failure; skip what cannot run or fit."""
    estimates = estimates or {}
    skip = skip or {}
    outcomes: list[Outcome] = []
    began = time.monotonic()
    runnable = [e for e in entries if e.backend not in skip and not e.outside]

    def guess(e: Entry) -> float:
        return estimates.get(e.id, e.estimate_s)

    left_s = sum(guess(e) for e in runnable)
    for i, entry in enumerate(entries, 1):
        if entry.outside:
            console.print(f"[{i}/{len(entries)}] [yellow]skip[/] {entry.id}: {entry.outside}",
                          highlight=False)
            outcomes.append(Outcome(entry.id, entry.protocol, entry.backend, "skipped",
                                    entry.outside, metrics=_empty(entry)))
            continue
        if entry.backend in skip:
            console.print(f"[{i}/{len(entries)}] [yellow]skip[/] {entry.id}: {skip[entry.backend]}",
                          highlight=False)
            outcomes.append(Outcome(entry.id, entry.protocol, entry.backend, "skipped",
                                    skip[entry.backend], metrics=_empty(entry)))
            continue
        elapsed = time.monotonic() - began
        if elapsed + guess(entry) > budget_s:
            reason = (f"budget {budget_s:.0f} s spent ({elapsed:.0f} s used, this one takes "
                      f"about {guess(entry):.0f} s)")
            console.print(f"[{i}/{len(entries)}] [yellow]skip[/] {entry.id}: {reason}",
                          highlight=False)
            outcomes.append(Outcome(entry.id, entry.protocol, entry.backend, "skipped",
                                    reason, metrics=_empty(entry)))
            left_s -= guess(entry)
            continue
        console.print(f"[bold][{i}/{len(entries)}][/] {entry.id} - about "
                      f"{_fmt_s(left_s)} left", highlight=False)
        outcome = run_one(entry, runs, console)
        outcomes.append(outcome)
        left_s = max(0.0, left_s - guess(entry))
        colour = {"pass": "green", "fail": "red", "error": "red"}.get(outcome.status, "yellow")
        console.print(f"    [{colour}]{outcome.status}[/] in {outcome.wall_s:.1f} s"
                      + (f": {outcome.reason}" if outcome.reason else ""), highlight=False)
    return outcomes


def _empty(entry: Entry) -> dict[str, tuple[float | None, str]]:
    """Tracked metrics with no value (the experiment did not run or failed to)."""
    return {t.metric: (None, t.bad) for t in entry.trend}


def _fmt_s(s: float) -> str:
    return f"{s / 60:.0f} min" if s >= 90 else f"{s:.0f} s"
