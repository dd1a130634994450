"""The host seam: run a command on a host, spawn a detached process there with a pidfile, put
and fetch files, and the host's clock offset to the orchestrator (Jepsen's control `Remote`:
connect, execute!, upload!, download!)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Protocol


class HostError(Exception):
    """A command on a host failed; the message names the host and the command."""


class Host(Protocol):
    name: str

    def prefix(self) -> list[str]: ...   # argv prefix that starts a long-lived program there

    def command_prefix(self) -> list[str]: ...   # argv prefix that runs a short command there

    def run(self, argv: list[str], *, check: bool = True, timeout: float | None = None,
            input: str | None = None) -> subprocess.CompletedProcess[str]: ...

    def spawn(self, argv: list[str], *, pidfile: str, log: str,
              env: dict[str, str] | None = None) -> int: ...   # detached; returns pid

    def put(self, local: Path, remote: str) -> None: ...

    def fetch(self, remote: str, local: Path) -> None: ...

    def clock_offset(self) -> float: ...   # seconds, host clock minus orchestrator clock
