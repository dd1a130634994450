"""`leader` (004 §8.1): one order from the leader's relay, latency at most 2Δ + pO with pO
the leader's queueing (modelled by `leader_service_us`), reservations towards the leader."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis import qos
from nodes.protocols.base import Reserve
from nodes.protocols.leader import Leader
from tests import protosim


@pytest.mark.timing
@pytest.mark.parametrize("service_us", [0.0, 2000.0])
def test_leader_total_order_within_two_delta_plus_po(tmp_path: Path, service_us: float) -> None:
    cfgs = protosim.configs("leader", tmp_path, n=4, delay_ms=10, jitter_ms=0, loss=0,
                            rate=30, duration_s=4, drain_s=1,
                            params={"delta": 10, "rate": 50, "leader_service_us": service_us})
    protosim.run(cfgs)
    ev = protosim.read_events(tmp_path)
    assert protosim.total_order_pairs(ev) == 0
    assert protosim.agreement(ev) == 0 and protosim.validity(ev) == 0
    assert protosim.integrity(ev) == 0
    events, skew = qos.read_events(tmp_path)
    q = qos.qos_section(events, skew, "leader", {"delta": 10}, False, True)
    assert q["delta_measured_ms"] == 10.0 and q["assumptions_hold"]
    assert q["above_bound"] == 0
    if service_us:
        assert q["po_ms"] >= 2.0  # a message queued behind another at the leader
        assert q["max_latency_ms"] == pytest.approx(20.0 + q["po_ms"], abs=0.01)  # tight
    else:
        assert q["po_ms"] == 0.0 and q["max_latency_ms"] == 20.0


def test_leader_reserves_the_sum_and_others_their_rate_towards_it() -> None:
    params = {"rate": {"h1": 10, "h2": 20, "h3": 30}, "payload_size": 56,
              "member_names": {0: "h1", 1: "h2", 2: "h3"}}
    at_leader = [a for a in Leader(0, [0, 1, 2], params).start(0) if isinstance(a, Reserve)]
    at_other = [a for a in Leader(2, [0, 1, 2], params).start(0) if isinstance(a, Reserve)]
    assert at_leader[0].rate_bps == 2 * 60 * 100 * 8  # Σ rates to n-1 receivers
    assert at_other[0].rate_bps == 30 * 100 * 8  # its own rate, unicast to L
