"""Maelstrom's services (docs/maelstrom.md, Services): their semantics on their own
(nodes/maelstrom_services.py), then end to end on the local backend with this project's
program on them (tests/maelstrom_nodes/kv.py): a seq-kv counter, lin-kv, lin-tso, a
partition cutting a node from the service host, an unknown destination answered with
error 1; and one run on mininet."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodes.maelstrom_services import LinTSO, LwwKV, SeqKV, Services
from tests.inproc import run_cli

NODES = Path(__file__).resolve().parent / "maelstrom_nodes"
KV = str(NODES / "kv.py")


# -- the services on their own -----------------------------------------------------------------
def test_lin_kv_reads_writes_and_compare_and_sets_with_maelstroms_errors() -> None:
    s = Services("t")

    def ask(body: dict[str, Any]) -> dict[str, Any]:
        return s.handle("lin-kv", "n0", {**body, "msg_id": 7})

    assert ask({"type": "read", "key": "x"}) == {"type": "error", "code": 20,
                                                 "text": "key does not exist", "in_reply_to": 7}
    assert ask({"type": "cas", "key": "x", "from": 1, "to": 2})["code"] == 20
    assert ask({"type": "cas", "key": "x", "from": 1, "to": 2, "create_if_not_exists": True}
               ) == {"type": "cas_ok", "in_reply_to": 7}
    assert ask({"type": "read", "key": "x"})["value"] == 2
    assert ask({"type": "cas", "key": "x", "from": 1, "to": 3})["code"] == 22
    assert ask({"type": "cas", "key": "x", "from": 2.0, "to": 3})["code"] == 22  # JSON values
    assert ask({"type": "write", "key": [1, "k"], "value": {"a": 1}})["type"] == "write_ok"
    assert ask({"type": "read", "key": [1, "k"]})["value"] == {"a": 1}
    assert ask({"type": "write", "key": "x"})["code"] == 12  # no value: malformed
    assert ask({"type": "append", "key": "x"})["code"] == 10  # not supported
    assert s.handle("lin-tso", "n0", {"type": "ts"}) == {"type": "ts_ok", "ts": 0}
    tso = LinTSO()
    assert [tso.handle(f"n{k % 3}", {"type": "ts"})["ts"] for k in range(5)] == [0, 1, 2, 3, 4]


def test_seq_kv_is_stale_but_monotonic_per_caller_and_total_for_changes() -> None:
    """One writer counts 1, 2, ...; readers see old values (stale reads happen), never an
    older one than they saw before, and a reader that writes sees the latest state."""
    kv = SeqKV(random.Random(3))
    seen: dict[str, int] = {"n1": 0, "n2": 0}
    stale = 0
    for v in range(1, 200):
        kv.handle("n0", {"type": "write", "key": "k", "value": v})
        for reader in seen:
            got = kv.handle(reader, {"type": "read", "key": "k"})
            now = got.get("value", 0)
            assert now >= seen[reader], (reader, now, seen[reader])  # monotonic
            stale += now < v
            seen[reader] = now
    assert stale > 50  # Maelstrom's seq-kv serves past states
    kv.handle("n1", {"type": "write", "key": "mine", "value": 1})  # a change: latest state
    assert kv.handle("n1", {"type": "read", "key": "k"})["value"] == 199
    # A cas that changes the store acts on its latest state: it fails against 199 ...
    assert kv.handle("n2", {"type": "cas", "key": "k", "from": 5, "to": 6})["code"] == 22
    # ... and holds against it.
    assert kv.handle("n2", {"type": "cas", "key": "k", "from": 199, "to": 200})["type"] == "cas_ok"


def test_lww_kv_reads_go_back_in_time_and_cas_never_creates() -> None:
    kv = LwwKV(random.Random(5))
    assert kv.handle("n0", {"type": "cas", "key": "k", "from": 0, "to": 1,
                            "create_if_not_exists": True})["code"] == 20
    reads = []
    for v in range(100):
        kv.handle("n0", {"type": "write", "key": "k", "value": v})
        reads.append(kv.handle("n1", {"type": "read", "key": "k"}).get("value", -1))
    assert any(b < a for a, b in zip(reads, reads[1:], strict=False))  # replicas differ
    for _ in range(50):  # merges spread the last write
        kv.handle("n1", {"type": "read", "key": "other"})
    assert {kv.handle("n1", {"type": "read", "key": "k"})["value"] for _ in range(10)} == {99}


# -- end to end ----------------------------------------------------------------------------------
def _test(out: Path, *args: str) -> tuple[int, dict[str, Any], dict[str, Any], Path, str]:
    r = run_cli("maelstrom", "test", "--out", str(out), "--settle", "1", *args)
    runs = sorted(p for p in out.iterdir() if p.is_dir()) if out.exists() else []
    assert runs, r.stdout + r.stderr
    run = runs[-1]
    return (r.returncode, json.loads((run / "summary.json").read_text()),
            json.loads((run / "results.json").read_text()), run, r.stdout + r.stderr)


def test_a_counter_on_seq_kv_reads_back_the_sum(tmp_path: Path) -> None:
    code, s, res, run, out = _test(tmp_path, "-w", "g-counter", "--bin", KV, "--node-count",
                                   "2", "--time-limit", "8", "--rate", "2000",
                                   "--concurrency", "2n", "--", "--counter", "seq-kv")
    m = s["maelstrom"]
    assert code == 0 and res["valid?"] is True, out
    assert m["ops"]["ok"] > 300, m["ops"]  # a loaded 2-core machine; ~800 seen here
    assert set(m["final_values"].values()) == {m["acknowledged_sum"]}
    services = m["services"]
    assert services["seq-kv cas_ok"] == m["by_f"]["add"]["ok"]  # one cas holds per add
    assert services.get("seq-kv error", 0) > 0  # stale reads made cas fail (22) and retry
    # The requests crossed the network: n1's went to n0's agent and are in the statistics.
    assert m["transit_ms"]["n1->seq-kv"]["p50"] >= 0
    assert res["net"]["servers"]["msg-count"] == m["server_messages"] > 4 * m["ops"]["ok"]
    assert out.rstrip().splitlines()[-1].startswith("Everything looks good!")


def test_lin_kv_counter_and_lin_tso_ids(tmp_path: Path) -> None:
    code, s, res, _, out = _test(tmp_path / "a", "-w", "pn-counter", "--bin", KV,
                                 "--node-count", "3", "--time-limit", "6", "--rate", "60",
                                 "--", "--counter", "lin-kv")
    assert code == 0 and res["valid?"] is True, out
    assert s["maelstrom"]["services"]["lin-kv cas_ok"] > 10
    code, s, res, _, out = _test(tmp_path / "b", "-w", "unique-ids", "--bin", KV,
                                 "--node-count", "3", "--time-limit", "6", "--rate", "60",
                                 "--", "--tso")
    assert code == 0 and res["valid?"] is True, out
    assert s["maelstrom"]["ids"] == s["maelstrom"]["services"]["lin-tso ts_ok"] > 20


def test_a_partition_cuts_a_node_from_the_service(tmp_path: Path) -> None:
    """The services live in n0's agent: while n1 is cut off, its requests to seq-kv get no
    reply, so the program times them out (error 0: indefinite, `info`); n2 keeps counting,
    and after the partition every final read has the sum."""
    r = run_cli("maelstrom", "test", "-w", "g-counter", "--bin", KV, "--node-count", "3",
                "--time-limit", "10", "--rate", "60", "--dry-run", "--out", str(tmp_path),
                "--", "--counter", "seq-kv")
    assert r.returncode == 0, r.stdout + r.stderr
    spec = yaml.safe_load(r.stdout.split("dry run")[0])
    spec["faults"] = [{"kind": "partition", "isolate": "n1", "at": "3s", "for": "5s"}]
    spec["drain"] = "1s"
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump(spec))
    r = run_cli("run", str(exp), "--out", str(tmp_path / "runs"))
    run = next((tmp_path / "runs").iterdir())
    s = json.loads((run / "summary.json").read_text())
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(x) for x in (run / "nodes" / "n1" / "events.jsonl").read_text()
            .splitlines()]
    timeouts = [x for x in rows if x["ev"] == "op" and x["type"] == "info"
                and x.get("error", "").startswith("error 0 timeout")]
    assert timeouts, [x for x in rows if x["ev"] == "op"][:20]
    stop = [x for x in rows if x["ev"] == "stop"][0]
    assert stop["counters"]["blocked_out"] > 0  # n1's requests to n0's services, cut
    n2_ok = sum(1 for x in (run / "nodes" / "n2" / "events.jsonl").read_text().splitlines()
                if '"type":"ok"' in x and '"ev":"op"' in x)
    assert n2_ok > 10
    assert s["ok"] and s["checks"]["maelstrom_final_value"]["violations"] == 0


def test_an_unknown_destination_is_answered_with_node_not_found(tmp_path: Path) -> None:
    """The probe answers an echo only once its request to `seqkv` (no such node) came back
    as error 1: the run is valid exactly when the harness answers that way, and says so."""
    code, s, res, run, out = _test(tmp_path, "-w", "echo", "--bin", KV, "--node-count", "2",
                                   "--time-limit", "5", "--rate", "20", "--", "--probe",
                                   "seqkv")
    assert code == 0 and res["valid?"] is True, out
    unknown = s["maelstrom"]["unknown_destinations"]
    assert unknown["dests"] == {"seqkv": unknown["messages"]} and unknown["messages"] >= 3
    assert unknown["messages"] == s["maelstrom"]["ops"]["ok"]
    assert res["net"]["unknown-destinations"] == unknown
    assert any("node-not-found" in n for n in res["notes"])
    assert "answered with error 1 node-not-found" in out
    assert s["maelstrom"]["malformed"] == 0


@pytest.mark.root
def test_a_counter_on_seq_kv_on_mininet(tmp_path: Path) -> None:
    """The service requests cross mininet's data plane from each host to n0's."""
    pytest.importorskip("mininet")
    code, s, res, _, out = _test(tmp_path, "-w", "g-counter", "--bin", KV, "--node-count",
                                 "3", "--time-limit", "6", "--rate", "60", "--latency", "5",
                                 "--backend", "mininet", "--", "--counter", "seq-kv")
    m = s["maelstrom"]
    assert code == 0 and res["valid?"] is True, out
    assert set(m["final_values"].values()) == {m["acknowledged_sum"]} and m["ops"]["ok"] > 20
    assert m["transit_ms"]["n1->seq-kv"]["p50"] >= 5.0  # the emulated link's delay
