"""One aggregation over a run's events that many parts of the Spark analysis read: the events
counted per (node, incarnation, protocol, kind), the first true time of an event that carries a
local clock, and how many distinct messages were sent.

The message counts, the node errors, the offered load, the protocols named (the claims), the
processes the checks index, whether the run opt-delivers or runs `switching` instances, and the
clock samples' origin all come from these few rows, where each would be a Spark job of its own
(on a small run a job's fixed cost, not its data, is what the analysis waits for;
docs/benchmarks.md "Time to verdict").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_KEYS = ("node", "inc", "proto", "ev")


@dataclass(frozen=True)
class Overview:
    """`groups`: one row per (node, inc, proto, ev) with `n` events and `t_clocked`, the first
    `t` of an event with a local clock `lt` (null when none has); `sent`: distinct mids of the
    send events."""

    groups: pa.Table
    sent: int

    def per_node(self, ev: str) -> dict[str, int]:
        """Events of kind `ev` per node (every incarnation and protocol), nodes with none
        left out."""
        mine = self.groups.filter(pc.equal(self.groups["ev"], ev))
        out: dict[str, int] = {}
        for node, n in zip(mine["node"].to_pylist(), mine["n"].to_pylist(), strict=True):
            out[node] = out.get(node, 0) + int(n)
        return out

    def total(self, ev: str) -> int:
        """Events of kind `ev`."""
        return sum(self.per_node(ev).values())

    def protos(self) -> set[str]:
        """The protocols the log names (`proto`, instances included)."""
        return {p for p in pc.unique(self.groups["proto"]).to_pylist() if p}

    def delivers_from(self, prefix: str) -> bool:
        """Whether some fnl event names a protocol starting with `prefix`."""
        fnl = self.groups.filter(pc.equal(self.groups["ev"], "fnl"))["proto"]
        return bool(pc.any(pc.starts_with(pc.fill_null(fnl, ""), prefix)).as_py())

    def t0(self) -> int | None:
        """The first true time of an event with a local clock; None when no event has one."""
        first = pc.min(self.groups["t_clocked"]).as_py()
        return None if first is None else int(first)


def overview(events: DataFrame) -> Overview:
    """The Overview of a DataFrame of events (analysis/ingest.py EVENT_SCHEMA): two small Spark
    jobs, a few rows to the driver. (One job over grouping sets, the groups and all events for
    the distinct sent mids, took three times as long on the sim quickstart.)"""
    from pyspark.sql import functions as F

    clocked = F.when(F.col("lt").isNotNull() & F.col("t").isNotNull(), F.col("t"))
    groups = events.groupBy(*_KEYS).agg(F.count("*").alias("n"),
                                        F.min(clocked).alias("t_clocked")).toArrow()
    sent = events.filter(F.col("ev") == "send").agg(F.count_distinct("mid").alias("n")).first()
    return Overview(groups=groups, sent=int(sent["n"]) if sent else 0)
