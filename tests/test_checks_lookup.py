"""The examples' first deliveries come from one lookup (on the Spark driver a filtered scan of
every event): total order's and causal order's examples ask for their mids together, and get
what separate lookups gave them. And the first pass's sort by several keys (lex_order) is
np.lexsort's order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from analysis import checks_order
from analysis.checks import judge_records, table_records
from analysis.checks_mid import lex_order
from analysis.fault_history import fault_history
from bench.checker_scale import generate


def _events(tmp_path: Path) -> pa.Table:
    """bench.checker_scale's history (a swapped pair at the last node: one total order and
    one causal finding), with the incarnation column the events carry."""
    generate(tmp_path, nodes=4, messages=40)
    table = pa.concat_tables(pq.read_table(f) for f in sorted(tmp_path.glob("*.parquet")))
    return table.append_column("inc", pa.array([0] * table.num_rows, pa.int32()))


def test_one_lookup_serves_both_orders_examples(tmp_path: Path) -> None:
    events = _events(tmp_path)
    nodes = ["h1", "h2", "h3", "h4"]
    recs, names = table_records(events, nodes, nodes)
    fnl = events.filter(pc.equal(events["ev"], "fnl")).select(["node", "inc", "mid", "i", "t"])
    asked: list[set[str]] = []

    def lookup(mids: set[str]) -> checks_order.Firsts:
        asked.append(set(mids))
        return checks_order.first_fnl_table(fnl, mids)

    history = fault_history(nodes, [])
    checks = judge_records(recs, names, lookup, history, frozenset())
    assert checks["total_order"]["violations"] == 1
    assert checks["causal_order"]["violations"] == 1
    assert len(asked) == 1  # one lookup for both
    shown = {m for e in checks["total_order"]["examples"] for m in e["mids"]}
    shown |= {e["mid"] for e in checks["causal_order"]["examples"]}
    assert asked[0] == shown and len(shown) >= 2
    # The same examples as each checker with a lookup of its own.
    plain = checks_order.total_order(recs, names, lambda m: checks_order.first_fnl_table(
        fnl, m), history)
    assert {k: v for k, v in checks["total_order"].items() if k != "claimed"} == plain
    causal = checks_order.causal_order(recs, lambda m: checks_order.first_fnl_table(
        fnl, m), history)
    assert {k: v for k, v in checks["causal_order"].items() if k != "claimed"} == causal
    assert len(asked) == 1


def test_a_mid_outside_the_prefetched_ones_is_looked_up_on_its_own(tmp_path: Path) -> None:
    events = _events(tmp_path)
    fnl = events.filter(pc.equal(events["ev"], "fnl")).select(["node", "inc", "mid", "i", "t"])
    asked: list[set[str]] = []

    def lookup(mids: set[str]) -> checks_order.Firsts:
        asked.append(set(mids))
        return checks_order.first_fnl_table(fnl, mids)

    pre = checks_order.Prefetched(lookup, {"h1:1"})
    assert pre({"h1:1"}) == checks_order.first_fnl_table(fnl, {"h1:1"}) != {}
    assert asked == [{"h1:1"}]
    both = pre({"h1:1", "h2:1", "nobody:7"})
    assert both == checks_order.first_fnl_table(fnl, {"h1:1", "h2:1"})
    assert asked == [{"h1:1"}, {"h2:1", "nobody:7"}]
    pre({"nobody:7"})  # found nowhere, and not asked again
    assert len(asked) == 2


def test_lex_order_is_lexsort_with_ties_and_past_63_bits() -> None:
    rng = np.random.default_rng(7)
    n = 5000
    i = rng.integers(-50, 50, n)  # negative values and many ties
    node = rng.integers(0, 3, n).astype(np.int32)
    mid = rng.integers(0, 40, n)
    send = rng.integers(0, 2, n).astype(bool)
    for keys in [(i, node, mid), (~send, i), (mid,), (i[:0], node[:0])]:
        assert np.array_equal(lex_order(keys), np.lexsort(keys))
    # Ranges whose product passes 63 bits: lexsort itself answers.
    wide = rng.integers(-2**62, 2**62, n)
    keys = (wide, rng.integers(0, 8, n))
    assert np.array_equal(lex_order(keys), np.lexsort(keys))
    # A stable order: equal keys keep their positions.
    same = np.zeros(n, dtype=np.int64)
    assert np.array_equal(lex_order((same, same)), np.arange(n))
