"""Order checkers over fnl deliveries: total order (with gaps), FIFO per sender, causal order.

Total order is 004's Definition 2 (sec. 3): if two processes both deliver m and m', they
deliver them in the same order -- for every pair of processes, on the messages they have in
common, gaps allowed. Comparing all node pairs directly is quadratic in nodes and messages, so
each node is compared against one consensus order g instead: a pair {m, m'} held by a set of
nodes is ordered differently by two of them exactly when some holder inverts it relative to g
and some other holder does not. That is exact for any total order g; g only decides how many
inversions get enumerated, so it is the lower median of the message's delivery times (true
time) over the nodes, which follows the common order wherever the nodes agree.

FIFO (002, "FIFO ordering"): the fnl order of each sender's messages at a node follows their
number n (gaps allowed: a missing message is agreement's business).

Causal (002, "Causal ordering"): if a node sent m2 after it fnl-delivered m1, everyone delivers
m1 before m2. Judged against g: where total order holds every node's order is g's on what it
holds, so m2 must come after the latest-ordered message its sender had delivered when it sent
m2 -- one running maximum per node instead of a quadratic prefix comparison.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from analysis import checks_node
from analysis.fault_history import FaultHistory

MAX_EXAMPLES = 10
# Inverted pairs enumerated per node before only counting; a node past this is reported as
# `truncated` (its history is broken far beyond what examples can show anyway).
MAX_PAIRS_PER_NODE = 200_000
# Protocols whose fnl order is causal (fixed-sequencer based: 000 Fig. 1, 003 Fig. 2). FIFO is
# claimed by every total-order protocol.
CAUSAL_PROTOCOLS = frozenset({"sequencer", "seto", "fast-seto"})

Check = dict[str, Any]
_INVERSIONS = "node string, a long, b long, total long"


def consensus_rank(firsts: DataFrame, mids: DataFrame | None = None) -> DataFrame:
    """Per mid: `g`, its rank in the consensus order (lower median fnl time, then mid).
    `mids` (analysis.checks.mid_table of `firsts`) saves the aggregation when given."""
    if mids is None:
        times = F.sort_array(F.collect_list("t"))
        med = firsts.groupBy("mid").agg(times.alias("ts")).select(
            "mid", F.element_at("ts", ((F.size("ts") - 1) / 2).cast("int") + 1).alias("gt"))
    else:
        med = mids.filter(F.size("delivered_by") > 0).select("mid", "gt")
    # One global sort of the messages (not of the deliveries): a single partition is fine.
    return med.select("mid", F.row_number().over(Window.orderBy("gt", "mid")).alias("g"))


def _inversions(key: tuple[Any, ...], table: pa.Table) -> pa.Table:
    """Pairs (a, b) of g-ranks, a < b, that this node delivered b-first; plus a total row
    (a = -1, b = the node's deliveries) with the node's exact number of inverted pairs."""
    node = key[0].as_py()
    pos = table.column("pos").to_numpy()
    r = table.column("g").to_numpy()[np.argsort(pos, kind="stable")].astype(np.int64)
    n = len(r)
    a_out: list[int] = []
    b_out: list[int] = []
    total = 0
    if n > 1:
        prefix_max = np.maximum.accumulate(r)
        suffix_min = np.minimum.accumulate(r[::-1])[::-1]
        # Only an element with a larger one before it or a smaller one after it takes part in
        # an inversion, so a clean node costs two vector passes and nothing else.
        involved = np.zeros(n, dtype=bool)
        involved[1:] |= prefix_max[:-1] > r[1:]
        involved[:-1] |= suffix_min[1:] < r[:-1]
        seen: list[int] = []
        for x in r[involved].tolist():
            k = bisect.bisect_right(seen, x)
            larger = seen[k:]
            total += len(larger)
            room = MAX_PAIRS_PER_NODE - len(a_out)
            if room > 0 and larger:
                a_out += [x] * min(room, len(larger))
                b_out += larger[:room]
            seen.insert(k, x)
    m = len(a_out) + 1
    return pa.table({"node": pa.array([node] * m, pa.string()),
                     "a": pa.array([-1, *a_out], pa.int64()),
                     "b": pa.array([n, *b_out], pa.int64()),
                     "total": pa.array([total] + [-1] * (m - 1), pa.int64())})


def ranked_deliveries(firsts: DataFrame, mids: DataFrame | None = None,
                      rank: DataFrame | None = None) -> DataFrame:
    """`firsts` (analysis.checks.first_deliveries) with each message's consensus rank `g`.

    The ranks are broadcast, so the deliveries keep their partitioning by node and the
    per-node inversion pass needs no second shuffle of them."""
    rank = consensus_rank(firsts, mids) if rank is None else rank
    return firsts.join(F.broadcast(rank), "mid").select("node", "mid", "i", "pos", "t", "g")


def total_order(ranked: DataFrame, history: FaultHistory | None = None) -> Check:
    """Distinct message pairs that two nodes fnl-delivered in different orders (all node pairs).

    `ranked` comes from `ranked_deliveries`. The reference named in the result and the
    examples is the node with most deliveries (ties: first by name).
    """
    inv = ranked.select("node", "pos", "g").groupBy("node").applyInArrow(
        _inversions, _INVERSIONS).cache()
    try:
        per_node = inv.filter("a < 0").select("node", "total", "b").collect()
        totals = {r["node"]: int(r["total"]) for r in per_node}
        ref = min(per_node, key=lambda r: (-r["b"], r["node"]))["node"] if per_node else None
        rows = _disagreeing_pairs(inv, ranked) if any(totals.values()) else []
    finally:
        inv.unpersist()
    total = int(rows[0]["_total"]) if rows else 0
    examples = _order_examples(ranked, rows, ref, history) if ref else []
    return {"violations": total, "reference": ref,
            "inverted_per_node": {k: v for k, v in sorted(totals.items()) if v},
            "truncated": any(v > MAX_PAIRS_PER_NODE for v in totals.values()),
            "examples": examples}


def _disagreeing_pairs(inv: DataFrame, ranked: DataFrame) -> list[Any]:
    """Inverted pairs that some other holder of both messages orders the consensus way: the
    first MAX_EXAMPLES by rank, each row carrying the total count as `_total`."""
    pairs = inv.filter("a >= 0").groupBy("a", "b").agg(
        F.sort_array(F.collect_set("node")).alias("inverted"))
    # Only the messages in some inverted pair matter: a broadcast semi-join keeps the join
    # below away from every other delivery.
    ends = pairs.select(F.col("a").alias("g")).union(pairs.select(F.col("b").alias("g")))
    held = ranked.select("node", "g").join(F.broadcast(ends.distinct()), "g", "left_semi")
    both = (pairs.join(held.withColumnRenamed("g", "a"), "a")
            .join(held.withColumnRenamed("g", "b"), ["b", "node"])
            .groupBy("a", "b", "inverted")
            .agg(F.sort_array(F.collect_set("node")).alias("all")))
    bad = both.filter(F.size("inverted") < F.size("all"))
    return bad.withColumn("_total", F.count("*").over(Window.partitionBy())).orderBy(
        "a", "b").limit(MAX_EXAMPLES).collect()


def _order_examples(ranked: DataFrame, rows: list[Any], ref: str,
                    history: FaultHistory | None) -> list[dict[str, Any]]:
    if not rows:
        return []
    gs = sorted({r["a"] for r in rows} | {r["b"] for r in rows})
    where: dict[int, dict[str, tuple[int, int, str]]] = {}
    for r in ranked.filter(F.col("g").isin(gs)).collect():
        where.setdefault(r["g"], {})[r["node"]] = (r["pos"], r["t"], r["mid"])
    out = []
    for r in rows:
        a, b = where[r["a"]], where[r["b"]]
        mid_a, mid_b = next(iter(a.values()))[2], next(iter(b.values()))[2]
        first_a = sorted(n for n in r["all"] if a[n][0] < b[n][0])
        first_b = sorted(n for n in r["all"] if a[n][0] > b[n][0])
        if ref in r["all"]:
            differs = first_b if ref in first_a else first_a
        else:
            differs = list(r["inverted"])
        node = differs[0]
        t = max(a[node][1], b[node][1])
        ex: dict[str, Any] = {
            "mids": sorted([mid_a, mid_b]), "nodes": differs, "reference": ref,
            "orders": {f"{mid_a} before {mid_b}": first_a, f"{mid_b} before {mid_a}": first_b},
            "node_positions": {n: [a[n][0], b[n][0]] for n in sorted(r["all"])}, "t": t}
        out.append(ex)
    if history is not None:
        history.annotate(out)
    return out


def fifo_order(passed: DataFrame, history: FaultHistory | None = None) -> Check:
    """Deliveries of a sender's message after a later message of the same sender, per node.

    `passed` is analysis.checks_node.node_pass's result, which flags them (`fifo_late`)."""
    late = passed.filter(F.col("fifo_late"))
    rows = late.withColumn("_total", F.count("*").over(Window.partitionBy())).orderBy(
        "node", "i").limit(MAX_EXAMPLES).collect()
    examples = [{"node": r["node"], "sender": r["fifo_sender"], "mid": r["mid"],
                 "delivered_after": r["fifo_after"], "i": r["i"], "t": r["t"]} for r in rows]
    if history is not None:
        history.annotate(examples)
    return {"violations": int(rows[0]["_total"]) if rows else 0, "examples": examples}


def causal_order(events: DataFrame, ranked: DataFrame, claimed: bool,
                 history: FaultHistory | None = None, rank: DataFrame | None = None) -> Check:
    """Messages sent after their sender delivered some m1 that the consensus orders after them.

    When the protocol does not claim causal order, what is found is reported as `observed`
    and does not count as a violation. `rank` is consensus_rank's result, if at hand.
    """
    g = ranked.select("mid", "g").distinct() if rank is None else rank
    sends = (events.filter((F.col("ev") == "send") & F.col("mid").isNotNull())
             .join(g, "mid").select("node", "i", "mid", F.col("g").alias("sent_g")))
    bad = checks_node.causal_pass(ranked, sends)
    rows = bad.withColumn("_total", F.count("*").over(Window.partitionBy())).orderBy(
        "node", "i").limit(MAX_EXAMPLES).collect()
    total = int(rows[0]["_total"]) if rows else 0
    examples = _causal_examples(ranked, rows)
    if history is not None:
        history.annotate(examples)
    return {"claimed": claimed, "violations": total if claimed else 0,
            "observed": total, "examples": examples}


def _causal_examples(ranked: DataFrame, rows: list[Any]) -> list[dict[str, Any]]:
    if not rows:
        return []
    mids = sorted({r["mid"] for r in rows} | {r["latest_mid"] for r in rows})
    pos: dict[str, dict[str, tuple[int, int]]] = {}
    for r in ranked.filter(F.col("mid").isin(mids)).select("node", "mid", "pos", "t").collect():
        pos.setdefault(r["mid"], {})[r["node"]] = (r["pos"], r["t"])
    out = []
    for r in rows:
        m1, m2 = r["latest_mid"], r["mid"]
        p1, p2 = pos.get(m1, {}), pos.get(m2, {})
        wrong = sorted(n for n in p2 if n in p1 and p2[n][0] < p1[n][0])
        missing = sorted(n for n in p2 if n not in p1)
        t = min((p2[n][1] for n in wrong), default=None)
        out.append({"sender": r["node"], "delivered": m1, "then_sent": m2,
                    "nodes_m2_before_m1": wrong, "nodes_without_m1": missing, "t": t})
    return out

