"""Elle's list-append inference (`010`): isolation anomalies of a history of transactions over
append-only lists, as Maelstrom's `txn-list-append` workload checks them (docs/maelstrom.md).

A transaction is a list of micro-operations `["r", k, list]` and `["append", k, v]`; each
append value is unique per key. Because a read returns the whole list, it reveals every
append before it, in order (`010` §3, §4.1.6): the longest read of a key is its version
order, and every other read must be a prefix of it (else `incompatible-order`). From the
version orders come Adya's dependency edges between transactions (`010` §2, §4.1.4): `ww`
(one append directly follows another in a key's order), `wr` (a read's last element was
appended by the writer), `rw` (a read misses the next append in the order). `ok`
transactions committed; an `info` one may have, and enters the graph when a read saw one of
its appends; a `fail` one did not. Cycles and models: analysis/elle.py.

Anomalies found directly: `G1a` (aborted read: a read saw an append of a failed
transaction), `G1b` (intermediate read: a read ends at an append that its transaction
followed with another to the same key) and `dirty-update` (an append of a failed transaction
followed by a committed one in a version order), `010` §4.1.5, §4.3.1; `garbage-read` (a
read holds a value nobody appended), `duplicate-elements` (a value twice in one read) and
`internal` (a read that does not end with its own transaction's earlier appends to the key),
`010` §6.1.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from analysis.elle import DEFAULT_MODELS, Graph, Txn, hashable, is_txn_of, judge

is_txn = is_txn_of(("r", "append"))


def check(txns: list[Txn], models: tuple[str, ...] = DEFAULT_MODELS) -> dict[str, Any]:
    """Elle's result map (analysis/elle.py `judge`) of a list-append history."""
    found: dict[str, list[Any]] = defaultdict(list)
    ok = [t for t in txns if t.type == "ok"]
    writer: dict[tuple[Any, Any], Txn] = {}  # (key, value) -> its appending transaction
    failed: dict[tuple[Any, Any], Txn] = {}
    intermediate: dict[tuple[Any, Any], Txn] = {}
    for t in txns:
        last: dict[Any, Any] = {}
        for f, k, v in t.mops:
            if f != "append":
                continue
            kv = (hashable(k), hashable(v))
            (failed if t.type == "fail" else writer)[kv] = t
            if hashable(k) in last:
                intermediate[(hashable(k), last[hashable(k)])] = t
            last[hashable(k)] = hashable(v)
    reads: dict[Any, list[tuple[Txn, list[Any]]]] = defaultdict(list)
    for t in ok:
        mine: dict[Any, list[Any]] = defaultdict(list)  # this txn's own appends so far
        for f, k, v in t.mops:
            key = hashable(k)
            if f == "append":
                mine[key].append(hashable(v))
                continue
            got = ([x if isinstance(x, int | str) else hashable(x) for x in v]
                   if isinstance(v, list) else [])
            if mine[key] and got[-len(mine[key]):] != mine[key]:
                found["internal"].append({"op": t.label(), "key": k, "expected-suffix":
                                          mine[key], "read": v})
                continue
            seen = set()
            for x in got:
                if x in seen:
                    found["duplicate-elements"].append({"op": t.label(), "key": k,
                                                        "element": x})
                    break
                seen.add(x)
            for x in got:
                if (key, x) in failed:
                    found["G1a"].append({"op": t.label(), "writer": failed[(key, x)].label(),
                                         "key": k, "element": x})
                elif (key, x) not in writer:
                    found["garbage-read"].append({"op": t.label(), "key": k,
                                                     "element": x})
            if got and (key, got[-1]) in intermediate and \
                    intermediate[(key, got[-1])] is not t:
                found["G1b"].append({"op": t.label(), "writer":
                                     intermediate[(key, got[-1])].label(), "key": k,
                                     "element": got[-1]})
            if not mine[key]:  # a read of the transaction's own appends orders nothing new
                reads[key].append((t, got))
    orders = _version_orders(reads, found)
    graph = Graph()
    for key, order in orders.items():
        for a, b in zip(order, order[1:], strict=False):
            wa, wb = writer.get((key, a)), writer.get((key, b))
            if wa is None and (key, a) in failed and wb is not None:
                found["dirty-update"].append({"key": key, "aborted": a, "then": b})
            if wa is not None and wb is not None:
                graph.add(wa.index, wb.index, "ww", key)
        for t, got in reads[key]:
            if got and (key, got[-1]) in writer:
                graph.add(writer[(key, got[-1])].index, t.index, "wr", key)
            # the next append in the order by another transaction than the one read last
            # (a transaction's intermediate appends are no versions of their own)
            read_last = writer.get((key, got[-1])) if got else None
            nxt = next((writer[(key, v)] for v in order[len(got):] if (key, v) in writer
                        and writer[(key, v)] is not read_last), None)
            if nxt is not None:
                graph.add(t.index, nxt.index, "rw", key)
    return judge(txns, graph, found, models)


def _version_orders(reads: dict[Any, list[tuple[Txn, list[Any]]]],
                    found: dict[str, list[Any]]) -> dict[Any, list[Any]]:
    """Each key's version order: its longest read, when every other read is a prefix of it
    (else `incompatible-order`, and the key orders nothing)."""
    orders: dict[Any, list[Any]] = {}
    for key, rs in reads.items():
        longest = max((got for _, got in rs), key=len, default=[])
        bad = next(((t, got) for t, got in rs if longest[:len(got)] != got), None)
        if bad is not None:
            found["incompatible-order"].append({"key": key, "values": [longest, bad[1]],
                                                "op": bad[0].label()})
            continue
        orders[key] = longest
    return orders
