"""The Docker engine the `docker` backend talks to.

Where no engine answers and we are root, `ensure_engine()` starts `dockerd` (there is no
systemd on these machines: docs/platform.md) with `--iptables=false --ip6tables=false`: nothing
leaves the machine, so no NAT is needed, and Docker then leaves the FORWARD chain and
br_netfilter alone, which keeps Mininet's bridged traffic alive. Its data and exec roots are
private (/var/lib/testbed-docker, /run/testbed-docker); it listens on the default socket so
`docker ps` works by hand. A record of the pid we started lets `stop_engine()` stop exactly
that daemon and never one somebody else runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from testbed.processes import is_alive, start_time, stop_pid

DATA_ROOT = Path("/var/lib/testbed-docker")
EXEC_ROOT = Path("/run/testbed-docker")
RECORD = EXEC_ROOT / "started-by-testbed.json"
LOG = Path("/var/log/testbed-dockerd.log")
DEFAULT_SOCKET = "unix:///var/run/docker.sock"
START_TIMEOUT_S = 60.0


class EngineError(Exception):
    """The engine cannot be reached or started; the message is one sentence for the user."""


def client(timeout: int = 120) -> Any:
    """A Docker SDK client for DOCKER_HOST (or the default socket)."""
    import docker

    try:
        return docker.from_env(timeout=timeout)
    except docker.errors.DockerException as exc:
        why = "no such socket" if "No such file" in str(exc) else (
            "connection refused" if "refused" in str(exc) else "no answer")
        raise EngineError(f"the Docker engine at {where()} is not running ({why}); run "
                          "`testbed image build` as root to start it, or fix DOCKER_HOST"
                          ) from exc


def where() -> str:
    return os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET


def short(exc: BaseException) -> str:
    """The last line of an SDK error, without its nested repr chain."""
    text = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
    return text[:200]


def responding() -> bool:
    try:
        c = client(timeout=5)
        ok = bool(c.ping())
        c.close()
        return ok
    except Exception:  # noqa: BLE001 - any failure means "not answering"
        return False


def started_here() -> dict[str, Any] | None:
    """The dockerd this module started, if it is still running."""
    try:
        rec: dict[str, Any] = json.loads(RECORD.read_text())
    except (OSError, ValueError):
        return None
    return rec if is_alive(rec["pid"], rec.get("starttime")) else None


def ensure_engine(timeout_s: float = START_TIMEOUT_S) -> bool:
    """Make sure an engine answers. True when this call started dockerd (so the caller may
    stop it); raises EngineError with one sentence when it cannot."""
    if responding():
        return False
    if os.environ.get("DOCKER_HOST") not in (None, "", DEFAULT_SOCKET):
        raise EngineError(f"the Docker engine at {where()} is not running; start it or unset "
                          "DOCKER_HOST")
    if os.geteuid() != 0:
        raise EngineError("the Docker engine is not running and starting it needs root; run "
                          "`sudo dockerd &` or use --backend local")
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise EngineError("dockerd is not installed; run `apt-get install -y docker.io`")
    for d in (DATA_ROOT, EXEC_ROOT):
        d.mkdir(parents=True, exist_ok=True)
    argv = [dockerd, "--iptables=false", "--ip6tables=false", "--data-root", str(DATA_ROOT),
            "--exec-root", str(EXEC_ROOT), "--pidfile", str(EXEC_ROOT / "dockerd.pid"),
            "--host", DEFAULT_SOCKET]
    with LOG.open("ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    RECORD.write_text(json.dumps({"pid": proc.pid, "starttime": start_time(proc.pid),
                                  "argv": argv}))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            RECORD.unlink(missing_ok=True)
            tail = LOG.read_text(errors="replace").strip().splitlines()[-1:] or [""]
            raise EngineError(f"dockerd exited at start (see {LOG}): {tail[0][:200]}")
        if responding():
            return True
        time.sleep(0.2)
    raise EngineError(f"dockerd did not answer within {timeout_s:.0f} s (see {LOG})")


def stop_engine() -> bool:
    """Stop the dockerd that ensure_engine() started; True if one was stopped. Containers are
    the backends' business: by now they have been removed."""
    rec = started_here()
    RECORD.unlink(missing_ok=True)
    if rec is None:
        return False
    return stop_pid(rec["pid"], rec.get("starttime"), grace_s=20.0)
