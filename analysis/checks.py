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


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.limit(MAX_EXAMPLES).collect()]


def total_order(events: DataFrame) -> Check:
    """Pairs of messages that two nodes fnl-delivered in different relative orders.

    Prefix form: every node's delivery sequence, restricted to the messages it shares with a
    reference node (the one with most deliveries), must follow the reference's order. A
    descent (the reference position goes down between two consecutive common messages) is
    one mis-ordered pair; the violation count is the number of distinct unordered pairs, so a
    swap seen from several nodes counts once. Missing or duplicate deliveries do not count
    here (agreement and integrity report them).
    """
    firsts = first_deliveries(events)
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
    violations = pairs.count()
    examples = [
        {
            "mids": [r["a"], r["b"]],
            "nodes": r["nodes"],
            "reference": ref,
            **r["detail"],
        }
        for r in _rows(pairs.orderBy("a", "b"))
    ]
    return {"violations": violations, "reference": ref, "examples": examples}


def agreement(events: DataFrame, nodes: list[str], crashed: set[str]) -> Check:
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
    delivered = final_deliveries(events).select("node", "mid").distinct()
    holders = delivered.groupBy("mid").agg(F.sort_array(F.collect_set("node")).alias("delivered_by"))
    correct_df = spark.createDataFrame([(n,) for n in correct], "node string")
    missing = (
        holders.crossJoin(correct_df)
        .join(delivered, ["node", "mid"], "left_anti")
        .select("mid", "node", "delivered_by")
    ).cache()
    per_node = {r["node"]: int(r["count"]) for r in missing.groupBy("node").count().collect()}
    result["violations"] = sum(per_node.values())
    result["missing_per_node"] = dict(sorted(per_node.items()))
    result["examples"] = _rows(missing.orderBy("mid", "node"))
    missing.unpersist()
    return result


def integrity(events: DataFrame) -> Check:
    """Duplicate fnl deliveries (one per extra copy) and deliveries of never-sent messages."""
    fnl = final_deliveries(events)
    dups = (
        fnl.groupBy("node", "mid")
        .agg(F.count("*").alias("deliveries"), F.sort_array(F.collect_list("i")).alias("i"))
        .filter(F.col("deliveries") > 1)
    )
    dup_stats = dups.agg(F.coalesce(F.sum(F.col("deliveries") - 1), F.lit(0)).alias("n")).first()
    duplicates = int(dup_stats["n"]) if dup_stats else 0
    sent = events.filter(F.col("ev") == "send").select("mid").distinct()
    unsent = fnl.join(sent, "mid", "left_anti")
    never_sent = unsent.count()
    examples = [{"kind": "duplicate", **r} for r in _rows(dups.orderBy("node", "mid"))]
    examples += [
        {"kind": "never_sent", "node": r["node"], "mid": r["mid"], "i": r["i"]}
        for r in _rows(unsent.orderBy("node", "i"))
    ]
    return {
        "violations": duplicates + never_sent,
        "duplicates": duplicates,
        "never_sent": never_sent,
        "examples": examples[:MAX_EXAMPLES],
    }


def run_checks(events: DataFrame, nodes: list[str], crashed: set[str]) -> dict[str, Check]:
    """All checkers, keyed as in summary.json's `checks`."""
    return {
        "total_order": total_order(events),
        "agreement": agreement(events, nodes, crashed),
        "integrity": integrity(events),
    }
