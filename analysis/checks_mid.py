"""The checker suite's first pass: every fnl, send and recv event, shuffled by mid once.

For each message a partition holds all of its events, so numpy finds here, with no join:
each node's first fnl of it (the first delivery, by ordinal `i`) and how many copies the node
delivered; the consensus time `gt` (the lower median of the first-delivery times, see
analysis/checks_order.py) and the bitmap of its holders; its sender (the earliest send) and
whether it was sent at all. Agreement, validity and integrity are decided right here; what
goes on to the per-node pass (analysis/checks_node.py) is one row per first delivery and one
per send of a delivered message, each with `gt` and the holders.

Violations leave as records (`rec`, one JSON object each): a count per partition, and the
partition's first MAX_EXAMPLES examples in the order the checker reports them, so the driver
merges a few rows per partition into exact totals and the global first examples.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

MAX_EXAMPLES = 10

# process (`host@k`) -> origin host -> the message number it joined that sender's stream at
# (analysis/joins.py computes them)
Joins = dict[str, dict[str, int]]
MID_PATTERN = r"^(?P<origin>.+):(?P<mno>[0-9]{1,18})$"

# Event kinds in the `e` column of the pass's input.
FNL, SEND, RECV = 0, 1, 2

# Rows handed from this pass to the per-node pass: first deliveries (e = FNL) and sends of
# delivered messages (e = SEND), each with its process `p` (the index in the pass's sorted
# processes) and `src`, the index of the message's sending process, for FIFO (each process's
# sends in their order); or a record (`rec` set, everything else null). Integer codes rather
# than names: every string costs twice on its way through the JVM.
# With `causal` set, the pass also emits the causal pass's rows (analysis/checks_causal.py):
# each process's first deliveries of sent messages and each sent message's earliest send, as
# (p, i, t, e) with `gt` the message's id (CAUSAL_ID_BITS) and `mid` on the sends only;
# `holders` is null on these rows alone.
MID_ROWS = ("p int, mid string, i long, t long, gt long, holders binary, e byte, src int, "
            "rec string")
_MID_SCHEMA = pa.schema([("p", pa.int32()), ("mid", pa.string()), ("i", pa.int64()),
                         ("t", pa.int64()), ("gt", pa.int64()), ("holders", pa.binary()),
                         ("e", pa.int8()), ("src", pa.int32()), ("rec", pa.string())])
# What the Spark task emits instead of MID_ROWS one by one: per destination of the next
# shuffle (`dest`: a process's code for its rows, one past the last process for the causal
# rows, 0 for records), its rows as Arrow IPC streams of at most BLOB_ROWS rows each. The
# rows then cross the JVM as a few large values (a copy each way), not as millions of rows
# of nine columns converted one value at a time (at 12M events that conversion cost more
# CPU than both Python passes together).
MID_BLOBS = "dest int, blob binary"
BLOB_ROWS = 1 << 20
# A message's id on the causal rows: its partition of the shuffle by mid (which holds all of
# its events) above these bits, its code within the partition below.
CAUSAL_ID_BITS = 32


# The columns of the events check_input reads, and the rows it gives the first pass.
CHECK_INPUT_COLUMNS = ("node", "inc", "ev", "mid", "i", "t")
CHECK_INPUT = "node string, mid string, i long, t long, e byte"
_KINDS = pa.array(["fnl", "send", "recv"], pa.string())  # positions are FNL, SEND, RECV
# A restarted host's later incarnations are processes of their own (000 sec. 2.2): the
# checks name incarnation k > 0 of host h `h@k` (incarnation 0 keeps the host's name).
PROCESS_MARK = "@"


def process_names(node: pa.Array | pa.ChunkedArray,
                  inc: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The process each event belongs to: its node, or `node@inc` for an incarnation after
    the first (a null `inc`, from a log the analysis did not ingest, is incarnation 0)."""
    inc = pc.fill_null(inc, 0)
    later = pc.greater(inc, 0)
    if not pc.any(later).as_py():
        return node
    named = pc.binary_join_element_wise(node, pc.cast(inc, pa.string()), PROCESS_MARK)
    return pc.if_else(later, named, node)


def host_of(process: str) -> str:
    """The host of a process name (process_names)."""
    host, mark, inc = process.rpartition(PROCESS_MARK)
    return host if mark and inc.isdigit() else process


def check_input(events: pa.Table) -> pa.Table:
    """The rows the checker suite reads, from events with CHECK_INPUT_COLUMNS (`inc`
    optional): every fnl, send and recv event that names a mid, as (node, mid, i, t, e) with
    `node` its process (process_names) and `e` its kind (FNL, SEND, RECV). Both drivers build
    their input here (analysis/checks.py in a mapInArrow, analysis/judge.py on the whole
    table), so what counts as a delivery, and by whom, is decided once."""
    kind = pc.index_in(events["ev"], value_set=_KINDS)
    keep = pc.and_(pc.is_valid(kind), pc.is_valid(events["mid"]))
    kept = events.filter(keep)
    e = pc.cast(kind.filter(keep), pa.int8())
    node = kept["node"]
    if "inc" in kept.column_names:
        node = process_names(node, kept["inc"])
    return pa.table({"node": node, "mid": kept["mid"], "i": kept["i"], "t": kept["t"],
                     "e": e})


def check_input_sql(events: DataFrame, processes: list[str]) -> DataFrame:
    """check_input as Spark SQL expressions (the JVM's generated code, no Python), for the
    Spark driver: the same rows, with the process as its index `p` in the sorted
    `processes` (null for a process not among them, which MidPass refuses as run() does),
    so neither the event kind nor the names cross to Python. tests/test_checks_exact.py
    holds both drivers to the same results."""
    from pyspark.sql import functions as F

    kind = (F.when(F.col("ev") == "fnl", FNL).when(F.col("ev") == "send", SEND)
            .when(F.col("ev") == "recv", RECV))
    inc = F.coalesce(F.col("inc"), F.lit(0))
    process = F.when(inc > 0, F.concat(F.col("node"), F.lit(PROCESS_MARK),
                                       inc.cast("string"))).otherwise(F.col("node"))
    codes = F.create_map(*[x for k, n in enumerate(sorted(processes))
                           for x in (F.lit(n), F.lit(k))])
    return (events.filter(kind.isNotNull() & F.col("mid").isNotNull())
            .select(F.try_element_at(codes, process).cast("int").alias("p"), "mid", "i", "t",
                    kind.cast("byte").alias("e")))


def records(recs: list[dict[str, Any]]) -> pa.Table:
    """Records as rows of the pass's output (every column but `rec` null)."""
    n = len(recs)
    cols: dict[str, pa.Array] = {f.name: pa.nulls(n, f.type) for f in _MID_SCHEMA}
    cols["rec"] = pa.array([json.dumps(r, separators=(",", ":")) for r in recs], pa.string())
    return pa.table(cols, schema=_MID_SCHEMA)


def binary_column(packed: np.ndarray) -> pa.Array:
    """Each row of a 2-D uint8 array as one binary value."""
    n, width = packed.shape
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(np.ascontiguousarray(packed))])


def group_starts(key: np.ndarray) -> np.ndarray:
    """Where each run of equal values begins in a sorted `key` (empty for an empty key)."""
    if not len(key):
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, key[1:] != key[:-1]])


def lex_order(keys: tuple[np.ndarray, ...]) -> np.ndarray:
    """np.lexsort(keys) (integer or boolean keys, the last one primary; stable), as one
    stable argsort of a single int64 key when the keys' ranges fit in 63 bits together: a
    third of the time of lexsort's pass per key on millions of rows."""
    n = len(keys[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    lows = [int(k.min()) for k in keys]
    spans = [int(k.max()) - low + 1 for k, low in zip(keys, lows, strict=True)]
    room = 1
    for span in spans:
        room *= span
    if room >= 2**63:
        return np.lexsort(keys)
    combined = np.zeros(n, dtype=np.int64)
    scale = 1
    for k, low, span in zip(keys, lows, spans, strict=True):  # the first key least significant
        part = k.astype(np.int64) - low
        if scale != 1:
            part *= scale
        combined += part
        scale *= span
    return np.argsort(combined, kind="stable")


def _first_k(keys: list[np.ndarray | pa.Array], k: int = MAX_EXAMPLES) -> np.ndarray:
    """Indices of the k smallest rows by `keys` (lexicographic, first key first), in order."""
    n = len(keys[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    table = pa.table({f"k{j}": key for j, key in enumerate(keys)})
    sort_keys = [(f"k{j}", "ascending") for j in range(len(keys))]
    if n > k:
        top = pc.select_k_unstable(table, k, sort_keys=sort_keys)
        table = table.take(top)
        order = pc.sort_indices(table, sort_keys=sort_keys).to_numpy()
        return top.to_numpy()[order]
    return pc.sort_indices(table, sort_keys=sort_keys).to_numpy()


def blobs(table: pa.Table, dest: np.ndarray) -> Iterator[pa.RecordBatch]:
    """`table`'s rows per destination `dest` (MID_BLOBS: a row each of at most BLOB_ROWS
    rows as an Arrow IPC stream). Runs of rows with the same destination go as slices (no
    copy), so a table grouped by destination costs no reordering."""
    runs = group_starts(dest)
    if len(runs) > 2 * len(np.unique(dest)):  # scattered: one reordering copy first
        order = np.argsort(dest, kind="stable")
        table, dest = table.take(pa.array(order)), dest[order]
        runs = group_starts(dest)
    for a, b in zip(runs.tolist(), np.r_[runs[1:], len(dest)].tolist(), strict=True):
        for lo in range(a, b, BLOB_ROWS):
            part = table.slice(lo, min(lo + BLOB_ROWS, b) - lo)
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, part.schema) as writer:
                writer.write_table(part)
            stream = sink.getvalue()  # one binary value over the stream's buffer, no copy
            blob = pa.Array.from_buffers(pa.binary(), 1, [
                None, pa.py_buffer(np.array([0, stream.size], dtype=np.int32)), stream])
            yield pa.RecordBatch.from_arrays([pa.array([int(dest[a])], pa.int32()), blob],
                                             names=["dest", "blob"])


class MidPass:
    """The per-partition function of the pass (picklable: Spark ships it to the workers).

    `nodes` are the processes (sorted: a holder bitmap's bit k is nodes[k]); `correct` the
    hosts held to agreement and validity (a subset of `nodes`); `restarted` the restarted
    processes correct from their restart on (analysis/fault_history.py
    `FaultHistory.restarted`; those not among `nodes` logged nothing): what one delivers
    binds the correct hosts as a correct host's delivery does, and its own messages must
    reach them; it owes the messages of each sender from its join point in that sender's
    stream on (`joins`, analysis/joins.py), as a correct host owes all. With `causal`, the
    causal pass's rows come out too (MID_ROWS), so that one scan and one shuffle by mid feed
    all three passes.
    """

    def __init__(self, nodes: list[str], correct: list[str], causal: bool = False,
                 restarted: list[str] | tuple[str, ...] = (),
                 joins: Joins | None = None) -> None:
        self.nodes = sorted(nodes)
        self.correct = np.array([self.nodes.index(n) for n in correct], dtype=np.int64)
        self.restarted = np.array([self.nodes.index(n) for n in restarted if n in self.nodes],
                                  dtype=np.int64)
        # (process index, its join points) of the restarted processes that joined a stream
        self.joined = [(self.nodes.index(n), dict(j)) for n, j in sorted((joins or {}).items())
                       if n in restarted and n in self.nodes and j]
        self.causal = causal

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The Spark task: check_input_sql's rows in, shuffled by mid."""
        from pyspark import TaskContext

        got = list(batches)
        table = pa.Table.from_batches(got) if got else None
        if table is None or not table.num_rows:
            return
        context = TaskContext.get()
        out = self.run(table, context.partitionId() if context else 0)
        del table, got
        is_rec = out.column("rec").is_valid().to_numpy(zero_copy_only=False)
        is_causal = out.column("holders").is_null().to_numpy(zero_copy_only=False) & ~is_rec
        dest = np.where(is_causal, len(self.nodes), np.where(
            is_rec, 0, pc.fill_null(out.column("p"), 0).to_numpy(zero_copy_only=False)))
        yield from blobs(out, dest)

    def run(self, table: pa.Table, partition: int = 0) -> pa.Table:
        """The pass over one partition's rows: check_input's columns, or check_input_sql's
        (the process as its code `p`); `partition` numbers the causal rows' message ids."""
        names = pa.array(self.nodes, pa.string())
        if "p" in table.column_names:
            ncode_arr = table.column("p").combine_chunks()
            if ncode_arr.null_count:
                raise ValueError("events of hosts [None] that are not among the run's nodes")
        else:
            node_arr = table.column("node").combine_chunks()
            ncode_arr = pc.index_in(node_arr, value_set=names)
            if ncode_arr.null_count:
                unknown = pc.unique(node_arr.filter(pc.is_null(ncode_arr))).to_pylist()
                raise ValueError(f"events of hosts {unknown} that are not among the run's "
                                 "nodes")
        ncode = ncode_arr.to_numpy(zero_copy_only=False).astype(np.int64)
        mid_dict = pc.dictionary_encode(table.column("mid").combine_chunks())
        mcode = mid_dict.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        mids: pa.Array = mid_dict.dictionary
        m_count, n_count = len(mids), len(self.nodes)
        e = table.column("e").to_numpy(zero_copy_only=False)
        i_all = table.column("i").to_numpy(zero_copy_only=False)
        t_all = table.column("t").to_numpy(zero_copy_only=False)
        recs: list[dict[str, Any]] = []

        # First deliveries: fnl rows by (mid, node, i); the first of each (mid, node) group.
        f_rows = np.flatnonzero(e == FNL)
        f_rows = f_rows[lex_order((i_all[f_rows], ncode[f_rows], mcode[f_rows]))]
        f_key = mcode[f_rows] * n_count + ncode[f_rows]
        starts = group_starts(f_key)
        copies = np.diff(np.r_[starts, len(f_rows)])
        first = f_rows[starts]
        f_m, f_n, f_t = mcode[first], ncode[first], t_all[first]

        # Per message: holders, consensus time (lower median of first-delivery times).
        holders = np.bincount(f_m, minlength=m_count)
        delivered = holders > 0
        sorted_t = f_t[lex_order((f_t, f_m))]
        m_start = np.r_[0, np.cumsum(holders)[:-1]].astype(np.int64)
        gt = np.zeros(m_count, dtype=np.int64)
        t_first = np.zeros(m_count, dtype=np.int64)
        gt[delivered] = sorted_t[(m_start + (holders - 1) // 2)[delivered]]
        t_first[delivered] = sorted_t[m_start[delivered]]
        held = np.zeros((m_count, n_count), dtype=bool)
        held[f_m, f_n] = True

        # Sends: the earliest (then by host name) names the sender.
        s_rows = np.flatnonzero(e == SEND)
        s_rows = s_rows[lex_order((ncode[s_rows], t_all[s_rows], mcode[s_rows]))]
        s_first = s_rows[group_starts(mcode[s_rows])]
        sent = np.zeros(m_count, dtype=bool)
        sent[mcode[s_first]] = True
        sender = np.full(m_count, -1, dtype=np.int64)
        sender[mcode[s_first]] = ncode[s_first]
        t_send = np.zeros(m_count, dtype=np.int64)
        t_send[mcode[s_first]] = t_all[s_first]

        recs += self._integrity(f_rows, starts, copies, sent, mcode, ncode, i_all, mids, names)
        # A delivery of a message nobody sent is an integrity finding only (counted once):
        # agreement and the order checkers see sent messages alone.
        # Agreement (000 §2.2): if a *correct* process delivers m, every correct process
        # eventually does. A message only faulty hosts delivered (a sender that crashed or was
        # cut off right after delivering its own message) binds nobody; one a restarted
        # process that stays up delivered binds the correct hosts.
        binding = np.r_[self.correct, self.restarted]
        by_correct = (held[:, binding].any(axis=1) if len(binding)
                      else np.zeros(len(held), dtype=bool))
        bound = delivered & sent & by_correct
        recs += self._agreement(held, bound, t_first, mids, names)
        if self.joined:
            recs += self._agreement_joined(held, bound, t_first, mids)
        recs += self._faulty_senders(held, bound, sender, mids)
        recs += self._validity(held, sent, sender, t_send, e, mcode, ncode, t_all, mids, names)

        # Rows for the per-node pass: first deliveries of sent messages, and sends of
        # delivered messages.
        first = first[sent[f_m]]
        s_out = s_rows[delivered[mcode[s_rows]]]
        out_rows = np.r_[first, s_out]
        kind = np.r_[np.full(len(first), FNL), np.full(len(s_out), SEND)].astype(np.int8)
        # Grouped by process (each process's rows in the order above), so that the Spark
        # task hands each destination a slice, not a copy.
        by_p = np.argsort(ncode[out_rows], kind="stable")
        out_rows, kind = out_rows[by_p], kind[by_p]
        out_m = mcode[out_rows]
        packed = np.packbits(held[out_m], axis=1)
        n_out = len(out_rows)
        rows = pa.table({
            "p": pa.array(ncode[out_rows].astype(np.int32)), "mid": mids.take(pa.array(out_m)),
            "i": pa.array(i_all[out_rows]), "t": pa.array(t_all[out_rows]),
            "gt": pa.array(gt[out_m]), "holders": binary_column(packed),
            "e": pa.array(kind), "src": pa.array(sender[out_m].astype(np.int32)),
            "rec": pa.nulls(n_out, pa.string())}, schema=_MID_SCHEMA)
        parts = [rows]
        if self.causal:
            # The causal pass's rows: first deliveries of sent messages (the same as above)
            # and every sent message's earliest send, delivered or not (its index among its
            # sender's sends, and its time, count even if nobody delivered it).
            # A delivery names its message by id alone; the send carries the mid as well.
            c_rows = np.r_[first, s_first]
            n_c = len(c_rows)
            parts.append(pa.table({
                "p": pa.array(ncode[c_rows].astype(np.int32)),
                "mid": pa.concat_arrays([pa.nulls(len(first), pa.string()),
                                         mids.take(pa.array(mcode[s_first]))]),
                "i": pa.array(i_all[c_rows]), "t": pa.array(t_all[c_rows]),
                "gt": pa.array((partition << CAUSAL_ID_BITS) + mcode[c_rows]),
                "holders": pa.nulls(n_c, pa.binary()),
                "e": pa.array(np.r_[np.full(len(first), FNL), np.full(len(s_first), SEND)]
                              .astype(np.int8)),
                "src": pa.nulls(n_c, pa.int32()), "rec": pa.nulls(n_c, pa.string())},
                schema=_MID_SCHEMA))
        if recs:
            parts.append(records(recs))
        return pa.concat_tables(parts) if len(parts) > 1 else rows

    def _integrity(self, f_rows: np.ndarray, starts: np.ndarray, copies: np.ndarray,
                   sent: np.ndarray, mcode: np.ndarray, ncode: np.ndarray, i_all: np.ndarray,
                   mids: pa.Array, names: pa.Array) -> list[dict[str, Any]]:
        """Duplicates (a node's extra fnl copies of a mid) and fnl events of never-sent mids;
        examples by (node, mid, ordinals), as integrity reports them."""
        recs: list[dict[str, Any]] = []
        dup = np.flatnonzero(copies > 1)
        if len(dup):
            recs.append({"r": "dup_n", "n": int((copies[dup] - 1).sum())})
            rows = f_rows[starts[dup]]
            for k in _first_k([names.take(pa.array(ncode[rows])),
                               mids.take(pa.array(mcode[rows]))]).tolist():
                s, c = int(starts[dup[k]]), int(copies[dup[k]])
                recs.append({"r": "dup", "node": self.nodes[int(ncode[f_rows[s]])],
                             "mid": mids[int(mcode[f_rows[s]])].as_py(),
                             "i": i_all[f_rows[s:s + c]].tolist(), "n": c - 1})
        unsent = f_rows[~sent[mcode[f_rows]]]
        if len(unsent):
            recs.append({"r": "unsent_n", "n": len(unsent)})
            for k in _first_k([names.take(pa.array(ncode[unsent])),
                               mids.take(pa.array(mcode[unsent])), i_all[unsent]]).tolist():
                row = int(unsent[k])
                recs.append({"r": "unsent", "node": self.nodes[int(ncode[row])],
                             "mid": mids[int(mcode[row])].as_py(), "i": [int(i_all[row])],
                             "n": 1})
        return recs

    def _agreement(self, held: np.ndarray, delivered: np.ndarray, t_first: np.ndarray,
                   mids: pa.Array, names: pa.Array) -> list[dict[str, Any]]:
        """(mid, host) pairs: a host held to agreement missing a message some host delivered;
        counts per host, examples by (mid, host)."""
        if not len(self.correct):
            return []
        missing = delivered[:, None] & ~held[:, self.correct]
        recs: list[dict[str, Any]] = []
        per_node = missing.sum(axis=0)
        for j, n in zip(self.correct.tolist(), per_node.tolist(), strict=True):
            if n:
                recs.append({"r": "agree_n", "node": self.nodes[j], "n": int(n)})
        lacking = np.flatnonzero(missing.any(axis=1))
        shown = 0
        for k in _first_k([mids.take(pa.array(lacking))]).tolist():
            m = int(lacking[k])
            by = [self.nodes[j] for j in np.flatnonzero(held[m]).tolist()]
            for j in sorted(self.correct[missing[m]].tolist(), key=lambda j: self.nodes[j]):
                if shown < MAX_EXAMPLES:
                    recs.append({"r": "agree", "mid": mids[m].as_py(), "node": self.nodes[j],
                                 "delivered_by": by, "t": int(t_first[m])})
                    shown += 1
        return recs

    def _faulty_senders(self, held: np.ndarray, bound: np.ndarray, sender: np.ndarray,
                        mids: pa.Array) -> list[dict[str, Any]]:
        """How many of the agreement findings are messages of a faulty sender (a process
        neither correct nor a restarted one that stays up: crashed for good, an incarnation
        before its restart, cut off at the end), which a claim may spare (catalogue
        `ParamClaim.spares_faulty`)."""
        ok = np.zeros(len(self.nodes) + 1, dtype=bool)  # sender -1 reads the spare last slot
        ok[self.correct] = True
        ok[self.restarted] = True
        faulty = bound & ~ok[sender]
        if not faulty.any():
            return []
        n = int((~held[np.ix_(faulty, self.correct)]).sum()) if len(self.correct) else 0
        if self.joined:
            origin, mno = split_mids(mids)
            for j, joins in self.joined:
                n += int((faulty & owed(joins, origin, mno) & ~held[:, j]).sum())
        return [{"r": "agree_faulty_n", "n": n}] if n else []

    def _agreement_joined(self, held: np.ndarray, bound: np.ndarray, t_first: np.ndarray,
                          mids: pa.Array) -> list[dict[str, Any]]:
        """(mid, process) pairs: a restarted process missing a message it owes (analysis/
        joins.py) that some host held to agreement delivered; counted and shown as
        `_agreement`'s findings are."""
        origin, mno = split_mids(mids)
        recs: list[dict[str, Any]] = []
        shown = 0
        for j, joins in self.joined:
            missing = np.flatnonzero(bound & owed(joins, origin, mno) & ~held[:, j])
            if not len(missing):
                continue
            recs.append({"r": "agree_n", "node": self.nodes[j], "n": len(missing)})
            for k in _first_k([mids.take(pa.array(missing))]).tolist():
                m = int(missing[k])
                if shown < MAX_EXAMPLES:
                    by = [self.nodes[x] for x in np.flatnonzero(held[m]).tolist()]
                    recs.append({"r": "agree", "mid": mids[m].as_py(), "node": self.nodes[j],
                                 "delivered_by": by, "t": int(t_first[m])})
                    shown += 1
        return recs

    def _validity(self, held: np.ndarray, sent: np.ndarray, sender: np.ndarray,
                  t_send: np.ndarray, e: np.ndarray, mcode: np.ndarray, ncode: np.ndarray,
                  t_all: np.ndarray, mids: pa.Array, names: pa.Array) -> list[dict[str, Any]]:
        """A correct sender (a restarted process that stays up included) that never
        delivered its own message; a correct host that received (recv) a correct sender's
        message and never delivered it. Examples by (t, host, mid); the findings whose
        sender is a restarted process are counted apart as well (`restarted_n`)."""
        recs: list[dict[str, Any]] = []
        correct = np.zeros(len(self.nodes) + 1, dtype=bool)
        correct[self.correct] = True
        senders = correct.copy()
        senders[self.restarted] = True
        m_ok = sent & senders[sender]  # sender -1 (never sent) reads the spare last slot
        restarted = senders & ~correct  # the restarted processes' findings also count apart
        own = np.flatnonzero(m_ok)
        own = own[~held[own, sender[own]]]
        n_restarted = int(restarted[sender[own]].sum())
        if len(own):
            recs.append({"r": "own_n", "n": len(own)})
            for k in _first_k([t_send[own], names.take(pa.array(sender[own])),
                               mids.take(pa.array(own))]).tolist():
                m = int(own[k])
                recs.append({"r": "own", "mid": mids[m].as_py(),
                             "node": self.nodes[int(sender[m])], "t": int(t_send[m])})
        r_rows = np.flatnonzero(e == RECV)
        r_rows = r_rows[correct[ncode[r_rows]] & m_ok[mcode[r_rows]]]
        r_rows = r_rows[~held[mcode[r_rows], ncode[r_rows]]]
        if len(r_rows):
            # The earliest recv of each (mid, host).
            r_rows = r_rows[lex_order((t_all[r_rows], ncode[r_rows], mcode[r_rows]))]
            r_rows = r_rows[group_starts(mcode[r_rows] * len(self.nodes) + ncode[r_rows])]
            recs.append({"r": "recv_n", "n": len(r_rows)})
            n_restarted += int(restarted[sender[mcode[r_rows]]].sum())
            for k in _first_k([t_all[r_rows], names.take(pa.array(ncode[r_rows])),
                               mids.take(pa.array(mcode[r_rows]))]).tolist():
                row = int(r_rows[k])
                recs.append({"r": "recv", "mid": mids[int(mcode[row])].as_py(),
                             "node": self.nodes[int(ncode[row])], "t": int(t_all[row])})
        if n_restarted:
            recs.append({"r": "restarted_n", "n": n_restarted})
        return recs


def split_mids(mids: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(origin, mno) of each mid as numpy arrays (object, int64); a mid not of the form
    `origin:mno` gets origin None and mno -1."""
    parts = pc.extract_regex(mids, MID_PATTERN)
    origin = pc.struct_field(parts, "origin").to_numpy(zero_copy_only=False)
    mno = pc.cast(pc.struct_field(parts, "mno"), pa.int64())
    return origin, pc.fill_null(mno, -1).to_numpy(zero_copy_only=False)


def owed(joins: dict[str, int], origin: np.ndarray, mno: np.ndarray) -> np.ndarray:
    """Which messages (their origin and mno, split_mids) a process with join points `joins`
    owes: those of a joined origin from its join point on."""
    need = np.zeros(len(mno), dtype=bool)
    for o, first in joins.items():
        need |= (origin == o) & (mno >= first)
    return need
