"""The checker suite's second pass (NodeChecks, after analysis/checks_mid.py): each node's
first deliveries (its first fnl of each mid, by ordinal `i`) and sends go through numpy/Arrow
once, after one shuffle by node, for total order against the consensus order and FIFO (causal
order needs every process's history at once: analysis/checks_causal.py).
"""

from __future__ import annotations

import bisect
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analysis.checks_causal import CausalRows
from analysis.checks_mid import FNL, SEND

# FIFO violations per node whose `fifo_after` is filled in: the checker shows at most this
# many examples, ordered by node then ordinal, so later ones are only counted.
FIFO_EXAMPLES = 10

def _sender_n(mids: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Sender name and message number of each mid (`n` -1 where the mid has no `:<n>`): the
    parts around the last colon, as the regex `^(.*):(\\d+)$` splits them (a split and a
    suffix match cost a quarter of that capturing regex)."""
    ok = pc.fill_null(pc.match_substring_regex(mids, r":\d+$"), False)
    parts = pc.split_pattern(pc.if_else(ok, mids, ":0"), ":", max_splits=1, reverse=True)
    sender = pc.if_else(ok, pc.list_element(parts, 0), pa.scalar(None, pa.string()))
    digits = pc.list_element(parts, 1)
    try:
        n = pc.cast(digits, pa.int64())
    except pa.ArrowInvalid:  # a number past 64 bits: not a message number
        n = pa.array([int(d) if len(d) < 19 else None for d in digits.to_pylist()], pa.int64())
    n = pc.if_else(ok, n, pa.scalar(None, pa.int64()))
    return sender, pc.fill_null(n, -1).to_numpy(zero_copy_only=False)


def _kept(values: list[int]) -> list[int]:
    """Positions of a longest strictly increasing subsequence of `values`, the one that keeps
    the earliest positions: every other position is a delivery that must move, and no fewer
    moves restore the order."""
    k = len(values)
    longest = [0] * k  # longest increasing run of values starting at each position
    tails: list[int] = []
    for pos in range(k - 1, -1, -1):
        x = -values[pos]
        j = bisect.bisect_left(tails, x)
        if j == len(tails):
            tails.append(x)
        else:
            tails[j] = x
        longest[pos] = j + 1
    need, last, kept = len(tails), None, []
    for pos in range(k):
        if need and longest[pos] == need and (last is None or values[pos] > last):
            kept.append(pos)
            last = values[pos]
            need -= 1
    return kept


def _fifo(sender: pa.Array, n: np.ndarray,
          mid_arr: pa.Array) -> tuple[np.ndarray, list[tuple[str | None, str | None]]]:
    """Rows (in delivery order) that must move to restore each sender's order -- the fewest:
    all rows off a longest increasing subsequence of the sender's numbers -- and for the first
    FIFO_EXAMPLES of them (the mid delivered before it with a larger number, the mid delivered
    after it with a smaller one), either possibly None. Only senders with a row below an
    earlier one (a running maximum, vectorized) are examined."""
    k = len(n)
    late = np.zeros(k, dtype=bool)
    shown: list[tuple[str | None, str | None]] = [(None, None)] * k
    ok = n >= 0
    if k < 2 or not ok.any():
        return late, shown
    codes = pc.dictionary_encode(sender).indices.to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(ok)
    order = rows[np.lexsort((rows, codes[rows]))]  # by sender, then delivery order
    seg = codes[order].astype(np.int64)
    _, n_rank = np.unique(n[order], return_inverse=True)
    key = seg * (len(order) + 1) + n_rank
    running = np.maximum.accumulate(key)
    prev = np.empty_like(running)
    prev[0] = -1
    prev[1:] = running[:-1]
    starts = np.ones(len(order), dtype=bool)
    starts[1:] = seg[1:] != seg[:-1]
    prev[starts] = -1
    for code in np.unique(seg[prev > key]).tolist():
        mine = order[seg == code]
        moved = np.ones(len(mine), dtype=bool)
        moved[_kept(n[mine].tolist())] = False
        late[mine[moved]] = True
    for row in np.flatnonzero(late)[:FIFO_EXAMPLES].tolist():
        same = ok & (codes == codes[row])
        earlier = np.flatnonzero(same[:row] & (n[:row] > n[row]))
        later = np.flatnonzero(same[row + 1:] & (n[row + 1:] < n[row])) + row + 1
        after = str(mid_arr[int(earlier[np.argmax(n[earlier])])].as_py()) if len(
            earlier) else None
        before = str(mid_arr[int(later[0])].as_py()) if len(later) else None
        shown[row] = (after, before)
    return late, shown


NODE_RECS = "rec string"


def consensus_ranks(gt: np.ndarray, mid: pa.Array) -> np.ndarray:
    """Dense ranks of the rows by the consensus order (gt, then mid): equal for the same
    message, and ordered as the global order g is (analysis/checks_order.py), so a node can
    compare messages without the global rank. Ties in gt (batched deliveries) are the only
    rows that need a string sort."""
    order = np.argsort(gt, kind="stable")
    g_sorted = gt[order]
    tie = np.r_[False, g_sorted[1:] == g_sorted[:-1]]
    tie[:-1] |= tie[1:]
    if tie.any():
        spots = np.flatnonzero(tie)
        rows = order[spots]
        sub = pa.table({"g": gt[rows], "m": mid.take(pa.array(rows))})
        order[spots] = rows[pc.sort_indices(
            sub, sort_keys=[("g", "ascending"), ("m", "ascending")]).to_numpy()]
    same = np.zeros(len(order), dtype=bool)
    if len(order) > 1:
        m_sorted = mid.take(pa.array(order))
        same[1:] = (gt[order][1:] == gt[order][:-1]) & pc.fill_null(
            pc.equal(m_sorted[1:], m_sorted[:-1]), False).to_numpy(zero_copy_only=False)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.cumsum(~same) - 1
    return rank


def inversions(r: np.ndarray, limit: int) -> tuple[int, list[int], list[int]]:
    """Pairs (x, y) of values, x < y, with y before x in `r`: the exact count, and the first
    `limit` pairs (in order of x's position, then y ascending)."""
    n = len(r)
    a_out: list[int] = []
    b_out: list[int] = []
    total = 0
    if n < 2:
        return total, a_out, b_out
    prefix_max = np.maximum.accumulate(r)
    suffix_min = np.minimum.accumulate(r[::-1])[::-1]
    # Only an element with a larger one before it or a smaller one after it takes part in
    # an inversion, so a clean node costs two vector passes and nothing else.
    involved = np.zeros(n, dtype=bool)
    involved[1:] |= prefix_max[:-1] > r[1:]
    involved[:-1] |= suffix_min[1:] < r[:-1]
    seen: list[int] = []
    for x in r[involved].tolist():
        k = bisect.bisect_right(seen, x)
        larger = seen[k:]
        total += len(larger)
        room = limit - len(a_out)
        if room > 0 and larger:
            a_out += [x] * min(room, len(larger))
            b_out += larger[:room]
        seen.insert(k, x)
    return total, a_out, b_out


class NodeChecks:
    """The checker suite's second pass (after analysis/checks_mid.py): each node's first
    deliveries and sends, in its own delivery order. Emits records: per node its delivery
    count and exact number of inverted pairs against the consensus order (with the first
    `max_pairs` pairs for the driver to judge, analysis/checks_order.py) and FIFO violations.
    Records of the first pass go through
    untouched. The causal pass's rows (`p` set: analysis/checks_mid.py MID_ROWS), which
    analysis/checks.py sends to a partition of their own, are judged here too
    (analysis/checks_causal.py), read batch by batch into their few columns."""

    def __init__(self, max_pairs: int, nodes: list[str]) -> None:
        self.max_pairs = max_pairs
        self.nodes = nodes  # the processes, in holder-bitmap order

    def __call__(self, batches: Any) -> Any:
        """The Spark task: the first pass's rows in as Arrow IPC streams
        (analysis/checks_mid.py MID_BLOBS), read one at a time."""
        split = self.split(b for batch in batches for blob in batch.column("blob")
                           for b in pa.ipc.open_stream(blob.as_buffer()))
        if split is None:
            return
        passed, recs = split
        out = pa.concat_arrays([passed.combine_chunks(), pa.array(
            [json.dumps(r, separators=(",", ":")) for r in recs], pa.string())])
        yield pa.RecordBatch.from_arrays([out], names=["rec"])

    def split(self, batches: Any) -> tuple[Any, list[dict[str, Any]]] | None:
        """(the first pass's records, passed through as JSON text; this pass's records as
        dicts of JSON values), None without rows. The in-process judge takes the dicts as
        they are (analysis/checks.py `table_records`); `__call__` serialises them for Spark."""
        kept: list[pa.RecordBatch] = []
        causal = CausalRows()
        for b in batches:
            # Causal rows are the only ones with neither holders nor a record.
            is_causal = pc.and_(b.column("holders").is_null(), b.column("rec").is_null())
            if pc.all(is_causal).as_py():  # (the causal partition: no copy)
                causal.add(b)
                continue
            if pc.any(is_causal).as_py():
                causal.add(b.filter(is_causal))
                b = b.filter(pc.invert(is_causal))
            if b.num_rows:
                kept.append(b)
        recs: list[dict[str, Any]] = causal.records(self.nodes, self.max_pairs)
        del causal
        if not kept:
            return (pa.chunked_array([], pa.string()), recs) if recs else None
        # A Spark task holds one process's rows: no copy unless records or other processes
        # are among them (every copy of a long run's process is gigabytes).
        rows = pa.Table.from_batches(kept)
        del kept
        rec = rows.column("rec")
        passed = rec.filter(rec.is_valid())
        if len(passed):
            rows = rows.filter(rec.is_null())
        p = rows.column("p")
        codes = pc.unique(p).to_pylist()
        for code in codes:
            recs += self.node(int(code), rows if len(codes) == 1 else
                              rows.filter(pc.equal(p, code)))
        return passed, recs

    def node(self, code: int, table: pa.Table) -> list[dict[str, Any]]:
        """The records of process `self.nodes[code]`, from its rows of the first pass."""
        name = self.nodes[code]
        e = table.column("e").to_numpy(zero_copy_only=False)
        d = table.filter(pa.array(e == FNL))
        d = d.take(pa.array(np.argsort(d.column("i").to_numpy(), kind="stable")))
        s = table.filter(pa.array(e == SEND))
        n = d.num_rows
        d_mid = d.column("mid").combine_chunks()
        d_i, d_t = d.column("i").to_numpy(), d.column("t").to_numpy()
        recs: list[dict[str, Any]] = []

        # FIFO per sender, over the node's first deliveries in delivery order.
        # The sender is the sending process (a restarted host's incarnation is a new one),
        # the number the mid's; a sender's order is its numbers' order.
        _, num = _sender_n(d_mid)
        sender = d.column("src").combine_chunks()
        late, shown = _fifo(sender, num, d_mid)
        bad = np.flatnonzero(late)
        if len(bad):
            recs.append({"r": "fifo_n", "node": name, "n": len(bad)})
            for k in bad[:FIFO_EXAMPLES].tolist():
                recs.append({"r": "fifo", "node": name,
                             "sender": self.nodes[sender[k].as_py()],
                             "mid": d_mid[k].as_py(), "after": shown[k][0],
                             "before": shown[k][1], "i": int(d_i[k]), "t": int(d_t[k])})

        # Total order: the node's order against the consensus order, by dense ranks.
        s_mid = s.column("mid").combine_chunks()
        mids = pa.concat_arrays([d_mid, s_mid])  # deliveries first, then sends
        gt = np.r_[d.column("gt").to_numpy(), s.column("gt").to_numpy()]
        rank = consensus_ranks(gt, mids)
        d_rank = rank[:n]
        total, xs, ys = inversions(d_rank, self.max_pairs)
        recs.append({"r": "node", "node": name, "firsts": n, "inv": total})
        if xs:
            row_of = np.full(int(d_rank.max()) + 1, -1, dtype=np.int64)
            row_of[d_rank] = np.arange(n)
            holders = d.column("holders").combine_chunks()
            for x, y in zip(row_of[xs].tolist(), row_of[ys].tolist(), strict=True):
                both = bytes(a & b for a, b in zip(holders[x].as_py(), holders[y].as_py(),
                                                   strict=True))
                recs.append({"r": "pair", "node": name, "a": d_mid[x].as_py(),
                             "b": d_mid[y].as_py(), "ga": int(gt[x]), "gb": int(gt[y]),
                             "h": both.hex()})

        return recs
