"""The checker suite over 10M delivery events: time on local[2] and the speed-up from local[1].

    .venv/bin/python bench/checker_scale.py [--nodes 5] [--messages 2000000] [--out DIR]
        [--masters local[1] local[2]]
    .venv/bin/python -m bench.checker_scale --messages 20000000 --nodes 5 --out DIR \
        --masters local[2]                                   # 100M events

With `--out DIR` the history is kept there and reused by later runs with the same size (so
generating 10M events is paid once; it is never part of the timed part anyway).

Writes a sequencer-like history straight to Parquet (numpy + pyarrow: nodes x messages fnl
events plus one send per message, and one swapped pair at the last node so the total order
checker has something to find), then runs `analysis.checks.check_suite` once per master, each
plus the `ev=error` count (analysis/checks.py node_errors), once per master, each in its own
process (one SparkContext per process), and prints the times side by side with the CPU time
they took and the peak resident memory of the driver, its JVM and the JVM's Python workers
(from /proc; the workers' sum of high-water marks, of those still alive at the end, and
the largest worker, sampled every 0.5 s while it ran), and the load average at the start
and the end.
Targets on local[2]: <= 60 s for 10M events, <= 300 s for 100M.
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


def run_one(master: str, data: Path, save: Path | None = None) -> dict[str, object]:
    """Time check_suite on `master` over the Parquet history at `data` (runs in a child);
    with `save`, write the checks (examples included) there as JSON."""
    from pyspark.sql import functions as F

    from analysis.checks import check_suite, node_errors
    from analysis.fault_history import fault_history
    from analysis.ingest import EVENT_SCHEMA
    from analysis.overview import overview
    from analysis.session import spark_session

    spark = spark_session(master, app="checker-scale",
                          events=sum(pq.ParquetFile(f).metadata.num_rows
                                     for f in data.glob("*.parquet")))
    raw = spark.read.parquet(str(data))
    events = raw.select(*[F.col(f.name).cast(f.dataType).alias(f.name) if f.name in raw.columns
                          else F.lit(None).cast(f.dataType).alias(f.name)
                          for f in EVENT_SCHEMA.fields])
    nodes = sorted(r["node"] for r in events.select("node").distinct().collect())
    memory = _PeakRss()
    cpu0 = _cpu_seconds()
    started = time.perf_counter()
    view = overview(events)
    checks = check_suite(events, fault_history(nodes, []), view=view)
    errors = node_errors(view)
    seconds = time.perf_counter() - started
    if save is not None:
        save.write_text(json.dumps(checks, indent=1, sort_keys=True, default=str))
    return {"master": master, "seconds": round(seconds, 1),
            "cpu_s": round(_cpu_seconds() - cpu0, 1),
            "violations": {k: c["violations"] for k, c in checks.items()},
            "node_errors": errors["total"], "peak_rss_mb": memory.stop()}


def _cpu_seconds() -> float:
    """CPU time of this process, its JVM and the JVM's Python workers (each one's user and
    system time and its reaped children's): what the suite costs, however loaded the
    machine (on a shared machine the wall time says more about the others' jobs)."""
    import os

    ticks = 0
    for pid in (p for group in _family() for p in group):
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
            ticks += sum(int(x) for x in stat[11:15])
        except (OSError, ValueError, IndexError):
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


class _PeakRss:
    """The peak resident memory of this process (the driver), its JVM and the JVM's Python
    workers, in MiB: each one's high-water mark (VmHWM) read at `stop`, while they are still
    alive, and the peak of their sum sampled every 0.5 s in a thread."""

    def __init__(self) -> None:
        import threading

        self.total = 0
        self.worker_max = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(0.5):
            try:
                driver, jvms, workers = _family()
                self.total = max(self.total, sum(_status(p, "VmRSS")
                                                 for p in driver + jvms + workers))
                # A worker's high-water mark goes with it: sample the largest while it runs.
                self.worker_max = max(self.worker_max, max(
                    (_status(p, "VmRSS") for p in workers), default=0))
            except Exception:  # noqa: BLE001 - a sample lost to a racing exit is no error
                continue

    def stop(self) -> dict[str, int]:
        self._done.set()
        self._thread.join()
        driver, jvms, workers = _family()
        peak = {"driver": sum(_status(p, "VmHWM") for p in driver),
                "jvm": sum(_status(p, "VmHWM") for p in jvms),
                "workers": sum(_status(p, "VmHWM") for p in workers),
                "worker_max": max(self.worker_max, max(
                    (_status(p, "VmHWM") for p in workers), default=0))}
        return {**{k: v // 1024 for k, v in peak.items()}, "total": self.total // 1024}


def _family() -> tuple[list[int], list[int], list[int]]:
    """This process, its child JVM(s) and every process below them (the Python workers)."""
    import os

    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
                parents[int(entry)] = int(stat.rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    me = os.getpid()
    jvms = [p for p, pp in parents.items() if pp == me]
    workers: list[int] = []
    todo = list(jvms)
    while todo:
        parent = todo.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        workers += kids
        todo += kids
    return [me], jvms, workers


def _status(pid: int, field: str) -> int:
    """A /proc/PID/status field in KiB (0 once the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_bytes().splitlines():
            if line.startswith(field.encode() + b":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--out", type=Path, default=None, help="keep the Parquet history here")
    parser.add_argument("--masters", nargs="+", default=["local[1]", "local[2]"])
    parser.add_argument("--save", type=Path, default=None,
                        help="write each master's checks (examples included) to SAVE.MASTER.json")
    parser.add_argument("--one", nargs="+", metavar="MASTER DATA [SAVE]", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        save = Path(args.one[2]) if len(args.one) > 2 else None
        print(json.dumps(run_one(args.one[0], Path(args.one[1]), save)))
        return 0
    load_at_start = __import__("os").getloadavg()
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
            save_to = ([str(args.save.with_name(f"{args.save.name}.{master}.json"))]
                    if args.save else [])
            done = subprocess.run([sys.executable, __file__, "--one", master, str(data), *save_to],
                                  cwd=ROOT, capture_output=True, text=True,
                                  env={"PYTHONPATH": str(ROOT), **_env()})
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                return 1
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"{'master':<10} {'seconds':>8} {'CPU-s':>7}  peak MiB (driver, JVM, workers, sum;"
          " largest worker)  violations")
    for r in results:
        rss = r["peak_rss_mb"]
        assert isinstance(rss, dict)
        print(f"{r['master']:<10} {r['seconds']:>8} {r['cpu_s']:>7}  {rss['driver']:>6} "
              f"{rss['jvm']:>6} {rss['workers']:>6} {rss['total']:>6}; {rss['worker_max']:>6}  "
              f"{r['violations']}")
    times = {r["master"]: float(str(r["seconds"])) for r in results}
    if "local[1]" in times and "local[2]" in times:
        print(f"speed-up local[1] -> local[2]: {times['local[1]'] / times['local[2]']:.2f}x")
    if "local[2]" in times:
        target = 60 if args.nodes * args.messages <= 10_000_000 else 300
        print(f"local[2] target <= {target} s: "
              f"{'met' if times['local[2]'] <= target else 'MISSED'}")
    print(f"load average: {' '.join(f'{x:.1f}' for x in load_at_start)} at the start, "
          f"{' '.join(f'{x:.1f}' for x in __import__('os').getloadavg())} at the end")
    return 0


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


if __name__ == "__main__":
    sys.exit(main())
