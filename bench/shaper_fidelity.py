"""Userspace shaper fidelity: one-way delay error (p50/p99), jitter and loss against the
configured path, between two scratch namespaces (root). Prints one JSON line per case, then a
table.

Grid: delay 5/50/150 ms x jitter 0/5 ms x loss 0/2% x 100/1,000/5,000 packets/s,
36 cases in about 3 minutes: each case sends max(400, 1.5 s x rate) packets (so 4 s at
100/s, 1.5 s above), shorter than a soak run; `--seconds` scales it. `--quick` runs 4 cases.

Reading the columns: `err_*` is measured minus configured delay. With jitter the spread is
the point, so `err_p99_expected_ms` gives the normal distribution's p99 (2.326 x jitter) and the
target (p50 <= 0.2 ms, p99 <= 1 ms up to 2,000 packets/s) applies to jitter-0 cases only.
`late_1ms` is how many releases the daemon itself made more than 1 ms after their deadline:
when it is 0 but p99 is high, the tail came from the machine (scheduling of probes and softirqs
on a shared 2-core host), not from the shaper.

Probe priorities: the receiver always runs SCHED_FIFO. The sender does too up to 2,000
packets/s, where it sleeps between datagrams; above that its pacing loop never sleeps, and a
SCHED_FIFO task spinning a whole CPU trips the kernel's RT throttling (950 ms per 1 s: a 50 ms
freeze every second, seen in dmesg), so it runs at normal priority there.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scipy.stats import binom

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.hosts.netns import NetnsHost  # noqa: E402
from testbed.rundir import RunDir  # noqa: E402
from testbed.shaping.plan import HostPlan, with_path  # noqa: E402
from testbed.shaping.userspace import UserspaceApplier  # noqa: E402
from testbed.spec.topology import Path as PathSpec  # noqa: E402
from testbed.teardown import teardown  # noqa: E402
from tests.shaping_env import two_hosts  # noqa: E402
from tests.test_shaping import matrix_topology, plans  # noqa: E402

PROBE = str(Path(__file__).resolve().parent / "owd_probe.py")
DST = "198.18.200.2"
GRID = list(itertools.product([5, 50, 150], [0, 5], [0, 0.02], [100, 1000, 5000]))
QUICK = [(5, 0, 0, 1000), (50, 0, 0, 2000), (50, 5, 0.02, 1000), (150, 0, 0, 5000)]
RT_SENDER_MAX_PPS = 2000
TARGET_MAX_PPS = 2000


def one_way(src: NetnsHost, dst: NetnsHost, rate: int, count: int) -> dict[int, float]:
    """seq -> one-way delay in ms for every datagram that arrived."""
    out = Path(f"/tmp/tb-owd-{time.time_ns()}.txt")
    rx = subprocess.Popen([*dst.prefix(), sys.executable, PROBE, "recv", "--addr", DST,
                           "--count", str(count), "--out", str(out), "--rt", "20"],
                          stdout=subprocess.PIPE, text=True)
    try:
        assert rx.stdout is not None and rx.stdout.readline().strip() == "ready"
        sender_rt = "20" if rate <= RT_SENDER_MAX_PPS else "0"
        subprocess.run([*src.prefix(), sys.executable, PROBE, "send", "--addr", DST, "--rate",
                        str(rate), "--count", str(count), "--rt", sender_rt],
                       check=True, timeout=120)
        rx.wait(timeout=60)
    finally:
        if rx.poll() is None:
            rx.kill()
            rx.wait()
    rows = [line.split() for line in out.read_text().splitlines() if line]
    out.unlink()
    return {int(s): (int(r) - int(t)) / 1e6 for s, t, r in rows}


def quantile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


def case(applier: UserspaceApplier, a: NetnsHost, b: NetnsHost, plan: HostPlan, delay: float,
         jitter: float, loss: float, rate: int, scale: float) -> dict[str, Any]:
    new = with_path(plan, "b", PathSpec(int(delay * 1e6), int(jitter * 1e6), "normal", loss))
    applier.change(a, new, new.class_for("b"))
    late_before = applier.stats("a")["late_over_1ms"]
    n = max(400, int(rate * 1.5 * scale))
    got = list(one_way(a, b, rate, n).values())
    err = sorted(x - delay for x in got)
    lost = n - len(got)
    lo, hi = binom.interval(0.99, n, loss)
    return {"delay_ms": delay, "jitter_ms": jitter, "loss": loss, "pps": rate, "n": n,
            "err_p50_ms": round(quantile(err, 0.5), 3),
            "err_p99_ms": round(quantile(err, 0.99), 3),
            "err_p99_expected_ms": round(2.326 * jitter, 3),
            "err_max_ms": round(err[-1], 3),
            "jitter_measured_ms": round(statistics.pstdev(got), 3),
            "loss_measured": round(lost / n, 4),
            "loss_99pct_interval": [round(lo / n, 4), round(hi / n, 4)],
            "loss_ok": bool(lo <= lost <= hi),
            "late_1ms": applier.stats("a")["late_over_1ms"] - late_before,
            "meets_target": meets_target(jitter, rate, err)}


def meets_target(jitter: float, rate: int, err: list[float]) -> bool | None:
    if jitter or rate > TARGET_MAX_PPS:
        return None
    return 0 <= quantile(err, 0.5) <= 0.2 and quantile(err, 0.99) <= 1.0


def table(rows: list[dict[str, Any]]) -> str:
    cols = ["delay_ms", "jitter_ms", "loss", "pps", "n", "err_p50_ms", "err_p99_ms",
            "err_p99_expected_ms", "err_max_ms", "jitter_measured_ms", "loss_measured",
            "loss_ok", "late_1ms", "meets_target"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="4 cases instead of the 36-case grid")
    p.add_argument("--seconds", type=float, default=1.0, help="scale every case's length")
    args = p.parse_args()
    grid = QUICK if args.quick else GRID
    run = RunDir.create(Path("/tmp/tb-bench"), "fidelity")
    rows = []
    started = time.monotonic()
    try:
        with two_hosts() as (a, b):
            ps = plans(matrix_topology("5ms", "5ms"))
            applier = UserspaceApplier(run)
            applier.apply(a, ps["a"], run.journal)
            applier.apply(b, ps["b"], run.journal)
            for delay, jitter, loss, rate in grid:
                rows.append(case(applier, a, b, ps["a"], delay, jitter, loss, rate,
                                 args.seconds))
                print(json.dumps(rows[-1]), flush=True)
            stats = applier.stats("a")
    finally:
        teardown(run)
    print(table(rows))
    print(f"daemon: copied {stats['copied']}, held {stats['held']}, tx errors "
          f"{stats['tx_errors']}, kernel queue {stats['kernel']}; "
          f"{time.monotonic() - started:.0f} s")
    targeted = [r for r in rows if r["meets_target"] is not None]
    print(f"target met in {sum(r['meets_target'] for r in targeted)}/{len(targeted)} cases; "
          f"loss inside its 99% interval in {sum(r['loss_ok'] for r in rows)}/{len(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
