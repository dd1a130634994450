"""The simulator at a hundred hosts (topologies/regions-100.yaml, the sequencer of
experiments/wan-100.yaml): a short run completes with a clean verdict within a bounded number
of simulator events per final delivery -- a mechanism bound, not a timing.

A delivery costs at least the datagrams that carry it: the DATA and its share of an ORDER
(about two events per delivery), plus the ACKs that free send buffers and the failure
detector's probes. An idle sender's HEARTBEATs go only to the members still behind, once it
has been idle for `heartbeat_after_ms` and backing off from there, and the failure detector
probes one member a round: HEARTBEATs or ALIVEs to every member at every tick would make most
of a hundred hosts' events, and the bound fails.
"""

from __future__ import annotations

from pathlib import Path

from analysis.judge import judge_run
from analysis.record import read_record
from testbed.explore.case import Base, Case, materialise, raw_data, simulate

ROOT = Path(__file__).resolve().parents[1]
WAN100 = ROOT / "experiments" / "wan-100.yaml"
EVENTS_PER_DELIVERY = 12  # the bound, which the heartbeat storm exceeded


def test_a_hundred_hosts_simulate_within_an_event_bound_per_delivery(tmp_path: Path) -> None:
    data = raw_data(WAN100)
    base = Base.from_data({**data, "duration": "2s", "drain": "1s", "faults": [],
                           "workload": {**data["workload"], "rate": "5/s"}})
    exp, topo = materialise(base, Case(1))
    run_dir, stats = simulate(exp, topo, tmp_path, max_events=0, max_wall_s=0)
    summary = judge_run(read_record(run_dir))
    assert summary["ok"], summary["verdict"]
    checks = summary["checks"]
    assert all(checks[c]["violations"] == 0 for c in ("total_order", "agreement", "integrity"))
    assert len(summary["nodes"]) == 100
    delivered = sum((p / "events.jsonl").read_bytes().count(b'"ev":"fnl"')
                    for p in (run_dir / "nodes").iterdir())
    assert delivered > 100 * 800  # ~1,000 messages sent, each delivered at all 100 hosts
    per_delivery = stats["events"] / delivered
    assert per_delivery < EVENTS_PER_DELIVERY, (
        f"{stats['events']:,} events for {delivered:,} deliveries: {per_delivery:.1f} each")


def test_the_wall_limit_of_a_simulated_run_scales_with_its_hosts() -> None:
    """wan-100 (60 s + a 30 s drain cap) on a wall clock may take 120 s; on the simulator,
    whose work per virtual second grows with the hosts, ten times that at 100 hosts, and no
    less than a wall clock's at 10 hosts or fewer."""
    from testbed.runner import wall_limit_s

    assert wall_limit_s(90.0, 0, 100, virtual=False) == 120.0
    assert wall_limit_s(90.0, 0, 100, virtual=True) == 930.0
    assert wall_limit_s(90.0, 0, 5, virtual=True) == wall_limit_s(90.0, 0, 5, virtual=False)


def test_the_ack_floor_kept_per_ack_is_the_minimum_over_every_receiver() -> None:
    """Reliable FIFO keeps the lowest cumulative ACK (what frees the send buffer, what the
    window and the heartbeats read) up to date per ACK instead of recomputing it over every
    member at each one: under ACKs in any order, repeats and ties included, it is exactly
    min(acked), and the send buffer holds exactly the numbers above it."""
    import random

    from nodes.protocols.reliable import ReliableMulticast
    from nodes.wire import Header, Message, MsgType, Proto

    members = list(range(12))
    rm = ReliableMulticast(0, members, window=10_000)
    for _ in range(200):
        rm.multicast(Header(MsgType.DATA, Proto.RELIABLE), b"x", 0)
    rng = random.Random(7)
    for _ in range(3000):
        src = rng.randrange(1, 12)
        ack = min(200, rm.acked[src] + rng.choice((0, 0, 1, 1, 2, 5)))
        rm.on_message(src, Message(Header(MsgType.ACK, Proto.RELIABLE, sender=src, rseq=ack)),
                      0)
        floor = min(rm.acked.values())
        assert rm._floor() == floor
        assert sorted(rm.send_buffer) == list(range(floor + 1, 201))
    assert min(rm.acked.values()) > 0  # the floor did move, many times
