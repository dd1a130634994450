"""Judging a history: regressions that survive noise, and flaky experiments.

A tracked metric regresses on a night when, in its bad direction, it moves past the median of
the previous K nights (`window`) by more than k robust deviations (`mad_k` x 1.4826 x MAD) and
by at least `min_change` of that median, or when it moves past that median by `step` of it on
that night and the next one as well. Comparing with a robust baseline rather than with the last
point is what asv and conbench do; the two-night step catches shifts too small for a single
night to stand out from the noise. Once a regression starts, later nights belong to it while
they sit nearer its new level than its baseline, for at most K nights (by then the baseline is
the new level); its first bad night is walked back over earlier nights that already sat nearer
the new level.

Only nights the experiment passed feed a metric's series: a failed night is reported as a
failure already. An experiment whose verdict flipped pass<->fail at least `flips` times in the
last `window` nights is flaky.

An exploration's coverage (`coverage.<item>` metrics: the share of seeds reaching a protocol
event or drawing a fault kind) is no tracked series: what matters is an item reached one night
and not the next (`coverage_dropped`), whatever the verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from testbed.nightly.catalogue import FlakyRule, Thresholds

MAD_SIGMA = 1.4826  # MAD x this estimates the standard deviation of normal noise
COVERAGE = "coverage."  # the metric prefix of an exploration's coverage


@dataclass(frozen=True)
class Point:
    night: str
    value: float
    median: float | None  # of the baseline, when there was one
    lo: float | None  # the band a night may move in without regressing
    hi: float | None
    state: str  # ok | regressed | suspect (past the step, awaiting a second night) | early


@dataclass(frozen=True)
class Regression:
    experiment: str
    metric: str
    bad: str
    first_night: str
    last_good_night: str | None
    nights: tuple[str, ...]
    baseline: float
    value: float  # on the first bad night
    rule: str  # mad | step
    open: bool  # still regressed on the latest night
    first_commit: str
    good_commit: str | None

    @property
    def change(self) -> float:
        return (self.value - self.baseline) / abs(self.baseline) if self.baseline else float("inf")

    @property
    def commits(self) -> str:
        """The commit range to look in, git-style (`good..bad`)."""
        first = self.first_commit[:10]
        return f"{self.good_commit[:10]}..{first}" if self.good_commit else first


@dataclass
class Series:
    experiment: str
    metric: str
    bad: str
    points: list[Point] = field(default_factory=list)
    regressions: list[Regression] = field(default_factory=list)


@dataclass(frozen=True)
class Judgement:
    nights: list[str]
    status: dict[tuple[str, str], str]  # (night, experiment) -> pass|fail|error|skipped
    reasons: dict[tuple[str, str], str]
    run_dirs: dict[tuple[str, str], str]
    series: list[Series]
    flaky: dict[str, int]  # experiment -> flips in the window
    commits: dict[str, str]
    coverage: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)

    def coverage_dropped(self) -> list[tuple[str, str, float, str]]:
        """(experiment, item, its share the night before, that night) of every coverage item
        the latest night's exploration did not reach and its previous exploration did."""
        if not self.nights:
            return []
        latest = self.nights[-1]
        out = []
        for (night, exp), items in sorted(self.coverage.items()):
            if night != latest:
                continue
            before = [n for n in self.nights[:-1] if (n, exp) in self.coverage]
            if not before:
                continue
            prev = self.coverage[(before[-1], exp)]
            out += [(exp, item, share, before[-1]) for item, share in sorted(prev.items())
                    if share > 0 and not items.get(item, 0.0) > 0]
        return out

    @property
    def regressions(self) -> list[Regression]:
        return [r for s in self.series for r in s.regressions]

    def open_regressions(self) -> list[Regression]:
        return [r for r in self.regressions if r.open]

    def cell(self, night: str, experiment: str) -> str:
        """The grid's word for one experiment on one night."""
        status = self.status.get((night, experiment), "")
        if status in ("fail", "error") and experiment in self.flaky:
            return "flaky"
        if status == "pass" and any(night in r.nights for r in self.regressions
                                    if r.experiment == experiment):
            return "regressed"
        return status

    def failures(self, night: str) -> list[str]:
        return sorted(e for (n, e), s in self.status.items() if n == night
                      and s in ("fail", "error"))


@dataclass
class _Episode:
    start: int
    median: float
    limit: float  # the band's half-width when the shift was found
    rule: str
    nights: list[str]


def judge_series(values: list[float], nights: list[str], commits: list[str], t: Thresholds,
                 bad: str, experiment: str = "", metric: str = "") -> Series:
    """Points with their bands, and the regressions, of one metric's nightly values."""
    sign = 1.0 if bad == "up" else -1.0
    out = Series(experiment, metric, bad)
    x = np.asarray(values, dtype=float)
    n = len(x)
    episode: _Episode | None = None

    def close(ep: _Episode) -> None:
        out.regressions.append(Regression(
            experiment, metric, bad, nights[ep.start], nights[ep.start - 1] if ep.start else None,
            tuple(ep.nights), ep.median, float(x[ep.start]), ep.rule,
            ep.nights[-1] == nights[-1], commits[ep.start],
            commits[ep.start - 1] if ep.start else None))

    for j in range(n):
        if episode is not None:
            # A later night belongs to the shift while it sits nearer the shift's level than
            # the baseline it was measured from (and the baseline has not become the level).
            level = float(np.median([x[k] for k in range(episode.start, j)]))
            if (x[j] - episode.median) * sign > (level - episode.median) * sign / 2 \
                    and j - episode.start < t.window:
                episode.nights.append(nights[j])
                out.points.append(Point(nights[j], float(x[j]), episode.median,
                                        *_band(episode.median, episode.limit), "regressed"))
                continue
            close(episode)
            episode = None
        base = x[max(0, j - t.window):j]
        if len(base) < t.min_nights:
            out.points.append(Point(nights[j], float(x[j]), None, None, None, "early"))
            continue
        med = float(np.median(base))
        sigma = MAD_SIGMA * float(np.median(np.abs(base - med)))
        limit = max(t.mad_k * sigma, t.min_change * abs(med))
        step = t.step * abs(med)
        dev = (x[j] - med) * sign
        rule = None
        if dev > limit:
            rule = "mad"
        elif dev > step and j + 1 < n and (x[j + 1] - med) * sign > step:
            rule = "step"
        if rule is None:
            state = "suspect" if dev > step and j + 1 == n else "ok"
            out.points.append(Point(nights[j], float(x[j]), med, *_band(med, limit), state))
            continue
        start = _onset(x, j, med, t)
        for k in range(start, j):
            out.points[k] = replace(out.points[k], state="regressed")
        episode = _Episode(start, med, limit, rule, nights[start:j + 1])
        out.points.append(Point(nights[j], float(x[j]), med, *_band(med, limit), "regressed"))
    if episode is not None:
        close(episode)
    return out


def _onset(x: np.ndarray, j: int, med: float, t: Thresholds) -> int:
    """The first bad night of a shift detected on night j: walk back over earlier nights that
    sit nearer the new level (the median of night j and the one after it) than the baseline
    median `med` the shift was measured from."""
    level = float(np.median(x[j:j + 2]))
    start = j
    while start - 1 >= t.min_nights and abs(x[start - 1] - level) < abs(x[start - 1] - med):
        start -= 1
    return start


def _band(med: float, limit: float) -> tuple[float, float]:
    return med - limit, med + limit


def flips(statuses: list[str]) -> int:
    """pass<->fail changes in a verdict sequence (skipped nights do not count)."""
    seen = [s == "pass" for s in statuses if s in ("pass", "fail", "error")]
    return sum(a != b for a, b in zip(seen, seen[1:], strict=False))


def judge(history: pd.DataFrame, thresholds: Callable[[str, str], Thresholds],
          flaky: FlakyRule) -> Judgement:
    """Judge every experiment and tracked metric of a history (rows of `history.SCHEMA`)."""
    nights = sorted(history["night"].unique().tolist()) if len(history) else []
    per_exp = history.drop_duplicates(["night", "experiment"])
    status = {(r.night, r.experiment): r.status for r in per_exp.itertuples()}
    reasons = {(r.night, r.experiment): r.reason or "" for r in per_exp.itertuples()}
    run_dirs = {(r.night, r.experiment): r.run_dir for r in per_exp.itertuples() if r.run_dir}
    commits = dict(zip(per_exp["night"], per_exp["commit"], strict=False))
    flaky_out = {}
    window = nights[-flaky.window:]
    for exp in sorted(per_exp["experiment"].unique()):
        k = flips([status.get((n, exp), "") for n in window])
        if k >= flaky.flips:
            flaky_out[exp] = k
    measured = history[history["metric"].notna() & history["value"].notna()]
    is_cov = measured["metric"].str.startswith(COVERAGE)
    coverage: dict[tuple[str, str], dict[str, float]] = {}
    for r in measured[is_cov].itertuples():
        coverage.setdefault((r.night, r.experiment), {})[r.metric[len(COVERAGE):]] = r.value
    series = []
    tracked = measured[~is_cov & (measured["status"] == "pass")]
    for (exp, metric), rows in tracked.groupby(["experiment", "metric"], sort=True):
        rows = rows.sort_values("night")
        series.append(judge_series(rows["value"].tolist(), rows["night"].tolist(),
                                   rows["commit"].tolist(), thresholds(exp, metric),
                                   str(rows["bad"].iloc[-1]), str(exp), str(metric)))
    return Judgement(nights, status, reasons, run_dirs, series, flaky_out, commits, coverage)
