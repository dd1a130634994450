"""Checkers for primary-partition membership and service notifications (001 §4.1, §4.3; the
oracles of docs/protocols.md "Primary partitions").

Plain Python over the delivery logs (`nodes/<host>/events.jsonl`): the `view` events of the
`primary` layer are few, and the notification checks need only each node's opt/fnl/ensured
lines in ordinal (`i`) order. Checks (keys of summary.json `checks`, claimed by `primary`):

- `split_brain`: every primary counter maps to one member set, and consecutive primaries
  (counters c, c+1 both logged) intersect in a strict majority of c's members. One finding
  per extra member set of a counter and per pair of consecutive sets failing the majority.
  A primary installed by an operator (`setPrimary`, view `operator: true`) is exempt from
  the majority part only: if the operator errs and a second primary appears with the same
  counter, the first part fires.
- `blocked_delivery`: a node delivers nothing (`opt`, `fnl`, `ensured`) between its
  `blocked` event and the next `join` or primary `view` (P10).
- `minority_blocked` (001 §4.1's majority rule, judged from the fault history rather than the
  nodes' own `blocked`): during each partition of faults.jsonl, a connected group holding no strict
  majority of the last primary before the partition logs no delivery and no primary view
  from its first membership view after the partition started that holds no member outside
  the group (detection and flush done: a view whose flush began before the cut may install
  after it with the others still in) until the heal; a group where an operator installed a
  primary (`setPrimary`) is exempt.
- `notification_order`: per process (node and incarnation) and message, opt <= fnl <=
  ensured by ordinal, none repeated, no `ensured` without `fnl` (4.3).
- `uniform`: an `ensured` (service uniform) at node n is logged only once every correct
  member of n's current primary view has logged `fnl` of the message, in true time (a node
  that crashed, or restarted and adopted the state it missed, is not held to it).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from nodes.quiescence import connected_groups

if TYPE_CHECKING:
    from analysis.record import RunRecord

EXAMPLES = 5
MEMBERSHIP_CHECKS = ("split_brain", "blocked_delivery", "minority_blocked", "notification_order",
                     "uniform")
_WANTED = ("start", "stop", "view", "blocked", "excluded", "join", "opt", "fnl", "ensured",
           "refused", "set_primary", "state")

Events = dict[str, list[dict[str, Any]]]


def read_membership_events(record: RunRecord) -> Events:
    """Per node, the events these checks read, sorted by ordinal `i`, without the `fnl`s a
    later state transfer revoked."""
    return record.events(_WANTED, revoke=True)


def _primary_views(events: Events) -> list[tuple[str, dict[str, Any]]]:
    return [(n, e) for n, evs in events.items() for e in evs
            if e["ev"] == "view" and e.get("primary") is True]


def _result(found: list[dict[str, Any]], claimed: bool) -> dict[str, Any]:
    return {"violations": len(found), "claimed": claimed, "examples": found[:EXAMPLES]}


def split_brain(events: Events) -> list[dict[str, Any]]:
    sets: dict[int, dict[frozenset[str], list[str]]] = defaultdict(dict)
    operator: set[int] = set()  # counters an operator installed (setPrimary): no majority rule
    for node, e in _primary_views(events):
        sets[int(e["counter"])].setdefault(frozenset(e["members"]), []).append(node)
        if e.get("operator"):
            operator.add(int(e["counter"]))
    found: list[dict[str, Any]] = []
    for c in sorted(sets):
        if len(sets[c]) > 1:
            for extra in sorted(sets[c], key=sorted)[1:]:
                found.append({"counter": c, "members": sorted(extra),
                              "others": [sorted(s) for s in sets[c] if s != extra],
                              "why": "two member sets for one primary counter"})
        for prev in sets.get(c - 1, {}) if c not in operator else ():
            for cur in sets[c]:
                if len(prev & cur) < len(prev) // 2 + 1:
                    found.append({"counter": c, "members": sorted(cur),
                                  "previous": sorted(prev),
                                  "why": "no strict majority of the previous primary"})
    return found


def blocked_delivery(events: Events) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for node, evs in events.items():
        blocked_at: dict[str, Any] | None = None
        for e in evs:
            ev = e["ev"]
            if ev == "blocked":
                blocked_at = e
            elif ev == "join" or (ev == "view" and e.get("primary") is True):
                blocked_at = None
            elif blocked_at is not None and ev in ("opt", "fnl", "ensured"):
                found.append({"node": node, "mid": e.get("mid"), "ev": ev, "t": e["t"],
                              "blocked_t": blocked_at["t"]})
    return found


def notification_order(events: Events) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for node, evs in events.items():
        # per process: a restarted incarnation is a process of its own (its state is the
        # primary's, adopted), so what an earlier one was notified of is no repeat
        seen: dict[tuple[int, str], dict[str, list[int]]] = defaultdict(
            lambda: defaultdict(list))
        inc = 0
        for e in evs:
            if e["ev"] == "start":
                inc = int(e.get("incarnation", 0))
            elif e["ev"] in ("opt", "fnl", "ensured") and e.get("mid"):
                seen[(inc, e["mid"])][e["ev"]].append(e["i"])
        for (_, mid), by in seen.items():
            why = None
            if any(len(v) > 1 for v in by.values()):
                why = "repeated notification"
            elif "ensured" in by and "fnl" not in by:
                why = "ensured without fnl"
            elif "ensured" in by and by["ensured"][0] < by["fnl"][0]:
                why = "ensured before fnl"
            elif "opt" in by and "fnl" in by and by["opt"][0] > by["fnl"][0]:
                why = "opt after fnl"
            if why is not None:
                found.append({"node": node, "mid": mid, "why": why})
    return found


def crashed(events: Events) -> set[str]:
    """Nodes that are not correct by their own log: restarted (a start with incarnation > 0)
    or never stopped. A restarted node adopts the state it missed without logging it."""
    return {n for n, evs in events.items()
            if any(e["ev"] == "start" and e.get("incarnation", 0) > 0 for e in evs)
            or not any(e["ev"] == "stop" for e in evs)}


def uniform(events: Events) -> list[dict[str, Any]]:
    down = crashed(events)
    fnl_t: dict[tuple[str, str], int] = {}
    for node, evs in events.items():
        for e in evs:
            if e["ev"] == "fnl" and e.get("mid"):
                fnl_t.setdefault((node, e["mid"]), e["t"])
    found: list[dict[str, Any]] = []
    for node, evs in events.items():
        members: list[str] = []
        for e in evs:
            if e["ev"] == "view" and e.get("primary") is True:
                members = list(e["members"])
            elif e["ev"] == "ensured":
                lacking = [m for m in members if m not in down
                           and fnl_t.get((m, e["mid"]), e["t"] + 1) > e["t"]]
                if lacking or not members:
                    found.append({"node": node, "mid": e["mid"], "t": e["t"],
                                  "lacking": lacking or ["(no primary view)"]})
    return found


Partition = tuple[int, float, list[list[str]]]  # start, stop, connected groups


def read_partitions(record: RunRecord, hosts: list[str]) -> list[Partition]:
    """Partition intervals of faults.jsonl (start to stop, or to the end) with their groups."""
    entries = record.faults
    out: list[Partition] = []
    open_: dict[Any, dict[str, Any]] = {}
    for e in sorted(entries, key=lambda e: int(e.get("t", 0))):
        if e.get("kind") != "partition":
            continue
        key = e.get("fault")
        if e.get("phase", "start") == "start":
            if key in open_:
                start = open_.pop(key)
                out.append((int(start["t"]), int(e["t"]), _cut_groups(hosts, start)))
            open_[key] = e
        elif key in open_:
            start = open_.pop(key)
            out.append((int(start["t"]), int(e["t"]), _cut_groups(hosts, start)))
    out += [(int(s["t"]), float("inf"), _cut_groups(hosts, s)) for s in open_.values()]
    return sorted(out, key=lambda p: p[0])


def _cut_groups(hosts: list[str], start: dict[str, Any]) -> list[list[str]]:
    return connected_groups(hosts, (start.get("params") or {}).get("cuts") or [])


def minority_blocked(events: Events, partitions: list[Partition]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    views = sorted(((e["t"], e) for _, e in _primary_views(events)), key=lambda x: x[0])
    for start, stop, groups in partitions:
        before = [e for t, e in views if t < start]
        if not before:
            continue
        last = max(before, key=lambda e: int(e["counter"]))["members"]
        for group in groups:
            if len(set(group) & set(last)) >= len(last) // 2 + 1:
                continue  # the majority side: it goes on
            if any(e.get("operator") and start <= t < stop and e["node"] in group
                   for t, e in views):
                continue  # an operator chose this side (P9)
            for node in group:
                evs = events.get(node, [])
                # the first view that reflects the cut (no member outside the group): a view
                # a flush begun before the cut installs after it still holds the others, and
                # until the detector fires the node is a member of that view as before
                since = next((e["t"] for e in evs if e["ev"] == "view"
                              and e.get("layer") == "membership" and e["t"] > start
                              and set(e.get("members") or ()) <= set(group)), None)
                if since is None:
                    continue
                for e in evs:
                    primary_view = e["ev"] == "view" and e.get("primary") is True
                    if since < e["t"] < stop and (
                            e["ev"] in ("opt", "fnl", "ensured") or primary_view):
                        found.append({"node": node, "ev": e["ev"], "mid": e.get("mid"),
                                      "t": e["t"], "partition_start": start,
                                      "group": group, "last_primary": last})
    return found


def membership_section(record: RunRecord) -> dict[str, Any]:
    """`checks` (the four above) and `membership` for summary.json; {} for a run without
    primary views (another protocol)."""
    if not record.logs_mention("view"):  # a run of another protocol: no parsing
        return {}
    events = read_membership_events(record)
    views = _primary_views(events)
    if not views:
        return {}
    primaries: dict[int, list[list[str]]] = defaultdict(list)
    for _, e in views:
        if sorted(e["members"]) not in primaries[int(e["counter"])]:
            primaries[int(e["counter"])].append(sorted(e["members"]))
    per_node: dict[str, dict[str, int]] = {}
    for node, evs in events.items():
        count: dict[str, int] = defaultdict(int)
        for e in evs:
            if e["ev"] in ("blocked", "excluded", "join", "ensured"):
                count[e["ev"]] += 1
            elif e["ev"] == "refused":
                count["refused"] += int(e.get("count", 0))
        per_node[node] = {k: count[k] for k in ("blocked", "excluded", "join", "refused",
                                                "ensured")}
    checks = {"split_brain": _result(split_brain(events), True),
              "blocked_delivery": _result(blocked_delivery(events), True),
              "minority_blocked": _result(
                  minority_blocked(events, read_partitions(record, sorted(events))), True),
              "notification_order": _result(notification_order(events), True),
              "uniform": _result(uniform(events), True)}
    # The primary views as installed (first install of each counter; `operator`: by
    # setPrimary, 001 §4.2) and the operator's setPrimary calls, for the report.
    installs: dict[int, dict[str, Any]] = {}
    for node, e in sorted(views, key=lambda v: v[1]["t"]):
        c = int(e["counter"])
        if c not in installs:
            installs[c] = {"counter": c, "members": sorted(e["members"]), "t": e["t"],
                           "first": node, "operator": bool(e.get("operator")), "nodes": 0}
        installs[c]["nodes"] += 1
    calls = [{"node": node, "t": e["t"], "status": e.get("status")}
             for node, evs in events.items() for e in evs if e["ev"] == "set_primary"]
    return {"checks": checks,
            "membership": {"primaries": {str(c): primaries[c] for c in sorted(primaries)},
                           "last_counter": max(primaries), "per_node": per_node,
                           "views": [installs[c] for c in sorted(installs)],
                           "set_primary": sorted(calls, key=lambda x: x["t"])}}
