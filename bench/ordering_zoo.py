"""The ordering zoo: experiments/ordering-zoo.yaml once per protocol of the catalogue, on the
in-process simulator, judged by the full analysis (Spark checker suite and latency).

    python -m bench.ordering_zoo [--seconds 10] [--protocols a,b,...]

Prints a Markdown table: each protocol's claims, the violations every check found (claimed
ones must be 0; unclaimed ones show what the protocol does not promise, e.g. causal order
under plain reliable FIFO on the triangle) and the final-delivery latency p50/p99 over all
(sender, receiver) pairs.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from analysis.job import analyze
from analysis.record import read_record
from nodes.protocols import catalogue
from nodes.sim import SIM_EPOCH_NS, Simulator
from testbed.backends.base import HostAddress
from testbed.deploy import node_configs
from testbed.spec.loader import load_experiment

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "experiments" / "ordering-zoo.yaml"
CHECKS = ("total_order", "fifo_order", "causal_order", "agreement", "integrity", "validity")
SHORT = {"total_order": "total", "fifo_order": "FIFO", "causal_order": "causal",
         "agreement": "agree", "integrity": "integ", "validity": "valid"}


def run_one(name: str, seconds: float, out: Path) -> dict[str, Any]:
    exp, topo = load_experiment(SPEC)
    exp = exp.model_copy(update={"protocol": exp.protocol.model_copy(
        update={"name": name, "params": {}})})
    paths = topo.paths()
    addresses = {h: HostAddress(f"198.18.0.{i + 1}", 7000, "127.0.0.1")
                 for i, h in enumerate(paths.hosts)}
    configs = node_configs(exp, topo, paths, addresses, out, SIM_EPOCH_NS, True,
                           duration_ns=round(seconds * 1e9))
    sim = Simulator(configs, seed=exp.seed)
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in configs))
    return analyze(read_record(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--protocols", default=",".join(catalogue.names()))
    args = ap.parse_args()
    rows = []
    for name in args.protocols.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            summary = run_one(name, args.seconds, Path(tmp) / "run")
        checks = summary["checks"]
        cells = []
        for c in CHECKS:
            v, claimed = checks[c]["violations"], checks[c]["claimed"]
            cells.append(f"**{v}**" if claimed else f"({v})")
        lat = summary["latency"]["fnl"].get("all", {})
        claims = ", ".join(SHORT[c] for c in CHECKS if catalogue.get(name).claims_check(c))
        verdict = "PASS" if summary["ok"] else "FAIL"
        rows.append(f"| `{name}` | {claims} | " + " | ".join(cells) +
                    f" | {lat.get('p50_ms', float('nan')):.1f} | "
                    f"{lat.get('p99_ms', float('nan')):.1f} | {verdict} |")
    print(f"ordering zoo: {SPEC.name}, {args.seconds:g} s per protocol; **claimed**, (unclaimed)")
    print("| protocol | claims | " + " | ".join(SHORT[c] for c in CHECKS)
          + " | p50 ms | p99 ms | run |")
    print("|---|---|" + "---|" * len(CHECKS) + "---|---|---|")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
