"""Faults applied by the nodes themselves, over their management endpoints: data-plane filters
(partitions), clock changes, path changes of the inprocess shaper, and arbitrary Jolokia
requests. Any backend whose nodes run the management server uses this as its node control and,
when the nodes shape their own traffic (local), as its network control (nodes/faults.py); each
returns what it measured afterwards.

A fault that asks every node (block, heal) asks them side by side, `WORKERS` requests at once,
and waits for their answers until a deadline: the nemesis's (`answers_by`: the next fault's
time, so a slow or unreachable node never delays it), else `ANSWER_S`. A node that has not
answered by then is reported (`no_answer`, and its entry says so), not waited for; its request
goes on in the background, and the next request to that node is sent after it, so a node
still sees its faults in the order they were applied."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from nodes.faults import Management, Measured, SetClock, SetPath
from testbed.mgmt import MgmtClient, MgmtError
from testbed.rundir import RunDir

#: management requests in flight at once (each a short HTTP call on the control plane)
WORKERS = 16
#: how long a fault waits for the nodes' answers when no deadline is set (`testbed fault`)
ANSWER_S = 10.0

NO_ANSWER = "no answer by the deadline (the request goes on)"

_deadline: ContextVar[float | None] = ContextVar("nodeside_deadline", default=None)
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


@contextmanager
def answers_by(deadline: float) -> Iterator[None]:
    """Faults applied inside wait for the nodes' answers until `deadline` (time.monotonic()
    seconds) at the latest."""
    token = _deadline.set(deadline)
    try:
        yield
    finally:
        _deadline.reset(token)


def deadline_of() -> float:
    """The time.monotonic() by which the fault being applied must have its answers."""
    deadline = _deadline.get()
    return time.monotonic() + ANSWER_S if deadline is None else deadline


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="nodeside")
        return _pool


class NodeSideFaults:
    def __init__(self, run: RunDir, hosts: list[str], alive: Callable[[str], bool]):
        self.run = run
        self.hosts = hosts
        self.alive = alive
        self._last: dict[str, Future[Any]] = {}  # each host's latest request
        self._lock = threading.Lock()

    def client(self, host: str) -> MgmtClient:
        client: MgmtClient = self.run.mgmt_client(host)
        return client

    def _each_live(self, fn: Callable[[MgmtClient, str], Any], deadline: float | None = None
                   ) -> tuple[dict[str, Any], dict[str, str]]:
        """fn on every live node, side by side, until the deadline (else the fault's,
        `deadline_of`): each host's answer (a down host's is "down"), and for the hosts that
        gave none why (unreachable, or no answer by the deadline)."""
        if deadline is None:
            deadline = deadline_of()
        out: dict[str, Any] = {}
        problems: dict[str, str] = {}
        asked: dict[str, Future[Any]] = {}
        for h in self.hosts:
            if self.alive(h):
                asked[h] = self._submit(h, fn)
            else:
                out[h] = "down"
        wait_for(list(asked.values()), timeout=max(0.0, deadline - time.monotonic()))
        for h, f in asked.items():
            if not f.done():
                problems[h] = NO_ANSWER
                continue
            try:
                out[h] = f.result()
            except (MgmtError, LookupError, OSError) as exc:
                problems[h] = f"unreachable: {exc}"
        return {h: out.get(h, problems.get(h)) for h in self.hosts}, problems

    def _submit(self, host: str, fn: Callable[[MgmtClient, str], Any]) -> Future[Any]:
        """fn(client, host) in the pool, after this host's previous request (answered or not):
        a node sees its requests in order. A task only waits on one submitted before it, which
        the pool (first in, first out) has already started: no deadlock."""
        with self._lock:
            before = self._last.get(host)

            def task() -> Any:
                if before is not None:
                    wait_for([before])
                return fn(self.client(host), host)

            future = _executor().submit(task)
            self._last[host] = future
        return future

    # -- network control ----------------------------------------------------------------------
    def block(self, cuts: list[tuple[str, str]]) -> Measured:
        to: dict[str, list[str]] = {h: [] for h in self.hosts}
        for src, dst in cuts:
            to[src].append(dst)
        blocked, problems = self._each_live(
            lambda c, h: c.exec("testbed:type=Network", "block", to[h], []))
        return {"blocked_to": blocked, **_late(problems)}

    def heal(self) -> Measured:
        """The probe first, on every node: its failure detector, fed by data-plane heartbeats,
        shows which peers it could not hear during the cut (across groups, not within); then
        every node heals its own filters. The probe has half the time to the deadline, the
        heal the rest; nodes that did not answer either are named."""
        deadline = deadline_of()
        suspected, probed = self._each_live(
            lambda c, h: c.read("testbed:type=FailureDetector", "SuspectedMembers"),
            (time.monotonic() + deadline) / 2)
        _, healed = self._each_live(lambda c, h: c.exec("testbed:type=Network", "heal"),
                                    deadline)
        late = _late(probed, healed)
        return {"suspected_before_heal": suspected, **late,
                **({"not_healed": healed} if healed else {})}

    def set_path(self, fault: SetPath) -> Measured:
        a, b = fault.between
        for src, dst in ((a, b), (b, a)):
            c = self.client(src)
            if fault.reset:
                c.exec("testbed:type=Paths", "reset", dst)
                continue
            now = c.read("testbed:type=Paths", "Paths").get(dst, {})
            delay = now.get("delay_ms", 0) * 1e6 if fault.delay_ns is None else fault.delay_ns
            jitter = now.get("jitter_ms", 0) * 1e6 if fault.jitter_ns is None else fault.jitter_ns
            loss = now.get("loss_pct", 0) / 100 if fault.loss is None else fault.loss
            c.exec("testbed:type=Paths", "setPath", dst, delay / 1e6, jitter / 1e6, loss * 100)
        return {"paths": {a: self.client(a).read("testbed:type=Paths", "Paths").get(b),
                          b: self.client(b).read("testbed:type=Paths", "Paths").get(a)}}

    # -- node control -------------------------------------------------------------------------
    def set_clock(self, fault: SetClock) -> Measured:
        c = self.client(fault.host)
        if fault.jump_ns is not None:
            c.exec("testbed:type=Clock", "jump", fault.jump_ns / 1e6)
        elif fault.offset_ns is not None:
            c.write("testbed:type=Clock", "OffsetMs", fault.offset_ns / 1e6)
        else:
            c.write("testbed:type=Clock", "DriftPpm", fault.drift_ppm)
        return {"clock": c.read("testbed:type=Clock", ["OffsetMs", "DriftPpm"])}

    def management(self, fault: Management) -> Measured:
        c = self.client(fault.host)
        if fault.write:
            return {"old": {k: c.write(fault.mbean, k, v) for k, v in fault.write.items()}}
        op, *args = fault.exec or ()
        return {"value": c.exec(fault.mbean, op, *args)}


def _late(*problems: dict[str, str]) -> dict[str, list[str]]:
    """`no_answer`: the hosts that had not answered by the deadline (nothing when all did)."""
    late = sorted({h for p in problems for h, why in p.items() if why == NO_ANSWER})
    return {"no_answer": late} if late else {}
