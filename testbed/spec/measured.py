"""Topologies from measured Internet latencies (`testbed topology import`, docs/topologies.md).

Three input formats, one result -- a topology with a per-pair one-way `matrix` and a `source:`
naming the dataset, its date range, the statistic and a licence note:

- `wonderproxy`: WonderProxy's hourly ping CSV (`source, destination, timestamp, min, avg,
  max, mdev`, RTTs in ms, each row the summary of `ping -c 30`) with its servers CSV (`id,
  name, title, ..., latitude, longitude`) naming the ids; hosts are named after `title` (the
  city).
- `grid`: a cloud inter-region latency grid, CSV (a header row of regions, then one row per
  source region, RTTs in ms, blank where not measured) or JSON (`{"A": {"B": rtt, ...}}`).
- `matrix`: a plain RTT matrix (King / Meridian style): whitespace- or comma-separated numbers,
  full (n x n) or lower-triangular (row i holds i or i + 1 values), `--unit us|ms`, negative
  or blank for not measured; host names from `--servers` (one per line) or `n1`, `n2`, ...

The one-way delay of a -> b is half the RTT measured from a to b (the statistic over every
sample of the pair: median or p90 of `avg`, or the smallest `min`), unless `--asymmetry` gives
one-way delays (a grid of ms) for the pair. Jitter is the spread of the samples: the RTT's
standard deviation (within a ping run, WonderProxy's `mdev`, combined with the spread of the
runs' averages) over sqrt(2), one direction's share of two independent legs; single-valued
grids and matrices give none. Every problem is one `file:line: field: message` line and
nothing is written.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import json
import math
import re
import statistics
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testbed.spec.loader import SpecError
from testbed.spec.topology import NAME, TopologySpec, check_topology

FORMATS = ("wonderproxy", "grid", "matrix")
STATISTICS = ("median", "min", "p90")
PING_COLUMNS = ("source", "destination", "timestamp", "min", "avg", "max", "mdev")
MAX_PROBLEMS = 20


class MeasuredDataError(SpecError):
    """Located problems in measured data; one `file:line: field: message` per problem."""


@dataclass(frozen=True)
class Sample:
    """One measurement of a directed pair: the RTT's min and average, and its deviation."""

    min: float
    avg: float
    mdev: float = 0.0


@dataclass
class Site:
    label: str  # the dataset's name for it (city, region)
    key: str  # its id in the dataset (WonderProxy id, grid label, matrix index)
    line: int  # where it is defined
    name: str = ""  # the host name
    lat: float | None = None
    lon: float | None = None
    aliases: tuple[str, ...] = ()  # other names it goes by (WonderProxy's internal `name`)
    file: Path | None = None  # where it is defined, when not in the measurements' file


@dataclass
class Measured:
    """What a reader found: sites in file order and samples per directed pair of keys."""

    path: Path
    sites: list[Site]
    samples: dict[tuple[str, str], list[Sample]] = field(default_factory=dict)
    lines: dict[tuple[str, str], int] = field(default_factory=dict)  # first line of a pair
    dates: tuple[str, str] | None = None


class _Problems:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, path: Path, line: int, where: str, message: str) -> None:
        self.lines.append(f"{path}:{line}: {where}: {' '.join(message.split())}")

    def raise_if_any(self) -> None:
        if self.lines:
            shown = self.lines[:MAX_PROBLEMS]
            if len(self.lines) > MAX_PROBLEMS:
                shown.append(f"... and {len(self.lines) - MAX_PROBLEMS} more problems")
            raise MeasuredDataError(shown)


def host_name(label: str) -> str:
    """`São Paulo` -> `sao-paulo`; `Germany West Central` -> `germany-west-c` (host names are
    at most 16 characters: the last words shrink to their initials until it fits)."""
    ascii_text = unicodedata.normalize("NFKD", label).encode("ascii", "ignore").decode()
    words = [w for w in re.split(r"[^a-z0-9]+", ascii_text.lower()) if w]
    if not words:
        return ""
    if not words[0][0].isalpha():
        words.insert(0, "n")
    i = len(words) - 1
    while len("-".join(words)) > 16 and i > 0:
        words[i] = words[i][0]
        i -= 1
    return "-".join(words)[:16].rstrip("-")


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise MeasuredDataError([f"{path}:1: ({what}): no such file"]) from None
    except OSError as exc:
        raise MeasuredDataError([f"{path}:1: ({what}): cannot read: {exc.strerror}"]) from None
    except UnicodeDecodeError as exc:
        raise MeasuredDataError([f"{path}:1: ({what}): not UTF-8 text ({exc.reason})"]
                                ) from None


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _csv_rows(text: str) -> list[tuple[int, list[str]]]:
    """(line, cells) of every non-blank CSV row."""
    reader = csv.reader(io.StringIO(text))
    rows = []
    for cells in reader:
        if any(c.strip() for c in cells):
            rows.append((reader.line_num, [c.strip() for c in cells]))
    return rows


# --- WonderProxy ------------------------------------------------------------------------------


def _stream_rows(path: Path, what: str) -> Iterator[tuple[int, list[str]]]:
    """(line, cells) of every non-blank CSV row, read as the file goes (WonderProxy's pings
    run to millions of rows)."""
    try:
        fh = path.open(encoding="utf-8-sig", newline="")
    except FileNotFoundError:
        raise MeasuredDataError([f"{path}:1: ({what}): no such file"]) from None
    except OSError as exc:
        raise MeasuredDataError([f"{path}:1: ({what}): cannot read: {exc.strerror}"]) from None
    with fh:
        reader = csv.reader(fh)
        try:
            for cells in reader:
                if any(c.strip() for c in cells):
                    yield reader.line_num, [c.strip() for c in cells]
        except UnicodeDecodeError as exc:
            raise MeasuredDataError([f"{path}:{reader.line_num + 1}: ({what}): not UTF-8 "
                                     f"text ({exc.reason})"]) from None
        except csv.Error as exc:
            raise MeasuredDataError([f"{path}:{reader.line_num}: ({what}): {exc}"]) from None


def read_wonderproxy(pings: Path, servers: Path | None, select: list[str] | None = None
                     ) -> Measured:
    """The pings among the servers `select` names (all without it; matched as
    `select_sites` matches), streamed: rows of other servers are skipped unparsed."""
    problems = _Problems()
    if servers is None:
        raise MeasuredDataError([f"{pings}:1: --servers: the wonderproxy format needs the "
                                 "servers CSV that names the ids (id, name, title, ...)"])
    sites = _read_servers(servers, problems)
    problems.raise_if_any()
    by_id = {s.key: s for s in sites}
    measured = Measured(pings, sites)
    keep: set[str] | None = None
    if select:
        keep = {s.key for s in select_sites(Measured(pings, [dataclasses.replace(s)
                                                             for s in sites]), select, pings)}
    rows = _stream_rows(pings, "pings")
    first_row = next(rows, None)
    if first_row is None:
        raise MeasuredDataError([f"{pings}:1: (pings): no rows"])
    columns = list(PING_COLUMNS)
    first_line, first = first_row
    if _number(first[0]) is None:  # a header row: find the columns by name
        header = [c.lower() for c in first]
        missing = [c for c in PING_COLUMNS if c not in header]
        if missing:
            raise MeasuredDataError([f"{pings}:{first_line}: (header): missing column(s) "
                                     f"{', '.join(missing)}; WonderProxy's pings have "
                                     f"{', '.join(PING_COLUMNS)}"])
        columns = header
        body: Iterable[tuple[int, list[str]]] = rows
    else:
        body = itertools.chain([first_row], rows)
    index = {c: columns.index(c) for c in PING_COLUMNS}
    first_stamp: str | None = None
    last_stamp: str | None = None
    for line, cells in body:
        if len(cells) < len(columns):
            problems.add(pings, line, "(row)", f"{len(cells)} columns, expected "
                         f"{len(columns)} ({', '.join(columns)})")
            continue
        src, dst = cells[index["source"]], cells[index["destination"]]
        bad = [k for k in ("source", "destination") if cells[index[k]] not in by_id]
        if bad:
            problems.add(pings, line, bad[0], f"server id {cells[index[bad[0]]]!r} is not in "
                         f"{servers}")
            continue
        if src == dst or (keep is not None and not (src in keep and dst in keep)):
            continue
        values = {k: _number(cells[index[k]]) for k in ("min", "avg", "max", "mdev")}
        wrong = [k for k, v in values.items() if v is None or v < 0]
        if wrong:
            problems.add(pings, line, wrong[0], f"{cells[index[wrong[0]]]!r} is not a "
                         "non-negative number of milliseconds")
            continue
        mn, avg, mdev = values["min"], values["avg"], values["mdev"]
        assert mn is not None and avg is not None and mdev is not None
        measured.samples.setdefault((src, dst), []).append(Sample(mn, avg, mdev))
        measured.lines.setdefault((src, dst), line)
        stamp = cells[index["timestamp"]]
        first_stamp = stamp if first_stamp is None or stamp < first_stamp else first_stamp
        last_stamp = stamp if last_stamp is None or stamp > last_stamp else last_stamp
        if len(problems.lines) > MAX_PROBLEMS:
            break
    problems.raise_if_any()
    if first_stamp is not None and last_stamp is not None:
        measured.dates = (first_stamp, last_stamp)
    return measured


def _read_servers(path: Path, problems: _Problems) -> list[Site]:
    rows = _csv_rows(_read_text(path, "servers"))
    if not rows:
        raise MeasuredDataError([f"{path}:1: (servers): no rows"])
    line, first = rows[0]
    header = [c.lower() for c in first]
    if "id" not in header or not ({"title", "name"} & set(header)):
        raise MeasuredDataError([f"{path}:{line}: (header): the servers CSV needs a header "
                                 "row with `id` and `title` or `name` (WonderProxy's: id, name, "
                                 "title, location, state, country, state_abbv, continent, "
                                 "latitude, longitude)"])
    col = {c: header.index(c) for c in header}
    label_col = col.get("title", col.get("name"))
    assert label_col is not None
    sites = []
    for line, cells in rows[1:]:
        if len(cells) <= max(col["id"], label_col):
            problems.add(path, line, "(row)", f"{len(cells)} columns, expected {len(header)}")
            continue
        site = Site(cells[label_col], cells[col["id"]], line, file=path)
        if "name" in col and col["name"] < len(cells):
            site.aliases = (cells[col["name"]].lower(),)
        for key, attr in (("latitude", "lat"), ("longitude", "lon")):
            if key in col and col[key] < len(cells):
                setattr(site, attr, _number(cells[col[key]]))
        sites.append(site)
    return sites


# --- grid -------------------------------------------------------------------------------------


def read_grid(path: Path) -> Measured:
    text = _read_text(path, "grid")
    if path.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        return _read_grid_json(path, text)
    problems = _Problems()
    rows = _csv_rows(text)
    if len(rows) < 2:
        raise MeasuredDataError([f"{path}:1: (grid): expected a header row of regions and "
                                 "one row per region"])
    header_line, header = rows[0]
    columns = header[1:]
    if not columns or any(not c for c in columns):
        raise MeasuredDataError([f"{path}:{header_line}: (header): the first row names the "
                                 "regions (the first cell labels the row names)"])
    sites = [Site(label, label, header_line) for label in columns]
    measured = Measured(path, sites)
    known = set(columns)
    row_labels: set[str] = set()
    for line, cells in rows[1:]:
        src = cells[0]
        if src not in known:
            problems.add(path, line, src or "(row)", f"row region {src!r} is not a column of "
                         "the header row")
            continue
        row_labels.add(src)
        if len(cells) - 1 > len(columns):
            problems.add(path, line, src, f"{len(cells) - 1} values for {len(columns)} regions")
            continue
        for dst, cell in zip(columns, cells[1:], strict=False):
            if cell == "" or dst == src:
                continue
            value = _number(cell)
            if value is None or value < 0:
                problems.add(path, line, f"{src}.{dst}", f"{cell!r} is not a non-negative RTT "
                             "in milliseconds")
                continue
            measured.samples[(src, dst)] = [Sample(value, value)]
            measured.lines[(src, dst)] = line
    for site in sites:
        if site.key not in row_labels:
            site.line = -1  # a column without a row: only a problem if selected
    problems.raise_if_any()
    return measured


def _read_grid_json(path: Path, text: str) -> Measured:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MeasuredDataError([f"{path}:{exc.lineno}: (json): {exc.msg}"]) from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise MeasuredDataError([f"{path}:1: (grid): expected an object of objects, "
                                 "{\"source region\": {\"destination region\": RTT ms}}"])
    lines = text.splitlines()

    def line_of(key: str) -> int:
        needle = json.dumps(key)
        return next((i + 1 for i, t in enumerate(lines) if needle in t), 1)

    labels = list(dict.fromkeys([*data, *(d for row in data.values() for d in row)]))
    measured = Measured(path, [Site(label, label, line_of(label)) for label in labels])
    problems = _Problems()
    for src, row in data.items():
        for dst, value in row.items():
            if src == dst or value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                problems.add(path, line_of(src), f"{src}.{dst}", f"{value!r} is not a "
                             "non-negative RTT in milliseconds")
                continue
            measured.samples[(src, dst)] = [Sample(float(value), float(value))]
            measured.lines[(src, dst)] = line_of(src)
    problems.raise_if_any()
    return measured


# --- plain matrix -----------------------------------------------------------------------------


def read_matrix(path: Path, unit: str, names: Path | None) -> Measured:
    if unit not in ("us", "ms"):
        raise MeasuredDataError([f"{path}:1: --unit: {unit!r} is not us or ms"])
    scale = 1e-3 if unit == "us" else 1.0
    problems = _Problems()
    rows: list[tuple[int, list[str]]] = []
    for i, raw in enumerate(_read_text(path, "matrix").splitlines(), start=1):
        text = raw.split("#", 1)[0].strip()
        if text:
            rows.append((i, [c for c in re.split(r"[\s,;]+", text) if c != ""]))
    n = len(rows)
    if n < 2:
        raise MeasuredDataError([f"{path}:1: (matrix): expected at least two rows"])
    lengths = [len(cells) for _, cells in rows]
    triangular = lengths != [n] * n
    if triangular and lengths not in ([i for i in range(n)], [i + 1 for i in range(n)]):
        first_bad = next(line for (line, cells) in rows if len(cells) != n)
        raise MeasuredDataError([f"{path}:{first_bad}: (matrix): rows hold {lengths[:6]}... "
                                 f"values: neither full ({n} per row) nor lower-triangular"])
    if names is not None:
        labels = [t.strip() for t in _read_text(names, "names").splitlines() if t.strip()]
        if len(labels) != n:
            raise MeasuredDataError([f"{names}:1: (names): {len(labels)} names for a "
                                     f"{n}-row matrix"])
    else:
        labels = [f"n{i + 1}" for i in range(n)]
    sites = [Site(label, str(i), line) for i, (label, (line, _)) in
             enumerate(zip(labels, rows, strict=True))]
    measured = Measured(path, sites)
    for i, (line, cells) in enumerate(rows):
        for j, cell in enumerate(cells):
            if i == j:
                continue
            value = _number(cell)
            if value is None:
                problems.add(path, line, f"[{i + 1}][{j + 1}]", f"{cell!r} is not a number")
                continue
            if value < 0:  # King's -1: not measured
                continue
            rtt = value * scale
            pairs = [(i, j), (j, i)] if triangular else [(i, j)]
            for a, b in pairs:
                measured.samples[(str(a), str(b))] = [Sample(rtt, rtt)]
                measured.lines[(str(a), str(b))] = line
    problems.raise_if_any()
    return measured


# --- the topology -----------------------------------------------------------------------------


def select_sites(measured: Measured, select: list[str] | None, where: Path) -> list[Site]:
    """The sites to import, in the order given (`label` or `label=name`; matched by label, id
    or host name, case-insensitively), or all of them; each gets its host name."""
    problems = _Problems()
    chosen: list[tuple[Site, str]] = []
    if select:
        for item in select:
            wanted, _, alias = item.partition("=")
            key = wanted.strip().lower()
            match = [s for s in measured.sites
                     if key in (s.label.lower(), s.key.lower(), host_name(s.label),
                                *s.aliases)]
            if not match:
                problems.add(where, 1, "--select", f"no city or region {wanted.strip()!r} in "
                             f"{measured.path.name}")
                continue
            chosen.append((match[0], alias.strip()))
    else:
        chosen = [(s, "") for s in measured.sites]
    problems.raise_if_any()
    seen: dict[str, Site] = {}
    out = []
    for site, alias in chosen:
        name = alias or host_name(site.label)
        if not NAME.match(name):
            problems.add(where, 1, "--select", f"host name {name!r} for {site.label!r} must be "
                         "1-16 lowercase letters, digits or '-', starting with a letter")
            continue
        if name in seen:
            other = seen[name]
            problems.add(measured.path, site.line, site.label, f"{site.label!r} and "
                         f"{other.label!r} would both be host {name!r}: name one with --select "
                         f"'{site.label}=NAME'")
            continue
        seen[name] = site
        site.name = name
        out.append(site)
    problems.raise_if_any()
    return out


def read_locations(path: Path, sites: list[Site]) -> None:
    """`--locations`: a CSV with a header row naming `site`, `latitude` and `longitude` (more
    columns are kept for the reader, e.g. the city); each row gives the selected site it names
    (by label, id or host name, case-insensitively) its location. A row naming no selected site
    is skipped (the file may list more regions than are imported); a bad number, a latitude
    outside -90..90 or a longitude outside -180..180 is a problem at its line."""
    rows = _csv_rows(_read_text(path, "locations"))
    if not rows:
        raise MeasuredDataError([f"{path}:1: (locations): no rows"])
    line, first = rows[0]
    header = [c.strip().lower() for c in first]
    if not {"site", "latitude", "longitude"} <= set(header):
        raise MeasuredDataError([f"{path}:{line}: (header): the locations CSV needs a header "
                                 "row with site, latitude and longitude"])
    col = {c: header.index(c) for c in ("site", "latitude", "longitude")}
    by_name: dict[str, Site] = {}
    for site in sites:
        for key in (site.label.lower(), site.key.lower(), site.name, *site.aliases):
            by_name.setdefault(key, site)
    problems = _Problems()
    for line, cells in rows[1:]:
        if len(cells) <= max(col.values()):
            problems.add(path, line, "(row)", f"{len(cells)} columns, expected {len(header)}")
            continue
        named = by_name.get(cells[col["site"]].strip().lower())
        if named is None:
            continue
        lat, lon = _number(cells[col["latitude"]]), _number(cells[col["longitude"]])
        if lat is None or not -90 <= lat <= 90:
            problems.add(path, line, "latitude", f"{cells[col['latitude']]!r} is not a "
                         "latitude (-90..90)")
        elif lon is None or not -180 <= lon <= 180:
            problems.add(path, line, "longitude", f"{cells[col['longitude']]!r} is not a "
                         "longitude (-180..180)")
        else:
            named.lat, named.lon = lat, lon
    problems.raise_if_any()


def _statistic(samples: list[Sample], statistic: str) -> float:
    if statistic == "min":
        return min(s.min for s in samples)
    avgs = sorted(s.avg for s in samples)
    if statistic == "median":
        return float(statistics.median(avgs))
    pos = 0.9 * (len(avgs) - 1)  # p90, linear between the closest ranks
    lo = math.floor(pos)
    hi = min(lo + 1, len(avgs) - 1)
    return avgs[lo] + (avgs[hi] - avgs[lo]) * (pos - lo)


def _jitter(samples: list[Sample]) -> float:
    within = statistics.median(s.mdev for s in samples)
    across = statistics.pstdev([s.avg for s in samples]) if len(samples) > 1 else 0.0
    return math.sqrt(within**2 + across**2) / math.sqrt(2)


def _ms(value: float) -> str:
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return f"{text}ms"


def read_one_way(path: Path) -> Measured:
    """`--asymmetry`: measured one-way delays, a grid (CSV or JSON) of ms."""
    return read_grid(path)


def build_topology(measured: Measured, sites: list[Site], *, name: str, statistic: str,
                   source: dict[str, str], asymmetry: Measured | None = None) -> dict[str, Any]:
    """The topology as a YAML-ready mapping; MeasuredDataError for a selected city without
    measurements, a pair measured in one direction only, or an asymmetry file with gaps."""
    if statistic not in STATISTICS:
        raise MeasuredDataError([f"{measured.path}:1: --statistic: {statistic!r} is not one of "
                                 f"{', '.join(STATISTICS)}"])
    problems = _Problems()
    if len(sites) < 2:
        problems.add(measured.path, 1, "--select", "a topology needs at least two hosts")
    measured_keys = {k for pair in measured.samples for k in pair}
    for site in sites:
        if site.key not in measured_keys or site.line < 0:
            problems.add(site.file or measured.path, max(site.line, 1), site.label,
                         f"{site.label!r} has no measurements")
    problems.raise_if_any()
    one_way: dict[tuple[str, str], float] = {}
    if asymmetry is not None:
        by_label = {s.label.lower(): s.key for s in sites}
        by_label.update({s.name: s.key for s in sites})
        for (src, dst), samples in asymmetry.samples.items():
            ka, kb = by_label.get(src.lower()), by_label.get(dst.lower())
            if ka is None or kb is None:
                continue
            if (dst, src) not in asymmetry.samples:
                problems.add(asymmetry.path, asymmetry.lines[(src, dst)], f"{src}.{dst}",
                             f"asymmetric gap: a one-way delay {src} -> {dst} but none "
                             f"{dst} -> {src}")
                continue
            one_way[(ka, kb)] = samples[0].avg
    matrix: dict[str, dict[str, dict[str, str]]] = {}
    for a in sites:
        row: dict[str, dict[str, str]] = {}
        for b in sites:
            if a is b:
                continue
            there, back = measured.samples.get((a.key, b.key)), measured.samples.get(
                (b.key, a.key))
            if there is None and back is None:
                problems.add(measured.path, max(a.line, 1), f"{a.label}.{b.label}",
                             f"no measurement between {a.label!r} and {b.label!r}")
                continue
            if there is None:
                problems.add(measured.path, measured.lines[(b.key, a.key)],
                             f"{b.label}.{a.label}", f"asymmetric gap: {b.label!r} -> "
                             f"{a.label!r} is measured but {a.label!r} -> {b.label!r} is not")
                continue
            delay = one_way.get((a.key, b.key), _statistic(there, statistic) / 2)
            entry = {"delay": _ms(delay)}
            jitter = _jitter(there)
            if round(jitter, 3) > 0:
                entry["jitter"] = _ms(jitter)
            row[b.name] = entry
        matrix[a.name] = row
    problems.raise_if_any()
    hosts: list[dict[str, Any]] = []
    for s in sites:
        host: dict[str, Any] = {"name": s.name}
        if s.lat is not None and s.lon is not None and -90 <= s.lat <= 90 \
                and -180 <= s.lon <= 180:
            host["location"] = [s.lat, s.lon]
        hosts.append(host)
    topo: dict[str, Any] = {
        "name": name,
        "description": f"{len(sites)} sites measured: " + ", ".join(s.label for s in sites),
        "source": {k: v for k, v in source.items() if v},
        "hosts": hosts,
        "matrix": matrix,
    }
    spec = TopologySpec.model_validate(topo, context={"defer_checks": True})
    located = check_topology(spec)
    if located:  # cannot happen for what is built above; kept as the spec's own check
        raise MeasuredDataError([f"{measured.path}:1: {'.'.join(map(str, loc))}: {msg}"
                                 for loc, msg in located])
    return topo


def date_range(measured: Measured) -> str:
    if measured.dates is None:
        return ""
    first, last = measured.dates
    return first if first == last else f"{first} to {last}"


def statistic_text(statistic: str, fmt: str, asymmetry: Path | None, values: str = "") -> str:
    """`source.statistic`: how the delays were derived; `values` says what a grid's or a
    matrix's numbers are (e.g. `monthly P95 RTT`)."""
    what = {"median": "median of the runs' average RTT", "min": "smallest RTT",
            "p90": "90th percentile of the runs' average RTT"}[statistic]
    if fmt != "wonderproxy":
        what = values or "the RTT given"
    text = f"one-way delay = {what} / 2 per direction"
    if asymmetry is not None:
        text += f", measured one-way delays from {asymmetry.name} where given"
    if fmt == "wonderproxy":
        text += "; jitter = RTT standard deviation (mdev and spread of runs) / sqrt(2)"
    return text


def dump(topo: dict[str, Any], header: str) -> str:
    """YAML with one line per host and per matrix entry (`{delay: .., jitter: ..}`)."""
    head = {k: v for k, v in topo.items() if k not in ("hosts", "matrix")}
    tail = {k: topo[k] for k in ("hosts", "matrix")}
    body = (yaml.safe_dump(head, sort_keys=False, allow_unicode=True, width=100)
            + yaml.safe_dump(tail, sort_keys=False, allow_unicode=True, width=100,
                             default_flow_style=None))
    return "".join(f"# {line}\n" for line in header.splitlines()) + body
