"""Per-pair shaping on mininet with the userspace applier (root): the host's HTB tree holds only
the host's part (root, the host's rate, the default class; no class or filter per
destination), and every ordered pair's delay is its own lane in the host's delay line. Five
hosts on an asymmetric matrix whose ordered pairs all differ: a lane picked for the wrong
destination would show in the measured RTTs, and a per-pair override (a link fault on one
pair) changes that pair alone."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from testbed.backends.mininet import MininetBackend
from testbed.rundir import RunDir
from testbed.shaping.plan import change_link
from testbed.shaping.userspace import UserspaceApplier
from testbed.spec.topology import TopologySpec
from testbed.teardown import teardown
from tests.shaping_env import root_only

pytestmark = [pytest.mark.root, root_only]
HOSTS = ["h1", "h2", "h3", "h4", "h5"]


def one_way_ms(a: str, b: str) -> float:
    """Distinct for every ordered pair (and every pair's sum distinct): 4..22 ms."""
    i, j = HOSTS.index(a), HOSTS.index(b)
    return 2.0 + 4.0 * i + 1.0 * j if i < j else 3.0 + 1.0 * i + 4.0 * j


def topology() -> TopologySpec:
    return TopologySpec.model_validate({
        "name": "lanes5", "hosts": [{"name": h} for h in HOSTS],
        "matrix": {a: {b: f"{one_way_ms(a, b)}ms" for b in HOSTS if b != a} for a in HOSTS}})


@pytest.mark.timing
def test_each_ordered_pair_is_its_own_lane_and_an_override_changes_one_pair(
        tmp_path: Path) -> None:
    sums = [one_way_ms(a, b) + one_way_ms(b, a) for a in HOSTS for b in HOSTS if a < b]
    assert len(set(sums)) == len(sums)  # the matrix tells every pair apart
    topo = topology()
    run = RunDir.create(tmp_path, "lanes")
    backend = MininetBackend(run, topo, topo.paths(), applier="userspace")
    try:
        backend.up()
        assert isinstance(backend.applier, UserspaceApplier)
        # The tree: root, the host's rate, the default class; nothing per destination.
        classes = backend.exec("h1", ["tc", "class", "show", "dev", "d0"]).stdout.decode()
        assert sorted(line.split()[2] for line in classes.splitlines()) == ["1:1", "1:2"]
        filters = backend.exec("h1", ["tc", "filter", "show", "dev", "d0"]).stdout.decode()
        assert "u32" not in filters
        rtt = backend.measure_rtt(count=5, interval_s=0.05)
        for (a, b), got in rtt.items():
            want = one_way_ms(a, b) + one_way_ms(b, a)
            assert got is not None and want - 0.2 <= got <= want + 3.0, (a, b, got, want)
        # One-way, as the daemon holds it: every lane carries its own pair's delay, and the
        # pings to each destination went through that destination's lane.
        lanes = backend.applier.stats("h2")["lanes"]
        addr = {h: backend.addresses[h].data for h in HOSTS}
        for dst in HOSTS[:1] + HOSTS[2:]:
            lane = lanes[addr[dst]]
            assert lane["delay_ns"] == round(one_way_ms("h2", dst) * 1e6)
            assert lane["passed"] >= 5
        # A per-pair override: h1 <-> h3 at 40 ms each way; every other pair keeps its delay.
        change_link(backend.plans, backend.paths, ("h1", "h3"), {"delay_ns": 40_000_000},
                    False, lambda src, plan, c: backend.applier.change(backend.ns[src], plan, c))
        pairs = [("h1", "h3"), ("h3", "h1"), ("h1", "h2"), ("h3", "h4"), ("h5", "h1")]
        after = backend.measure_rtt(count=5, interval_s=0.05, pairs=pairs)
        for (a, b), got in after.items():
            want = 80.0 if {a, b} == {"h1", "h3"} else one_way_ms(a, b) + one_way_ms(b, a)
            assert got is not None and want - 0.2 <= got <= want + 3.0, (a, b, got, want)
        lane = backend.applier.stats("h3")["lanes"][addr["h1"]]
        assert lane["delay_ns"] == 40_000_000
        assert backend.applier.stats("h3")["lanes"][addr["h2"]]["delay_ns"] == round(
            one_way_ms("h3", "h2") * 1e6)
    finally:
        backend.down()
        teardown(run)
    time.sleep(0.2)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f"tb{run.run_id}" not in links
    assert run.journal.live() == []
