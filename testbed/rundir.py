"""The run directory and its journal (docs/architecture.md decision 5 and "Run directory").

`runs/<UTC time>-<name>-<id>/` holds everything a run produced. `journal.jsonl` records every
resource *before* (or, for a pid, the instant after) it is created, so `testbed teardown` can
undo a run even after the orchestrator was killed with SIGKILL.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DEFAULT_RUNS = Path("runs")
_APPEND = threading.Lock()
RUN_ENV = "TESTBED_RUN_ID"  # set in every process a run starts; teardown matches it exactly


@dataclass(frozen=True)
class RunDir:
    path: Path
    run_id: str

    @classmethod
    def create(cls, root: Path, name: str) -> RunDir:
        run_id = secrets.token_hex(3)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        path = root / f"{stamp}-{name}-{run_id}"
        path.mkdir(parents=True)
        (path / "faults.jsonl").touch()
        (path / "nodes").mkdir()
        return cls(path, run_id)

    @classmethod
    def open(cls, path: Path) -> RunDir:
        return cls(path, path.name.rsplit("-", 1)[-1])

    @property
    def journal(self) -> Journal:
        return Journal(self.path / "journal.jsonl")

    @property
    def token(self) -> str:
        """The run's bearer token for management endpoints (created on first use, mode 0600)."""
        path = self.path / "token"
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(24))
        return path.read_text().strip()

    @property
    def basic_auth(self) -> str:
        """The run's HTTP Basic credential for management, "user:password" (Jolokia clients
        that only speak Basic); created on first use, mode 0600, next to the token."""
        path = self.path / "mgmt.basic"
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(f"testbed:{secrets.token_urlsafe(18)}")
        return path.read_text().strip()

    @property
    def transport_key(self) -> str:
        """The run's AES-GCM key for `transport: udp-aead` (nodes/aead.py), hex; created on
        first use, mode 0600."""
        path = self.path / "transport.key"
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
        return path.read_text().strip()

    def control_url(self, host: str) -> str:
        """The management base URL a node reported in nodes/<host>/control.json."""
        info = self.path / "nodes" / host / "control.json"
        if not info.exists():
            raise LookupError(f"host {host} of run {self.run_id} has no management endpoint "
                              "(is the run still up?)")
        d = json.loads(info.read_text())
        return f"{d.get('scheme', 'http')}://{d['host']}:{d['port']}/jolokia"

    @property
    def ca_file(self) -> Path | None:
        """The run's CA certificate (testbed/certs.py), if it made one: what management
        clients verify the nodes' HTTPS certificates against."""
        path = self.path / "certs" / "ca.pem"
        return path if path.exists() else None

    def mgmt_client(self, host: str) -> Any:
        """A management client for `host`, with the run's token and, for HTTPS, its CA."""
        from testbed.mgmt import MgmtClient

        client_cert = self.path / "certs" / "orchestrator.pem"
        return MgmtClient(self.control_url(host), self.token, cafile=self.ca_file,
                          client_cert=client_cert if client_cert.exists() else None)

    def node_dir(self, host: str) -> Path:
        d = self.path / "nodes" / host
        d.mkdir(parents=True, exist_ok=True)
        return d


class Journal:
    def __init__(self, path: Path):
        self.path = path

    def append(self, op: str, **fields: Any) -> None:
        rec = {"t": time.time_ns(), "op": op, **fields}
        # Bring-up creates hosts from several threads: one whole line per append.
        with _APPEND, self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(rec, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def append_many(self, op: str, records: list[dict[str, Any]]) -> None:
        """Several records of one op in one write and one fsync (a batch of resources about to
        be created side by side: each is on disk before any of them exists)."""
        if not records:
            return
        t = time.time_ns()
        lines = "".join(json.dumps({"t": t, "op": op, **r}, sort_keys=True) + "\n"
                        for r in records)
        with _APPEND, self.path.open("a", encoding="utf-8") as f:
            f.write(lines)
            f.flush()
            os.fsync(f.fileno())

    def entries(self) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        for line in self.path.read_text().splitlines():
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a kill: the resource was never created

    def live(self) -> list[dict[str, Any]]:
        """Resources created and not yet removed, in creation order."""
        alive: dict[str, dict[str, Any]] = {}
        for e in self.entries():
            if e["op"] == "create":
                alive[e["id"]] = e
            elif e["op"] == "remove":
                alive.pop(e["id"], None)
        return list(alive.values())

    def finished(self) -> bool:
        return any(e["op"] == "down" for e in self.entries())


def find_runs(root: Path) -> list[RunDir]:
    if not root.is_dir():
        return []
    return [RunDir.open(p) for p in sorted(root.iterdir()) if (p / "journal.jsonl").exists()]


def resolve_run(root: Path, name: str) -> RunDir:
    """A run by path, directory name, run id, or name fragment (the newest match)."""
    candidate = Path(name)
    if (candidate / "journal.jsonl").exists():
        return RunDir.open(candidate)
    matches = [r for r in find_runs(root) if name in (r.run_id, r.path.name) or name in
               r.path.name]
    if not matches:
        raise LookupError(f"no run matching {name!r} under {root}/")
    return matches[-1]
