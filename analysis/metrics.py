"""Performance metrics from the delivery logs: latency, throughput and message counts.

Latency uses true time (`t`), not the skewed local clock, so it is real end-to-end delay
(ARCHITECTURE.md, decision 6).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.checks import first_deliveries

QUANTILES = (0.5, 0.95, 0.99)
_NS_PER_MS = 1e6
_NS_PER_S = 1e9


def _stats(row: Any) -> dict[str, Any]:
    qs = row["q"] or [None] * len(QUANTILES)
    return {
        "p50_ms": qs[0],
        "p95_ms": qs[1],
        "p99_ms": qs[2],
        "max_ms": row["max_ms"],
        "count": int(row["count"]),
    }


_EMPTY = {"p50_ms": None, "p95_ms": None, "p99_ms": None, "max_ms": None, "count": 0}


def latencies(events: DataFrame) -> DataFrame:
    """Per first fnl of a sent message: sender, receiver (`node`), mid, latency_ms."""
    sends = events.filter(F.col("ev") == "send").groupBy("mid").agg(F.min("t").alias("t_send"))
    return (
        first_deliveries(events)
        .join(sends, "mid")
        .select(
            # The sender is the host name before the last ':' of the mid ("h2:17" -> "h2").
            F.regexp_extract("mid", r"^(.*):[^:]*$", 1).alias("sender"),
            "node",
            "mid",
            ((F.col("t") - F.col("t_send")) / _NS_PER_MS).alias("latency_ms"),
        )
    )


def fnl_latency(events: DataFrame) -> dict[str, Any]:
    """Exact latency quantiles overall, per receiver and per (sender, receiver) pair."""
    lat = latencies(events)
    # rollup(node, sender) yields the (node, sender), (node) and () groupings in one job.
    rows = (
        lat.rollup("node", "sender")
        .agg(
            F.percentile("latency_ms", F.array(*[F.lit(q) for q in QUANTILES])).alias("q"),
            F.max("latency_ms").alias("max_ms"),
            F.count("*").alias("count"),
            F.grouping_id().alias("level"),
        )
        .collect()
    )
    out: dict[str, Any] = {"all": dict(_EMPTY), "per_receiver": {}, "per_pair": {}}
    for r in rows:
        if r["level"] == 3:
            out["all"] = _stats(r) if r["count"] else dict(_EMPTY)
        elif r["level"] == 1:
            out["per_receiver"][r["node"]] = _stats(r)
        else:
            out["per_pair"][f"{r['sender']}->{r['node']}"] = _stats(r)
    out["per_receiver"] = dict(sorted(out["per_receiver"].items()))
    out["per_pair"] = dict(sorted(out["per_pair"].items()))
    return out


def throughput(events: DataFrame, nodes: list[str]) -> dict[str, Any]:
    """Delivered messages per second at each node over its own first-to-last fnl span.

    A node with fewer than two deliveries has no span and gets 0.0; the minimum is over
    every node of the run, so a silent node drags it to 0 on purpose.
    """
    rows = (
        first_deliveries(events)
        .groupBy("node")
        .agg(F.count("*").alias("n"), F.min("t").alias("t0"), F.max("t").alias("t1"))
        .collect()
    )
    per_node = {n: 0.0 for n in nodes}
    for r in rows:
        span_s = (r["t1"] - r["t0"]) / _NS_PER_S
        per_node[r["node"]] = r["n"] / span_s if span_s > 0 else 0.0
    per_node = dict(sorted(per_node.items()))
    return {
        "per_node": per_node,
        "min_msgs_per_s": min(per_node.values()) if per_node else 0.0,
    }


def message_counts(events: DataFrame, nodes: list[str]) -> dict[str, Any]:
    """Messages sent (distinct mids) and fnl / opt events per node (duplicates included)."""
    sent_row = events.filter(F.col("ev") == "send").agg(F.countDistinct("mid").alias("n")).first()
    per_kind = events.filter(F.col("ev").isin("fnl", "opt")).groupBy("node", "ev").count().collect()
    fnl = {n: 0 for n in nodes}
    opt = {n: 0 for n in nodes}
    for r in per_kind:
        (fnl if r["ev"] == "fnl" else opt)[r["node"]] = int(r["count"])
    return {
        "sent": int(sent_row["n"]) if sent_row else 0,
        "fnl": dict(sorted(fnl.items())),
        "opt": dict(sorted(opt.items())),
    }
