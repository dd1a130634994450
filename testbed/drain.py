"""The drain after the workload, on backends with real nodes (docs/architecture.md "Liveness").

From the end of the minimum drain on, the orchestrator asks every correct node for its
progress (`testbed:type=Node` `Progress`, over the control plane) and stops all nodes
(`testbed:type=Node` `stop`) as soon as every message a correct host sent has been
final-delivered at every correct host (and every faulty host's message some correct host
delivered, nodes/quiescence.py `unsettled`, has reached them all, and a restarted host that is
up has delivered its own messages since its restart, `unsent_own`, as has every correct host,
`owed_restarted`, and the correct hosts' messages it owes, `behind_restarted`). Nodes stop
themselves at the drain's cap (`drain_max`) if that never happens. The outcome goes to
`drain.json` for the analysis, so a run that ended with messages in flight reports them under
liveness, not as agreement or validity violations. The simulator runs the same check in
virtual time (nodes/sim.py). A run the runner stopped at its wall limit has `cut_short` in
drain.json (`mark_cut_short` where the nodes drain themselves): its verdict is not ok and says
why.
"""

from __future__ import annotations

import contextlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from nodes.quiescence import (
    DRAIN_FILE,
    add_counts,
    behind_restarted,
    drain_record,
    owed_restarted,
    undelivered,
    unsent_own,
    unsettled,
)
from testbed.mgmt import MgmtClient, MgmtError
from testbed.rundir import RunDir

NODE = "testbed:type=Node"
POLL_EVERY_S = 0.5
POLL_TIMEOUT_S = 2.0
POLL_WORKERS = 32


class DrainWatch:
    """Polls the nodes during the drain and decides when the run is quiescent."""

    def __init__(self, run: RunDir, hosts: list[str], correct: list[str], workload_end_ns: int,
                 drain_min_ns: int, drain_max_ns: int, restarted: list[str] | None = None) -> None:
        self.run = run
        self.hosts = hosts
        self.correct = correct
        self.restarted = restarted or []  # restarted and up at the end (`restarted_up`)
        self.workload_end_ns = workload_end_ns
        self.drain_min_ns = drain_min_ns
        self.drain_max_ns = max(drain_min_ns, drain_max_ns)
        self.quiescent = False
        self.missing: dict[str, int] = {h: 0 for h in correct}
        self.faulty: dict[str, int] = {}  # nodes/quiescence.py `unsettled`, at the last poll
        self.progress: dict[str, dict[str, Any]] = {}  # host -> its latest answer
        self.stopped_at_ns: int | None = None
        self._next_poll = 0.0
        self._clients: dict[str, MgmtClient] = {}

    @property
    def in_flight(self) -> int:
        return sum(self.missing.values())

    def due(self, now_ns: int) -> bool:
        """True when the minimum drain is over, no decision was taken and a poll is due."""
        return (self.stopped_at_ns is None
                and now_ns >= self.workload_end_ns + self.drain_min_ns
                and time.monotonic() >= self._next_poll)

    def poll(self) -> bool:
        """Read every correct node's progress; on quiescence stop all nodes. True if stopped."""
        self._next_poll = time.monotonic() + POLL_EVERY_S
        asked = self.correct + self.restarted
        with ThreadPoolExecutor(max(1, min(POLL_WORKERS, len(asked)))) as pool:
            got = dict(zip(asked, pool.map(self._progress, asked), strict=True))
        # Each node's latest answer counts, from this poll or an earlier one: polls start after
        # the workload, so what a node has sent no longer grows and what it delivered only
        # grows. A hundred starved nodes rarely all answered one poll within its timeout, and
        # a run whose every message was delivered ran to its cap as not quiescent.
        self.progress.update({h: p for h, p in got.items() if p is not None})
        progress = {h: self.progress[h] for h in self.correct if h in self.progress}
        self.missing = undelivered(progress, self.correct)
        self.faulty = unsettled(progress, self.correct)
        # a restarted host's own messages since its restart: waited for like `unsettled`
        self.faulty.update(unsent_own(self.progress, self.restarted))
        # ... and its messages of that incarnation at the correct hosts
        add_counts(self.faulty, owed_restarted(self.progress, self.correct, self.restarted))
        # ... and the correct hosts' messages it owes from its join points on
        add_counts(self.faulty, behind_restarted(self.progress, self.correct, self.restarted))
        # Quiescent: every correct host answered and has every correct host's message. The
        # messages of faulty hosts that a correct host delivered are waited for too, to the cap.
        self.quiescent = len(progress) == len(self.correct) and not any(self.missing.values())
        if not self.quiescent or any(self.faulty.values()):
            return False
        self.stopped_at_ns = time.time_ns()
        with ThreadPoolExecutor(max(1, min(8, len(self.hosts)))) as pool:
            list(pool.map(self._stop, self.hosts))
        return True

    def write(self, cut_short: str | None = None) -> dict[str, Any]:
        """Write drain.json (call after the nodes exited, or were stopped: `cut_short` says
        why) and return its content."""
        end = self.stopped_at_ns or min(time.time_ns(), self.workload_end_ns + self.drain_max_ns)
        rec = drain_record(self.quiescent, end - self.workload_end_ns, self.drain_min_ns,
                           self.drain_max_ns, self.correct, self.missing, self.faulty)
        if cut_short:
            rec["cut_short"] = cut_short
        (self.run.path / DRAIN_FILE).write_text(json.dumps(rec) + "\n")
        return rec

    def _client(self, host: str) -> MgmtClient | None:
        if host not in self._clients:
            try:
                client = self.run.mgmt_client(host)  # HTTPS with the run's CA when enabled
            except (LookupError, OSError, ValueError):
                return None
            client.timeout_s = POLL_TIMEOUT_S
            self._clients[host] = client
        return self._clients[host]

    def _progress(self, host: str) -> dict[str, Any] | None:
        client = self._client(host)
        if client is None:
            return None
        try:
            value = client.read(NODE, "Progress")
        except (MgmtError, OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def _stop(self, host: str) -> None:
        client = self._client(host)
        if client is None:
            return
        # The node may close the connection as it stops; it exits at the cap regardless.
        with contextlib.suppress(MgmtError, OSError, ValueError):
            client.exec(NODE, "stop")


def mark_cut_short(run: RunDir, reason: str, correct: list[str], drain_min_ns: int,
                   drain_max_ns: int) -> dict[str, Any]:
    """drain.json of a run whose nodes drain themselves (the simulator) and that the runner cut
    short: the record they wrote, else one that measured nothing (not quiescent; `drain_s`,
    `in_flight` and `undelivered_per_node` null), with `cut_short` saying why."""
    path = run.path / DRAIN_FILE
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        rec = None
    if not isinstance(rec, dict) or "quiescent" not in rec:
        rec = {**drain_record(False, 0, drain_min_ns, max(drain_min_ns, drain_max_ns), correct,
                              {}),
               "drain_s": None, "undelivered_per_node": None, "in_flight": None}
    rec["cut_short"] = reason
    path.write_text(json.dumps(rec) + "\n")
    return rec
