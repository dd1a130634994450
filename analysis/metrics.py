"""Performance metrics from the delivery logs: latency, throughput and message counts.

Latency uses true time (`t`), not the skewed local clock, so it is real end-to-end delay
(docs/architecture.md, decision 6).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from analysis.checks import first_deliveries
from analysis.fault_history import FaultHistory
from analysis.overview import Overview

QUANTILES = (0.5, 0.95, 0.99)
_NS_PER_MS = 1e6
_NS_PER_S = 1e9


_EMPTY = {"p50_ms": None, "p95_ms": None, "p99_ms": None, "max_ms": None, "count": 0}


def _sent_firsts(events: DataFrame, how: str) -> DataFrame:
    """first_deliveries joined (`how`) with each message's first send time, `t_send`."""
    sends = events.filter(F.col("ev") == "send").groupBy("mid").agg(F.min("t").alias("t_send"))
    return first_deliveries(events).join(sends, "mid", how)


def _sender() -> Column:
    """The sender: the host name before the last ':' of the mid ("h2:17" -> "h2")."""
    return F.regexp_extract("mid", r"^(.*):[^:]*$", 1)


def _latency_ms() -> Column:
    return ((F.col("t") - F.col("t_send")) / _NS_PER_MS).alias("latency_ms")


def latencies(events: DataFrame) -> DataFrame:
    """Per first fnl of a sent message: sender, receiver (`node`), mid, latency_ms."""
    return _sent_firsts(events, "inner").select(_sender().alias("sender"), "node", "mid",
                                                _latency_ms())


# percentile_approx's accuracy in fnl_latency's first pass: the value it gives is within
# count / LATENCY_ACCURACY ranks of the one asked for, so the exact quantile lies between two
# approximate ones LATENCY_BRACKET / LATENCY_ACCURACY apart on either side (checked, and
# widened if ever not), and only the values strictly between them are sorted (in Spark).
LATENCY_ACCURACY = 10_000
# Up to this many first deliveries (24 bytes each on the driver: ~100 MB at most) the
# latencies come to the driver and one numpy sort gives every group's exact quantiles --
# seconds faster on the runs of the test suite than the two Spark passes, whose fixed cost is
# several jobs; above it, nothing per delivery leaves Spark. Both are exact and agree.
LATENCY_DRIVER_MAX = 4_000_000
LATENCY_BRACKET = 3
# The groupings of fnl_latency, as Spark's cube over (sender, node) numbers them.
_PAIR, _SENDER, _RECEIVER, _ALL = 0, 1, 2, 3


def fnl_latency(events: DataFrame) -> dict[str, Any]:
    """Exact latency quantiles overall, per receiver, per sender and per (sender, receiver).

    Quantiles interpolate linearly between the two closest ranks, as Spark's `percentile`
    does. Up to LATENCY_DRIVER_MAX deliveries the latencies come to the driver as Arrow and
    one numpy sort gives every group's quantiles. Above it nothing per delivery comes to the
    driver: two passes over the latencies, both
    Spark aggregations over the cube of (sender, receiver). The first gives each group's
    count, maximum and, per quantile, two approximate quantiles that bracket the ranks the
    exact one interpolates between (percentile_approx); the second counts each group's
    values below and at the bracket's ends and sorts the few strictly inside, from which
    the exact values at those ranks are picked -- a bracket that missed is widened and both
    passes repeat (the last try spans the whole group). The driver gets one row per group.
    """
    from pyspark import StorageLevel

    lat = latencies(events).select(
        "node", F.coalesce("sender", F.lit("")).alias("sender"), "latency_ms").persist(
        StorageLevel.MEMORY_AND_DISK)
    try:
        if lat.count() <= LATENCY_DRIVER_MAX:
            return _fnl_latency_on_driver(lat)
        return _fnl_latency_in_spark(lat)
    finally:
        lat.unpersist()


def _fnl_latency_in_spark(lat: DataFrame) -> dict[str, Any]:
    """fnl_latency with nothing per delivery on the driver (the two passes)."""
    out: dict[str, Any] = {"all": dict(_EMPTY), "per_receiver": {}, "per_sender": {},
                           "per_pair": {}}
    width = LATENCY_BRACKET / LATENCY_ACCURACY
    while True:
        groups = _latency_groups(lat, width)
        found = _exact_quantiles(lat, groups)
        if found is not None or width >= 1:
            break
        width = min(max(width, 1 / LATENCY_ACCURACY) * 16, 1.0)
    assert found is not None, "a bracket spanning every value holds every rank"
    for (gid, sender, node), stats in found.items():
        if gid == _ALL:
            out["all"] = stats
        elif gid == _RECEIVER:
            out["per_receiver"][node] = stats
        elif gid == _SENDER:
            out["per_sender"][sender] = stats
        else:
            out["per_pair"][f"{sender}->{node}"] = stats
    for key in ("per_receiver", "per_sender", "per_pair"):
        out[key] = dict(sorted(out[key].items()))
    return out


def _fnl_latency_on_driver(lat: DataFrame) -> dict[str, Any]:
    """fnl_latency from one numpy sort of (at most LATENCY_DRIVER_MAX) latencies."""
    return _latency_stats(lat.toArrow())


def _latency_stats(table: pa.Table) -> dict[str, Any]:
    """fnl_latency's groups from an Arrow table of latencies (node, sender, latency_ms)."""
    node = pc.dictionary_encode(table["node"].combine_chunks())
    sender = pc.dictionary_encode(table["sender"].combine_chunks())
    values = table["latency_ms"].to_numpy()
    n_code = node.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    s_code = sender.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    n_names, s_names = node.dictionary.to_pylist(), sender.dictionary.to_pylist()
    out: dict[str, Any] = {"all": dict(_EMPTY), "per_receiver": {}, "per_sender": {},
                           "per_pair": {}}
    if len(values):
        out["all"] = _group_stats(np.zeros(len(values), np.int64), values)[0]
    for code, stats in _group_stats(n_code, values).items():
        out["per_receiver"][n_names[code]] = stats
    for code, stats in _group_stats(s_code, values).items():
        out["per_sender"][s_names[code]] = stats
    pairs = s_code * max(len(n_names), 1) + n_code
    for code, stats in _group_stats(pairs, values).items():
        s_i, n_i = divmod(code, max(len(n_names), 1))
        out["per_pair"][f"{s_names[s_i]}->{n_names[n_i]}"] = stats
    for key in ("per_receiver", "per_sender", "per_pair"):
        out[key] = dict(sorted(out[key].items()))
    return out


def _group_stats(codes: np.ndarray, values: np.ndarray) -> dict[int, dict[str, Any]]:
    """QUANTILES, max and count of `values` per group code."""
    if not len(values):
        return {}
    order = np.lexsort((values, codes))
    x, c = values[order], codes[order]
    starts = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    counts = np.diff(np.r_[starts, len(c)])
    qs = []
    for q in QUANTILES:
        pos = starts + q * (counts - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.ceil(pos).astype(np.int64)
        qs.append(x[lo] + (x[hi] - x[lo]) * (pos - lo))
    last = starts + counts - 1
    return {int(c[s]): {"p50_ms": float(qs[0][k]), "p95_ms": float(qs[1][k]),
                        "p99_ms": float(qs[2][k]), "max_ms": float(x[last[k]]),
                        "count": int(counts[k])}
            for k, s in enumerate(starts.tolist())}


Group = tuple[int, str, str]


def _latency_groups(lat: DataFrame, width: float) -> dict[Group, dict[str, Any]]:
    """Pass one: per group (grouping id, sender, node; '' where the grouping spans it) its
    count, maximum and, per quantile, the bracket [lo, hi]: approximate quantiles `width`
    below and above (the group's minimum and maximum once `width` reaches 1)."""
    probes = [x for q in QUANTILES for x in (max(q - width, 0.0), min(q + width, 1.0))]
    if width >= 1:
        probes = [0.0, 1.0] * len(QUANTILES)
    rows = lat.cube("sender", "node").agg(
        F.grouping_id().alias("gid"), F.count("*").alias("n"),
        F.max("latency_ms").alias("max"),
        F.percentile_approx("latency_ms", probes, LATENCY_ACCURACY).alias("probe")).collect()
    groups = {}
    for r in rows:
        n = int(r["n"])
        key = (int(r["gid"]), r["sender"] or "", r["node"] or "")
        probe = [float(x) for x in r["probe"]]
        groups[key] = {"n": n, "max": float(r["max"]), "lo": probe[0::2], "hi": probe[1::2]}
    return groups


def _exact_quantiles(lat: DataFrame, groups: dict[Group, dict[str, Any]]
                     ) -> dict[Group, dict[str, Any]] | None:
    """Pass two: every group's exact QUANTILES from its brackets, or None when a bracket
    missed the ranks its quantile needs."""
    spark = lat.sparkSession
    k = len(QUANTILES)
    bounds = spark.createDataFrame(
        [(gid, s, n, g["lo"], g["hi"]) for (gid, s, n), g in groups.items()],
        "gid int, s string, n string, lo array<double>, hi array<double>")
    keyed = lat.select("latency_ms", F.explode(F.array(
        *[F.struct(F.lit(gid).alias("gid"), (F.col("sender") if gid in (_PAIR, _SENDER)
                                             else F.lit("")).alias("s"),
                   (F.col("node") if gid in (_PAIR, _RECEIVER) else F.lit("")).alias("n"))
          for gid in (_PAIR, _SENDER, _RECEIVER, _ALL)])).alias("g")).select(
        "latency_ms", "g.*")
    v = F.col("latency_ms")
    aggs = []
    for j in range(k):
        lo, hi = F.col("lo")[j], F.col("hi")[j]
        aggs += [F.sum((v < lo).cast("long")).alias(f"below{j}"),
                 F.sum((v == lo).cast("long")).alias(f"at_lo{j}"),
                 F.sum(((v == hi) & (hi > lo)).cast("long")).alias(f"at_hi{j}"),
                 F.sort_array(F.collect_list(F.when((v > lo) & (v < hi), v))).alias(f"mid{j}")]
    windows = keyed.join(F.broadcast(bounds), ["gid", "s", "n"]).groupBy("gid", "s", "n").agg(
        F.first("lo").alias("lo"), F.first("hi").alias("hi"), *aggs)
    # Each group's ranks (0-based, the two its interpolation reads) as a small table, so
    # that only the values at those ranks come back.
    ranks = spark.createDataFrame(
        [(gid, s, n, [r for q in QUANTILES for r in _ranks(g["n"], q)])
         for (gid, s, n), g in groups.items()], "gid int, s string, n string, r array<long>")
    picked = []
    for j in range(k):
        for side in range(2):
            at = F.col("r")[2 * j + side] - F.col(f"below{j}")
            inside = at - F.col(f"at_lo{j}")
            size = F.size(f"mid{j}")
            picked.append(
                F.when(at < 0, F.lit(None))
                .when(at < F.col(f"at_lo{j}"), F.col("lo")[j])
                .when(inside < size, F.element_at(f"mid{j}", (inside + 1).cast("int")))
                .when(inside < size + F.col(f"at_hi{j}"), F.col("hi")[j])
                .alias(f"v{j}_{side}"))
    rows = windows.join(ranks, ["gid", "s", "n"]).select("gid", "s", "n", *picked).collect()
    out: dict[Group, dict[str, Any]] = {}
    for row in rows:
        key = (int(row["gid"]), row["s"], row["n"])
        g = groups[key]
        stats: dict[str, Any] = {}
        for j, q in enumerate(QUANTILES):
            a, b = row[f"v{j}_0"], row[f"v{j}_1"]
            if a is None or b is None:
                return None
            pos = q * (g["n"] - 1)
            stats[f"p{round(q * 100)}_ms"] = float(a + (b - a) * (pos - math.floor(pos)))
        out[key] = {**stats, "max_ms": g["max"], "count": g["n"]}
    return out


def _ranks(n: int, q: float) -> tuple[int, int]:
    """The two ranks (0-based) the q-quantile of n sorted values interpolates between."""
    pos = q * (n - 1)
    return math.floor(pos), math.ceil(pos)


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
    return _throughput([(r["node"], r["n"], r["t0"], r["t1"]) for r in rows], nodes)


def _throughput(rows: list[tuple[str, int, int, int]], nodes: list[str]) -> dict[str, Any]:
    """throughput from (node, first deliveries, first t, last t) per node."""
    per_node = {n: 0.0 for n in nodes}
    for node, n, t0, t1 in rows:
        span_s = (t1 - t0) / _NS_PER_S
        per_node[node] = n / span_s if span_s > 0 else 0.0
    per_node = dict(sorted(per_node.items()))
    return {
        "per_node": per_node,
        "min_msgs_per_s": min(per_node.values()) if per_node else 0.0,
    }


def delivery_metrics(events: DataFrame, nodes: list[str], fnl_events: int
                     ) -> tuple[dict[str, Any], dict[str, Any]]:
    """fnl_latency and throughput of a run with `fnl_events` fnl events. Up to
    LATENCY_DRIVER_MAX of them (as many first deliveries at most) both come from one Spark
    job: every first delivery, with its latency where its message was sent, comes to the
    driver as Arrow; above it each is computed as on its own."""
    if fnl_events > LATENCY_DRIVER_MAX:
        return fnl_latency(events), throughput(events, nodes)
    table = _sent_firsts(events, "left").select(
        "node", F.coalesce(_sender(), F.lit("")).alias("sender"), "t", _latency_ms()).toArrow()
    sent = table.filter(pc.is_valid(table["latency_ms"]))
    spans = table.group_by("node").aggregate([("t", "count", pc.CountOptions(mode="all")),
                                              ("t", "min"), ("t", "max")])
    rows = list(zip(*(spans[c].to_pylist() for c in ("node", "t_count", "t_min", "t_max")),
                    strict=True))
    return _latency_stats(sent.select(["node", "sender", "latency_ms"])), _throughput(rows, nodes)


def message_counts(view: Overview, nodes: list[str]) -> dict[str, Any]:
    """Messages sent (distinct mids) and fnl / opt events per node (duplicates included),
    from the events' Overview."""
    fnl = {n: 0 for n in nodes} | view.per_node("fnl")
    opt = {n: 0 for n in nodes} | view.per_node("opt")
    return {
        "sent": view.sent,
        "fnl": dict(sorted(fnl.items())),
        "opt": dict(sorted(opt.items())),
    }


def recovery(events: DataFrame, history: FaultHistory) -> list[dict[str, Any]]:
    """Per healed partition and cut-off host: how long after the heal it delivered again and
    caught up.

    `delivered_again_ms`: its first fnl at or after the heal. `caught_up_ms`: when it had
    fnl-delivered every message that the hosts on the other side delivered before the heal
    and it had not (its `backlog`); None while any of those is never delivered. Every heal
    and host in one Spark job, with no join (a row per pair comes back).
    """
    heals = [(f, cut) for f, cut in history.partitions() if cut and f.stop != float("inf")]
    if not heals:
        return []
    def names(hosts: list[str]) -> Column:
        return F.array(*[F.lit(h) for h in hosts])

    # every first delivery once per heal k, with the heal's time and the other side
    per_heal = F.explode(F.array(*[
        F.struct(F.lit(k).alias("k"), F.lit(int(f.stop)).alias("heal"),
                 names(sorted(set(history.nodes) - cut)).alias("majority"),
                 names(sorted(cut)).alias("cut"))
        for k, (f, cut) in enumerate(heals)])).alias("h")
    firsts = first_deliveries(events).select("node", "mid", "t", per_heal).select(
        "node", "mid", "t", "h.*")
    # per heal and message: whether the other side delivered it before the heal (owed),
    # and when each host cut off first delivered it
    by_mid = firsts.groupBy("k", "heal", "mid").agg(
        F.max((F.array_contains("majority", F.col("node")) & (F.col("t") < F.col("heal")))
              .cast("int")).alias("owed"),
        F.map_from_entries(F.collect_list(F.when(F.array_contains("cut", F.col("node")),
                                                 F.struct("node", "t")))).alias("at"))
    cuts = F.element_at(F.array(*[names(sorted(cut)) for _, cut in heals]), F.col("k") + 1)
    per_host = by_mid.select("k", "heal", "owed", "at", F.explode(cuts).alias("host")).select(
        "k", "heal", "host", "owed", F.try_element_at("at", F.col("host")).alias("t"))
    # owed and not delivered by the host before the heal: its backlog
    owes = (F.col("owed") == 1) & (F.col("t").isNull() | (F.col("t") >= F.col("heal")))
    found = {(int(r["k"]), r["host"]): r for r in per_host.groupBy("k", "host").agg(
        F.count(F.when(owes, 1)).alias("n"), F.count(F.when(owes, F.col("t"))).alias("done"),
        F.max(F.when(owes, F.col("t"))).alias("t_done"),
        F.min(F.when(F.col("t") >= F.col("heal"), F.col("t"))).alias("t_again")).collect()}
    out = []
    for k, (fault, cut) in enumerate(heals):
        heal = int(fault.stop)
        for host in sorted(cut):
            r = found.get((k, host))
            n, done = (int(r["n"]), int(r["done"])) if r else (0, 0)
            t_done, t_again = (r["t_done"], r["t_again"]) if r else (None, None)
            out.append({
                "fault": fault.fault, "host": host, "heal_t": heal, "backlog": n,
                "delivered_again_ms": (t_again - heal) / _NS_PER_MS if t_again else None,
                "caught_up_ms": _caught_up_ms(n, done, t_done, heal),
            })
    return out


def _caught_up_ms(backlog: int, done: int, t_done: int | None, heal: int) -> float | None:
    if backlog == 0:
        return 0.0
    if done < backlog or t_done is None:
        return None
    return max(t_done - heal, 0) / _NS_PER_MS


def clock_offsets(events: DataFrame, view: Overview | None = None) -> dict[str, Any]:
    """Local clock minus true time (lt - t) per host, sampled per second of true time.

    Per host: `samples`, [[second since the run's first event, mean offset in ms], ...], and
    `max_abs_ms` over all its events (jumps inside a second show there). The first event's
    time comes from `view`, the events' Overview (a Spark job of its own when not given).
    """
    timed = events.filter(F.col("lt").isNotNull() & F.col("t").isNotNull())
    if view is not None:
        t0 = view.t0()
    else:
        t0_row = timed.agg(F.min("t").alias("t0")).first()
        t0 = None if t0_row is None or t0_row["t0"] is None else int(t0_row["t0"])
    if t0 is None:
        return {}
    offset = ((F.col("lt") - F.col("t")) / _NS_PER_MS).alias("offset_ms")
    rows = (timed.select("node", ((F.col("t") - t0) / _NS_PER_S).cast("long").alias("s"), offset)
            .groupBy("node", "s").agg(F.avg("offset_ms").alias("mean"),
                                      F.max(F.abs("offset_ms")).alias("abs")).collect())
    out: dict[str, Any] = {}
    for r in sorted(rows, key=lambda r: (r["node"], r["s"])):
        host = out.setdefault(r["node"], {"samples": [], "max_abs_ms": 0.0})
        host["samples"].append([int(r["s"]), round(float(r["mean"]), 6)])
        host["max_abs_ms"] = max(host["max_abs_ms"], float(r["abs"]))
    return {"t0": t0, "per_host": out}
