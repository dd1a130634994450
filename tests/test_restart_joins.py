"""A restarted process owes the messages sent from its join on (analysis/joins.py): from its
join point in each sender's stream -- where the protocol logs it joined (`stream_join`,
cbcast B5), or its first delivery of that sender's messages -- it must deliver every message
of that sender some correct host delivers (agreement). What came before the join binds it to
nothing. Each rule is proven by a log it must flag and one it must not: the simulator's run,
and copies of it where the restarted host skipped one message."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from analysis.joins import join_points
from analysis.judge import judge_run
from analysis.record import read_record
from tests.eventlogs import run_dir_of
from tests.inproc import TWO_SITES, run_cli

SPEC = """\
name: restart-joins
""" + TWO_SITES + """\
backend: sim
duration: 3s
drain: 1s
seed: 1
protocol: {name: PROTOCOL}
workload: {senders: all, rate: 20/s, size: 512B, arrival: poisson}
faults:
  - {kind: crash, host: h3, at: 1000ms, restart_after: 500ms}
"""


def sim_run(d: Path, protocol: str) -> Path:
    (d / "exp.yaml").write_text(SPEC.replace("PROTOCOL", protocol))
    proc = run_cli("run", str(d / "exp.yaml"), "--backend", "sim", "--no-analyze",
                   "--out", str(d / "runs"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run_dir_of(d / "runs")


@pytest.fixture(scope="module")
def cbcast_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sim_run(tmp_path_factory.mktemp("cbcast"), "cbcast")


@pytest.fixture(scope="module")
def sequencer_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sim_run(tmp_path_factory.mktemp("sequencer"), "sequencer")


def h3_events(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in
            (run / "nodes" / "h3" / "events.jsonl").read_text().splitlines()]


def after_restart(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """h3's events from its second `start` on (its incarnation h3@1)."""
    starts = [k for k, e in enumerate(events) if e["ev"] == "start"]
    return events[starts[1]:]


def mno(mid: str) -> int:
    return int(mid.rpartition(":")[2])


def copy_without(run: Path, dest: Path, mid: str, kinds: tuple[str, ...] = ("fnl", "recv")
                 ) -> Path:
    """A copy of `run` where h3 logged no event of `kinds` naming `mid`."""
    shutil.copytree(run, dest)
    log = dest / "nodes" / "h3" / "events.jsonl"
    kept = [line for line in log.read_text().splitlines()
            if not (json.loads(line).get("mid") == mid and json.loads(line)["ev"] in kinds)]
    log.write_text("\n".join(kept) + "\n")
    return dest


def test_cbcast_logs_where_a_restarted_receiver_joins_and_the_run_is_ok(
        cbcast_run: Path) -> None:
    joined = [e["mid"] for e in after_restart(h3_events(cbcast_run)) if e["ev"] == "stream_join"]
    assert sorted(m.partition(":")[0] for m in joined) == ["h1", "h2", "h4"]
    s = judge_run(read_record(cbcast_run))
    assert s["verdict"]["ok"], s["verdict"]
    agreement = s["checks"]["agreement"]
    assert agreement["violations"] == 0
    assert agreement["restarted_joins"] == {
        "h3@1": {m.partition(":")[0]: m for m in sorted(joined)}}


def test_messages_before_the_join_bind_nobody(cbcast_run: Path) -> None:
    """h3@1 never delivers what h4 sent while h3 was down, nor before its join: no finding."""
    events = after_restart(h3_events(cbcast_run))
    join = next(mno(e["mid"]) for e in events if e["ev"] == "stream_join"
                and e["mid"].startswith("h4:"))
    got = {mno(e["mid"]) for e in events if e["ev"] == "fnl" and e["mid"].startswith("h4:")}
    assert min(got) == join and not any(n < join for n in got)
    h1 = [json.loads(line) for line in
          (cbcast_run / "nodes" / "h1" / "events.jsonl").read_text().splitlines()]
    skipped = {mno(e["mid"]) for e in h1 if e["ev"] == "fnl" and e["mid"].startswith("h4:")
               and mno(e["mid"]) < join} - {mno(e["mid"]) for e in h3_events(cbcast_run)
                                            if e["ev"] == "fnl" and e["mid"].startswith("h4:")}
    assert skipped  # h4's messages h1 delivered and no incarnation of h3 did
    assert judge_run(read_record(cbcast_run))["checks"]["agreement"]["violations"] == 0


@pytest.mark.parametrize("which", ["join", "later"])
def test_a_restarted_receiver_that_skips_a_message_after_its_join_fails(
        cbcast_run: Path, tmp_path: Path, which: str) -> None:
    """The message it joined h4's stream at (the planted bug of
    bench/mutants/cbcast-restart-join-skips-first), or a later one: agreement fails."""
    events = after_restart(h3_events(cbcast_run))
    join = next(e["mid"] for e in events if e["ev"] == "stream_join"
                and e["mid"].startswith("h4:"))
    mid = join if which == "join" else f"h4:{mno(join) + 3}"
    run = copy_without(cbcast_run, tmp_path / "run", mid)
    s = judge_run(read_record(run))
    agreement = s["checks"]["agreement"]
    assert (agreement["violations"], agreement["missing_per_node"]) == (1, {"h3@1": 1})
    assert agreement["examples"][0]["mid"] == mid and agreement["examples"][0]["node"] == "h3@1"
    assert not s["verdict"]["ok"] and s["verdict"]["safety"] == "violated"


def test_a_first_delivery_is_a_join_point_where_the_protocol_logs_none(
        sequencer_run: Path, tmp_path: Path) -> None:
    """sequencer logs no `stream_join`: h3@1's first delivery of h4's messages is its join
    point, so a message of h4 it skips after it fails, and the run as written is ok."""
    events = after_restart(h3_events(sequencer_run))
    assert not any(e["ev"] == "stream_join" for e in events)
    got = sorted(mno(e["mid"]) for e in events if e["ev"] == "fnl" and e["mid"].startswith("h4:"))
    assert judge_run(read_record(sequencer_run))["verdict"]["ok"]
    run = copy_without(sequencer_run, tmp_path / "run", f"h4:{got[2]}")
    agreement = judge_run(read_record(run))["checks"]["agreement"]
    assert (agreement["violations"], agreement["missing_per_node"]) == (1, {"h3@1": 1})
    assert agreement["restarted_joins"]["h3@1"]["h4"] == f"h4:{got[0]}"


def test_join_points_take_the_lower_of_the_logged_join_and_the_first_delivery() -> None:
    def ev(node: str, inc: int, kind: str, mid: str) -> dict[str, Any]:
        return {"node": node, "inc": inc, "ev": kind, "mid": mid}

    events = pa.Table.from_pylist([
        ev("h3", 0, "fnl", "h1:2"),  # the first incarnation's: not h3@1's
        ev("h3", 1, "stream_join", "h1:9"), ev("h3", 1, "fnl", "h1:10"),
        ev("h3", 1, "fnl", "h2:7"), ev("h3", 1, "fnl", "h2:5"),
        ev("h3", 1, "fnl", "h3:1000001"),  # its own: validity's
        ev("h3", 1, "fnl", "no-mno"), ev("h1", 0, "fnl", "h2:1")])
    assert join_points(events, ["h3@1"]) == {"h3@1": {"h1": 9, "h2": 5}}
    assert join_points(events, []) == {}
