"""The emulated data plane's default addressing (mininet's numbering; docker renumbers the
same classes into its own subnet): what the run plan writes its shaping plans in, before any
backend is chosen. A neutral module, so that the run plan and the backends need not import
each other (tests/test_import_cycles.py)."""

from __future__ import annotations

import ipaddress

from testbed.spec.topology import TopologySpec

DATA_DEV = "d0"
DATA_NET = ipaddress.ip_network("198.18.0.0/16")


def data_addresses(topology: TopologySpec) -> dict[str, str]:
    """Each host's data address: the topology's own, else the next free one of DATA_NET."""
    taken = {h.address for h in topology.hosts if h.address}
    free = (str(ip) for ip in DATA_NET.hosts() if str(ip) not in taken)
    return {h.name: h.address or next(free) for h in topology.hosts}
