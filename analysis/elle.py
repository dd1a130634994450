"""Elle's list-append inference (`010`): isolation anomalies of a history of transactions over
append-only lists, as Maelstrom's `txn-list-append` workload checks them (docs/maelstrom.md).

A transaction is a list of micro-operations `["r", k, list]` and `["append", k, v]`; each
append value is unique per key. Because a read returns the whole list, it reveals every
append before it, in order (`010` §3, §4.1.6): the longest read of a key is its version
order, and every other read must be a prefix of it (else `incompatible-order`). From the
version orders come Adya's dependency edges between transactions (`010` §2, §4.1.4): `ww`
(one append directly follows another in a key's order), `wr` (a read's last element was
appended by the writer), `rw` (a read misses the next append in the order), and with
`strict-serializable` `rt` (one transaction completed before the other began; a transitive
reduction, `010` §5.1). `ok` transactions committed; an `info` one may have, and enters the
graph when a read saw one of its appends; a `fail` one did not.

Anomalies: `G1a` (aborted read: a read saw an append of a failed transaction), `G1b`
(intermediate read: a read ends at an append that its transaction followed with another to
the same key) and `dirty-update` (an append of a failed transaction followed by a committed
one in a version order), `010` §4.1.5, §4.3.1; `garbage-read` (a read holds a value nobody
appended), `duplicate-elements` (a value twice in one read) and `internal` (a read that does
not end with its own transaction's earlier appends to the key), `010` §6.1; and the cycles of
the dependency graph (`010` §4.3.2, §6), each searched in a strongly connected component
(Tarjan) and named by its edges: `G0` (`ww` only), `G1c` (`ww` and `wr`), `G-single`
(exactly one `rw`), `G2-item` (more than one `rw`); a cycle that needs an `rt` edge takes the
suffix `-realtime`.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

N = TypeVar("N", int, str)  # a graph's node: a transaction's index, or a name

# The consistency models --consistency-models accepts, each with the anomalies it prohibits
# (`010` §2, Adya's definitions; strict serializability adds real-time order, `010` §5.1).
_RC = ("G0", "G1a", "G1b", "G1c")
_SER = (*_RC, "G-single", "G2-item")
PROHIBITS: dict[str, tuple[str, ...]] = {
    "read-uncommitted": ("G0",),
    "read-committed": _RC,
    "snapshot-isolation": (*_RC, "G-single"),
    "serializable": _SER,
    "strict-serializable": (*_SER, *(f"{a}-realtime" for a in ("G0", "G1c", "G-single",
                                                               "G2-item"))),
}
DEFAULT_MODELS = ("strict-serializable",)  # Maelstrom's default
# Anomalies that no model allows: the history itself is broken.
ALWAYS = ("incompatible-order", "duplicate-elements", "dirty-update", "internal",
          "garbage-read")
MAX_EXAMPLES = 5
MAX_SEARCHES = 200  # cycle searches per component and anomaly class


@dataclass
class Txn:
    """One transaction as the client saw it: `type` ok, fail or info; `mops` the completed
    micro-operations for ok (reads with their lists), the requested ones otherwise."""

    index: int
    type: str
    mops: list[list[Any]]
    invoke_t: int = 0
    complete_t: int | None = None
    process: str = ""

    def label(self) -> dict[str, Any]:
        return {"index": self.index, "process": self.process, "type": self.type,
                "value": self.mops}


@dataclass
class Graph:
    """Dependency edges: (from, to) -> {edge type: the key that explains it}."""

    edges: dict[int, dict[int, dict[str, Any]]] = field(
        default_factory=lambda: defaultdict(dict))

    def add(self, a: int, b: int, kind: str, key: Any) -> None:
        if a != b:
            self.edges[a].setdefault(b, {}).setdefault(kind, key)


def _h(v: Any) -> Any:
    """A value as a dictionary key (lists and maps as their JSON)."""
    return json.dumps(v, sort_keys=True) if isinstance(v, list | dict) else v


def is_txn(txn: Any) -> bool:
    """Whether `txn` is a list of micro-operations `[f, k, v]`, f `r` or `append`."""
    return isinstance(txn, list) and all(
        isinstance(m, list) and len(m) == 3 and m[0] in ("r", "append") for m in txn)


def check(txns: list[Txn], models: tuple[str, ...] = DEFAULT_MODELS) -> dict[str, Any]:
    """Elle's result map: `valid?` (no anomaly that a model of `models` prohibits, and none of
    ALWAYS), `anomaly-types` (every type found), `anomalies` (type -> examples), `not` (the
    checked models the anomalies rule out)."""
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
            kv = (_h(k), _h(v))
            (failed if t.type == "fail" else writer)[kv] = t
            if _h(k) in last:
                intermediate[(_h(k), last[_h(k)])] = t
            last[_h(k)] = _h(v)
    reads: dict[Any, list[tuple[Txn, list[Any]]]] = defaultdict(list)
    for t in ok:
        mine: dict[Any, list[Any]] = defaultdict(list)  # this txn's own appends so far
        for f, k, v in t.mops:
            key = _h(k)
            if f == "append":
                mine[key].append(_h(v))
                continue
            got = ([x if isinstance(x, int | str) else _h(x) for x in v]
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
    realtime = "strict-serializable" in models
    if realtime:
        _realtime_edges(ok, graph)
    by_index = {t.index: t for t in txns}
    for kind, cycle in _cycles(graph):
        found[kind].append({"cycle": [by_index[i].label() for i, _, _ in cycle],
                            "steps": [{"type": e, "key": k} for _, e, k in cycle]})
    bad = sorted(k for k in found if k in prohibited(models))
    return {"valid?": not bad, "anomaly-types": sorted(found),
            "anomalies": {k: v[:MAX_EXAMPLES] for k, v in sorted(found.items())},
            "not": sorted(m for m in PROHIBITS if set(found) & set(PROHIBITS[m])
                          or set(found) & set(ALWAYS))}


def prohibited(models: tuple[str, ...]) -> set[str]:
    """The anomaly types that fail a history checked against `models`."""
    return set(ALWAYS).union(*(PROHIBITS[m] for m in models))


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


def _realtime_edges(ok: list[Txn], graph: Graph) -> None:
    """`rt` edges a -> b where a completed before b was invoked, transitively reduced: each
    transaction links from the frontier of those completed before it began that no later
    completed transaction follows."""
    events = sorted([(t.invoke_t, 1, t) for t in ok] +
                    [(t.complete_t, 0, t) for t in ok if t.complete_t is not None],
                    key=lambda e: (e[0], e[1]))
    frontier: set[int] = set()
    before: dict[int, set[int]] = {}
    for _, kind, t in events:
        if kind == 1:
            before[t.index] = set(frontier)
            for a in frontier:
                graph.add(a, t.index, "rt", None)
        else:
            frontier -= before.get(t.index, set())
            frontier.add(t.index)


# The cycle classes in search order: name, the edge a cycle starts from, the edges of the
# way back, and what the whole cycle's edge counts must be. G-single's way back has no rw
# edge, so its cycle has exactly one; a `-realtime` class starts from an rt edge.
Rule = tuple[str, str, frozenset[str], Callable[[Counter[str]], bool]]


def _any(counts: Counter[str]) -> bool:
    return True


CLASSES: tuple[Rule, ...] = (
    ("G0", "ww", frozenset({"ww"}), _any),
    ("G1c", "wr", frozenset({"ww", "wr"}), _any),
    ("G-single", "rw", frozenset({"ww", "wr"}), _any),
    ("G2-item", "rw", frozenset({"ww", "wr", "rw"}), lambda c: c["rw"] >= 2),
    ("G0-realtime", "rt", frozenset({"ww", "rt"}), lambda c: c["ww"] >= 1),
    ("G1c-realtime", "rt", frozenset({"ww", "wr", "rt"}), lambda c: c["wr"] >= 1),
    ("G-single-realtime", "rt", frozenset({"ww", "wr", "rw", "rt"}),
     lambda c: c["rw"] == 1),
    ("G2-item-realtime", "rt", frozenset({"ww", "wr", "rw", "rt"}), lambda c: c["rw"] >= 2),
)


def _cycles(graph: Graph) -> list[tuple[str, list[tuple[int, str, Any]]]]:
    """One example cycle per class per strongly connected component; a `-realtime` class
    only where the component has no cycle of its plain class."""
    out = []
    for comp in _sccs(graph):
        members = set(comp)
        found: set[str] = set()
        for name, first, back, fits in CLASSES:
            if name.removesuffix("-realtime") in found:
                continue
            cyc = _find(graph, members, first, back, fits)
            if cyc is not None:
                found.add(name.removesuffix("-realtime"))
                out.append((name, cyc))
    return out


def _find(graph: Graph, members: set[int], first: str, back: frozenset[str],
          fits: Callable[[Counter[str]], bool]) -> list[tuple[int, str, Any]] | None:
    """A cycle within `members`: an edge a -> b of type `first`, then the shortest way from b
    back to a over `back` edges, whose edge counts `fits`; each step (from, edge type, key)."""
    tries = 0
    for a in sorted(members):
        for b, kinds in graph.edges.get(a, {}).items():
            if b not in members or first not in kinds:
                continue
            tries += 1
            if tries > MAX_SEARCHES:
                return None
            rest = _path(graph, members, back, b, a)
            if rest is None:
                continue
            cycle = [(a, first, kinds[first]), *rest]
            if fits(Counter(e for _, e, _ in cycle)):
                return cycle
    return None


def _path(graph: Graph, members: set[int], allowed: frozenset[str], src: int, dst: int
          ) -> list[tuple[int, str, Any]] | None:
    """The shortest path src -> ... -> dst (at least one step) over `allowed` edges within
    `members` (breadth first), as steps (from, edge type, key)."""
    prev: dict[int, tuple[int, str, Any]] = {}
    queue = deque([src])
    seen = {src} if src != dst else set()
    while queue:
        a = queue.popleft()
        for b, kinds in graph.edges.get(a, {}).items():
            usable = [k for k in ("ww", "wr", "rw", "rt") if k in kinds and k in allowed]
            if b not in members or not usable or b in seen:
                continue
            seen.add(b)
            prev[b] = (a, usable[0], kinds[usable[0]])
            if b == dst:
                steps, at = [], dst
                while True:
                    frm, kind, key = prev[at]
                    steps.append((frm, kind, key))
                    at = frm
                    if at == src:
                        return steps[::-1]
            queue.append(b)
    return None


def _sccs(graph: Graph) -> list[list[int]]:
    """The strongly connected components with more than one transaction."""
    return strongly_connected(graph.edges)


def strongly_connected(edges: Mapping[N, Iterable[N]]) -> list[list[N]]:
    """Tarjan's strongly connected components of more than one node, each sorted, in the
    order the search closes them (iterative: no recursion limit on long chains; nodes and
    their edges visited in sorted order, so the result is deterministic)."""
    index: dict[N, int] = {}
    low: dict[N, int] = {}
    stack: list[N] = []
    on: set[N] = set()
    out: list[list[N]] = []
    nodes = set(edges) | {b for bs in edges.values() for b in bs}
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def txns_of(ops: list[Any]) -> tuple[list[Txn], int]:
    """The `txn` operations of a Maelstrom history (analysis/maelstrom.py `Operation`) as
    transactions, and how many were not lists of micro-operations (left out)."""
    out: list[Txn] = []
    bad = 0
    for op in ops:
        if op.f != "txn":
            continue
        mops = op.result if op.type == "ok" else op.value
        if not is_txn(mops):
            bad += 1
            continue
        out.append(Txn(len(out), op.type, mops, op.invoke_t, op.complete_t,
                       f"{op.node}/{op.client}"))
    return out, bad
