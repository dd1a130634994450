"""001 §2.2, Figs. 2.2 and 2.3 on the simulator: throughput against send rate for
non-adaptive (one sequencer instance, never switching), adaptive (`live`, Fig. 2.1),
adaptive with payload once (`payload_once`, §2.2.1) and stop-the-flow (`stop`).

Set-up (001 §2.2.1): five nodes, full mesh, 100 Mbit/s per path, 0.1 ms one
way; every node sends 5,120-byte messages at a constant rate r; the adaptive runs switch
between two sequencer instances (both on h1: pure switching overhead) every `--period`
seconds. Throughput = messages delivered / (last delivery - first send), per node, averaged
over nodes (§2.2.1). The paper sends 5,000 messages per node; we send `--seconds` worth.

    python -m bench.switching_fig22 [--rates 100,200,400,600,800,1000,1200] [--seconds 3]
                                    [--period 0.25] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from analysis.record import read_record
from nodes.config import Member, NodeConfig, PathConfig, WorkloadConfig
from nodes.protocols.switching import Switching
from nodes.sim import SIM_EPOCH_NS, Simulator

SIZE = 5120
HOSTS = 5
VARIANTS: dict[str, tuple[str, dict[str, Any], bool]] = {
    # name: (protocol, params, switches)
    "non-adaptive": ("sequencer", {}, False),
    "adaptive": ("switching", {"mode": "live"}, True),
    "payload-once": ("switching", {"mode": "live", "payload_once": True}, True),
    "stop-the-flow": ("switching", {"mode": "stop"}, True),
}


def configs(protocol: str, params: dict[str, Any], rate: float, seconds: float,
            out: Path) -> list[NodeConfig]:
    names = [f"h{i + 1}" for i in range(HOSTS)]
    members = [Member(i, names[i], f"198.18.0.{i + 1}", 7000) for i in range(HOSTS)]
    path = PathConfig(100_000, 0, bandwidth_bps=100_000_000)
    return [NodeConfig(node_id=i, name=names[i], members=members, protocol=protocol,
                       params=dict(params), seed=1,
                       log_path=str(out / "nodes" / names[i] / "events.jsonl"),
                       start_at_ns=SIM_EPOCH_NS, duration_ns=round(seconds * 1e9),
                       drain_ns=10_000_000_000,
                       workload=WorkloadConfig(True, rate, SIZE, "constant"),
                       paths={j: path for j in range(HOSTS) if j != i})
            for i in range(HOSTS)]


def point(variant: str, rate: float, seconds: float, period: float) -> dict[str, Any]:
    protocol, params, switches = VARIANTS[variant]
    if protocol == "switching":
        params = {**params, "instances": [{"name": "a", "protocol": "sequencer"},
                                          {"name": "b", "protocol": "sequencer"}]}
    with tempfile.TemporaryDirectory() as tmp:
        cfgs = configs(protocol, params, rate, seconds, Path(tmp))
        sim = Simulator(cfgs, seed=1)
        if switches:
            def request() -> None:
                core = sim.cores[0]
                layer = core.protocol
                assert isinstance(layer, Switching)
                target = "b" if layer.current == "a" else "a"
                # refused while the previous switch is still draining: skip this period
                with contextlib.suppress(ValueError):
                    layer.request_switch(target, core.clock.local(sim.now))
            k = 1
            while k * period < seconds:
                sim.at(SIM_EPOCH_NS + round(k * period * 1e9), request)
                k += 1
        sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in cfgs))
        per_node, n_switches, undelivered = [], 0, 0
        expected = sum(1 for _ in range(int(rate * seconds))) * HOSTS
        for evs in read_record(Path(tmp)).events(("send", "fnl", "switch")).values():
            sends, fnl = [], []
            for e in evs:
                if e["ev"] == "send":
                    sends.append(e["t"])
                elif e["ev"] == "fnl":
                    fnl.append(e["t"])
                elif e["ev"] == "switch" and e.get("phase") == "end":
                    n_switches += 1
            per_node.append(len(fnl) / ((max(fnl) - min(sends)) / 1e9))
            undelivered += max(0, expected - len(fnl))
    return {"variant": variant, "rate": rate,
            "throughput": round(sum(per_node) / len(per_node), 1),
            "switches_per_node": n_switches // HOSTS, "undelivered": undelivered}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.switching_fig22", description=__doc__)
    parser.add_argument("--rates", default="100,200,400,600,800,1000,1200")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--period", type=float, default=0.25)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    variants = args.variants.split(",")
    print(f"{HOSTS} nodes, 100 Mbit/s paths, 0.1 ms, {SIZE} B, {args.seconds} s per point, "
          f"switch every {args.period} s; throughput in msgs/s delivered per node "
          "(all origins)")
    print(f"{'rate/node':>9} " + " ".join(f"{v:>14}" for v in variants))
    rows = []
    for rate in rates:
        cells = []
        for v in variants:
            p = point(v, rate, args.seconds, args.period)
            rows.append(p)
            cells.append(f"{p['throughput']:>9,.0f} ({p['switches_per_node']:>2})")
        print(f"{rate:>9,.0f} " + " ".join(f"{c:>14}" for c in cells), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
