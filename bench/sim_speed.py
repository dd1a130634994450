"""Simulator speed as the real-time factor: simulated seconds per wall-clock second.

    python -m bench.sim_speed [--baseline-commit REV] [--repeat 2] [--profile]

(`--baseline-commit 6e9f135` is the simulator before its compiled hot path and speed-up;
docs/benchmarks.md "Simulation speed".)

Three cases, the sequencer over reliable FIFO, every host sending 1 KiB messages (Poisson
arrivals):

- 5 hosts (one per region of topologies/five-regions.yaml) x 200 msgs/s each, 10 s of
  workload;
- 30 hosts (six per region of five-regions, on a zero-delay site LAN) x 100 msgs/s each, 4 s
  of workload;
- 100 hosts in ten regions (topologies/regions-100.yaml, per-pair delays from its region
  matrix) x 10 msgs/s each, 4 s of workload: the same total rate as 30x100 divided, but a
  fan-out of 99 and a failure detector among 100 members.

Each case is one process running `nodes.sim.run_sim_file` on the sim.json the sim backend
would write, timed around that call (not the imports). The real-time factor is simulated
seconds / wall seconds: above 1 the simulation runs faster than real time. It is printed
against CPU seconds too, which a loaded machine (other processes on the same cores) disturbs
far less than the wall clock.

Each case runs twice on this tree: on the compiled hot path (nodes/fastpath.py; built by
`make venv` or `python -m nodes.fastpath build`; the rows say which path actually ran) and
on pure Python (`TESTBED_PURE_PYTHON=1`).
With `--baseline-commit REV` the same cases run, interleaved and in the same invocation,
against the simulator of commit REV (checked out with `git worktree add --detach` into a
temporary directory that is removed afterwards), and the ratios compiled/baseline and
pure/baseline are printed: figures that travel between machines. It also says whether they
wrote byte-identical delivery logs (a pure speed change must). With `--repeat N` each figure
is the run with the least CPU time of N.
`--profile` prints the simulator's cProfile top entries (own and cumulative time) per case.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from nodes.config import SIM_EPOCH_NS, Member, NodeConfig, PathConfig, WorkloadConfig
from testbed.spec.topology import TopologySpec, reduce_topology

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGY = ROOT / "topologies" / "five-regions.yaml"
# (hosts, msgs/s per host, simulated workload seconds)
CASES = {"5x200": (5, 200.0, 10), "30x100": (30, 100.0, 4), "100x10": (100, 10.0, 4)}
# A case on another topology than TOPOLOGY (which it takes whole).
TOPOLOGIES = {"100x10": ROOT / "topologies" / "regions-100.yaml"}
START_NS = 100_000_000  # the workload starts this long after the simulator's epoch
DRAIN_NS = 1_000_000_000


def topology(hosts: int, path: Path = TOPOLOGY) -> TopologySpec:
    """The topology at `path` (five-regions) with `hosts` hosts spread round-robin over its
    sites (as it is when it has that many)."""
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    sites = list(data["sites"])
    if hosts == len(data["hosts"]):
        return TopologySpec.model_validate(data)
    data["hosts"] = [{"name": f"{sites[i % len(sites)]}{i // len(sites) + 1}",
                      "site": sites[i % len(sites)]} for i in range(hosts)]
    return TopologySpec.model_validate(data)


def sim_spec(hosts: int, rate: float, seconds: int, logs: Path,
             path: Path = TOPOLOGY) -> dict[str, Any]:
    matrix = reduce_topology(topology(hosts, path))
    names = matrix.hosts
    members = [Member(i, n, f"198.18.0.{i + 1}", 7000) for i, n in enumerate(names)]
    configs = [NodeConfig(
        node_id=i, name=n, members=members, protocol="sequencer",
        params={"sequencer": names[0]}, log_path=str(logs / n / "events.jsonl"), seed=1,
        start_at_ns=SIM_EPOCH_NS + START_NS, duration_ns=seconds * 10**9, drain_ns=DRAIN_NS,
        workload=WorkloadConfig(True, rate, 1024, "poisson"),
        paths={j: PathConfig(p.delay_ns, p.jitter_ns, p.distribution, p.loss, p.bandwidth_bps)
               for j, m in enumerate(names) if m != n
               for p in [matrix.get(n, m)]})
        for i, n in enumerate(names)]
    return {"seed": 1, "t0_ns": SIM_EPOCH_NS, "nodes": [_lean(c) for c in configs]}


def _lean(cfg: NodeConfig) -> dict[str, Any]:
    """The config without fields left at their defaults, so that a baseline commit whose
    NodeConfig lacks a newer field still reads it."""
    d = cfg.to_dict()
    for f in dataclasses.fields(NodeConfig):
        if f.default is not dataclasses.MISSING and d.get(f.name) == _plain(f.default):
            del d[f.name]
    workload = d.get("workload")
    if isinstance(workload, dict):  # likewise a WorkloadConfig field newer than the baseline
        for f in dataclasses.fields(WorkloadConfig):
            if f.default is not dataclasses.MISSING and workload.get(f.name) == _plain(f.default):
                del workload[f.name]
    return d


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def run_case(tree: Path, spec: dict[str, Any], work: Path, profile: bool = False,
             pure: bool = False) -> dict[str, Any]:
    """One simulator process on the `nodes/` of `tree` (its `nodes.sim.run_sim_file`, the sim
    backend's entry point), on the compiled hot path where `tree` has one built
    (nodes/fastpath.py) unless `pure`; returns its statistics with the wall and CPU time of
    the run and whether the compiled path ran."""
    for old in work.glob("logs/*/events.jsonl"):
        old.unlink()  # a restarted log appends; every run starts from empty logs
    config = work / "sim.json"
    config.write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("TESTBED_PURE_PYTHON", None)
    if pure:
        env["TESTBED_PURE_PYTHON"] = "1"
    out = subprocess.run([sys.executable, "-c", CHILD, str(config), "1" if profile else ""],
                         env=env, cwd=work, check=False, capture_output=True, text=True)
    if out.returncode != 0:
        tail = out.stderr.strip().splitlines()[-1:] or ["no output"]
        sys.exit(f"the simulator of {tree} failed: {tail[0]}")
    lines = out.stdout.strip().splitlines()
    if profile:
        print("\n".join(line for line in lines[:-1] if line.strip()))
    stats: dict[str, Any] = json.loads(lines[-1])
    digest = hashlib.sha256()
    for log in sorted(work.glob("logs/*/events.jsonl")):
        digest.update(log.parent.name.encode() + log.read_bytes())
    stats["logs_sha256"] = digest.hexdigest()
    return stats


# Runs in the tree under test: only `nodes.sim.run_sim_file`, which every version has, and
# the compiled hot path's loader where the tree has one.
CHILD = """
import cProfile, json, pstats, sys, time
from pathlib import Path
try:
    from nodes.fastpath import activate
    compiled = activate(quiet=True)
except ImportError:
    compiled = False
from nodes.sim import run_sim_file
prof = cProfile.Profile() if sys.argv[2] else None
wall, cpu = time.perf_counter(), time.process_time()
stats = prof.runcall(run_sim_file, Path(sys.argv[1])) if prof else run_sim_file(Path(sys.argv[1]))
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
if prof:
    for key in ("tottime", "cumulative"):
        pstats.Stats(prof, stream=sys.stdout).sort_stats(key).print_stats(15)
print(json.dumps({"compiled": compiled, "events": stats.events, "wall_s": wall, "cpu_s": cpu,
                  "virtual_s": stats.virtual_s}))
"""


@contextmanager
def checkout(commit: str) -> Iterator[Path]:
    """A detached worktree of `commit` in a temporary directory, removed afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="sim-baseline-"))
    tree = tmp / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), commit],
                   check=True, capture_output=True)
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                       check=False, capture_output=True)
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"load average {load:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline-commit", help="also run this commit's simulator; print ratios")
    ap.add_argument("--repeat", type=int, default=1, help="best of N runs per figure")
    ap.add_argument("--case", choices=sorted(CASES), action="append",
                    help="run only this case (repeatable); default: all")
    ap.add_argument("--profile", action="store_true", help="print cProfile top entries")
    args = ap.parse_args()
    cases = args.case or list(CASES)
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="sim-speed-") as tmp:
        work = Path(tmp)
        specs = {c: sim_spec(*CASES[c], work / "logs", TOPOLOGIES.get(c, TOPOLOGY))
                 for c in cases}
        # label -> (tree, pure): this tree on its compiled hot path and on pure Python.
        trees: dict[str, tuple[Path, bool]] = {"compiled": (ROOT, False), "pure": (ROOT, True)}
        with (checkout(args.baseline_commit) if args.baseline_commit
              else _none()) as base:
            if base is not None:
                trees["baseline"] = (base, True)
            best: dict[tuple[str, str], dict[str, Any]] = {}
            for _ in range(max(1, args.repeat)):
                for case in cases:
                    for label, (tree, pure) in trees.items():  # interleaved: same load for all
                        if args.profile:
                            print(f"--- profile: {label} {case}")
                        s = run_case(tree, specs[case], work, args.profile, pure)
                        key = (label, case)
                        if key not in best or s["cpu_s"] < best[key]["cpu_s"]:
                            best[key] = s
    if not best[("compiled", cases[0])]["compiled"]:
        print("note: no compiled hot path for these sources (`python -m nodes.fastpath build`):"
              " the 'compiled' rows ran pure Python")
    for case in cases:
        hosts, rate, seconds = CASES[case]
        print(f"{hosts} hosts x {rate:.0f} msgs/s, {seconds} s workload:")
        for label in trees:
            s = best[(label, case)]
            ran = "compiled" if s.get("compiled") else "pure"
            print(f"  {label:8s} ({ran:8s}) real-time factor {s['virtual_s'] / s['wall_s']:5.2f} "
                  f"wall, {s['virtual_s'] / s['cpu_s']:5.2f} CPU ({s['virtual_s']:.1f} s simulated "
                  f"in {s['wall_s']:.2f} s wall, {s['cpu_s']:.2f} s CPU; {s['events']:,} events, "
                  f"{s['events'] / s['cpu_s']:,.0f} per CPU s)")
        if "baseline" in trees:
            b = best[("baseline", case)]
            for label in ("compiled", "pure"):
                n = best[(label, case)]
                same = "identical" if b["logs_sha256"] == n["logs_sha256"] else "DIFFERENT"
                print(f"  ratio {label}/baseline: {b['wall_s'] / n['wall_s']:.2f} wall, "
                      f"{b['cpu_s'] / n['cpu_s']:.2f} CPU (target: >= 2); delivery logs "
                      f"{same}")
        if case in ("30x100", "100x10"):
            for label in ("compiled", "pure"):
                n = best[(label, case)]
                print(f"  {label}: faster than real time (target): "
                      f"{'yes' if n['virtual_s'] > n['wall_s'] else 'no'} by wall clock "
                      f"({n['virtual_s'] / n['wall_s']:.2f}), "
                      f"{'yes' if n['virtual_s'] > n['cpu_s'] else 'no'} by CPU time "
                      f"({n['virtual_s'] / n['cpu_s']:.2f})")


@contextmanager
def _none() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    main()
