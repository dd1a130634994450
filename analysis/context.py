"""`context_order`: a total order built on Psync's context graph respects it (002 "Total
Ordering: History Based": total order is constructed from causal order; 001 ch. 2: messages
delivered according to their partial order).

Psync's partial order is its context graph, not happened-before over deliveries: m depends
on every message in its sender's graph when it was sent, including messages `psync-total`
had not yet totally delivered there. The deliveries alone cannot show that, so each
multicast logs its deps (`ev=context`: `mid`, `deps`, `null` for a NULL; nodes/protocols/
psync.py). A message's predecessors are its deps and its chain's previous message; a NULL,
never delivered, stands for its own predecessors. A delivery of m at a process is *early*
when a predecessor of m comes later at that process (the same incarnation's log): counted
once per m, with an example naming both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from analysis.record import RunRecord

EXAMPLES = 5


def predecessors(context: Mapping[str, tuple[list[str], bool]], mid: str,
                 memo: dict[str, frozenset[str]]) -> frozenset[str]:
    """The delivered messages m must follow: its deps and chain predecessor, NULLs replaced
    by their own predecessors (a post-order walk without recursion: chains of NULLs are long
    on an idle sender)."""
    stack = [(mid, False)]
    while stack:
        m, ready = stack.pop()
        if m in memo:
            continue
        direct = _direct(context, m)
        if not ready:
            stack.append((m, True))
            stack += [(d, False) for d in direct if _null(context, d) and d not in memo]
            continue
        out: set[str] = set()
        for d in direct:
            if _null(context, d):
                out |= memo.get(d, frozenset())
            else:
                out.add(d)
        memo[m] = frozenset(out)
    return memo[mid]


def _null(context: Mapping[str, tuple[list[str], bool]], mid: str) -> bool:
    return mid in context and context[mid][1]


def _direct(context: Mapping[str, tuple[list[str], bool]], mid: str) -> list[str]:
    origin, _, n = mid.rpartition(":")
    return [*context.get(mid, ([], False))[0], f"{origin}:{int(n) - 1}"]


def context_order(events: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """The check (module docstring) over each host's `context` and `fnl` events."""
    context = {str(e["mid"]): ([str(d) for d in e.get("deps") or ()], bool(e.get("null")))
               for evs in events.values() for e in evs if e.get("ev") == "context"}
    memo: dict[str, frozenset[str]] = {}
    found: list[dict[str, Any]] = []
    for host, evs in sorted(events.items()):
        at: dict[tuple[int, str], int] = {}
        fnl = [e for e in evs if e.get("ev") == "fnl"]
        for k, e in enumerate(fnl):
            at.setdefault((int(e.get("inc", 0)), str(e["mid"])), k)
        for k, e in enumerate(fnl):
            mid, inc = str(e["mid"]), int(e.get("inc", 0))
            if at[(inc, mid)] != k or mid not in context:
                continue
            late = sorted(d for d in predecessors(context, mid, memo)
                          if at.get((inc, d), -1) > k)
            if late:
                found.append({"node": host, "incarnation": inc, "mid": mid,
                              "delivered_before": late[:3]})
    return {"violations": len(found), "claimed": True, "examples": found[:EXAMPLES]}


def add_context(summary: dict[str, Any], record: RunRecord, history: Any) -> None:
    """`checks.context_order` of a run whose nodes log their context (none: nothing)."""
    events = record.events({"context", "fnl"})
    if any(e.get("ev") == "context" for evs in events.values() for e in evs):
        summary["checks"]["context_order"] = context_order(events)
