"""Addressing for the `docker` backend: which /24s a run's data and control networks use, the
hosts' fixed addresses in them, and a host's network namespace as seen from the root one."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from testbed.backends.base import BackendError
from testbed.backends.bridges import used_subnets
from testbed.spec.topology import TopologySpec

LABEL = "org.testbed.run"  # on every container and network a run creates; clean keys on it
DATA, CONTROL = "data", "control"
POOL = ipaddress.IPv4Network("198.19.0.0/16")  # Mininet takes 198.18.0.0/16 for its data plane
MAX_HOSTS = 253  # .254 is the bridge's (gateway) address


@dataclass(frozen=True)
class Subnets:
    data: ipaddress.IPv4Network
    control: ipaddress.IPv4Network


def _free(candidate: ipaddress.IPv4Network, taken: list[ipaddress.IPv4Network]) -> bool:
    return not any(candidate.overlaps(t) for t in taken)


def pick_subnets(docker: Any, topology: TopologySpec, run_id: str) -> Subnets:
    """Data: the /24 of the topology's own addresses when it gives any (a clash then is the
    user's to fix, reported by Docker), else a free 198.19.x.0/24 from the run id; control: the
    next free 198.19.y.0/24 after it."""
    if len(topology.hosts) > MAX_HOSTS:
        raise BackendError(f"the docker backend puts at most {MAX_HOSTS} hosts on one /24; the "
                           f"topology has {len(topology.hosts)}")
    taken = used_subnets(docker)
    given = [h.address for h in topology.hosts if h.address]
    start = int(run_id, 16) % 254
    candidates = [ipaddress.IPv4Network(f"198.19.{(start + k) % 254 + 1}.0/24")
                  for k in range(254)]
    data = None
    if given:
        data = ipaddress.IPv4Network(f"{given[0]}/24", strict=False)
        outside = [a for a in given if ipaddress.ip_address(a) not in data]
        if outside:
            raise BackendError(f"the docker backend needs all host addresses in one /24; "
                               f"{outside[0]} is outside {data}")
    else:
        data = next((c for c in candidates if _free(c, taken)), None)
    control = next((c for c in candidates if c != data and _free(c, taken)), None)
    if data is None or control is None:
        raise BackendError("every 198.19.x.0/24 subnet is in use; tear down old runs "
                           "(`testbed teardown`, `testbed clean`)")
    return Subnets(data, control)


def data_addresses(topology: TopologySpec, net: ipaddress.IPv4Network) -> dict[str, str]:
    gateway = net.network_address + 254
    taken = {h.address for h in topology.hosts if h.address}
    if str(gateway) in taken:
        raise BackendError(f"{gateway} is the data network's bridge address; give the host "
                           "another address")
    free = (str(ip) for ip in net.hosts() if str(ip) not in taken and ip != gateway)
    return {h.name: h.address or next(free) for h in topology.hosts}
