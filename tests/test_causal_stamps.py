"""The causal checker's vector clocks: the whole-array fixpoint (analysis/checks_causal.py
`_stamps`) against the event-by-event replay (`_replay`) on random logs, skewed clocks and
deliveries logged before their send included, and on a relay chain that needs many rounds;
and the Spark driver's causal rows (CausalRows) against the whole log's (causal_records)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from analysis import checks_causal
from analysis.checks_mid import FNL, SEND, MidPass, group_starts


def _inputs(rng: np.random.Generator, procs: int, messages: int, skew: int):
    """Random sends (one per message) and first deliveries (a random subset of processes per
    message), as causal_records builds them."""
    sender = rng.integers(0, procs, messages)
    t_send = np.sort(rng.integers(0, 10 * messages, messages))
    rows_p, rows_m, rows_t, rows_e = [sender], [np.arange(messages)], [t_send], [np.ones(
        messages, dtype=bool)]
    for p in range(procs):
        got = rng.random(messages) < 0.7
        lag = rng.integers(-skew, 30, messages)
        rows_p.append(np.full(int(got.sum()), p))
        rows_m.append(np.flatnonzero(got))
        rows_t.append(t_send[got] + lag[got])
        rows_e.append(np.zeros(int(got.sum()), dtype=bool))
    proc, mid = np.concatenate(rows_p), np.concatenate(rows_m)
    t, is_send = np.concatenate(rows_t), np.concatenate(rows_e)
    # Ordinals: each process's events in its (jittered) log order.
    order = np.lexsort((rng.random(len(t)), t + rng.integers(0, skew + 1, len(t)), proc))
    i = np.empty(len(t), dtype=np.int64)
    starts = group_starts(proc[order])
    sizes = np.diff(np.r_[starts, len(order)])
    i[order] = np.arange(len(order)) - np.repeat(starts, sizes)
    s_rows = np.flatnonzero(is_send)
    f_rows = np.flatnonzero(~is_send)
    streams, stream_of_row = np.unique(proc[s_rows], return_inverse=True)
    stream = np.full(messages, -1, dtype=np.int64)
    stream[mid[s_rows]] = stream_of_row
    k_of = np.zeros(messages, dtype=np.int64)
    for s in range(len(streams)):
        mine = s_rows[stream_of_row == s]
        mine = mine[np.argsort(i[mine], kind="stable")]
        k_of[mid[mine]] = np.arange(1, len(mine) + 1)
    return (s_rows, f_rows, proc, mid, i, t, stream, k_of, procs, len(streams), messages)


@pytest.mark.parametrize("seed", range(12))
def test_fixpoint_stamps_equal_the_replay(seed: int) -> None:
    rng = np.random.default_rng(seed)
    args = _inputs(rng, int(rng.integers(2, 7)), int(rng.integers(1, 400)),
                   skew=int(rng.integers(0, 40)))
    assert np.array_equal(checks_causal._stamps(*args), checks_causal._replay(*args))


def test_a_relay_chain_past_the_round_limit_still_equals_the_replay(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """p0 sends m0; p1 delivers it and sends m1; p2 delivers m1 and sends m2; ... each hop
    one process further, nobody else delivering: the causal past of the last message reaches
    back through every hop, one fixpoint round per hop."""
    hops = 12
    proc = np.r_[np.arange(hops), np.arange(1, hops)]  # sends, then deliveries
    mid = np.r_[np.arange(hops), np.arange(hops - 1)]
    t = np.r_[np.arange(hops) * 10 + 5, np.arange(hops - 1) * 10 + 10]
    i = np.r_[np.ones(hops, dtype=np.int64), np.zeros(hops - 1, dtype=np.int64)]
    args = (np.arange(hops), np.arange(hops, 2 * hops - 1), proc, mid, i, t,
            np.arange(hops), np.ones(hops, dtype=np.int64), hops, hops, hops)
    replayed = checks_causal._replay(*args)
    assert replayed[hops - 1].tolist() == [1] * hops  # every earlier send is in its past
    assert np.array_equal(checks_causal._stamps(*args), replayed)
    monkeypatch.setattr(checks_causal, "STAMP_ROUNDS", 3)  # too few: falls back to the replay
    assert np.array_equal(checks_causal._stamps(*args), replayed)


def _log(rng: np.random.Generator) -> pa.Table:
    """check_input rows of a random run: sends (a few messages sent twice), deliveries at
    about 80% of the processes with skewed times, a few second copies, maybe a delivery of
    a message nobody sent; ordinals follow each process's jittered time."""
    procs, messages, skew = int(rng.integers(2, 6)), int(rng.integers(1, 200)), int(
        rng.integers(0, 40))
    names = [f"h{k}" for k in range(procs)]
    sender, t_send = rng.integers(0, procs, messages), np.sort(rng.integers(0, 10 * messages,
                                                                          messages))
    rows = []
    for m in range(messages):
        rows.append((names[sender[m]], f"m{m}", int(t_send[m]), SEND))
        if rng.random() < 0.05:
            rows.append((names[int(rng.integers(0, procs))], f"m{m}", int(t_send[m]) + 3, SEND))
        for p in range(procs):
            if rng.random() < 0.8:
                rows.append((names[p], f"m{m}", int(t_send[m] + rng.integers(-skew, 30)), FNL))
                if rng.random() < 0.05:
                    rows.append((names[p], f"m{m}", int(t_send[m]) + 50, FNL))
    if rng.random() < 0.3:
        rows.append((names[0], "ghost", 5, FNL))
    order = rng.permutation(len(rows))
    rows = [rows[k] for k in order]
    node = np.array([r[0] for r in rows])
    jittered = np.array([r[2] for r in rows]) + rng.integers(0, skew + 1, len(rows))
    i = np.zeros(len(rows), dtype=np.int64)
    for name in names:
        mine = np.flatnonzero(node == name)
        i[mine[np.argsort(jittered[mine], kind="stable")]] = np.arange(len(mine))
    return pa.table({"node": node.tolist(), "mid": [r[1] for r in rows], "i": i,
                     "t": [r[2] for r in rows], "e": pa.array([r[3] for r in rows], pa.int8())})


@pytest.mark.parametrize("seed", range(8))
def test_the_first_pass_rows_give_the_records_of_the_whole_log(seed: int) -> None:
    """The Spark driver's causal pass (the first pass's rows, read batch by batch into
    CausalRows, several partitions) and the in-process judge's (causal_records over every
    row) give the same records, on logs with causal findings."""
    rng = np.random.default_rng(seed)
    rows = _log(rng)
    names = sorted(set(rows["node"].to_pylist()))
    whole = checks_causal.causal_records(rows, 5)
    assert whole  # the skewed random logs have findings to compare
    code = pc.dictionary_encode(rows["mid"]).combine_chunks().indices.to_numpy() % 3
    batches = []
    for part in range(3):
        out = MidPass(names, names, causal=True).run(rows.filter(pa.array(code == part)), part)
        causal = out.filter(pc.and_(pc.is_null(out["holders"]), pc.is_null(out["rec"])))
        batches += causal.to_batches(max_chunksize=97)
    got = checks_causal.CausalRows()
    for k in rng.permutation(len(batches)).tolist():  # in any order, as Spark hands them on
        got.add(batches[k])
    assert got.records(names, 5) == whole


@pytest.mark.parametrize("seed", range(8))
def test_late_deliveries_are_those_a_successor_came_before(seed: int) -> None:
    """_judge's late deliveries against their definition, pair by pair: x (stream s, index
    k) is late when a delivery y earlier in the process's order has s's entry of its stamp
    (less y itself, if y is of s) at least k."""
    rng = np.random.default_rng(seed)
    inputs = _inputs(rng, procs=4, messages=120, skew=15)
    s_rows, f_rows, proc, mid, i, t, stream, k_of, procs, n_streams, m_count = inputs
    stamps = checks_causal._stamps(*inputs)
    mids = pa.array([f"m{m}" for m in range(m_count)])
    names = [f"s{s}" for s in range(n_streams)]
    found_late = 0
    for p in range(procs):
        rows = f_rows[proc[f_rows] == p]
        rows = rows[rng.permutation(len(rows))]  # any delivery order: findings aplenty
        d_mid, d_pos = mid[rows], np.arange(len(rows), dtype=np.int64) * 3 + 1
        recs = checks_causal._judge(f"p{p}", d_mid, d_pos, stamps, stream, k_of, mids,
                                    names, max_late=10**6)
        got = {m for r in recs if r["r"] == "causal_late" for m in r["mids"]}
        want = set()
        for x in range(len(rows)):
            s, k = int(stream[d_mid[x]]), int(k_of[d_mid[x]])
            for y in range(x):
                bound = int(stamps[d_mid[y], s]) - int(stream[d_mid[y]] == s)
                if bound >= k:
                    want.add(f"m{int(d_mid[x])}")
                    break
        assert got == want
        found_late += len(want)
    assert found_late > 0
