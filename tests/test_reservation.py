"""Reservations as a network operation (docs/reservations.md): admission control, the token
bucket that polices a sender in the simulator and in the in-process transport, and
`testbed:type=QoS` `newRate` renegotiating a running reservation."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from nodes.config import Member, NodeConfig, WorkloadConfig
from nodes.faults import Management
from nodes.reservation import MAX_HOLD_NS, Reservations, TokenBucket
from nodes.runtime import NodeRuntime
from nodes.sim import SIM_EPOCH_NS, Simulator
from testbed.mgmt import MgmtClient
from tests.protosim import configs, read_events
from tests.qos_layer import bits_per_message, install

PAYLOAD = 100


def test_token_bucket_paces_at_its_rate_after_the_burst_and_drops_past_its_hold() -> None:
    size = 1000
    b = TokenBucket(8_000_000, burst_bytes=3000)  # 1000 datagrams/s of 1000 bytes
    departures = [b.depart(0, size) for _ in range(300)]
    sent = [d for d in departures if d is not None]
    assert sent[:3] == [0, 0, 0]  # the burst leaves at once
    gaps = {sent[i + 1] - sent[i] for i in range(2, len(sent) - 1)}
    assert gaps <= {1_000_000}  # then one per ms: 8 Mbit/s
    assert sent[-1] <= MAX_HOLD_NS < sent[-1] + 1_000_000  # held at most MAX_HOLD_NS
    assert b.dropped == len(departures) - len(sent) > 0 and b.delayed == len(sent) - 3
    # Once the queue drained, the bucket admits again; a renegotiation keeps FIFO order.
    later = sent[-1] + 10**9
    assert b.depart(later, size) == later
    b.depart(later, size), b.depart(later, size)
    held = b.depart(later, size)
    b.set_rate(80_000_000, 3000, later)
    nxt = b.depart(later, size)
    assert held is not None and nxt is not None
    assert held <= nxt < held + 1_000_000  # never before the held one, sooner than at 8 Mbit/s


def test_admission_control_refuses_past_capacity_and_keeps_the_old_rate() -> None:
    r = Reservations(capacity_bps=1_000_000)
    assert r.reserve("default", 600_000, 0, 0).granted
    assert r.reserve("other", 300_000, 0, 0).granted
    no = r.reserve("third", 200_000, 0, 0)
    assert not no.granted and "\n" not in no.reason
    assert "capacity 1 Mbit/s" in no.reason and "900 kbit/s already reserved" in no.reason
    # A renegotiation counts without its own old rate; refused, the old one stays.
    assert r.reserve("default", 700_000, 0, 5).granted
    assert not r.reserve("default", 800_000, 0, 6).granted
    assert r.by_key["default"].rate_bps == 700_000 and r.refused == 2
    for bad in (0, -5, float("nan"), float("inf")):
        assert not r.reserve("x", bad, 0, 7).granted


def _sim(tmp_path: Path, send_rate: float, reserve_msgs: float, *, capacity: int | None = None,
         duration_s: float = 10.0) -> tuple[Simulator, Any]:
    cfgs = configs("fifo", tmp_path, n=3, delay_ms=5, jitter_ms=0, loss=0, rate=send_rate,
                   duration_s=duration_s, drain_s=2, senders={0},
                   params={"fd_interval_ms": 1000, "fd_timeout_ms": 5000})
    cfgs = [NodeConfig(**{**c.__dict__, "qos_capacity_bps": capacity,
                          "workload": WorkloadConfig(c.workload.send, send_rate, PAYLOAD,
                                                     "constant")}) for c in cfgs]
    sim = Simulator(cfgs, seed=3)
    layer = install(sim.cores[0], reserve_msgs)
    return sim, layer


def _arrivals(events: list[dict[str, Any]], origin: str) -> list[int]:
    return [e["t"] for e in events if e["ev"] == "fnl" and e["mid"].startswith(origin + ":")]


def test_sim_policing_holds_a_misbehaving_sender_to_its_reservation(tmp_path: Path) -> None:
    # The sender offers 200 msg/s against a reservation of 50 msg/s (two datagrams each).
    sim, layer = _sim(tmp_path, 200, 50)
    sim.run(SIM_EPOCH_NS + 12 * 10**9)
    assert layer.answers == [("default", True, 50 * bits_per_message(3, PAYLOAD), "")]
    ev = read_events(tmp_path)
    # The reservation is the sender's egress: datagrams to h2 and h3 share it (and its
    # tail-drop queue, so the split between them is uneven, as in an HTB class).
    window = [x for host in ("h2", "h3") for x in _arrivals(ev[host], "h1")
              if SIM_EPOCH_NS + 2e9 <= x < SIM_EPOCH_NS + 8e9]
    # 2 x 50/s (heartbeats are not charged).
    assert 2 * 49.5 <= len(window) / 6 <= 2 * 50.0, len(window)
    bucket = sim.cores[0].reservations.by_key["default"].bucket
    assert bucket.dropped > 1000 and bucket.delayed > 0
    assert sim.cores[0].counters.reasons["policed"] == bucket.dropped
    drops = [e for e in ev["h1"] if e["ev"] == "drop"]
    assert drops and drops[0]["reason"] == "policed"
    reserve = [e for e in ev["h1"] if e["ev"] == "reserve"]
    assert reserve[0]["granted"] is True and reserve[0]["rate_bps"] == layer.rate_bps


def test_sim_sender_within_its_reservation_is_not_delayed(tmp_path: Path) -> None:
    sim, _ = _sim(tmp_path, 40, 50, duration_s=5)
    sim.run(SIM_EPOCH_NS + 7 * 10**9)
    bucket = sim.cores[0].reservations.by_key["default"].bucket
    assert bucket.dropped == 0 and bucket.delayed == 0
    ev = read_events(tmp_path)
    sent = {e["mid"]: e["t"] for e in ev["h1"] if e["ev"] == "send"}
    got = {e["mid"]: e["t"] for e in ev["h2"] if e["ev"] == "fnl"}
    assert set(got) == set(sent) and len(sent) == 200
    assert max(got[m] - sent[m] for m in sent) == 5_000_000  # the path delay, nothing added


def test_sim_reservation_over_capacity_is_refused_and_the_layer_sees_it(tmp_path: Path
                                                                         ) -> None:
    sim, layer = _sim(tmp_path, 40, 50, capacity=100_000, duration_s=2)
    sim.run(SIM_EPOCH_NS + 3 * 10**9)
    (key, granted, rate, reason), = layer.answers
    assert not granted and "capacity 100 kbit/s (qos.rate)" in reason
    line = next(e for e in read_events(tmp_path)["h1"] if e["ev"] == "reserve")
    assert line["granted"] is False and line["reason"] == reason and "\n" not in reason
    assert sim.cores[0].reservations.refused == 1
    assert sim.cores[0].reservations.charged() is None  # nothing to police with


def test_sim_new_rate_via_management_renegotiates_without_losing_a_message(tmp_path: Path
                                                                            ) -> None:
    # 80 msg/s offered against 50 reserved: the queue grows until newRate 100 at 0.15 s
    # drains it (MAX_HOLD_NS, 0.2 s, is 20 datagrams at 100/s; the excess is 60/s, so
    # nothing may be dropped).
    sim, layer = _sim(tmp_path, 80, 50, duration_s=4)
    core = sim.cores[0]
    reply: dict[str, Any] = {}
    sim.at(SIM_EPOCH_NS + 150_000_000, lambda: reply.update(sim.management(
        Management("h1", mbean="testbed:type=QoS", exec=("newRate", "100")))))
    sim.run(SIM_EPOCH_NS + 6 * 10**9)
    assert reply["status"] == 200, reply
    assert reply["value"]["default"]["rate_bps"] == 100 * layer.per_msg
    assert layer.new_rates == [{"rate": 100.0}]
    assert [a[1] for a in layer.answers] == [True, True]
    bucket = core.reservations.by_key["default"].bucket
    assert bucket.dropped == 0 and bucket.rate_bps == 100 * layer.per_msg
    ev = read_events(tmp_path)
    sent = {e["mid"] for e in ev["h1"] if e["ev"] == "send"}
    assert 390 <= len(sent) <= 400  # 80/s, then the application's new 100/s
    for host in ("h2", "h3"):
        assert {e["mid"] for e in ev[host] if e["ev"] == "fnl"} == sent
    assert [e["source"] for e in ev["h1"] if e["ev"] == "new-rate"] == ["mgmt"]


def test_new_rate_rejects_bad_arguments_without_touching_the_reservation(tmp_path: Path
                                                                          ) -> None:
    sim, _ = _sim(tmp_path, 10, 50, duration_s=1)
    sim.run(SIM_EPOCH_NS + 2 * 10**9)
    for bad in ("-3", "x", "1,2,3", "rate=0"):
        out = sim.management(Management("h1", mbean="testbed:type=QoS", exec=("newRate", bad)))
        assert out["status"] == 400, (bad, out)
    assert sim.cores[0].reservations.by_key["default"].changes == 0


@pytest.mark.timing
def test_local_new_rate_over_http_changes_the_bucket_and_polices_in_real_time(
        tmp_path: Path) -> None:
    """Two real nodes on loopback (the in-process transport): h1 offers 100 msg/s against a
    30 msg/s reservation, so h2 receives ~30/s; `newRate 150` over the management endpoint
    moves application and reservation to 150/s, and the log shows both grants."""
    members = [Member(0, "h1", "127.0.0.1", 0), Member(1, "h2", "127.0.0.2", 0)]

    ports = []
    for m in members:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((m.host, 0))
        ports.append(s.getsockname()[1])
        s.close()
    members = [Member(m.id, m.name, m.host, p) for m, p in zip(members, ports, strict=True)]
    start = time.time_ns() + 500_000_000
    cfgs = [NodeConfig(
        node_id=m.id, name=m.name, members=members, protocol="fifo",
        params={"fd_interval_ms": 1000, "fd_timeout_ms": 5000},
        log_path=str(tmp_path / m.name / "events.jsonl"), seed=1, start_at_ns=start,
        duration_ns=3_000_000_000, drain_ns=500_000_000,
        workload=WorkloadConfig(m.id == 0, 100.0, PAYLOAD, "constant"),
        control_host=m.host, control_port=0 if m.id == 0 else None, mgmt_token="tok")
        for m in members]
    for c in cfgs:
        Path(c.log_path).parent.mkdir(parents=True)
    layers: dict[int, Any] = {}
    answers: dict[str, Any] = {}

    def manage() -> None:
        control = tmp_path / "h1" / "control.json"
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not (control.exists() and control.read_text()):
            time.sleep(0.02)
        where = json.loads(control.read_text())
        client = MgmtClient(f"http://{where['host']}:{where['port']}", "tok")
        time.sleep(max(0.0, (start - time.time_ns()) / 1e9) + 1.5)
        answers["reserved"] = client.exec("testbed:type=QoS", "newRate", "150")
        time.sleep(1.0)
        answers["used"] = client.read("testbed:type=QoS", "Used")

    async def main() -> None:
        # Both nodes in this thread's loop (signal handlers need the main thread), the
        # management client beside them.
        runtimes = [NodeRuntime(c) for c in cfgs]
        for rt in runtimes:
            layers[rt.cfg.node_id] = install(rt.core, 30)
        await asyncio.wait_for(asyncio.gather(*(rt.run() for rt in runtimes),
                                              asyncio.to_thread(manage)), timeout=15)

    asyncio.run(main())
    assert answers["reserved"]["default"]["rate_bps"] == 150 * layers[0].per_msg
    # `Used` counts from the change: the application's new 150/s (and the backlog) pass.
    assert 0.8 * 150 <= answers["used"]["default"] / layers[0].per_msg <= 1.3 * 150
    recv = [e["t"] for e in (json.loads(x) for x in
                             (tmp_path / "h2" / "events.jsonl").read_text().splitlines())
            if e["ev"] == "fnl"]
    before = [t for t in recv if start + 0.3e9 <= t < start + 1.3e9]
    after = [t for t in recv if start + 2.0e9 <= t < start + 2.9e9]
    assert 22 <= len(before) <= 33, len(before)  # held to 30/s
    assert len(after) >= 0.8 * 135, len(after)  # the application's new 150/s passes
    h1 = [json.loads(x) for x in (tmp_path / "h1" / "events.jsonl").read_text().splitlines()]
    grants = [(e["granted"], e["rate_bps"]) for e in h1 if e["ev"] == "reserve"]
    assert grants == [(True, 30 * layers[0].per_msg), (True, 150 * layers[0].per_msg)]
