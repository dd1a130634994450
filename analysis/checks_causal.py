"""Causal order (002 L236-244) by happened-before, with vector clocks over send and fnl.

m1 -> m2 when the process that sent m2 had sent or fnl-delivered m1 before sending it, closed
transitively: m1 -> m2 -> m3 puts m1 in m3's causal past even at a node that never delivers
m2. A process's sends are ordered, so the causal past of a message restricted to one sending
process (a host's incarnation, analysis/checks_mid.py `process_names`) is a prefix of that
process's sends; a message's stamp is the vector of those prefix lengths, one entry per
sending process. Stamps come from one pass over every process's sends and first deliveries in
true-time order (`t`, then process, then ordinal): a send stamps the message with the
sender's clock, a delivery merges the message's stamp into the deliverer's clock.

Judged per delivering process, over its first deliveries in log order: a delivery is *early*
when a message of its causal past comes later at that process, and such a later predecessor
is *late*. Removing either kind leaves a causal order, so analysis/checks_order.py
`causal_order` reports the smaller count per process: the deliveries that must move (exactly
one for one misplaced delivery). Records as the other passes emit them (`causal_early_n`,
`causal`, `causal_late`), from one function both drivers call on the same rows
(analysis/checks.py: Spark collects the fnl and send rows of check_input, analysis/judge.py
has them in hand).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analysis.checks_mid import FNL, MAX_EXAMPLES, SEND, group_starts


def causal_records(rows: pa.Table, max_late: int) -> list[dict[str, Any]]:
    """Causal-order records from check_input rows (node = process, mid, i, t, e): every send
    and fnl (other kinds are ignored). `max_late` caps the late mids listed per process."""
    e = rows["e"].to_numpy(zero_copy_only=False)
    keep = (e == FNL) | (e == SEND)
    if not keep.any():
        return []
    rows = rows.filter(pa.array(keep))
    e = e[keep]
    procs = pc.dictionary_encode(rows["node"].combine_chunks())
    names = procs.dictionary.to_pylist()
    # Process codes in name order, so that ties sort by name.
    rank = np.argsort(np.argsort(np.array(names, dtype=object)))
    proc = rank[procs.indices.to_numpy(zero_copy_only=False)].astype(np.int64)
    names = sorted(names)
    mid_d = pc.dictionary_encode(rows["mid"].combine_chunks())
    mids: pa.Array = mid_d.dictionary
    mid = mid_d.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    i = rows["i"].to_numpy(zero_copy_only=False).astype(np.int64)
    t = rows["t"].to_numpy(zero_copy_only=False).astype(np.int64)
    m_count = len(mids)

    # The send of each message: its earliest (then by process name), as the first pass.
    s_rows = np.flatnonzero(e == SEND)
    s_rows = s_rows[np.lexsort((proc[s_rows], t[s_rows], mid[s_rows]))]
    s_rows = s_rows[group_starts(mid[s_rows])]
    if not len(s_rows):
        return []
    sent = np.zeros(m_count, dtype=bool)
    sent[mid[s_rows]] = True
    # Streams: the sending processes; a message's index is its rank among its sender's sends.
    streams, stream_of_row = np.unique(proc[s_rows], return_inverse=True)
    by_stream = np.lexsort((i[s_rows], stream_of_row))
    starts = group_starts(stream_of_row[by_stream])
    sizes = np.diff(np.r_[starts, len(by_stream)])
    index = np.empty(len(s_rows), dtype=np.int64)
    index[by_stream] = np.arange(len(by_stream)) - np.repeat(starts, sizes) + 1
    stream = np.full(m_count, -1, dtype=np.int64)
    k_of = np.zeros(m_count, dtype=np.int64)
    stream[mid[s_rows]] = stream_of_row
    k_of[mid[s_rows]] = index

    # First deliveries of sent messages, per (process, mid), by ordinal.
    f_rows = np.flatnonzero((e == FNL) & sent[mid])
    f_rows = f_rows[np.lexsort((i[f_rows], mid[f_rows], proc[f_rows]))]
    f_rows = f_rows[group_starts(proc[f_rows] * m_count + mid[f_rows])]

    stamps = _stamps(s_rows, f_rows, proc, mid, i, t, stream, k_of, len(names),
                     len(streams), m_count)

    recs: list[dict[str, Any]] = []
    f_by_proc = f_rows[np.lexsort((i[f_rows], proc[f_rows]))]
    bounds = group_starts(proc[f_by_proc])
    for b, end in zip(bounds.tolist(), np.r_[bounds[1:], len(f_by_proc)].tolist(),
                      strict=True):
        mine = f_by_proc[b:end]
        recs += _judge(names[int(proc[mine[0]])], mid[mine], i[mine], stamps, stream, k_of,
                       mids, [names[int(p)] for p in streams.tolist()], max_late)
    return recs


def _stamps(s_rows: np.ndarray, f_rows: np.ndarray, proc: np.ndarray, mid: np.ndarray,
            i: np.ndarray, t: np.ndarray, stream: np.ndarray, k_of: np.ndarray,
            n_procs: int, n_streams: int, m_count: int) -> np.ndarray:
    """Each message's vector clock (its causal past per stream, itself included), from the
    sends and first deliveries replayed in true time."""
    rows = np.r_[s_rows, f_rows]
    is_send = np.r_[np.ones(len(s_rows), dtype=bool), np.zeros(len(f_rows), dtype=bool)]
    # A process's own order is its log's (ordinal i); its events are placed among the
    # others' by true time, made non-decreasing along the ordinals (a log written with a
    # time going back keeps its order).
    by_proc = np.lexsort((i[rows], proc[rows]))
    when = t[rows][by_proc]
    starts = group_starts(proc[rows][by_proc])
    for a, b in zip(starts.tolist(), np.r_[starts[1:], len(by_proc)].tolist(), strict=True):
        when[a:b] = np.maximum.accumulate(when[a:b])
    t_eff = np.empty(len(rows), dtype=np.int64)
    t_eff[by_proc] = when
    order = np.lexsort((i[rows], proc[rows], t_eff))
    clock = np.zeros((n_procs, n_streams), dtype=np.int64)
    stamps = np.zeros((m_count, n_streams), dtype=np.int64)
    stamped = np.zeros(m_count, dtype=bool)
    for r, send in zip(rows[order].tolist(), is_send[order].tolist(), strict=True):
        p, m = int(proc[r]), int(mid[r])
        if send:
            s = int(stream[m])
            if clock[p, s] < k_of[m]:
                clock[p, s] = k_of[m]
            stamps[m] = clock[p]
            stamped[m] = True
        elif stamped[m]:
            np.maximum(clock[p], stamps[m], out=clock[p])
    return stamps


def _judge(name: str, d_mid: np.ndarray, d_pos: np.ndarray, stamps: np.ndarray,
           stream: np.ndarray, k_of: np.ndarray, mids: pa.Array, stream_names: list[str],
           max_late: int) -> list[dict[str, Any]]:
    """One process's early and late deliveries (in delivery order `d_pos`, its ordinals)."""
    n = len(d_mid)
    early = np.zeros(n, dtype=bool)
    dep = np.full(n, -1, dtype=np.int64)  # the latest-delivered predecessor of each early one
    dep_pos = np.full(n, -1, dtype=np.int64)
    late = np.zeros(n, dtype=bool)
    d_stream, d_k = stream[d_mid], k_of[d_mid]
    for s in np.unique(d_stream).tolist():
        rows = np.flatnonzero(d_stream == s)
        rows = rows[np.argsort(d_k[rows], kind="stable")]
        ks, ps = d_k[rows], d_pos[rows]
        best = np.maximum.accumulate(ps)
        best_at = np.maximum.accumulate(np.where(ps == best, np.arange(len(ps)), 0))
        bound = stamps[d_mid, s] - (d_stream == s)
        at = np.searchsorted(ks, bound, side="right") - 1
        has = at >= 0
        found = np.zeros(n, dtype=bool)
        found[has] = best[at[has]] > d_pos[has]
        better = found & (best[np.maximum(at, 0)] > dep_pos)
        dep[better] = rows[best_at[at[better]]]
        dep_pos[better] = best[at[better]]
        early |= found
        # A delivery of stream s is late when some message whose causal past holds it (bound
        # >= its index) was delivered before it.
        by_bound = np.argsort(bound, kind="stable")
        sorted_bound = bound[by_bound]
        suffix_min = np.minimum.accumulate(d_pos[by_bound][::-1])[::-1]
        j = np.searchsorted(sorted_bound, ks, side="left")
        inside = j < n
        late_here = np.zeros(len(rows), dtype=bool)
        late_here[inside] = suffix_min[j[inside]] < ps[inside]
        late[rows[late_here]] = True
    recs: list[dict[str, Any]] = []
    bad = np.flatnonzero(early)
    if not len(bad):
        return recs
    recs.append({"r": "causal_early_n", "node": name, "n": len(bad)})
    for k in bad[np.argsort(d_pos[bad], kind="stable")][:MAX_EXAMPLES].tolist():
        recs.append({"r": "causal", "node": name, "sender": stream_names[int(d_stream[k])],
                     "mid": mids[int(d_mid[k])].as_py(),
                     "before": mids[int(d_mid[int(dep[k])])].as_py(), "i": int(d_pos[k])})
    gone = np.flatnonzero(late)
    gone = gone[np.argsort(d_pos[gone], kind="stable")]
    capped = gone[:max_late]
    recs.append({"r": "causal_late", "node": name, "truncated": len(gone) > len(capped),
                 "mids": [mids[int(d_mid[k])].as_py() for k in capped.tolist()]})
    return recs
