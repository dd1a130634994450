"""Performance metrics from the delivery logs: latency, throughput and message counts.

Latency uses true time (`t`), not the skewed local clock, so it is real end-to-end delay
(ARCHITECTURE.md, decision 6).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.checks import first_deliveries
from analysis.fault_history import FaultHistory

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
    """Exact latency quantiles overall, per receiver, per sender and per (sender, receiver)."""
    lat = latencies(events)
    # cube(node, sender) yields the (node, sender), (node), (sender) and () groupings in one job.
    rows = (
        lat.cube("node", "sender")
        .agg(
            F.percentile("latency_ms", F.array(*[F.lit(q) for q in QUANTILES])).alias("q"),
            F.max("latency_ms").alias("max_ms"),
            F.count("*").alias("count"),
            F.grouping_id().alias("level"),
        )
        .collect()
    )
    out: dict[str, Any] = {"all": dict(_EMPTY), "per_receiver": {}, "per_sender": {},
                           "per_pair": {}}
    for r in rows:
        if r["level"] == 3:
            out["all"] = _stats(r) if r["count"] else dict(_EMPTY)
        elif r["level"] == 1:
            out["per_receiver"][r["node"]] = _stats(r)
        elif r["level"] == 2:
            out["per_sender"][r["sender"]] = _stats(r)
        else:
            out["per_pair"][f"{r['sender']}->{r['node']}"] = _stats(r)
    for key in ("per_receiver", "per_sender", "per_pair"):
        out[key] = dict(sorted(out[key].items()))
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


def recovery(events: DataFrame, history: FaultHistory) -> list[dict[str, Any]]:
    """Per healed partition and cut-off host: how long after the heal it delivered again and
    caught up.

    `delivered_again_ms`: its first fnl at or after the heal. `caught_up_ms`: when it had
    fnl-delivered every message that the hosts on the other side delivered before the heal
    and it had not (its `backlog`); None while any of those is never delivered.
    """
    heals = [(f, cut) for f, cut in history.partitions() if cut and f.stop != float("inf")]
    if not heals:
        return []
    firsts = first_deliveries(events).select("node", "mid", "t").cache()
    out = []
    try:
        for fault, cut in heals:
            heal = int(fault.stop)
            majority = sorted(set(history.nodes) - cut)
            before = firsts.filter(F.col("node").isin(majority) & (F.col("t") < heal)).select(
                "mid").distinct()
            for host in sorted(cut):
                mine = firsts.filter(F.col("node") == host)
                backlog = (before.join(mine.filter(F.col("t") < heal), "mid", "left_anti")
                           .join(mine, "mid", "left")
                           .agg(F.count("*").alias("n"), F.count("t").alias("done"),
                                F.max("t").alias("t_done"))).first()
                again = mine.filter(F.col("t") >= heal).agg(F.min("t").alias("t")).first()
                n = int(backlog["n"]) if backlog else 0
                done = int(backlog["done"]) if backlog else 0
                t_done = backlog["t_done"] if backlog else None
                t_again = again["t"] if again else None
                out.append({
                    "fault": fault.fault, "host": host, "heal_t": heal, "backlog": n,
                    "delivered_again_ms": (t_again - heal) / _NS_PER_MS if t_again else None,
                    "caught_up_ms": _caught_up_ms(n, done, t_done, heal),
                })
    finally:
        firsts.unpersist()
    return out


def _caught_up_ms(backlog: int, done: int, t_done: int | None, heal: int) -> float | None:
    if backlog == 0:
        return 0.0
    if done < backlog or t_done is None:
        return None
    return max(t_done - heal, 0) / _NS_PER_MS


def clock_offsets(events: DataFrame) -> dict[str, Any]:
    """Local clock minus true time (lt - t) per host, sampled per second of true time.

    Per host: `samples`, [[second since the run's first event, mean offset in ms], ...], and
    `max_abs_ms` over all its events (jumps inside a second show there).
    """
    timed = events.filter(F.col("lt").isNotNull() & F.col("t").isNotNull())
    t0_row = timed.agg(F.min("t").alias("t0")).first()
    if t0_row is None or t0_row["t0"] is None:
        return {}
    t0 = int(t0_row["t0"])
    offset = ((F.col("lt") - F.col("t")) / _NS_PER_MS).alias("offset_ms")
    rows = (timed.select("node", ((F.col("t") - t0) / _NS_PER_S).cast("long").alias("s"), offset)
            .groupBy("node", "s").agg(F.avg("offset_ms").alias("mean"),
                                      F.max(F.abs("offset_ms")).alias("abs"))
            .orderBy("node", "s").collect())
    out: dict[str, Any] = {}
    for r in rows:
        host = out.setdefault(r["node"], {"samples": [], "max_abs_ms": 0.0})
        host["samples"].append([int(r["s"]), round(float(r["mean"]), 6)])
        host["max_abs_ms"] = max(host["max_abs_ms"], float(r["abs"]))
    return {"t0": t0, "per_host": out}
