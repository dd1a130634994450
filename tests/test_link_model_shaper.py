"""The link model on real packets: the userspace shaper (the applier mininet and docker use on
this kernel, docs/platform.md) between two scratch namespaces, probed with bench/owd_probe.py.

- `reorder: false` with 10 ms +- 5 ms uniform jitter: 0 of 1,000 datagrams reordered, every
  one-way delay inside [5 ms, 15 ms + load margin]; the same path changed at run time to
  netem's default (`reorder: true`) does reorder, so the count can fail.
- Gilbert-Elliott loss (p 2%, r 25%): the loss rate and the mean burst length inside the
  model's 99% intervals. The lane's RNG is seeded, so the model's draws are fixed; the kernel
  could add drops of its own, which would show as a rate outside the interval.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from testbed.rundir import RunDir
from testbed.shaping.plan import host_plans, with_path
from testbed.shaping.userspace import UserspaceApplier
from testbed.spec.topology import TopologySpec
from testbed.teardown import teardown
from tests.shaping_env import root_only, two_hosts
from tests.test_link_model import gilbert_interval, loss_runs, reordered

PROBE = str(Path(__file__).resolve().parents[1] / "bench" / "owd_probe.py")
A, B = "198.18.200.1", "198.18.200.2"
GE_P, GE_R = 0.02, 0.25


def probe(src, dst, addr: str, rate: float, count: int, port: int) -> list[tuple[int, float]]:  # noqa: ANN001
    """(sequence number, one-way delay in ms) per datagram, in arrival order."""
    out = f"/tmp/lm-{time.time_ns()}.txt"
    rx = subprocess.Popen([*dst.prefix(), sys.executable, PROBE, "recv", "--addr", addr,
                           "--port", str(port), "--count", str(count), "--out", out,
                           "--idle", "1.5", "--rt", "20"], stdout=subprocess.PIPE, text=True)
    assert rx.stdout is not None and rx.stdout.readline().strip() == "ready"
    subprocess.run([*src.prefix(), sys.executable, PROBE, "send", "--addr", addr, "--port",
                    str(port), "--rate", str(rate), "--count", str(count), "--size", "100",
                    "--rt", "20"], check=True)
    rx.wait(timeout=30)
    cols = Path(out).read_text().split()
    Path(out).unlink()
    return [(int(cols[i]), (int(cols[i + 2]) - int(cols[i + 1])) / 1e6)
            for i in range(0, len(cols), 3)]


@pytest.mark.root
@pytest.mark.timing
@root_only
def test_userspace_shaper_keeps_fifo_and_loses_in_gilbert_elliott_bursts(tmp_path: Path) -> None:
    topo = TopologySpec.model_validate({
        "name": "pair", "hosts": [{"name": "a"}, {"name": "b"}],
        "matrix": {"a": {"b": {"delay": "10ms", "jitter": "5ms", "jitter_dist": "uniform",
                               "reorder": False}},
                   "b": {"a": {"delay": "1ms", "gemodel": {"p": "2%", "r": "25%"}}}}})
    plans = host_plans(topo, topo.paths(), {"a": A, "b": B}, "d0")
    run = RunDir.create(tmp_path, "linkmodel")
    try:
        with two_hosts(A, B) as (a, b):
            applier = UserspaceApplier(run, seed=5)
            applier.apply(a, plans["a"], run.journal)
            applier.apply(b, plans["b"], run.journal)

            fifo = probe(a, b, B, rate=1000, count=1000, port=9100)
            n = 4000
            ge = probe(b, a, A, rate=2000, count=n, port=9101)

            # The control: the same path with netem's default order.
            path = replace(topo.paths().get("a", "b"), fifo=False)
            free_plan = with_path(plans["a"], "b", path)
            applier.change(a, free_plan, free_plan.class_for("b"))
            free = probe(a, b, B, rate=1000, count=1000, port=9102)
            stats = applier.stats("b")["lanes"][A]
    finally:
        teardown(run)
    assert not any(e for e in run.journal.live())

    assert len(fifo) == 1000 and len(free) == 1000
    assert reordered([s for s, _ in fifo]) == 0
    delays = sorted(d for _, d in fifo)
    assert delays[0] >= 5.0 - 0.5 and delays[len(delays) // 2] <= 15.0 + 2.0, delays[::100]
    assert reordered([s for s, _ in free]) > 100

    got = {s for s, _ in ge}
    lost = [i not in got for i in range(n)]
    (lo, hi), (blo, bhi) = gilbert_interval(GE_P, GE_R, n)
    runs = loss_runs(lost)
    rate, burst = sum(lost) / n, sum(runs) / len(runs)
    print(f"fifo reordered 0/1000, control {reordered([s for s, _ in free])}/1000; GE loss "
          f"{rate:.4f} in [{lo:.4f}, {hi:.4f}], burst {burst:.2f} in [{blo:.2f}, {bhi:.2f}]")
    assert stats["lost"] == sum(lost), stats  # every loss was the model's, none the kernel's
    assert lo <= rate <= hi, (rate, lo, hi)
    assert blo <= burst <= bhi, (burst, blo, bhi)
