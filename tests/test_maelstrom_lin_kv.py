"""Maelstrom's lin-kv workload (docs/maelstrom.md, lin-kv): the linearizability checker
(analysis/linearizability.py) on hand-written register histories it must flag and must not
flag, the generator and the clients' completions, then end to end on the local backend with
this project's programs (tests/maelstrom_nodes/lin_kv.py): one that forwards to the lin-kv
service (valid), one that keeps a copy per node (stale reads: invalid)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import yaml

from analysis.linearizability import RegisterOp, check
from analysis.maelstrom import Operation, check_lin_kv, results
from nodes.maelstrom import Generator, Op, completion
from tests.inproc import run_cli

NODES = Path(__file__).resolve().parent / "maelstrom_nodes"
LIN_KV = str(NODES / "lin_kv.py")


def w(v: Any, a: int, b: int | None, type_: str = "ok") -> RegisterOp:
    return RegisterOp("write", v, a, b, type_)


def r(v: Any, a: int, b: int, type_: str = "ok") -> RegisterOp:
    return RegisterOp("read", v, a, b, type_)


def cas(frm: Any, to: Any, a: int, b: int | None, type_: str = "ok") -> RegisterOp:
    return RegisterOp("cas", [frm, to], a, b, type_)


# -- the checker ---------------------------------------------------------------------------------
def test_the_classic_stale_read_is_not_linearizable() -> None:
    """write 1 completes, then a read that begins later returns the older 0."""
    got = check([w(0, 0, 10), w(1, 20, 30), r(0, 40, 50)])
    assert got.valid is False
    assert got.op is not None and got.op.f == "read" and got.op.value == 0
    assert got.previous_ok is not None and got.previous_ok.value == 1 and got.state == 1


def test_two_reads_that_see_a_write_then_not_are_not_linearizable() -> None:
    """A write overlaps both reads, but the first read sees its value and the second, which
    begins after the first ended, the value before it (Herlihy and Wing's register
    example)."""
    assert check([w(0, 0, 1), w(1, 10, 100), r(1, 20, 30), r(0, 40, 50)]).valid is False
    # the reads the other way round are fine: the write lands between them
    assert check([w(0, 0, 1), w(1, 10, 100), r(0, 20, 30), r(1, 40, 50)]).valid is True


def test_a_valid_concurrent_history() -> None:
    """Three overlapping writes read as 3, 2, 1: the order w3, w2, w1 fits every read."""
    ops = [w(1, 0, 100), w(2, 5, 60), w(3, 10, 50), r(3, 20, 40), r(2, 61, 65),
           r(1, 110, 120)]
    assert check(ops).valid is True
    # once every write is over, the register cannot go back to an earlier value
    assert check([*ops, r(2, 130, 140)]).valid is False


def test_an_indeterminate_write_is_allowed_either_way() -> None:
    before = [w(0, 0, 10), w(1, 20, None, "info")]
    assert check([*before, r(0, 30, 40)]).valid is True  # it never happened
    assert check([*before, r(1, 30, 40)]).valid is True  # it happened
    assert check([*before, r(0, 30, 40), r(1, 50, 60)]).valid is True  # it happened late
    # ... but once seen it cannot be undone
    assert check([*before, r(1, 30, 40), r(0, 50, 60)]).valid is False
    # a failed write never happened
    assert check([w(0, 0, 10), w(1, 20, 30, "fail"), r(1, 40, 50)]).valid is False


def test_compare_and_set_follows_the_register() -> None:
    assert check([w(0, 0, 10), cas(0, 2, 20, 30), r(2, 40, 50)]).valid is True
    assert check([w(0, 0, 10), cas(1, 2, 20, 30), r(2, 40, 50)]).valid is False
    # an indeterminate cas may have taken effect
    assert check([w(0, 0, 10), cas(0, 4, 20, None, "info"), r(4, 40, 50)]).valid is True
    assert check([w(0, 0, 10), cas(3, 4, 20, None, "info"), r(4, 40, 50)]).valid is False
    assert check([r(None, 0, 1)]).valid is True  # the initial state: nothing written


def test_a_search_out_of_time_is_unknown() -> None:
    """Ten overlapping writes and a read of a value none wrote: every subset of the
    writes is a state to explore; with no time the verdict is unknown, with time false."""
    ops = [w(v, v, 1000) for v in range(10)] + [r(99, 2000, 2001)]
    assert check(ops, time_limit_s=0.0).valid == "unknown"
    assert check(ops).valid is False


def test_keys_are_independent_registers_and_results_have_maelstroms_keys() -> None:
    def op(f: str, value: Any, a: int, b: int, result: Any = None, type_: str = "ok"
           ) -> Operation:
        return Operation("n1", 0, "c1", f, value, a, type_, result, b)

    ops = [op("write", [0, 1], 0, 10), op("write", [1, 1], 0, 10),
           op("write", [1, 2], 20, 30), op("read", [1, None], 40, 50, [1, 1]),
           op("read", [0, None], 40, 50, [0, 1]), op("cas", [0, [1, 3]], 60, 70),
           op("read", [0, None], 80, 90, [0, 3])]
    checks, section = check_lin_kv(ops)
    res = section["workload_results"]
    assert checks["maelstrom_linearizable"]["violations"] == 1
    assert res["valid?"] is False and res["failures"] == [1]
    assert res["results"]["0"] == {"valid?": True, "linearizable": {
        "valid?": True, "analyzer": "wgl", "explored": res["results"]["0"]["linearizable"]
        ["explored"]}}
    bad = res["results"]["1"]["linearizable"]
    assert bad["op"]["f"] == "read" and bad["op"]["value"] == [1, 1]
    summary = {"ok": False, "checks": {k: v for k, v in checks.items()},
               "maelstrom": {"ops": {"total": 7, "ok": 7}, "by_f": {}, **section}}
    out = results(summary)
    assert out["valid?"] is False and out["workload"]["failures"] == [1]
    # unknown: the summary is ok (no violation), the checker could not decide
    section["workload_results"]["valid?"] = "unknown"
    assert results({**summary, "ok": True})["valid?"] == "unknown"


# -- the generator and the client ------------------------------------------------------------
def test_generator_and_completions() -> None:
    g = Generator("lin-kv", 0, 2, 0, random.Random(1), key_count=2)
    ops = [g.next("c1") for _ in range(300)]
    assert {o.f for o in ops} == {"read", "write", "cas"}
    assert {o.body["key"] for o in ops} == {0, 1}
    assert all(0 <= o.value[1] < 5 for o in ops if o.f == "write")
    read = Op("read", {"type": "read", "key": 3}, [3, None])
    assert completion(read, {"type": "read_ok", "value": 4}) == ("ok", [3, 4], "")
    assert completion(read, {"type": "error", "code": 20})[0] == "fail"
    assert completion(read, {"type": "error", "code": 0})[0] == "fail"  # reads change nothing
    c = Op("cas", {"type": "cas", "key": 3, "from": 1, "to": 2}, [3, [1, 2]])
    assert completion(c, {"type": "cas_ok"}) == ("ok", [3, [1, 2]], "")
    assert completion(c, {"type": "error", "code": 22})[0] == "fail"
    assert completion(c, {"type": "error", "code": 0})[0] == "info"


def test_key_count_and_max_writes_per_key_reach_the_experiment(tmp_path: Path) -> None:
    def spec(*args: str) -> dict[str, Any]:
        r = run_cli("maelstrom", "test", "--bin", LIN_KV, "--dry-run", "--out", str(tmp_path),
                    *args)
        assert r.returncode == 0, r.stdout + r.stderr
        return dict(yaml.safe_load(r.stdout.split("dry run")[0])["workload"])

    assert spec("-w", "lin-kv", "--key-count", "2")["key_count"] == 2
    kafka = spec("-w", "kafka", "--key-count", "4", "--max-writes-per-key", "8")
    assert (kafka["key_count"], kafka["max_writes_per_key"]) == (4, 8)
    assert "key_count" not in spec("-w", "echo", "--key-count", "2")  # no keys to count


# -- end to end ----------------------------------------------------------------------------------
def _test(out: Path, *args: str) -> tuple[int, dict[str, Any], dict[str, Any], str]:
    r = run_cli("maelstrom", "test", "-w", "lin-kv", "--bin", LIN_KV, "--out", str(out),
                "--settle", "1", *args)
    runs = sorted(p for p in out.iterdir() if p.is_dir()) if out.exists() else []
    assert runs, r.stdout + r.stderr
    run = runs[-1]
    return (r.returncode, json.loads((run / "summary.json").read_text()),
            json.loads((run / "results.json").read_text()), r.stdout + r.stderr)


def test_a_node_on_the_lin_kv_service_is_linearizable(tmp_path: Path) -> None:
    code, s, res, out = _test(tmp_path, "--node-count", "3", "--time-limit", "8", "--rate",
                              "60", "--concurrency", "2n", "--key-count", "2", "--",
                              "--proxy")
    assert code == 0 and res["valid?"] is True, out
    m = s["maelstrom"]
    assert m["keys"] == 2 and m["by_f"]["write"]["ok"] > 3 and m["by_f"]["cas"], m
    assert res["workload"]["valid?"] is True and res["workload"]["failures"] == []
    assert set(res["workload"]["results"]) == {"0", "1"}
    assert m["services"]["lin-kv read"] >= m["by_f"]["read"]["ok"]
    assert out.rstrip().splitlines()[-1].startswith("Everything looks good!")


def test_a_copy_per_node_reads_stale_values_and_is_flagged(tmp_path: Path) -> None:
    # one key, so that clients of different nodes meet on it often
    code, s, res, out = _test(tmp_path, "--node-count", "3", "--time-limit", "8", "--rate",
                              "60", "--concurrency", "2n", "--key-count", "1", "--",
                              "--local")
    assert code == 1 and res["valid?"] is False, out
    assert res["workload"]["valid?"] is False and res["workload"]["failures"] == [0], out
    key = "0"
    assert res["workload"]["results"][key]["linearizable"]["op"]["f"] == "read"
    assert s["checks"]["maelstrom_linearizable"]["violations"] >= 1
    assert "Analysis invalid!" in out
