"""Elle's rw-register inference (`010`): isolation anomalies of a history of transactions over
read-write registers, as Maelstrom's `txn-rw-register` workload checks them
(docs/maelstrom.md).

A transaction is a list of micro-operations `["r", k, v]` and `["w", k, v]`; every write to
a key writes a value no other write to it wrote, so each version read is recoverable: it
names its writer (`010` §4.2.3). A blind write reveals nothing of the version it replaced,
so the version order is partial, inferred as Elle infers it for registers (`010` §5.2):

- the initial version `nil` precedes every other version of the key;
- writes follow reads: a committed transaction that reads `v` of a key (before writing it)
  and then writes `v'` to it puts `v` before `v'`. A key whose inferred order has a cycle is
  `cyclic-versions` (`010` §7), and orders by the first rule alone.

Each direct edge `v -> v'` of a key's version graph gives a `ww` edge from the writer of `v`
to the writer of `v'` and an `rw` edge from every transaction that read `v` (a reader of
`nil` included) to the writer of `v'`; a `wr` edge goes from the writer of a version to
every transaction that read it (`010` §2, §4.1.4). Only a transaction's external reads (its
first read of a key, before writing it) and external writes (its last write of a key) take
part. `ok` transactions committed; an `info` one may have, and its writes are versions; a
`fail` one did not. Cycles and models: analysis/elle.py.

Anomalies found directly: `G1a` (a read of a value that a failed transaction wrote), `G1b`
(a read of a value that another transaction overwrote before it ended), `010` §4.3.1;
`internal` (a read that differs from its transaction's previous read or write of the key)
and `garbage-read` (a read of a value nobody wrote), `010` §6.1; `lost-update` (two
committed transactions read the same version of a key and both wrote it, `010` §7).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from analysis.elle import (
    DEFAULT_MODELS,
    Graph,
    Txn,
    hashable,
    is_txn_of,
    judge,
    strongly_connected,
)

is_txn = is_txn_of(("r", "w"))
Key = tuple[Any, Any]  # (key, value), both hashable


def externals(t: Txn) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """A transaction's external reads (key -> the value of its first read of the key, when
    no write of the key came before it) and external writes (key -> its last write)."""
    reads: dict[Any, Any] = {}
    writes: dict[Any, Any] = {}
    for f, k, v in t.mops:
        key = hashable(k)
        if f == "w":
            writes[key] = hashable(v)
        elif key not in reads and key not in writes:
            reads[key] = hashable(v)
    return reads, writes


def check(txns: list[Txn], models: tuple[str, ...] = DEFAULT_MODELS) -> dict[str, Any]:
    """Elle's result map (analysis/elle.py `judge`) of an rw-register history."""
    found: dict[str, list[Any]] = defaultdict(list)
    ok = [t for t in txns if t.type == "ok"]
    ext = {t.index: externals(t) for t in txns}
    writer: dict[Key, Txn] = {}  # (key, value) -> the transaction that wrote it last
    intermediate: dict[Key, Txn] = {}  # (key, value) -> a transaction that overwrote it
    failed: dict[Key, Txn] = {}
    for t in txns:
        final = ext[t.index][1]
        for f, k, v in t.mops:
            kv = (hashable(k), hashable(v))
            if f != "w":
                continue
            if t.type == "fail":
                failed[kv] = t
            elif final[kv[0]] != kv[1]:
                intermediate[kv] = t
        if t.type != "fail":
            writer.update({(key, v): t for key, v in final.items()})
    for t in ok:
        _direct(t, writer, intermediate, failed, found)
    graph = Graph()
    for t in ok:
        for key, v in ext[t.index][0].items():
            if v is not None and (key, v) in writer:
                graph.add(writer[(key, v)].index, t.index, "wr", key)
    readers: dict[Key, list[Txn]] = defaultdict(list)
    for t in ok:
        for key, v in ext[t.index][0].items():
            readers[(key, v)].append(t)
    for key, order in _version_graphs(txns, ext, found).items():
        for v1, later in order.items():
            for v2 in later:
                w2 = writer.get((key, v2))
                if w2 is None:
                    continue
                if (key, v1) in writer:
                    graph.add(writer[(key, v1)].index, w2.index, "ww", key)
                for r in readers.get((key, v1), []):
                    graph.add(r.index, w2.index, "rw", key)
    _lost_updates(ok, ext, found)
    return judge(txns, graph, found, models)


def _direct(t: Txn, writer: dict[Key, Txn], intermediate: dict[Key, Txn],
            failed: dict[Key, Txn], found: dict[str, list[Any]]) -> None:
    """The anomalies one committed transaction shows by itself: `internal` (its first read
    that differs from what it read or wrote of the key before), and for each read `G1a`,
    `G1b` or `garbage-read`."""
    state: dict[Any, Any] = {}
    inconsistent = False
    for f, k, v in t.mops:
        key, val = hashable(k), hashable(v)
        if f == "r" and key in state and state[key] != val and not inconsistent:
            found["internal"].append({"op": t.label(), "mop": [f, k, v],
                                      "expected": state[key]})
            inconsistent = True
        state[key] = val
        if f != "r" or val is None:
            continue
        kv = (key, val)
        if kv in failed:
            found["G1a"].append({"op": t.label(), "mop": [f, k, v],
                                 "writer": failed[kv].label()})
        elif kv in intermediate and intermediate[kv] is not t:
            found["G1b"].append({"op": t.label(), "mop": [f, k, v],
                                 "writer": intermediate[kv].label()})
        elif kv not in writer and kv not in intermediate:
            found["garbage-read"].append({"op": t.label(), "mop": [f, k, v]})


def _version_graphs(txns: list[Txn], ext: dict[int, tuple[dict[Any, Any], dict[Any, Any]]],
                    found: dict[str, list[Any]]) -> dict[Any, dict[Any, set[Any]]]:
    """Each key's version graph (value -> the values known to follow it directly; `None`
    is the initial `nil`): `nil` before every version written (ok, info) or read (ok), and
    what committed transactions' writes following their reads add, unless that makes a
    cycle (`cyclic-versions`)."""
    graphs: dict[Any, dict[Any, set[Any]]] = defaultdict(lambda: defaultdict(set))
    wfr: dict[Any, dict[Any, set[Any]]] = defaultdict(lambda: defaultdict(set))
    for t in txns:
        if t.type == "fail":
            continue
        reads, writes = ext[t.index]
        seen = [*writes.items(), *(reads.items() if t.type == "ok" else ())]
        for key, v in seen:
            if v is not None:
                graphs[key][None].add(v)
        if t.type == "ok":
            for key, v in reads.items():
                w = writes.get(key)
                if v is not None and w is not None and w != v:
                    wfr[key][v].add(w)
    for key, edges in wfr.items():
        ids: dict[Any, int] = {}
        as_ids = {ids.setdefault(a, len(ids)): [ids.setdefault(b, len(ids)) for b in bs]
                  for a, bs in edges.items()}
        cycles = strongly_connected(as_ids)
        if cycles:
            names = {i: v for v, i in ids.items()}
            found["cyclic-versions"].append({"key": key, "scc": [names[i] for i in
                                                                 cycles[0]]})
            continue
        for a, bs in edges.items():
            graphs[key][a] |= bs
    return graphs


def _lost_updates(ok: list[Txn], ext: dict[int, tuple[dict[Any, Any], dict[Any, Any]]],
                  found: dict[str, list[Any]]) -> None:
    """`lost-update`: committed transactions that read the same version of a key (`nil`
    too) before each writing it."""
    both: dict[Key, list[Txn]] = defaultdict(list)
    for t in ok:
        reads, writes = ext[t.index]
        for key, v in reads.items():
            if key in writes:
                both[(key, v)].append(t)
    for (key, v), ts in both.items():
        if len(ts) > 1:
            found["lost-update"].append({"key": key, "value": v,
                                         "txns": [t.label() for t in ts]})
