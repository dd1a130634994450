"""The checker suite over 10M delivery events: time on local[2] and the speed-up from local[1].

    .venv/bin/python bench/checker_scale.py [--nodes 5] [--messages 2000000] [--out DIR]
        [--masters local[1] local[2]]

With `--out DIR` the history is kept there and reused by later runs with the same size (so
generating 10M events is paid once; it is never part of the timed part anyway).

Writes a sequencer-like history straight to Parquet (numpy + pyarrow: nodes x messages fnl
events plus one send per message, and one swapped pair at the last node so the total order
checker has something to find), then runs `analysis.checks.check_suite` once per master, each
in its own process (one SparkContext per process), and prints the times side by side.
Target: <= 60 s on local[2].
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
MS = 1_000_000


def generate(out: Path, nodes: int, messages: int) -> int:
    """Write the history under `out` (one Parquet file per node); return the fnl event count."""
    out.mkdir(parents=True, exist_ok=True)
    m = np.arange(messages, dtype=np.int64)
    sender = m % nodes
    names = pa.array([f"h{k + 1}" for k in range(nodes)])
    mid = pc.binary_join_element_wise(pc.take(names, pa.array(sender)),
                                      pc.cast(pa.array(m // nodes + 1), pa.string()), ":")
    t_send = 1_000_000_000 + m * 100_000  # 10k messages/s
    for k in range(nodes):
        order = m.copy()
        if k == nodes - 1 and messages > 10:
            order[[5, 6]] = order[[6, 5]]  # messages of two different senders: total order only
        mine = sender == k
        rows = {
            "t": np.concatenate([t_send[mine], t_send + (5 + k) * MS]),
            "i": np.concatenate([2 * m[mine], 2 * np.arange(messages) + 1]),
            "ev": pa.array(["send"] * int(mine.sum()) + ["fnl"] * messages).dictionary_encode(),
            "mid": pa.concat_arrays([mid.filter(pa.array(mine)), mid.take(pa.array(order))]),
            "seq": np.concatenate([np.zeros(int(mine.sum()), np.int64), order + 1]),
        }
        table = pa.table({**rows, "lt": rows["t"], "node": pa.array([f"h{k + 1}"] * len(rows["t"])),
                          "proto": pa.array(["sequencer"] * len(rows["t"])).dictionary_encode()})
        pq.write_table(table, out / f"h{k + 1}.parquet", row_group_size=1 << 20)
    return nodes * messages


def run_one(master: str, data: Path) -> dict[str, object]:
    """Time check_suite on `master` over the Parquet history at `data` (runs in a child)."""
    from pyspark.sql import functions as F

    from analysis.checks import check_suite
    from analysis.fault_history import fault_history
    from analysis.ingest import EVENT_SCHEMA
    from analysis.session import spark_session

    spark = spark_session(master, app="checker-scale",
                          events=sum(pq.ParquetFile(f).metadata.num_rows
                                     for f in data.glob("*.parquet")))
    raw = spark.read.parquet(str(data))
    events = raw.select(*[F.col(f.name).cast(f.dataType).alias(f.name) if f.name in raw.columns
                          else F.lit(None).cast(f.dataType).alias(f.name)
                          for f in EVENT_SCHEMA.fields])
    nodes = sorted(r["node"] for r in events.select("node").distinct().collect())
    started = time.perf_counter()
    checks = check_suite(events, fault_history(nodes, []))
    seconds = time.perf_counter() - started
    return {"master": master, "seconds": round(seconds, 1),
            "violations": {k: c["violations"] for k, c in checks.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--out", type=Path, default=None, help="keep the Parquet history here")
    parser.add_argument("--masters", nargs="+", default=["local[1]", "local[2]"])
    parser.add_argument("--one", nargs=2, metavar=("MASTER", "DATA"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one[0], Path(args.one[1]))))
        return 0
    with tempfile.TemporaryDirectory(prefix="checker-scale-") as tmp:
        data = args.out or Path(tmp) / "events"
        stamp = data / "_size.json"
        size = {"nodes": args.nodes, "messages": args.messages}
        if stamp.is_file() and json.loads(stamp.read_text()) == size:
            print(f"reusing {args.nodes * args.messages:,} fnl events in {data}")
        else:
            t0 = time.perf_counter()
            fnl = generate(data, args.nodes, args.messages)
            stamp.write_text(json.dumps(size))
            print(f"generated {fnl:,} fnl events (+{args.messages:,} sends) in "
                  f"{time.perf_counter() - t0:.1f} s")
        results = []
        for master in args.masters:
            done = subprocess.run([sys.executable, __file__, "--one", master, str(data)],
                                  cwd=ROOT, capture_output=True, text=True,
                                  env={"PYTHONPATH": str(ROOT), **_env()})
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                return 1
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"{'master':<10} {'seconds':>8}  violations")
    for r in results:
        print(f"{r['master']:<10} {r['seconds']:>8}  {r['violations']}")
    times = {r["master"]: float(str(r["seconds"])) for r in results}
    if "local[1]" in times and "local[2]" in times:
        print(f"speed-up local[1] -> local[2]: {times['local[1]'] / times['local[2]']:.2f}x; "
              f"local[2] target <= 60 s: {'met' if times['local[2]'] <= 60 else 'MISSED'}")
    return 0


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


if __name__ == "__main__":
    sys.exit(main())
