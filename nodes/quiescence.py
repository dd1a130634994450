"""Liveness after the workload: is every message a correct host sent final-delivered at every
correct host? (docs/architecture.md "Liveness".) The drain also waits, up to its cap, for the
messages of faulty hosts that some correct host delivered (`unsettled`), and for those a
restarted host that is up sent since its restart, at that host (`unsent_own`) and at every
correct host (`owed_restarted`), and for the correct hosts' messages such a host owes from
where it joined their streams (`behind_restarted`).

The run drains until this holds or until its cap. Safety checks (total order, integrity, FIFO)
are judged on whatever was delivered; agreement and validity only prove something about a run
that reached quiescence, so the drain's outcome is written next to the logs, in `drain.json`.
"""

from __future__ import annotations

from typing import Any

from nodes.protocols.sequencer import INCARNATION_SPAN

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


def unsettled(progress: dict[str, dict[str, Any]], correct: list[str]) -> dict[str, int]:
    """For each correct host: messages of other origins (crashed, restarted or cut-off hosts)
    that some correct host final-delivered and it has not, by count per origin.

    Agreement holds every correct host to those too (000 §2.2), and a protocol may still be
    bringing them in when the correct hosts' own messages are all delivered: the lost tail of
    a crashed host's stream is recovered from a correct host's copy. The drain waits for them
    as well (up to its cap), but they do not decide quiescence: a protocol that may drop them
    (agreement not claimed) must not be called stalled for it, and one that claims agreement
    is judged by the agreement check on what was delivered.
    """
    known = set(correct)
    most: dict[str, int] = {}
    for r in correct:
        for origin, n in (progress.get(r) or {}).get("delivered", {}).items():
            if origin not in known:
                most[origin] = max(most.get(origin, 0), int(n))
    out = {}
    for r in correct:
        delivered = (progress.get(r) or {}).get("delivered", {})
        out[r] = sum(n - int(delivered.get(o, 0)) for o, n in most.items())
    return out


def unsent_own(progress: dict[str, dict[str, Any]], restarted: list[str]) -> dict[str, int]:
    """For each restarted host that is up (its last incarnation): messages of that incarnation
    it has not final-delivered itself. Validity holds it to them (docs/architecture.md
    "Liveness"), and agreement the correct hosts, so the drain waits for them as for
    `unsettled` (up to its cap; they do not decide quiescence). `progress[host]` is its
    current incarnation's: `sent` and its own deliveries count from its restart."""
    out = {}
    for r in restarted:
        got = progress.get(r) or {}
        out[r] = max(0, int(got.get("sent", 0)) - int(got.get("delivered", {}).get(r, 0)))
    return out


def owed_restarted(progress: dict[str, dict[str, Any]], correct: list[str],
                   restarted: list[str]) -> dict[str, int]:
    """For each correct host: messages that the restarted hosts that are up sent in their
    current incarnation and it has not final-delivered. Agreement holds the correct hosts to
    them (docs/architecture.md "Liveness"), and a count per origin cannot tell them apart from
    the earlier incarnation's deliveries, so they are counted per incarnation (`incarnations`
    of `NodeCore.progress()`). Waited for as `unsettled` (up to the cap; they do not decide
    quiescence)."""
    out = {}
    for r in correct:
        got = (progress.get(r) or {}).get("incarnations", {})
        owed = 0
        for h in restarted:
            mine = progress.get(h) or {}
            inc = int(mine.get("incarnation", 0))
            if inc > 0:  # a host that does not say its incarnation is not counted
                owed += max(0, int(mine.get("sent", 0)) - int(got.get(h, {}).get(str(inc), 0)))
        out[r] = owed
    return out


def behind_restarted(progress: dict[str, dict[str, Any]], correct: list[str],
                     restarted: list[str]) -> dict[str, int]:
    """For each restarted host that is up: messages of the correct hosts' origins that it owes
    and has not final-delivered. From its join point in a sender's stream on (the first
    message of it that it delivered, analysis/joins.py) agreement holds it to every message of
    that sender some correct host delivered; a sender numbers each incarnation's messages
    1, 2, ... from k * INCARNATION_SPAN, so a correct host's deliveries from the join point
    on are its count of that incarnation less the ones below the join point, plus those of
    later incarnations. Waited for as `unsettled` (up to the cap; they do not decide
    quiescence)."""
    out = {}
    for h in restarted:
        mine = progress.get(h) or {}
        owed = 0
        for origin, first in (mine.get("first") or {}).items():
            if origin == h:
                continue  # its own messages are `unsent_own`'s
            inc, at = divmod(int(first), INCARNATION_SPAN)
            most = 0
            for c in correct:
                got = progress.get(c) or {}
                per_inc = {int(k): int(n) for k, n in
                           (got.get("incarnations") or {}).get(origin, {}).items()}
                per_inc[0] = int((got.get("delivered") or {}).get(origin, 0)) - sum(
                    per_inc.values())
                since = max(0, per_inc.get(inc, 0) - at + 1) + sum(
                    n for k, n in per_inc.items() if k > inc)
                most = max(most, since)
            owed += max(0, most - int((mine.get("delivered") or {}).get(origin, 0)))
        out[h] = owed
    return out


def add_counts(into: dict[str, int], more: dict[str, int]) -> None:
    """Sum `more` into `into`, host by host."""
    for h, n in more.items():
        into[h] = into.get(h, 0) + n


def drain_record(quiescent: bool, drain_ns: int, drain_min_ns: int, drain_max_ns: int,
                 correct: list[str], missing: dict[str, int],
                 faulty_missing: dict[str, int] | None = None) -> dict[str, Any]:
    """The content of `drain.json` (`faulty_in_flight`: `unsettled`'s total, with
    `unsent_own`'s where the drain counts it, when the drain ended, only when not zero)."""
    rec = {"quiescent": quiescent, "drain_s": round(drain_ns / 1e9, 3),
           "drain_min_s": round(drain_min_ns / 1e9, 3),
           "drain_max_s": round(drain_max_ns / 1e9, 3), "correct": sorted(correct),
           "undelivered_per_node": dict(sorted(missing.items())),
           "in_flight": sum(missing.values())}
    if faulty_missing and any(faulty_missing.values()):
        rec["faulty_in_flight"] = sum(faulty_missing.values())
    return rec
