"""`qos-vbr` (004 §5-§7): the latency bounds of Theorems 2 and 5 in their tight set-ups, the
slot order (Lemma 5.2), the rate theorem (Thm 3), joins (§6.3), total order with gaps under
bounded loss (§7), and bad input.

Latencies are taken straight from the delivery logs (true time `t` of `fnl` minus that of
`send` at the origin), independently of the analysis. All runs are in the simulator, so the
times are virtual and exact: no `timing` mark is needed.
"""

from __future__ import annotations

import dataclasses
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from nodes.config import ClockConfig, NodeConfig, PathConfig
from nodes.linkmodel import LinkModel
from nodes.protocols.base import Reserve
from nodes.protocols.qos_vbr import QosVbr
from nodes.sim import SIM_EPOCH_NS, Simulator
from testbed.spec.loader import SpecError, load_experiment
from tests import protosim as ps
from tests.eventlogs import run_dir_of
from tests.inproc import run_cli

ROOT = Path(__file__).resolve().parents[1]
START = SIM_EPOCH_NS + 500_000_000  # the workload starts after the nodes, as in a real run
Events = dict[str, list[dict[str, Any]]]


def vbr_configs(out: Path, *, matrix: list[list[float]], offsets_ms: list[float],
                params: dict[str, Any], senders: set[int], rate: float, duration_s: float,
                arrival: str = "constant") -> list[NodeConfig]:
    cfgs = ps.configs("qos-vbr", out, matrix_ms=matrix, jitter_ms=0, loss=0, rate=rate,
                      duration_s=duration_s, drain_s=1, params=params, senders=senders)
    return [dataclasses.replace(c, start_at_ns=START,
                                clock=ClockConfig(round(offsets_ms[c.node_id] * 1e6)),
                                workload=dataclasses.replace(c.workload, arrival=arrival))
            for c in cfgs]


def simulate(cfgs: list[NodeConfig], links: type[LinkModel] | None = None) -> Simulator:
    sim = Simulator(cfgs, seed=7)
    if links is not None:
        for key, link in list(sim.links.items()):
            sim.links[key] = links(link.path, random.Random(f"{key}"))
        sim._refanout()
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in cfgs))
    return sim


def host_fault(sim: Simulator, op: str, nid: int) -> Callable[[], None]:
    """A crash or restart for `Simulator.at`, as the fault timeline applies it."""
    def apply() -> None:
        getattr(sim, op)(sim.configs[nid].name)  # the process control of nodes/faults.py
    return apply


def latencies(events: Events) -> list[tuple[float, str, str]]:
    """(ms, receiver, mid) for every final delivery: fnl.t - send.t at the origin."""
    sent = {e["mid"]: e["t"] for evs in events.values() for e in evs if e["ev"] == "send"}
    return [((e["t"] - sent[e["mid"]]) / 1e6, h, e["mid"])
            for h, evs in events.items() for e in evs if e["ev"] == "fnl"]


def key_order(events: Events) -> list[str]:
    """Every data message sent, sorted by (slot, sender index, FIFO number): Lemma 5.2's
    order, from the senders' `net` events (host names h1..hn are in index order)."""
    keys = {e["mid"]: (e["slot"], int(h[1:]), int(e["mid"].rsplit(":", 1)[1]))
            for h, evs in events.items() for e in evs if e["ev"] == "net" and e["kind"] == "data"}
    return sorted(keys, key=keys.__getitem__)


def is_subsequence(seq: list[str], of: list[str]) -> bool:
    it = iter(of)
    return all(m in it for m in seq)


def counts(events: Events, ev: str) -> dict[str, int]:
    return {h: sum(1 for e in evs if e["ev"] == ev) for h, evs in events.items()}


def test_vbr_tight_setup_reaches_delta_gamma_theta_and_never_passes_it(tmp_path: Path) -> None:
    """Thm 2's tight set-up (004 §5.3): h1 idle and Γ/2 behind, h3 Γ/2 ahead and sending at
    (a sliding phase of) its slot starts, h1 -> h2 taking the whole Δ. Bound 40+10+20 = 70 ms."""
    cfgs = vbr_configs(tmp_path, matrix=[[0, 40, 5], [5, 0, 5], [5, 5, 0]],
                       offsets_ms=[-5, 0, 5], senders={2}, rate=49.9, duration_s=10,
                       params={"delta": "40ms", "gamma": "10ms", "theta": "20ms",
                               "max_burst": 3})
    sim = simulate(cfgs)
    events = ps.read_events(tmp_path)
    worst = max(latencies(events))
    assert 69.0 <= worst[0] <= 70.0, worst
    assert worst[1] == "h2"  # the receiver behind the Δ path
    order = key_order(events)
    for h, mids in ps.deliveries(events).items():
        assert mids == order, h  # Lemma 5.2: the key order, complete (no loss, no faults)
    assert all(core.protocol.crosscheck == 0 for core in sim.cores.values())  # type: ignore[attr-defined]


def test_clocks_beyond_gamma_break_the_bound_but_not_the_order(tmp_path: Path) -> None:
    """Negative control: the same set-up with offsets of ±1.5Γ (Γ declared unchanged). The
    latency oracle must be able to fail: the slot ends now spread by 3Γ, so the bound is
    passed (or the deadline detector fires falsely), while the order is still one order."""
    cfgs = vbr_configs(tmp_path, matrix=[[0, 40, 5], [5, 0, 5], [5, 5, 0]],
                       offsets_ms=[-15, 0, 15], senders={2}, rate=49.9, duration_s=5,
                       params={"delta": "40ms", "gamma": "10ms", "theta": "20ms",
                               "max_burst": 3})
    simulate(cfgs)
    events = ps.read_events(tmp_path)
    worst = max(latencies(events))[0]
    removes = sum(counts(events, "remove").values())
    assert worst > 70.0 + 1.0 or removes > 0, (worst, removes)
    assert ps.total_order_pairs(events) == 0
    order = key_order(events)
    assert all(is_subsequence(m, order) for m in ps.deliveries(events).values())


def test_rates_are_consistent_and_net_burst_equals_app_burst(tmp_path: Path) -> None:
    """Lemma 5.1 and Thm 3 with renegotiations every ~20 slots: the counting receivers never
    disagree with the header's slot, at most max_burst messages (the RATE one included) and at
    most one DUMMY leave per slot, and no DUMMY in a slot the application filled."""
    cfgs = vbr_configs(tmp_path, matrix=[[0, 8, 12, 3], [8, 0, 5, 9], [12, 5, 0, 4],
                                         [3, 9, 4, 0]],
                       offsets_ms=[-5, 2, 5, -1], senders={0, 1, 2, 3}, rate=100,
                       duration_s=4, arrival="poisson",
                       params={"delta": "20ms", "gamma": "10ms", "theta": "20ms",
                               "max_burst": 4})
    sim = Simulator(cfgs, seed=7)
    rng = random.Random(3)
    bursts: dict[int, list[tuple[int, int]]] = {n: [] for n in sim.cores}

    def renegotiate(nid: int) -> None:
        core = sim.cores[nid]
        mx = rng.randint(2, 6)
        lt = core.clock.local(sim.now)
        sim._apply(nid, core._process(core.protocol.on_new_rate({"avg": 100, "max_burst": mx},
                                                                lt), sim.now))
        bursts[nid].append((sim.now, mx))

    for k in range(1, 10):
        for nid in sim.cores:
            sim.at(START + k * 400_000_000 + nid * 7_000_000, partial(renegotiate, nid))
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in cfgs))
    events = ps.read_events(tmp_path)
    assert all(core.protocol.crosscheck == 0 for core in sim.cores.values())  # type: ignore[attr-defined]
    assert ps.total_order_pairs(events) == 0
    for h, evs in events.items():
        per_slot: dict[int, Counter[str]] = {}
        max_send: dict[int, int] = {}
        for e in evs:
            if e["ev"] == "net":
                per_slot.setdefault(e["slot"], Counter())[e["kind"]] += 1
            elif e["ev"] == "slot":
                max_send[e["s"]] = e["maxSend"]
        assert len(set(max_send.values())) > 1, h  # the renegotiations took effect
        for s, c in per_slot.items():
            assert sum(c.values()) <= max_send[s], (h, s, c)  # NetMaxBurst = AppMaxBurst
            assert c["dummy"] <= 1
            if c["data"] + c["rate"] == max_send[s]:
                assert c["dummy"] == 0
        assert sum(c["rate"] for c in per_slot.values()) == 1 + len(bursts[int(h[1:]) - 1])


def test_start_reserves_net_avg_rate_and_refusal_is_logged() -> None:
    """Rule V2 of qos_vbr.py (Thm 3): NetAvgRate = avg + 1/Θ msgs/s, NetMaxBurst = max_burst,
    as bits/s and burst bytes for n-1 unicast copies; a refused reservation is logged and the
    protocol runs on."""
    layer = QosVbr(0, [0, 1, 2], {"theta": "20ms", "avg": {"h1": 30}, "max_burst": 5,
                                  "start_at_ns": 10**9, "member_names": {0: "h1"},
                                  "payload_size": 100})
    acts = layer.start(10**9 - 10_000_000)  # exactly E = start - Γ
    reserve = next(a for a in acts if isinstance(a, Reserve))
    wire = 44 + 100
    assert reserve.rate_bps == pytest.approx(2 * (30 + 50) * wire * 8)
    assert reserve.burst_bytes == 2 * 5 * wire
    logs = layer.on_reserve_result("qos-vbr", False, reserve.rate_bps, "over capacity", 0)
    assert [(a.ev, a.fields["reason"]) for a in logs] == [("refused", "over capacity")]  # type: ignore[union-attr]
    assert layer.refused


def test_slot_deadline_detector_removes_a_crashed_process_only(tmp_path: Path) -> None:
    """Lemma 6.1: every correct process removes the crashed one at the same slot and nobody
    else is ever removed; deliveries stay in the key order (with the crashed sender's gap)."""
    cfgs = vbr_configs(tmp_path, matrix=[[0, 5, 5, 5]] * 4, offsets_ms=[0, 3, -5, 5],
                       senders={0, 1, 2, 3}, rate=60, duration_s=3, arrival="poisson",
                       params={"delta": "40ms", "gamma": "10ms", "theta": "20ms",
                               "max_burst": 4})
    sim = Simulator(cfgs, seed=7)
    sim.at(START + 1_234_000_000, host_fault(sim, "crash", 1))
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in cfgs))
    events = ps.read_events(tmp_path)
    removes = {h: [(e["member"], e["slot"]) for e in evs if e["ev"] == "remove"]
               for h, evs in events.items() if h != "h2"}
    assert len({tuple(r) for r in removes.values()}) == 1, removes
    assert next(iter(removes.values()))[0][0] == "h2"
    order = key_order(events)
    for h, mids in ps.deliveries(events).items():
        assert is_subsequence(mids, order), h
    assert ps.total_order_pairs(events) == 0
    live = [h for h in events if h != "h2"]
    fnl = {h: [m for m in ps.deliveries(events)[h]] for h in live}
    assert fnl[live[0]] == fnl[live[1]] == fnl[live[2]]  # no gaps among correct senders


def test_partition_detaches_and_heal_merges_at_one_smax_per_pair(tmp_path: Path) -> None:
    """§6.6 (E-FT-4): {h1,h2} | {h3,h4,h5} for 2 s. Each side removes the other at one slot,
    after the heal each pair merges at one Smax (both sides log it), safety holds throughout
    and afterwards everyone delivers the same sequence."""
    cfgs = vbr_configs(tmp_path, matrix=[[0, 10, 10, 10, 10]] * 5, offsets_ms=[-5, -2, 0, 3, 5],
                       senders={0, 1, 2, 3, 4}, rate=30, duration_s=5, arrival="poisson",
                       params={"delta": "50ms", "gamma": "10ms", "theta": "20ms",
                               "max_burst": 4})
    sim = Simulator(cfgs, seed=7)
    cuts = [[a, b] for a in ("h1", "h2") for b in ("h3", "h4", "h5")]
    cuts += [[b, a] for a, b in cuts]
    sim.at(START + 1_000_000_000, partial(sim.block, [(a, b) for a, b in cuts]))
    sim.at(START + 3_000_000_000, sim.heal)
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in cfgs))
    events = ps.read_events(tmp_path)
    assert ps.total_order_pairs(events) == 0
    order = key_order(events)
    assert all(is_subsequence(m, order) for m in ps.deliveries(events).values())
    merges = {(h, e["peer"]): e["smax"] for h, evs in events.items() for e in evs
              if e["ev"] == "merge"}
    side = {"h1": 0, "h2": 0, "h3": 1, "h4": 1, "h5": 1}
    pairs = {(a, b) for a in side for b in side if side[a] != side[b]}
    assert set(merges) == pairs
    assert all(merges[(a, b)] == merges[(b, a)] for a, b in pairs)
    removed = {(h, e["member"]) for h, evs in events.items() for e in evs if e["ev"] == "remove"}
    assert removed == pairs
    last_merge = max(merges.values())
    slot_of = {e["mid"]: e["slot"] for evs in events.values() for e in evs
               if e["ev"] == "net" and e["kind"] == "data"}
    tails = {tuple(m for m in mids if slot_of[m] >= last_merge)
             for mids in ps.deliveries(events).values()}
    assert len(tails) == 1 and len(next(iter(tails))) > 100


def test_crash_mid_multicast_leaves_gaps_only_of_the_crashed_sender(tmp_path: Path) -> None:
    """E-FT-3: h2's last datagrams reach h1 and h4 but not h3 (it crashes mid-multicast).
    Total order with gaps (Def. 2): h3 misses some of h2's messages that the others deliver,
    every message missing at one correct node and delivered at another is h2's, and each
    sequence is a subsequence of the key order."""
    cfgs = vbr_configs(tmp_path, matrix=[[0, 5, 5, 5]] * 4, offsets_ms=[0, 3, -5, 5],
                       senders={0, 1, 2, 3}, rate=200, duration_s=2, arrival="constant",
                       params={"delta": "40ms", "gamma": "10ms", "theta": "20ms",
                               "max_burst": 8, "avg": 200})  # reserved for the 200/s sent
    sim = Simulator(cfgs, seed=7)
    crash_at = START + 1_004_000_000

    def cut() -> None:
        sim.cores[1].blocked_out.add(2)  # h2 -> h3 from here on: the end of its multicasts

    sim.at(crash_at - 10_000_000, cut)
    sim.at(crash_at, host_fault(sim, "crash", 1))
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in cfgs))
    events = ps.read_events(tmp_path)
    assert ps.total_order_pairs(events) == 0
    order = key_order(events)
    dl = {h: set(m) for h, m in ps.deliveries(events).items()}
    assert all(is_subsequence(m, order) for m in ps.deliveries(events).values())
    correct = ("h1", "h3", "h4")
    gaps = {m for a in correct for b in correct for m in dl[a] - dl[b]}
    assert gaps and {m.split(":")[0] for m in gaps} == {"h2"}
    assert dl["h1"] - dl["h3"] == gaps
    removes = {h: [(e["member"], e["slot"]) for e in events[h] if e["ev"] == "remove"]
               for h in correct}
    assert len({tuple(r) for r in removes.values()}) == 1  # one slot, everywhere


class BoundedLoss(LinkModel):
    """Loss with probability P, never more than X_MAX consecutive datagrams on one path (the
    model of 004 §7: at most x consecutive losses per sender); no delay variation."""

    P = 0.1
    X_MAX = 2

    def __init__(self, path: PathConfig, rng: random.Random):
        super().__init__(path, rng)
        self.plain = None
        self.lost_run = 0

    def transit(self, now_ns: int, size: int) -> int | None:
        if self.lost_run < self.X_MAX and self.rng.random() < self.P:
            self.lost_run += 1
            return None
        self.lost_run = 0
        return self.path.delay_ns


class BurstLoss(BoundedLoss):
    P = 0.3
    X_MAX = 8


@pytest.mark.parametrize("links, bounded", [(BoundedLoss, True), (BurstLoss, False)])
def test_loss_tolerance_gives_total_order_with_gaps(tmp_path: Path, links: type[LinkModel],
                                                    bounded: bool) -> None:
    """§7 with x = 2. Within the loss bound (10 %, at most 2 in a row): nobody is removed,
    every received data message is delivered (Def. 2 liveness), latency stays under
    Δ + 2Γ + Θ, and each node delivers a subsequence of the key order. Stale rates cannot
    advance a receiver early: the first x+1 messages after a change all carry the new burst
    and at most x of them are lost, so any message of the new slot that arrives comes with, or
    after, a copy of the rate. Negative control (bursts of up to 8 at 30 %): false removals
    and merges appear, gaps grow, and the order still holds."""
    cfgs = vbr_configs(tmp_path, matrix=[[0, 10, 10, 10, 10]] * 5, offsets_ms=[-5, -2, 0, 3, 5],
                       senders={0, 1, 2, 3, 4}, rate=30, duration_s=6, arrival="poisson",
                       params={"delta": "50ms", "gamma": "10ms", "theta": "20ms",
                               "max_burst": 4, "loss_tolerance": 2})
    sim = simulate(cfgs, links)
    assert sim.stats.lost > 0
    events = ps.read_events(tmp_path)
    order = key_order(events)
    for h, mids in ps.deliveries(events).items():
        assert is_subsequence(mids, order), h
    assert ps.total_order_pairs(events) == 0
    assert ps.integrity(events) == 0
    removes = sum(counts(events, "remove").values())
    if bounded:
        assert removes == 0
        for h, evs in events.items():
            got = {e["mid"] for e in evs if e["ev"] == "recv"}
            assert got <= {e["mid"] for e in evs if e["ev"] == "fnl"}, h
            assert sum(1 for e in evs if e["ev"] == "late") == 0
        assert max(latencies(events))[0] <= 50 + 2 * 10 + 20
    else:
        assert removes > 0 and sum(counts(events, "merge").values()) > 0


def run_experiment(tmp_path: Path, name: str) -> tuple[Path, Events]:
    proc = subprocess.run([sys.executable, "-m", "testbed", "run",
                           str(ROOT / "experiments" / f"{name}.yaml"), "--backend", "sim",
                           "--out", str(tmp_path / "runs"), "--no-analyze"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = run_dir_of(tmp_path / "runs")
    return run, ps.read_events(run)


def test_experiment_qos_vbr_is_within_1ms_of_the_bound(tmp_path: Path) -> None:
    _, events = run_experiment(tmp_path, "qos-vbr")
    worst = max(latencies(events))[0]
    assert 69.0 <= worst <= 70.0  # Δ + Γ + Θ
    assert ps.total_order_pairs(events) == 0


def test_experiment_qos_vbr_crash_is_within_1ms_of_the_bound_and_joins(tmp_path: Path) -> None:
    """Thm 5's tight set-up plus §6.3's join: max latency within 1 ms of Δ + 2Γ + Θ = 80 ms;
    every `add` of the joiner names one Smax; it starts Smax at most Δ + Γ + Θ after waking;
    from Smax on its deliveries equal everyone else's."""
    _, events = run_experiment(tmp_path, "qos-vbr-crash")
    worst = max(latencies(events))
    assert 79.0 <= worst[0] <= 80.0, worst
    assert ps.total_order_pairs(events) == 0
    joins = [e for e in events["h2"] if e["ev"] == "join"]
    assert len(joins) == 1
    smax = joins[0]["smax"]
    adds = {e["slot"] for h, evs in events.items() if h != "h2" for e in evs
            if e["ev"] == "add" and e["member"] == "h2"}
    assert adds == {smax}
    wake = joins[0]["lt"]
    start = next(e for e in events["h2"] if e["ev"] == "slot" and e["s"] == smax)
    assert start["lt"] - wake <= (40 + 10 + 20) * 1_000_000
    slot_of = {e["mid"]: e["slot"] for evs in events.values() for e in evs
               if e["ev"] == "net" and e["kind"] == "data"}
    after = [e["mid"] for e in events["h2"] if e["ev"] == "fnl" and e["t"] > wake]
    assert after and min(slot_of[m] for m in after) >= smax
    for h in ("h1", "h3", "h4"):
        theirs = [m for m in ps.deliveries(events)[h] if slot_of[m] >= smax]
        assert theirs == after, h


def test_experiment_qos_vbr_loss_total_order_with_gaps(tmp_path: Path) -> None:
    _, events = run_experiment(tmp_path, "qos-vbr-loss")
    assert ps.total_order_pairs(events) == 0
    order = key_order(events)
    for h, mids in ps.deliveries(events).items():
        assert is_subsequence(mids, order), h
        recv = {e["mid"] for e in events[h] if e["ev"] == "recv"}
        assert recv <= set(mids), h  # Def. 2: received is delivered
    assert max(latencies(events))[0] <= 50 + 2 * 10 + 20


def test_theta_zero_is_a_one_line_error(tmp_path: Path) -> None:
    spec = (ROOT / "experiments" / "qos-vbr.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(spec.replace("theta: 20ms", "theta: 0ms"))
    with pytest.raises(SpecError) as exc:
        load_experiment(bad)
    lines = exc.value.problems
    assert len(lines) == 1, lines
    line = spec.splitlines().index(next(x for x in spec.splitlines() if "theta:" in x)) + 1
    assert str(lines[0]).startswith(f"{bad}:{line}: protocol.params.theta: "), lines


def test_loss_with_a_crash_and_a_restart(tmp_path: Path) -> None:
    """E-LOSS-3: x = 2 with bounded loss, h2 crashes and restarts. The others remove it after
    x+1 silent slots, all at the same slot, and add it at its Smax; order and Def. 2 liveness
    hold for the hosts that never crashed; latency stays under Δ + 2Γ + Θ."""
    cfgs = vbr_configs(tmp_path, matrix=[[0, 10, 10, 10, 10]] * 5, offsets_ms=[-5, -2, 0, 3, 5],
                       senders={0, 1, 2, 3, 4}, rate=30, duration_s=5, arrival="poisson",
                       params={"delta": "50ms", "gamma": "10ms", "theta": "20ms",
                               "max_burst": 4, "loss_tolerance": 2})
    sim = Simulator(cfgs, seed=7)
    for key, link in list(sim.links.items()):
        sim.links[key] = BoundedLoss(link.path, random.Random(f"{key}"))
    sim._refanout()
    sim.at(START + 1_234_000_000, host_fault(sim, "crash", 1))
    sim.at(START + 2_500_000_000, host_fault(sim, "restart", 1))
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in cfgs))
    events = ps.read_events(tmp_path)
    assert ps.total_order_pairs(events) == 0 and ps.integrity(events) == 0
    order = key_order(events)
    assert all(is_subsequence(m, order) for m in ps.deliveries(events).values())
    smax = next(e["smax"] for e in events["h2"] if e["ev"] == "join")
    crash_slot = (1_234_000_000 + 10_000_000) // 20_000_000  # E = start - Γ
    for h in ("h1", "h3", "h4", "h5"):
        evs = events[h]
        assert [(e["member"], e["slot"]) for e in evs if e["ev"] == "remove"] == [
            ("h2", crash_slot + 2)]  # slots crash_slot .. +2 silent: x + 1 = 3
        assert [(e["member"], e["slot"]) for e in evs if e["ev"] == "add"] == [("h2", smax)]
        got = {e["mid"] for e in evs if e["ev"] == "recv"}
        assert got <= {e["mid"] for e in evs if e["ev"] == "fnl"}, h
    assert max(latencies(events))[0] <= 50 + 2 * 10 + 20


def test_per_host_params_name_known_hosts(tmp_path: Path) -> None:
    spec = (ROOT / "experiments" / "qos-vbr.yaml").read_text()
    good = tmp_path / "good.yaml"
    good.write_text(spec.replace("max_burst: 3", "max_burst: {h1: 2, h3: 5}"))
    exp, _ = load_experiment(good)
    assert exp.protocol.params["max_burst"] == {"h1": 2, "h3": 5}
    layer = QosVbr(2, [0, 1, 2], {**exp.protocol.params,
                                  "member_names": {0: "h1", 1: "h2", 2: "h3"}})
    assert layer.my_max == 5
    bad = tmp_path / "bad.yaml"
    bad.write_text(spec.replace("max_burst: 3", "max_burst: {h1: 2, h9: 5}"))
    with pytest.raises(SpecError) as exc:
        load_experiment(bad)
    assert len(exc.value.problems) == 1
    assert "protocol.params.max_burst: unknown host 'h9'" in exc.value.problems[0]


@pytest.mark.spark
@pytest.mark.slow
def test_full_sim_run_is_judged_by_the_qos_analysis(tmp_path: Path) -> None:
    """`testbed run` of experiments/qos-vbr.yaml with the analysis: the `qos` section reads
    qos-vbr's logs (netrecv pairs for Δ_meas, reserve lines for the rate check), the bound is
    Δ+Γ+Θ reached within 1 ms and never passed, and the overhead is 1/Θ (Thm 3)."""
    import json

    proc = run_cli("run", "--out", str(tmp_path), str(ROOT / "experiments/qos-vbr.yaml"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    q = summary["qos"]
    assert (q["formula"], q["bound_ms"], q["delta_measured_ms"], q["gamma_measured_ms"]) == (
        "Δ+Γ+Θ", 70, 40, 10)
    assert 69 <= q["max_latency_ms"] <= 70 and q["assumptions_hold"] and q["refused"] == 0
    assert q["rate_check"]["violations"] == 0
    assert all("declared" in row for row in q["rate_check"]["per_node"].values())
    assert abs(q["net_rate"] - q["app_rate"] - 50) < 0.1
    assert summary["ok"] and summary["checks"]["latency_bound"]["violations"] == 0
    assert all(e["ok"] for e in summary["expectations"])
