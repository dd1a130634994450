"""`python -m analysis RUN_DIR [--master URL]`: analyse, report, print the summary."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from analysis.job import analyze
from analysis.record import read_record
from analysis.report import write_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m analysis",
        description="Analyse a testbed run directory with Spark, e.g. "
        "`python -m analysis runs/20250101T000000Z-demo-ab12`.",
    )
    parser.add_argument("run_dir", type=Path, help="run directory (holds nodes/*/events.jsonl)")
    parser.add_argument("--master", default=None, help="Spark master URL (default local[*])")
    args = parser.parse_args(argv)
    if not (args.run_dir / "nodes").is_dir():
        print(f"error: {args.run_dir} has no nodes/ folder; pass a run directory.", file=sys.stderr)
        return 2
    record = read_record(args.run_dir)
    summary = analyze(record, master=args.master, expect=record.expect)
    write_report(record, summary)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
