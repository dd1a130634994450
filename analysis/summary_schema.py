"""The shape of summary.json as an `expect:` line reads it, to check a path before the run.

`path_problem` walks a dot path (analysis/expect.py `Expectation.path`) through `SCHEMA` and
says what is wrong with it: a key the summary never has (with the nearest one it has), or a
value that cannot compare with a number (text, a list, a whole section). A mapping's `ANY_KEY`
entry stands for keys named by the run (hosts, host pairs, checks, reasons); a key it
matches that is a near miss of a fixed key beside it (`violatons`) is a typo all the same.
`OPEN` accepts every path below it: sections whose shape follows the protocol (QoS,
membership, switching, Maelstrom workloads, the network's pcaps), checked when judged.

`SPARK_ONLY` names the sections only the Spark analysis measures; the in-process judge
(analysis/judge.py) has the checks, the liveness and the verdict, not these.
"""

from __future__ import annotations

import difflib
from typing import Any

from nodes.protocols.catalogue import CHECKS, MEMBERSHIP_CHECKS

NUMBER = "number"  # a number or a boolean (read as 1 or 0)
TEXT = "text"
LIST = "list"
OPEN = "open"
ANY_KEY = "*"

QUANTILES = {"p50_ms": NUMBER, "p95_ms": NUMBER, "p99_ms": NUMBER, "max_ms": NUMBER,
             "count": NUMBER}
CHECK = {
    "violations": NUMBER, "claimed": NUMBER, "judged": NUMBER, "unproven": NUMBER,
    "examples": LIST, "note": TEXT, "hazard": TEXT, "reference": TEXT, "truncated": NUMBER,
    "correct_nodes": LIST, "crashed_nodes": LIST, "partitioned_at_end": LIST,
    "restarted_nodes": LIST, "restarted_senders": NUMBER,
    "not_self_delivered": NUMBER, "received_not_delivered": NUMBER, "duplicates": NUMBER,
    "never_sent": NUMBER, "observed": NUMBER, "bound_ms": NUMBER,
    ANY_KEY: OPEN,  # the fields a protocol's own checks add (membership, gaps, Maelstrom)
}
PER_HOST_NUMBER = {ANY_KEY: NUMBER}
# the checks every run or a protocol's section adds; others (a Maelstrom workload's) too
KNOWN_CHECKS = (*CHECKS, "local_order", *MEMBERSHIP_CHECKS, "latency_bound", "gap_liveness")

SCHEMA: dict[str, Any] = {
    "run": TEXT,
    "nodes": LIST,
    "crashed": LIST,
    "partitioned_at_end": LIST,
    "messages": {"sent": NUMBER, "fnl": PER_HOST_NUMBER, "opt": PER_HOST_NUMBER},
    "checks": {**{name: CHECK for name in KNOWN_CHECKS}, ANY_KEY: CHECK},
    "node_errors": {"total": NUMBER, "per_node": PER_HOST_NUMBER},
    "transport": {ANY_KEY: {"malformed": NUMBER, "rejected": NUMBER,
                            "drops": PER_HOST_NUMBER}},
    "latency": {"fnl": {"all": QUANTILES, "per_receiver": {ANY_KEY: QUANTILES},
                        "per_sender": {ANY_KEY: QUANTILES}, "per_pair": {ANY_KEY: QUANTILES},
                        "clock_uncertainty_ms": NUMBER}, "emulation": TEXT},
    "throughput": {"per_node": PER_HOST_NUMBER, "min_msgs_per_s": NUMBER, "emulation": TEXT},
    "load": {"offered": NUMBER, "accepted": NUMBER, "refused": NUMBER,
             "accepted_fraction": NUMBER,
             "per_node": {ANY_KEY: {"offered": NUMBER, "accepted": NUMBER,
                                    "refused": NUMBER}}},
    "recovery": LIST,
    "clock": {"t0": NUMBER, "per_host": {ANY_KEY: {"samples": LIST, "max_abs_ms": NUMBER}}},
    "ingest": {"malformed_lines": OPEN, "parquet": TEXT},  # per host, or a count
    "liveness": {"quiescent": NUMBER, "drain_s": NUMBER, "drain_min_s": NUMBER,
                 "drain_max_s": NUMBER, "in_flight": NUMBER,
                 "undelivered_per_node": PER_HOST_NUMBER, "promised": NUMBER,
                 "promise": TEXT, "cut_short": TEXT, "unproven": PER_HOST_NUMBER,
                 "disagreement": NUMBER, "note": TEXT},
    "verdict": {"ok": NUMBER, "safety": TEXT, "liveness": TEXT, "reasons": LIST,
                "not_judged": {ANY_KEY: TEXT}},
    "ok": NUMBER,
    "analysis_s": NUMBER,
    "expectations": LIST,
    "hazards": LIST,
    "fidelity": {"status": TEXT, "policy": TEXT, "by": TEXT, "judged_pairs": NUMBER,
                 "degraded_pairs": NUMBER, "cause": TEXT, "note": TEXT, "pairs": LIST,
                 "thresholds": OPEN, "loop_lag": {ANY_KEY: QUANTILES},
                 "hold": {ANY_KEY: QUANTILES}, "cpu": OPEN},
    "optimistic": OPEN,
    "qos": OPEN,
    "membership": OPEN,
    "switching": OPEN,
    "maelstrom": OPEN,
    "network": OPEN,
}

SPARK_ONLY = frozenset({"messages", "transport", "latency", "throughput", "load", "recovery",
                        "clock", "network", "switching"})
# how close a key must be to a fixed one to be read as its typo (difflib's ratio)
NEAR = 0.8


def _near(key: str, known: list[str]) -> str | None:
    found = difflib.get_close_matches(key, known, n=1, cutoff=NEAR)
    return found[0] if found else None


def path_problem(path: tuple[str, ...]) -> str | None:
    """What is wrong with an expectation's dot path against SCHEMA; None when it may name a
    number of summary.json."""
    node: Any = SCHEMA
    for depth, key in enumerate(path):
        where = ".".join(path[:depth]) or "summary.json"
        if node == OPEN:
            return None
        if not isinstance(node, dict):
            return f"{where} is {_kind(node)}, with no key {key!r}"
        fixed = [k for k in node if k != ANY_KEY]
        near = _near(key, fixed) if key not in node else None
        if key in node:
            node = node[key]
        elif ANY_KEY in node and near is None:
            node = node[ANY_KEY]
        else:
            hint = f"; did you mean {'.'.join((*path[:depth], near, *path[depth + 1:]))!r}?" \
                if near else (
                f" (it has {', '.join(fixed)})" if fixed else "")
            return f"{where} has no key {key!r}{hint}"
    if node in (NUMBER, OPEN):
        return None
    return f"{'.'.join(path)} is {_kind(node)}, which cannot compare with a number"


def _kind(node: Any) -> str:
    if isinstance(node, dict):
        fixed = [k for k in node if k != ANY_KEY]
        return "a section" + (f" ({', '.join(fixed)})" if fixed else "")
    return {TEXT: "text", LIST: "a list"}.get(node, str(node))
