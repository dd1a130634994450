"""A host's network namespace, entered through a process that lives in it (a Mininet host's
shell). Commands run there with `nsenter`; long-lived programs are started with `mnexec -a`,
which joins the namespace and then execs, so the journaled pid is the program itself."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from testbed.processes import is_alive


@dataclass(frozen=True)
class HostNs:
    name: str
    pid: int  # a process inside the namespace
    starttime: int | None

    def alive(self) -> bool:
        return is_alive(self.pid, self.starttime)

    def prefix(self) -> list[str]:
        """argv prefix that runs a program inside this namespace."""
        if shutil.which("mnexec"):
            return ["mnexec", "-a", str(self.pid)]
        return ["nsenter", "-t", str(self.pid), "-n"]

    def run(self, argv: list[str], check: bool = True, timeout: float = 30,
            stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["nsenter", "-t", str(self.pid), "-n", *argv], capture_output=True,
                              text=True, timeout=timeout, input=stdin)
        if check and proc.returncode != 0:
            raise ShapingError(f"{self.name}: `{' '.join(argv)}` failed: "
                               f"{(proc.stderr or proc.stdout).strip()}")
        return proc


class ShapingError(Exception):
    """A shaping command failed; the message names the host and the command."""
