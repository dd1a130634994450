"""Where the time of `testbed analyze` goes on a large run, step by step.

    .venv/bin/python bench/analyze_scale.py [--nodes 5] [--rate 2000] [--seconds 100] [--out DIR]

Writes a clean synthetic run (analysis/synthetic.py: every host sends, one total order; with
the defaults 2.2M log lines), then times each step of analysis/job.py in one Spark session:
ingestion (logs to Parquet), the message counts, the checker suite, latency quantiles,
throughput, clock offsets and optimistic metrics. Prints seconds per step and the total,
and before all that the same logs parsed by Spark's own JSON reader (`from_json`) into
Parquet, the way ingestion used to work, side by side with the ingestion step (first in the
session, as ingestion is in `testbed analyze`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.sql import functions as F  # noqa: E402

from analysis.checks import check_suite  # noqa: E402
from analysis.fault_history import fault_history  # noqa: E402
from analysis.ingest import EVENT_SCHEMA, ingest  # noqa: E402
from analysis.job import optimistic_section  # noqa: E402
from analysis.metrics import clock_offsets, fnl_latency, message_counts, throughput  # noqa: E402
from analysis.overview import overview  # noqa: E402
from analysis.record import read_record  # noqa: E402
from analysis.session import EVENT_LINE_BYTES, spark_session  # noqa: E402
from analysis.synthetic import generate_run  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--rate", type=float, default=2000.0, help="messages/s in total")
    parser.add_argument("--seconds", type=float, default=100.0)
    parser.add_argument("--out", type=Path, default=None, help="keep the run here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="analyze-scale-") as tmp:
        run = args.out or Path(tmp) / "run"
        if not (run / "nodes").is_dir():
            generate_run(run, nodes=args.nodes, duration_s=args.seconds, rate=args.rate)
        record = read_record(run)
        logs = [p for _, p in record.log_paths()]
        size = record.log_bytes()
        lines = sum(1 for p in logs for _ in p.open("rb"))
        spark = spark_session(app="analyze-scale", events=size // EVENT_LINE_BYTES)
        t0 = time.perf_counter()
        (spark.read.text([str(p) for p in logs])
         .select(F.from_json("value", EVENT_SCHEMA).alias("e")).select("e.*")
         .write.mode("overwrite").parquet(str(Path(tmp) / "from_json")))
        baseline = time.perf_counter() - t0
        steps: list[tuple[str, float]] = []
        started = last = time.perf_counter()

        def lap(name: str) -> None:
            nonlocal last
            now = time.perf_counter()
            steps.append((name, now - last))
            last = now

        data = ingest(spark, record)
        lap("ingest")
        events, nodes = data.events, data.nodes
        view = overview(events)
        message_counts(view, nodes)
        lap("messages")
        check_suite(events, fault_history(nodes, data.faults), view=view)
        lap("checks")
        fnl_latency(events)
        lap("latency")
        throughput(events, nodes)
        lap("throughput")
        clock_offsets(events, view)
        lap("clock")
        optimistic_section(events, view)
        lap("optimistic")
        total = time.perf_counter() - started
    print(f"{lines:,} log lines ({size / 2**20:.0f} MiB), {args.nodes} nodes")
    for name, seconds in steps:
        print(f"{name:<12} {seconds:6.1f} s")
    print(f"{'total':<12} {total:6.1f} s")
    ingest_s = steps[0][1]
    print(f"ingestion with Spark's from_json: {baseline:.1f} s ({baseline / ingest_s:.1f}x ours)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
