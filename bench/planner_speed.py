"""Planner speed: heuristic N=30 (<= 20 ms), optimum N=30 (<= 1 s) and N=100 (<= 30 s).

Run from the repository root: ``python -m bench.planner_speed``. Each figure is the median
wall time of several runs on BRITE-like topologies (see bench/plane_size.py), rates random.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

from bench.plane_size import brite_topology
from nodes.planner import Matrix, Plan, heuristic_plan, optimal_plan

CASES: tuple[tuple[str, Callable[[Matrix, Matrix], Plan], int, float, int], ...] = (
    ("heuristic", heuristic_plan, 30, 0.020, 20),
    ("optimum", optimal_plan, 30, 1.0, 5),
    ("optimum", optimal_plan, 100, 30.0, 3),
)


def main() -> None:
    rng = np.random.default_rng(1)
    optimal_plan(np.zeros((2, 2)))  # import HiGHS once, outside the timings
    for name, planner, n, target, repeats in CASES:
        times = []
        for _ in range(repeats):
            w = brite_topology(n, 3000, rng)
            r = rng.uniform(1.0, 100.0, n)
            start = time.perf_counter()
            planner(w, r)
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        verdict = "ok" if median <= target else "SLOW"
        print(
            f"{name:9s} N={n:3d}: median {median * 1000:9.1f} ms over {repeats} runs "
            f"(target <= {target * 1000:.0f} ms) {verdict}"
        )


if __name__ == "__main__":
    main()
