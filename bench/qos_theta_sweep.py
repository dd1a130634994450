"""qos-vbr's price of a bound: the slot length Θ against dummy overhead and latency.

    python -m bench.qos_theta_sweep [--seconds 10] [--app-rate 10] [--svg PATH]

The tight set-up of experiments/qos-vbr.yaml (three hosts, Δ = 40 ms on h1 -> h2, 5 ms
elsewhere, Γ = 10 ms with offsets -Γ/2, 0, +Γ/2) with every host sending `--app-rate`
messages/s (Poisson, `max_burst` 10), for Θ from 5 to 80 ms. Every slot a process does not
fill ends with a DUMMY (004 Fig. 7), so the protocol's overhead is about 1/Θ messages/s per
process (Thm 3: NetAvgRate = AppAvgRate + 1/Θ); in return a message waits at most Θ (the
end of its slot at the slowest clock) on top of Δ+Γ: the bound Δ+Γ+Θ (Thm 2). The
"Θ trade-off" of 004 §5.3: latency against dummy overhead, a Pareto curve.

Prints a Markdown table (Θ, bound, overhead measured as (net - app) msgs/s per process and the
dummy share of the wire, max latency from the network send to the last delivery (what
analysis/qos.py judges), p50 and max application latency from `send`) and writes both charts
(latency against Θ, latency against overhead) to one SVG (default
docs/img/qos-theta-sweep.svg, linked from docs/benchmarks.md), drawn with analysis/plots.py.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path

from analysis import plots, qos
from analysis.record import read_record
from nodes.config import ClockConfig
from tests import protosim

# experiments/qos-vbr.yaml's matrix (ms) and clock offsets
TIGHT: list[list[float]] = [[0, 40, 5], [5, 0, 5], [5, 5, 0]]
OFFSETS_MS = (-5, 0, 5)
DELTA_MS, GAMMA_MS = 40, 10
THETAS_MS = (5, 10, 20, 40, 80)
ROOT = Path(__file__).resolve().parents[1]


def one(theta_ms: float, app_rate: float, seconds: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        params = {"delta": DELTA_MS, "gamma": GAMMA_MS, "theta": theta_ms, "avg": app_rate,
                  "max_burst": 10}
        cfgs = protosim.configs("qos-vbr", out, matrix_ms=TIGHT, jitter_ms=0, loss=0,
                                rate=app_rate, duration_s=seconds, drain_s=1, params=params)
        cfgs = [replace(c, clock=ClockConfig(round(o * 1e6)))
                for c, o in zip(cfgs, OFFSETS_MS, strict=True)]
        protosim.run(cfgs)
        events, skew = qos.read_events(read_record(out))
    section = qos.qos_section(events, skew, "qos-vbr", params, failures=False, sim=True)
    net = [e for evs in events.values() for e in evs if e["ev"] == "net"]
    dummies = sum(1 for e in net if e.get("kind") == "dummy")
    send = {e["mid"]: e["t"] for evs in events.values() for e in evs if e["ev"] == "send"}
    last: dict[str, int] = {}
    for evs in events.values():
        for e in evs:
            if e["ev"] == "fnl" and e["t"] > last.get(e["mid"], -1):
                last[e["mid"]] = e["t"]
    app = sorted(last[m] - t for m, t in send.items() if m in last)
    return {"bound_ms": section["bound_ms"], "max_ms": section["max_latency_ms"],
            "assumptions": section["assumptions_hold"], "overhead": section["overhead_rate"],
            "dummy_share": dummies / len(net), "app_p50_ms": app[len(app) // 2] / 1e6,
            "app_max_ms": app[-1] / 1e6, "messages": len(app)}


def chart(rows: dict[float, dict[str, float]]) -> str:
    thetas = sorted(rows)
    c = [plots.color(i) for i in range(3)]
    by_theta = plots.line_chart(
        "qos-theta-latency", "qos-vbr: latency against Θ (tight set-up, Δ=40, Γ=10 ms)",
        [plots.Series("bound Δ+Γ+Θ", thetas, [rows[t]["bound_ms"] for t in thetas], c[0],
                      dash=True),
         plots.Series("max, net send to last delivery", thetas,
                      [rows[t]["max_ms"] for t in thetas], c[1]),
         plots.Series("p50, send to last delivery", thetas,
                      [rows[t]["app_p50_ms"] for t in thetas], c[2])],
        xlabel="Θ (ms)", ylabel="latency (ms)", ymin=0)
    over = sorted(thetas, key=lambda t: rows[t]["overhead"])
    pareto = plots.line_chart(
        "qos-theta-pareto", "qos-vbr: max latency against dummy overhead (one point per Θ)",
        [plots.Series("max latency", [rows[t]["overhead"] for t in over],
                      [rows[t]["max_ms"] for t in over], c[1]),
         plots.Series("bound", [rows[t]["overhead"] for t in over],
                      [rows[t]["bound_ms"] for t in over], c[0], dash=True)],
        xlabel="overhead: network minus application msgs/s per process (≈ 1/Θ)",
        ylabel="latency (ms)", ymin=0)
    return plots.standalone([by_theta, pareto], "qos-vbr Θ sweep")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--app-rate", type=float, default=10.0)
    ap.add_argument("--svg", type=Path, default=ROOT / "docs" / "img" / "qos-theta-sweep.svg")
    args = ap.parse_args()
    print("| Θ ms | bound Δ+Γ+Θ ms | overhead msgs/s | dummy share | max ms (net to last "
          "fnl) | app p50 ms | app max ms |")
    print("|---|---|---|---|---|---|---|")
    rows: dict[float, dict[str, float]] = {}
    for theta in THETAS_MS:
        r = rows[theta] = one(theta, args.app_rate, args.seconds)
        print(f"| {theta} | {r['bound_ms']:g} | {r['overhead']:.2f} | {r['dummy_share']:.2f} | "
              f"{r['max_ms']:.3f} | {r['app_p50_ms']:.2f} | {r['app_max_ms']:.2f} |"
              + ("" if r["assumptions"] else " (assumptions violated)"))
    args.svg.parent.mkdir(parents=True, exist_ok=True)
    args.svg.write_text(chart(rows), encoding="utf-8")
    print(f"plot: {args.svg}")


if __name__ == "__main__":
    main()
