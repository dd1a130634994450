"""Time to a verdict: `testbed run` from its start to its last line, as the user waits for it.

    python -m bench.time_to_verdict [--repeat 1] [--case sim-quickstart] ...

Each case is one `testbed run` subprocess, timed on the wall clock from its start to its exit
(its last line, the verdict), with its runs written under a temporary directory that is
removed afterwards:

  sim-quickstart    experiments/quickstart.yaml --backend sim
  local-quickstart  experiments/quickstart.yaml (the local backend, 20 s of real workload)
  wan-30            experiments/wan-30.yaml (30 hosts on sim)

each with `--engine spark` and `--engine in-process` (its spec copied without the `expect:`
lines only Spark measures, latency), side by side; and the floor: a
subprocess that starts a SparkSession with the project's settings (analysis/session.py) and
runs one small job (`spark.range(10).count()`), the fixed cost any Spark analysis pays.
With `--repeat N` each figure is the fastest of N. `--case NAME` (repeatable) runs only those
cases (`floor` is one).

The summary figure is the sim quickstart's seconds with the Spark engine against its target:
at most 10 s, or the floor plus 2 s where the floor alone is longer.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from analysis.expect import parse_expectation, schema_problem

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "experiments" / "quickstart.yaml"
WAN30 = ROOT / "experiments" / "wan-30.yaml"
# name: (experiment, extra `testbed run` arguments)
CASES: dict[str, tuple[Path, list[str]]] = {
    "sim-quickstart": (QUICKSTART, ["--backend", "sim"]),
    "local-quickstart": (QUICKSTART, []),
    "wan-30": (WAN30, []),
}
ENGINES = ("spark", "in-process")
FLOOR = "floor"
TARGET_S = 10.0
FLOOR_MARGIN_S = 2.0
_FLOOR_JOB = ("from analysis.session import spark_session\n"
              "assert spark_session(app='time-to-verdict-floor').range(10).count() == 10\n")


class CaseFailed(Exception):
    """A timed command failed (a run's NOT OK verdict is a figure, not a failure)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.time_to_verdict",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=1, help="figures are the fastest of N")
    parser.add_argument("--case", action="append", choices=[*CASES, FLOOR], dest="cases",
                        help="run only this case (repeatable)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat: at least 1")
    args.cases = args.cases or [*CASES, FLOOR]
    return args


def _timed(command: list[str], verdict: bool = False) -> float:
    """Wall seconds from the start of `command` to its exit, in the project root. It must exit
    0, or with `verdict` print a verdict as its last line (exit 1 is a NOT OK verdict)."""
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 and not (verdict and lines and lines[-1].startswith("verdict:")):
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        raise CaseFailed(f"{' '.join(command)}: exit {proc.returncode}: " + " / ".join(tail))
    return elapsed


def in_process_spec(experiment: Path, folder: Path) -> Path:
    """A copy of `experiment` in `folder` without the `expect:` lines the in-process engine
    cannot judge (latency is measured by the Spark analysis only), its topology path made
    absolute: the same run, judged in-process."""
    data = yaml.safe_load(experiment.read_text())
    data["expect"] = [line for line in data.get("expect", [])
                      if schema_problem(parse_expectation(line), spark=False) is None]
    if isinstance(data.get("topology"), str):
        data["topology"] = str((experiment.parent / data["topology"]).resolve())
    copy = folder / experiment.name
    copy.write_text(yaml.safe_dump(data, sort_keys=False))
    return copy


def run_case(case: str, engine: str) -> float:
    """Seconds `testbed run` of `case` with `engine` takes, to its last line. Exit 1 (a NOT
    OK verdict) counts: the user waited for it all the same."""
    experiment, extra = CASES[case]
    out = Path(tempfile.mkdtemp(prefix="ttv-runs-"))
    try:
        if engine != "spark":
            experiment = in_process_spec(experiment, out)
        return _timed([sys.executable, "-m", "testbed", "run", str(experiment), *extra,
                       "--engine", engine, "--out", str(out)], verdict=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def floor() -> float:
    """Seconds a fresh process takes to start a SparkSession and run one small job."""
    return _timed([sys.executable, "-c", _FLOOR_JOB])


def target(floor_s: float | None) -> float:
    """The sim quickstart's target: TARGET_S, or the floor plus FLOOR_MARGIN_S if longer."""
    return max(TARGET_S, (floor_s or 0.0) + FLOOR_MARGIN_S)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    best: dict[tuple[str, str], float] = {}
    for _ in range(args.repeat):  # interleaved: each round sees about the same load
        for case in args.cases:
            for engine in ENGINES if case != FLOOR else ("spark",):
                t = floor() if case == FLOOR else run_case(case, engine)
                best[case, engine] = min(t, best.get((case, engine), t))
    print(f"{'case':<18}{'spark s':>10}{'in-process s':>14}")
    for case in args.cases:
        spark = best.get((case, "spark"))
        inproc = best.get((case, "in-process"))
        print(f"{case:<18}{spark:>10.1f}" + (f"{inproc:>14.1f}" if inproc is not None
                                               else f"{'-':>14}"))
    if (sim := best.get(("sim-quickstart", "spark"))) is not None:
        floor_s = best.get((FLOOR, "spark"))
        goal = target(floor_s)
        basis = (f"floor {floor_s:.1f} s + {FLOOR_MARGIN_S:.0f} s" if goal > TARGET_S
                 else f"{TARGET_S:.0f} s")
        print(f"sim quickstart to its verdict (spark): {sim:.1f} s; target {goal:.1f} s "
              f"({basis}): {'met' if sim <= goal else 'missed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
