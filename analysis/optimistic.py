"""Optimistic total order metrics from the delivery logs (000 sec. 2.2; 003 sec. 5).

- accuracy: the share of messages whose optimistic position at a node equals their final
  position there. A message's position is its rank among that node's `opt` events, or among its
  `fnl` events, both ordered by the per-node ordinal `i`; messages lacking either are not
  counted. This is the "ratio of correctly ordered optimistic deliveries" 000 sec. 2.2 trades
  against the cost of a mistake.
- window: the optimistic window, fnl `t` minus opt `t` of the same message at a node (000 sec.
  2.2: the time the application can work ahead).
- latency: optimistic delivery latency, opt `t` minus the origin's send `t` (003's delta).
- local_order: the Local Order property -- no process opt-delivers a message after having
  fnl-delivered it; a violation is an (node, mid) whose opt comes after its fnl by `i`.

Times are true time (`t`), so they are real durations whatever the nodes' clocks did.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

QUANTILES = (0.5, 0.95, 0.99)
EXAMPLES = 5
_NS_PER_MS = 1e6


def _firsts(events: DataFrame, ev: str) -> DataFrame:
    """The first `ev` event of each message at each node, with its rank among them."""
    firsts = (
        events.filter((F.col("ev") == ev) & F.col("mid").isNotNull())
        .groupBy("node", "mid")
        .agg(F.min(F.struct("i", "t")).alias("e"))
        .select("node", "mid", F.col("e.i").alias("i"), F.col("e.t").alias("t"))
    )
    rank = F.row_number().over(Window.partitionBy("node").orderBy("i"))
    return firsts.withColumn("pos", rank).select(
        "node", "mid", F.col("i").alias(f"{ev}_i"), F.col("t").alias(f"{ev}_t"),
        F.col("pos").alias(f"{ev}_pos"))


def _quantile_stats(df: DataFrame, col: str) -> dict[str, Any]:
    """Exact quantiles of `col` (ms) overall and per node."""
    rows = (
        df.rollup("node")
        .agg(
            F.percentile(col, F.array(*[F.lit(q) for q in QUANTILES])).alias("q"),
            F.max(col).alias("max_ms"),
            F.count("*").alias("count"),
            F.grouping_id().alias("level"),
        )
        .collect()
    )
    out: dict[str, Any] = {"all": _stats(None), "per_node": {}}
    for r in rows:
        if r["level"] == 1:
            out["all"] = _stats(r)
        else:
            out["per_node"][r["node"]] = _stats(r)
    out["per_node"] = dict(sorted(out["per_node"].items()))
    return out


def _stats(row: Any) -> dict[str, Any]:
    if row is None or not row["count"]:
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None, "max_ms": None, "count": 0}
    qs = row["q"]
    return {"p50_ms": qs[0], "p95_ms": qs[1], "p99_ms": qs[2], "max_ms": row["max_ms"],
            "count": int(row["count"])}


def optimistic_metrics(events: DataFrame) -> dict[str, Any]:
    """Accuracy, optimistic window, optimistic latency and the Local Order check.

    `events` has the delivery-log columns (analysis/ingest.py EVENT_SCHEMA). Returns::

        {"accuracy": {"all": float | None,
                      "per_node": {node: {"accuracy": float, "matched": int, "count": int}}},
         "window":   {"all": STATS, "per_node": {node: STATS}},
         "latency":  {"all": STATS, "per_node": {node: STATS}},
         "local_order": {"violations": int,
                         "examples": [{"node", "mid", "opt_i", "fnl_i"}, ...]}}

    STATS is {"p50_ms", "p95_ms", "p99_ms", "max_ms", "count"} (None values when count is 0).
    Only nodes with both opt and fnl deliveries appear under accuracy and window; accuracy
    "all" pools every node's messages. Up to 5 Local Order examples are listed, first by node
    and opt ordinal.
    """
    opt = _firsts(events, "opt")
    fnl = _firsts(events, "fnl")
    both = opt.join(fnl, ["node", "mid"]).cache()
    try:
        acc_rows = (
            both.groupBy("node")
            .agg(F.sum((F.col("opt_pos") == F.col("fnl_pos")).cast("long")).alias("matched"),
                 F.count("*").alias("count"))
            .collect()
        )
        per_node = {
            r["node"]: {"accuracy": r["matched"] / r["count"], "matched": int(r["matched"]),
                        "count": int(r["count"])}
            for r in sorted(acc_rows, key=lambda r: r["node"])
        }
        total = sum(v["count"] for v in per_node.values())
        matched = sum(v["matched"] for v in per_node.values())
        window = _quantile_stats(
            both.select("node", ((F.col("fnl_t") - F.col("opt_t")) / _NS_PER_MS).alias("ms")),
            "ms")
        sends = (events.filter((F.col("ev") == "send") & F.col("mid").isNotNull())
                 .groupBy("mid").agg(F.min("t").alias("send_t")))
        latency = _quantile_stats(
            opt.join(sends, "mid").select(
                "node", ((F.col("opt_t") - F.col("send_t")) / _NS_PER_MS).alias("ms")),
            "ms")
        # Any opt after the first fnl breaks Local Order, so the last opt is compared.
        last_opt = (events.filter((F.col("ev") == "opt") & F.col("mid").isNotNull())
                    .groupBy("node", "mid").agg(F.max("i").alias("opt_i")))
        late = last_opt.join(fnl, ["node", "mid"]).filter(F.col("opt_i") > F.col("fnl_i"))
        violations = late.count()
        examples = [
            {"node": r["node"], "mid": r["mid"], "opt_i": int(r["opt_i"]),
             "fnl_i": int(r["fnl_i"])}
            for r in late.orderBy("node", "opt_i").limit(EXAMPLES).collect()
        ]
    finally:
        both.unpersist()
    return {
        "accuracy": {"all": matched / total if total else None, "per_node": per_node},
        "window": window,
        "latency": latency,
        "local_order": {"violations": int(violations), "examples": examples},
    }
