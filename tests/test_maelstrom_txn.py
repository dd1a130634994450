"""Maelstrom's txn-list-append workload (docs/maelstrom.md, txn-list-append): Elle's
list-append checker (analysis/elle_list_append.py) on hand-written histories, one per anomaly
class it must flag and serial ones it must not, the generator and the clients' completions,
then end to end on the local backend with this project's program
(tests/maelstrom_nodes/txn.py): all transactions applied one at a time on n0 (valid) and
each node applying its own (invalid)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import yaml

from analysis.elle import PROHIBITS, Txn
from analysis.elle_list_append import check
from analysis.maelstrom import Operation, check_txn
from nodes.maelstrom import CONSISTENCY_MODELS, Generator, Op, completion
from tests.inproc import run_cli

NODES = Path(__file__).resolve().parent / "maelstrom_nodes"
TXN = str(NODES / "txn.py")


class History:
    """Transactions one after another (each 10 ns, none concurrent) unless given times."""

    def __init__(self) -> None:
        self.txns: list[Txn] = []

    def t(self, *mops: list[Any], type_: str = "ok", at: tuple[int, int] | None = None
          ) -> None:
        n = len(self.txns)
        a, b = at if at is not None else (10 * n, 10 * n + 5)
        self.txns.append(Txn(n, type_, [list(m) for m in mops], a, b, f"c{n}"))


def r(k: Any, v: list[Any] | None) -> list[Any]:
    return ["r", k, v]


def a(k: Any, v: Any) -> list[Any]:
    return ["append", k, v]


def _serial() -> History:
    h = History()
    h.t(a("x", 1), r("y", None))
    h.t(r("x", [1]), a("y", 1), a("x", 2))
    h.t(r("x", [1, 2]), r("y", [1]), a("y", 2), r("y", [1, 2]))  # reads its own append
    h.t(a("z", 1), type_="fail")  # never seen
    h.t(a("z", 2), type_="info")  # seen: it committed
    h.t(r("z", [2]), r("x", [1, 2]))
    return h


def test_a_serial_history_has_no_anomaly() -> None:
    for models in (("strict-serializable",), ("read-committed", "serializable")):
        got = check(_serial().txns, models)
        assert got == {"valid?": True, "anomaly-types": [], "anomalies": {}, "not": []}, got


def test_concurrent_transactions_may_serialize_either_way() -> None:
    """Overlapping in time, no real-time order between them: each order is strict
    serializable, so neither is flagged."""
    h = History()
    h.t(a("x", 1), at=(0, 100))
    h.t(r("x", []), at=(10, 90))  # before the append, though it completed after
    h.t(r("x", [1]), at=(200, 210))
    assert check(h.txns)["valid?"] is True


def _types(h: History, models: tuple[str, ...] = ("strict-serializable",)) -> list[str]:
    return list(check(h.txns, models)["anomaly-types"])


def test_aborted_intermediate_and_dirty_reads() -> None:
    h = History()
    h.t(a("x", 1), type_="fail")
    h.t(r("x", [1]))  # G1a: reads a failed append
    assert _types(h) == ["G1a"]
    got = check(h.txns)["anomalies"]["G1a"][0]
    assert (got["key"], got["element"], got["writer"]["type"]) == ("x", 1, "fail")
    h = History()
    h.t(a("x", 1), a("x", 2))
    h.t(r("x", [1]))  # G1b: sees the first of two appends of one transaction
    h.t(r("x", [1, 2]))
    assert _types(h) == ["G1b"]
    h = History()
    h.t(a("x", 1), type_="fail")
    h.t(a("x", 2))
    h.t(r("x", [1, 2]))  # a committed append after a failed one: dirty update (and G1a)
    assert _types(h) == ["G1a", "dirty-update"]


def test_reads_that_are_not_prefixes_duplicates_garbage_and_internal() -> None:
    h = History()
    h.t(a("x", 1))
    h.t(a("x", 2))
    h.t(r("x", [1, 2]))
    h.t(r("x", [2]))  # neither a prefix of [1, 2] nor the other way
    assert _types(h) == ["incompatible-order"]
    assert check(h.txns)["anomalies"]["incompatible-order"][0]["values"] == [[1, 2], [2]]
    h = History()
    h.t(a("x", 1))
    h.t(r("x", [1, 1]))
    assert _types(h) == ["duplicate-elements"]
    h = History()
    h.t(r("x", [7]))  # nobody appended 7
    assert _types(h) == ["garbage-read"]
    h = History()
    h.t(a("x", 1))
    h.t(a("x", 2), r("x", [1]))  # its own append is missing from its read
    assert _types(h) == ["internal"]


def test_g0_write_cycle() -> None:
    """Elle's G0 (`010` §2): two transactions append to x and y in opposite orders."""
    h = History()
    h.t(a("x", 1), a("y", 1), at=(0, 100))
    h.t(a("x", 2), a("y", 2), at=(0, 100))
    h.t(r("x", [1, 2]), r("y", [2, 1]))
    got = check(h.txns)
    assert got["anomaly-types"] == ["G0"] and got["valid?"] is False
    assert [s["type"] for s in got["anomalies"]["G0"][0]["steps"]] == ["ww", "ww"]
    assert "read-uncommitted" in got["not"]


def test_g1c_circular_information_flow() -> None:
    h = History()
    h.t(a("x", 1), r("y", [1]), at=(0, 100))
    h.t(a("y", 1), r("x", [1]), at=(0, 100))
    got = check(h.txns)
    assert got["anomaly-types"] == ["G1c"], got
    assert sorted(s["type"] for s in got["anomalies"]["G1c"][0]["steps"]) == ["wr", "wr"]
    assert check(h.txns, ("read-uncommitted",))["valid?"] is True  # only G0 prohibited


def test_g_single_read_skew_and_g2_write_skew() -> None:
    h = History()  # T0 sees T1's z but not its x: one rw edge, then wr back
    h.t(r("x", []), r("z", [1]), at=(0, 100))
    h.t(a("x", 1), a("z", 1), at=(0, 100))
    h.t(r("x", [1]))
    got = check(h.txns)
    assert got["anomaly-types"] == ["G-single"], got
    assert sorted(s["type"] for s in got["anomalies"]["G-single"][0]["steps"]) == ["rw", "wr"]
    assert check(h.txns, ("read-committed",))["valid?"] is True
    assert check(h.txns, ("snapshot-isolation",))["valid?"] is False
    h = History()  # write skew: each reads what the other appends to, empty
    h.t(r("x", []), a("y", 1), at=(0, 100))
    h.t(r("y", []), a("x", 1), at=(0, 100))
    h.t(r("x", [1]), r("y", [1]))
    got = check(h.txns)
    assert got["anomaly-types"] == ["G2-item"], got
    assert [s["type"] for s in got["anomalies"]["G2-item"][0]["steps"]] == ["rw", "rw"]
    assert check(h.txns, ("snapshot-isolation",))["valid?"] is True
    assert check(h.txns, ("serializable",))["valid?"] is False


def test_a_stale_read_after_a_completed_append_is_a_realtime_anomaly() -> None:
    h = History()
    h.t(a("x", 1))
    h.t(r("x", []))  # began after the append completed, yet missed it
    h.t(r("x", [1]))
    got = check(h.txns)
    assert got["anomaly-types"] == ["G-single-realtime"], got
    assert sorted(s["type"] for s in got["anomalies"]["G-single-realtime"][0]["steps"]) \
        == ["rt", "rw"]
    assert check(h.txns, ("serializable",))["valid?"] is True  # no real-time order there


def test_models_and_the_workload_section() -> None:
    assert set(PROHIBITS) == set(CONSISTENCY_MODELS)
    h = History()
    h.t(r("x", []), a("y", 1), at=(0, 100))
    h.t(r("y", []), a("x", 1), at=(0, 100))
    h.t(r("x", [1]), r("y", [1]))
    ops = [Operation("n0", 0, t.process, "txn", t.mops, t.invoke_t, t.type, t.mops,
                     t.complete_t) for t in h.txns]
    ops.append(Operation("n0", 0, "c9", "txn", "junk", 500, "info"))  # not a transaction
    checks, section = check_txn(ops, "txn-list-append")
    assert checks["maelstrom_txn"]["violations"] == 1
    assert checks["maelstrom_txn"]["examples"][0]["type"] == "G2-item"
    assert section["txns"] == {"ok": 3, "fail": 0, "info": 0, "malformed": 1}
    w = section["workload_results"]
    assert w["valid?"] is False and w["anomaly-types"] == ["G2-item"]
    assert w["consistency-models"] == ["strict-serializable"]
    checks, section = check_txn(ops, "txn-list-append", ("snapshot-isolation",))
    assert checks["maelstrom_txn"]["violations"] == 0
    assert section["workload_results"]["valid?"] is True
    assert section["anomaly_types"] == ["G2-item"]  # found, but allowed


# -- the generator and the client ------------------------------------------------------------
def test_the_generator_makes_short_transactions_on_retiring_keys() -> None:
    g = Generator("txn-list-append", 1, 3, 0, random.Random(5), key_count=2,
                  max_writes_per_key=3, max_txn_length=3)
    seen: dict[int, list[int]] = {}
    lengths = set()
    for _ in range(200):
        op = g.next("c1")
        assert op.f == "txn" and op.body == {"type": "txn", "txn": op.value}
        lengths.add(len(op.value))
        for f, k, v in op.value:
            assert f in ("r", "append")
            if f == "append":
                assert v % 3 == 1 and (not seen.get(k) or v > seen[k][-1])  # unique, rising
                seen.setdefault(k, []).append(v)
            else:
                assert v is None
    assert lengths == {1, 2, 3}
    assert len(g.active) == 2 and max(seen) > 1  # keys retired after 3 appends
    assert all(len(vs) <= 3 for vs in seen.values())
    txn = Op("txn", {"type": "txn", "txn": [r(0, None), a(0, 4)]}, [r(0, None), a(0, 4)])
    done = [r(0, [1, 4]), a(0, 4)]
    assert completion(txn, {"type": "txn_ok", "txn": done}) == ("ok", done, "")
    assert completion(txn, {"type": "txn_ok", "txn": [r(0, None), a(0, 4)]})[0] == "ok"
    for bad in ([r(0, [1])], [r(0, 3), a(0, 4)], [r(1, []), a(0, 4)], [r(0, []), a(0, 5)]):
        assert completion(txn, {"type": "txn_ok", "txn": bad})[0] == "info", bad
    assert completion(txn, {"type": "error", "code": 30, "text": "conflict"})[0] == "fail"
    assert completion(txn, {"type": "error", "code": 0, "text": "timeout"})[0] == "info"


def test_flags_reach_the_experiment(tmp_path: Path) -> None:
    def spec(*args: str) -> dict[str, Any]:
        r = run_cli("maelstrom", "test", "--bin", TXN, "--dry-run", "--out", str(tmp_path),
                    "-w", "txn-list-append", *args)
        assert r.returncode == 0, r.stdout + r.stderr
        return dict(yaml.safe_load(r.stdout.split("dry run")[0])["workload"])

    w = spec("--key-count", "4", "--max-writes-per-key", "8", "--max-txn-length", "2",
             "--consistency-models", "serializable,read-committed")
    assert (w["key_count"], w["max_writes_per_key"], w["max_txn_length"]) == (4, 8, 2)
    assert w["consistency_models"] == ["serializable", "read-committed"]
    r = run_cli("maelstrom", "test", "--bin", TXN, "--dry-run", "--out", str(tmp_path),
                "-w", "txn-list-append", "--consistency-models", "linearizable")
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "'linearizable'" in lines[0], lines


# -- end to end ----------------------------------------------------------------------------------
def _test(out: Path, *args: str, workload: str = "txn-list-append"
          ) -> tuple[int, dict[str, Any], dict[str, Any], str]:
    r = run_cli("maelstrom", "test", "-w", workload, "--bin", TXN, "--out",
                str(out), "--settle", "1", "--node-count", "3", "--time-limit", "4",
                "--rate", "40", "--concurrency", "2n", "--key-count", "3", *args)
    runs = sorted(p for p in out.iterdir() if p.is_dir()) if out.exists() else []
    assert runs, r.stdout + r.stderr
    run = runs[-1]
    return (r.returncode, json.loads((run / "summary.json").read_text()),
            json.loads((run / "results.json").read_text()), r.stdout + r.stderr)


def test_transactions_applied_one_at_a_time_are_strict_serializable(tmp_path: Path) -> None:
    code, s, res, out = _test(tmp_path, "--", "--serial")
    assert code == 0 and res["valid?"] is True, out
    m = s["maelstrom"]
    assert m["txns"]["ok"] > 10, m["txns"]  # a loaded machine: generous
    assert res["workload"]["anomaly-types"] == [] and res["workload"]["valid?"] is True
    assert m["transit_ms"]["n1->n0"]["p50"] >= 0  # forwarded to n0 over the network


def test_nodes_applying_their_own_transactions_are_flagged(tmp_path: Path) -> None:
    """Each node keeps its own lists: reads of one key on two nodes diverge, which no model
    allows (incompatible-order), not even the weakest."""
    code, s, res, out = _test(tmp_path, "--consistency-models", "read-uncommitted", "--",
                              "--local")
    assert code == 1 and res["valid?"] is False, out
    kinds = res["workload"]["anomaly-types"]
    assert "incompatible-order" in kinds, kinds
    assert s["checks"]["maelstrom_txn"]["violations"] >= 1
    assert "Analysis invalid!" in out
    report = next(p for p in tmp_path.iterdir() if p.is_dir()) / "report.html"
    assert "incompatible-order" in report.read_text()  # the report's anomalies row
