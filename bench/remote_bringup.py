"""Remote backend bring-up (shape + start, prepare excluded) on a lab of SSH hosts next to the
docker backend's bring-up (up + deploy) of the same hosts, in one run (root). Target <= 3x
(docs/remote.md, "Cost model").

    sudo .venv/bin/python -m bench.remote_bringup [--hosts 4 8]

For each size: `testbed lab up --hosts N` (untimed), RemoteBackend prepare and clocks
(untimed), then timed: the shape playbook and deploy (start playbook + every node's
management endpoint fetched); then DockerBackend up() + deploy() of the same two-site topology
(capture off in both). Nodes run a short idle workload and everything is torn down after.
Prints seconds for both and the ratio; docs/remote.md keeps the figures.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from testbed.backends.docker import DockerBackend
from testbed.backends.remote import RemoteBackend
from testbed.deploy import node_configs, security
from testbed.lab import down as lab_down
from testbed.lab import up as lab_up
from testbed.rundir import RunDir
from testbed.spec.loader import load_experiment, load_topology
from testbed.teardown import teardown

ROOT = Path(__file__).resolve().parents[1]


def topology(hosts: int, root: Path) -> Path:
    spec = root / f"two{hosts}.yaml"
    spec.write_text(f"name: two{hosts}\nsites: {{a: {{lan: {{delay: 0.5ms}}}}, "
                    "b: {lan: {delay: 0.5ms}}}\nwan: [{between: [a, b], delay: 10ms}]\nhosts:\n"
                    + "".join(f"  - {{name: h{i + 1}, site: {'a' if i < hosts // 2 else 'b'}}}\n"
                              for i in range(hosts)))
    return spec


def experiment(topo: Path, root: Path) -> Path:
    spec = (ROOT / "experiments" / "quickstart.yaml").read_text()
    spec = spec.replace("../topologies/two-sites.yaml", str(topo)).replace("duration: 20s",
                                                                          "duration: 2s")
    path = root / f"exp-{topo.stem}.yaml"
    path.write_text(spec)
    return path


def timed(backend: RemoteBackend | DockerBackend, exp_path: Path, remote: bool) -> float:
    exp, topo = load_experiment(exp_path, None)
    paths = topo.paths()
    if remote:
        assert isinstance(backend, RemoteBackend)
        backend.up()  # prepare (untimed) + clocks + shape; shape's time is in the journal
        steps = [e for e in backend.run.journal.entries() if e.get("step") == "shape"]
        shape_s = float(steps[0]["elapsed_s"])
        addresses = backend.addresses
        began = time.perf_counter()
    else:
        began = time.perf_counter()
        addresses = backend.up().addresses
        shape_s = 0.0
    start = time.time_ns() + 30_000_000_000
    configs = node_configs(exp, topo, paths, addresses, backend.run.path, start,
                           backend.inprocess_shaping, control_port=0,
                           **security(backend.run, exp, addresses))
    backend.deploy(configs)
    return shape_s + time.perf_counter() - began


def one(hosts: int, root: Path) -> tuple[float, float]:
    topo_path = topology(hosts, root)
    exp_path = experiment(topo_path, root)
    topo = load_topology(topo_path)
    labdir = root / f"lab{hosts}"
    inventory = lab_up(hosts, labdir)
    try:
        run = RunDir.create(root / "runs", f"remote{hosts}")
        rb = RemoteBackend(run, topo, topo.paths(), inventory=inventory, capture=None)
        try:
            remote_s = timed(rb, exp_path, remote=True)
        finally:
            rb.down()
            teardown(run)
    finally:
        lab_down(labdir)
    run = RunDir.create(root / "runs", f"docker{hosts}")
    db = DockerBackend(run, topo, topo.paths(), capture=None)
    try:
        docker_s = timed(db, exp_path, remote=False)
    finally:
        db.down()
        teardown(run)
    return remote_s, docker_s


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.remote_bringup")
    p.add_argument("--hosts", type=int, nargs="+", default=[4, 8])
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="tb-remote-bench-") as d:
        for n in args.hosts:
            remote_s, docker_s = one(n, Path(d))
            print(f"{n:3d} hosts: remote shape+start {remote_s:6.1f} s   docker up+deploy "
                  f"{docker_s:6.1f} s   ratio {remote_s / docker_s:4.1f}x (goal <= 3x)",
                  flush=True)


if __name__ == "__main__":
    main()
