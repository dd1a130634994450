"""Optimistic total order metrics from the delivery logs (000 sec. 2.2; 003 sec. 5).

- accuracy: the share of messages whose optimistic position at a node equals their final
  position there. A message's position is its rank among that node's `opt` events, or among its
  `fnl` events, both ordered by the per-node ordinal `i`; messages lacking either are not
  counted. This is the "ratio of correctly ordered optimistic deliveries" 000 sec. 2.2 trades
  against the cost of a mistake.
- window: the optimistic window, fnl `t` minus opt `t` of the same message at a node (000 sec.
  2.2: the time the application can work ahead).
- latency: optimistic delivery latency, opt `t` minus the origin's send `t` (003's delta).
- local_order: the Local Order property -- no process opt-delivers a message after having
  fnl-delivered it; a violation is an (node, mid) whose opt comes after its fnl by `i`.

Times are true time (`t`), so they are real durations whatever the nodes' clocks did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analysis.checks_mid import group_starts, host_of, process_names

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from analysis.overview import Overview

QUANTILES = (0.5, 0.95, 0.99)
EXAMPLES = 5
_NS_PER_MS = 1e6
# The events the metrics read (Spark collects only these rows: analysis/job.py).
COLUMNS = ("node", "inc", "ev", "mid", "i", "t")


def _quantiles(values: np.ndarray) -> list[float]:
    """Spark SQL `percentile` (exact, linear between the two closest ranks) at QUANTILES."""
    v = np.sort(values)
    out = []
    for q in QUANTILES:
        pos = (len(v) - 1) * q
        lo = int(np.floor(pos))
        hi = int(np.ceil(pos))
        out.append(float(v[lo]) if lo == hi else
                   float(v[lo] + (pos - lo) * (v[hi] - v[lo])))
    return out


def _stats(values: np.ndarray) -> dict[str, Any]:
    if not len(values):
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None, "max_ms": None, "count": 0}
    qs = _quantiles(values)
    return {"p50_ms": qs[0], "p95_ms": qs[1], "p99_ms": qs[2], "max_ms": float(values.max()),
            "count": int(len(values))}


def _firsts(node: np.ndarray, mid: np.ndarray, i: np.ndarray, t: np.ndarray,
            rows: np.ndarray) -> dict[str, np.ndarray]:
    """Per (node, mid) among `rows`: the first event's ordinal and time, the last ordinal, and
    the rank of the first among the node's (by ordinal, from 1)."""
    if not len(rows):
        empty = np.zeros(0, dtype=np.int64)
        return {k: empty for k in ("node", "mid", "i", "t", "last_i", "pos")}
    rows = rows[np.lexsort((i[rows], mid[rows], node[rows]))]
    starts = group_starts(node[rows] * (int(mid.max(initial=0)) + 1) + mid[rows])
    ends = np.r_[starts[1:], len(rows)] - 1
    first, last = rows[starts], rows[ends]
    g_node, g_mid, g_i = node[first], mid[first], i[first]
    by_node = np.lexsort((g_i, g_node))
    rank = np.empty(len(first), dtype=np.int64)
    n_start = group_starts(g_node[by_node])
    sizes = np.diff(np.r_[n_start, len(by_node)])
    rank[by_node] = np.arange(len(by_node)) - np.repeat(n_start, sizes) + 1
    return {"node": g_node, "mid": g_mid, "i": g_i, "t": t[first], "last_i": i[last],
            "pos": rank}


def optimistic_metrics(events: DataFrame | pa.Table) -> dict[str, Any]:
    """Accuracy, optimistic window, optimistic latency and the Local Order check.

    `events` has the delivery-log columns (analysis/ingest.py ARROW_SCHEMA), as an Arrow
    table or a Spark DataFrame (whose opt, fnl and send rows are collected: one
    implementation serves the Spark job and the in-process judge). Returns::

        {"accuracy": {"all": float | None,
                      "per_node": {node: {"accuracy": float, "matched": int, "count": int}}},
         "window":   {"all": STATS, "per_node": {node: STATS}},
         "latency":  {"all": STATS, "per_node": {node: STATS}},
         "local_order": {"violations": int,
                         "examples": [{"node", "mid", "opt_i", "fnl_i"}, ...]}}

    STATS is {"p50_ms", "p95_ms", "p99_ms", "max_ms", "count"} (None values when count is 0).
    Only nodes with both opt and fnl deliveries appear under accuracy; only nodes with opt
    deliveries under window and latency. Accuracy "all" pools every node's messages. Up to 5
    Local Order examples are listed, ordered by node and opt ordinal.
    """
    if not isinstance(events, pa.Table):
        from pyspark.sql import functions as F

        events = (events.filter(F.col("ev").isin("opt", "fnl", "send") & F.col("mid")
                                .isNotNull()).select(*COLUMNS).toArrow())
    elif "inc" not in events.column_names:
        events = events.append_column("inc", pa.nulls(events.num_rows, pa.int64()))
    table = events.filter(pc.and_(
        pc.is_valid(events["mid"]), pc.is_in(events["ev"], value_set=pa.array(
            ["opt", "fnl", "send"]))))
    # Deliveries are per process (a restarted host's incarnation is a new one, 000 sec.
    # 2.2): positions, matches and Local Order within one; per_node pools a host's.
    procs = process_names(table["node"], table["inc"])
    node_d = pc.dictionary_encode(procs.combine_chunks() if isinstance(procs, pa.ChunkedArray)
                                  else procs)
    mid_d = pc.dictionary_encode(table["mid"].combine_chunks())
    node = node_d.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    mid = mid_d.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    names = node_d.dictionary.to_pylist()
    hosts = sorted({host_of(n) for n in names})
    host_code = np.array([hosts.index(host_of(n)) for n in names], dtype=np.int64)
    mids = mid_d.dictionary
    ev = table["ev"].combine_chunks()
    i = table["i"].to_numpy().astype(np.int64)
    t = table["t"].to_numpy().astype(np.int64)
    kinds = {k: np.flatnonzero(pc.equal(ev, k).to_numpy(zero_copy_only=False))
             for k in ("opt", "fnl", "send")}
    opt = _firsts(node, mid, i, t, kinds["opt"])
    fnl = _firsts(node, mid, i, t, kinds["fnl"])
    send_t = np.full(len(mids), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(send_t, mid[kinds["send"]], t[kinds["send"]])
    has_send = send_t != np.iinfo(np.int64).max

    # Join opt and fnl firsts on (node, mid).
    width = len(mids) + 1
    o_key, f_key = opt["node"] * width + opt["mid"], fnl["node"] * width + fnl["mid"]
    f_order = np.argsort(f_key, kind="stable")
    at = np.searchsorted(f_key[f_order], o_key)
    at_c = np.minimum(at, max(len(f_key) - 1, 0))
    both = (at < len(f_key)) & (f_key[f_order][at_c] == o_key) if len(f_key) else \
        np.zeros(len(o_key), dtype=bool)
    f_row = f_order[at_c] if len(f_key) else np.zeros(len(o_key), dtype=np.int64)
    ob = np.flatnonzero(both)
    fb = f_row[ob]
    match = opt["pos"][ob] == fnl["pos"][fb]
    late = opt["last_i"][ob] > fnl["i"][fb]
    window = (fnl["t"][fb] - opt["t"][ob]) / _NS_PER_MS
    lat_rows = np.flatnonzero(has_send[opt["mid"]])
    latency = (opt["t"][lat_rows] - send_t[opt["mid"][lat_rows]]) / _NS_PER_MS
    b_proc = opt["node"][ob]
    b_node = host_code[b_proc] if len(b_proc) else b_proc
    l_node = host_code[opt["node"][lat_rows]] if len(lat_rows) else lat_rows

    count = len(ob)
    result: dict[str, Any] = {
        "accuracy": {"all": int(match.sum()) / count if count else None, "per_node": {}},
        "window": {"all": _stats(window), "per_node": {}},
        "latency": {"all": _stats(latency), "per_node": {}},
        "local_order": {"violations": int(late.sum()), "examples": []},
    }
    examples: list[dict[str, Any]] = []
    for code, name in enumerate(hosts):
        mine = b_node == code
        n = int(mine.sum())
        if n:
            matched = int(match[mine].sum())
            result["accuracy"]["per_node"][name] = {"accuracy": matched / n,
                                                    "matched": matched, "count": n}
        lat_mine = l_node == code
        if n or lat_mine.any():
            result["window"]["per_node"][name] = _stats(window[mine])
            result["latency"]["per_node"][name] = _stats(latency[lat_mine])
    for code in sorted(range(len(names)), key=lambda c: names[c]):
        bad = np.flatnonzero((b_proc == code) & late)
        found = sorted((int(opt["last_i"][ob[k]]), mids[int(opt["mid"][ob[k]])].as_py(),
                        int(fnl["i"][fb[k]])) for k in bad.tolist())
        examples += [{"node": names[code], "mid": m, "opt_i": oi, "fnl_i": fi}
                     for oi, m, fi in found]
    result["local_order"]["examples"] = examples[:EXAMPLES]
    return result


def optimistic_section(events: DataFrame | pa.Table, view: Overview | None = None
                       ) -> dict[str, Any]:
    """The summary's optimistic delivery metrics and the Local Order check, for runs that
    opt-deliver (empty otherwise); either driver. Whether a DataFrame's run opt-delivers
    comes from `view`, its Overview, when given (else one Spark job)."""
    if isinstance(events, pa.Table):
        if not pc.any(pc.equal(events["ev"], "opt")).as_py():
            return {}
    elif view is not None:
        if not view.total("opt"):
            return {}
    elif events.filter(events.ev == "opt").limit(1).count() == 0:
        return {}
    opt = optimistic_metrics(events)
    return {"optimistic": {k: v for k, v in opt.items() if k != "local_order"},
            "local_order": opt["local_order"]}
