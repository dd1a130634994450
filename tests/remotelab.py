"""A lab of SSH hosts for the remote backend's tests (`testbed lab up`, docs/remote.md): the
`lab` fixture (tests/conftest.py) brings one up per test module and, at the end, checks that
`testbed lab down` left nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def testbed(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=timeout, env=env)


def lab_leftovers(lab_id: str) -> list[str]:
    import docker

    c = docker.from_env()
    try:
        flt = {"label": f"org.testbed.lab={lab_id}"}
        found = [f"container {x['Names'][0]}" for x in c.api.containers(all=True, filters=flt)]
        found += [f"network {n['Name']}" for n in c.api.networks(filters=flt)]
    finally:
        c.close()
    rules = subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True).stdout
    found += [f"rule {ln}" for ln in rules.splitlines() if f"tblab-{lab_id}" in ln]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [f"link {ln.split(':')[1]}" for ln in links.splitlines() if f"tbl{lab_id}" in ln]
    return found



@contextmanager
def lab_of(hosts: int, d: Path, *options: str) -> Iterator[Path]:
    """`testbed lab up --hosts N [options]` in `d`; yields the inventory; `testbed lab down`
    at the end must leave no container, network, rule or link of the lab."""
    up = testbed("lab", "up", "--hosts", str(hosts), "--dir", str(d), *options, timeout=900)
    assert up.returncode == 0, up.stdout + up.stderr
    inventory = (d / "latest" / "inventory.yaml").resolve()
    lab_id = inventory.parent.name.split("-", 1)[1]
    try:
        yield inventory
    finally:
        down = testbed("lab", "down", "--dir", str(d))
        assert down.returncode == 0, down.stdout + down.stderr
        assert lab_leftovers(lab_id) == []
