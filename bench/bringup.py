"""Bring-up time of a 30-host, 3-site WAN on the mininet backend with a full per-pair shaping
plan (the userspace applier: 30 HTB trees with 29 classes each, 30 delay-line daemons), next to
plain Mininet bringing up the same 30 hosts on one LinuxBridge with no controller and the same
data addresses, in one run (root). Prints both times, the shaping share of the backend's time
and the ratio, then tears everything down.

    sudo .venv/bin/python bench/bringup.py [--hosts 30] [--repeat 1]

Plain Mininet here is hosts + one bridge + links, as `mn --switch lxbr --controller none` does;
the backend also builds the unshaped control plane (second bridge, addresses), journals every
resource and checks the result, so the ratio is the price of all of that, not of shaping alone.
"""

from __future__ import annotations

import argparse
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.backends.addressing import DATA_NET, data_addresses  # noqa: E402
from testbed.backends.mininet import MininetBackend  # noqa: E402
from testbed.rundir import RunDir  # noqa: E402
from testbed.spec.topology import TopologySpec  # noqa: E402
from testbed.teardown import teardown  # noqa: E402

SITES = ("lisbon", "boston", "tokyo")
WAN_MS = {("lisbon", "boston"): 40, ("lisbon", "tokyo"): 120, ("boston", "tokyo"): 80}


def topology(hosts: int) -> TopologySpec:
    return TopologySpec.model_validate({
        "name": f"bringup{hosts}",
        "sites": {s: {"lan": {"delay": "0.5ms"}} for s in SITES},
        "wan": [{"between": list(pair), "delay": f"{ms}ms"} for pair, ms in WAN_MS.items()],
        "hosts": [{"name": f"h{i + 1}", "site": SITES[i * len(SITES) // hosts]}
                  for i in range(hosts)]})


def plain_mininet(topo: TopologySpec) -> tuple[float, float]:
    """Seconds to build and to stop plain Mininet with the same hosts and data addresses."""
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.nodelib import LinuxBridge

    setLogLevel("error")
    addresses = data_addresses(topo)
    br = f"tbb{secrets.token_hex(3)}"
    t0 = time.monotonic()
    net = Mininet(topo=None, switch=LinuxBridge, controller=None, build=False,
                  autoSetMacs=True, autoStaticArp=True, waitConnected=False)
    try:
        sw = net.addSwitch(br, dpid="1")
        for i, h in enumerate(topo.hosts):
            host = net.addHost(h.name, ip=f"{addresses[h.name]}/{DATA_NET.prefixlen}")
            net.addLink(host, sw, intfName1="d0", intfName2=f"{br}{i}")
        net.build()
        sw.start([])
        up = time.monotonic() - t0
    finally:
        t1 = time.monotonic()
        net.stop()
    return up, time.monotonic() - t1


def shaped_backend(topo: TopologySpec) -> dict[str, Any]:
    """Seconds for MininetBackend.up() with the userspace applier, the part of it spent applying
    shaping plans, a check that a WAN pair is shaped, and the teardown time."""
    run = RunDir.create(Path("/tmp/tb-bench"), "bringup")
    backend = MininetBackend(run, topo, topo.paths(), applier="userspace")
    shaping = 0.0
    apply = backend.applier.apply

    def timed_apply(*args: Any) -> None:
        nonlocal shaping
        t = time.monotonic()
        apply(*args)
        shaping += time.monotonic() - t

    backend.applier.apply = timed_apply  # type: ignore[method-assign,assignment]
    try:
        t0 = time.monotonic()
        addresses = backend.up().addresses
        up = time.monotonic() - t0
        first, last = topo.hosts[0].name, topo.hosts[-1].name
        want = (topo.paths().get(first, last).delay_ns + topo.paths().get(last, first).delay_ns)
        ping = backend.exec(first, ["ping", "-n", "-c", "3", "-i", "0.2",
                                    addresses[last].data]).stdout.decode()
        rtt = float(ping.split("min/avg/max")[1].split("=")[1].split("/")[0]) if "min/" in ping \
            else None
        classes = sum(len(p.classes) for p in backend.plans.values())
    finally:
        t1 = time.monotonic()
        backend.down()
        teardown(run)
        down = time.monotonic() - t1
    leftover = [e for e in run.journal.live()]
    return {"up_s": up, "shaping_s": shaping, "down_s": down, "classes": classes,
            "check": f"{first}->{last} min RTT {rtt} ms (configured {want / 1e6:g} ms)",
            "leftover": len(leftover)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=30)
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args()
    topo = topology(args.hosts)
    subprocess.run(["iptables", "-w", "-L", "-n"], capture_output=True)  # load xtables first
    for i in range(args.repeat):
        plain_up, plain_down = plain_mininet(topo)
        shaped = shaped_backend(topo)
        print(f"run {i + 1}: {args.hosts} hosts, {len(SITES)} sites")
        print(f"  plain Mininet (LinuxBridge, no controller): up {plain_up:6.2f} s, "
              f"stop {plain_down:6.2f} s")
        print(f"  mininet backend + userspace shaping:        up {shaped['up_s']:6.2f} s "
              f"(shaping {shaped['shaping_s']:.2f} s, {shaped['classes']} classes), "
              f"down {shaped['down_s']:6.2f} s")
        print(f"  ratio up: {shaped['up_s'] / plain_up:.2f}x   "
              f"without shaping: {(shaped['up_s'] - shaped['shaping_s']) / plain_up:.2f}x")
        print(f"  {shaped['check']}; journal entries left: {shaped['leftover']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
