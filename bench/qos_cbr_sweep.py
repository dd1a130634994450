"""qos-cbr's price of a bound: the reserved rate against dummy overhead and latency.

    python -m bench.qos_cbr_sweep [--seconds 10] [--app-rate 10]

The tight set-up of experiments/qos-cbr.yaml (Δ = 40 ms, Γ = 10 ms, offsets ±Γ/2) with an
application sending `--app-rate` messages/s (Poisson) per host, for a range of reserved CBR
rates r. Every tick that finds no message carries a DUMMY (004 §4.4: "dummies cost
load, not reservation"), so the dummy share of the wire is 1 - app/r; in return a message
waits less for its tick (at most 1/r) before the Δ+Γ the network part is bounded by.
Prints a Markdown table: r, dummy share, max network-part latency (tick to last delivery,
never above Δ+Γ = 50 ms), p50 and max application latency (send to last delivery).
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path

from analysis import qos
from analysis.record import read_record
from nodes.config import ClockConfig
from tests import protosim

TIGHT: list[list[float]] = [[0, 10, 40], [10, 0, 10], [10, 10, 0]]


def one(rate: int, app_rate: float, seconds: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        cfgs = protosim.configs("qos-cbr", out, matrix_ms=TIGHT, jitter_ms=0, loss=0,
                                rate=app_rate, duration_s=seconds, drain_s=1,
                                params={"delta": 40, "gamma": 10, "rate": rate})
        cfgs = [replace(c, clock=ClockConfig(round(o * 1e6)))
                for c, o in zip(cfgs, (-5, 5, 0), strict=True)]
        protosim.run(cfgs)
        events, _ = qos.read_events(read_record(out))
    net = [e for evs in events.values() for e in evs if e["ev"] == "net"]
    dummies = sum(1 for e in net if e.get("kind") == "dummy")
    tick = qos.latencies(events)
    # messages sent before the common epoch E (start + epoch_ms) wait for it: left out
    warm = protosim.SIM_EPOCH_NS + 200_000_000
    send = {e["mid"]: e["t"] for evs in events.values() for e in evs
            if e["ev"] == "send" and e["t"] >= warm}
    app = sorted(max(e["t"] for evs in events.values() for e in evs
                     if e["ev"] == "fnl" and e["mid"] == m) - t for m, t in send.items()
                 if m in tick)
    return {"dummy_share": dummies / len(net), "tick_max_ms": max(tick.values()) / 1e6,
            "app_p50_ms": app[len(app) // 2] / 1e6, "app_max_ms": app[-1] / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--app-rate", type=float, default=10.0)
    args = ap.parse_args()
    print("| r (msgs/s) | dummy share | tick to delivery max ms | app p50 ms | app max ms |")
    print("|---|---|---|---|---|")
    for rate in (15, 25, 50, 100, 200, 400):
        r = one(rate, args.app_rate, args.seconds)
        print(f"| {rate} | {r['dummy_share']:.2f} | {r['tick_max_ms']:.3f} | "
              f"{r['app_p50_ms']:.2f} | {r['app_max_ms']:.2f} |")


if __name__ == "__main__":
    main()
