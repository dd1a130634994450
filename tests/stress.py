"""The flake hunt: run the timing-sensitive tests (`-m timing`) several rounds while a
CPU-bound process keeps one core busy, and report per test how many rounds failed.

    python -m tests.stress [--rounds 5] [--load-cores 1] [pytest args...]

`make test-stress` runs it. Exit code 0 only when no test failed in any round: that is the
bar before a change lands, since one flaky failure in CI throws the whole submission away.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUSY = "while True:\n    pass\n"


def start_load(cores: int) -> list[subprocess.Popen[bytes]]:
    """`cores` busy-looping processes, each pinned to its own core where the OS allows."""
    procs = []
    n = os.cpu_count() or 1
    for k in range(cores):
        p = subprocess.Popen([sys.executable, "-c", BUSY], start_new_session=True)
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(p.pid, {k % n})
        procs.append(p)
    return procs


def stop_load(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:  # only the processes started here, by pid
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        p.wait()


def outcomes(junit: Path) -> dict[str, bool]:
    """test id -> passed, from a pytest junit XML file (skips count as passed)."""
    out: dict[str, bool] = {}
    if not junit.exists():
        return out
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        out[name] = not any(child.tag in ("failure", "error") for child in case)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.stress", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("ROUNDS", "5")))
    ap.add_argument("--load-cores", type=int, default=1)
    args, pytest_args = ap.parse_known_args(argv)
    failed: Counter[str] = Counter()
    seen: set[str] = set()
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tb-stress-") as tmp:
        for k in range(1, args.rounds + 1):
            junit = Path(tmp) / f"round{k}.xml"
            load = start_load(args.load_cores)
            try:
                rc = subprocess.call([sys.executable, "-m", "pytest", "-m", "timing", "-q",
                                      "-p", "no:cacheprovider", f"--junitxml={junit}",
                                      *pytest_args], cwd=ROOT)
            finally:
                stop_load(load)
            got = outcomes(junit)
            if rc not in (0, 1) or not got:
                print(f"round {k}: pytest exited {rc} without results", file=sys.stderr)
                return 2
            seen |= set(got)
            failed.update(name for name, ok in got.items() if not ok)
            print(f"round {k}/{args.rounds}: {sum(got.values())}/{len(got)} passed "
                  f"({time.monotonic() - began:.0f} s so far)", flush=True)
    print(f"\ntiming tests under a {args.load_cores}-core CPU load, {args.rounds} rounds:")
    for name in sorted(seen):
        print(f"  {failed[name]}/{args.rounds} failed  {name}")
    total = sum(failed.values())
    print(f"{total} failure(s) in all")
    return 0 if total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
