"""Scratch network namespaces for root tests: named `tbt<hex><n>`, joined by veths on one
bridge-less pair or star, each held by a `sleep` so NetnsHost can enter it; removed on exit."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from testbed.hosts.netns import NetnsHost
from testbed.processes import start_time

IN_CI = os.environ.get("CI") == "true"
root_only = pytest.mark.skipif(os.geteuid() != 0 and not IN_CI, reason="needs root")


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@contextmanager
def two_hosts(addr_a: str = "198.18.200.1", addr_b: str = "198.18.200.2"
              ) -> Iterator[tuple[NetnsHost, NetnsHost]]:
    tag = f"tbt{secrets.token_hex(3)}"
    names = [f"{tag}a", f"{tag}b"]
    holders: list[subprocess.Popen[bytes]] = []
    try:
        for n in names:
            sh("ip", "netns", "add", n)
        sh("ip", "link", "add", f"{tag}x", "netns", names[0], "type", "veth", "peer", "name",
           f"{tag}y", "netns", names[1])
        for n, dev, addr in ((names[0], f"{tag}x", addr_a), (names[1], f"{tag}y", addr_b)):
            sh("ip", "-n", n, "link", "set", dev, "name", "d0")
            sh("ip", "-n", n, "addr", "add", f"{addr}/24", "dev", "d0")
            sh("ip", "-n", n, "link", "set", "d0", "up")
            sh("ip", "-n", n, "link", "set", "lo", "up")
            holders.append(subprocess.Popen(["ip", "netns", "exec", n, "sleep", "3600"]))
        pids = [h.pid for h in holders]
        yield (NetnsHost("a", pids[0], start_time(pids[0])),
               NetnsHost("b", pids[1], start_time(pids[1])))
    finally:
        for h in holders:
            h.kill()
            h.wait()
        for n in names:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
