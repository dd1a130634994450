"""qos-cbr (004 §4): Update's reconstruction, Theorem 1's bound on its tight set-up, the
±1.5Γ negative control, in-band renegotiation (aligned keeps Δ+Γ, literal does not:
the counterexample of docs/qos.md), reservations, bad specs, and one `testbed run` on the sim."""

from __future__ import annotations

import collections
import json
import random
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest

from analysis import qos
from analysis.record import read_record
from nodes.config import ClockConfig
from nodes.protocols.base import Reserve, Send, SetTimer
from nodes.protocols.qos_cbr import QosCbr, update
from nodes.sim import Simulator
from tests import protosim
from tests.inproc import run_cli

ROOT = Path(__file__).resolve().parent.parent
TIGHT = [[0, 10, 40], [10, 0, 10], [10, 10, 0]]  # a -> c = Δ = 40 ms (Theorem 1's tight set-up)


def test_update_gives_the_briefs_test_vectors() -> None:
    # 004 Fig. 5 as reconstructed (docs/qos.md), processes 1-based as in the paper
    assert update([1, 1], 0, {1: 2, 2: 1}, 2, [1, 2], True)[0] == [1, 2, 1]
    assert update([1], 0, {1: 1, 2: 2}, 2, [1, 2], True)[0] == [1, 2, 2]
    p, _ = update([1] * 10, 0, {1: 10, 2: 100}, 2, [1, 2], True)
    assert len(p) == 110 and p[:12] == [1] + [2] * 10 + [1]
    # off-grid renegotiation 2 -> 3 at current = 3: literal lands on an entry already processed
    assert update([1, 2, 1, 2], 3, {1: 2, 2: 3}, 2, [1, 2], False) == ([1, 2, 2, 1, 2], 3)
    assert update([1, 2, 1, 2], 3, {1: 2, 2: 3}, 2, [1, 2], True) == ([1, 2, 2, 1, 2], 4)
    for aligned in (True, False):  # on-grid: both rules agree
        assert update([1, 2, 1, 2], 3, {1: 2, 2: 4}, 2, [1, 2], aligned) == ([1, 2, 2, 1, 2, 2], 4)
        assert update([1, 2, 1], 2, {1: 4, 2: 1}, 1, [1, 2], aligned) == ([2, 1, 1, 1, 1], 3)


def test_porder_is_the_virtual_time_order_after_any_rate_changes() -> None:
    """Invariant (004 §4.1): pairs (i, k), k < rate[i], sorted by k/rate[i], ties by the
    insertion order (a process moves last each time its rate changes)."""
    rng = random.Random(4)
    for _ in range(200):
        n = rng.randint(2, 5)
        rate = {i: rng.randint(1, 12) for i in range(n)}
        order = [0] * rate[0]
        for j in range(1, n):
            order, _ = update(order, 0, rate, j, list(range(j + 1)), True)
        tie = list(range(n))
        for _ in range(rng.randint(0, 4)):
            j = rng.randrange(n)
            rate[j] = rng.randint(1, 12)
            order, _ = update(order, rng.randrange(len(order)), rate, j, list(range(n)), True)
            tie.remove(j)
            tie.append(j)
        expect = sorted((Fraction(k, rate[i]), tie.index(i), i) for i in range(n)
                         for k in range(rate[i]))
        assert order == [i for _, _, i in expect]


def _tight(out: Path, offsets_ms: list[float], params: dict | None = None,
           rate: float = 20.0, duration_s: float = 5.0) -> list:
    cfgs = protosim.configs("qos-cbr", out, matrix_ms=TIGHT, jitter_ms=0, loss=0, rate=rate,
                            duration_s=duration_s, drain_s=1,
                            params={"delta": 40, "gamma": 10, "rate": 50, **(params or {})})
    return [replace(c, clock=ClockConfig(round(o * 1e6)))
            for c, o in zip(cfgs, offsets_ms, strict=True)]


def _judge(out: Path) -> tuple[protosim.Events, dict]:
    events, skew = qos.read_events(read_record(out))
    return protosim.read_events(out), qos.qos_section(events, skew, "qos-cbr",
                                                      {"delta": 40, "gamma": 10}, False, True)


@pytest.mark.timing
def test_tight_setup_reaches_delta_plus_gamma_and_never_exceeds_it(tmp_path: Path) -> None:
    protosim.run(_tight(tmp_path, [-5, 5, 0]))
    ev, q = _judge(tmp_path)
    assert protosim.total_order_pairs(ev) == 0
    assert protosim.agreement(ev) == 0 and protosim.integrity(ev) == 0
    assert q["delta_measured_ms"] == 40.0 and q["gamma_measured_ms"] == 10.0
    assert q["assumptions_hold"] and q["above_bound"] == 0
    assert 49.0 <= q["max_latency_ms"] <= 50.0  # within 1 ms of Δ+Γ, never above
    assert q["rate_check"]["violations"] == 0  # one net message per tick: NetRate = r


def test_skewed_clocks_void_the_bound_but_keep_total_order(tmp_path: Path) -> None:
    protosim.run(_tight(tmp_path, [-15, 15, 0]))
    ev, q = _judge(tmp_path)
    assert protosim.total_order_pairs(ev) == 0 and protosim.agreement(ev) == 0
    assert q["gamma_measured_ms"] == 30.0 and not q["assumptions_hold"]
    assert q["max_latency_ms"] > 65.0  # ≈ Δ+Γ+2Γ: the oracle can fail
    assert qos.latency_check(q)["violations"] == 0  # flagged, not judged


def _renegotiate(out: Path, cursor: str) -> tuple[protosim.Events, dict]:
    cfgs = _tight(out, [-5, 5, 0], {"rate": 10, "update_cursor": cursor}, rate=5,
                  duration_s=6)
    sim = Simulator(cfgs, seed=7)

    def change(nid: int, r: int) -> None:
        core = sim.cores[nid]
        acts = core.protocol.on_new_rate({"rate": r}, core.clock.local(sim.now))
        sim._apply(nid, core._process(acts, sim.now))

    for at, nid, r in [(1.23, 1, 25), (2.57, 0, 7), (3.9, 1, 5), (4.4, 2, 13)]:
        sim.at(cfgs[0].start_at_ns + round(at * 1e9), lambda nid=nid, r=r: change(nid, r))
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in cfgs))
    return _judge(out)


def test_renegotiation_keeps_one_porder_and_the_bound_with_aligned_cursor(
        tmp_path: Path) -> None:
    ev, q = _renegotiate(tmp_path, "aligned")
    assert protosim.total_order_pairs(ev) == 0 and protosim.agreement(ev) == 0
    logs = {h: [(e["hash"], e["cycle"], e["current"]) for e in evs if e["ev"] == "porder"]
            for h, evs in ev.items()}
    assert len(logs["h1"]) == 5 and logs["h1"] == logs["h2"] == logs["h3"]  # Lemma 4.1
    assert q["above_bound"] == 0 and q["max_latency_ms"] <= 50.0
    assert q["porder_mismatches"] == 0


def test_literal_cursor_exceeds_the_bound_after_an_off_grid_change(tmp_path: Path) -> None:
    """The paper's Fig. 5 cursor rule (docs/qos.md): safe, but latency stays above Δ+Γ."""
    ev, q = _renegotiate(tmp_path, "literal")
    assert protosim.total_order_pairs(ev) == 0
    assert q["above_bound"] > 0 and q["max_latency_ms"] > 100.0


def test_reservation_asked_at_start_and_on_new_rate_and_refusal_voids_the_claim() -> None:
    p = QosCbr(1, [0, 1, 2], {"rate": 50, "payload_size": 100, "start_at_ns": 0,
                              "epoch_ms": 0})
    acts = p.start(0)
    res = [a for a in acts if isinstance(a, Reserve)]
    assert res and res[0].rate_bps == 2 * 50 * 144 * 8  # (n-1) * r * wire bytes * 8
    res = [a for a in p.on_new_rate({"rate": 20}, 10) if isinstance(a, Reserve)]
    assert res[0].rate_bps == 2 * 20 * 144 * 8
    logs = p.on_reserve_result("qos-cbr", False, res[0].rate_bps, "over capacity", 11)
    assert [a.ev for a in logs] == ["refused"] and not p.bound_claimed
    assert p.on_new_rate({"rate": 0}, 12)[0].ev == "reject"


def test_init_rate_waits_for_the_configured_start() -> None:
    """A node booted before the run's start (real backends boot one by one) holds its
    init-rate until then, when every peer listens; one started later sends it at once."""
    early = QosCbr(0, [0, 1, 2], {"rate": 50, "payload_size": 100, "start_at_ns": 10**9})
    acts = early.start(10**9 - 700_000_000)
    assert acts == [SetTimer("cbr:init", 700_000_000)]
    assert early.on_timer("cbr:tick", 10**9 - 1) == []  # nothing ticks before the init-rate
    acts = early.on_timer("cbr:init", 10**9)
    assert [type(a) for a in acts if isinstance(a, Reserve | Send)] == [Reserve, Send]
    assert early.on_timer("cbr:init", 10**9 + 1) == []  # once only
    late = QosCbr(0, [0, 1, 2], {"rate": 50, "payload_size": 100, "start_at_ns": 10**9})
    assert any(isinstance(a, Send) for a in late.start(10**9 + 5))


@pytest.mark.parametrize(("change", "message"), [
    ("delta: 40ms", "delta 30ms is smaller than the topology's largest path delay"),
    ("gamma: 10ms", "protocol.params.gamma: gamma must be positive"),
])
def test_bad_qos_params_are_one_line_errors(tmp_path: Path, change: str, message: str) -> None:
    text = (ROOT / "experiments/qos-cbr.yaml").read_text()
    bad = {"delta: 40ms": "delta: 30ms", "gamma: 10ms": "gamma: -1ms"}[change]
    spec = tmp_path / "bad.yaml"
    spec.write_text(text.replace(change, bad))
    from testbed.spec.loader import SpecError, load_experiment

    with pytest.raises(SpecError) as err:
        load_experiment(spec)
    lines = str(err.value).splitlines()
    line = next(n for n, ln in enumerate(spec.read_text().splitlines(), 1) if bad in ln)
    assert len(lines) == 1 and lines[0].startswith(f"{spec}:{line}: ") and message in lines[0]


def test_a_bounded_protocol_over_tls_is_refused_in_one_line(tmp_path: Path) -> None:
    """TCP turns loss into delay, so a latency bound cannot hold over `transport: tls`."""
    text = (ROOT / "experiments/qos-cbr.yaml").read_text()
    spec = tmp_path / "tls.yaml"
    spec.write_text(text.replace("backend: sim", "backend: local") + "transport: tls\n")
    from testbed.spec.loader import SpecError, load_experiment

    with pytest.raises(SpecError) as err:
        load_experiment(spec)
    lines = str(err.value).splitlines()
    assert len(lines) == 1 and "transport tls" in lines[0] and lines[0].startswith(f"{spec}:")


@pytest.mark.spark
@pytest.mark.slow
def test_full_sim_run_meets_its_expectations(tmp_path: Path) -> None:
    """`testbed run` of experiments/qos-cbr.yaml: analysis writes the qos section and every
    expectation (bound within 1 ms, never above, assumptions hold) passes."""
    proc = run_cli("run", "--out", str(tmp_path), str(ROOT / "experiments/qos-cbr.yaml"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    q = summary["qos"]
    assert (q["bound_ms"], q["delta_measured_ms"], q["gamma_measured_ms"]) == (50, 40, 10)
    assert 49 <= q["max_latency_ms"] <= 50 and q["assumptions_hold"] and q["refused"] == 0
    assert summary["checks"]["latency_bound"]["violations"] == 0
    assert collections.Counter(e["ok"] for e in summary["expectations"]) == {True: 6}


def test_loss_leaves_gaps_but_never_breaks_the_total_order(tmp_path: Path) -> None:
    """Beyond §4 (which assumes no loss): message K fills entry K whatever was lost
    before it, and a lost rate message halts its sender's stream, so 5% loss, reordering
    jitter and renegotiations leave gaps, never two orders (the nightly's partitions)."""
    cfgs = protosim.configs("qos-cbr", tmp_path, n=4, delay_ms=10, jitter_ms=2, loss=0.05,
                            rate=10, duration_s=4, drain_s=1, params={"rate": 50})
    sim = Simulator(cfgs, seed=3)
    for at, nid, r in [(1.0, 1, 20), (2.0, 2, 70), (3.0, 1, 35)]:
        def change(nid: int = nid, r: int = r) -> None:
            core = sim.cores[nid]
            acts = core.protocol.on_new_rate({"rate": r}, core.clock.local(sim.now))
            sim._apply(nid, core._process(acts, sim.now))
        sim.at(cfgs[0].start_at_ns + round(at * 1e9), change)
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in cfgs))
    ev = protosim.read_events(tmp_path)
    assert protosim.total_order_pairs(ev) == 0 and protosim.integrity(ev) == 0
    gaps = sum(1 for evs in ev.values() for e in evs if e["ev"] == "gap")
    delivered = sum(1 for evs in ev.values() for e in evs if e["ev"] == "fnl")
    halts = sum(1 for evs in ev.values() for e in evs if e["ev"] == "halt")
    assert gaps > 0 and delivered > 50, (gaps, halts, delivered)


def test_negative_control_positions_by_arrival_break_the_order_under_loss(
        tmp_path: Path) -> None:
    """The literal Fig. 4 (a message takes the next entry of its sender, whatever was lost)
    gives two orders under the same loss: the K placement is what keeps it safe."""
    def by_arrival(self: QosCbr, j: int, h: object, item: tuple) -> list:
        if item[0] == "init":
            if j in self.recv_rate:
                return []
            self.recv_rate[j] = item[1]
        self.rq[j].append(item)
        return []

    for patched, out in ((False, tmp_path / "k"), (True, tmp_path / "arrival")):
        cfgs = protosim.configs("qos-cbr", out, n=4, delay_ms=10, jitter_ms=2, loss=0.05,
                                rate=10, duration_s=4, drain_s=1, params={"rate": 50})
        protosim.run(cfgs, seed=3, patch=(lambda nid, layer: setattr(
            layer, "_place", by_arrival.__get__(layer))) if patched else None)
        pairs = protosim.total_order_pairs(protosim.read_events(out))
        assert (pairs > 0) if patched else (pairs == 0)
