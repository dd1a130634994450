"""The checker suite's second pass (NodeChecks, after analysis/checks_mid.py): each node's
first deliveries (its first fnl of each mid, by ordinal `i`) and sends go through numpy/Arrow
once, after one shuffle by node, for total order against the consensus order, FIFO and causal
order.
"""

from __future__ import annotations

import bisect
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analysis.checks_mid import FNL, MAX_EXAMPLES, SEND

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


def _fifo(sender: pa.Array, n: np.ndarray,
          mid_arr: pa.Array) -> tuple[np.ndarray, list[str | None]]:
    """Rows (in delivery order) whose number is below an earlier one of the same sender, and
    for the first FIFO_EXAMPLES of them the mid of that earlier maximum (ties: larger mid)."""
    k = len(n)
    late = np.zeros(k, dtype=bool)
    after: list[str | None] = [None] * k
    ok = n >= 0
    if k < 2 or not ok.any():
        return late, after
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
    bad = prev > key
    late[order[bad]] = True
    for row in np.flatnonzero(late)[:FIFO_EXAMPLES].tolist():
        earlier = np.flatnonzero(ok[:row] & (codes[:row] == codes[row]))
        top = earlier[n[earlier] == n[earlier].max()]
        after[row] = max(str(mid_arr[int(j)].as_py()) for j in top)
    return late, after


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
    `max_pairs` pairs for the driver to judge, analysis/checks_order.py), FIFO violations and
    causal ones. Records of the first pass go through untouched."""

    def __init__(self, max_pairs: int) -> None:
        self.max_pairs = max_pairs

    def __call__(self, batches: Any) -> Any:
        batches = list(batches)
        if not batches or not sum(b.num_rows for b in batches):
            return
        table = pa.Table.from_batches(batches)
        rec = table.column("rec")
        passed = rec.filter(rec.is_valid())
        recs: list[dict[str, Any]] = []
        rows = table.filter(rec.is_null())
        node = rows.column("node")
        for name in pc.unique(node).to_pylist():
            recs += self.node(str(name), rows.filter(pc.equal(node, name)))
        out = pa.concat_arrays([passed.combine_chunks(), pa.array(
            [json.dumps(r, separators=(",", ":")) for r in recs], pa.string())])
        yield pa.RecordBatch.from_arrays([out], names=["rec"])

    def node(self, name: str, table: pa.Table) -> list[dict[str, Any]]:
        e = table.column("e").to_numpy(zero_copy_only=False)
        d = table.filter(pa.array(e == FNL))
        d = d.take(pa.array(np.argsort(d.column("i").to_numpy(), kind="stable")))
        s = table.filter(pa.array(e == SEND))
        n = d.num_rows
        d_mid = d.column("mid").combine_chunks()
        d_i, d_t = d.column("i").to_numpy(), d.column("t").to_numpy()
        recs: list[dict[str, Any]] = []

        # FIFO per sender, over the node's first deliveries in delivery order.
        sender, num = _sender_n(d_mid)
        late, after = _fifo(sender, num, d_mid)
        bad = np.flatnonzero(late)
        if len(bad):
            recs.append({"r": "fifo_n", "node": name, "n": len(bad)})
            for k in bad[:FIFO_EXAMPLES].tolist():
                recs.append({"r": "fifo", "node": name, "sender": sender[k].as_py(),
                             "mid": d_mid[k].as_py(), "after": after[k], "i": int(d_i[k]),
                             "t": int(d_t[k])})

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

        # Causal: a send ordered before the latest-ordered message delivered before it.
        ev_i = np.r_[d_i, s.column("i").to_numpy()]
        order = np.argsort(ev_i, kind="stable")
        size = len(order)
        is_d = order < n
        ranks = rank[order]
        key = np.where(is_d, ranks * (size + 1) + np.arange(size), -1)
        prev = np.r_[-1, np.maximum.accumulate(key)[:-1]] if size else key
        hit = np.flatnonzero(~is_d & (prev >= 0) & (ranks < prev // (size + 1)))
        if len(hit):
            recs.append({"r": "causal_n", "n": len(hit)})
            for k in hit[:MAX_EXAMPLES].tolist():
                latest = int(order[prev[k] % (size + 1)])
                recs.append({"r": "causal", "node": name, "i": int(ev_i[order[k]]),
                             "mid": mids[int(order[k])].as_py(),
                             "latest_mid": mids[latest].as_py()})
        return recs
