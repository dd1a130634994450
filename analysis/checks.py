"""Safety checkers for total-order multicast, run over the fnl (final delivery) events.

The properties are those of atomic broadcast (Défago et al. style, as used by the
sequencer/SETO papers): total order, agreement, validity and integrity, plus FIFO and causal
order where the protocol claims them. Each checker returns `{"violations": int,
"examples": [...]}` with at most `MAX_EXAMPLES` concrete witnesses.

All of them come out of one Spark job with one scan and two shuffles: the events by mid
(analysis/checks_mid.py: first deliveries, consensus times, holders; agreement, validity,
integrity), then the first deliveries by node (analysis/checks_node.py: total order, FIFO),
with one more partition beside the nodes' for the causal pass (every process's first
deliveries and every message's earliest send, as the first pass chose them;
analysis/checks_causal.py). The second shuffle moves Arrow IPC blobs, a few per first-pass
task and destination, not rows. The passes emit counts and the first examples as records,
which the functions here merge; only examples look anything else up (a filtered scan for a
few messages). No event comes to the driver.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from analysis import checks_node, checks_order
from analysis.checks_causal import causal_records
from analysis.checks_mid import (
    MAX_EXAMPLES,
    MID_BLOBS,
    MidPass,
    check_input,
    check_input_sql,
    process_names,
)
from analysis.fault_history import FaultHistory
from analysis.joins import Joins, join_points, join_points_sql
from analysis.overview import Overview, overview
from nodes.protocols import catalogue

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

Check = dict[str, Any]
# A run's protocol params by protocol name (analysis/record.py `RunRecord.protocol`).
Params = Mapping[str, Mapping[str, Any]]
Records = checks_order.Records


def first_deliveries(events: DataFrame) -> DataFrame:
    """One row per (node, mid): the first fnl by event ordinal (columns node, mid, i, t, seq),
    for the metrics; one aggregation in the JVM."""
    from pyspark.sql import functions as F

    first = F.min_by(F.struct("i", "t", "seq"), "i").alias("f")
    return (events.filter((F.col("ev") == "fnl") & F.col("mid").isNotNull())
            .groupBy("node", "mid").agg(first).select("node", "mid", "f.i", "f.t", "f.seq"))


_M32 = 0xFFFFFFFF


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _mix_k1(k1: int) -> int:
    return (_rotl32((k1 * 0xCC9E2D51) & _M32, 15) * 0x1B873593) & _M32


def _mix_h1(h1: int, k1: int) -> int:
    return (_rotl32(h1 ^ k1, 13) * 5 + 0xE6546B64) & _M32


def spark_hash_long(value: int, seed: int = 42) -> int:
    """SQL `hash` of a bigint, as Spark computes it: Murmur3 x86_32 of its two 32-bit halves
    (low first) with Spark's seed 42; a signed 32-bit result."""
    h1 = _mix_h1(_mix_h1(seed, _mix_k1(value & _M32)), _mix_k1((value >> 32) & _M32))
    h1 ^= 8  # the length in bytes
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _M32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _M32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >> 31 else h1


def partition_keys(n: int) -> list[int]:
    """A key for each of `n` hash partitions: Spark puts a row in partition
    pmod(hash(key), n) (spark_hash_long), so giving node k the k-th key puts every node in a
    partition of its own -- plain hashing of 5 nodes into 5 partitions leaves some empty and
    others doubled, and each node's pass is one task. Computed here, not asked of Spark: no
    job."""
    found: dict[int, int] = {}
    key = 0
    while len(found) < n:
        found.setdefault(spark_hash_long(key) % n, key)
        key += 1
    return [found[k] for k in range(n)]


def _records(events: DataFrame, nodes: list[str], correct: list[str],
             seen: pa.Table | None = None,
             restarted: list[str] | tuple[str, ...] = (),
             joins: Joins | None = None) -> tuple[Records, list[str]]:
    """Run both passes and the causal pass; return their records by kind and the processes
    the holder bitmaps index (sorted): the run's `nodes`, later incarnations of restarted
    hosts (`host@k`, checks_mid.process_names) and any host named only in the events (a log
    line naming another host). `correct` are the hosts held to agreement and validity,
    `restarted` the restarted processes correct from their restart on and `joins` where they
    joined each sender's stream (MidPass).

    The rows the first pass reads come out of checks_mid.check_input_sql here (the JVM's
    generated code, before the shuffle by mid, so each event crosses from the JVM to Python
    once) and of checks_mid.check_input on the whole table in analysis/judge.py: which
    events count, and as what, by the same rules."""
    from pyspark.sql import functions as F

    spark = events.sparkSession
    wanted = events.filter(F.col("ev").isin("fnl", "send", "recv") & F.col("mid").isNotNull())
    if seen is None:
        seen = events.select("node", "inc").distinct().toArrow()
    names = sorted(set(nodes) | {n for n in process_names(seen["node"], seen["inc"])
                                 .to_pylist() if n is not None})
    parts = int(spark.conf.get("spark.sql.shuffle.partitions") or 4)
    # One scan, one shuffle by mid: the first pass also emits the causal pass's rows (each
    # process's first deliveries and each message's earliest send, `p` set).
    by_mid = (check_input_sql(wanted, names).repartition(parts, "mid")
              .mapInArrow(MidPass(names, correct, causal=True, restarted=restarted,
                                joins=joins), MID_BLOBS))
    # A partition per process, and one more for the causal rows: causal order needs every
    # process's sends and deliveries at once, so one task gets them and hands back its
    # records; no event reaches the driver. The causal task is the longest of the stage, so
    # it gets partition 0, which Spark starts first: the processes' tasks share the other
    # core meanwhile rather than leaving the causal task to run alone at the end.
    keys = partition_keys(len(names) + 1)
    by_dest = keys[1:] + keys[:1]  # dest k < len(names): partition k + 1; causal: 0
    part = F.element_at(F.array(*[F.lit(k) for k in by_dest]), F.col("dest") + 1).cast("long")
    by_node = (by_mid.withColumn("_part", part).repartition(len(keys), "_part").drop("_part")
               .mapInArrow(checks_node.NodeChecks(checks_order.MAX_PAIRS_PER_NODE, names),
                           checks_node.NODE_RECS))
    recs = _parse_records(by_node.toArrow().column("rec").to_pylist())
    return recs, names


def _parse_records(lines: Iterable[str]) -> Records:
    recs: Records = {}
    _add(recs, (json.loads(line) for line in lines))
    return recs


def _add(recs: Records, found: Iterable[dict[str, Any]]) -> None:
    for rec in found:
        recs.setdefault(rec.pop("r"), []).append(rec)


def table_records(events: pa.Table, nodes: list[str], correct: list[str],
                  restarted: list[str] | tuple[str, ...] = (),
                  joins: Joins | None = None) -> tuple[Records, list[str]]:
    """`_records` in-process over an Arrow table of events (analysis/ingest.py ARROW_SCHEMA):
    the same two passes, each over the whole table as one partition."""
    rows = check_input(events)
    names = sorted(set(nodes) | {n for n in pc.unique(process_names(
        events["node"], events["inc"])).to_pylist() if n is not None})
    by_mid = (MidPass(names, correct, restarted=restarted, joins=joins).run(rows)
              if rows.num_rows else None)
    if by_mid is None:
        return {}, names
    split = checks_node.NodeChecks(checks_order.MAX_PAIRS_PER_NODE, names).split(
        by_mid.to_batches())
    recs: Records = {}
    if split is not None:  # the second pass's own records need no JSON round trip
        passed, own = split
        recs = _parse_records(passed.to_pylist())
        _add(recs, own)
    _add(recs, causal_records(rows, checks_order.MAX_PAIRS_PER_NODE))
    return recs, names


def _interleave(recs: Records, kinds: dict[str, str], key: Any) -> list[dict[str, Any]]:
    """Each kind's first MAX_EXAMPLES by `key`, then all of them by (rank, kind name): the
    first examples of every kind show, as one list."""
    ranked = []
    for rec_kind, name in kinds.items():
        for rank, r in enumerate(sorted(recs.get(rec_kind, []), key=key)[:MAX_EXAMPLES]):
            ranked.append((rank, name, r))
    return [{"kind": name, **r} for _, name, r in sorted(ranked, key=lambda x: x[:2])]


def _total(recs: Records, kind: str) -> int:
    return sum(int(r["n"]) for r in recs.get(kind, []))


def agreement(recs: Records, correct: list[str], crashed: set[str],
              history: FaultHistory | None = None, joins: Joins | None = None) -> Check:
    """(mid, node) pairs where a correct node never fnl-delivered a message some correct node
    did (000 §2.2 Agreement; a message only faulty hosts delivered binds nobody); a restarted
    process that stays up owes, as a correct node does, the messages of each sender from
    its join point in that sender's stream on (`joins`, analysis/joins.py: reported as
    `restarted_joins`, the first mid it owes of each sender). `faulty_senders`: how many of
    the findings are messages of a faulty sender (crashed for good, an incarnation before
    its restart, cut off at the end), which some claims spare (analysis/verdict.py
    `spare_faulty_senders`).

    With a fault `history`, hosts cut off by a partition that never healed are not correct
    either (they could not have caught up), and each example carries the time of the
    message's first delivery and the faults active then.
    """
    per_node: dict[str, int] = {}
    for r in recs.get("agree_n", []):
        per_node[r["node"]] = per_node.get(r["node"], 0) + int(r["n"])
    rows = sorted(recs.get("agree", []), key=lambda r: (r["mid"], r["node"]))[:MAX_EXAMPLES]
    examples = [{"mid": r["mid"], "node": r["node"], "delivered_by": r["delivered_by"]}
                for r in rows]
    if history is not None:
        for e, r in zip(examples, rows, strict=True):
            e["t"] = r["t"]
        history.annotate(examples)
    result: Check = {"violations": sum(per_node.values()), "correct_nodes": correct,
                     "crashed_nodes": sorted(crashed),
                     "missing_per_node": dict(sorted(per_node.items())),
                     "faulty_senders": _total(recs, "agree_faulty_n"), "examples": examples}
    if history is not None:
        result["partitioned_at_end"] = sorted(history.partitioned_at_end)
        result["restarted_nodes"] = history.restarted
        result["restarted_joins"] = {p: {o: f"{o}:{n}" for o, n in sorted(j.items())}
                                     for p, j in sorted((joins or {}).items())}
    return result


def validity(recs: Records, history: FaultHistory) -> Check:
    """Messages of correct senders that a correct host should have fnl-delivered and did not.

    Two kinds: `not_self_delivered`, a correct sender never delivered its own message (the
    validity of atomic broadcast, 004 Definition 1 liveness); `received_not_delivered`, a
    correct host received (recv) a correct sender's message and never delivered it (004
    Definition 2 liveness: gaps only for faulty senders or messages the network lost).
    `restarted_senders`: how many of them are messages of a restarted process that stays
    up (FaultHistory.restarted), whose progress the drain does not wait for (the verdict
    excuses them where the protocol claims no progress: analysis/liveness.py).
    """
    examples = _interleave(
        recs, {"own": "not_self_delivered", "recv": "received_not_delivered"},
        key=lambda r: (r["t"], r["node"], r["mid"]))[:MAX_EXAMPLES]
    examples = [{"kind": e["kind"], "mid": e["mid"], "node": e["node"], "t": e["t"]}
                for e in examples]
    history.annotate(examples)
    own, recv = _total(recs, "own_n"), _total(recs, "recv_n")
    return {"violations": own + recv, "not_self_delivered": own, "received_not_delivered": recv,
            "restarted_senders": _total(recs, "restarted_n"),
            "correct_nodes": history.correct, "restarted_nodes": history.restarted,
            "examples": examples}


def integrity(recs: Records) -> Check:
    """Duplicate fnl deliveries (one per extra copy) and deliveries of never-sent messages
    (every fnl event of one counts, copies included)."""
    examples = _interleave(recs, {"dup": "duplicate", "unsent": "never_sent"},
                           key=lambda r: (r["node"], r["mid"], r["i"]))[:MAX_EXAMPLES]
    duplicates, never_sent = _total(recs, "dup_n"), _total(recs, "unsent_n")
    return {"violations": duplicates + never_sent, "duplicates": duplicates,
            "never_sent": never_sent,
            "examples": [{"kind": e["kind"], "node": e["node"], "mid": e["mid"], "i": e["i"],
                          "extra": e["n"]} for e in examples]}


# What a log of a protocol the catalogue does not know (hand-written, "raw") is held to: every
# check but causal order, as before protocols declared claims.
UNKNOWN_CLAIMS = frozenset({*catalogue.CHECKS, "local_order"} - {"causal_order"})


def claims_of(protos: set[str], params: Params | None = None) -> frozenset[str]:
    """The checks every protocol in `protos` claims (nodes/protocols/catalogue.py) with its
    `params` (by protocol name; a protocol without any: its defaults), the catalogue's
    ParamClaims included, plus `local_order` for optimistic ones; a log naming no protocol
    gets UNKNOWN_CLAIMS."""
    sets = []
    for instance in protos:
        name = instance.split("#", 1)[0]  # "<protocol>#<scope>": an instance
        entry = catalogue.find(name)
        if entry is None:
            sets.append(UNKNOWN_CLAIMS)
        else:
            sets.append(entry.claims_for((params or {}).get(name, {}))
                        | ({"local_order"} if entry.optimistic else set()))
    return frozenset.intersection(*sets) if sets else UNKNOWN_CLAIMS


def log_claims(events: DataFrame | pa.Table, params: Params | None = None) -> frozenset[str]:
    """The claims of the protocols named in the log's `proto` column (a DataFrame or an Arrow
    table of events), with the run's `params` (claims_of)."""
    if isinstance(events, pa.Table):
        return claims_of({p for p in pc.unique(events["proto"]).to_pylist() if p}, params)
    return claims_of({r["proto"] for r in events.select("proto").distinct().collect()
                      if r["proto"]}, params)


def node_errors(events: Overview | pa.Table) -> dict[str, Any]:
    """The `ev=error` events the nodes wrote (nodes/runtime.py): how many, per node (from the
    Spark job's Overview or an Arrow table of events)."""
    per_node: dict[str, int] = {}
    if isinstance(events, Overview):
        per_node = events.per_node("error")
    else:
        for node in events.filter(pc.equal(events["ev"], "error"))["node"].to_pylist():
            per_node[node] = per_node.get(node, 0) + 1
    per_node = dict(sorted(per_node.items()))
    return {"total": sum(per_node.values()), "per_node": per_node}


def causal_claimed(events: DataFrame) -> bool:
    """True when every protocol named in the log promises causal fnl order."""
    return "causal_order" in log_claims(events)


def mark_claimed(checks: dict[str, Check], claims: frozenset[str]) -> dict[str, Check]:
    """Give every check `"claimed": true|false`: only claimed
    checks fail a run (analysis/job.py checks_ok); the others are reported for information."""
    for name, check in checks.items():
        check["claimed"] = name in claims
    return checks


def run_checks(events: DataFrame, nodes: list[str], crashed: set[str]) -> dict[str, Check]:
    """Total order, agreement (hosts that never crashed) and integrity, with no fault history."""
    correct = sorted(set(nodes) - crashed)
    recs, names = _records(events, nodes, correct)
    return {
        "total_order": checks_order.total_order(
            recs, names, lambda mids: checks_order.first_fnl(events, mids)),
        "agreement": agreement(recs, correct, crashed),
        "integrity": integrity(recs),
    }


def check_suite(events: DataFrame, history: FaultHistory, params: Params | None = None,
                view: Overview | None = None) -> dict[str, Check]:
    """Every checker, judged against the crash and partition history; keyed as in summary.json.

    Every check reports its count; each carries `claimed` (the protocol promises it, per the
    catalogue), and only claimed ones can fail the run.

    Each example carries `faults_active`: the faults active at the example's time `t`.
    Hosts that crashed, and hosts cut off by a partition still on at the end, are held to
    neither agreement nor validity. The processes and the protocols the log names come from
    `view`, the events' Overview (one Spark job when not given).
    """
    seen = (view if view is not None else overview(events)).groups
    joins = join_points_sql(events, history.restarted)
    recs, names = _records(events, history.nodes, history.correct, seen, history.restarted,
                           joins)

    def lookup(mids: set[str]) -> checks_order.Firsts:
        return checks_order.first_fnl(events, mids)

    claims = claims_of({p for p in pc.unique(seen["proto"]).to_pylist() if p}, params)
    return judge_records(recs, names, lookup, history, claims, joins)


def table_check_suite(events: pa.Table, history: FaultHistory,
                      params: Params | None = None) -> dict[str, Check]:
    """check_suite in-process, over an Arrow table of events (analysis/judge.py)."""
    joins = join_points(events, history.restarted)
    recs, names = table_records(events, history.nodes, history.correct, history.restarted,
                                joins)
    fnl = events.filter(pc.equal(events["ev"], "fnl")).select(["node", "inc", "mid", "i", "t"])

    def lookup(mids: set[str]) -> checks_order.Firsts:
        return checks_order.first_fnl_table(fnl, mids)

    return judge_records(recs, names, lookup, history, log_claims(events, params), joins)


def judge_records(recs: Records, names: list[str], lookup: checks_order.Lookup,
                  history: FaultHistory, claims: frozenset[str],
                  joins: Joins | None = None) -> dict[str, Check]:
    """The checks of the suite from the two passes' records (either driver). The examples'
    first deliveries come from one lookup (a scan of every event on the Spark driver)."""
    correct = history.correct
    lookup = checks_order.Prefetched(lookup, checks_order.example_mids(recs, names))
    return mark_claimed({
        "total_order": checks_order.total_order(recs, names, lookup, history),
        "agreement": agreement(recs, correct, history.crashed, history, joins),
        "validity": validity(recs, history),
        "integrity": integrity(recs),
        "fifo_order": checks_order.fifo_order(recs, history),
        "causal_order": checks_order.causal_order(recs, lookup, history),
    }, claims)
