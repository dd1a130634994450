"""Elle's dependency graph (`010`), shared by Maelstrom's transactional workloads: the
transactions of a history, Adya's dependency edges between them, the cycle search and the
consistency models that judge the anomalies found (docs/maelstrom.md).

Each workload infers its own edges and direct anomalies from what its objects reveal
(analysis/elle_list_append.py: lists; analysis/elle_rw_register.py: registers); this module
adds, with `strict-serializable`, `rt` edges (one transaction completed before the other
began; a transitive reduction, `010` §5.1), then searches each strongly connected component
(Tarjan) for one cycle per class (`010` §4.3.2, §6), named by its edges: `G0` (`ww` only),
`G1c` (`ww` and `wr`), `G-single` (exactly one `rw`), `G2-item` (more than one `rw`); a cycle
that needs an `rt` edge takes the suffix `-realtime`.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

N = TypeVar("N", int, str)  # a graph's node: a transaction's index, or a name

# The consistency models --consistency-models accepts, each with the anomalies it prohibits
# (`010` §2, Adya's definitions; strict serializability adds real-time order, `010` §5.1;
# a lost update, `010` §7, is ruled out from snapshot isolation up, as Elle's models rule it).
_RC = ("G0", "G1a", "G1b", "G1c")
_SI = (*_RC, "G-single", "lost-update")
_SER = (*_SI, "G2-item")
PROHIBITS: dict[str, tuple[str, ...]] = {
    "read-uncommitted": ("G0",),
    "read-committed": _RC,
    "snapshot-isolation": _SI,
    "serializable": _SER,
    "strict-serializable": (*_SER, *(f"{a}-realtime" for a in ("G0", "G1c", "G-single",
                                                               "G2-item"))),
}
DEFAULT_MODELS = ("strict-serializable",)  # Maelstrom's default
# Anomalies that no model allows: the history itself is broken.
ALWAYS = ("incompatible-order", "duplicate-elements", "dirty-update", "internal",
          "garbage-read", "cyclic-versions")
MAX_EXAMPLES = 5
MAX_SEARCHES = 200  # cycle searches per component and anomaly class


@dataclass
class Txn:
    """One transaction as the client saw it: `type` ok, fail or info; `mops` the completed
    micro-operations for ok (reads with their values), the requested ones otherwise."""

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


def hashable(v: Any) -> Any:
    """A value as a dictionary key (lists and maps as their JSON)."""
    return json.dumps(v, sort_keys=True) if isinstance(v, list | dict) else v


def is_txn_of(fs: tuple[str, ...]) -> Callable[[Any], bool]:
    """Whether a value is a list of micro-operations `[f, k, v]` with f one of `fs`."""
    def ok(txn: Any) -> bool:
        return isinstance(txn, list) and all(
            isinstance(m, list) and len(m) == 3 and m[0] in fs for m in txn)
    return ok


def prohibited(models: tuple[str, ...]) -> set[str]:
    """The anomaly types that fail a history checked against `models`."""
    return set(ALWAYS).union(*(PROHIBITS[m] for m in models))


def judge(txns: list[Txn], graph: Graph, found: dict[str, list[Any]],
          models: tuple[str, ...]) -> dict[str, Any]:
    """Elle's result map from a workload's edges and direct anomalies: `valid?` (no anomaly
    that a model of `models` prohibits, and none of ALWAYS), `anomaly-types` (every type
    found), `anomalies` (type -> examples, cycles with their steps), `not` (the checked
    models the anomalies rule out). With `strict-serializable` `rt` edges join the graph
    first."""
    if "strict-serializable" in models:
        _realtime_edges([t for t in txns if t.type == "ok"], graph)
    by_index = {t.index: t for t in txns}
    for kind, cycle in _cycles(graph):
        found[kind].append({"cycle": [by_index[i].label() for i, _, _ in cycle],
                            "steps": [{"type": e, "key": k} for _, e, k in cycle]})
    bad = sorted(k for k in found if k in prohibited(models))
    return {"valid?": not bad, "anomaly-types": sorted(found),
            "anomalies": {k: v[:MAX_EXAMPLES] for k, v in sorted(found.items())},
            "not": sorted(m for m in PROHIBITS if set(found) & set(PROHIBITS[m])
                          or set(found) & set(ALWAYS))}


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


def txns_of(ops: list[Any], is_txn: Callable[[Any], bool]) -> tuple[list[Txn], int]:
    """The `txn` operations of a Maelstrom history (analysis/maelstrom.py `Operation`) as
    transactions, and how many were not lists of the workload's micro-operations (`is_txn`;
    left out)."""
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
