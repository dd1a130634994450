"""Processes a run starts: spawned with the run's id in their environment, journaled by pid and
kernel start time, and ended only by pid (never by pattern).

The start time (field 22 of /proc/PID/stat) guards against a recycled pid: teardown signals a
pid only if it still belongs to the process that was journaled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from testbed.rundir import RUN_ENV, Journal


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name; None once the process is gone (it
    may exit between any two reads)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def start_time(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[19])


def is_alive(pid: int, started: int | None) -> bool:
    fields = _stat_fields(pid)
    if fields is None or (started is not None and int(fields[19]) != started):
        return False
    return fields[0] != "Z"


def spawn(journal: Journal, run_id: str, rid: str, argv: list[str], log: Path,
          cwd: Path | None = None) -> subprocess.Popen[bytes]:
    env = dict(os.environ, **{RUN_ENV: run_id})
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                start_new_session=True)
    journal.append("create", kind="process", id=rid, pid=proc.pid, starttime=start_time(proc.pid),
                   argv=argv)
    return proc


def stop_pid(pid: int, started: int | None, grace_s: float = 3.0) -> bool:
    """SIGTERM, then SIGKILL after the grace period. True if it was running."""
    if not is_alive(pid, started):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap(pid)
        if not is_alive(pid, started):
            return True
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    for _ in range(100):
        _reap(pid)
        if not is_alive(pid, started):
            break
        time.sleep(0.02)
    return True


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def run_processes(run_id: str) -> list[int]:
    """Pids whose environment carries exactly this run's id (covers a kill between spawn and
    the journal write)."""
    found = []
    needle = f"{RUN_ENV}={run_id}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found
