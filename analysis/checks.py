"""Safety checkers for total-order multicast, run over the fnl (final delivery) events.

The three properties are those of atomic broadcast (Défago et al. style, as used by the
sequencer/SETO papers): total order, agreement and integrity. Each checker returns
`{"violations": int, "examples": [...]}` with at most `MAX_EXAMPLES` concrete witnesses.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

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


def total_order(events: DataFrame, firsts: DataFrame | None = None) -> Check:
    """Pairs of messages that two nodes fnl-delivered in different relative orders.

    Prefix form: every node's delivery sequence, restricted to the messages it shares with a
    reference node (the one with most deliveries), must follow the reference's order. A
    descent (the reference position goes down between two consecutive common messages) is
    one mis-ordered pair; the violation count is the number of distinct unordered pairs, so a
    swap seen from several nodes counts once. Missing or duplicate deliveries do not count
    here (agreement and integrity report them).
    """
    firsts = first_deliveries(events) if firsts is None else firsts
    counts = firsts.groupBy("node").count().orderBy(F.desc("count"), "node").limit(1).collect()
    if not counts:
        return {"violations": 0, "reference": None, "examples": []}
    ref = counts[0]["node"]
    ref_pos = firsts.filter(F.col("node") == ref).select("mid", F.col("pos").alias("ref_pos"))
    seq = Window.partitionBy("node").orderBy("pos")
    common = (
        firsts.filter(F.col("node") != ref)
        .join(ref_pos, "mid")
        .withColumn("prev_mid", F.lag("mid").over(seq))
        .withColumn("prev_pos", F.lag("pos").over(seq))
        .withColumn("prev_ref_pos", F.lag("ref_pos").over(seq))
    )
    descents = common.filter(F.col("ref_pos") < F.col("prev_ref_pos")).select(
        F.least("mid", "prev_mid").alias("a"),
        F.greatest("mid", "prev_mid").alias("b"),
        "node",
        F.struct(
            F.col("prev_mid").alias("first"),
            F.col("mid").alias("then"),
            F.array("prev_pos", "pos").alias("node_positions"),
            F.array("prev_ref_pos", "ref_pos").alias("reference_positions"),
        ).alias("detail"),
    )
    pairs = descents.groupBy("a", "b").agg(
        F.sort_array(F.collect_set("node")).alias("nodes"),
        F.min_by("detail", "node").alias("detail"),
    )
    violations, rows = _count_and_examples(pairs, ["a", "b"])
    examples = [
        {"mids": [r["a"], r["b"]], "nodes": r["nodes"], "reference": ref, **r["detail"]}
        for r in rows
    ]
    return {"violations": violations, "reference": ref, "examples": examples}


def agreement(
    events: DataFrame, nodes: list[str], crashed: set[str], firsts: DataFrame | None = None
) -> Check:
    """(mid, node) pairs where a correct node never fnl-delivered a message some node did."""
    correct = sorted(set(nodes) - crashed)
    result: Check = {
        "violations": 0,
        "correct_nodes": correct,
        "crashed_nodes": sorted(crashed),
        "missing_per_node": {},
        "examples": [],
    }
    if not correct:
        return result
    spark: SparkSession = events.sparkSession
    firsts = first_deliveries(events) if firsts is None else firsts
    delivered = firsts.select("node", "mid")
    holders = delivered.groupBy("mid").agg(
        F.sort_array(F.collect_set("node")).alias("delivered_by")
    )
    correct_df = spark.createDataFrame([(n,) for n in correct], "node string")
    missing = (
        holders.crossJoin(correct_df)
        .join(delivered, ["node", "mid"], "left_anti")
        .select("mid", "node", "delivered_by")
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
    result["examples"] = [{k: v for k, v in r.items() if k != "_node_total"} for r in rows]
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
