"""Simulator speed: simulated protocol events (datagram arrivals, timers, broadcasts) per
wall-clock second, for the sequencer over reliable FIFO with every host sending.

    python -m bench.sim_speed [--hosts 5] [--rate 200] [--seconds 20]

Prints one comparable figure: events per wall-clock second.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from nodes.config import Member, NodeConfig, PathConfig, WorkloadConfig
from nodes.sim import SIM_EPOCH_NS, Simulator


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hosts", type=int, default=5)
    ap.add_argument("--rate", type=float, default=200.0, help="messages/s per host")
    ap.add_argument("--seconds", type=int, default=20, help="simulated workload length")
    args = ap.parse_args()
    names = [f"h{i + 1}" for i in range(args.hosts)]
    members = [Member(i, n, f"198.18.0.{i + 1}", 7000) for i, n in enumerate(names)]
    with tempfile.TemporaryDirectory() as tmp:
        configs = [NodeConfig(
            node_id=i, name=n, members=members, protocol="sequencer",
            params={"sequencer": "h1"}, log_path=str(Path(tmp) / n / "events.jsonl"), seed=1,
            start_at_ns=SIM_EPOCH_NS + 100_000_000, duration_ns=args.seconds * 10**9,
            drain_ns=10**9, workload=WorkloadConfig(True, args.rate, 1024, "poisson"),
            paths={j: PathConfig(delay_ns=5_000_000 + 1_000_000 * abs(i - j), jitter_ns=200_000)
                   for j in range(args.hosts) if j != i})
            for i, n in enumerate(names)]
        sim = Simulator(configs, seed=1)
        stats = sim.run(SIM_EPOCH_NS + (args.seconds + 2) * 10**9)
    print(f"{stats.events} events in {stats.wall_s:.2f} s wall for {stats.virtual_s:.0f} s "
          f"simulated: {stats.events_per_s:,.0f} events/s")


if __name__ == "__main__":
    main()
