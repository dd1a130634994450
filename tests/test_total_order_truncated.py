"""total_order when a node's inverted pairs are only partly enumerated (MAX_PAIRS_PER_NODE):
a lamport run whose members deliver a restarted member's backlog at one instant inverts the
consensus order (ties broken by mid) hundreds of thousands of times at every node, and the
restarted incarnation, whose few inversions were all enumerated, used to be reported as
disagreeing with every other node on each of them. A pair is a violation only when a holder
that is not truncated keeps the consensus order."""

from __future__ import annotations

from typing import Any

from analysis.checks_order import MAX_PAIRS_PER_NODE, Firsts, total_order

NAMES = ["h1", "h2", "h2@1", "h3"]


def bitmap(holders: list[str]) -> str:
    bits = 0
    for k, n in enumerate(NAMES):
        if n in holders:
            bits |= 1 << (7 - k)
    return bytes([bits]).hex()


def records(inv: dict[str, int], holders: list[str]) -> dict[str, list[dict[str, Any]]]:
    """h2@1 inverts the pair (h3:419, h4:408); `inv` gives each node's inversion count."""
    nodes = [{"node": n, "firsts": 10, "inv": v} for n, v in inv.items()]
    pair = {"ga": 1, "a": "h3:419", "gb": 1, "b": "h4:408", "h": bitmap(holders),
            "node": "h2@1"}
    return {"node": nodes, "pair": [pair]}


def lookup(mids: set[str]) -> Firsts:
    return {m: {n: (k, k) for n in NAMES} for k, m in enumerate(sorted(mids))}


def test_a_truncated_holder_missing_from_the_inverted_list_proves_no_disagreement() -> None:
    big = MAX_PAIRS_PER_NODE + 5724
    recs = records({"h1": big, "h3": big, "h2@1": 31}, ["h1", "h2@1", "h3"])
    check = total_order(recs, NAMES, lookup)
    assert check["truncated"] is True
    assert check["violations"] == 0


def test_a_holder_enumerated_in_full_that_keeps_the_order_is_a_violation() -> None:
    recs = records({"h1": MAX_PAIRS_PER_NODE + 1, "h2@1": 31}, ["h1", "h2@1", "h3"])
    check = total_order(recs, NAMES, lookup)  # h3 (0 inversions) keeps g's order
    assert check["violations"] == 1
    assert check["examples"][0]["nodes"] == ["h2@1"]


def test_without_truncation_every_disagreement_counts() -> None:
    recs = records({"h1": 3, "h3": 3, "h2@1": 31}, ["h1", "h2@1", "h3"])
    assert total_order(recs, NAMES, lookup)["violations"] == 1
