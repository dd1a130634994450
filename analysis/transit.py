"""Captures joined with the delivery logs: where final-delivery latency goes, and what a
broadcast costs on the wire.

Each capture file (pcaps/manifest.json lists them, rotated pieces included) is one Spark task
that turns it into Parquet with the fast reader (analysis/pcap.py), so a run with many hosts or
rotated files spreads over the cluster. DATA packets (nodes/wire.py MsgType.DATA) carry the
message's origin id and number, which name the message as the logs do ("origin:n", ids being
member indexes in the topology's host order). Latency then splits in two:

- transit: the first packet of the message seen on the receiver's interface minus the send;
- waiting: the receiver's fnl minus that arrival (time the protocol held the message to order it).

Overhead counts each datagram once, in the capture of the host that sent it (its wire
`sender` is that host's id), over the number of messages TO-multicast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from analysis.pcap import PcapFormatError, read_pcap
from analysis.record import RunRecord
from nodes.wire import MsgType

PCAPS_PARQUET = Path("parquet") / "pcaps"
QUANTILES = (0.5, 0.95, 0.99)
_NS_PER_MS = 1e6
_KEEP = ("ts_ns", "ip_len", "frame_len", "tb_type", "tb_sender", "tb_origin", "tb_mno")


def host_order(record: RunRecord, nodes: list[str]) -> list[str]:
    """Host names by member id: spec.lock.yaml's topology host order (else sorted names)."""
    spec = record.lock
    if spec:
        hosts = [h["name"] for h in (spec.get("topology") or {}).get("hosts") or []]
        if hosts:
            return hosts
    return sorted(nodes)


def _convert(task: tuple[str, str, str]) -> dict[str, Any]:
    """Runs on an executor: one capture file to one Parquet file of its testbed packets."""
    host, path, out = task
    try:
        table = read_pcap(path)
    except (PcapFormatError, OSError) as exc:
        return {"file": path, "error": str(exc), "packets": 0}
    wire = table.filter(pc.is_valid(table.column("tb_type"))).select(list(_KEEP))
    wire = wire.append_column("host", pa.array([host] * wire.num_rows, pa.string()))
    pq.write_table(wire, out)
    return {"file": path, "packets": table.num_rows, "wire_packets": wire.num_rows}


def pcaps_to_parquet(spark: SparkSession, record: RunRecord
                     ) -> tuple[Path | None, dict[str, Any]]:
    """Convert every capture (the record's `capture_files`) with one Spark task per file;
    (Parquet folder or None, stats)."""
    files = record.capture_files()
    if not files:
        return None, {"files": 0}
    out_dir = (record.path / PCAPS_PARQUET).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.parquet"):
        old.unlink()
    tasks = [(host, str(path.resolve()), str(out_dir / f"{k:05d}-{path.name}.parquet"))
             for k, (host, path) in enumerate(files)]
    done = spark.sparkContext.parallelize(tasks, len(tasks)).map(_convert).collect()
    failed = {d["file"]: d["error"] for d in done if "error" in d}
    stats = {"files": len(files), "failed": failed,
             "packets": sum(d["packets"] for d in done),
             "wire_packets": sum(d.get("wire_packets", 0) for d in done)}
    return (out_dir if len(failed) < len(files) else None), stats


def _hosts_col(hosts: list[str], id_col: str) -> Any:
    return F.element_at(F.array(*[F.lit(h) for h in hosts]), F.col(id_col) + 1)


def _stats(q: list[float] | None, mx: float | None, n: int) -> dict[str, Any]:
    if not n or q is None:
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None, "max_ms": None, "count": 0}
    return {"p50_ms": q[0], "p95_ms": q[1], "p99_ms": q[2], "max_ms": mx, "count": int(n)}


def latency_split(events: DataFrame, packets: DataFrame, hosts: list[str]) -> dict[str, Any]:
    """Transit and waiting quantiles overall and per receiver (messages from other hosts)."""
    arrivals = (
        packets.filter((F.col("tb_type") == int(MsgType.DATA))
                       & (_hosts_col(hosts, "tb_sender") != F.col("host")))
        .select(F.col("host").alias("node"), F.concat_ws(
            ":", _hosts_col(hosts, "tb_origin"), F.col("tb_mno").cast("string")).alias("mid"),
            "ts_ns")
        .groupBy("node", "mid").agg(F.min("ts_ns").alias("t_arrive")))
    sends = events.filter(F.col("ev") == "send").groupBy("mid").agg(
        F.min("t").alias("t_send"), F.first("node").alias("sender"))
    fnl = (events.filter((F.col("ev") == "fnl") & F.col("mid").isNotNull())
           .groupBy("node", "mid").agg(F.min("t").alias("t_fnl")))
    joined = (fnl.join(sends, "mid").filter(F.col("node") != F.col("sender"))
              .join(arrivals, ["node", "mid"], "left")
              .select("node", (F.col("t_arrive") - F.col("t_send")).alias("transit"),
                      (F.col("t_fnl") - F.col("t_arrive")).alias("waiting")))
    qs = F.array(*[F.lit(q) for q in QUANTILES])
    rows = joined.rollup("node").agg(
        *[agg for c in ("transit", "waiting") for agg in (
            F.percentile(F.col(c) / _NS_PER_MS, qs).alias(f"{c}_q"),
            F.max(F.col(c) / _NS_PER_MS).alias(f"{c}_max"), F.count(c).alias(f"{c}_n"))],
        F.count("*").alias("deliveries"), F.grouping_id().alias("level")).collect()
    out: dict[str, Any] = {"all": {}, "per_receiver": {}, "unmatched": 0}
    for r in rows:
        part = {c: _stats(r[f"{c}_q"], r[f"{c}_max"], r[f"{c}_n"]) for c in ("transit", "waiting")}
        if r["level"] == 1:
            out["all"] = part
            out["unmatched"] = int(r["deliveries"]) - int(r["transit_n"])
        else:
            out["per_receiver"][r["node"]] = part
    out["per_receiver"] = dict(sorted(out["per_receiver"].items()))
    return out


def overhead(events: DataFrame, packets: DataFrame, hosts: list[str]) -> dict[str, Any]:
    """Datagrams and IP bytes the protocol sent per TO-multicast message, with a per-type count."""
    sent = events.filter(F.col("ev") == "send").select("mid").distinct().count()
    own = packets.filter(_hosts_col(hosts, "tb_sender") == F.col("host"))
    rows = own.groupBy("tb_type").agg(F.count("*").alias("n"),
                                      F.sum("ip_len").alias("bytes")).collect()
    names = {int(t): t.name for t in MsgType}
    datagrams = sum(int(r["n"]) for r in rows)
    nbytes = sum(int(r["bytes"] or 0) for r in rows)
    return {
        "broadcasts": sent,
        "datagrams": datagrams,
        "bytes": nbytes,
        "datagrams_per_broadcast": datagrams / sent if sent else None,
        "bytes_per_broadcast": nbytes / sent if sent else None,
        "datagrams_per_type": {names.get(int(r["tb_type"]), str(r["tb_type"])): int(r["n"])
                               for r in sorted(rows, key=lambda r: r["tb_type"])},
    }


def transit_section(spark: SparkSession, record: RunRecord, events: DataFrame,
                    nodes: list[str]) -> dict[str, Any]:
    """The summary's `network` section, or {} when the run has no captures."""
    folder, stats = pcaps_to_parquet(spark, record)
    if folder is None:
        return {"pcaps": stats} if stats.get("files") else {}
    hosts = host_order(record, nodes)
    packets = spark.read.parquet(str(folder)).cache()
    try:
        return {"pcaps": {**stats, "parquet": str(PCAPS_PARQUET / "")},
                "latency_split": latency_split(events, packets, hosts),
                "overhead": overhead(events, packets, hosts)}
    finally:
        packets.unpersist()
