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
(analysis/checks.py: the first pass picks each message's earliest send and each process's
first deliveries and hands them, the message named by an integer id, to one task of the
per-node pass, CausalRows; analysis/judge.py has every row in hand, causal_records).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analysis.checks_mid import FNL, MAX_EXAMPLES, SEND, group_starts


class CausalRows:
    """The causal pass's rows as the first pass emits them (analysis/checks_mid.py MID_ROWS
    with `holders` null: first deliveries of sent messages and each message's earliest send,
    the message named by its id in `gt`, the send also by its mid), read batch by batch into
    the few columns the pass needs; `records` judges them."""

    def __init__(self) -> None:
        self.mid: list[pa.Array] = []
        self.cols: dict[str, list[np.ndarray]] = {"p": [], "i": [], "t": [], "e": [], "gt": []}

    def add(self, batch: pa.RecordBatch) -> None:
        e = batch.column("e").to_numpy(zero_copy_only=False)
        self.mid.append(batch.column("mid").filter(pa.array(e == SEND)))
        for name, out in self.cols.items():  # copies: the batch's buffers can go
            out.append(np.array(batch.column(name).to_numpy(zero_copy_only=False)))

    def records(self, names: list[str], max_late: int) -> list[dict[str, Any]]:
        """causal_records over the rows added, `p` indexing the sorted process `names`."""
        if not self.mid:
            return []
        # One column at a time, each column's batches dropped once joined.
        cols = {}
        for k in list(self.cols):
            cols[k] = np.concatenate(self.cols.pop(k))
        self.cols = {k: [] for k in cols}
        mids = pa.concat_arrays(self.mid)
        self.mid = []
        e, ids = cols.pop("e"), cols.pop("gt")
        # Codes: each message's rank among the sends' ids (one send per sent message, and
        # every delivery here is of a sent message).
        sends = np.flatnonzero(e == SEND)
        by_id = np.argsort(ids[sends], kind="stable")
        mids = mids.take(pa.array(by_id))
        mid = np.searchsorted(ids[sends][by_id], ids)
        del ids, by_id, sends
        return _causal(e, cols["p"], sorted(names), mid, mids,
                       cols["i"].astype(np.int64, copy=False),
                       cols["t"].astype(np.int64, copy=False), max_late, firsts=True)


def causal_records(rows: pa.Table, max_late: int) -> list[dict[str, Any]]:
    """Causal-order records from check_input rows (node = process, mid, i, t, e): every send
    and fnl (other kinds are ignored). `max_late` caps the late mids listed per process."""
    e = rows["e"].to_numpy(zero_copy_only=False)
    keep = (e == FNL) | (e == SEND)
    if not keep.any():
        return []
    if not keep.all():
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
    return _causal(e, proc, names, mid, mids, i, t, max_late, firsts=False)


def _causal(e: np.ndarray, proc: np.ndarray, names: list[str], mid: np.ndarray,
            mids: pa.Array, i: np.ndarray, t: np.ndarray, max_late: int,
            firsts: bool) -> list[dict[str, Any]]:
    """causal_records over coded rows: `proc` indexes the sorted process `names`, `mid` the
    dictionary `mids`. With `firsts` the rows are already each sent message's earliest send
    and each process's first deliveries of sent messages (the first pass chose them, by the
    same rules as here), so the choosing sorts are skipped."""
    m_count = len(mids)

    # The send of each message: its earliest (then by process name), as the first pass.
    s_rows = np.flatnonzero(e == SEND)
    if not firsts:
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
    if not firsts:
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


# Rounds of _stamps' vectorized fixpoint before it replays the events one by one instead
# (each round carries the causal past one more hop through a process that delivered a
# message without its sender's clock having reached the others; runs of the testbed settle
# in two or three).
STAMP_ROUNDS = 32
# Deliveries compared with their sends at a time in _stamps (bounds its temporaries).
MERGE_SLICE = 4_000_000


def _stamps(s_rows: np.ndarray, f_rows: np.ndarray, proc: np.ndarray, mid: np.ndarray,
            i: np.ndarray, t: np.ndarray, stream: np.ndarray, k_of: np.ndarray,
            n_procs: int, n_streams: int, m_count: int) -> np.ndarray:
    """Each message's vector clock (its causal past per stream, itself included), from the
    sends and first deliveries replayed in true time.

    A process's clock changes only at its own events, in its log order, so a stamp is the
    running maximum, along its sender's events up to the send, of its own sends' indices and
    the stamps of the messages it delivered -- those whose send comes before the delivery in
    the replay order (true time made monotone per process, then process, then ordinal).
    That is a fixpoint, found one stream (column) at a time with whole-array passes: start
    from each message's own index and repeat until no stamp grows (the stamps only grow, and
    a round adds one more hop of causal past). Past STAMP_ROUNDS the events are replayed one
    by one (_replay), which gives the same stamps."""
    rows = np.r_[s_rows, f_rows]
    n_s = len(s_rows)
    p_rows, i_rows = proc[rows], i[rows]
    by_proc = np.lexsort((i_rows, p_rows))
    when = t[rows][by_proc]
    starts = group_starts(p_rows[by_proc])
    for a, b in zip(starts.tolist(), np.r_[starts[1:], len(by_proc)].tolist(), strict=True):
        when[a:b] = np.maximum.accumulate(when[a:b])
    t_eff = np.empty(len(rows), dtype=np.int64)
    t_eff[by_proc] = when
    m_rows = mid[rows]
    # Where each message's send is among `rows` (every sent message has exactly one).
    send_at = np.full(m_count, -1, dtype=np.int64)
    send_at[m_rows[:n_s]] = np.arange(n_s)
    # A delivery merges its message's stamp when the send comes first in the replay order:
    # (t_eff, process, ordinal, position in `rows`); a slice of the deliveries at a time,
    # so that the comparison's temporaries stay small however long the run.
    merges = np.zeros(len(rows) - n_s, dtype=bool)
    for lo in range(n_s, len(rows), MERGE_SLICE):
        d = np.arange(lo, min(lo + MERGE_SLICE, len(rows)))
        b = send_at[m_rows[d]]
        ok = b >= 0
        b = np.maximum(b, 0)
        ta, tb = t_eff[d], t_eff[b]
        pa_, pb = p_rows[d], p_rows[b]
        ia, ib = i_rows[d], i_rows[b]
        merges[lo - n_s:lo - n_s + len(d)] = ok & ((ta > tb) | ((ta == tb) & (
            (pa_ > pb) | ((pa_ == pb) & ((ia > ib) | ((ia == ib) & (d > b)))))))
    del t_eff, p_rows, i_rows, send_at
    # The events in process order; the running maximum is taken per process (segment).
    seq_m = m_rows[by_proc].astype(np.int32 if m_count < 2**31 else np.int64)
    del m_rows
    seq_send = by_proc < n_s
    seq_merge = np.zeros(len(rows), dtype=bool)
    seq_merge[~seq_send] = merges[by_proc[~seq_send] - n_s]
    del merges, by_proc
    segments = list(zip(starts.tolist(), np.r_[starts[1:], len(rows)].tolist(), strict=True))
    # Stamps are send indices: they fit 32 bits unless a run sends 2**31 messages.
    small = np.int32 if int(k_of.max(initial=0)) < 2**31 - 1 else np.int64
    k_small = k_of.astype(small)
    send_pos = np.flatnonzero(seq_send)
    send_m = seq_m[send_pos]
    stamps = np.zeros((m_count, n_streams), dtype=small)
    for s in range(n_streams):
        own = np.where(seq_send & (stream[seq_m] == s), k_small[seq_m], 0).astype(small)
        col = np.zeros(m_count, dtype=small)
        col[send_m] = own[send_pos]
        clock = np.empty_like(own)
        for _ in range(STAMP_ROUNDS):
            value = np.maximum(own, np.where(seq_merge, col[seq_m], 0).astype(small))
            for a, b_ in segments:
                np.maximum.accumulate(value[a:b_], out=clock[a:b_])
            new = col.copy()
            new[send_m] = clock[send_pos]
            if np.array_equal(new, col):
                break
            col = new
        else:
            return _replay(s_rows, f_rows, proc, mid, i, t, stream, k_of, n_procs, n_streams,
                           m_count)
        stamps[:, s] = col
    return stamps


def _replay(s_rows: np.ndarray, f_rows: np.ndarray, proc: np.ndarray, mid: np.ndarray,
            i: np.ndarray, t: np.ndarray, stream: np.ndarray, k_of: np.ndarray,
            n_procs: int, n_streams: int, m_count: int) -> np.ndarray:
    """_stamps by replaying the sends and first deliveries one by one in true time."""
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
