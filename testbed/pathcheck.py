"""The one-way path matrix and the measured-vs-configured check at any size.

Up to `CONSOLE_HOSTS` hosts the console shows the host matrix and every checked pair; above
it the matrix per site pair (sites x sites with their host counts; a cell is the pairs' one
value, or min..max when the pairs of that site pair differ) and a summary of the check (pairs
checked, flagged, the worst few). The full tables go to the run directory: `paths.csv`
(every ordered pair's configured path) and `check.csv` (every checked pair).

The check pings a set of ordered pairs chosen by `check_pairs`: every pair up to
`CONSOLE_HOSTS` hosts or with `--check all`, else a sample that still covers every ordered
site pair and has every host as a source and as a destination. `ping_pairs` runs the pings
with at most `PING_WORKERS` processes at once. Everything here but `ping_pairs` is pure.
"""

from __future__ import annotations

import csv
import statistics
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.spec.topology import PathMatrix, TopologySpec

CONSOLE_HOSTS = 12  # above this many hosts the console collapses to sites and summaries
PING_WORKERS = 32  # ping processes at once (each sends one echo per interval)
WORST = 5  # flagged or furthest-off pairs the check's summary names
CHECK_MODES = ("sample", "all", "none")
PATHS_CSV = "paths.csv"
CHECK_CSV = "check.csv"


def sites_of(topo: TopologySpec) -> dict[str, str | None]:
    """Each host's site (None for hosts of a `matrix` topology, which has no sites)."""
    return {h.name: h.site for h in topo.hosts}


def collapses(hosts: Sequence[str]) -> bool:
    return len(hosts) > CONSOLE_HOSTS


# -- which pairs the check measures ------------------------------------------------------------

def check_pairs(hosts: Sequence[str], sites: Mapping[str, str | None],
                mode: str = "sample") -> list[tuple[str, str]]:
    """The ordered pairs the measured-vs-configured check pings.

    `all`: every ordered pair. `none`: no pair. `sample`: every pair up to `CONSOLE_HOSTS`
    hosts; above, at least one pair per ordered site pair (a site with one host has no pair
    to itself) with the least-used hosts picked first, then pairs for any host not yet a
    source or a destination, so every host is both at least once. Hosts without a site (a
    `matrix` topology) form one group: only the host coverage holds for them. Deterministic:
    the same hosts and sites give the same pairs, in the order to run them.
    """
    if mode not in CHECK_MODES:
        raise ValueError(f"check mode must be one of {', '.join(CHECK_MODES)}, not {mode!r}")
    if mode == "none":
        return []
    every = [(a, b) for a in hosts for b in hosts if a != b]
    if mode == "all" or not collapses(hosts):
        return every
    members: dict[str | None, list[str]] = {}
    for h in hosts:
        members.setdefault(sites.get(h), []).append(h)
    as_src = dict.fromkeys(hosts, 0)
    as_dst = dict.fromkeys(hosts, 0)
    chosen: list[tuple[str, str]] = []
    taken: set[tuple[str, str]] = set()

    def take(a: str, b: str) -> None:
        chosen.append((a, b))
        taken.add((a, b))
        as_src[a] += 1
        as_dst[b] += 1

    def least(candidates: Iterable[str], uses: dict[str, int]) -> str | None:
        # min() keeps the first of equals: the hosts' order breaks ties
        return min(candidates, key=lambda h: uses[h], default=None)

    for sa, srcs in members.items():
        # The site to itself first: its least-used destination is then never the source, so
        # equal sites end with each host once a source and once a destination.
        for sb in sorted(members, key=lambda s: s != sa):
            dsts = members[sb]
            if sa == sb and len(srcs) < 2:
                continue
            a = least(srcs, as_src)
            assert a is not None
            b = least((h for h in dsts if h != a), as_dst)
            assert b is not None
            take(a, b)
    for a in hosts:
        if as_src[a] == 0:
            b = least((h for h in hosts if h != a and (a, h) not in taken), as_dst)
            if b is not None:
                take(a, b)
    for b in hosts:
        if as_dst[b] == 0:
            a = least((h for h in hosts if h != b and (h, b) not in taken), as_src)
            if a is not None:
                take(a, b)
    return chosen


# -- running the pings (root: the prefixes enter the hosts' namespaces) ------------------------

def parse_ping_median(text: str) -> float | None:
    """Median of the per-reply `time=` values: robust to the first echo's one-off costs."""
    rtts = sorted(float(line.split("time=")[1].split()[0]) for line in text.splitlines()
                  if "time=" in line)
    return statistics.median(rtts) if rtts else None


def ping_pairs(pairs: Sequence[tuple[str, str]], prefix: Callable[[str], list[str]],
               address: Mapping[str, str], count: int = 5, interval_s: float = 0.05,
               workers: int = PING_WORKERS, timeout_s: float = 60.0
               ) -> dict[tuple[str, str], float | None]:
    """Median ping RTT in ms per ordered pair (None when no reply came back). `prefix(host)`
    is the command prefix that runs a program on `host` (its namespace), `address[host]` the
    address pinged. At most `workers` ping processes run at once; one that outlives
    `timeout_s` is killed and counts as no reply."""

    def one(pair: tuple[str, str]) -> float | None:
        a, b = pair
        cmd = [*prefix(a), "ping", "-n", "-c", str(count), "-i", str(interval_s), "-W", "3",
               address[b]]
        try:
            done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:  # subprocess.run killed it
            return None
        return parse_ping_median(done.stdout)

    if not pairs:
        return {}
    pool = ThreadPoolExecutor(max_workers=max(1, min(workers, len(pairs))),
                              thread_name_prefix="ping")
    try:
        return dict(zip(pairs, pool.map(one, pairs), strict=True))
    finally:  # interrupted (Ctrl-C): the pings not started never start
        pool.shutdown(wait=True, cancel_futures=True)


# -- the matrix per site pair --------------------------------------------------------------------

@dataclass(frozen=True)
class SiteMatrix:
    """The path matrix per ordered site pair: `counts[site]` hosts, `cells[(sa, sb)]` the site
    pair's one-way delay in ms as text -- its host pairs' one value, else their min..max --
    (absent when the pair has no path: a one-host site to itself); `jitter_ms` and `loss` the
    (min, max) over every host pair."""

    sites: list[str]
    counts: dict[str, int]
    cells: dict[tuple[str, str], str]
    jitter_ms: tuple[float, float]
    loss: tuple[float, float]


def path_cell(p: Any) -> str:
    """One path as the console shows it: delay ms, ±jitter, loss %."""
    cell = f"{p.delay_ns / 1e6:g}"
    if p.jitter_ns:
        cell += f"±{p.jitter_ns / 1e6:g}"
    if p.loss:
        cell += f" {p.loss * 100:g}%"
    return cell


def site_matrix(paths: PathMatrix, sites: Mapping[str, str | None]) -> SiteMatrix:
    """The matrix collapsed to sites; hosts without a site count as one site each (their
    host name)."""
    group = {h: sites.get(h) or h for h in paths.hosts}
    order = list(dict.fromkeys(group[h] for h in paths.hosts))
    counts = dict.fromkeys(order, 0)
    for h in paths.hosts:
        counts[group[h]] += 1
    delays: dict[tuple[str, str], list[int]] = {}
    for (a, b), p in paths.paths.items():
        delays.setdefault((group[a], group[b]), []).append(p.delay_ns)
    cells = {}
    for key, ds in delays.items():
        lo, hi = min(ds) / 1e6, max(ds) / 1e6
        cells[key] = f"{lo:g}" if lo == hi else f"{lo:g}..{hi:g}"
    every = list(paths.paths.values())
    jitters = [p.jitter_ns / 1e6 for p in every] or [0.0]
    losses = [p.loss for p in every] or [0.0]
    return SiteMatrix(order, counts, cells, (min(jitters), max(jitters)),
                      (min(losses), max(losses)))


def span(lo: float, hi: float, unit: str = "", scale: float = 1.0) -> str:
    return f"{lo * scale:g}{unit}" if lo == hi else f"{lo * scale:g}..{hi * scale:g}{unit}"


# -- the paths in spec.lock.yaml -----------------------------------------------------------------

def lock_paths(paths: PathMatrix, sites: Mapping[str, str | None]) -> dict[str, Any]:
    """spec.lock.yaml `paths_by_site_ms`: every ordered pair's configured path, by site pair.
    `hosts`: each host's site (its own name for a host without one); `sites`: per ordered site
    pair `"a->b"` the path most of its host pairs have (`delay`, `jitter` in ms, `loss`,
    `bandwidth_bps`); `pairs`: per host pair `"h1->h2"` a path that differs from its site
    pair's. Lossless, and a hundred hosts in ten sites take ~100 entries where one per host
    pair (`paths_ms`, older locks) took 9,900: a lock of 0.9 MB that cost seconds to write
    and to parse. analysis/lockfile.py `lock_paths` reads both forms."""
    group = {h: sites.get(h) or h for h in paths.hosts}
    cells: dict[tuple[str, str], dict[tuple[str, str], tuple[Any, ...]]] = {}
    for (a, b), p in paths.paths.items():
        cells.setdefault((group[a], group[b]), {})[(a, b)] = (
            p.delay_ns / 1e6, p.jitter_ns / 1e6, p.loss, p.bandwidth_bps)
    keys = ("delay", "jitter", "loss", "bandwidth_bps")
    by_site: dict[str, dict[str, Any]] = {}
    odd: dict[str, dict[str, Any]] = {}
    for (sa, sb), pairs in cells.items():
        values = list(pairs.values())
        common = max(dict.fromkeys(values), key=values.count)  # first of the most frequent
        by_site[f"{sa}->{sb}"] = dict(zip(keys, common, strict=True))
        odd.update({f"{a}->{b}": dict(zip(keys, v, strict=True))
                    for (a, b), v in pairs.items() if v != common})
    return {"hosts": group, "sites": by_site, "pairs": odd}


# -- the full tables in the run directory ----------------------------------------------------

def write_paths_csv(run_dir: Path, paths: PathMatrix, sites: Mapping[str, str | None]) -> Path:
    """`paths.csv`: every ordered pair's configured one-way path."""
    out = run_dir / PATHS_CSV
    with out.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["src", "dst", "src_site", "dst_site", "delay_ms", "jitter_ms", "loss",
                    "bandwidth_bps"])
        for a in paths.hosts:
            for b in paths.hosts:
                if a == b:
                    continue
                p = paths.get(a, b)
                w.writerow([a, b, sites.get(a) or "", sites.get(b) or "", f"{p.delay_ns / 1e6:g}",
                            f"{p.jitter_ns / 1e6:g}", f"{p.loss:g}", p.bandwidth_bps or ""])
    return out


def write_check_csv(run_dir: Path, rows: Sequence[Mapping[str, Any]],
                    sites: Mapping[str, str | None]) -> Path:
    """`check.csv`: every checked pair, configured and measured RTT, `off` 1 when flagged."""
    out = run_dir / CHECK_CSV
    with out.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["src", "dst", "src_site", "dst_site", "configured_ms", "measured_ms", "off"])
        for r in rows:
            m = r["measured_ms"]
            w.writerow([r["src"], r["dst"], sites.get(r["src"]) or "",
                        sites.get(r["dst"]) or "", f"{r['configured_ms']:.3f}",
                        "" if m is None else f"{m:.3f}", int(bool(r["off"]))])
    return out


def read_csv(path: Path) -> list[dict[str, str]]:
    """A table written above, as rows of text (empty when the file is missing)."""
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


# -- the check's summary -------------------------------------------------------------------------

def off_by(row: Mapping[str, Any]) -> float:
    """How far a checked pair is off, in ms; no reply is the furthest."""
    m = row["measured_ms"]
    return float("inf") if m is None else abs(float(m) - float(row["configured_ms"]))


@dataclass(frozen=True)
class CheckSummary:
    checked: int
    of: int  # ordered pairs in the topology
    flagged: int
    no_reply: int
    worst: list[Mapping[str, Any]]  # flagged rows first, furthest off first

    def line(self) -> str:
        scope = ("every pair" if self.checked == self.of
                 else f"a sample covering every site pair and every host, of {self.of} pairs")
        return (f"checked {self.checked} pairs ({scope}): {self.flagged} flagged"
                + (f", {self.no_reply} without reply" if self.no_reply else ""))


def check_summary(rows: Sequence[Mapping[str, Any]], hosts: int,
                  worst: int = WORST) -> CheckSummary:
    ranked = sorted(rows, key=lambda r: (not r["off"], -off_by(r)))
    return CheckSummary(len(rows), hosts * (hosts - 1), sum(1 for r in rows if r["off"]),
                        sum(1 for r in rows if r["measured_ms"] is None), ranked[:worst])
