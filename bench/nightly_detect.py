"""Regression detection against noise: how often the catalogue's thresholds
(experiments/nightly/catalogue.yaml) raise a false alarm on pure noise, and how often they find a
step on the right night.

    python -m bench.nightly_detect [--seeds 5000] [--noise 0.10] [--step 0.30] [--nights 7]

Each trial is one metric with uniform +-noise around a constant; the step trials multiply it by
1+step from the fifth night (and, separately, from night `--late`) on. Prints the rates.
"""

from __future__ import annotations

import argparse

import numpy as np

from testbed.nightly.catalogue import load_catalogue
from testbed.nightly.detect import judge_series


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=5000)
    ap.add_argument("--noise", type=float, default=0.10)
    ap.add_argument("--step", type=float, default=0.30)
    ap.add_argument("--nights", type=int, default=7)
    ap.add_argument("--late", type=int, default=12, help="a second step night, in a longer run")
    args = ap.parse_args()
    t = load_catalogue().index.regression
    print(f"thresholds: {t.model_dump()}")

    def trial(length: int, step_at: int | None, seed: int) -> list[str]:
        rng = np.random.default_rng(seed)
        values = 100 * rng.uniform(1 - args.noise, 1 + args.noise, length)
        if step_at is not None:
            values[step_at - 1:] *= 1 + args.step
        nights = [f"{i:03d}" for i in range(1, length + 1)]
        s = judge_series(values.tolist(), nights, nights, t, "up")
        return [r.first_night for r in s.regressions]

    calm = sum(bool(trial(args.nights, None, s)) for s in range(args.seeds))
    calm30 = sum(bool(trial(30, None, s)) for s in range(args.seeds))
    print(f"false alarms: {calm / args.seeds:.2%} of {args.nights}-night histories, "
          f"{calm30 / args.seeds:.2%} of 30-night histories")
    for at, length in ((5, args.nights), (args.late, args.late + 2)):
        found = [trial(length, at, s) for s in range(args.seeds)]
        hit = sum(bool(f) for f in found)
        right = sum(bool(f) and f[0] == f"{at:03d}" for f in found)
        print(f"step x{1 + args.step:g} on night {at} of {length}: found {hit / args.seeds:.2%}, "
              f"first bad night right {right / args.seeds:.2%}")


if __name__ == "__main__":
    main()
