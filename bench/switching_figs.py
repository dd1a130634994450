"""001 Figs. 2.4-2.9 on our stack: latency, inter-delivery time and deliveries per 10 ms over
time, live switching (Fig. 2.1) against RABP, switch windows shaded.

Runs experiments/switching-wan-live.yaml and switching-wan-rabp.yaml (simulator, five-region
WAN, 50 msgs/s per host, a switch every second between sequencers on virginia and frankfurt)
and draws, for a few seconds of each (`--from`, `--to`), three charts per mode at one node
(`--node`): per-message final-delivery latency (Figs. 2.4/2.5), the time between consecutive
deliveries (2.6/2.7), deliveries per 10 ms bin (2.8/2.9). The switch windows (first `start`
to last `end` of an epoch over the nodes) are shaded. Writes docs/img/switching-figs.svg
(docs/benchmarks.md "Switching total order at run time") and prints the numbers it quotes: per
mode, inside the switch windows (and 400 ms after each) against outside, the latency p50 and
max, the largest inter-delivery gap and the empty 10 ms bins.

    python -m bench.switching_figs [--node oregon] [--from 4] [--to 9]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from analysis import plots
from analysis.record import read_record
from analysis.switching import switch_windows

ROOT = Path(__file__).resolve().parents[1]
MODES = (("live", "switching-wan-live"), ("rabp", "switching-wan-rabp"))
BIN_NS = 10_000_000
AFTER_NS = 400_000_000  # a window's aftermath: more than the WAN's largest TO latency


def run(name: str, out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "testbed", "run", str(ROOT / "experiments" /
                    f"{name}.yaml"), "--out", str(out), "--no-analyze"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    return next(out.iterdir())


def deliveries(run_dir: Path, node: str | None = None) -> tuple[
        int, dict[str, int], list[tuple[int, str]], list[dict[str, Any]]]:
    """A run's delivery logs read once: (t0, send time per message id, [(fnl t, id)] at
    `node` (every node if None) in time order, the switch requests) -- what
    bench/switching_policy.py reads too."""
    sends: dict[str, int] = {}
    fnl: list[tuple[int, str]] = []
    requests: list[dict[str, Any]] = []
    t0 = None
    for evs in read_record(run_dir).events(("start", "send", "fnl", "switch")).values():
        for e in evs:
            if e["ev"] == "start":
                t0 = e["t"] if t0 is None else min(t0, e["t"])
            elif e["ev"] == "send":
                sends[e["mid"]] = e["t"]
            elif e["ev"] == "fnl" and (node is None or e["node"] == node):
                fnl.append((e["t"], e["mid"]))
            elif e["ev"] == "switch" and e.get("phase") == "request":
                requests.append(e)
    assert t0 is not None
    fnl.sort()
    return t0, sends, fnl, requests


def series(run_dir: Path, node: str) -> tuple[int, list[tuple[int, int]],
                                               list[tuple[int, int]]]:
    """(t0, [(delivery t, latency ns)] at `node`, switch windows [(start, end)])."""
    t0, sends, fnl, _ = deliveries(run_dir, node)
    windows = switch_windows(read_record(run_dir))
    return t0, [(t, t - sends[m]) for t, m in fnl], sorted(windows.values())


def stats(dl: list[tuple[int, int]], windows: list[tuple[int, int]], lo: int,
          hi: int) -> dict[str, dict[str, float]]:
    """Inside the switch windows (each padded by `AFTER_NS` after its end: RABP's re-issued
    messages are delivered up to a TO latency after its window) and outside."""
    def inside(t: int) -> bool:
        return any(a <= t <= b + AFTER_NS for a, b in windows)

    out: dict[str, dict[str, float]] = {}
    times = [t for t, _ in dl if lo <= t < hi]
    gaps = [(b, b - a) for a, b in zip(times, times[1:], strict=False)]
    bins: dict[int, int] = {}
    for t in times:
        bins[(t - lo) // BIN_NS] = bins.get((t - lo) // BIN_NS, 0) + 1
    for label, keep in (("in", True), ("out", False)):
        lat = sorted(x for t, x in dl if lo <= t < hi and inside(t) == keep)
        g = [x for t, x in gaps if inside(t) == keep]
        b = [bins.get(k, 0) for k in range((hi - lo) // BIN_NS)
             if inside(lo + k * BIN_NS) == keep]
        out[label] = {"lat_p50_ms": lat[len(lat) // 2] / 1e6 if lat else 0.0,
                      "lat_max_ms": lat[-1] / 1e6 if lat else 0.0,
                      "gap_max_ms": max(g) / 1e6 if g else 0.0,
                      "empty_bins": sum(1 for x in b if x == 0), "bins": len(b)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--node", default="oregon")
    ap.add_argument("--from", dest="lo", type=float, default=4.0)
    ap.add_argument("--to", dest="hi", type=float, default=9.0)
    ap.add_argument("--svg", type=Path, default=ROOT / "docs" / "img" / "switching-figs.svg")
    args = ap.parse_args()
    charts: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, (mode, name) in enumerate(MODES):
            t0, dl, windows = series(run(name, Path(tmp) / mode), args.node)
            lo, hi = t0 + round(args.lo * 1e9), t0 + round(args.hi * 1e9)
            s = stats(dl, windows, lo, hi)
            print(f"{mode}: in switch windows: latency p50 {s['in']['lat_p50_ms']:.0f} ms, "
                  f"max {s['in']['lat_max_ms']:.0f} ms, largest inter-delivery gap "
                  f"{s['in']['gap_max_ms']:.0f} ms, empty 10 ms bins {s['in']['empty_bins']} "
                  f"of {s['in']['bins']}; outside: p50 {s['out']['lat_p50_ms']:.0f} ms, max "
                  f"{s['out']['lat_max_ms']:.0f} ms, gap {s['out']['gap_max_ms']:.0f} ms, "
                  f"empty bins {s['out']['empty_bins']} of {s['out']['bins']}")

            def sec(t: int, t0: int = t0) -> float:
                return (t - t0) / 1e9

            bands = [plots.Band(sec(a), sec(b), "switch", "switch") for a, b in windows
                     if b >= lo and a <= hi]
            window = [(t, x) for t, x in dl if lo <= t < hi]
            times = [t for t, _ in window]
            c = plots.color(k)
            rng = (args.lo, args.hi)
            charts.append(plots.line_chart(
                f"sw-lat-{mode}", f"{mode}: final-delivery latency at {args.node} "
                f"(001 Fig. {'2.4' if mode == 'live' else '2.5'})",
                [plots.Series(f"{mode}: latency", [sec(t) for t in times],
                              [x / 1e6 for _, x in window], c, dots=True)],
                xlabel="s", ylabel="ms", x_range=rng, bands=bands, ymin=0, height=200))
            charts.append(plots.line_chart(
                f"sw-gap-{mode}", f"{mode}: time between deliveries at {args.node} "
                f"(001 Fig. {'2.6' if mode == 'live' else '2.7'})",
                [plots.Series(f"{mode}: time between deliveries", [sec(t) for t in times[1:]],
                              [(b - a) / 1e6 for a, b in zip(times, times[1:], strict=False)],
                              c, dots=True)],
                xlabel="s", ylabel="ms", x_range=rng, bands=bands, ymin=0, height=200))
            nbins = (hi - lo) // BIN_NS
            counts = [0] * nbins
            for t in times:
                counts[(t - lo) // BIN_NS] += 1
            charts.append(plots.line_chart(
                f"sw-bins-{mode}", f"{mode}: deliveries per 10 ms at {args.node} "
                f"(001 Fig. {'2.8' if mode == 'live' else '2.9'})",
                [plots.Series(f"{mode}: deliveries per 10 ms", [args.lo + i * BIN_NS / 1e9 for i in
                                             range(nbins)], [float(n) for n in counts], c)],
                xlabel="s", ylabel="per 10 ms", x_range=rng, bands=bands, ymin=0,
                height=200))
    order = [0, 3, 1, 4, 2, 5]  # live and rabp of each figure pair one above the other
    args.svg.parent.mkdir(parents=True, exist_ok=True)
    args.svg.write_text(plots.standalone([charts[i] for i in order],
                                         "001 Figs. 2.4-2.9: live switching against RABP"),
                        encoding="utf-8")
    print(f"plot: {args.svg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
