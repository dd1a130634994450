"""Explore speed: fault schedules per hour that `testbed explore --workers 2` judges, next to
the runs per hour of `testbed run` on the same spec (goal: >= 5,000 schedules/hour).

Run from the repository root: ``python -m bench.explore_speed [--seeds N] [--workers N]
[--world]``.
The spec is experiments/quickstart.yaml on the sim backend with 10 s simulated (4 hosts,
50 msgs/s each). The explore figure counts seeds only (drawing, simulating, judging, the
parquet and the report), not shrinking (`--shrink 0`); the baseline is the wall time of one
`python -m testbed run` of the same spec without faults, its Spark analysis included.

On a shared machine the wall-clock figure follows the load; the CPU seconds the workers spent
per schedule (getrusage of the reaped workers) give the figure the cores would reach if they
were the session's own: workers x 3600 / CPU s per schedule.

`--world` measures world mode (docs/explore.md "Worlds") instead: worlds of today's size
(every feature off: 4 hosts on two sites, 3 s of 20 msgs/s each, drawn faults) and drawn
worlds (every feature may be on, within the world's message budget).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "experiments" / "quickstart.yaml"
GOAL = 5000.0


def explore_rate(seeds: int, workers: int, world: dict[str, object] | None = None
                 ) -> tuple[float, int, float]:
    """(schedules per hour, failing seeds, worker CPU s per schedule) of one explore session
    with `workers` workers (`world`: the spec's `explore:` section of world mode)."""
    from testbed.explore.case import Base, load_base
    from testbed.explore.session import Options, explore

    base = load_base(SPEC)
    extra = {"explore": {"world": True, **world}} if world is not None else {}
    base = Base.from_data({**base.data, "duration": "10s", **extra})
    out = Path(tempfile.mkdtemp(prefix="explore-bench-"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        outcome = explore(base, Options(seeds=seeds, workers=workers, shrink=0), out,
                          Console(stderr=True, quiet=True))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the workers, reaped at the end
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    rows = len(outcome.rows)
    return rows / outcome.explore_s * 3600, len(outcome.failures), cpu / max(rows, 1)


def single_run_s() -> float:
    """Wall seconds of one `testbed run` of the spec on the sim backend, analysis included."""
    tmp = Path(tempfile.mkdtemp(prefix="explore-bench-run-"))
    try:
        text = SPEC.read_text().replace("topology: ../topologies/",
                                        f"topology: {ROOT / 'topologies'}/")
        text = text.replace("duration: 20s", "duration: 10s")
        spec = tmp / "quickstart-10s.yaml"
        spec.write_text(text)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        began = time.monotonic()
        subprocess.run([sys.executable, "-m", "testbed", "run", str(spec), "--backend", "sim",
                        "--out", str(tmp / "runs")], env=env, cwd=ROOT, check=False,
                       capture_output=True)
        return time.monotonic() - began
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.explore_speed")
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--world", action="store_true", help="measure world mode")
    args = parser.parse_args()
    if args.world:
        print(f"world mode, {os.cpu_count()} cores (load {os.getloadavg()[0]:.1f})")
        worlds: list[tuple[str, dict[str, object]]] = [("today's size", {"features": []}),
                                                        ("drawn worlds", {})]
        for label, world in worlds:
            per_hour, failing, cpu_s = explore_rate(args.seeds, args.workers, world)
            own = args.workers * 3600 / cpu_s if cpu_s else float("nan")
            print(f"  {label}: {per_hour:9,.0f} schedules/hour ({args.seeds} seeds, "
                  f"{failing} failing; goal >= {GOAL:,.0f}); worker CPU {cpu_s:.3f} s per "
                  f"schedule -> {own:9,.0f}/hour on {args.workers} cores of its own")
        return
    per_hour, failing, cpu_s = explore_rate(args.seeds, args.workers)
    run_s = single_run_s()
    runs_per_hour = 3600 / run_s
    verdict = "ok" if per_hour >= GOAL else "SLOW"
    print(f"quickstart, 4 hosts, 10 s simulated, {os.cpu_count()} cores "
          f"(load {os.getloadavg()[0]:.1f})")
    print(f"  testbed explore --workers {args.workers}: {per_hour:9,.0f} schedules/hour "
          f"({args.seeds} seeds, {failing} failing; goal >= {GOAL:,.0f}) {verdict}")
    own = args.workers * 3600 / cpu_s if cpu_s else float("nan")
    print(f"  worker CPU per schedule: {cpu_s:.3f} s -> {own:9,.0f} schedules/hour on "
          f"{args.workers} cores of its own")
    print(f"  testbed run (one run, Spark analysis): {runs_per_hour:9,.0f} runs/hour "
          f"({run_s:.1f} s per run)")
    print(f"  ratio: {per_hour / runs_per_hour:,.0f}x")


if __name__ == "__main__":
    main()
