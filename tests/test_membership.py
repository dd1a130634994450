"""Primary-partition membership (001 §4.1-4.3, docs/protocols.md "Primary partitions") on
the deterministic simulator: 001 §4.1's scenarios (2|3 partition, three-way split, forced
leave, ambiguous installation), `setPrimary` through the Jolokia handler, the checkers of
analysis/membership.py with negative controls, and one short `local` backend run."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from analysis import membership as checks
from analysis.record import read_record
from analysis.report import render_report
from analysis.revocation import drop_revoked
from nodes.management.jolokia import Jolokia
from nodes.management.node_mbeans import build_node_registry
from nodes.protocols import membership as mb
from nodes.protocols.primary import Primary
from nodes.sim import SIM_EPOCH_NS, Simulator
from testbed.spec.loader import SpecError, load_experiment
from tests import protosim as ps
from tests.eventlogs import run_dir_of

S = 1_000_000_000
FAST_FD = {"fd_interval_ms": 50, "fd_timeout_ms": 300}
Groups = list[list[int]] | None  # None: heal everything


def isolate(sim: Simulator, groups: Groups) -> None:
    """Cut the data plane between groups of member ids (both ways); None heals."""
    for core in sim.cores.values():
        core.blocked_out.clear()
    for group in groups or []:
        for h in group:
            sim.cores[h].blocked_out |= {x for x in sim.cores if x not in group}


def scenario(out: Path, schedule: list[tuple[float, Groups]], *, rule: str = "majority",
             duration_s: float = 10, drain_s: float = 3, loss: float = 0.01, seed: int = 7,
             fd: dict[str, int] = FAST_FD, jitter_ms: float = 0.5,
             before: Callable[[Simulator], None] | None = None) -> ps.Events:
    params = {**fd, "primary_rule": rule}
    cfgs = ps.configs("primary", out, n=5, delay_ms=2, jitter_ms=jitter_ms, loss=loss, rate=20,
                      duration_s=duration_s, drain_s=drain_s, params=params, seed=seed)
    sim = Simulator(cfgs, seed=seed)
    for t, groups in schedule:
        sim.at(SIM_EPOCH_NS + round(t * S), lambda g=groups: isolate(sim, g))  # type: ignore[misc]
    if before is not None:
        before(sim)
    sim.run(SIM_EPOCH_NS + round((duration_s + drain_s) * S))
    return ps.read_events(out)


def named(events: ps.Events, node: str, ev: str) -> list[dict[str, Any]]:
    return [e for e in events[node] if e["ev"] == ev and e.get("layer") != "membership"]


def secs(e: dict[str, Any]) -> float:
    return (e["t"] - SIM_EPOCH_NS) / S


def judged(out: Path) -> dict[str, int]:
    section = checks.membership_section(read_record(out))
    return {k: v["violations"] for k, v in section["checks"].items()}


def assert_total_order_stack_clean(events: ps.Events) -> None:
    assert ps.total_order_pairs(events) == 0
    assert ps.integrity(events) == 0
    assert ps.agreement(events) == 0
    assert ps.validity(events) == 0
    assert ps.fifo_moves(events) == {}


def test_minority_blocks_and_rejoins_after_the_partition_heals(tmp_path: Path) -> None:
    """2|3 of 5 for 5 s: the 3 continue in a new primary view, the 2 block (no deliveries),
    are excluded at the heal and rejoin with a state transfer; every checker is clean."""
    events = scenario(tmp_path, [(3, [[0, 1, 2], [3, 4]]), (8, None)])
    assert_total_order_stack_clean(events)
    assert judged(tmp_path) == dict.fromkeys(checks.MEMBERSHIP_CHECKS, 0)
    for h in ("h1", "h2", "h3"):
        views = [(v["counter"], v["members"]) for v in named(events, h, "view")]
        assert (3, ["h1", "h2", "h3"]) in views and views[-1][1] == ["h1", "h2", "h3", "h4", "h5"]
        assert not named(events, h, "blocked")
        # the majority keeps delivering during the partition
        assert any(4 < secs(e) < 7.5 for e in events[h] if e["ev"] == "fnl")
    for h in ("h4", "h5"):
        blocked = named(events, h, "blocked")
        joins = [j for j in named(events, h, "join") if secs(j) > 1]  # not the bootstrap's
        assert len(blocked) == 1 and 3 < secs(blocked[0]) < 4.5
        assert len(named(events, h, "excluded")) == 1
        assert len(joins) == 1 and secs(joins[0]) > 8 and joins[0]["transferred"] > 50
        assert not any(secs(blocked[0]) < secs(e) < secs(joins[0]) for e in events[h]
                       if e["ev"] == "fnl")
    ensured = sum(1 for evs in events.values() for e in evs if e["ev"] == "ensured")
    fnl = sum(1 for evs in events.values() for e in evs if e["ev"] == "fnl")
    assert ensured > 0.95 * fnl


def test_three_way_split_blocks_everyone_until_three_of_the_last_primary_meet(
        tmp_path: Path) -> None:
    """2/2/1 of 5: nobody has a majority, all block; healing {h1,h2}+{h3,h4} (4 of the last
    primary's 5) makes a primary again while h5 stays blocked."""
    events = scenario(tmp_path, [(2, [[0, 1], [2, 3], [4]]), (5, [[0, 1, 2, 3], [4]]),
                                 (8, None)])
    assert_total_order_stack_clean(events)
    assert judged(tmp_path) == dict.fromkeys(checks.MEMBERSHIP_CHECKS, 0)
    for h in events:
        assert len(named(events, h, "blocked")) >= 1
        assert not [v for v in named(events, h, "view") if 2.5 < secs(v) < 5]
    for h in ("h1", "h2", "h3", "h4"):
        assert [v["members"] for v in named(events, h, "view") if 5 < secs(v) < 7.5] == [
            ["h1", "h2", "h3", "h4"]]
    assert not [v for v in named(events, "h5", "view") if 5 < secs(v) < 7.5]


def test_forced_leave_of_members_that_missed_a_primary(tmp_path: Path) -> None:
    """{a,b,c}|{d,e}, then {a,b}|{c}, then heal all: c and d, e missed primaries and are
    excluded (forced leave), then rejoin; a and b continue (docs/protocols.md table)."""
    events = scenario(tmp_path, [(2, [[0, 1, 2], [3, 4]]), (4, [[0, 1], [2], [3, 4]]),
                                 (7, None)])
    assert_total_order_stack_clean(events)
    assert judged(tmp_path) == dict.fromkeys(checks.MEMBERSHIP_CHECKS, 0)
    counters = {h: [v["counter"] for v in named(events, h, "view")] for h in events}
    assert counters["h1"] == counters["h2"] == [2, 3, 4, 5]  # all, {a,b,c}, {a,b}, all
    assert [e["counter"] for e in named(events, "h3", "excluded")] == [3]
    assert [e["counter"] for e in named(events, "h4", "excluded")] == [2]
    assert [e["counter"] for e in named(events, "h5", "excluded")] == [2]
    assert not named(events, "h1", "excluded") and not named(events, "h2", "excluded")
    assert all(counters[h][-1] == 5 for h in events)


def cut_c_at_install(sim: Simulator) -> None:
    """001 §4.1's ambiguous installation: when h1 coordinates {h1,h2,h3} and sends its
    INSTALL, h3 is cut off from everyone before the INSTALL reaches it."""
    m = sim.cores[0].protocol.membership  # type: ignore[attr-defined]
    coordinate = m._coordinate

    def patched(reach: tuple[int, ...], now: int) -> list[Any]:
        acts = coordinate(reach, now)
        if reach == (0, 1, 2) and any(getattr(a, "msg", None) is not None
                                      and a.msg.header.proto == mb.WIRE_ID
                                      and a.msg.header.aux == mb.INSTALL for a in acts):
            isolate(sim, [[0, 1], [2], [3, 4]])
            sim.cores[2].blocked_in |= {0, 1, 3, 4}
        return acts

    m._coordinate = patched

    def release_c() -> None:
        sim.cores[2].blocked_in.clear()
        isolate(sim, [[0, 1], [2, 3, 4]])

    sim.at(SIM_EPOCH_NS + 4 * S, release_c)


@pytest.mark.parametrize("rule,split", [("majority", True), ("attempt", False)])
def test_ambiguous_installation(tmp_path: Path, rule: str, split: bool) -> None:
    """The paper's rule installs two primaries with one counter ({h1,h2,h3} without h3
    knowing, then {h3,h4,h5}); `primary_rule: attempt` does not."""
    events = scenario(tmp_path, [(2, [[0, 1, 2], [3, 4]]), (7, None)], rule=rule,
                      loss=0.0, before=cut_c_at_install)
    found = judged(tmp_path)
    if split:
        assert found["split_brain"] >= 1
        example = checks.split_brain(checks.read_membership_events(read_record(tmp_path)))[0]
        assert example["counter"] == 3 and example["why"].startswith("two member sets")
    else:
        assert found == dict.fromkeys(checks.MEMBERSHIP_CHECKS, 0)
        assert_total_order_stack_clean(events)
        assert [v["members"] for v in named(events, "h3", "view") if 4 < secs(v) < 7] == [
            ["h3", "h4", "h5"]]
        assert [e for e in named(events, "h1", "blocked") if 2 < secs(e) < 4]


def mgmt(sim: Simulator, node: int, op: str) -> dict[str, Any]:
    jolokia = Jolokia(build_node_registry(sim.cores[node], true_now=lambda: sim.now))
    return jolokia.handle({"type": "exec", "mbean": "testbed:type=Membership",
                           "operation": op, "arguments": []})


def test_set_primary_unblocks_a_minority_and_refuses_a_primary_node(tmp_path: Path) -> None:
    """Three-way split: everyone blocks; the operator's setPrimary on h1 makes {h1,h2} the
    primary (4.2). setPrimary on a node already primary: one-line error, nothing changed."""
    replies: dict[str, Any] = {}

    def before(sim: Simulator) -> None:
        def operate() -> None:
            replies["blocked"] = mgmt(sim, 0, "setPrimary")

        def again() -> None:
            p = sim.cores[0].protocol
            assert isinstance(p, Primary)
            replies["state"] = p.view_info()
            replies["primary"] = mgmt(sim, 0, "setPrimary")
            replies["after"] = p.view_info()
        sim.at(SIM_EPOCH_NS + 4 * S, operate)
        sim.at(SIM_EPOCH_NS + 5 * S, again)

    events = scenario(tmp_path, [(2, [[0, 1], [2, 3], [4]]), (7, None)], before=before)
    assert replies["blocked"]["status"] == 200, replies["blocked"]
    assert [v["members"] for v in named(events, "h2", "view") if 4 < secs(v) < 7] == [
        ["h1", "h2"]]
    assert named(events, "h1", "set_primary")
    bad = replies["primary"]
    assert bad["status"] == 400 and "already in primary view" in bad["error"]
    assert "\n" not in bad["error"]
    assert replies["after"] == replies["state"]
    assert judged(tmp_path)["split_brain"] == 0
    assert_total_order_stack_clean(events)
    # the report shows the operator's call and the view it installed (001 §4.2)
    section = checks.membership_section(read_record(tmp_path))
    html = render_report({"run": "setprimary", **section})
    assert "<h2>Membership (primary partitions)</h2>" in html
    call = section["membership"]["set_primary"]
    assert [(c["node"], c["status"]) for c in call] == [("h1", "blocked")]
    view = next(v for v in section["membership"]["views"] if v["operator"])
    assert view["members"] == ["h1", "h2"] and view["first"] == "h1"
    row = (f"<tr><td>{view['counter']}</td><td>h1 h2</td><td>{view['t']}</td><td>h1</td>"
           "<td>2</td><td>setPrimary (operator)</td></tr>")
    assert row in html
    assert f"<tr><td>h1</td><td>{call[0]['t']}</td><td>blocked</td></tr>" in html


def test_checker_catches_deliveries_while_blocked(tmp_path: Path) -> None:
    """Negative control: a layer that keeps delivering its state transfer while blocked
    (`join` logged after the deliveries) is caught by blocked_delivery."""
    def before(sim: Simulator) -> None:
        for core in sim.cores.values():
            p = core.protocol
            assert isinstance(p, Primary)
            original = p._on_deliver_view

            def late_join(src: int, h: Any, payload: bytes, now: int,
                          p: Primary = p, original: Any = original) -> list[Any]:
                acts = original(src, h, payload, now)
                joins = [a for a in acts if getattr(a, "ev", "") == "join"]
                return [a for a in acts if a not in joins] + joins
            p._on_deliver_view = late_join  # type: ignore[method-assign]

    scenario(tmp_path, [(3, [[0, 1, 2], [3, 4]]), (6, None)], duration_s=7, drain_s=2,
             before=before)
    assert judged(tmp_path)["blocked_delivery"] > 50


def test_checkers_on_hand_written_logs() -> None:
    def view(i: int, counter: int, members: list[str], t: int = 0) -> dict[str, Any]:
        return {"ev": "view", "i": i, "t": t, "primary": True, "counter": counter,
                "members": members}

    two_sets = {"a": [view(1, 2, ["a", "b", "c"])], "c": [view(1, 2, ["c", "d", "e"])]}
    assert len(checks.split_brain(two_sets)) >= 1
    no_majority = {"a": [view(1, 2, ["a", "b", "c", "d"]), view(2, 3, ["a", "e"])]}
    assert [f["counter"] for f in checks.split_brain(no_majority)] == [3]
    fine = {"a": [view(1, 2, ["a", "b", "c"]), view(2, 3, ["a", "b", "d"])]}
    assert checks.split_brain(fine) == []

    def ev(name: str, i: int, t: int, mid: str = "a:1") -> dict[str, Any]:
        return {"ev": name, "i": i, "t": t, "mid": mid}

    repeated = {"a": [ev("fnl", 1, 1), ev("ensured", 2, 2), ev("ensured", 3, 3)]}
    early = {"a": [ev("ensured", 1, 1), ev("fnl", 2, 2)]}
    opt_late = {"a": [ev("fnl", 1, 1), ev("opt", 2, 2)]}
    ok = {"a": [ev("opt", 1, 1), ev("fnl", 2, 2), ev("ensured", 3, 3)]}
    assert [len(checks.notification_order(x)) for x in (repeated, early, opt_late, ok)] == [
        1, 1, 1, 0]
    stop = {"ev": "stop", "i": 99, "t": 99}
    uniform_early = {"a": [view(0, 2, ["a", "b"]), ev("fnl", 1, 10), ev("ensured", 2, 20)],
                     "b": [view(0, 2, ["a", "b"]), ev("fnl", 1, 30), stop]}
    assert checks.uniform(uniform_early)[0]["lacking"] == ["b"]
    uniform_ok = {"a": [view(0, 2, ["a", "b"]), ev("fnl", 1, 10), ev("ensured", 2, 40)],
                  "b": [view(0, 2, ["a", "b"]), ev("fnl", 1, 30)]}
    assert checks.uniform(uniform_ok) == []


# -- full runs through the runner ---------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[1]


def run_testbed(spec: Path, out: Path, *extra: str) -> ps.Events:
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", str(spec), "--out",
                           str(out), "--no-analyze", *extra],
                          capture_output=True, text=True, cwd=ROOT, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return ps.read_events(run_dir_of(out))


def test_primary_partition_experiment_on_the_simulator(tmp_path: Path) -> None:
    """experiments/primary-partition.yaml end to end on sim (the Spark verdict of the same
    checks is in docs/benchmarks.md; here the plain-Python oracles)."""
    events = run_testbed(ROOT / "experiments" / "primary-partition.yaml", tmp_path / "runs")
    run = run_dir_of(tmp_path / "runs")
    assert_total_order_stack_clean(events)
    section = checks.membership_section(read_record(run))
    assert {k: v["violations"] for k, v in section["checks"].items()} == dict.fromkeys(
        checks.MEMBERSHIP_CHECKS, 0)
    per_node = section["membership"]["per_node"]
    assert all(per_node[h]["blocked"] == 1 and per_node[h]["excluded"] == 1
               for h in ("h4", "h5"))
    assert all(per_node[h]["blocked"] == 0 for h in ("h1", "h2", "h3"))
    assert ["h1", "h2", "h3"] in section["membership"]["primaries"]["3"]


LOCAL_TOPO = """\
name: lan3
sites:
  a: {lan: {delay: 1ms}}
hosts:
  - {name: h1, site: a}
  - {name: h2, site: a}
  - {name: h3, site: a}
"""

LOCAL_EXP = """\
name: primary-local
topology: topo.yaml
backend: local
duration: 6s
drain: 2s
protocol:
  name: primary
  params: {fd_interval_ms: 50, fd_timeout_ms: 300}
workload: {rate: 20/s, size: 100B}
faults:
  - {kind: partition, groups: [[h1, h2], [h3]], at: 3s, for: 2s}
"""


def test_primary_on_the_local_backend(tmp_path: Path) -> None:
    """Real processes and UDP: a 2|1 partition; whatever the start-up skew of a loaded
    machine, the checkers are clean and everyone ends in one primary view."""
    (tmp_path / "topo.yaml").write_text(LOCAL_TOPO)
    (tmp_path / "exp.yaml").write_text(LOCAL_EXP)
    events = run_testbed(tmp_path / "exp.yaml", tmp_path / "runs")
    assert_total_order_stack_clean(events)
    section = checks.membership_section(read_record(run_dir_of(tmp_path / "runs")))
    assert {k: v["violations"] for k, v in section["checks"].items()} == dict.fromkeys(
        checks.MEMBERSHIP_CHECKS, 0)
    last = str(section["membership"]["last_counter"])
    assert section["membership"]["primaries"][last] == [["h1", "h2", "h3"]]
    assert all(len(m) > 60 for m in ps.deliveries(events).values())


def test_bad_primary_params_are_one_line_errors(tmp_path: Path) -> None:
    spec = (ROOT / "experiments" / "primary-partition.yaml").read_text().replace(
        "params: {protocol: sequencer, bootstrap: h1,",
        "params: {protocol: seto, primary_rule: both, bootstrap: h9,")
    (tmp_path / "exp.yaml").write_text(spec)
    with pytest.raises(SpecError) as info:
        load_experiment(tmp_path / "exp.yaml")
    problems = info.value.problems
    assert [p.split(": ", 2)[1] for p in problems] == [
        "protocol.params.protocol", "protocol.params.primary_rule", "protocol.params.bootstrap"]
    assert all(p.startswith(f"{tmp_path / 'exp.yaml'}:") and "\n" not in p for p in problems)


def test_a_restart_faster_than_the_failure_detector_rejoins_by_join(tmp_path: Path) -> None:
    """h3 crashes and restarts within 100 ms, before anyone suspects it: the new incarnation
    asks to JOIN, the coordinator installs a new view, h3 adopts the state (no delivery
    logged twice) and delivers on in the new primary view."""
    def before(sim: Simulator) -> None:
        def fault(op: str) -> Callable[[], None]:
            return lambda: None if getattr(sim, op)(sim.configs[2].name) else None
        sim.at(SIM_EPOCH_NS + 3 * S, fault("crash"))
        sim.at(SIM_EPOCH_NS + 3 * S + S // 10, fault("restart"))

    events = scenario(tmp_path, [], duration_s=6, drain_s=2, before=before)
    correct = {"h1", "h2", "h4", "h5"}
    assert ps.total_order_pairs(events) == 0 and ps.integrity(events) == 0
    assert ps.agreement(events, correct) == 0
    assert not [e for e in events["h1"] if e["ev"] == "suspect"]
    assert judged(tmp_path) == dict.fromkeys(checks.MEMBERSHIP_CHECKS, 0)
    joins = [j for j in named(events, "h3", "join") if secs(j) > 3]
    assert len(joins) == 1 and joins[0]["adopted"] > 50
    sent_after = {e["mid"] for e in events["h3"] if e["ev"] == "send" and secs(e) > 3.5}
    assert sent_after and all(sent_after <= set(ps.deliveries(events)[h]) for h in correct)


def test_malformed_view_messages_are_counted_not_raised() -> None:
    """Nothing from the network is trusted: bad probes, state transfers and catch-ups,
    membership lists and forged inner senders are refused (`ev=drop`, RejectedMessages),
    never raised."""
    from nodes.protocols import catalogue
    from nodes.protocols import primary as pv
    from nodes.wire import Header, Message, MsgType, encode

    layer = cast(Primary, catalogue.build("primary", 1, [0, 1, 2], {**FAST_FD}))
    layer.start(0)

    def msg(proto: int, aux: int, payload: bytes, seq: int = 1) -> Message:
        return Message(Header(MsgType.DATA, proto, sender=0, seq=seq, aux=aux), payload)

    inner = Message(Header(MsgType.DATA, 2, sender=2, origin=2, mno=1))
    bad = [msg(pv.WIRE_ID, pv.PROBE, b"\x00\x05\x00"),            # member list past the end
           msg(pv.WIRE_ID, pv.PROBE, b"\x00\x00\x00\x00\x00\x07"),  # vector of a wrong size
           msg(pv.WIRE_ID, pv.DELIVER_VIEW, b"\x00\x01\x00\x00\x01"),
           msg(pv.WIRE_ID, 99, b""),
           msg(pv.WIRE_ID, pv.CATCH_UP, b"\x00\x00"),                 # shorter than its head
           msg(pv.WIRE_ID, pv.CATCH_UP, bytes(12) + pv.pack_segs([(7, 2)])
               + pv.XFER_ENTRY.pack(1, 1, 8)),                       # 2 announced, 1 sent
           msg(pv.WIRE_ID, pv.CATCH_UP, bytes(12) + pv.pack_segs([(7, 1)])
               + pv.XFER_ENTRY.pack(9, 1, 8)),                       # a non-member origin
           msg(mb.WIRE_ID, mb.PROPOSE, b"\x00\x02\x00\x01"),        # not sorted
           msg(mb.WIRE_ID, mb.FLUSH_OK, b"\x00"),
           msg(pv.WIRE_ID, pv.INNER, b"garbage", seq=layer.epoch),
           msg(pv.WIRE_ID, pv.INNER, encode(inner), seq=layer.epoch)]  # forged sender
    layer.status, layer.inner_name = pv.PRIMARY, "sequencer"
    assert layer.held is not None
    layer._start_instance(0)
    for m in bad:
        out = layer.on_message(0, m, 1)
        assert [getattr(a, "ev", None) for a in out] == ["drop"], (m, out)
    assert layer.rejected + layer.membership.rejected == len(bad)


def test_minority_oracle_catches_a_minority_that_does_not_block(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control for `minority_blocked` (fault-history based) and `split_brain`: with
    the majority test broken (every view counts as a majority), {h4,h5} goes on as a primary
    during the 2|3 partition."""
    from nodes.protocols import primary as pv

    monkeypatch.setattr(pv, "strict_majority", lambda view, of: True)
    events = scenario(tmp_path, [(3, [[0, 1, 2], [3, 4]]), (6, None)], duration_s=7,
                      drain_s=2)
    start, stop = SIM_EPOCH_NS + 3 * S, SIM_EPOCH_NS + 6 * S
    found = checks.minority_blocked(events, [(start, stop, [["h1", "h2", "h3"],
                                                            ["h4", "h5"]])])
    assert {f["node"] for f in found} == {"h4", "h5"} and len(found) > 50
    assert checks.split_brain(events)
    monkeypatch.undo()
    clean = scenario(tmp_path / "clean", [(3, [[0, 1, 2], [3, 4]]), (6, None)], duration_s=7,
                     drain_s=2)
    assert checks.minority_blocked(clean, [(start, stop, [["h1", "h2", "h3"],
                                                          ["h4", "h5"]])]) == []


def assert_reformed(events: ps.Events, heal_s: float, fd_timeout_ms: int = 300) -> None:
    """After the last heal: one primary view of every host within fd_timeout + 2 s, every
    member holding the same deliveries (revoked ones not counted)."""
    last = [named(events, h, "view")[-1] for h in events]
    assert {v["counter"] for v in last} == {last[0]["counter"]}
    assert all(v["members"] == sorted(events) for v in last)
    assert max(secs(v) for v in last) <= heal_s + fd_timeout_ms / 1000 + 2
    held = [{e["mid"] for e in evs if e["ev"] == "fnl"} for evs in events.values()]
    assert all(h == held[0] for h in held)


@pytest.mark.parametrize("seed,schedule", [
    # a 2|3 split, then one host cut off: with 1 % loss an ATT_ACK of the later view is
    # lost and the member that lacks it waited for ever
    (16, [(2, [[0, 2], [1, 4, 3]]), (4.34, None), (5.75, [[3], [0, 4, 1, 2]]), (7.64, None)]),
    # 2|2|1, 2|3, 2|2|1: the DELIVER_VIEW to a lineage member behind the leader is lost
    (20, [(2, [[4, 0], [3, 2], [1]]), (4.718822007747665, None),
          (5.888200094873236, [[1, 2], [0, 4, 3]]), (7.845617541421105, None),
          (9.795656649374605, [[1, 2], [0, 4], [3]]), (12.671777341314105, None)]),
])
def test_attempt_rule_survives_lost_view_messages(tmp_path: Path, seed: int,
                                                 schedule: list[tuple[float, Groups]]) -> None:
    heal = schedule[-1][0]
    raw = scenario(tmp_path, schedule, rule="attempt", seed=seed, duration_s=max(10, heal + 2),
                   drain_s=6)
    events = {h: drop_revoked([{**e, "node": h} for e in evs]) for h, evs in raw.items()}
    assert_total_order_stack_clean(events)
    assert judged(tmp_path) == dict.fromkeys(checks.MEMBERSHIP_CHECKS, 0)
    assert_reformed(events, heal)


def test_majority_rule_serves_a_blocked_member_behind_a_view_installed_at_once(
        tmp_path: Path) -> None:
    """1|4 and 2|3 splits flapping 300 ms every 600 ms, detector 30/150 ms: P2 installs the
    full view at once at the members still primary; the one that had blocked is behind them
    and waits for a state transfer, which nobody planned (no probes were awaited), so it
    stayed in the old counter for good. Now the installed members plan it once every probe
    is in, and a still-primary member leads."""
    flaps: list[tuple[float, Groups]] = []
    for k, groups in enumerate([[[4], [0, 3, 1, 2]], [[2], [3, 1, 0, 4]], [[3], [2, 1, 4, 0]],
                                [[3], [4, 2, 0, 1]], [[1, 2], [3, 0, 4]], [[3, 2], [4, 1, 0]],
                                [[4, 0], [2, 1, 3]], [[3, 2], [0, 1, 4]], [[1], [3, 2, 4, 0]],
                                [[0, 2], [1, 4, 3]], [[1], [3, 0, 4, 2]]]):
        flaps += [(2 + 0.6 * k, groups), (2.3 + 0.6 * k, None)]
    fd = {"fd_interval_ms": 30, "fd_timeout_ms": 150}
    raw = scenario(tmp_path, flaps, seed=7, fd=fd, loss=0, jitter_ms=0, duration_s=10,
                   drain_s=6)
    events = {h: drop_revoked([{**e, "node": h} for e in evs]) for h, evs in raw.items()}
    assert_total_order_stack_clean(events)
    assert judged(tmp_path) == dict.fromkeys(checks.MEMBERSHIP_CHECKS, 0)
    assert_reformed(events, flaps[-1][0], fd_timeout_ms=150)


def test_install_says_whether_the_flush_agreed() -> None:
    """M3: after `flush_timeout` the INSTALL carries `hint` 1 and the view is not `synced`
    (view synchrony does not hold for it, P2 must probe); an agreed flush installs a synced
    view; a member takes the flag from INSTALL, and a flag other than 0 or 1 is dropped."""
    from nodes.protocols.base import Send
    from nodes.wire import Header, Message, MsgType

    def flush_ok(vid: int, state: bytes) -> Message:
        return Message(Header(MsgType.DATA, mb.WIRE_ID, sender=1, seq=vid, mno=1,
                              aux=mb.FLUSH_OK), state)

    for other, timeout_at, synced in ((b"\x00\x00\x00\x02same", 1, True),
                                      (b"\x00\x00\x00\x02diff", 2 * S, False)):
        coord = mb.Membership(0, [0, 1], lambda: b"\x00\x00\x00\x02same",
                              flush_timeout_ns=S)
        coord.on_suspect(1, True, 0)
        coord.on_timer(0)  # proposes {0}
        coord.on_suspect(1, False, 0)
        coord.on_timer(0)  # proposes {0, 1}
        assert coord.proposal is not None
        coord.on_message(1, flush_ok(coord.proposal.vid, other), 0)
        out = coord.on_timer(1) + coord.on_timer(timeout_at)
        installs = [a.msg for a in out if isinstance(a, Send) and a.msg.header.aux == mb.INSTALL]
        assert [m.header.hint for m in installs] == [int(not synced)], out
        assert coord.view.members == (0, 1) and coord.view.synced is synced
        member = mb.Membership(1, [0, 1], lambda: b"\x00\x00\x00\x02same")
        member.on_message(0, Message(Header(MsgType.DATA, mb.WIRE_ID, sender=0,
                                            seq=coord.view.vid, aux=mb.PROPOSE),
                                     mb.pack_members((0, 1))), 0)
        member.on_message(0, installs[0], 0)
        assert member.view.vid == coord.view.vid and member.view.synced is synced
    bad = installs[0].header.with_(hint=2)
    out = mb.Membership(1, [0, 1], lambda: b"").on_message(0, Message(bad, installs[0].payload),
                                                            0)
    assert [getattr(a, "ev", None) for a in out] == ["drop"]


def test_a_relayed_copy_passes_the_inner_sender_check() -> None:
    """The sequencer answers a FETCH with the stored copy flagged RELAYED, naming its origin
    as sender: accepted from another member (a plain message naming another sender is not,
    test_malformed_view_messages_are_counted_not_raised)."""
    from nodes.protocols import catalogue
    from nodes.protocols import primary as pv
    from nodes.wire import Flag, Header, Message, MsgType, encode

    layer = cast(Primary, catalogue.build("primary", 1, [0, 1, 2], {**FAST_FD}))
    layer.start(0)
    layer.status, layer.inner_name = pv.PRIMARY, "sequencer"
    layer._start_instance(0)
    copy = Message(Header(MsgType.DATA, 2, flags=int(Flag.RELAYED), sender=2, rseq=1,
                          origin=2, mno=1), b"x")
    out = layer.on_message(0, Message(Header(MsgType.DATA, pv.WIRE_ID, sender=0,
                                             seq=layer.epoch, aux=pv.INNER), encode(copy)), 1)
    assert not [a for a in out if getattr(a, "ev", None) == "drop"], out
    assert layer.rejected == 0


def test_notification_order_is_per_process() -> None:
    """A restarted incarnation is a process of its own (it adopts the primary's state): its
    fnl of a message an earlier incarnation was notified of is no repeat; within one
    incarnation a second fnl still is."""
    def log(*evs: tuple[str, str | None, int]) -> checks.Events:
        return {"h1": [{"ev": ev, "mid": mid, "i": i, "t": i, "node": "h1",
                        **({"incarnation": 1} if ev == "start" and i else {})}
                       for ev, mid, i in evs]}

    restarted = log(("start", None, 0), ("fnl", "h2:1", 1), ("start", None, 2),
                    ("fnl", "h2:1", 3))
    assert checks.notification_order(restarted) == []
    again = log(("start", None, 0), ("fnl", "h2:1", 1), ("fnl", "h2:1", 3))
    assert [f["why"] for f in checks.notification_order(again)] == ["repeated notification"]


def test_minority_oracle_starts_at_the_view_that_reflects_the_cut() -> None:
    """h3 is cut off alone at t=10, but the view {h3,h4} of a flush begun before the cut
    installs at t=12: h3 is a member of that primary view until its detector fires, and its
    deliveries then are not a minority's (explore seed 43622). Once it installs a view of
    the group alone ({h3}, t=20), a delivery is flagged."""
    def ev(ev: str, t: int, **kw: Any) -> dict[str, Any]:
        return {"ev": ev, "t": t, "i": t, "node": "h3", **kw}

    last = ev("view", 1, primary=True, counter=2, members=["h1", "h3", "h4"])
    before_detection = {"h3": [last, ev("view", 12, layer="membership", members=["h3", "h4"]),
                               ev("view", 12, primary=True, counter=3, members=["h3", "h4"]),
                               ev("fnl", 15, mid="h3:1")]}
    cut: list[checks.Partition] = [(10, 30.0, [["h3"], ["h1", "h4"]])]
    assert checks.minority_blocked(before_detection, cut) == []
    detected = {"h3": before_detection["h3"] + [
        ev("view", 20, layer="membership", members=["h3"]), ev("fnl", 25, mid="h3:2")]}
    found = checks.minority_blocked(detected, cut)
    assert [(f["node"], f["mid"]) for f in found] == [("h3", "h3:2")]


def test_the_stable_exchange_ensures_everything_under_loss_then_falls_silent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """4.3's exchange with 20 % loss: every message every host fnl-delivered is `ensured` there
    by the end, and once the workload stops (3 s) and the reports agree, the view sends no more
    STABLE, where before it sent 5 x 4 every 50 ms period (bench/idle_control.py: 181 datagrams
    a second per member of an idle 10-member view then, 13 now)."""
    from nodes.protocols import primary

    stables: list[int] = []  # the time of every STABLE sent
    tick = primary.Primary._tick

    def counted(self: Primary, now: int) -> list[Any]:
        out = tick(self, now)
        stables.extend(now for a in out if getattr(a, "msg", None) is not None
                       and a.msg.header.proto == primary.WIRE_ID
                       and a.msg.header.aux == primary.STABLE)
        return out

    monkeypatch.setattr(primary.Primary, "_tick", counted)
    events = scenario(tmp_path, [], duration_s=3, drain_s=5, loss=0.2)
    for h, evs in events.items():
        fnl = {e["mid"] for e in evs if e["ev"] == "fnl" and e.get("layer") != "membership"}
        ensured = {e["mid"] for e in evs if e["ev"] == "ensured"}
        assert len(fnl) > 200 and fnl <= ensured, (h, len(fnl - ensured))
    assert any(secs({"t": t}) < 3 for t in stables)
    late = [t for t in stables if secs({"t": t}) > 6]
    assert not late, f"{len(late)} STABLE datagrams 3 s after the workload's end"
