"""Causal order (002 "Causal ordering") by happened-before, with vector clocks over send and fnl.

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
    the few columns the pass needs, each in the smallest integer type that holds it;
    `records` judges them."""

    def __init__(self) -> None:
        self.mid: list[pa.Array] = []
        self.cols: dict[str, list[np.ndarray]] = {"p": [], "i": [], "t": [], "send": [],
                                                  "gt": []}

    def add(self, batch: pa.RecordBatch) -> None:
        send = batch.column("e").to_numpy(zero_copy_only=False) == SEND
        self.mid.append(batch.column("mid").filter(pa.array(send)))
        self.cols["send"].append(send)
        for name in ("p", "i", "t", "gt"):  # copies: the batch's buffers can go
            self.cols[name].append(_narrow(batch.column(name).to_numpy(zero_copy_only=False)))

    def records(self, names: list[str], max_late: int) -> list[dict[str, Any]]:
        """causal_records over the rows added, `p` indexing the sorted process `names`."""
        if not self.mid:
            return []
        cols, self.cols = self.cols, {k: [] for k in self.cols}
        mids = pa.concat_arrays(self.mid)
        self.mid = []
        send = np.concatenate(cols.pop("send"))
        # Codes: each message's rank among the sends' ids (one send per sent message, and
        # every delivery here is of a sent message); batch by batch, each id batch dropped.
        ids = np.concatenate([g[s] for g, s in zip(cols["gt"], _split(send, cols["gt"]),
                                                   strict=True)]).astype(np.int64)
        by_id = np.argsort(ids, kind="stable")
        mids = mids.take(pa.array(by_id))
        ids = ids[by_id]
        del by_id
        code_t = np.int32 if len(ids) < 2**31 else np.int64
        gts = cols.pop("gt")
        codes = []
        while gts:
            codes.append(np.searchsorted(ids, gts.pop(0)).astype(code_t))
        del ids
        mid = np.concatenate(codes)
        del codes
        proc = _concat(cols.pop("p"))
        return _causal_rows(send, proc, sorted(names), mid, mids, cols, max_late)


def _narrow(a: np.ndarray) -> np.ndarray:
    """A copy of integer array `a` as int32 when its values fit, else as int64."""
    if len(a) and (int(a.min()) < -2**31 or int(a.max()) >= 2**31):
        return np.array(a, dtype=np.int64)
    return np.array(a, dtype=np.int32)


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    """np.concatenate of batches of int32/int64, in the widest of their types."""
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


def _split(send: np.ndarray, like: list[np.ndarray]) -> list[np.ndarray]:
    """`send` cut into pieces as long as the arrays of `like`."""
    bounds = np.cumsum([len(a) for a in like])[:-1]
    return np.split(send, bounds)


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
    # First deliveries of sent messages, per (process, mid), by ordinal.
    f_rows = np.flatnonzero((e == FNL) & sent[mid])
    if not firsts:
        f_rows = f_rows[np.lexsort((i[f_rows], mid[f_rows], proc[f_rows]))]
        f_rows = f_rows[group_starts(proc[f_rows] * m_count + mid[f_rows])]
    rows = np.r_[s_rows, f_rows]
    send = np.r_[np.ones(len(s_rows), dtype=bool), np.zeros(len(f_rows), dtype=bool)]
    return _causal_rows(send, proc[rows], names, mid[rows], mids,
                        {"i": [i[rows]], "t": [t[rows]]}, max_late)


def _process_order(send: np.ndarray, proc: np.ndarray, i: np.ndarray,
                   n_procs: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows in process order (by process, then ordinal, a send before a delivery at the
    same ordinal, then row order), and where each process's rows start in it (n_procs + 1
    bounds). A sort per process: no sort key or index spans every row at once in 64 bits."""
    counts = np.bincount(proc, minlength=n_procs)
    starts = np.r_[0, np.cumsum(counts)]
    order = np.empty(len(proc), dtype=np.int32 if len(proc) < 2**31 else np.int64)
    for c in np.flatnonzero(counts).tolist():
        pos = np.flatnonzero(proc == c)
        order[starts[c]:starts[c + 1]] = pos[np.lexsort((~send[pos], i[pos]))]
    return order, starts


def _causal_rows(send: np.ndarray, proc: np.ndarray, names: list[str], mid: np.ndarray,
                 mids: pa.Array, cols: dict[str, list[np.ndarray]],
                 max_late: int) -> list[dict[str, Any]]:
    """The pass over chosen rows (every sent message's earliest send, `send` true, and each
    process's first deliveries of sent messages), in process order from here on; `cols`
    holds the ordinals `i` and times `t` as batches (each dropped once reordered)."""
    m_count = len(mids)
    i = _concat(cols.pop("i"))
    order, starts = _process_order(send, proc, i, len(names))
    del proc
    seq_i = i[order]
    del i
    seq_send = send[order]
    del send
    seq_m = mid[order]
    del mid
    t = _concat(cols.pop("t"))
    t_eff = t[order]
    del t, order
    segments = [(a, b) for a, b in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True)]
    for a, b in segments:  # true time, made non-decreasing along each process's ordinals
        np.maximum.accumulate(t_eff[a:b], out=t_eff[a:b])

    # Streams: the sending processes; a message's index is its rank among its sender's sends.
    sp = np.flatnonzero(seq_send)
    sp_proc = np.searchsorted(starts, sp, side="right") - 1
    streams = np.unique(sp_proc)
    first = group_starts(sp_proc)
    sizes = np.diff(np.r_[first, len(sp)])
    stream = np.full(m_count, -1, dtype=np.int32)
    k_of = np.zeros(m_count, dtype=np.int32 if len(sp) < 2**31 - 1 else np.int64)
    stream[seq_m[sp]] = np.searchsorted(streams, sp_proc)
    k_of[seq_m[sp]] = np.arange(len(sp)) - np.repeat(first, sizes) + 1
    del sp, sp_proc, first, sizes

    stamps = _stamps_seq(seq_m, seq_send, t_eff, seq_i, segments, stream, k_of,
                         len(streams), m_count)
    del t_eff

    recs: list[dict[str, Any]] = []
    stream_names = [names[int(p)] for p in streams.tolist()]
    for c, (a, b) in enumerate(segments):
        mine = a + np.flatnonzero(~seq_send[a:b])
        if len(mine):
            recs += _judge(names[c], seq_m[mine], seq_i[mine].astype(np.int64), stamps,
                           stream, k_of, mids, stream_names, max_late)
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
    sends `s_rows` and first deliveries `f_rows` replayed in true time: _stamps_seq over
    them in process order."""
    rows = np.r_[s_rows, f_rows]
    send = np.r_[np.ones(len(s_rows), dtype=bool), np.zeros(len(f_rows), dtype=bool)]
    order, starts = _process_order(send, proc[rows], i[rows], n_procs)
    rows = rows[order]
    t_eff = t[rows].astype(np.int64)
    segments = list(zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True))
    for a, b in segments:
        np.maximum.accumulate(t_eff[a:b], out=t_eff[a:b])
    return _stamps_seq(mid[rows], send[order], t_eff, i[rows], segments, stream, k_of,
                       n_streams, m_count)


def _stamps_seq(seq_m: np.ndarray, seq_send: np.ndarray, t_eff: np.ndarray,
                seq_i: np.ndarray, segments: list[tuple[int, int]], stream: np.ndarray,
                k_of: np.ndarray, n_streams: int, m_count: int) -> np.ndarray:
    """Each message's vector clock from the sends and first deliveries in process order
    (`segments`: each process's rows, by ordinal, a send before a delivery at the same
    ordinal; `t_eff` true time made non-decreasing along them).

    A process's clock changes only at its own events, in its log order, so a stamp is the
    running maximum, along its sender's events up to the send, of its own sends' indices and
    the stamps of the messages it delivered -- those whose send comes before the delivery in
    the replay order (t_eff, then process, then ordinal, then a send first: the position in
    process order breaks the ties). That is a fixpoint, found one stream (column) at a time
    and one process at a time with whole-array passes: start from each message's own index
    and repeat until no stamp grows (the stamps only grow, and a round adds one more hop of
    causal past). Past STAMP_ROUNDS the events are replayed one by one (_replay), which
    gives the same stamps."""
    n = len(seq_m)
    sp = np.flatnonzero(seq_send)
    send_m = seq_m[sp]
    # Where each message's send is (every sent message has exactly one).
    send_at = np.full(m_count, -1, dtype=np.int64)
    send_at[send_m] = sp
    # Rows whose message's stamp the clock does not take: sends, and deliveries that come
    # before their send in the replay order; a slice at a time (bounded temporaries).
    skip = np.ones(n, dtype=bool)
    for lo in range(0, n, MERGE_SLICE):
        hi = min(lo + MERGE_SLICE, n)
        b = send_at[seq_m[lo:hi]]
        ok = (b >= 0) & ~seq_send[lo:hi]
        b = np.maximum(b, 0)
        ta, tb = t_eff[lo:hi], t_eff[b]
        skip[lo:hi] = ~(ok & ((ta > tb) | ((ta == tb) & (np.arange(lo, hi) > b))))
    del send_at
    # Stamps are send indices: they fit 32 bits unless a run sends 2**31 messages.
    small = np.int32 if int(k_of.max(initial=0)) < 2**31 - 1 else np.int64
    seg_sends = [(int(np.searchsorted(sp, a)), int(np.searchsorted(sp, b)))
                 for a, b in segments]
    buf = np.empty(max((b - a for a, b in segments), default=0), dtype=small)
    send_stream = stream[send_m]
    stamps = np.zeros((m_count, n_streams), dtype=small)
    for s in range(n_streams):
        own = sp[send_stream == s]
        own_k = k_of[seq_m[own]].astype(small)
        col = np.zeros(m_count, dtype=small)
        col[seq_m[own]] = own_k
        own_in = [(int(np.searchsorted(own, a)), int(np.searchsorted(own, b)))
                  for a, b in segments]
        for _ in range(STAMP_ROUNDS):
            new = col.copy()
            for (a, b), (sa, sb), (oa, ob) in zip(segments, seg_sends, own_in, strict=True):
                value = buf[:b - a]
                np.take(col, seq_m[a:b], out=value)
                value[skip[a:b]] = 0
                value[own[oa:ob] - a] = own_k[oa:ob]
                np.maximum.accumulate(value, out=value)
                new[send_m[sa:sb]] = value[sp[sa:sb] - a]
            if np.array_equal(new, col):
                break
            col = new
        else:
            proc = np.repeat(np.arange(len(segments)), [b - a for a, b in segments])
            return _replay(sp, np.flatnonzero(~seq_send), proc, seq_m, seq_i, t_eff, stream,
                           k_of, len(segments), n_streams, m_count)
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
        # >= its index) was delivered before it: the earliest position per bound (bounds
        # past the largest index count as that index), then the earliest at any bound from
        # each index on -- a pass over the indices, no sort of the bounds.
        if len(ks):
            low, high = int(ks[0]), int(ks[-1])  # ks ascending
            held = bound >= low
            first_at = np.full(high - low + 1, np.iinfo(np.int64).max, dtype=np.int64)
            np.minimum.at(first_at, np.minimum(bound[held], high) - low, d_pos[held])
            suffix_min = np.minimum.accumulate(first_at[::-1])[::-1]
            late[rows[suffix_min[ks - low] < ps]] = True
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
