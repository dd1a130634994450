"""Maelstrom's txn-rw-register workload (docs/maelstrom.md, txn-rw-register): Elle's
rw-register checker (analysis/elle_rw_register.py) on hand-written histories, one per anomaly
it claims and a serial one it must not flag, the generator and the clients' completions, then
end to end on the local backend with tests/maelstrom_nodes/txn.py: transactions applied one
at a time on n0 (valid), each node applying its own (lost updates) and n0 leaving a
transaction's first write to a register for the others (intermediate reads)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import yaml

from analysis.elle_rw_register import check
from analysis.maelstrom import Operation, check_txn
from nodes.maelstrom import Generator, Op, completion
from tests.inproc import run_cli
from tests.test_maelstrom_txn import TXN, History, _test

RW = "txn-rw-register"
SIDE = (0, 100)  # two transactions at these times overlap: no real-time order between them


def r(k: Any, v: Any) -> list[Any]:
    return ["r", k, v]


def w(k: Any, v: Any) -> list[Any]:
    return ["w", k, v]


def _types(h: History, models: tuple[str, ...] = ("strict-serializable",)) -> list[str]:
    return list(check(h.txns, models)["anomaly-types"])


def _valid(h: History, *models: str) -> bool:
    return bool(check(h.txns, models)["valid?"])


def test_a_serial_history_has_no_anomaly() -> None:
    h = History()
    h.t(w("x", 1), r("y", None))
    h.t(r("x", 1), w("y", 1), w("x", 2))  # writes follow reads: x 1 < 2
    h.t(r("x", 2), r("y", 1), w("y", 2), r("y", 2))  # reads its own write
    h.t(w("z", 1), type_="fail")  # never read
    h.t(w("z", 2), type_="info")  # read: it committed
    h.t(r("z", 2), r("x", 2))
    for models in (("strict-serializable",), ("read-committed", "serializable")):
        got = check(h.txns, models)
        assert got == {"valid?": True, "anomaly-types": [], "anomalies": {}, "not": []}, got


def test_aborted_and_intermediate_reads_internal_and_garbage() -> None:
    h = History()
    h.t(w("x", 1), type_="fail")
    h.t(r("x", 1))
    assert _types(h) == ["G1a"]
    assert check(h.txns)["anomalies"]["G1a"][0]["writer"]["type"] == "fail"
    h = History()
    h.t(w("x", 1), w("x", 2))
    h.t(r("x", 1))  # the value its writer overwrote before it ended
    h.t(r("x", 2))
    assert _types(h) == ["G1b"]
    assert _valid(h, "read-uncommitted") and not _valid(h, "read-committed")
    h = History()
    h.t(w("x", 1))
    h.t(w("x", 2), r("x", 1))  # misses its own write
    assert _types(h) == ["internal"]
    assert check(h.txns)["anomalies"]["internal"][0]["expected"] == 2
    h = History()
    h.t(w("x", 1), at=SIDE)
    h.t(r("x", None), r("x", 1), at=SIDE)  # a read that does not repeat
    assert _types(h) == ["internal"]
    h = History()
    h.t(r("x", 7))  # nobody wrote 7
    assert _types(h) == ["garbage-read"]
    assert not _valid(h, "read-uncommitted")


def test_g0_needs_versions_from_writes_that_follow_reads() -> None:
    """Each transaction read the other's write of one key before overwriting it: x 1 < 2 and
    y 11 < 10, so T0 -ww-> T1 -ww-> T0 (and with the reads, G1c)."""
    h = History()
    h.t(w("x", 1), r("y", 11), w("y", 10), at=SIDE)
    h.t(r("x", 1), w("x", 2), w("y", 11), at=SIDE)
    got = check(h.txns)
    assert got["anomaly-types"] == ["G0", "G1c"], got
    assert [s["type"] for s in got["anomalies"]["G0"][0]["steps"]] == ["ww", "ww"]
    assert not _valid(h, "read-uncommitted")


def test_g1c_circular_information_flow() -> None:
    h = History()
    h.t(w("x", 1), r("y", 1), at=SIDE)
    h.t(w("y", 1), r("x", 1), at=SIDE)
    got = check(h.txns)
    assert got["anomaly-types"] == ["G1c"], got
    assert [s["type"] for s in got["anomalies"]["G1c"][0]["steps"]] == ["wr", "wr"]
    assert _valid(h, "read-uncommitted") and not _valid(h, "read-committed")


def test_g_single_from_a_read_of_nil_and_g2_item_write_skew() -> None:
    h = History()  # T0 saw T1's z but not its x: nil precedes every version of x
    h.t(r("x", None), r("z", 1), at=SIDE)
    h.t(w("x", 1), w("z", 1), at=SIDE)
    got = check(h.txns)
    assert got["anomaly-types"] == ["G-single"], got
    assert sorted(s["type"] for s in got["anomalies"]["G-single"][0]["steps"]) == ["rw", "wr"]
    assert _valid(h, "read-committed") and not _valid(h, "snapshot-isolation")
    h = History()  # write skew
    h.t(r("x", None), w("y", 1), at=SIDE)
    h.t(r("y", None), w("x", 1), at=SIDE)
    got = check(h.txns)
    assert got["anomaly-types"] == ["G2-item"], got
    assert [s["type"] for s in got["anomalies"]["G2-item"][0]["steps"]] == ["rw", "rw"]
    assert _valid(h, "snapshot-isolation") and not _valid(h, "serializable")


def test_lost_updates() -> None:
    h = History()  # both read nil and wrote x: each misses the other (G2-item too)
    h.t(r("x", None), w("x", 1), at=SIDE)
    h.t(r("x", None), w("x", 2), at=SIDE)
    assert _types(h) == ["G2-item", "lost-update"]
    assert _valid(h, "read-committed") and not _valid(h, "snapshot-isolation")
    h = History()  # two increments of the same version, one after the other in time
    h.t(w("x", 1))
    h.t(r("x", 1), w("x", 2))
    h.t(r("x", 1), w("x", 3))
    got = check(h.txns)
    assert "lost-update" in got["anomaly-types"], got
    case = got["anomalies"]["lost-update"][0]
    assert (case["key"], case["value"], [t["index"] for t in case["txns"]]) == ("x", 1, [1, 2])


def test_a_stale_read_after_a_completed_write_is_a_realtime_anomaly() -> None:
    h = History()
    h.t(w("x", 1))
    h.t(r("x", None))  # began after the write completed, yet read nil
    got = check(h.txns)
    assert got["anomaly-types"] == ["G-single-realtime"], got
    assert sorted(s["type"] for s in got["anomalies"]["G-single-realtime"][0]["steps"]) \
        == ["rt", "rw"]
    assert _valid(h, "serializable")


def test_cyclic_versions() -> None:
    """Each read the other's write and overwrote it: x 2 < 1 and 1 < 2. The key orders by
    nil alone; the reads still make G1c."""
    h = History()
    h.t(r("x", 2), w("x", 1), at=SIDE)
    h.t(r("x", 1), w("x", 2), at=SIDE)
    got = check(h.txns)
    assert got["anomaly-types"] == ["G1c", "cyclic-versions"], got
    assert sorted(got["anomalies"]["cyclic-versions"][0]["scc"]) == [1, 2]
    assert "read-uncommitted" in got["not"]


def test_the_workload_section_and_malformed_transactions() -> None:
    h = History()
    h.t(r("x", None), w("y", 1), at=SIDE)
    h.t(r("y", None), w("x", 1), at=SIDE)
    ops = [Operation("n0", 0, t.process, "txn", t.mops, t.invoke_t, t.type, t.mops,
                     t.complete_t) for t in h.txns]
    ops.append(Operation("n0", 0, "c9", "txn", [["append", "x", 3]], 500, "info"))
    checks, section = check_txn(ops, RW)
    assert checks["maelstrom_txn"]["violations"] == 1
    assert checks["maelstrom_txn"]["examples"][0]["type"] == "G2-item"
    assert section["txns"] == {"ok": 2, "fail": 0, "info": 0, "malformed": 1}
    assert section["workload_results"]["consistency-models"] == ["strict-serializable"]
    checks, section = check_txn(ops, RW, ("snapshot-isolation",))
    assert checks["maelstrom_txn"]["violations"] == 0
    assert section["anomaly_types"] == ["G2-item"]  # found, but allowed


# -- the generator and the client ------------------------------------------------------------
def test_the_generator_writes_fresh_values_and_reads_take_any_value() -> None:
    g = Generator(RW, 1, 3, 0, random.Random(5), key_count=2, max_writes_per_key=3,
                  max_txn_length=3)
    written: dict[int, list[int]] = {}
    for _ in range(200):
        op = g.next("c1")
        assert op.f == "txn" and op.body == {"type": "txn", "txn": op.value}
        for f, k, v in op.value:
            assert f in ("r", "w") and (v is None) == (f == "r")
            if f == "w":
                assert v not in written.get(k, [])
                written.setdefault(k, []).append(v)
    assert max(written) > 1 and all(len(vs) <= 3 for vs in written.values())
    txn = Op("txn", {"type": "txn", "txn": [r(0, None), w(0, 4)]}, [r(0, None), w(0, 4)])
    for read in (None, 3, "three", [3]):
        done = [r(0, read), w(0, 4)]
        assert completion(txn, {"type": "txn_ok", "txn": done}, RW) == ("ok", done, "")
    for bad in ([r(0, 3)], [r(0, 3), w(0, 5)], [r(1, 3), w(0, 4)], [["append", 0, 3], w(0, 4)]):
        assert completion(txn, {"type": "txn_ok", "txn": bad}, RW)[0] == "info", bad
    assert completion(txn, {"type": "error", "code": 30, "text": "conflict"}, RW)[0] == "fail"


def test_flags_reach_the_experiment(tmp_path: Path) -> None:
    r_ = run_cli("maelstrom", "test", "--bin", TXN, "--dry-run", "--out", str(tmp_path),
                 "-w", RW, "--key-count", "4", "--max-writes-per-key", "8",
                 "--max-txn-length", "2", "--consistency-models", "read-committed")
    assert r_.returncode == 0, r_.stdout + r_.stderr
    got = yaml.safe_load(r_.stdout.split("dry run")[0])["workload"]
    assert got == {"maelstrom": RW, "concurrency": 5, "topology": "grid", "rate": "5/s",
                   "key_count": 4, "max_writes_per_key": 8, "max_txn_length": 2,
                   "consistency_models": ["read-committed"]}, got


# -- end to end ----------------------------------------------------------------------------------
def test_registers_applied_one_at_a_time_are_strict_serializable(tmp_path: Path) -> None:
    code, s, res, out = _test(tmp_path, "--", "--serial", workload=RW)
    assert code == 0 and res["valid?"] is True, out
    m = s["maelstrom"]
    assert m["workload"] == RW and m["txns"]["ok"] > 10, m["txns"]
    assert res["workload"]["anomaly-types"] == [] and res["workload"]["valid?"] is True


def test_nodes_with_their_own_registers_are_available_but_not_serializable(
        tmp_path: Path) -> None:
    """Each node keeps its own registers: every transaction succeeds, but a node reads nil
    of keys the others wrote. A value is read only on the node that wrote it, so the only
    edges between nodes are `rw` from reads of nil: every cycle has two, write skew
    (G2-item), or two transactions read nil and wrote the key (lost-update)."""
    code, s, res, out = _test(tmp_path, "--availability", "total", "--consistency-models",
                              "serializable", "--", "--local", workload=RW)
    assert code == 1 and res["valid?"] is False, out
    assert res["availability"] == {"valid?": True, "ok-fraction": 1.0, "expected": 1.0}
    kinds = res["workload"]["anomaly-types"]
    assert kinds and set(kinds) <= {"G2-item", "lost-update"}, kinds
    assert "Analysis invalid!" in out


def test_a_transactions_overwritten_value_left_visible_is_an_intermediate_read(
        tmp_path: Path) -> None:
    code, s, res, out = _test(tmp_path, "--key-count", "2", "--consistency-models",
                              "read-committed", "--", "--intermediate", workload=RW)
    assert code == 1 and res["valid?"] is False, out
    assert "G1b" in res["workload"]["anomaly-types"], res["workload"]["anomaly-types"]
    assert any(e["type"] == "G1b" for e in s["checks"]["maelstrom_txn"]["examples"])
    report = next(p for p in tmp_path.iterdir() if p.is_dir()) / "report.html"
    assert "G1b" in report.read_text()
