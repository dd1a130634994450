"""A host that is a network namespace on this machine, entered through a process that lives in
it (a Mininet host's shell). Commands run there with `nsenter`; long-lived programs are started
with `mnexec -a`, which joins the namespace and then execs, so the journaled pid is the program
itself. Only the network is separate: files and the clock are this machine's."""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from testbed.hosts.local import LocalHost
from testbed.processes import is_alive


@dataclass
class NetnsHost(LocalHost):
    pid: int  # a process inside the namespace
    starttime: int | None

    def alive(self) -> bool:
        return is_alive(self.pid, self.starttime)

    def prefix(self) -> list[str]:
        """argv prefix that runs a program inside this namespace."""
        if shutil.which("mnexec"):
            return ["mnexec", "-a", str(self.pid)]
        return self.command_prefix()

    def command_prefix(self) -> list[str]:
        """Enter only the namespace's network (the root mount namespace and its tools stay)."""
        return ["nsenter", "-t", str(self.pid), "-n"]
