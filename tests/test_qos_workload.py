"""QoS workloads (docs/reservations.md "Workloads"): `arrival: ticks`, `arrival: vbr`, rate
changes on a schedule (renegotiated, or a misbehaving application that the reservation
polices), and their spec checks."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from nodes.config import NodeConfig, WorkloadConfig
from nodes.sim import SIM_EPOCH_NS, Simulator
from nodes.workload import intervals
from testbed.deploy import workload_config
from testbed.spec.loader import SpecError, load_experiment
from tests.protosim import configs, read_events
from tests.qos_layer import bits_per_message


def _times(w: WorkloadConfig, n: int, seed: int = 1) -> list[int]:
    gaps = intervals(w, random.Random(seed))
    t, out = 0, []
    for _ in range(n):
        t += next(gaps)
        out.append(t)
    return out


def test_ticks_send_or_skip_on_the_1_over_rate_grid() -> None:
    tick = 10_000_000  # 100/s
    full = _times(WorkloadConfig(True, 100.0, 100, "ticks"), 50)
    assert full == [tick * (k + 1) for k in range(50)]
    half = _times(WorkloadConfig(True, 100.0, 100, "ticks", send_prob=0.5), 2000)
    assert all(t % tick == 0 for t in half) and len(set(half)) == len(half)
    assert 0.45 <= len(half) / (half[-1] / tick) <= 0.55  # about every other tick


def test_vbr_bursts_at_slot_starts_within_max_burst_with_the_average_rate() -> None:
    slot = 100_000_000
    w = WorkloadConfig(True, 25.0, 100, "vbr", slot_ns=slot, avg=25.0, max_burst=4)
    times = _times(w, 5000)
    assert all(t % slot == 0 for t in times)  # a burst sits at its slot's start
    per_slot = Counter(t // slot for t in times)
    assert max(per_slot.values()) == 4
    slots = times[-1] // slot + 1
    assert 24.0 <= len(times) / (slots * slot / 1e9) <= 26.0  # avg 25/s


def test_renegotiated_rates_move_the_generator() -> None:
    gaps = intervals(WorkloadConfig(True, 100.0, 100, "constant"), random.Random(1))
    next(gaps)
    assert next(gaps) == 10_000_000
    gaps.renegotiate({"rate": 20.0})
    assert next(gaps) == 50_000_000


def _sim(tmp_path: Path, w: WorkloadConfig) -> Simulator:
    cfgs = configs("fifo", tmp_path, n=3, delay_ms=5, jitter_ms=0, loss=0, duration_s=4,
                   drain_s=1, senders={0}, params={"fd_interval_ms": 1000})
    return Simulator([NodeConfig(**{**c.__dict__, "workload": w}) for c in cfgs], seed=2)


def test_misbehaving_schedule_entry_is_policed_and_a_renegotiated_one_is_logged(
        tmp_path: Path) -> None:
    """Any protocol under the workload's own reservation (50 msg/s worth): at 1 s the
    application jumps to 150/s without telling anyone (policed: dropped datagrams), at 3 s it
    renegotiates down to 20/s (ev=new-rate, the layer's on_new_rate)."""
    per_msg = bits_per_message(3, 100)
    w = WorkloadConfig(True, 40.0, 100, "constant", reserve_bps=50 * per_msg,
                       rate_changes=[(1_000_000_000, {"rate": 150.0}, False),
                                     (3_000_000_000, {"rate": 20.0}, True)])
    sim = _sim(tmp_path, w)
    sim.run(SIM_EPOCH_NS + 5 * 10**9)
    bucket = sim.cores[0].reservations.by_key["workload"].bucket
    assert bucket.dropped > 0
    ev = read_events(tmp_path)["h1"]
    (over,) = [e for e in ev if e["ev"] == "overrun"]
    (new,) = [e for e in ev if e["ev"] == "new-rate"]
    assert over["rate"] == 150.0 and new["rate"] == 20.0 and new["source"] == "workload"
    # The application's reservation follows its renegotiated rate (40/s -> 20/s: halved).
    assert [(e["key"], e["rate_bps"]) for e in ev if e["ev"] == "reserve"] == [
        ("workload", 50 * per_msg), ("workload", 25 * per_msg)]
    sends = [e["t"] - SIM_EPOCH_NS for e in ev if e["ev"] == "send"]
    assert 38 <= sum(1 for t in sends if t < 1e9) <= 41
    assert 295 <= sum(1 for t in sends if 1e9 <= t < 3e9) <= 301
    assert 18 <= sum(1 for t in sends if 3e9 <= t < 4e9) <= 21
    drops = [e["t"] - SIM_EPOCH_NS for e in ev if e["ev"] == "drop" and
             e["reason"] == "policed"]
    assert drops and min(drops) >= 1e9  # nothing policed while the sender behaved


EXP = """\
name: e
topology:
  name: t
  hosts: [{name: h1, qos: {rate: 1Mbit}}, {name: h2}]
  matrix: {h1: {h2: 1ms}, h2: {h1: 1ms}}
duration: 4s
backend: sim
protocol: {name: fifo}
workload:
  arrival: vbr
  avg: 40/s
  max_burst: 5
  slot: 100ms
  schedule:
    - {at: 1s, avg: 20/s, max_burst: 3}
    - {at: 2s, avg: 60/s, max_burst: 6, renegotiate: false}
"""


def test_vbr_workload_spec_reaches_the_node_config(tmp_path: Path) -> None:
    (tmp_path / "e.yaml").write_text(EXP)
    exp, topo = load_experiment(tmp_path / "e.yaml")
    w = workload_config(exp, True)
    assert (w.arrival, w.rate, w.avg, w.max_burst, w.slot_ns) == ("vbr", 40.0, 40.0, 5,
                                                                 100_000_000)
    assert w.rate_changes == [(1_000_000_000, {"avg": 20.0, "max_burst": 3.0}, True),
                              (2_000_000_000, {"avg": 60.0, "max_burst": 6.0}, False)]
    assert topo.hosts[0].qos.rate == 1_000_000


@pytest.mark.parametrize("old,new,line,text", [
    ("max_burst: 5", "max_burst: 3", 9, "avg 40/s over a 100 ms slot is 4 messages, more "
     "than max_burst 3"),
    ("  slot: 100ms\n", "", 9, "arrival vbr needs slot"),
    ("at: 2s", "at: 4s", 16, "4 s is not within the workload's 4 s"),
    ("{at: 1s, avg: 20/s, max_burst: 3}", "{at: 1s, rate: 20/s}", 9,
     "schedule[0]: arrival vbr changes avg and max_burst"),
    ("arrival: vbr", "arrival: vbr\n  send_prob: 50%", 9, "send_prob only applies to "
     "arrival ticks"),
    ("slot: 100ms", "slot: 0ms", 9, "positive slot"),
])
def test_bad_qos_workload_is_one_located_line(tmp_path: Path, old: str, new: str, line: int,
                                              text: str) -> None:
    assert old in EXP
    (tmp_path / "e.yaml").write_text(EXP.replace(old, new))
    with pytest.raises(SpecError) as err:
        load_experiment(tmp_path / "e.yaml")
    (msg,) = str(err.value).splitlines()
    assert msg.startswith(f"{tmp_path / 'e.yaml'}:{line}:") and text in msg, msg
