"""The run's fault history (faults.jsonl) as intervals: who was correct, who was cut off, when.

Jepsen's split (nemesis, generator, checker): faults are ordinary entries in the history,
so a checker can say
which faults were active when a violation happened. A start without a matching stop lasts to
the end of the run. A partition's `params.cuts` lists the blocked [src, dst] pairs; the hosts
outside the largest group that can still reach each other are the ones cut off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from analysis.checks_mid import PROCESS_MARK
from nodes.quiescence import cut_off


def _fault_hosts(entry: dict[str, Any]) -> list[str]:
    hosts = entry.get("hosts") or []
    if isinstance(hosts, str):
        hosts = [hosts]
    if "host" in entry:
        hosts = [*hosts, entry["host"]]
    return [str(h) for h in hosts]


def crashed_hosts(faults: list[dict[str, Any]]) -> set[str]:
    """Hosts that did not stay correct: every host that crashed during the run.

    A restarted host is a new incarnation that joined from the present (nodes/protocols/
    reliable.py): it is not expected to deliver what was ordered while it was down, so
    agreement is judged among the hosts that never crashed.
    """
    return {host for entry in faults
            if entry.get("kind") == "crash" and entry.get("phase", "start") == "start"
            for host in _fault_hosts(entry)}


@dataclass(frozen=True)
class FaultInterval:
    """One fault from its start to its stop (`math.inf` when it never stopped)."""

    fault: Any
    kind: str
    hosts: tuple[str, ...]
    start: int
    stop: float
    cuts: tuple[tuple[str, str], ...] = ()

    def active_at(self, t: int) -> bool:
        return self.start <= t < self.stop

    def as_dict(self) -> dict[str, Any]:
        return {"fault": self.fault, "kind": self.kind, "hosts": list(self.hosts),
                "start": self.start, "stop": None if math.isinf(self.stop) else int(self.stop)}


def intervals(faults: list[dict[str, Any]]) -> list[FaultInterval]:
    """Pair each start with the next stop of the same fault id (or kind and hosts, if no id)."""
    open_: dict[Any, dict[str, Any]] = {}
    out: list[FaultInterval] = []

    def key(entry: dict[str, Any]) -> Any:
        if "fault" in entry:
            return ("id", entry["fault"])
        return ("kh", entry.get("kind"), tuple(sorted(_fault_hosts(entry))))

    def close(start: dict[str, Any], stop: float) -> None:
        cuts = (start.get("params") or {}).get("cuts") or []
        out.append(FaultInterval(
            fault=start.get("fault"), kind=str(start.get("kind")),
            hosts=tuple(_fault_hosts(start)), start=int(start.get("t", 0)), stop=stop,
            cuts=tuple((str(a), str(b)) for a, b in cuts)))

    for entry in sorted(faults, key=lambda e: int(e.get("t", 0))):
        phase = entry.get("phase", "start")
        k = key(entry)
        if phase == "start":
            if k in open_:
                close(open_.pop(k), int(entry.get("t", 0)))
            open_[k] = entry
        elif phase == "stop" and k in open_:
            close(open_.pop(k), int(entry.get("t", 0)))
    for start in open_.values():
        close(start, math.inf)
    return sorted(out, key=lambda f: (f.start, str(f.fault)))


@dataclass
class FaultHistory:
    """Correctness of hosts and the fault intervals, for the checkers and the metrics."""

    nodes: list[str]
    intervals: list[FaultInterval]
    crashed: set[str]
    partitioned_at_end: set[str]

    @property
    def correct(self) -> list[str]:
        """Hosts that never crashed and were not cut off by a partition still on at the end."""
        return sorted(set(self.nodes) - self.crashed - self.partitioned_at_end)

    @property
    def restarted(self) -> list[str]:
        """The last incarnations that stay up to the end, as the checks name processes
        (`host@k`, analysis/checks_mid.py): a crashed host whose every crash ended in a
        restart, not cut off at the end. From its restart on such a process is correct
        (000 sec. 2.2: a restarted process is a new process) for what it sends and
        delivers: its messages must reach the correct hosts, and what it delivers too; it is
        not held to what was sent while it was down or before it joined."""
        out = []
        for host in sorted(self.crashed - self.partitioned_at_end):
            crashes = [f for f in self.intervals if f.kind == "crash" and host in f.hosts]
            if crashes and not any(math.isinf(f.stop) for f in crashes):
                out.append(f"{host}{PROCESS_MARK}{len(crashes)}")
        return out

    def active_at(self, t: int | None, hosts: list[str] | None = None) -> list[dict[str, Any]]:
        """Faults active at true time `t`, restricted to those touching `hosts` when given
        (a partition touches every host it cut off)."""
        if t is None:
            return []
        found = []
        for f in self.intervals:
            if not f.active_at(int(t)):
                continue
            touched = set(f.hosts) | cut_off(self.nodes, f.cuts)
            if hosts is None or f.kind == "partition" or touched & set(hosts):
                found.append(f.as_dict())
        return found

    def annotate(self, examples: list[dict[str, Any]], time_key: str = "t") -> None:
        """Add `faults_active` (faults active at the example's time) to each example."""
        for e in examples:
            e["faults_active"] = self.active_at(e.get(time_key))

    def partitions(self) -> list[tuple[FaultInterval, set[str]]]:
        """Every partition interval with the hosts it cut off."""
        return [(f, cut_off(self.nodes, f.cuts)) for f in self.intervals if f.kind == "partition"]


def fault_history(nodes: list[str], faults: list[dict[str, Any]]) -> FaultHistory:
    spans = intervals(faults)
    at_end: set[str] = set()
    for f in spans:
        if f.kind == "partition" and math.isinf(f.stop):
            at_end |= cut_off(nodes, f.cuts)
    return FaultHistory(nodes=list(nodes), intervals=spans, crashed=crashed_hosts(faults),
                        partitioned_at_end=at_end)
