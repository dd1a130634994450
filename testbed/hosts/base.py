"""The host seam: what every backend needs from a host, wherever it is (issue 16 item 1)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Protocol


class Host(Protocol):
    name: str

    def run(self, argv: list[str], *, check: bool = True, timeout: float | None = None,
            input: str | None = None) -> subprocess.CompletedProcess[str]: ...

    def spawn(self, argv: list[str], *, pidfile: str, log: str,
              env: dict[str, str] | None = None) -> int: ...  # detached; returns pid

    def put(self, local: Path, remote: str) -> None: ...

    def fetch(self, remote: str, local: Path) -> None: ...

    def clock_offset(self) -> float: ...  # seconds, host clock minus orchestrator clock
