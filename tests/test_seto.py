"""SETO (000 Fig. 4, 003 Fig. 2) on the deterministic simulator, and the optimistic metrics.

The simulator runs in-process; accuracy is computed here from the events.jsonl files, on its
own, so that it also cross-checks analysis/optimistic.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from analysis.ingest import EVENT_SCHEMA
from analysis.optimistic import optimistic_metrics
from analysis.session import spark_session
from nodes.config import Member, NodeConfig, PathConfig, WorkloadConfig
from nodes.planner import seto_plan
from nodes.protocols.base import FinalDeliver, OptDeliver, Send, SetTimer
from nodes.protocols.sequencer import Sequencer
from nodes.protocols.seto import OPT, SetoDelays, build
from nodes.sim import SIM_EPOCH_NS, Simulator
from nodes.wire import Header, Message, MsgType
from testbed.backends.base import HostAddress
from testbed.deploy import node_configs
from testbed.spec.loader import load_experiment

ROOT = Path(__file__).resolve().parent.parent
# Four processes, jitter-free, one-way ms, sender-major (omega[k][j]: k -> j); symmetric, so
# half a round trip is the one-way delay and every planner input is exact.
OMEGA: list[list[float]] = [[0, 10, 20, 30], [10, 0, 15, 25], [20, 15, 0, 12], [30, 25, 12, 0]]
Events = dict[str, list[dict[str, Any]]]


# -- harness ----------------------------------------------------------------------------------
def matrix_configs(omega_ms: list[list[float]], protocol: str, params: dict[str, Any],
                   out: Path, jitter_ms: float = 0.0, duration_s: float = 20.0,
                   rate: float = 20.0) -> list[NodeConfig]:
    n = len(omega_ms)
    names = [f"h{i + 1}" for i in range(n)]
    members = [Member(i, names[i], f"198.18.0.{i + 1}", 7000) for i in range(n)]
    return [
        NodeConfig(
            node_id=i, name=names[i], members=members, protocol=protocol, params=dict(params),
            log_path=str(out / "nodes" / names[i] / "events.jsonl"), seed=7,
            start_at_ns=SIM_EPOCH_NS, duration_ns=round(duration_s * 1e9),
            drain_ns=2_000_000_000, workload=WorkloadConfig(True, rate, 100, "poisson"),
            paths={j: PathConfig(round(omega_ms[i][j] * 1e6), round(jitter_ms * 1e6))
                   for j in range(n) if j != i})
        for i in range(n)
    ]


def run_sim(configs: list[NodeConfig], seed: int = 7) -> Simulator:
    sim = Simulator(configs, seed=seed)
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in configs))
    return sim


def experiment_sim(experiment: str, out: Path, duration_s: float = 15.0) -> Events:
    """Run one of experiments/*.yaml on the in-process simulator; return its events."""
    exp, topo = load_experiment(ROOT / "experiments" / experiment, backend="sim")
    paths = topo.paths()
    addresses = {h: HostAddress(f"198.18.0.{i + 1}", 7000, "127.0.0.1")
                 for i, h in enumerate(paths.hosts)}
    configs = node_configs(exp, topo, paths, addresses, out, SIM_EPOCH_NS, True,
                           duration_ns=round(duration_s * 1e9))
    run_sim(configs, seed=exp.seed)
    return read_events(out)


def read_events(out: Path) -> Events:
    events = {}
    for path in sorted(out.glob("nodes/*/events.jsonl")):
        lines = path.read_text().splitlines()
        events[path.parent.name] = sorted((json.loads(x) for x in lines), key=lambda e: e["i"])
    return events


def accuracy(events: Events, sent_after_ns: int = 0) -> dict[str, float]:
    """Per node: share of messages (sent after the instant) whose rank among the node's opt
    events equals their rank among its fnl events."""
    sent = {e["mid"]: e["t"] for evs in events.values() for e in evs if e["ev"] == "send"}
    result = {}
    for node, evs in events.items():
        opt = {m: r for r, m in enumerate(e["mid"] for e in evs if e["ev"] == "opt")}
        fnl = {m: r for r, m in enumerate(e["mid"] for e in evs if e["ev"] == "fnl")}
        mids = [m for m in fnl if m in opt and sent[m] >= sent_after_ns]
        assert mids, f"{node} delivered nothing sent after the instant"
        result[node] = sum(opt[m] == fnl[m] for m in mids) / len(mids)
    return result


def assert_local_and_total_order(events: Events) -> None:
    """Local Order (000 sec. 2.2) and FIFO at every node, and one final sequence everywhere."""
    sequences = []
    for node, evs in events.items():
        opt_i = {e["mid"]: e["i"] for e in evs if e["ev"] == "opt"}
        fnl = [e for e in evs if e["ev"] == "fnl"]
        late = [e["mid"] for e in fnl if e["mid"] not in opt_i or opt_i[e["mid"]] > e["i"]]
        assert not late, f"{node} fnl-delivered without a prior opt: {late[:5]}"
        assert [e["seq"] for e in fnl] == list(range(1, len(fnl) + 1)), node
        sequences.append([e["mid"] for e in fnl])
        # FIFO (002): each sender's messages in the order of their numbers.
        numbers: dict[str, list[int]] = {}
        for e in fnl:
            sender, n = e["mid"].rsplit(":", 1)
            numbers.setdefault(sender, []).append(int(n))
        for sender, ns in numbers.items():
            assert ns == sorted(ns), f"{node} fnl-delivered {sender}'s messages out of order"
    assert len(sequences[0]) > 100
    assert all(s == sequences[0] for s in sequences), "nodes disagree on the final order"


# -- the protocol -----------------------------------------------------------------------------
def delays(layer: object) -> SetoDelays:
    """The SETO order policy of a `seto` stack (a sequencer)."""
    assert isinstance(layer, Sequencer) and isinstance(layer.policy, SetoDelays)
    return layer.policy


def test_fnl_before_the_optimistic_delay_expires_opt_delivers_just_before_it() -> None:
    p = build(1, [0, 1, 2], {"sequencer_id": 0})
    delays(p).delay[2] = 50_000_000
    data = Message(Header(MsgType.DATA, origin=2, mno=1, sender=2, rseq=1), b"x" * 8)
    out = p.on_message(2, data, now=1_000_000)
    assert not [a for a in out if isinstance(a, OptDeliver)]
    assert SetTimer(OPT, 50_000_000) in out
    order = Message(Header(MsgType.ORDER, seq=1, origin=0, sender=0, rseq=1),
                    bytes.fromhex("000200000001"))
    out = p.on_message(0, order, now=20_000_000)
    kinds = [type(a) for a in out if isinstance(a, OptDeliver | FinalDeliver)]
    assert kinds == [OptDeliver, FinalDeliver]
    assert not [a for a in p.on_timer(OPT, now=51_000_000) if isinstance(a, OptDeliver)]


def test_sequencer_delays_its_own_messages_by_the_largest_hint() -> None:
    s = build(0, [0, 1, 2], {"sequencer_id": 0})
    for origin, hint_us in ((1, 7000), (2, 3000)):
        msg = Message(Header(MsgType.DATA, origin=origin, mno=1, sender=origin, rseq=1,
                             hint=hint_us), b"")
        s.on_message(origin, msg, now=0)
    assert delays(s).delay[0] == 7_000_000
    sent = [a for a in s.broadcast(b"", now=1) if isinstance(a, Send)]
    assert sent and all(a.msg.header.hint == 0 for a in sent)


def test_seto_rejects_an_inertia_factor_outside_zero_one() -> None:
    with pytest.raises(ValueError, match="alpha"):
        build(0, [0, 1], {"alpha": 1.0})


def test_seto_converges_to_the_steady_state_the_planner_predicts(tmp_path: Path) -> None:
    sim = run_sim(matrix_configs(OMEGA, "seto", {"sequencer_id": 0, "alpha": 0.9}, tmp_path))
    plan = seto_plan(OMEGA, sequencer=0)
    for nid, core in sim.cores.items():
        policy = delays(core.protocol)
        measured = [policy.delay[k] / 1e6 for k in range(len(OMEGA))]
        expected = plan.delays_at(nid)
        assert all(abs(m - e) < 1.0 for m, e in zip(measured, expected, strict=True)), \
            f"node {nid}: delays {measured} ms, planner says {expected}"
    acc = accuracy(read_events(tmp_path), SIM_EPOCH_NS + 10_000_000_000)
    assert min(acc.values()) >= 0.99, acc


def test_seto_keeps_local_order_and_a_total_final_order_under_jitter(tmp_path: Path) -> None:
    configs = matrix_configs(OMEGA, "seto", {"sequencer_id": 0}, tmp_path, jitter_ms=3.0,
                             duration_s=10)
    run_sim(configs)
    assert_local_and_total_order(read_events(tmp_path))


def test_seto_is_more_accurate_than_plain_sequencer_on_five_regions(tmp_path: Path) -> None:
    seq = experiment_sim("seto-vs-sequencer.yaml", tmp_path / "seq")
    seto = experiment_sim("seto-vs-sequencer-seto.yaml", tmp_path / "seto")
    assert_local_and_total_order(seto)
    after = SIM_EPOCH_NS + 5_000_000_000  # past SETO's learning phase
    a_seq, a_seto = accuracy(seq, after), accuracy(seto, after)
    for node in a_seq:
        if node != "virginia":  # the sequencer is always right about its own order
            assert a_seto[node] > a_seq[node] + 0.2, (node, a_seq, a_seto)


# -- analysis/optimistic.py -------------------------------------------------------------------
@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    yield spark_session()


def _ev(node: str, i: int, ev: str, mid: str, t_ms: float) -> dict[str, Any]:
    return {"t": round(t_ms * 1e6), "lt": round(t_ms * 1e6), "i": i, "node": node, "ev": ev,
            "mid": mid, "seq": None, "slot": None, "proto": "seto", "size": 1}


@pytest.mark.spark
def test_optimistic_metrics_on_a_hand_made_log(spark: SparkSession) -> None:
    rows = [
        _ev("a", 0, "send", "a:1", 0), _ev("b", 0, "send", "b:1", 1),
        _ev("c", 0, "send", "c:1", 2),
        # a: opt order a:1 b:1 c:1, final order a:1 c:1 b:1 -> 1 of 3 in place
        _ev("a", 1, "opt", "a:1", 10), _ev("a", 2, "opt", "b:1", 11),
        _ev("a", 3, "opt", "c:1", 12), _ev("a", 4, "fnl", "a:1", 20),
        _ev("a", 5, "fnl", "c:1", 21), _ev("a", 6, "fnl", "b:1", 22),
        # b: all in place, but c:1 is opt-delivered after its fnl (a Local Order violation)
        _ev("b", 1, "opt", "a:1", 5), _ev("b", 2, "opt", "b:1", 6),
        _ev("b", 3, "fnl", "a:1", 25), _ev("b", 4, "fnl", "b:1", 26),
        _ev("b", 5, "fnl", "c:1", 27), _ev("b", 6, "opt", "c:1", 28),
    ]
    m = optimistic_metrics(spark.createDataFrame(rows, EVENT_SCHEMA))
    assert m["accuracy"]["per_node"]["a"] == {"accuracy": 1 / 3, "matched": 1, "count": 3}
    assert m["accuracy"]["per_node"]["b"]["accuracy"] == 1.0
    assert m["accuracy"]["all"] == pytest.approx(4 / 6)
    assert m["local_order"] == {
        "violations": 1, "examples": [{"node": "b", "mid": "c:1", "opt_i": 6, "fnl_i": 5}]}
    window_a = m["window"]["per_node"]["a"]
    assert window_a["count"] == 3 and window_a["p50_ms"] == pytest.approx(10.0)
    assert window_a["max_ms"] == pytest.approx(11.0)
    assert m["window"]["per_node"]["b"]["p50_ms"] == pytest.approx(20.0)
    latency = m["latency"]
    assert latency["per_node"]["a"]["p50_ms"] == pytest.approx(10.0)
    assert latency["per_node"]["b"]["max_ms"] == pytest.approx(26.0)
    assert latency["all"]["count"] == 6


@pytest.mark.spark
def test_optimistic_metrics_without_optimistic_deliveries(spark: SparkSession) -> None:
    rows = [_ev("a", 0, "send", "a:1", 0), _ev("a", 1, "fnl", "a:1", 1)]
    m = optimistic_metrics(spark.createDataFrame(rows, EVENT_SCHEMA))
    assert m["accuracy"] == {"all": None, "per_node": {}}
    assert m["window"]["all"]["count"] == 0 and m["latency"]["all"]["p50_ms"] is None
    assert m["local_order"] == {"violations": 0, "examples": []}
