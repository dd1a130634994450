"""Userspace shaper fidelity: one-way delay error (p50/p99), jitter and loss against the
configured path, between two scratch namespaces (root). Prints one JSON line per case.

Grid (issue 3): delay 5/50/150 ms x jitter 0/5 ms x loss 0/2% x 100/1,000/5,000 packets/s.
`--quick` runs a subset. Probes run at SCHED_FIFO so the numbers describe the shaper, not the
probes' wait for a CPU on a busy machine.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.rundir import RunDir  # noqa: E402
from testbed.shaping.plan import with_path  # noqa: E402
from testbed.shaping.userspace import UserspaceApplier  # noqa: E402
from testbed.spec.topology import Path as PathSpec  # noqa: E402
from testbed.teardown import teardown  # noqa: E402
from tests.shaping_env import two_hosts  # noqa: E402
from tests.test_shaping import matrix_topology, one_way, plans  # noqa: E402


def case(applier: UserspaceApplier, a, b, plan, delay: float, jitter: float, loss: float,  # noqa: ANN001
         rate: int, seconds: float) -> dict[str, object]:
    new = with_path(plan, "b", PathSpec(int(delay * 1e6), int(jitter * 1e6), "normal", loss))
    applier.change(a, new, new.class_for("b"))
    n = int(rate * seconds)
    got = one_way(a, b, "198.18.200.2", rate=rate, count=n)
    err = sorted(x - delay for x in got)
    lost = n - len(got)
    sd = math.sqrt(n * loss * (1 - loss))
    return {"delay_ms": delay, "jitter_ms": jitter, "loss": loss, "pps": rate, "n": n,
            "err_p50_ms": round(err[len(err) // 2], 3), "err_p99_ms": round(err[int(len(err)
                                                                                * 0.99)], 3),
            "jitter_measured_ms": round(statistics.pstdev(got), 3),
            "loss_measured": round(lost / n, 4),
            "loss_in_99pct_interval": abs(lost - n * loss) <= 2.576 * sd + 1}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seconds", type=float, default=2.0)
    args = p.parse_args()
    grid = list(itertools.product([5, 50, 150], [0, 5], [0, 0.02], [100, 1000, 5000]))
    if args.quick:
        grid = [(5, 0, 0, 1000), (50, 0, 0, 2000), (50, 5, 0.02, 1000), (150, 0, 0, 5000)]
    run = RunDir.create(Path("/tmp/tb-bench"), "fidelity")
    try:
        with two_hosts() as (a, b):
            ps = plans(matrix_topology("5ms", "5ms"))
            applier = UserspaceApplier(run)
            applier.apply(a, ps["a"], run.journal)
            applier.apply(b, ps["b"], run.journal)
            for delay, jitter, loss, rate in grid:
                print(json.dumps(case(applier, a, b, ps["a"], delay, jitter, loss, rate,
                                      args.seconds)), flush=True)
    finally:
        teardown(run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
