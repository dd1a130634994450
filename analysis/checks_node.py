"""One pass per node over its fnl events: first deliveries, positions, copies and FIFO.

The checkers used to get these from several window sorts over all deliveries (one per
property); here each node's events go through numpy/Arrow once, after one shuffle by node.
Every row is a node's first fnl of a mid (by ordinal `i`) with `pos`, its rank at the node;
`copies` counts that node's fnl events of the mid and `all_i` lists their ordinals when there
is more than one (integrity's duplicates). `fifo_after` names the message a FIFO violation
was delivered after (see analysis/checks_order.py, "FIFO"), for the node's first violations.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

# FIFO violations per node whose `fifo_after` is filled in: the checker shows at most this
# many examples, ordered by node then ordinal, so later ones are only counted.
FIFO_EXAMPLES = 10

NODE_PASS = ("node string, mid string, i long, t long, seq long, pos long, copies long, "
             "all_i array<long>, fifo_late boolean, fifo_sender string, fifo_after string")


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


def _node_pass(table: pa.Table) -> pa.Table:
    """First deliveries of one node's fnl events (see module docstring)."""
    order = np.argsort(table.column("i").to_numpy(), kind="stable")
    table = table.take(pa.array(order))
    mid = table.column("mid").combine_chunks()
    # Dictionary codes follow first appearance, and rows are in delivery order: code c is the
    # (c+1)-th distinct message the node delivered, so pos = c + 1.
    codes = pc.dictionary_encode(mid).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    _, first = np.unique(codes, return_index=True)
    copies = np.bincount(codes) if len(codes) else np.zeros(0, np.int64)
    i_all = table.column("i").to_numpy()
    all_i: list[list[int] | None] = [None] * len(first)
    dup = np.flatnonzero(copies > 1)
    if len(dup):
        rows = np.flatnonzero(copies[codes] > 1)
        lists: dict[int, list[int]] = {}
        for c, i in zip(codes[rows].tolist(), i_all[rows].tolist(), strict=True):
            lists.setdefault(c, []).append(i)
        for c, v in lists.items():
            all_i[c] = v
    firsts = table.take(pa.array(first))
    fmid = firsts.column("mid").combine_chunks()
    sender, n = _sender_n(fmid)
    late, after = _fifo(sender, n, fmid)
    return pa.table({
        "node": firsts.column("node"), "mid": fmid, "i": firsts.column("i"),
        "t": firsts.column("t"), "seq": firsts.column("seq"),
        "pos": pa.array(np.arange(1, len(first) + 1, dtype=np.int64)),
        "copies": pa.array(copies.astype(np.int64)),
        "all_i": pa.array(all_i, pa.list_(pa.int64())),
        "fifo_late": pa.array(late), "fifo_sender": pc.if_else(pa.array(late), sender, None),
        "fifo_after": pa.array(after, pa.string()),
    })


def node_pass(events: DataFrame) -> DataFrame:
    """The per-node pass over every fnl event with a mid (columns in NODE_PASS)."""
    fnl = events.filter((F.col("ev") == "fnl") & F.col("mid").isNotNull()).select(
        "node", "mid", "i", "t", "seq")
    return by_node(fnl, _node_pass, NODE_PASS)


MID_TABLE = ("mid string, gt long, t_first long, delivered_by array<string>, sender string, "
             "t_send long, sent boolean")
_MID_INPUT = pa.schema([("mid", pa.string()), ("node", pa.string()), ("t", pa.int64()),
                        ("s_node", pa.string()), ("s_t", pa.int64())])


def _mid_pass(table: pa.Table) -> pa.Table:
    """Per mid of a partition's rows (first deliveries: node, t; sends: s_node, s_t): the
    lower median delivery time `gt`, the first `t_first`, the sorted holders, the sender."""
    if table.num_rows == 0:
        return pa.Table.from_pylist([], schema=pa.schema(
            [("mid", pa.string()), ("gt", pa.int64()), ("t_first", pa.int64()),
             ("delivered_by", pa.list_(pa.string())), ("sender", pa.string()),
             ("t_send", pa.int64()), ("sent", pa.bool_())]))
    # Sends have no `t`, so after each mid's deliveries by time come its sends.
    table = table.take(pc.sort_indices(table, [("mid", "ascending"), ("t", "ascending")]))
    mid = table.column("mid").combine_chunks()
    code = pc.dictionary_encode(mid).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    rows = len(code)
    starts = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
    is_fnl = table.column("node").is_valid().to_numpy(zero_copy_only=False)
    is_send = table.column("s_node").is_valid().to_numpy(zero_copy_only=False)
    holders = np.add.reduceat(is_fnl.astype(np.int64), starts)
    sends = np.add.reduceat(is_send.astype(np.int64), starts)
    t = pc.fill_null(table.column("t"), 0).to_numpy()
    delivered = holders > 0
    gt = pa.array(t[starts + np.maximum(holders - 1, 0) // 2], mask=~delivered)
    t_first = pa.array(t[starts], mask=~delivered)
    big = np.iinfo(np.int64).max
    s_t = pc.fill_null(table.column("s_t"), big).to_numpy()
    t_send = np.minimum.reduceat(np.where(is_send, s_t, big), starts)
    # The first send row of each mid (they follow its deliveries) names the sender.
    first_send = starts + holders
    s_node = table.column("s_node").combine_chunks()
    sender = pc.if_else(pa.array(sends > 0),
                        s_node.take(pa.array(np.minimum(first_send, rows - 1))),
                        pa.scalar(None, pa.string()))
    # Holders sorted by name within each mid: a numpy sort of (mid, node rank) codes.
    fnl_rows = np.flatnonzero(is_fnl)
    node = table.column("node").combine_chunks()
    names = pc.unique(node.filter(pa.array(is_fnl)))
    ranks = pc.index_in(node, value_set=names.sort()).to_numpy(zero_copy_only=False)
    by_name = fnl_rows[np.lexsort((ranks[fnl_rows], code[fnl_rows]))]
    offsets = np.r_[0, np.cumsum(holders)].astype(np.int32)
    delivered_by = pa.ListArray.from_arrays(pa.array(offsets), node.take(pa.array(by_name)))
    return pa.table({"mid": mid.take(pa.array(starts)), "gt": gt, "t_first": t_first,
                     "delivered_by": delivered_by, "sender": sender,
                     "t_send": pa.array(t_send, mask=sends == 0), "sent": pa.array(sends > 0)})


def _mid_batches(batches: Any) -> Any:
    table = pa.Table.from_batches(list(batches), schema=_MID_INPUT)
    yield from _mid_pass(table).to_batches()


def mid_table(firsts: DataFrame, events: DataFrame) -> DataFrame:
    """Per mid over first deliveries and sends (columns in MID_TABLE): one shuffle by mid and
    an Arrow sort per partition, instead of collecting lists per group in the JVM."""
    none_s, none_l = F.lit(None).cast("string"), F.lit(None).cast("long")
    delivered = firsts.select("mid", "node", "t", none_s.alias("s_node"), none_l.alias("s_t"))
    sends = events.filter((F.col("ev") == "send") & F.col("mid").isNotNull()).select(
        "mid", none_s.alias("node"), none_l.alias("t"), F.col("node").alias("s_node"),
        F.col("t").alias("s_t"))
    both = delivered.unionByName(sends)
    parts = int(both.sparkSession.conf.get("spark.sql.shuffle.partitions") or 4)
    return both.repartition(parts, "mid").mapInArrow(_mid_batches, MID_TABLE)


def by_node(df: DataFrame, fn: Any, schema: str) -> DataFrame:
    """`fn` (an Arrow table -> table function) over each node's rows of `df`: one shuffle by
    node and no sort (groupBy().applyInArrow would sort every row by node first)."""
    parts = int(df.sparkSession.conf.get("spark.sql.shuffle.partitions") or 4)

    def run(batches: Any) -> Any:
        batches = list(batches)
        if not batches:
            return
        table = pa.Table.from_batches(batches)
        node = table.column("node")
        for name in pc.unique(node).to_pylist():
            yield from fn(table.filter(pc.equal(node, name))).to_batches()

    return df.repartition(parts, "node").mapInArrow(run, schema)


CAUSAL = "node string, i long, mid string, sent_g long, latest_g long, latest_mid string"


def _causal(table: pa.Table) -> pa.Table:
    """A node's sends (`sent_g` set) made after it fnl-delivered a message (`g` set) that the
    consensus orders after the sent one; `latest_*` is the highest-ranked such delivery."""
    table = table.take(pa.array(np.argsort(table.column("i").to_numpy(), kind="stable")))
    n = table.num_rows
    g = table.column("g")
    is_fnl = g.is_valid().to_numpy(zero_copy_only=False)
    rows = np.arange(n, dtype=np.int64)
    # Running maximum of (g, row) over the deliveries strictly before each event.
    key = np.where(is_fnl, pc.fill_null(g, 0).to_numpy() * (n + 1) + rows, -1)
    prev = np.r_[-1, np.maximum.accumulate(key)[:-1]] if n else key
    sent = table.column("sent_g")
    sent_g = pc.fill_null(sent, -1).to_numpy()
    bad = sent.is_valid().to_numpy(zero_copy_only=False) & (prev >= 0)
    bad &= sent_g < np.where(prev >= 0, prev // (n + 1), 0)
    hit = np.flatnonzero(bad)
    top = prev[hit]
    return pa.table({"node": table.column("node").take(pa.array(hit)),
                     "i": table.column("i").take(pa.array(hit)),
                     "mid": table.column("mid").take(pa.array(hit)),
                     "sent_g": pa.array(sent_g[hit]),
                     "latest_g": pa.array(top // (n + 1)),
                     "latest_mid": table.column("mid").take(pa.array(top % (n + 1)))})


def causal_pass(deliveries: DataFrame, sends: DataFrame) -> DataFrame:
    """`_causal` over each node's ranked deliveries (node, i, mid, g) and its sends
    (node, i, mid, sent_g)."""
    none = F.lit(None).cast("long")
    both = deliveries.select("node", "i", "mid", "g", none.alias("sent_g")).unionByName(
        sends.select("node", "i", "mid", none.alias("g"), "sent_g"))
    return by_node(both, _causal, CAUSAL)
