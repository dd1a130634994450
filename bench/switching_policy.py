"""Latency per workload phase for the switching policy against each protocol alone
(beyond 001's evaluation; 001 ch. 2 is the claim it tests).

Runs experiments/switching-policy.yaml (switching with `adapt_to_all: lam`, `adapt_to_one:
seq`), switching-policy-sequencer.yaml and switching-policy-lamport.yaml on the simulator (the
five-region WAN, one sender saopaulo, all five from 10 s to 20 s, then saopaulo alone again)
and prints, per run and phase (by the message's send time), the mean and p99 of final
delivery minus send over every node, plus the policy's switch times, as a Markdown table.

    python -m bench.switching_policy
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from bench.switching_figs import deliveries

ROOT = Path(__file__).resolve().parents[1]
RUNS = (("sequencer only", "switching-policy-sequencer"),
        ("lamport only", "switching-policy-lamport"),
        ("policy (switching)", "switching-policy"))
PHASES = (("one sender, 0-10 s", 0, 10), ("all five, 10-20 s", 10, 20),
          ("one sender, 20-30 s", 20, 30))


def run(name: str, out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "testbed", "run", str(ROOT / "experiments" /
                    f"{name}.yaml"), "--out", str(out), "--no-analyze"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    return next(out.iterdir())


def phases(run_dir: Path) -> tuple[dict[str, tuple[float, float, int]], list[str]]:
    """phase -> (mean ms, p99 ms, deliveries); the policy's switches as 'to@t s'."""
    t0, sends, fnl, switches = deliveries(run_dir)
    out = {}
    for label, lo, hi in PHASES:
        lat = sorted((t - sends[m]) / 1e6 for t, m in fnl
                     if lo <= (sends[m] - t0) / 1e9 < hi)
        out[label] = (sum(lat) / len(lat), lat[int(0.99 * (len(lat) - 1))], len(lat))
    return out, [f"{e['to']} at {(e['t'] - t0) / 1e9:.2f} s ({e.get('reason')})"
                 for e in switches]


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for label, name in RUNS:
            got, sw = phases(run(name, Path(tmp) / name))
            rows.append((label, got, sw))
    print("| run | " + " | ".join(p for p, _, _ in PHASES) + " |")
    print("|---|" + "---|" * len(PHASES))
    for label, got, _ in rows:
        print(f"| {label} | " + " | ".join(f"{got[p][0]:.0f} ms (p99 {got[p][1]:.0f})"
                                           for p, _, _ in PHASES) + " |")
    for label, _, sw in rows:
        if sw:
            print(f"\n{label}: switch requests: {'; '.join(sw)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
