"""Where a restarted process joined each sender's stream: the messages it owes (agreement).

A restarted process that stays up to the end is a correct process from its restart on (000
§2.2; analysis/fault_history.py `FaultHistory.restarted`). It is not held to what was sent
before it joined, and where it joins is the protocol's to say: from its join point in a
sender's stream on, it owes every message of that sender (by the sender's message number, any
incarnation of the sender) that some correct host delivers, as a correct host does. Its join
point in the stream of the sender host `origin` is the lower of

- the first message of `origin` it names in a `stream_join` event (nodes/protocols/base.py
  `JOIN_EVENT`: the protocol logs where it joined, e.g. `cbcast` rule B5); and
- the first message of `origin` it fnl-delivers: a process that delivered a sender's message
  had joined that sender's stream by then, so a gap after it is a message it skipped.

Its own host's messages are validity's (analysis/checks_mid.py `_validity`), not counted here.

Mids are `origin:mno` (nodes/core.py); events whose mid is not of that form give no join
point. Both drivers get the same points: `join_points` over an Arrow table of events,
`join_points_sql` over the Spark DataFrame (a few rows come back).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from analysis.checks_mid import (
    MID_PATTERN,
    PROCESS_MARK,
    Joins,
    host_of,
    process_names,
    split_mids,
)
from nodes.protocols.base import JOIN_EVENT

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_KINDS = ("fnl", JOIN_EVENT)


def join_points(events: pa.Table, restarted: list[str] | tuple[str, ...]) -> Joins:
    """The join points of the `restarted` processes, from an Arrow table of events (columns
    node, ev, mid; `inc` optional, a null one is incarnation 0)."""
    if not restarted or not events.num_rows:
        return {}
    inc = events["inc"] if "inc" in events.column_names else pa.nulls(events.num_rows,
                                                                       pa.int64())
    proc = process_names(events["node"], inc)
    keep = pc.and_(pc.and_(pc.is_in(events["ev"], pa.array(_KINDS)),
                           pc.is_in(proc, pa.array(list(restarted), pa.string()))),
                   pc.is_valid(events["mid"]))
    mids = events["mid"].filter(keep).combine_chunks()
    procs = proc.filter(keep)
    if not len(mids):
        return {}
    origin, mno = split_mids(mids)
    out: Joins = {}
    for p, o, n in zip(procs.to_pylist(), origin.tolist(), mno.tolist(), strict=True):
        if o is not None and n >= 0 and o != host_of(p):
            per = out.setdefault(p, {})
            per[o] = min(per.get(o, n), n)
    return out


def join_points_sql(events: DataFrame, restarted: list[str] | tuple[str, ...]) -> Joins:
    """join_points over the Spark DataFrame of events: one filtered aggregation."""
    from pyspark.sql import functions as F

    if not restarted:
        return {}
    inc = F.coalesce(F.col("inc"), F.lit(0))
    process = F.when(inc > 0, F.concat(F.col("node"), F.lit(PROCESS_MARK),
                                       inc.cast("string"))).otherwise(F.col("node"))
    pattern = MID_PATTERN.replace("?P<origin>", "").replace("?P<mno>", "")
    rows = (events.filter(F.col("ev").isin(*_KINDS) & F.col("mid").isNotNull())
            .select("node", process.alias("p"), F.regexp_extract("mid", pattern, 1).alias("origin"),
                    F.regexp_extract("mid", pattern, 2).alias("mno"))
            .filter(F.col("p").isin(*restarted) & (F.col("origin") != "")
                    & (F.col("origin") != F.col("node")))
            .groupBy("p", "origin").agg(F.min(F.col("mno").cast("long")).alias("mno"))
            .collect())
    out: Joins = {}
    for r in rows:
        out.setdefault(str(r["p"]), {})[str(r["origin"])] = int(r["mno"])
    return out
