"""Control traffic of an idle group: datagrams per second the nodes send when (almost)
nothing is multicast, on the simulator (deterministic: a count, not a timing).

    python -m bench.idle_control [--hosts 10 25 50 100] [--protocol sequencer] [--seconds 10]

Each group is `hosts` hosts on one 0.5 ms LAN running the protocol with its default
parameters (the failure detector's included); one host multicasts one 64-byte message every
ten seconds, the others nothing, for `seconds` of workload and a 1 s drain. The figure is every
datagram the simulator carried divided by the simulated seconds, in all and per member
(docs/benchmarks.md "Idle control traffic").
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from testbed.explore.case import Base, Case, materialise, simulate


def idle_spec(hosts: int, protocol: str, seconds: int) -> dict[str, Any]:
    """The spec data of an idle group of `hosts` on one LAN (topology inline)."""
    names = [f"h{i + 1}" for i in range(hosts)]
    return {
        "name": f"idle-{hosts}",
        "topology": {"name": f"lan-{hosts}", "sites": {"lan": {"lan": {"delay": "0.5ms"}}},
                     "hosts": [{"name": n, "site": "lan"} for n in names]},
        "backend": "sim",
        "duration": f"{seconds}s",
        "drain": "1s",
        "seed": 1,
        "protocol": {"name": protocol},
        "workload": {"senders": [names[0]], "rate": "0.1/s", "size": "64B"},
    }


def idle_datagrams(hosts: int, protocol: str = "sequencer", seconds: int = 10,
                   root: Path | None = None) -> dict[str, Any]:
    """Simulate the idle group; its datagram count and rate (per simulated second)."""
    base = Base.from_data(idle_spec(hosts, protocol, seconds))
    exp, topo = materialise(base, Case(1))
    with tempfile.TemporaryDirectory() as tmp:
        _, stats = simulate(exp, topo, root or Path(tmp), max_events=0, max_wall_s=0)
    per_s = stats["datagrams"] / stats["virtual_s"]
    return {"hosts": hosts, "datagrams": stats["datagrams"], "virtual_s": stats["virtual_s"],
            "per_s": per_s, "per_member_per_s": per_s / hosts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.idle_control", description=__doc__)
    parser.add_argument("--hosts", type=int, nargs="+", default=[10, 25, 50, 100])
    parser.add_argument("--protocol", default="sequencer")
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args(argv)
    print("| hosts | datagrams | simulated s | datagrams/s | per member/s |")
    print("|---:|---:|---:|---:|---:|")
    for n in args.hosts:
        r = idle_datagrams(n, args.protocol, args.seconds)
        print(f"| {n} | {r['datagrams']:,} | {r['virtual_s']:.1f} | {r['per_s']:,.0f} | "
              f"{r['per_member_per_s']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
