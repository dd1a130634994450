"""Docker backend bring-up and teardown next to a plain `docker run` / `docker rm -f` loop, in
one run (root).

    python -m bench.docker_bringup [--hosts 10 30 100] [--repeat 1]

For each size N: `DockerBackend.up()` and `down()` on the first N/10 hosts of every region of
topologies/regions-100.yaml (10 regions, per-pair delays from the region matrix: N(N-1)
shaping classes; two networks, a sandbox and a node container per host, the shaping applied
in every host's namespace), and the same number N of `docker run -d --network none IMAGE
sleep infinity` one after the other with the same image, then `docker rm -f` of each, one
after the other. With --repeat, the order alternates (ours first, then the loop first) and the
medians are printed. Every line carries the load average when it was measured: the machine is
shared, so only the ratios of one run compare. Everything is removed after each measurement.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from testbed.backends.docker import DockerBackend
from testbed.engine import ensure_engine, stop_engine
from testbed.images import build
from testbed.rundir import RunDir
from testbed.spec.topology import TopologySpec

REGIONS = Path(__file__).resolve().parent.parent / "topologies" / "regions-100.yaml"


def regions(hosts: int) -> TopologySpec:
    """The first hosts/10 hosts of each region of regions-100 (all of it at 100)."""
    if hosts % 10 or not 10 <= hosts <= 100:
        raise SystemExit("--hosts takes multiples of 10 from 10 to 100 (ten regions)")
    spec = yaml.safe_load(REGIONS.read_text())
    seen: Counter[str] = Counter()
    kept = []
    for h in spec["hosts"]:
        if seen[h["site"]] < hosts // 10:
            kept.append(h)
            seen[h["site"]] += 1
    spec.update(name=f"regions-{hosts}", hosts=kept)
    return TopologySpec.model_validate(spec)


def backend(hosts: int, root: Path) -> tuple[float, float]:
    """Seconds for `up()` and for `down()`."""
    topo = regions(hosts)
    run = RunDir.create(root, f"bench{hosts}")
    be = DockerBackend(run, topo, topo.paths(), capture=None)
    began = time.perf_counter()
    try:
        be.up()
        up = time.perf_counter() - began
    finally:
        began = time.perf_counter()
        be.down()
    return up, time.perf_counter() - began


def plain_loop(hosts: int, image: str) -> tuple[float, float]:
    """Seconds for N `docker run` and for N `docker rm -f`, each one after the other."""
    names = [f"tbbench-{os.getpid()}-{i}" for i in range(hosts)]
    began = time.perf_counter()
    try:
        for name in names:
            subprocess.run(["docker", "run", "-d", "--name", name, "--network", "none",
                            "--label", "org.testbed.bench=1", image, "sleep", "infinity"],
                           check=True, capture_output=True)
        up = time.perf_counter() - began
    finally:
        began = time.perf_counter()
        for name in names:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    return up, time.perf_counter() - began


def load() -> float:
    return os.getloadavg()[0]


def measure(n: int, repeat: int, image: str, root: Path) -> dict[str, Any]:
    ours: list[tuple[float, float]] = []
    plain: list[tuple[float, float]] = []
    loads = []
    for r in range(repeat):
        steps = [lambda: ours.append(backend(n, root)),
                 lambda: plain.append(plain_loop(n, image))]
        for step in steps if r % 2 == 0 else reversed(steps):
            loads.append(load())
            step()
    med = statistics.median
    return {"hosts": n, "up": med(u for u, _ in ours), "down": med(d for _, d in ours),
            "run": med(u for u, _ in plain), "rm": med(d for _, d in plain),
            "load": (min(loads), max(loads))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, nargs="+", default=[10, 30, 100])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    for n in args.hosts:
        regions(n)  # a bad size fails before anything starts
    started = ensure_engine()
    try:
        image = build("auto")["tag"]
        print(f"image {image}; plain loop: `docker run -d --network none IMAGE sleep "
              "infinity` / `docker rm -f NAME`, one after the other", flush=True)
        print("| hosts | testbed up | plain run loop | up ratio | testbed down | plain rm loop "
              "| down ratio | load |\n|---:|---:|---:|---:|---:|---:|---:|---|", flush=True)
        with tempfile.TemporaryDirectory(prefix="tb-bench-") as d:
            for n in args.hosts:
                m = measure(n, args.repeat, image, Path(d))
                print(f"| {n} | {m['up']:.2f} s | {m['run']:.2f} s | {m['up'] / m['run']:.2f} "
                      f"| {m['down']:.2f} s | {m['rm']:.2f} s | {m['down'] / m['rm']:.2f} "
                      f"| {m['load'][0]:.1f}-{m['load'][1]:.1f} |", flush=True)
    finally:
        if started:
            stop_engine()


if __name__ == "__main__":
    main()
