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


def _deliveries(events: DataFrame, ev: str) -> DataFrame:
    """Per (node, mid): the first `ev` event's ordinal, time and rank among them, and the last
    ordinal (a second opt after the fnl still breaks Local Order)."""
    delivered = (
        events.filter((F.col("ev") == ev) & F.col("mid").isNotNull())
        .groupBy("node", "mid")
        .agg(F.min(F.struct("i", "t")).alias("e"), F.max("i").alias(f"{ev}_last_i"))
    )
    rank = F.row_number().over(Window.partitionBy("node").orderBy("e.i"))
    return delivered.select(
        "node", "mid", F.col("e.i").alias(f"{ev}_i"), F.col("e.t").alias(f"{ev}_t"),
        rank.alias(f"{ev}_pos"), f"{ev}_last_i")


def _quantiles(col: str) -> Any:
    return F.percentile(col, F.array(*[F.lit(q) for q in QUANTILES]))


def _stats(qs: list[float] | None, max_ms: float | None, count: int) -> dict[str, Any]:
    if not count or qs is None:
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None, "max_ms": None, "count": 0}
    return {"p50_ms": qs[0], "p95_ms": qs[1], "p99_ms": qs[2], "max_ms": max_ms,
            "count": int(count)}


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
    Only nodes with both opt and fnl deliveries appear under accuracy; only nodes with opt
    deliveries under window and latency. Accuracy "all" pools every node's messages. Up to 5
    Local Order examples are listed, ordered by node and opt ordinal.
    """
    sends = (events.filter((F.col("ev") == "send") & F.col("mid").isNotNull())
             .groupBy("mid").agg(F.min("t").alias("send_t")))
    per_msg = (
        _deliveries(events, "opt")
        .join(_deliveries(events, "fnl"), ["node", "mid"], "full_outer")
        .join(sends, "mid", "left")
    )
    both = F.col("opt_i").isNotNull() & F.col("fnl_i").isNotNull()
    late = both & (F.col("opt_last_i") > F.col("fnl_i"))
    window_ms = F.when(both, (F.col("fnl_t") - F.col("opt_t")) / _NS_PER_MS)
    latency_ms = (F.col("opt_t") - F.col("send_t")) / _NS_PER_MS
    # Everything in one aggregation: the logs are small and every Spark action costs seconds.
    rows = (
        per_msg.select("node", "mid", "opt_last_i", "fnl_i", both.alias("both"),
                       late.alias("late"),
                       (both & (F.col("opt_pos") == F.col("fnl_pos"))).alias("match"),
                       window_ms.alias("window_ms"), latency_ms.alias("latency_ms"))
        .rollup("node")
        .agg(
            F.sum(F.col("match").cast("long")).alias("matched"),
            F.sum(F.col("both").cast("long")).alias("count"),
            _quantiles("window_ms").alias("window_q"),
            F.max("window_ms").alias("window_max"),
            F.count("window_ms").alias("window_n"),
            _quantiles("latency_ms").alias("latency_q"),
            F.max("latency_ms").alias("latency_max"),
            F.count("latency_ms").alias("latency_n"),
            F.sum(F.col("late").cast("long")).alias("violations"),
            F.array_sort(F.collect_list(F.when(
                F.col("late"), F.struct(F.col("opt_last_i").alias("opt_i"), "mid",
                                        "fnl_i")))).alias("late_list"),
            F.grouping_id().alias("level"),
        )
        .collect()
    )
    result: dict[str, Any] = {
        "accuracy": {"all": None, "per_node": {}},
        "window": {"all": _stats(None, None, 0), "per_node": {}},
        "latency": {"all": _stats(None, None, 0), "per_node": {}},
        "local_order": {"violations": 0, "examples": []},
    }
    examples: list[dict[str, Any]] = []
    for r in sorted(rows, key=lambda r: (r["level"], r["node"] or "")):
        window = _stats(r["window_q"], r["window_max"], r["window_n"])
        latency = _stats(r["latency_q"], r["latency_max"], r["latency_n"])
        count = int(r["count"] or 0)
        if r["level"] == 1:
            result["accuracy"]["all"] = r["matched"] / count if count else None
            result["window"]["all"] = window
            result["latency"]["all"] = latency
            result["local_order"]["violations"] = int(r["violations"] or 0)
            continue
        node = r["node"]
        if count:
            result["accuracy"]["per_node"][node] = {
                "accuracy": r["matched"] / count, "matched": int(r["matched"]), "count": count}
        if r["latency_n"] or r["window_n"]:
            result["window"]["per_node"][node] = window
            result["latency"]["per_node"][node] = latency
        examples += [{"node": node, "mid": e["mid"], "opt_i": int(e["opt_i"]),
                      "fnl_i": int(e["fnl_i"])} for e in r["late_list"]]
    result["local_order"]["examples"] = examples[:EXAMPLES]
    return result
