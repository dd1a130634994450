"""The link model on mininet (docs/link-model.md), shaped by the applier `auto`
picks here (the userspace shaper, docs/platform.md).

`reorder: false`, judged from the pcaps: a sequencer run over 10 ms +- 5 ms uniform jitter on
every path, captured on every host's data interface. On each receiver's capture, the DATA
datagrams of each sender (first transmissions, not relayed) arrive in the order of their
reliable sequence numbers: 0 reordered on every path. Gilbert-Elliott loss: probe datagrams
across the WAN."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest

from analysis.pcap import read_pcap
from nodes.wire import Flag, MsgType
from tests.eventlogs import run_dir_of
from tests.shaping_env import root_only
from tests.test_link_model import reordered

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.root
@root_only
def test_reorder_false_gives_no_reordered_datagram_in_mininet_pcaps(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text(
        "name: jit\nsites:\n  a:\n    lan: {delay: 10ms, jitter: 5ms, jitter_dist: uniform, "
        "reorder: false}\nhosts:\n" + "".join(f"  - {{name: h{i}, site: a}}\n" for i in (1, 2, 3)))
    (tmp_path / "e.yaml").write_text(
        "name: fifo\ntopology: t.yaml\nbackend: mininet\nduration: 4s\ndrain: 1s\n"
        "capture: {pcap: true, snaplen: 128}\n"
        "protocol: {name: sequencer, params: {sequencer: h1}}\n"
        "workload: {rate: 200/s, size: 100B}\n")
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", str(tmp_path / "e.yaml"),
                           "--out", str(tmp_path / "runs"), "--no-analyze"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = run_dir_of(tmp_path / "runs")
    members = json.loads((run / "nodes" / "h1" / "node.json").read_text())["members"]
    ip = {m["name"]: m["host"] for m in members}
    counts, sizes = {}, {}
    for entry in json.loads((run / "pcaps" / "manifest.json").read_text()):
        table = read_pcap(run / "pcaps" / Path(entry["file"]).name)
        me = entry["host"]
        data = table.filter(pc.and_(
            pc.and_(pc.equal(table["dst"], ip[me]), pc.equal(table["tb_type"], int(MsgType.DATA))),
            pc.equal(pc.bit_wise_and(table["tb_flags"], int(Flag.RETRANSMIT | Flag.RELAYED)),
                     0)))
        data = data.sort_by("ts_ns")
        for src in ip:
            if src == me:
                continue
            seq = data.filter(pc.equal(data["src"], ip[src]))["tb_rseq"].to_pylist()
            counts[f"{src}->{me}"] = reordered(seq)
            sizes[f"{src}->{me}"] = len(seq)
    print(f"reordered per path: {counts}; datagrams: {sizes}")
    # On a loaded machine a node can start late and send less; every path still carries some.
    assert len(counts) == 6 and min(sizes.values()) >= 30 and sum(sizes.values()) >= 1000, sizes
    assert counts == {p: 0 for p in counts}


@pytest.mark.root
@pytest.mark.timing
@root_only
def test_gilbert_elliott_loss_on_mininet_inside_the_models_99pct_interval(tmp_path: Path) -> None:
    """A mininet WAN (its bridges, the applier `auto` picks) with Gilbert-Elliott loss (p 2%,
    r 25%) on h1->h2: 4,000 probe datagrams lose a share and in bursts inside the simple
    Gilbert model's 99% intervals (the lane is seeded; a kernel drop would push them out)."""
    from testbed.backends.mininet import MininetBackend
    from testbed.rundir import RunDir
    from testbed.spec.topology import TopologySpec
    from testbed.teardown import teardown
    from tests.test_link_model import gilbert_interval, loss_runs
    from tests.test_link_model_shaper import probe

    topo = TopologySpec.model_validate({
        "name": "ge", "hosts": [{"name": "h1"}, {"name": "h2"}],
        "matrix": {"h1": {"h2": {"delay": "2ms", "gemodel": {"p": "2%", "r": "25%"}}},
                   "h2": {"h1": "2ms"}}})
    run = RunDir.create(tmp_path, "ge")
    backend = MininetBackend(run, topo, topo.paths(), seed=3)
    n = 4000
    try:
        addresses = backend.up().addresses
        got = probe(backend.ns["h1"], backend.ns["h2"], addresses["h2"].data, rate=2000,
                    count=n, port=9200)
    finally:
        backend.down()
        teardown(run)
    assert not any(e for e in run.journal.live())
    seen = {s for s, _ in got}
    lost = [i not in seen for i in range(n)]
    runs = loss_runs(lost)
    rate, burst = sum(lost) / n, sum(runs) / len(runs)
    (lo, hi), (blo, bhi) = gilbert_interval(0.02, 0.25, n)
    print(f"mininet GE loss {rate:.4f} in [{lo:.4f}, {hi:.4f}], burst {burst:.2f} in "
          f"[{blo:.2f}, {bhi:.2f}]")
    assert lo <= rate <= hi and blo <= burst <= bhi, (rate, burst)
