"""The console at any size and the bounded RTT check (testbed/pathcheck.py): which pairs the
check pings, the pool that pings them, the matrix per site pair, paths.csv and check.csv."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from analysis.lockfile import lock_paths as read_lock_paths
from analysis.record import read_record
from analysis.report import render_report
from analysis.report_data import load_run
from testbed.backends.mininet import rtt_report
from testbed.pathcheck import (
    CHECK_CSV,
    PATHS_CSV,
    check_pairs,
    check_summary,
    lock_paths,
    parse_ping_median,
    ping_pairs,
    site_matrix,
    sites_of,
    write_check_csv,
    write_paths_csv,
)
from testbed.rundir import RunDir
from testbed.spec.loader import load_experiment, load_topology
from testbed.spec.topology import PathMatrix, TopologySpec
from tests.inproc import ROOT, run_cli

REGIONS = ROOT / "topologies" / "regions-100.yaml"
TWO_SITES = ROOT / "topologies" / "two-sites.yaml"


def covers(pairs: list[tuple[str, str]], hosts: list[str], sites: dict[str, str | None]) -> None:
    assert len(set(pairs)) == len(pairs), "a pair twice"
    assert all(a != b for a, b in pairs)
    assert {a for a, _ in pairs} == set(hosts), "a host never a source"
    assert {b for _, b in pairs} == set(hosts), "a host never a destination"
    want = {(sites[a], sites[b]) for a in hosts for b in hosts if a != b}
    assert {(sites[a], sites[b]) for a, b in pairs} == want, "an ordered site pair unmeasured"


def topology(sizes: dict[str, int]) -> TopologySpec:
    """Sites of the given host counts, every WAN pair linked."""
    names = list(sizes)
    return TopologySpec.model_validate({
        "name": "uneven",
        "sites": {s: {"lan": {"delay": "1ms"}} for s in names},
        "hosts": [{"name": f"{s}{i}", "site": s} for s in names for i in range(sizes[s])],
        "wan": [{"between": [a, b], "delay": f"{10 + i + j}ms"}
                for i, a in enumerate(names) for j, b in enumerate(names) if i < j]})


def test_the_sample_on_a_hundred_hosts_covers_every_site_pair_and_every_host() -> None:
    topo = load_topology(REGIONS)
    hosts, sites = topo.paths().hosts, sites_of(topo)
    pairs = check_pairs(hosts, sites)
    covers(pairs, hosts, sites)
    assert len(pairs) == 100  # 10 x 10 site pairs, each host once a source, once a destination
    assert pairs == check_pairs(hosts, sites), "not deterministic"
    assert len(check_pairs(hosts, sites, "all")) == 9900
    assert check_pairs(hosts, sites, "none") == []


def test_small_topologies_check_every_pair() -> None:
    topo = load_topology(TWO_SITES)
    hosts = topo.paths().hosts
    assert check_pairs(hosts, sites_of(topo)) == [(a, b) for a in hosts for b in hosts if a != b]
    twelve = topology({"x": 6, "y": 6})
    hosts = twelve.paths().hosts
    assert len(check_pairs(hosts, sites_of(twelve))) == 12 * 11
    with pytest.raises(ValueError, match="check mode"):
        check_pairs(hosts, sites_of(twelve), "some")


@pytest.mark.parametrize("sizes", [
    {"big": 20, "lone": 1, "mid": 3},  # more hosts in a site than site pairs from it
    {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1, "g": 1, "h": 1, "i": 1, "j": 1, "k": 1,
     "l": 1, "m": 1},  # a site per host: every pair is its own site pair
    {"a": 13},  # one site
    {"a": 2, "b": 11, "c": 2},
])
def test_uneven_sites_are_covered(sizes: dict[str, int]) -> None:
    topo = topology(sizes)
    hosts, sites = topo.paths().hosts, sites_of(topo)
    pairs = check_pairs(hosts, sites)
    covers(pairs, hosts, sites)
    assert len(pairs) < len(hosts) * (len(hosts) - 1) or len(sites) == len(hosts)


def test_hosts_without_sites_are_each_a_source_and_a_destination() -> None:
    names = [f"n{i}" for i in range(15)]
    topo = TopologySpec.model_validate({"name": "m", "hosts": [{"name": n} for n in names],
                                        "matrix": {a: {b: "5ms" for b in names if b != a}
                                                   for a in names}})
    pairs = check_pairs(topo.paths().hosts, sites_of(topo))
    covers(pairs, names, sites_of(topo))
    assert len(pairs) <= 2 * len(names)


def test_ping_pairs_runs_at_most_workers_pings_at_once(tmp_path: Path) -> None:
    if shutil.which("ping") is None:
        pytest.skip("no ping on this machine")
    log = tmp_path / "starts"
    # The prefix stands where `nsenter` stands on mininet: it logs start and end, runs ping.
    wrap = f'echo "s $(date +%s%N)" >> {log}; "$@"; echo "e $(date +%s%N)" >> {log}'
    hosts = [f"h{i}" for i in range(4)]
    address = {h: f"127.0.0.{i + 1}" for i, h in enumerate(hosts)}
    pairs = [(a, b) for a in hosts for b in hosts if a != b][:6]
    got = ping_pairs(pairs, lambda _h: ["sh", "-c", wrap, "sh"], address, count=2,
                     interval_s=0.2, workers=2)
    assert set(got) == set(pairs)
    assert all(v is not None and 0 <= v < 50 for v in got.values()), got
    events = sorted((int(t), kind) for kind, t in (line.split() for line in
                                                    log.read_text().splitlines()))
    assert len(events) == 12
    running = peak = 0
    for _, kind in events:
        running += 1 if kind == "s" else -1
        peak = max(peak, running)
    assert peak <= 2


def test_a_failing_ping_stops_the_pings_not_yet_started(tmp_path: Path) -> None:
    """An error (or Ctrl-C) while the check runs: the queued pings are dropped, not run."""
    if shutil.which("ping") is None:
        pytest.skip("no ping on this machine")
    log = tmp_path / "starts"
    hosts = [f"h{i}" for i in range(6)]
    address = {h: "127.0.0.1" for h in hosts}
    pairs = [(a, b) for a in hosts for b in hosts if a != b]  # 30

    def prefix(host: str) -> list[str]:
        if host == "h0" and log.exists() and len(log.read_text().split()) >= 2:
            raise KeyError("h0's namespace is gone")
        return ["sh", "-c", f'echo s >> {log}; "$@"', "sh"]

    with pytest.raises(KeyError):
        ping_pairs(pairs, prefix, address, count=1, interval_s=0.2, workers=1)
    assert len(log.read_text().split()) <= 4  # not the 30 the pool was given


def test_parse_ping_median() -> None:
    text = ("64 bytes from 198.18.0.2: icmp_seq=1 ttl=64 time=25.1 ms\n"
            "64 bytes from 198.18.0.2: icmp_seq=2 ttl=64 time=20.3 ms\n"
            "64 bytes from 198.18.0.2: icmp_seq=3 ttl=64 time=20.5 ms\n")
    assert parse_ping_median(text) == 20.5
    assert parse_ping_median("3 packets transmitted, 0 received") is None


def test_site_matrix_one_value_or_a_range() -> None:
    topo = load_topology(REGIONS)
    m = site_matrix(topo.paths(), sites_of(topo))
    assert len(m.sites) == 10 and set(m.counts.values()) == {10}
    assert m.cells[("virginia", "oregon")] == "31.5"  # 0.25 + 31 + 0.25
    assert m.cells[("virginia", "virginia")] == "0.5"
    assert m.jitter_ms == (0.0, 1.0)
    two = load_topology(TWO_SITES)
    paths = two.paths()
    crossed = {h: ("x" if i % 2 == 0 else "y") for i, h in enumerate(paths.hosts)}
    m = site_matrix(paths, crossed)
    lo, hi = paths.get("h1", "h2").delay_ns / 1e6, paths.get("h1", "h4").delay_ns / 1e6
    assert m.cells[("x", "y")] == f"{min(lo, hi):g}..{max(lo, hi):g}"


def test_the_console_collapses_a_hundred_hosts_and_keeps_a_small_matrix() -> None:
    big = run_cli("up", str(REGIONS), "--dry-run")
    assert big.returncode == 0, big.stderr
    assert "per site pair, 100 hosts in 10 sites" in big.stdout
    assert "johannesburg" in big.stdout and "va01" not in big.stdout
    assert len(big.stdout.splitlines()) < 30
    row = next(line for line in big.stdout.splitlines() if line.startswith("virginia"))
    assert row.split()[1:4] == ["10", "0.5", "31.5"]
    small = run_cli("up", str(TWO_SITES), "--dry-run")
    assert small.returncode == 0, small.stderr
    assert "one-way delay matrix (ms)" in small.stdout and "per site pair" not in small.stdout
    assert "h4" in small.stdout
    bad = run_cli("up", str(TWO_SITES), "--dry-run", "--check", "some")
    assert bad.returncode == 2 and "--check must be" in bad.stderr
    bad = run_cli("up", str(TWO_SITES), "--dry-run", "--check", "all")
    assert bad.returncode == 2 and "mininet backend only" in bad.stderr
    for check, n in (("sample", 100), ("all", 9900)):
        plan = run_cli("up", str(REGIONS), "--dry-run", "--backend", "mininet", "--check", check)
        assert plan.returncode == 0, plan.stderr
        assert f"would start 100 mininet hosts and ping {n} pairs (--check {check})" \
            in plan.stdout.replace("\n", " ")


def test_paths_csv_and_check_csv_hold_every_row_and_the_report_shows_them(
        tmp_path: Path) -> None:
    from testbed.runner import write_lock

    exp, small = load_experiment(ROOT / "experiments" / "quickstart.yaml", "sim")
    run = RunDir.create(tmp_path, "paths")
    write_lock(run, exp, small, small.paths())  # every run writes paths.csv with its lock
    with (run.path / PATHS_CSV).open() as f:
        rows = list(csv.DictReader(f))
    n = len(small.paths().hosts)
    assert len(rows) == n * (n - 1) and rows[0]["src_site"] == small.hosts[0].site
    # The hundred hosts' tables in the same directory (its lock stays small: quick to read).
    topo = load_topology(REGIONS)
    paths, sites = topo.paths(), sites_of(topo)
    write_paths_csv(run.path, paths, sites)
    with (run.path / PATHS_CSV).open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 9900
    assert rows[0]["src_site"] == "virginia" and float(rows[0]["delay_ms"]) == 0.5
    pairs = check_pairs(paths.hosts, sites)
    measured: dict[tuple[str, str], float | None] = {
        (a, b): 2 * paths.get(a, b).delay_ns / 1e6 for a, b in pairs}
    measured[pairs[3]] = None  # no reply
    measured[pairs[7]] = 500.0  # far off
    report = rtt_report(paths, measured)
    write_check_csv(run.path, report, sites)
    with (run.path / CHECK_CSV).open() as f:
        checked = list(csv.DictReader(f))
    assert len(checked) == len(pairs) == 100
    assert sum(r["off"] == "1" for r in checked) == 2
    s = check_summary(report, len(paths.hosts))
    assert (s.checked, s.of, s.flagged, s.no_reply) == (100, 9900, 2, 1)
    assert [(r["src"], r["dst"]) for r in s.worst[:2]] == [pairs[3], pairs[7]]
    assert not s.worst[2]["off"]
    assert "every site pair and every host" in s.line()
    html = render_report({"run": "paths", "checks": {}}, load_run(read_record(run.path)))
    assert "9900 ordered pairs" in html and "100 pairs pinged, 2 flagged" in html
    assert html.count("<details>") == 2 and html.count("OFF") == 4  # flagged, then in all


def test_the_check_prints_every_pair_when_small_and_a_summary_when_large(
        capsys: pytest.CaptureFixture[str]) -> None:
    from testbed.cli.up import print_check

    topo = load_topology(REGIONS)
    paths, sites = topo.paths(), sites_of(topo)
    pairs = check_pairs(paths.hosts, sites, "all")
    measured: dict[tuple[str, str], float | None] = {
        (a, b): 2 * paths.get(a, b).delay_ns / 1e6 for a, b in pairs}
    measured[("va01", "jb10")] = None
    print_check(rtt_report(paths, measured), len(paths.hosts))
    out = capsys.readouterr().out
    assert "checked 9900 pairs (every pair): 1 flagged, 1 without reply" in out
    assert "va01->jb10" in out and len(out.splitlines()) < 25
    two = load_topology(TWO_SITES)
    small = two.paths()
    print_check(rtt_report(small, {p: 2 * small.get(*p).delay_ns / 1e6
                                   for p in check_pairs(small.hosts, sites_of(two))}), 4)
    out = capsys.readouterr().out
    assert out.count("->") == 12 and "checked 12 pairs (every pair): 0 flagged" in out


def test_the_plan_prints_per_site_pair_above_twelve_hosts() -> None:
    from testbed.plan import plan_report

    topo = topology({"x": 7, "y": 7})
    paths = topo.paths()
    text = plan_report(paths.hosts, paths.delay_ms(), [1.0] * 14, False, sites_of(topo))
    assert "per site pair" in text and "the best 12 of 14" in text
    assert "x0" not in text.split("SETO: OAL")[0]  # no host columns before the candidates
    assert "sending rates (msg/s): 1" in text
    small = load_topology(TWO_SITES)
    text = plan_report(small.paths().hosts, small.paths().delay_ms(), None, False,
                       sites_of(small))
    assert "per site pair" not in text and "h4" in text.split("SETO: OAL")[0]


def _every_pair(paths: PathMatrix) -> dict[tuple[str, str], dict[str, object]]:
    return {(a, b): {"delay": p.delay_ns / 1e6, "jitter": p.jitter_ns / 1e6, "loss": p.loss,
                     "bandwidth_bps": p.bandwidth_bps} for (a, b), p in paths.paths.items()}


def test_the_lock_holds_every_pair_by_site_pair_and_older_locks_still_read() -> None:
    regions, two = load_topology(REGIONS), load_topology(TWO_SITES)
    matrix = load_topology(ROOT / "topologies" / "cloud-regions.yaml")
    crossed = {h: ("x" if i % 2 == 0 else "y") for i, h in enumerate(two.paths().hosts)}
    for paths, sites in ((regions.paths(), sites_of(regions)), (two.paths(), crossed),
                         (matrix.paths(), sites_of(matrix))):
        compact = lock_paths(paths, sites)
        assert read_lock_paths({"paths_by_site_ms": compact}) == _every_pair(paths)
    assert len(lock_paths(regions.paths(), sites_of(regions))["sites"]) == 100
    assert lock_paths(regions.paths(), sites_of(regions))["pairs"] == {}
    # site pairs whose host pairs differ keep the others as exceptions
    assert lock_paths(two.paths(), crossed)["pairs"]
    old = {"paths_ms": {"a->b": {"delay": 1.5}, "b->a": {"delay": 2.0}, "bad": {}}}
    assert read_lock_paths(old) == {("a", "b"): {"delay": 1.5}, ("b", "a"): {"delay": 2.0}}


def test_a_hundred_hosts_lock_is_small_and_reads_back_every_pair(tmp_path: Path) -> None:
    """One entry per host pair made the lock of 100 hosts 0.9 MB (9,900 paths; seconds to
    write, parse and rewrite); by site pair it is a few dozen kB."""
    from analysis.lockfile import read_lock
    from testbed.runner import write_lock

    exp, topo = load_experiment(ROOT / "experiments" / "wan-100.yaml", "sim")
    run = RunDir.create(tmp_path, exp.name)
    write_lock(run, exp, topo, topo.paths())
    assert (run.path / "spec.lock.yaml").stat().st_size < 100_000
    assert read_lock_paths(read_lock(run.path)) == _every_pair(topo.paths())
