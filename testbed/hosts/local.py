"""A host that is this machine: commands run as child processes of the orchestrator, files are
copied, and the clock is the orchestrator's own (offset 0)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from testbed.hosts.base import HostError


@dataclass
class LocalHost:
    name: str

    def prefix(self) -> list[str]:
        """argv prefix that starts a long-lived program on this host (none: this machine)."""
        return []

    def command_prefix(self) -> list[str]:
        """argv prefix that runs a short command on this host."""
        return []

    def run(self, argv: list[str], *, check: bool = True, timeout: float | None = 30,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        full = [*self.command_prefix(), *argv]
        try:
            proc = subprocess.run(full, capture_output=True, text=True, timeout=timeout,
                                  input=input)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise HostError(f"{self.name}: `{' '.join(argv)}` failed: {exc}") from None
        if check and proc.returncode != 0:
            raise HostError(f"{self.name}: `{' '.join(argv)}` failed: "
                            f"{(proc.stderr or proc.stdout).strip()}")
        return proc

    def spawn(self, argv: list[str], *, pidfile: str, log: str,
              env: dict[str, str] | None = None) -> int:
        """Start `argv` detached (its own session, output appended to `log`), write its pid to
        `pidfile` and return it. Whoever spawns journals the pid (testbed/processes.py)."""
        with open(log, "ab") as out:
            proc = subprocess.Popen([*self.prefix(), *argv], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=dict(os.environ, **(env or {})),
                                    start_new_session=True)
        Path(pidfile).write_text(f"{proc.pid}\n")
        return proc.pid

    def put(self, local: Path, remote: str) -> None:
        self._copy(local, Path(remote))

    def fetch(self, remote: str, local: Path) -> None:
        self._copy(Path(remote), local)

    def _copy(self, src: Path, dst: Path) -> None:
        try:
            if src.resolve() == dst.resolve():
                return
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dst, dirs_exist_ok=True)
            else:
                shutil.copy2(src, dst)
        except OSError as exc:
            raise HostError(f"{self.name}: cannot copy {src} to {dst}: {exc}") from None

    def clock_offset(self) -> float:
        return 0.0
