"""Maelstrom's kafka workload (docs/maelstrom.md, kafka): the checker (analysis/kafka.py) on
hand-written histories it must flag and must not flag, the clients' generator, then end to
end on the local backend with this project's program (tests/maelstrom_nodes/kafka.py): a
single leader (valid) and one that acknowledges sends it leaves out of its log (invalid)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from analysis.kafka import check_kafka
from analysis.maelstrom import Operation
from nodes.maelstrom import Generator, Op, completion
from tests.inproc import run_cli

NODES = Path(__file__).resolve().parent / "maelstrom_nodes"
KAFKA = str(NODES / "kafka.py")


class History:
    """Operations one after another (each 10 ns), per client."""

    def __init__(self) -> None:
        self.ops: list[Operation] = []

    def _op(self, client: str, f: str, value: Any, result: Any, type_: str = "ok",
            final: bool = False) -> None:
        t = 10 * len(self.ops)
        self.ops.append(Operation("n0", 0, client, f, value, t, type_, result, t + 5,
                                  final=final))

    def send(self, client: str, key: str, msg: int, offset: int | None,
             type_: str = "ok") -> None:
        self._op(client, "send", [key, msg], [key, [offset, msg]] if type_ == "ok"
                 else [key, msg], type_)

    def poll(self, client: str, asked: dict[str, int], msgs: dict[str, list[list[int]]],
             final: bool = False) -> None:
        self._op(client, "poll", asked, msgs, final=final)

    def assign(self, client: str, keys: list[str], committed: dict[str, int]) -> None:
        self._op(client, "list_committed_offsets", keys, committed)


def _valid_history() -> History:
    h = History()
    h.send("c1", "k", 10, 0)
    h.send("c2", "k", 20, 1)
    h.assign("c3", ["k"], {})
    h.poll("c3", {"k": 0}, {"k": [[0, 10]]})
    h._op("c3", "commit_offsets", {"k": 0}, {"k": 0})
    h.send("c1", "k", 30, 2)
    h.poll("c3", {"k": 1}, {"k": [[1, 20], [2, 30]]})
    h.send("c1", "k", 40, None, "info")  # unknown outcome: never read, no anomaly
    h.send("c1", "k", 50, None, "fail")
    h.assign("c4", ["k"], {"k": 0})
    h.poll("c4", {"k": 0}, {"k": [[0, 10], [1, 20]]})  # from the committed offset
    return h


def test_a_valid_history_has_no_anomaly() -> None:
    got = check_kafka(_valid_history().ops)
    assert got == {"valid?": True, "error-types": [], "bad-error-types": [],
                   "info-txn-causes": []}


def test_a_lost_write_and_an_unseen_message_are_flagged() -> None:
    """Offset 1 was acknowledged, offset 2 read, offset 1 never: a lost write (and unseen)."""
    h = History()
    for i, msg in enumerate((10, 20, 30)):
        h.send("c1", "k", msg, i)
    h.poll("c2", {"k": 0}, {"k": [[0, 10], [2, 30]]})
    got = check_kafka(h.ops)
    assert got["valid?"] is False
    assert got["error-types"] == ["int-poll-skip", "lost-write", "unseen"]
    lost = got["lost-write"]["errs"][0]
    assert (lost["key"], lost["value"], lost["index"], lost["max-read-index"]) == ("k", 20, 1, 2)
    assert got["int-poll-skip"]["errs"][0]["skipped"] == [20]
    assert got["unseen"] == {"unseen": {"k": 1}, "messages": {"k": [20]}}
    # acknowledged past everything any poll read: unseen only (no recency required ...)
    h = History()
    h.send("c1", "k", 10, 0)
    h.send("c1", "k", 20, 1)
    h.poll("c2", {"k": 0}, {"k": [[0, 10]]})
    got = check_kafka(h.ops)
    assert got["error-types"] == ["unseen"]  # ... but the final polls must see it


def test_offsets_that_disagree_are_flagged() -> None:
    h = History()
    h.send("c1", "k", 10, 0)
    h.send("c2", "k", 20, 0)  # two messages at one offset
    h.send("c1", "j", 30, 0)
    h.send("c1", "j", 30, 1)  # ... and the same message at two (a retried send)
    h.poll("c3", {"k": 0, "j": 0}, {"k": [[0, 10]], "j": [[0, 30], [1, 30]]})
    got = check_kafka(h.ops)
    assert "inconsistent-offsets" in got["error-types"] and "duplicate" in got["error-types"]
    assert got["inconsistent-offsets"]["errs"][0] == {"key": "k", "offset": 0, "index": 0,
                                                      "values": [10, 20]}
    assert got["duplicate"]["errs"][0] == {"key": "j", "value": 30, "count": 2,
                                           "offsets": [0, 1]}


def test_a_client_whose_polls_go_back_or_skip_is_flagged() -> None:
    h = History()
    for i in range(5):
        h.send("c1", "k", 10 * i, i)
    h.poll("c2", {"k": 0}, {"k": [[0, 0], [1, 10]]})
    h.poll("c2", {"k": 2}, {"k": [[1, 10], [2, 20]]})  # starts where the last ended
    h.poll("c2", {"k": 3}, {"k": [[4, 40]]})  # skips offset 3
    h.poll("c3", {"k": 0}, {"k": [[0, 0], [1, 10], [2, 20], [3, 30], [4, 40]]})
    got = check_kafka(h.ops)
    assert got["error-types"] == ["nonmonotonic-poll", "poll-skip"], got
    assert got["nonmonotonic-poll"]["errs"][0]["values"] == [10, 10]
    assert got["poll-skip"]["errs"][0]["skipped"] == [30]
    # a first poll after an assign that starts past the committed offset skips too
    h = History()
    for i in range(3):
        h.send("c1", "k", 10 * i, i)
    h.assign("c2", ["k"], {"k": 1})
    h.poll("c2", {"k": 1}, {"k": [[2, 20]]})
    h.poll("c3", {"k": 0}, {"k": [[0, 0], [1, 10], [2, 20]]})
    got = check_kafka(h.ops)
    assert got["error-types"] == ["poll-skip"] and got["poll-skip"]["errs"][0]["requested"] == 1
    # the final polls start again from offset 0: not going back
    h = _valid_history()
    h.poll("c3", {"k": 0}, {"k": [[0, 10], [1, 20], [2, 30]]}, final=True)
    assert check_kafka(h.ops)["valid?"] is True


def test_a_failed_send_that_is_read_and_sends_that_go_back() -> None:
    h = History()
    h.send("c1", "k", 10, None, "fail")
    h.send("c1", "k", 20, 1)
    h.send("c1", "k", 30, 0)  # c1's second acknowledged send lands before its first
    h.poll("c2", {"k": 0}, {"k": [[0, 30], [1, 20], [2, 10]]})
    got = check_kafka(h.ops)
    assert set(got["error-types"]) == {"G1a", "nonmonotonic-send"}, got
    assert got["G1a"]["errs"][0]["value"] == 10
    assert got["nonmonotonic-send"]["errs"][0]["values"] == [20, 30]


# -- the generator and the client ------------------------------------------------------------
def test_the_client_assigns_polls_commits_and_polls_to_the_end() -> None:
    g = Generator("kafka", 0, 2, 0, random.Random(3), key_count=2, max_writes_per_key=4)
    first = g.next("c1")
    assert first.f == "list_committed_offsets" and first.value == ["0", "1"]
    g.observe("c1", first, "ok", {"0": 3})
    assert g.consumers["c1"].offsets == {"0": 3, "1": 0}
    sent: set[int] = set()
    for _ in range(200):
        op = g.next("c1")
        if op.f == "send":
            assert op.value[1] not in sent
            sent.add(op.value[1])
            g.observe("c1", op, "ok", [op.value[0], [5, op.value[1]]])
        elif op.f == "poll":
            got = {k: [[o, 7]] for k, o in op.value.items()}
            g.observe("c1", op, "ok", got)
            nxt = g.next("c1")  # what a poll read is committed next
            assert nxt.f == "commit_offsets" and nxt.value == {k: o for k, o in op.value.items()}
    assert len(g.active) == 2 and max(g.active) > 1  # keys retired after 4 sends
    final = g.final("c1")
    assert final is not None and set(final.value.values()) == {0}
    g.observe("c1", final, "ok", {k: [[o, 7] for o in range(top + 1)]
                                  for k, top in g.max_offsets.items()})
    assert g.final("c1") is None  # caught up with every offset this host saw
    send = Op("send", {"type": "send", "key": "k", "msg": 9}, ["k", 9])
    assert completion(send, {"type": "send_ok", "offset": 4}) == ("ok", ["k", [4, 9]], "")
    assert completion(send, {"type": "send_ok", "offset": "4"})[0] == "info"
    poll = Op("poll", {"type": "poll", "offsets": {"k": 0}}, {"k": 0})
    assert completion(poll, {"type": "poll_ok", "msgs": {"k": [[0, 9]]}})[1] == {"k": [[0, 9]]}
    assert completion(poll, {"type": "poll_ok", "msgs": {"k": [0, 9]}})[0] == "info"


# -- end to end ----------------------------------------------------------------------------------
def _test(out: Path, *args: str) -> tuple[int, dict[str, Any], dict[str, Any], str]:
    r = run_cli("maelstrom", "test", "-w", "kafka", "--bin", KAFKA, "--out", str(out),
                "--settle", "1", "--node-count", "3", "--time-limit", "8", "--rate", "60",
                "--concurrency", "2n", *args)
    runs = sorted(p for p in out.iterdir() if p.is_dir()) if out.exists() else []
    assert runs, r.stdout + r.stderr
    run = runs[-1]
    return (r.returncode, json.loads((run / "summary.json").read_text()),
            json.loads((run / "results.json").read_text()), r.stdout + r.stderr)


def test_a_single_leader_is_valid(tmp_path: Path) -> None:
    code, s, res, out = _test(tmp_path)
    assert code == 0 and res["valid?"] is True, out
    m = s["maelstrom"]
    # a loaded 2-core machine: 19 sends of 80 operations seen at a load average of 18
    assert m["acknowledged_sends"] > 5 and m["by_f"]["commit_offsets"]["ok"] > 2, m["by_f"]
    assert m["by_f"]["list_committed_offsets"]["ok"] >= 6  # each client assigns first
    assert res["workload"]["error-types"] == [] and res["workload"]["valid?"] is True
    assert m["transit_ms"]["n1->n0"]["p50"] >= 0  # forwarded to the leader over the network


def test_a_leader_that_loses_sends_is_flagged(tmp_path: Path) -> None:
    code, s, res, out = _test(tmp_path, "--", "--lose", "5")
    assert code == 1 and res["valid?"] is False, out
    kinds = res["workload"]["error-types"]
    assert {"lost-write", "unseen"} <= set(kinds), kinds
    assert res["workload"]["bad-error-types"] == kinds
    assert res["workload"]["lost-write"]["count"] > 0
    assert s["checks"]["maelstrom_kafka"]["violations"] == len(kinds)
    assert "Analysis invalid!" in out
