"""What `testbed run` shows while a run runs: its phase (bring-up, workload, drain, analysis),
the messages sent and final-delivered so far, and each fault as it starts and heals. On a
terminal a live progress line with the phases and faults printed above it; elsewhere (a pipe,
a CI log) one plain line per phase, per fault and every PLAIN_EVERY_S seconds of counts.

The numbers come from where the live view (`testbed serve`) reads them: each node's `Progress`
(`testbed:type=Node`, messages sent and final deliveries per origin) over its management
endpoint, as the drain reads it (testbed/drain.py); the fault records as they are appended to
faults.jsonl. The simulator has no endpoints: its counts, and how far its virtual clock got,
are the `send` and `fnl` lines of the delivery logs as it writes them."""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from testbed.rundir import RunDir

NODE = "testbed:type=Node"
#: how often the nodes are asked, and how long each may take to answer
POLL_EVERY_S = 1.0
POLL_TIMEOUT_S = 0.5
#: the most hosts a fault line names one by one
GROUP_NAMES = 6
#: how often a plain console gets a line of counts
PLAIN_EVERY_S = 5.0
_T = re.compile(rb'"t":(\d+)')
#: a run's phases, in order
PHASES = ("bring-up", "workload", "drain", "analysis")


class RunCounts:
    """Messages sent and final-delivered so far, the faults recorded since the last call, and
    (from the delivery logs) the latest time the nodes logged. Reads only."""

    def __init__(self, run: RunDir, hosts: list[str], management: bool) -> None:
        self.run = run
        self.hosts = hosts
        self.management = management
        self.sent: int | None = None
        self.delivered: int | None = None
        self.reached_ns: int | None = None
        self._last: dict[str, dict[str, Any]] = {}  # a node's last answer (it stops at the end)
        self._clients: dict[str, Any] = {}
        self._offsets: dict[Path, int] = {}
        self._lines: dict[str, int] = {"send": 0, "fnl": 0}
        self._next = 0.0

    def poll(self, force: bool = False) -> None:
        """Read the counts, at most every POLL_EVERY_S unless `force`."""
        if not force and time.monotonic() < self._next:
            return
        self._next = time.monotonic() + POLL_EVERY_S
        if self.management:
            self._ask_nodes()
        else:
            self._read_logs()

    def faults(self) -> list[dict[str, Any]]:
        """The fault records appended to faults.jsonl since the last call."""
        out = []
        for line in self._new_lines(self.run.path / "faults.jsonl"):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out

    def _ask_nodes(self) -> None:
        with ThreadPoolExecutor(max(1, min(16, len(self.hosts)))) as pool:
            got = dict(zip(self.hosts, pool.map(self._progress, self.hosts), strict=True))
        self._last.update({h: p for h, p in got.items() if p is not None})
        if not self._last:
            return
        self.sent = sum(p["sent"] for p in self._last.values()
                        if isinstance(p.get("sent"), int))
        self.delivered = sum(n for p in self._last.values()
                             if isinstance(p.get("delivered"), dict)
                             for n in p["delivered"].values() if isinstance(n, int))

    def _progress(self, host: str) -> dict[str, Any] | None:
        from testbed.mgmt import MgmtError

        try:
            if host not in self._clients:
                client = self.run.mgmt_client(host)
                client.timeout_s = POLL_TIMEOUT_S
                self._clients[host] = client
            value = self._clients[host].read(NODE, "Progress")
        except (LookupError, MgmtError, OSError, ValueError):
            return None  # not up yet, paused, crashed, or gone at the end
        return value if isinstance(value, dict) else None

    def _read_logs(self) -> None:
        for host in self.hosts:
            data = self._new_bytes(self.run.path / "nodes" / host / "events.jsonl")
            if not data:
                continue
            # The delivery log's one line format (nodes/eventlog.py): `"ev":"send"`.
            for ev in self._lines:
                self._lines[ev] += data.count(b'"ev":"%s"' % ev.encode())
            last = _T.search(data, data.rfind(b"\n", 0, len(data) - 1) + 1)
            if last is not None:
                self.reached_ns = max(self.reached_ns or 0, int(last.group(1)))
        self.sent, self.delivered = self._lines["send"], self._lines["fnl"]

    def _new_bytes(self, path: Path) -> bytes:
        """Complete lines appended to `path` since the last call."""
        try:
            with path.open("rb") as f:
                f.seek(self._offsets.get(path, 0))
                data = f.read()
        except OSError:
            return b""
        end = data.rfind(b"\n") + 1
        self._offsets[path] = self._offsets.get(path, 0) + end
        return data[:end]

    def _new_lines(self, path: Path) -> list[str]:
        return self._new_bytes(path).decode(errors="replace").splitlines()


def counts_text(sent: int | None, delivered: int | None) -> str:
    if sent is None or delivered is None:
        return "no counts yet"
    return f"{sent:,} sent, {delivered:,} final deliveries"


def fault_text(rec: dict[str, Any], start_ns: int, hosts: list[str]) -> str:
    """One fault record (nodes/faults.py `FaultHistory`) as a line: when, which, what."""
    t = rec.get("t")
    at = f"{(t - start_ns) / 1e9:.1f} s" if isinstance(t, int) else "?"
    kind = str(rec.get("kind", "fault"))
    starts = rec.get("phase") != "stop"
    who = ""
    params = rec.get("params")
    cuts = params.get("cuts") if isinstance(params, dict) else None
    if starts and kind == "partition" and isinstance(cuts, list):
        from analysis.topology_view import groups_after

        pairs = {(c[0], c[1]) for c in cuts if isinstance(c, list) and len(c) == 2}
        who = " | ".join(_hosts(g) for g in groups_after(pairs, hosts))
    elif isinstance(rec.get("hosts"), list) and rec["hosts"] and len(rec["hosts"]) < len(hosts):
        who = _hosts([str(h) for h in rec["hosts"]])
    error = (rec.get("measured") or {}).get("error") if isinstance(rec.get("measured"),
                                                                     dict) else None
    return (f"{at}: fault {rec.get('fault', '?')} {kind} {'starts' if starts else 'heals'}"
            + (f": {who}" if who else "") + (f" (failed: {error})" if error else ""))


def _hosts(names: list[str]) -> str:
    """Hosts by name, a long list by its ends and its length."""
    if len(names) <= GROUP_NAMES:
        return " ".join(names)
    return f"{names[0]} ... {names[-1]} ({len(names)} hosts)"


class RunView:
    """The console during a run (see the module): `phase` and `event` lines, `update` with
    the counts and the progress, `close` at the end."""

    def __init__(self, console: Console, label: str) -> None:
        self.console = console
        self.label = label
        self.phase_name = ""
        self.live = console.is_terminal
        self._progress: Progress | None = None
        self._task: Any = None
        self._next_plain = 0.0

    def __enter__(self) -> RunView:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def phase(self, name: str, detail: str = "") -> None:
        """Print the phase the run entered; a phase it is in or past already prints nothing."""
        if self.phase_name and PHASES.index(name) <= PHASES.index(self.phase_name):
            return
        self.phase_name = name
        self.print(f"{name}: {detail}" if detail else name)

    def event(self, line: str) -> None:
        self.print(f"  {line}")

    def print(self, line: str, style: str | None = None) -> None:
        target = self._progress.console if self._progress is not None else self.console
        target.print(line, style=style, highlight=False, markup=False, soft_wrap=True)

    def update(self, done_s: float, total_s: float, counts: str) -> None:
        """The progress (`done_s` of `total_s`) and the counts so far."""
        if not self.live:
            now = time.monotonic()
            if self.phase_name and now >= self._next_plain:  # from the workload on
                self._next_plain = now + PLAIN_EVERY_S
                self.event(f"{done_s:.1f} s: {counts}")
            return
        description = f"{self.label}: {self.phase_name}, {counts}"
        if self._progress is None:
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                      TimeRemainingColumn(), console=self.console,
                                      transient=True)
            self._progress.start()
            self._task = self._progress.add_task(description, total=total_s)
        self._progress.update(self._task, completed=min(done_s, total_s),
                              description=description)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
