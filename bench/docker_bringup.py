"""Docker backend bring-up time next to a plain loop of `docker run` (root).

    python -m bench.docker_bringup [--hosts 10 30]

For each size: `DockerBackend.up()` on a one-site topology (two networks, a netns container
and a node container per host, shaping applied in every host's namespace, fixed addresses),
then the same number of `docker run -d --network none IMAGE sleep infinity` one after the other
with the same image. One run each; prints seconds and the ratio. Everything is removed after.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

from testbed.backends.docker import DockerBackend
from testbed.engine import ensure_engine, stop_engine
from testbed.images import build
from testbed.rundir import RunDir
from testbed.spec.loader import load_topology


def backend_up(hosts: int, root: Path) -> float:
    spec = root / f"flat{hosts}.yaml"
    spec.write_text(f"name: flat{hosts}\nsites: {{s: {{lan: {{delay: 1ms}}}}}}\nhosts:\n"
                    + "".join(f"  - {{name: h{i + 1}, site: s}}\n" for i in range(hosts)))
    topo = load_topology(spec)
    run = RunDir.create(root, f"bench{hosts}")
    backend = DockerBackend(run, topo, topo.paths(), capture=None)
    began = time.perf_counter()
    try:
        backend.up()
        return time.perf_counter() - began
    finally:
        backend.down()


def plain_loop(hosts: int, image: str) -> float:
    names = [f"tbbench-{i}" for i in range(hosts)]
    began = time.perf_counter()
    try:
        for name in names:
            subprocess.run(["docker", "run", "-d", "--name", name, "--network", "none",
                            "--label", "org.testbed.bench=1", image, "sleep", "infinity"],
                           check=True, capture_output=True)
        return time.perf_counter() - began
    finally:
        subprocess.run(["docker", "rm", "-f", *names], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, nargs="+", default=[10, 30])
    args = parser.parse_args()
    started = ensure_engine()
    try:
        image = build("auto")["tag"]
        with tempfile.TemporaryDirectory(prefix="tb-bench-") as d:
            for n in args.hosts:
                up = backend_up(n, Path(d))
                loop = plain_loop(n, image)
                print(f"hosts={n:3d}  testbed docker up {up:6.2f} s  plain docker run loop "
                      f"{loop:6.2f} s  ratio {up / loop:4.2f}  ({image})", flush=True)
    finally:
        if started:
            stop_engine()


if __name__ == "__main__":
    main()
