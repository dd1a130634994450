"""Liveness after the workload: is every message a correct host sent final-delivered at every
correct host? (docs/architecture.md "Liveness".)

The run drains until this holds or until its cap. Safety checks (total order, integrity, FIFO)
are judged on whatever was delivered; agreement and validity only prove something about a run
that reached quiescence, so the drain's outcome is written next to the logs, in `drain.json`.
"""

from __future__ import annotations

from typing import Any

DRAIN_FILE = "drain.json"


def connected_groups(hosts: list[str], cuts: Any) -> list[list[str]]:
    """Groups of hosts still connected both ways (a one-way cut separates too: no reply gets
    back), each sorted, in the order of their first host."""
    blocked = {frozenset(c) for c in cuts}
    groups: list[list[str]] = []
    seen: set[str] = set()
    for h in sorted(hosts):
        if h in seen:
            continue
        group, todo = [], [h]
        seen.add(h)
        while todo:
            a = todo.pop()
            group.append(a)
            for b in hosts:
                if b not in seen and frozenset((a, b)) not in blocked:
                    seen.add(b)
                    todo.append(b)
        groups.append(sorted(group))
    return groups


def cut_off(hosts: list[str], cuts: Any) -> set[str]:
    """Hosts outside the largest connected group (ties: the group with the alphabetically
    first host stays). Such hosts are not correct while the partition lasts (nor held to
    agreement after it, if it never heals)."""
    groups = connected_groups(hosts, cuts)
    if not groups:
        return set()
    keep = min(groups, key=lambda g: (-len(g), g[0]))
    return set(hosts) - set(keep)


def undelivered(progress: dict[str, dict[str, Any]], correct: list[str]) -> dict[str, int]:
    """For each correct host: messages sent by correct hosts that it has not final-delivered.

    `progress[host]` is `{"sent": n, "delivered": {origin: n}}` as `NodeCore.progress()`
    reports it. A correct host without progress (it did not answer) counts every message sent
    by the others as undelivered.
    """
    sent = {h: int(progress.get(h, {}).get("sent", 0)) for h in correct}
    out = {}
    for r in correct:
        got = progress.get(r)
        delivered = got.get("delivered", {}) if got else {}
        out[r] = sum(max(0, sent[s] - int(delivered.get(s, 0))) for s in correct)
    return out


def drain_record(quiescent: bool, drain_ns: int, drain_min_ns: int, drain_max_ns: int,
                 correct: list[str], missing: dict[str, int]) -> dict[str, Any]:
    """The content of `drain.json`."""
    return {"quiescent": quiescent, "drain_s": round(drain_ns / 1e9, 3),
            "drain_min_s": round(drain_min_ns / 1e9, 3),
            "drain_max_s": round(drain_max_ns / 1e9, 3), "correct": sorted(correct),
            "undelivered_per_node": dict(sorted(missing.items())),
            "in_flight": sum(missing.values())}
