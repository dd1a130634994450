"""Safety checkers for total-order multicast, run over the fnl (final delivery) events.

The three properties are those of atomic broadcast (Défago et al. style, as used by the
sequencer/SETO papers): total order, agreement and integrity. Each checker returns
`{"violations": int, "examples": [...]}` with at most `MAX_EXAMPLES` concrete witnesses.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from analysis import checks_node, checks_order
from analysis.fault_history import FaultHistory

MAX_EXAMPLES = 10

Check = dict[str, Any]


def final_deliveries(events: DataFrame) -> DataFrame:
    """All fnl events with a mid: columns node, mid, i, t, seq."""
    return events.filter((F.col("ev") == "fnl") & F.col("mid").isNotNull()).select(
        "node", "mid", "i", "t", "seq"
    )


def first_deliveries(events: DataFrame) -> DataFrame:
    """One row per (node, mid): the first fnl by event ordinal, plus `pos`, its rank at the node
    (one shuffle by node, then numpy per node: analysis/checks_node.py)."""
    return checks_node.node_pass(events).select("node", "mid", "i", "t", "seq", "pos")


def mid_table(firsts: DataFrame, events: DataFrame) -> DataFrame:
    """Per mid, over first deliveries and sends: `gt`, the lower median delivery time;
    `t_first`, the first; `delivered_by`, the sorted nodes that delivered it; `sender` and
    `t_send` of its send events and `sent`, whether there was any (analysis/checks_node.py)."""
    return checks_node.mid_table(firsts, events)


def total_order(
    events: DataFrame, firsts: DataFrame | None = None, history: FaultHistory | None = None
) -> Check:
    """Pairs of messages that two nodes fnl-delivered in different relative orders, over all
    node pairs with gaps allowed (analysis/checks_order.py). Each example names the nodes
    whose order differs from the reference node's (the one with most deliveries)."""
    firsts = first_deliveries(events) if firsts is None else firsts
    return checks_order.total_order(checks_order.ranked_deliveries(firsts), history)


def agreement(
    events: DataFrame,
    nodes: list[str],
    crashed: set[str],
    firsts: DataFrame | None = None,
    history: FaultHistory | None = None,
    mids: DataFrame | None = None,
) -> Check:
    """(mid, node) pairs where a correct node never fnl-delivered a message some node did.

    With a fault `history`, hosts cut off by a partition that never healed are not correct
    either (they could not have caught up), and each example carries the time of the
    message's first delivery and the faults active then. `mids` is `mid_table`'s result.
    """
    excluded = crashed | (history.partitioned_at_end if history else set())
    correct = sorted(set(nodes) - excluded)
    result: Check = {
        "violations": 0,
        "correct_nodes": correct,
        "crashed_nodes": sorted(crashed),
        "missing_per_node": {},
        "examples": [],
    }
    if history is not None:
        result["partitioned_at_end"] = sorted(history.partitioned_at_end)
    if not correct:
        return result
    if mids is None:
        firsts = first_deliveries(events) if firsts is None else firsts
        mids = mid_table(firsts, events)
    # Per delivered message, the correct nodes missing from its holders: no cross join.
    everyone = F.array(*[F.lit(n) for n in correct])
    missing = mids.filter(F.size("delivered_by") > 0).select(
        "mid", F.explode(F.array_except(everyone, "delivered_by")).alias("node"),
        "delivered_by", F.col("t_first").alias("_t"))
    per_node = {r["node"]: int(r["count"]) for r in missing.groupBy("node").count().collect()}
    total = sum(per_node.values())
    rows = missing.orderBy("mid", "node").limit(MAX_EXAMPLES).collect() if total else []
    result["violations"] = total
    result["missing_per_node"] = dict(sorted(per_node.items()))
    examples = [{k: v for k, v in r.asDict(recursive=True).items() if k != "_t"} for r in rows]
    if history is not None:
        for e, r in zip(examples, rows, strict=True):
            e["t"] = r["_t"]
        history.annotate(examples)
    result["examples"] = examples
    return result


def integrity(
    events: DataFrame, passed: DataFrame | None = None, mids: DataFrame | None = None
) -> Check:
    """Duplicate fnl deliveries (one per extra copy) and deliveries of never-sent messages.

    `passed` is analysis.checks_node.node_pass's result, `mids` mid_table's."""
    passed = checks_node.node_pass(events) if passed is None else passed
    if mids is None:
        mids = mid_table(passed.select("node", "mid", "t"), events)
    dups = passed.filter(F.col("copies") > 1).select(
        F.lit("duplicate").alias("kind"), "node", "mid", "all_i", (F.col("copies") - 1).alias("n"))
    # Every fnl event of a never-sent message counts, copies included.
    unsent = (passed.join(F.broadcast(mids.filter(~F.col("sent")).select("mid")), "mid")
              .select(F.lit("never_sent").alias("kind"), "node", "mid",
                      F.explode(F.coalesce("all_i", F.array("i"))).alias("_i"))
              .select("kind", "node", "mid", F.array("_i").alias("all_i"), F.lit(1).alias("n")))
    found = dups.unionByName(unsent).withColumnRenamed("all_i", "i").withColumn(
        "_kind_total", F.sum("n").over(Window.partitionBy("kind"))
    )
    # Both kinds' totals ride along with their first examples (alternating, so both kinds show):
    # one Spark job for the checker.
    rows = [
        r.asDict(recursive=True)
        for r in found.withColumn(
            "_rank", F.row_number().over(Window.partitionBy("kind").orderBy("node", "mid", "i"))
        )
        .filter(F.col("_rank") <= MAX_EXAMPLES)
        .orderBy("_rank", "kind")
        .collect()
    ]
    totals = {r["kind"]: int(r["_kind_total"]) for r in rows}
    duplicates, never_sent = totals.get("duplicate", 0), totals.get("never_sent", 0)
    examples = [
        {"kind": r["kind"], "node": r["node"], "mid": r["mid"], "i": r["i"], "extra": r["n"]}
        for r in rows
    ]
    return {
        "violations": duplicates + never_sent,
        "duplicates": duplicates,
        "never_sent": never_sent,
        "examples": examples[:MAX_EXAMPLES],
    }


def run_checks(events: DataFrame, nodes: list[str], crashed: set[str]) -> dict[str, Check]:
    """All checkers, keyed as in summary.json's `checks`."""
    passed = checks_node.node_pass(events).cache()
    firsts = passed.select("node", "mid", "i", "t", "seq", "pos")
    mids = mid_table(firsts, events).cache()
    try:
        return {
            "total_order": checks_order.total_order(
                checks_order.ranked_deliveries(firsts, mids)),
            "agreement": agreement(events, nodes, crashed, firsts, mids=mids),
            "integrity": integrity(events, passed, mids),
        }
    finally:
        mids.unpersist()
        passed.unpersist()


def validity(events: DataFrame, history: FaultHistory, firsts: DataFrame | None = None,
             mids: DataFrame | None = None) -> Check:
    """Messages of correct senders that a correct host should have fnl-delivered and did not.

    Two kinds: `not_self_delivered`, a correct sender never delivered its own message (the
    validity of atomic broadcast, 004 Definition 1 liveness); `received_not_delivered`, a
    correct host received (recv) a correct sender's message and never delivered it (004
    Definition 2 liveness: gaps only for faulty senders or messages the network lost).
    """
    if mids is None:
        firsts = first_deliveries(events) if firsts is None else firsts
        mids = mid_table(firsts, events)
    correct = history.correct
    correct_sends = mids.filter(F.col("sender").isin(correct))
    own = (correct_sends.filter(~F.array_contains("delivered_by", F.col("sender")))
           .select("mid", F.col("sender").alias("node"), F.col("t_send").alias("t"))
           .withColumn("kind", F.lit("not_self_delivered")))
    recv = (events.filter((F.col("ev") == "recv") & F.col("node").isin(correct))
            .groupBy("node", "mid").agg(F.min("t").alias("t"))
            .join(correct_sends.select("mid", "delivered_by"), "mid")
            .filter(~F.array_contains("delivered_by", F.col("node")))
            .select("mid", "node", "t")
            .withColumn("kind", F.lit("received_not_delivered")))
    found = own.unionByName(recv).withColumn(
        "_kind_total", F.count("*").over(Window.partitionBy("kind")))
    rows = (found.withColumn("_rank", F.row_number().over(
        Window.partitionBy("kind").orderBy("t", "node", "mid")))
        .filter(F.col("_rank") <= MAX_EXAMPLES).orderBy("_rank", "kind").collect())
    totals = {r["kind"]: int(r["_kind_total"]) for r in rows}
    examples = [{"kind": r["kind"], "mid": r["mid"], "node": r["node"], "t": r["t"]}
                for r in rows][:MAX_EXAMPLES]
    history.annotate(examples)
    return {
        "violations": sum(totals.values()),
        "not_self_delivered": totals.get("not_self_delivered", 0),
        "received_not_delivered": totals.get("received_not_delivered", 0),
        "correct_nodes": correct,
        "examples": examples,
    }


def causal_claimed(events: DataFrame) -> bool:
    """True when every protocol named in the log promises causal fnl order."""
    protos = {r["proto"] for r in events.select("proto").distinct().collect() if r["proto"]}
    return bool(protos) and protos <= checks_order.CAUSAL_PROTOCOLS


def check_suite(events: DataFrame, history: FaultHistory) -> dict[str, Check]:
    """Every checker, judged against the crash and partition history; keyed as in summary.json.

    Each example carries `faults_active`: the faults active at the example's time `t`.
    The deliveries are shuffled twice in all: once by node (first deliveries, positions,
    copies and FIFO in one pass) and once by mid (consensus times, holders, sends).
    """
    passed = checks_node.node_pass(events).cache()
    firsts = passed.select("node", "mid", "i", "t", "seq", "pos")
    mids = mid_table(firsts, events).cache()
    rank = checks_order.consensus_rank(firsts, mids).cache()
    ranked = checks_order.ranked_deliveries(firsts, mids, rank).cache()
    try:
        return {
            "total_order": checks_order.total_order(ranked, history),
            "agreement": agreement(events, history.nodes, history.crashed, firsts, history,
                                   mids),
            "validity": validity(events, history, firsts, mids),
            "integrity": integrity(events, passed, mids),
            "fifo_order": checks_order.fifo_order(passed, history),
            "causal_order": checks_order.causal_order(events, ranked, causal_claimed(events),
                                                      history, rank),
        }
    finally:
        ranked.unpersist()
        rank.unpersist()
        mids.unpersist()
        passed.unpersist()
