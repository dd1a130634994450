"""Safety checkers for total-order multicast, run over the fnl (final delivery) events.

The three properties are those of atomic broadcast (Défago et al. style, as used by the
sequencer/SETO papers): total order, agreement and integrity. Each checker returns
`{"violations": int, "examples": [...]}` with at most `MAX_EXAMPLES` concrete witnesses.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from analysis import checks_order
from analysis.fault_history import FaultHistory

MAX_EXAMPLES = 10

Check = dict[str, Any]


def final_deliveries(events: DataFrame) -> DataFrame:
    """All fnl events with a mid: columns node, mid, i, t, seq."""
    return events.filter((F.col("ev") == "fnl") & F.col("mid").isNotNull()).select(
        "node", "mid", "i", "t", "seq"
    )


def first_deliveries(events: DataFrame) -> DataFrame:
    """One row per (node, mid): the first fnl by event ordinal, plus `pos`, its rank at the node."""
    first = Window.partitionBy("node", "mid").orderBy("i")
    order = Window.partitionBy("node").orderBy("i")
    return (
        final_deliveries(events)
        .withColumn("_k", F.row_number().over(first))
        .filter(F.col("_k") == 1)
        .drop("_k")
        .withColumn("pos", F.row_number().over(order))
    )


def _count_and_examples(df: DataFrame, order: list[str]) -> tuple[int, list[dict[str, Any]]]:
    """Row count and the first MAX_EXAMPLES rows by `order`, in one Spark job."""
    rows = (
        df.withColumn("_total", F.count("*").over(Window.partitionBy()))
        .orderBy(*order)
        .limit(MAX_EXAMPLES)
        .collect()
    )
    if not rows:
        return 0, []
    total = int(rows[0]["_total"])
    return total, [
        {k: v for k, v in r.asDict(recursive=True).items() if k != "_total"} for r in rows
    ]


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
) -> Check:
    """(mid, node) pairs where a correct node never fnl-delivered a message some node did.

    With a fault `history`, hosts cut off by a partition that never healed are not correct
    either (they could not have caught up), and each example carries the time of the
    message's first delivery and the faults active then.
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
    spark: SparkSession = events.sparkSession
    firsts = first_deliveries(events) if firsts is None else firsts
    delivered = firsts.select("node", "mid")
    holders = firsts.groupBy("mid").agg(
        F.sort_array(F.collect_set("node")).alias("delivered_by"), F.min("t").alias("_t")
    )
    correct_df = spark.createDataFrame([(n,) for n in correct], "node string")
    missing = (
        holders.crossJoin(correct_df)
        .join(delivered, ["node", "mid"], "left_anti")
        .select("mid", "node", "delivered_by", "_t")
        .withColumn("_node_total", F.count("*").over(Window.partitionBy("node")))
    )
    total, rows = _count_and_examples(missing, ["mid", "node"])
    # Examples may not cover every node, so per-node totals come from a small second job.
    per_node = (
        {
            r["node"]: int(r["n"])
            for r in missing.groupBy("node").agg(F.first("_node_total").alias("n")).collect()
        }
        if total
        else {}
    )
    result["violations"] = total
    result["missing_per_node"] = dict(sorted(per_node.items()))
    examples = [{k: v for k, v in r.items() if k not in ("_node_total", "_t")} for r in rows]
    if history is not None:
        for e, r in zip(examples, rows, strict=True):
            e["t"] = r["_t"]
        history.annotate(examples)
    result["examples"] = examples
    return result


def integrity(events: DataFrame) -> Check:
    """Duplicate fnl deliveries (one per extra copy) and deliveries of never-sent messages."""
    fnl = final_deliveries(events)
    dups = (
        fnl.groupBy("node", "mid")
        .agg(F.count("*").alias("deliveries"), F.sort_array(F.collect_list("i")).alias("i"))
        .filter(F.col("deliveries") > 1)
        .select(
            F.lit("duplicate").alias("kind"),
            "node",
            "mid",
            "i",
            (F.col("deliveries") - 1).alias("n"),
        )
    )
    sent = events.filter(F.col("ev") == "send").select("mid").distinct()
    unsent = fnl.join(sent, "mid", "left_anti").select(
        F.lit("never_sent").alias("kind"),
        "node",
        "mid",
        F.array("i").alias("i"),
        F.lit(1).alias("n"),
    )
    found = dups.unionByName(unsent).withColumn(
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
    firsts = first_deliveries(events).cache()
    try:
        return {
            "total_order": total_order(events, firsts),
            "agreement": agreement(events, nodes, crashed, firsts),
            "integrity": integrity(events),
        }
    finally:
        firsts.unpersist()


def validity(events: DataFrame, history: FaultHistory, firsts: DataFrame | None = None) -> Check:
    """Messages of correct senders that a correct host should have fnl-delivered and did not.

    Two kinds: `not_self_delivered`, a correct sender never delivered its own message (the
    validity of atomic broadcast, 004 Definition 1 liveness); `received_not_delivered`, a
    correct host received (recv) a correct sender's message and never delivered it (004
    Definition 2 liveness: gaps only for faulty senders or messages the network lost).
    """
    firsts = first_deliveries(events) if firsts is None else firsts
    correct = history.correct
    delivered = firsts.select("node", "mid")
    sends = events.filter((F.col("ev") == "send") & F.col("mid").isNotNull()).groupBy("mid").agg(
        F.first("node").alias("sender"), F.min("t").alias("t_send"))
    correct_sends = sends.filter(F.col("sender").isin(correct))
    own = (correct_sends.select("mid", F.col("sender").alias("node"), F.col("t_send").alias("t"))
           .join(delivered, ["node", "mid"], "left_anti")
           .withColumn("kind", F.lit("not_self_delivered")))
    recv = (events.filter((F.col("ev") == "recv") & F.col("node").isin(correct))
            .groupBy("node", "mid").agg(F.min("t").alias("t"))
            .join(correct_sends.select("mid"), "mid")
            .join(delivered, ["node", "mid"], "left_anti")
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
    """
    firsts = first_deliveries(events).cache()
    ranked = checks_order.ranked_deliveries(firsts).cache()
    try:
        return {
            "total_order": checks_order.total_order(ranked, history),
            "agreement": agreement(events, history.nodes, history.crashed, firsts, history),
            "validity": validity(events, history, firsts),
            "integrity": integrity(events),
            "fifo_order": checks_order.fifo_order(firsts, history),
            "causal_order": checks_order.causal_order(events, ranked, causal_claimed(events),
                                                      history),
        }
    finally:
        ranked.unpersist()
        firsts.unpersist()
