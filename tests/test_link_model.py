"""The link model (docs/link-model.md): netem's semantics in nodes/linkmodel.py, shared by the
simulator, the local backend's in-process shaper and the userspace shaper's lanes; the spec keys
and their tc rendering; FIFO paths (`reorder: false`) counted from the delivery logs of real sim
and local runs (`capture: {arrivals: true}`).

Statistical checks use fixed seeds on our own model, so they cannot flake; their intervals are
still the model's 99% intervals, so a wrong model fails them."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from nodes.config import PathConfig
from nodes.linkmodel import LinkModel
from nodes.wire import Flag
from testbed.shaping import ShapingError, netem
from testbed.shaping.plan import host_plans
from testbed.shaping.userspace_daemon import Lane, flip_bit
from testbed.spec.topology import TopologySpec

ROOT = Path(__file__).resolve().parents[1]
MS = 1_000_000
Z99 = 2.576
RESENT = int(Flag.RETRANSMIT | Flag.RELAYED)


def reordered(seq: list[int]) -> int:
    """Datagrams that arrived after one sent later (RFC 4737's reordered packets)."""
    top, n = -1, 0
    for x in seq:
        if x < top:
            n += 1
        top = max(top, x)
    return n


def releases(path: PathConfig, n: int = 5000, gap_ns: int = 200_000, seed: int = 1) -> list[int]:
    model = LinkModel(path, random.Random(seed))
    out = []
    for i in range(n):
        d = model.transit(i * gap_ns, 100)
        assert d is not None
        out.append(i * gap_ns + d)
    return out


def arrival_order(times: list[int]) -> list[int]:
    return [i for _, i in sorted(zip(times, range(len(times)), strict=True))]


def test_fifo_path_never_reorders_and_uniform_jitter_stays_in_its_bounds() -> None:
    jittery = PathConfig(delay_ns=10 * MS, jitter_ns=5 * MS, distribution="uniform")
    free = releases(jittery)
    delays = [t - i * 200_000 for i, t in enumerate(free)]
    assert min(delays) >= 5 * MS and max(delays) <= 15 * MS  # bounded: delay +- jitter
    assert reordered(arrival_order(free)) > 1000  # jitter 25x the gap reorders plenty
    fifo = releases(PathConfig(delay_ns=10 * MS, jitter_ns=5 * MS, distribution="uniform",
                               fifo=True))
    assert all(a <= b for a, b in zip(fifo, fifo[1:], strict=False))
    # FIFO only ever holds a datagram back behind the previous one, never past delay + jitter.
    assert max(t - i * 200_000 for i, t in enumerate(fifo)) <= 15 * MS


def gilbert_interval(p: float, r: float, n: int) -> tuple[tuple[float, float], tuple[float,
                                                                                     float]]:
    """The simple Gilbert model's 99% intervals for the loss rate over n datagrams (a two-state
    Markov chain: variance pi_B pi_G (1 + l) / (1 - l) / n, l = 1 - p - r) and the mean burst
    length (geometric sojourns in the bad state: mean 1/r, variance (1 - r)/r^2, over the
    expected n pi_B r bursts)."""
    pi_b = p / (p + r)
    lam = 1 - p - r
    sd_rate = math.sqrt(pi_b * (1 - pi_b) * (1 + lam) / (1 - lam) / n)
    bursts = n * pi_b * r
    sd_burst = math.sqrt((1 - r) / r**2 / bursts)
    return ((pi_b - Z99 * sd_rate, pi_b + Z99 * sd_rate),
            (1 / r - Z99 * sd_burst, 1 / r + Z99 * sd_burst))


def loss_runs(lost: list[bool]) -> list[int]:
    runs, cur = [], 0
    for x in lost:
        if x:
            cur += 1
        elif cur:
            runs.append(cur)
            cur = 0
    return runs + ([cur] if cur else [])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_gilbert_elliott_loss_rate_and_burst_length_inside_the_models_99pct_interval(
        seed: int) -> None:
    p, r, n = 0.02, 0.25, 100_000
    model = LinkModel(PathConfig(delay_ns=MS, gemodel=(p, r, 0.0, 1.0)), random.Random(seed))
    lost = [model.transit(i * 1000, 100) is None for i in range(n)]
    (lo, hi), (blo, bhi) = gilbert_interval(p, r, n)
    runs = loss_runs(lost)
    assert lo <= sum(lost) / n <= hi, (sum(lost) / n, lo, hi)
    assert blo <= sum(runs) / len(runs) <= bhi, (sum(runs) / len(runs), blo, bhi)
    # The same loss rate with independent losses has bursts of 1/(1 - 0.074) ~ 1.08: the
    # burst check is what tells the models apart.
    bern = LinkModel(PathConfig(delay_ns=MS, loss=p / (p + r)), random.Random(seed))
    runs = loss_runs([bern.transit(0, 100) is None for _ in range(n)])
    assert sum(runs) / len(runs) < blo


def test_userspace_lane_draws_what_the_model_draws() -> None:
    """The daemon's lane is the same model: same seed, same losses and delays."""
    spec = {"delay_ns": 3 * MS, "jitter_ns": MS, "distribution": "uniform", "fifo": True,
            "gemodel": [0.05, 0.3, 0.0, 1.0], "limit": 10**9}
    lane = Lane(spec, random.Random(7))
    model = LinkModel(PathConfig(delay_ns=3 * MS, jitter_ns=MS, distribution="uniform",
                                 fifo=True, gemodel=(0.05, 0.3, 0.0, 1.0)), random.Random(7))
    for i in range(2000):
        want = model.transit(i * 100_000, 100)
        assert lane.schedule(i * 100_000, 100) == (-1 if want is None else i * 100_000 + want)
    assert lane.lost == model.lost > 0


def test_duplicate_corrupt_reorder_limit_and_rate_follow_netem() -> None:
    n = 20_000
    dup = LinkModel(PathConfig(delay_ns=MS, duplicate=0.1), random.Random(1))
    copies = sum(dup.transit(0, 100) is not None and dup.dup_ns is not None for _ in range(n))
    assert abs(copies / n - 0.1) < Z99 * math.sqrt(0.09 / n)
    bad = LinkModel(PathConfig(delay_ns=MS, corrupt=0.05), random.Random(1))
    gone = sum(bad.transit(0, 100) is None for _ in range(n))
    assert gone == bad.corrupted and abs(gone / n - 0.05) < Z99 * math.sqrt(0.0475 / n)
    # reorder 100% gap 3: datagrams 3, 6, 9, ... go at once, the others wait 10 ms.
    ro = LinkModel(PathConfig(delay_ns=10 * MS, reorder=1.0, reorder_gap=3), random.Random(1))
    assert [ro.transit(0, 100) for _ in range(6)] == [10 * MS, 10 * MS, 0, 10 * MS, 10 * MS, 0]
    # limit: at most 4 in the delay line; one leaves, one more fits.
    lim = LinkModel(PathConfig(delay_ns=10 * MS, limit=4), random.Random(1))
    assert [lim.transit(0, 100) is not None for _ in range(6)] == [True] * 4 + [False] * 2
    assert lim.transit(10 * MS, 100) is not None and lim.overflow == 2
    # rate 8 Mbit/s: 1000-byte datagrams leave 1 ms apart after the delay.
    rate = LinkModel(PathConfig(delay_ns=5 * MS, rate_bps=8_000_000), random.Random(1))
    assert [rate.transit(0, 1000) for _ in range(3)] == [6 * MS, 7 * MS, 8 * MS]
    # Correlated loss keeps the mean, lengthens the bursts.
    corr = LinkModel(PathConfig(delay_ns=MS, loss=0.5, loss_corr=0.9), random.Random(1))
    runs = loss_runs([corr.transit(0, 100) is None for _ in range(n)])
    assert sum(runs) / len(runs) > 3


def test_simple_paths_draw_exactly_as_before() -> None:
    """Paths without the new keys keep the old draws (same seed, same logs as earlier runs)."""
    path = PathConfig(delay_ns=5 * MS, jitter_ns=2 * MS, loss=0.1, bandwidth_bps=10**7)
    model, rng = LinkModel(path, random.Random(4)), random.Random(4)
    free = 0
    for i in range(500):
        now = i * 100_000
        want: int | None = None
        if not rng.random() < 0.1:
            d = max(0, 5 * MS + round(rng.gauss(0.0, 2 * MS)))
            free = max(now, free) + 100 * 8 * 10**9 // 10**7
            want = d + free - now
        assert model.transit(now, 100) == want


TOPO_KEYS = {"delay": "10ms", "jitter": "5ms", "jitter_dist": "uniform", "jitter_correlation":
             "25%", "loss_correlation": "10%", "duplicate": "1%", "duplicate_correlation": "5%",
             "corrupt": "0.1%", "corrupt_correlation": "5%", "limit": 500, "rate": "50Mbit",
             "gemodel": {"p": "1%", "r": "30%", "h": "10%", "k": "99%"},
             "reorder": {"probability": "25%", "correlation": "50%", "gap": 5}}


def test_every_key_reaches_the_path_and_the_netem_leaf() -> None:
    topo = TopologySpec.model_validate({"name": "k", "hosts": [{"name": "a"}, {"name": "b"}],
                                        "matrix": {"a": {"b": TOPO_KEYS}, "b": {"a": "1ms"}}})
    plan = host_plans(topo, topo.paths(), {"a": "198.18.0.1", "b": "198.18.0.2"}, "d0")["a"]
    args = " ".join(netem.netem_args(plan.class_for("b")))
    assert args == ("netem limit 500 delay 10000us 5000us 25% reorder 25% 50% gap 5 "
                    "loss gemodel 1% 30% 90% 1% duplicate 1% 5% corrupt 0.1% 5% rate 50000000bit")
    fifo = TopologySpec.model_validate({
        "name": "f", "hosts": [{"name": "a"}, {"name": "b"}],
        "matrix": {"a": {"b": {"delay": "10ms", "jitter": "5ms", "jitter_dist": "uniform",
                               "reorder": False}}, "b": {"a": "1ms"}}})
    plan = host_plans(fifo, fifo.paths(), {"a": "198.18.0.1", "b": "198.18.0.2"}, "d0")["a"]
    assert netem.netem_args(plan.class_for("b"))[-2:] == ["rate", "1000000000bit"]


def test_exponential_jitter_is_an_exponential_delay_in_the_model_and_in_netem(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`jitter_dist: exponential` with delay = jitter (Maelstrom's `--latency-dist
    exponential`): delay ~ exponential with that mean, in the model and in netem's table."""
    mean = 10 * MS
    n = 20_000
    model = LinkModel(PathConfig(delay_ns=mean, jitter_ns=mean, distribution="exponential"),
                      random.Random(7))
    d = [model.transit(0, 100) for _ in range(n)]
    assert all(x is not None and x >= 0 for x in d)
    got = sum(x for x in d if x is not None) / n
    # the exponential's mean within its 99% interval over n draws (sd = mean)
    assert abs(got - mean) < Z99 * mean / math.sqrt(n), got
    over = sum(1 for x in d if x is not None and x > 2 * mean) / n
    assert abs(over - math.exp(-2)) < 0.01, over  # P(delay > 2 mean) = e^-2
    # netem's correlated draws (not uniform any more) still never give a negative delay
    corr = LinkModel(PathConfig(delay_ns=mean, jitter_ns=mean, distribution="exponential",
                                jitter_corr=0.25), random.Random(7))
    assert all((x or 0) >= 0 for x in (corr.transit(0, 100) for _ in range(2000)))
    flat = TopologySpec.model_validate({
        "name": "x", "hosts": [{"name": "a", "site": "s"}, {"name": "b", "site": "s"}],
        "sites": {"s": {"lan": {"delay": "10ms", "jitter": "10ms",
                                "jitter_dist": "exponential"}}}})
    plan = host_plans(flat, flat.paths(), {"a": "198.18.0.1", "b": "198.18.0.2"}, "d0")["a"]
    args = netem.netem_args(plan.class_for("b"))
    assert args[args.index("distribution") + 1] == "exponential"
    table = netem.exponential_table()
    assert table == sorted(table) and len(table) == netem.DIST_SIZE
    assert abs(sum(table) / len(table)) < 0.01 * netem.DIST_SCALE  # mean 0 ...
    assert table[0] == round(-netem.DIST_SCALE * (1 + math.log(1 - 0.5 / netem.DIST_SIZE)))
    monkeypatch.setattr(netem, "TC_LIB", tmp_path / "tc")
    env = netem.tc_env(plan)
    assert env == ["env", f"TC_LIB_DIR={tmp_path / 'tc'}"]
    written = (tmp_path / "tc" / "exponential.dist").read_text().split("\n", 1)[1].split()
    assert [int(v) for v in written] == table
    assert (tmp_path / "tc" / "normal.dist").exists()  # iproute2's own tables beside it
    assert netem.tc_env(host_plans(topo_ab("1ms"), topo_ab("1ms").paths(),
                                   {"a": "198.18.0.1", "b": "198.18.0.2"}, "d0")["a"]) == []


def topo_ab(link: str) -> TopologySpec:
    return TopologySpec.model_validate({"name": "ab", "hosts": [{"name": "a"}, {"name": "b"}],
                                        "matrix": {"a": {"b": link}, "b": {"a": link}}})


def test_schema_lists_every_link_key() -> None:
    out = subprocess.run([sys.executable, "-m", "testbed", "schema", "topology"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    props = json.loads(out)["$defs"]["LinkSpec"]["properties"]
    assert set(TOPO_KEYS) | {"loss", "bandwidth"} <= set(props)
    assert set(json.loads(out)["$defs"]["GilbertElliottSpec"]["properties"]) == {"p", "r", "h",
                                                                                 "k"}


@pytest.mark.parametrize("link, message", [
    ("{delay: 1ms, loss: 1%, gemodel: {p: 1%}}", "give either `loss` or `gemodel`"),
    ("{delay: 1ms, gemodel: {p: 1%, r: 0%}}", "gemodel r must be above 0%"),
    ("{jitter: 1ms, reorder: {probability: 5%}}", "reordering needs a delay"),
    ("{delay: 1ms, reorder: {probability: 5%, gap: 0}}", "gap: Input should be greater than"),
    ("{delay: 1ms, reorder: sometimes}", "reorder is false (FIFO), true, or"),
])
def test_bad_link_keys_give_one_located_line_and_no_run(tmp_path: Path, link: str,
                                                        message: str) -> None:
    (tmp_path / "t.yaml").write_text(f"name: t\nsites:\n  a:\n    lan: {link}\nhosts:\n"
                                     "  - {name: h1, site: a}\n  - {name: h2, site: a}\n")
    (tmp_path / "e.yaml").write_text("name: e\ntopology: t.yaml\nbackend: sim\nduration: 1s\n"
                                     "protocol: {name: sequencer}\nworkload: {rate: 1/s}\n")
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", str(tmp_path / "e.yaml"),
                           "--out", str(tmp_path / "runs")], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{tmp_path / 't.yaml'}:4: ") and \
        message in lines[0], proc.stderr
    assert not (tmp_path / "runs").exists()


def test_a_key_the_backend_cannot_realise_names_the_backend(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text("name: t\nsites:\n  a:\n    lan: {delay: 1ms}\n"
                                     "hosts:\n  - {name: h1, site: a}\n  - {name: h2, site: a}\n"
                                     "matrix:\n  h1: {h2: {delay: 1ms, duplicate: 1%}}\n"
                                     "  h2: {h1: 1ms}\n")
    (tmp_path / "e.yaml").write_text("name: e\ntopology: t.yaml\nbackend: local\nduration: 1s\n"
                                     "transport: tls\nprotocol: {name: sequencer}\n"
                                     "workload: {rate: 1/s}\n")
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", str(tmp_path / "e.yaml"),
                           "--out", str(tmp_path / "runs")], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"{tmp_path / 't.yaml'}:9: matrix.h1.h2.duplicate: the local backend cannot realise "
        "`duplicate` under transport tls: its in-process shaper sits above TCP, where loss "
        "becomes delay (use mininet or docker, or udp)"), proc.stderr
    assert not (tmp_path / "runs").exists()


def run_arrivals(tmp_path: Path, backend: str, reorder: bool) -> dict[str, dict[str, list[int]]]:
    """A sequencer run over 5 ms uniform jitter; per receiver and sender, the reliable sequence
    numbers of the DATA datagrams in the order the receiver logged their arrival.
    Retransmissions and relayed copies are left out: they were sent after later datagrams (on a
    loaded machine local nodes can start a second apart, and the first datagrams to a late one
    are resent; a suspicion makes others relay)."""
    tmp_path.mkdir()
    (tmp_path / "t.yaml").write_text(
        "name: jit\nsites:\n  a:\n    lan: {delay: 10ms, jitter: 5ms, jitter_dist: uniform, "
        f"reorder: {str(reorder).lower()}}}\nhosts:\n"
        + "".join(f"  - {{name: h{i}, site: a}}\n" for i in (1, 2, 3)))
    (tmp_path / "e.yaml").write_text(
        f"name: fifo\ntopology: t.yaml\nbackend: {backend}\nduration: 3s\ndrain: 1s\n"
        "capture: {arrivals: true}\nprotocol: {name: sequencer, params: {sequencer: h1}}\n"
        "workload: {rate: 200/s, size: 100B}\n")
    out = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", str(tmp_path / "e.yaml"),
                           "--out", str(out), "--no-analyze"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = next(p for p in out.iterdir() if p.is_dir())
    got: dict[str, dict[str, list[int]]] = {}
    for log in sorted(run.glob("nodes/*/events.jsonl")):
        events = [json.loads(line) for line in log.read_text().splitlines()]
        per: dict[str, list[int]] = {}
        for e in sorted(events, key=lambda e: e["i"]):
            if e["ev"] == "arrive" and e["type"] == "DATA" and not e["flags"] & RESENT:
                per.setdefault(e["src"], []).append(e["rseq"])
        got[log.parent.name] = per
    return got


@pytest.mark.parametrize("backend", ["sim", "local"])
def test_reorder_false_gives_no_reordered_datagram_on_any_path(tmp_path: Path,
                                                               backend: str) -> None:
    fifo = run_arrivals(tmp_path / "fifo", backend, reorder=False)
    paths = [(dst, src) for dst, per in fifo.items() for src in per]
    sizes = {f"{s}->{d}": len(fifo[d][s]) for d, s in paths}
    # On a loaded machine a node can start late and send less; every path still carries some.
    assert len(paths) == 6 and min(sizes.values()) >= 30 and sum(sizes.values()) >= 1000, sizes
    assert {f"{s}->{d}": reordered(fifo[d][s]) for d, s in paths} == {
        f"{s}->{d}": 0 for d, s in paths}
    # The control: the same paths with netem's default do reorder, so the count can fail.
    free = run_arrivals(tmp_path / "free", backend, reorder=True)
    assert sum(reordered(seq) for per in free.values() for seq in per.values()) > 100


def test_netem_applier_refuses_duplicate_beside_other_destinations_in_one_sentence() -> None:
    """Linux refuses a duplicating netem next to other netems in one tree (found under UML:
    tests/test_uml_netem_fifo.py); the plan has a leaf per destination, so the applier says so
    before running any command."""
    three = TopologySpec.model_validate({
        "name": "d", "hosts": [{"name": h} for h in ("a", "b", "c")],
        "matrix": {"a": {"b": {"delay": "1ms", "duplicate": "1%"}, "c": "1ms"},
                   "b": {"a": "1ms", "c": "1ms"}, "c": {"a": "1ms", "b": "1ms"}}})
    ips = {"a": "198.18.0.1", "b": "198.18.0.2", "c": "198.18.0.3"}
    plans = host_plans(three, three.paths(), ips, "d0")
    assert netem.unrealisable(plans["a"]) == (
        "the netem applier cannot realise `duplicate` on a->b: the kernel refuses a duplicating "
        "netem beside the host's other destinations' netems (use the userspace applier)")
    assert netem.unrealisable(plans["b"]) is None
    with pytest.raises(ShapingError, match="cannot realise `duplicate`"):
        netem.NetemApplier().apply(None, plans["a"], None)  # type: ignore[arg-type]


def test_userspace_corruption_flips_one_payload_bit_and_keeps_the_headers() -> None:
    ip = bytes([0x45]) + bytes(19)  # IPv4, 20-byte header
    packet = ip + bytes(8) + bytes(range(100))  # then UDP's 8 bytes and a payload
    rng = random.Random(2)
    for _ in range(200):
        bad = flip_bit(packet, rng)
        diff = [i for i in range(len(packet)) if bad[i] != packet[i]]
        assert len(diff) == 1 and diff[0] >= 28  # one byte, past the IP and UDP headers
        assert bin(bad[diff[0]] ^ packet[diff[0]]).count("1") == 1
