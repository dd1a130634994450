"""Order checkers over fnl deliveries: total order (with gaps), FIFO per sender, causal order.

Total order is 004's Definition 2 (sec. 3): if two processes both deliver m and m', they
deliver them in the same order -- for every pair of processes, on the messages they have in
common, gaps allowed. Comparing all node pairs directly is quadratic in nodes and messages, so
each node is compared against one consensus order g instead: a pair {m, m'} held by a set of
nodes is ordered differently by two of them exactly when some holder inverts it relative to g
and some other holder does not. That is exact for any total order g; g only decides how many
inversions get enumerated, so it is the lower median of the message's delivery times (true
time) over the nodes, then the mid, which follows the common order wherever the nodes agree.
Nodes compare (gt, mid) keys among themselves (analysis/checks_node.py), so g is never
materialized; each inverted pair carries the bitmap of the nodes holding both messages, so
"some other holder does not invert it" is a count here. A node with more than
MAX_PAIRS_PER_NODE inversions has only some enumerated, so only a holder enumerated in full
counts as not inverting (else a pair inverted everywhere read as a disagreement).

FIFO (002, "FIFO ordering"): the fnl order of each sender's messages at a node follows their
number n (gaps allowed: a missing message is agreement's business). It counts the fewest
deliveries that must move (off a longest increasing subsequence), so one misplaced delivery
is one finding however many messages it jumped.

Causal (002, "Causal ordering"): if a node sent m2 after it sent or fnl-delivered m1, everyone
delivers m1 before m2. Judged per delivering process
(analysis/checks_causal.py: vector clocks over every process's sends and deliveries, so
happened-before is transitive, chains through messages a node never delivers included),
counting the deliveries that must move.

Each function here turns the records of the two passes (analysis/checks_mid.py,
analysis/checks_node.py) into a checker's result; `first_fnl` looks up the few deliveries
that examples show.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from analysis.checks_mid import process_names
from analysis.fault_history import FaultHistory

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

MAX_EXAMPLES = 10
# Inverted pairs enumerated per node before only counting; a node past this is reported as
# `truncated` (its history is broken far beyond what examples can show anyway).
MAX_PAIRS_PER_NODE = 200_000

Check = dict[str, Any]
Records = dict[str, list[dict[str, Any]]]
# Per mid, per node: (ordinal, time) of the node's first fnl of it.
Firsts = dict[str, dict[str, tuple[int, int]]]
Lookup = Callable[[set[str]], Firsts]


def first_fnl(events: DataFrame, mids: set[str]) -> Firsts:
    """The first fnl (ordinal, time) of each of `mids` at each node that delivered it: one
    filtered scan, for the handful of messages that examples show (first_fnl_table on the
    few rows it finds)."""
    from pyspark.sql import functions as F

    if not mids:
        return {}
    rows = events.filter((F.col("ev") == "fnl") & F.col("mid").isin(sorted(mids))).select(
        "node", "inc", "mid", "i", "t").toArrow()
    return first_fnl_table(rows, mids)


def first_fnl_table(fnl: pa.Table, mids: set[str]) -> Firsts:
    """first_fnl over an Arrow table of fnl events (columns node, inc, mid, i, t; other
    events must be filtered out already): the smallest (i, t) per (mid, process) among
    `mids`, keyed by process name as the checks name them (checks_mid.process_names)."""
    if not mids or not fnl.num_rows:
        return {}
    rows = fnl.filter(pc.is_in(fnl["mid"], value_set=pa.array(sorted(mids), pa.string())))
    procs = process_names(rows["node"], rows["inc"]).to_pylist()
    out: Firsts = {}
    for node, mid, i, t in zip(procs, *(rows[c].to_pylist() for c in ("mid", "i", "t")),
                               strict=True):
        seen = out.setdefault(mid, {})
        if node not in seen or (i, t) < seen[node]:
            seen[node] = (i, t)
    return out


def example_mids(recs: Records, names: list[str]) -> set[str]:
    """Every mid whose first deliveries total_order's and causal_order's examples show (the
    same choice those functions make), so that one lookup serves both (Prefetched)."""
    _, ref, _, bad = _total_order_pairs(recs, names)
    mids = ({m for k in bad[:MAX_EXAMPLES] for m in (k[1], k[3])}
            if bad and ref is not None else set())
    return mids | {r["mid"] for r in _causal_shown(recs)}


class Prefetched:
    """A Lookup that asks `lookup` once for `mids` up front (on the Spark driver, a filtered
    scan of every event) and answers from what it found; a mid outside them, should one be
    asked for, costs a lookup of its own."""

    def __init__(self, lookup: Lookup, mids: set[str]) -> None:
        self.lookup = lookup
        self.asked = set(mids)
        self.found: Firsts = lookup(set(mids)) if mids else {}

    def __call__(self, mids: set[str]) -> Firsts:
        missing = mids - self.asked
        if missing:
            self.found.update(self.lookup(missing))
            self.asked |= missing
        return {m: self.found[m] for m in mids if m in self.found}


def _holders(bitmap_hex: str, nodes: list[str]) -> list[str]:
    bits = bytes.fromhex(bitmap_hex)
    return [n for k, n in enumerate(nodes) if bits[k // 8] >> (7 - k % 8) & 1]


Pairs = dict[tuple[int, str, int, str], tuple[list[str], str]]


def _total_order_pairs(recs: Records, names: list[str]) -> tuple[
        dict[str, int], str | None, Pairs, list[tuple[int, str, int, str]]]:
    """The per-node pass's total-order records merged: inversions per node, the reference
    node, each inverted pair (keyed by (ga, a, gb, b)) with the nodes inverting it and its
    holder bitmap, and the pairs that are violations, sorted."""
    per_node = [r for r in recs.get("node", []) if r["firsts"]]
    totals = {r["node"]: int(r["inv"]) for r in per_node}
    ref = min(per_node, key=lambda r: (-r["firsts"], r["node"]))["node"] if per_node else None
    pairs: Pairs = {}
    for p in recs.get("pair", []):
        key = (p["ga"], p["a"], p["gb"], p["b"])
        pairs.setdefault(key, ([], p["h"]))[0].append(p["node"])
    # A node past MAX_PAIRS_PER_NODE has only some of its inversions enumerated: that it is
    # missing from a pair's inverted list proves nothing, so a pair counts only when a holder
    # that is not truncated keeps g's order. (All nodes of a restarted member's run that
    # deliver a backlog at one instant invert g -- ties broken by mid -- hundreds of thousands
    # of times; enumerating that one incarnation in full would make every one of its pairs a
    # violation.)
    cut = {n for n, v in totals.items() if v > MAX_PAIRS_PER_NODE}
    bad = sorted(k for k, (inverted, h) in pairs.items()
                 if any(n not in inverted and n not in cut for n in _holders(h, names)))
    return totals, ref, pairs, bad


def total_order(recs: Records, names: list[str], lookup: Lookup,
                history: FaultHistory | None = None) -> Check:
    """Distinct message pairs that two nodes fnl-delivered in different orders (all node pairs).

    `names` are the hosts the pairs' holder bitmaps index, in bit order (sorted).

    The reference named in the result and the examples is the node with most deliveries
    (ties: first by name). `node_ordinals` gives, per holder, the log ordinals `i` of its
    first fnl of each of `mids`.
    """
    totals, ref, pairs, bad = _total_order_pairs(recs, names)
    examples: list[dict[str, Any]] = []
    if bad and ref is not None:
        shown = bad[:MAX_EXAMPLES]
        firsts = lookup({k[1] for k in shown} | {k[3] for k in shown})
        for key in shown:
            inverted, h = pairs[key]
            everyone = _holders(h, names)
            first_b = sorted(inverted)
            first_a = [n for n in everyone if n not in inverted]
            mid_a, mid_b = key[1], key[3]
            # The side the reference is not on (the inverted one when it holds neither).
            differs = first_a if ref in first_b else first_b
            fa, fb = firsts.get(mid_a, {}), firsts.get(mid_b, {})
            node = differs[0]
            mids = sorted([mid_a, mid_b])
            examples.append({
                "mids": mids, "nodes": differs, "reference": ref,
                "orders": {f"{mid_a} before {mid_b}": first_a,
                           f"{mid_b} before {mid_a}": first_b},
                "node_ordinals": {n: [firsts[m][n][0] for m in mids] for n in everyone},
                "t": max(fa[node][1], fb[node][1])})
        if history is not None:
            history.annotate(examples)
    return {"violations": len(bad), "reference": ref,
            "inverted_per_node": {k: v for k, v in sorted(totals.items()) if v},
            "truncated": any(v > MAX_PAIRS_PER_NODE for v in totals.values()),
            "examples": examples}


def fifo_order(recs: Records, history: FaultHistory | None = None) -> Check:
    """Per node, the fewest deliveries that must move to put every sender's messages back in
    sending order (flagged by the per-node pass: one misplaced delivery is one finding);
    examples by node, then ordinal, each naming the misplaced delivery and a message of the
    same sender it is on the wrong side of (`delivered_after` a later one, or
    `delivered_before` an earlier one)."""
    rows = sorted(recs.get("fifo", []), key=lambda r: (r["node"], r["i"]))[:MAX_EXAMPLES]
    examples = [{"node": r["node"], "sender": r["sender"], "mid": r["mid"],
                 **({"delivered_after": r["after"]} if r.get("after") else
                    {"delivered_before": r.get("before")}),
                 "i": r["i"], "t": r["t"]} for r in rows]
    if history is not None:
        history.annotate(examples)
    return {"violations": sum(r["n"] for r in recs.get("fifo_n", [])), "examples": examples}


def _causal_shown(recs: Records) -> list[dict[str, Any]]:
    """The causal records causal_order shows as examples."""
    return sorted(recs.get("causal", []), key=lambda r: (r["node"], r["i"]))[:MAX_EXAMPLES]


def causal_order(recs: Records, lookup: Lookup,
                 history: FaultHistory | None = None) -> Check:
    """Per node, the deliveries that must move to restore causal order (002 "Causal ordering"), from
    the happened-before relation the logs show (analysis/checks_causal.py): the
    smaller of the node's early deliveries (a message before one of its predecessors) and
    late ones (a predecessor after one of its successors). Examples show early deliveries:
    `node` delivered `mid` (sent by `sender` after it had delivered or sent `before`) before
    `before`.

    The count is reported whether or not the protocol claims causal order (`claimed`, set by
    the suite, decides whether it fails the run); `observed` repeats it for older readers.
    """
    early: dict[str, int] = {}
    for r in recs.get("causal_early_n", []):
        early[r["node"]] = early.get(r["node"], 0) + int(r["n"])
    late: dict[str, set[str]] = {}
    truncated: set[str] = set()
    for r in recs.get("causal_late", []):
        late.setdefault(r["node"], set()).update(r["mids"])
        if r["truncated"]:
            truncated.add(r["node"])
    per_node = {}
    for node, n_early in early.items():
        n_late = len(late.get(node, ())) if node not in truncated else n_early
        per_node[node] = min(n_early, n_late) if n_late else n_early
    rows = _causal_shown(recs)
    firsts = lookup({r["mid"] for r in rows}) if rows else {}
    examples = [{"node": r["node"], "mid": r["mid"], "sender": r["sender"],
                 "delivered_before": r["before"],
                 "t": firsts.get(r["mid"], {}).get(r["node"], (0, None))[1]} for r in rows]
    if history is not None:
        history.annotate(examples)
    total = sum(per_node.values())
    return {"violations": total, "observed": total,
            "per_node": {k: v for k, v in sorted(per_node.items()) if v},
            "examples": examples}
