"""Ending a process a test started (a server, a run): a signal to end, then a kill if it has not
ended in time."""

from __future__ import annotations

import signal
import subprocess
from typing import Any


def stop_process(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM,
                 timeout_s: float = 10) -> None:
    """Send `sig` to proc (if it still runs), wait up to timeout_s, then SIGKILL it."""
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
