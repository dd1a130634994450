"""A host that is a container's network namespace, entered from the root namespace with the
root mount namespace kept (`nsenter -n`, not `mnexec -a`, which would also enter the container's
file system): the shaping daemon and tcpdump run from the host's tools and write to the run
directory directly."""

from __future__ import annotations

import json
from dataclasses import dataclass

from testbed.hosts.base import HostError
from testbed.hosts.netns import NetnsHost


@dataclass
class ContainerHost(NetnsHost):
    def prefix(self) -> list[str]:
        return self.command_prefix()

    def dev_of(self, ip: str) -> str:
        """The interface holding `ip` (Docker names them eth0, eth1... in attach order)."""
        out = self.run(["ip", "-j", "-4", "addr"]).stdout
        for link in json.loads(out):
            if any(a.get("local") == ip for a in link.get("addr_info", [])):
                return str(link["ifname"])
        raise HostError(f"{self.name}: no interface holds the data address {ip}")
