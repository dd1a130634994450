"""The topology view of a run's report (and so of `testbed serve`): hosts placed by site, or by
their `location` on a world map (equirectangular, a coarse hand-drawn continent outline and a
graticule), every pair's link coloured by its one-way delay,
and one small copy per partition fault with the hosts coloured by the group they were cut into.

Inline SVG like analysis/plots.py (`<svg class="topo" data-view=NAME>`; hosts are
`<g class="host" data-host=H>`, links `<line class="link" data-pair="A-B" data-delay-ms=D
data-a=A data-b=B>`; the live page of testbed/serve.py recolours them during a partition),
from the run's spec.lock.yaml (`topology`, its paths: analysis/lockfile.py `lock_paths`) and its
fault spans. No JavaScript.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Any

from analysis import plots
from analysis.lockfile import lock_paths

# Low to high one-way delay (viridis-like stops; readable with colour-vision deficiencies).
SCALE = ("#440154", "#3b528b", "#21918c", "#5ec962", "#c9b700")
MAX_LINKED = 40  # more hosts than this: hosts only, links would be a solid blot
MAX_PARTITION_VIEWS = 6


def _scale(value: float, lo: float, hi: float) -> str:
    if hi <= lo:
        return SCALE[0]
    x = min(1.0, max(0.0, (value - lo) / (hi - lo)))
    return SCALE[min(len(SCALE) - 1, int(x * len(SCALE)))]


# A coarse outline of the continents, typed by hand for this view from their general shapes
# ([latitude, longitude] every few hundred kilometres; no map data set is copied or shipped).
# It only helps the eye find the hosts; it is not a map to measure on.
OUTLINE: tuple[tuple[tuple[float, float], ...], ...] = (
    # North America
    ((71, -156), (70, -130), (68, -110), (73, -95), (75, -80), (62, -65), (52, -56), (45, -62),
     (41, -70), (35, -76), (30, -81), (25, -80), (30, -85), (29, -95), (22, -98), (18, -95),
     (21, -87), (15, -88), (9, -79), (8, -83), (16, -95), (20, -105), (31, -113), (23, -110),
     (32, -117), (40, -124), (48, -125), (58, -137), (60, -147), (58, -155), (55, -165),
     (62, -166), (66, -165)),
    # Greenland
    ((83, -40), (76, -70), (70, -55), (60, -44), (66, -35), (70, -22), (81, -12)),
    # South America
    ((12, -72), (10, -62), (5, -52), (0, -50), (-5, -35), (-13, -38), (-23, -42), (-34, -53),
     (-39, -62), (-52, -68), (-55, -67), (-53, -74), (-40, -73), (-18, -70), (-5, -81),
     (1, -80), (8, -77)),
    # Eurasia
    ((36, -9), (43, -9), (48, -5), (51, 2), (54, 8), (57, 8), (56, 12), (54, 10), (54, 14),
     (55, 21), (60, 22), (60, 30), (61, 21), (66, 25), (65, 22), (58, 18), (56, 16), (59, 5),
     (62, 5), (71, 25), (69, 40), (66, 44), (68, 55), (73, 70), (73, 80), (77, 105), (73, 113),
     (72, 130), (70, 160), (66, 180), (60, 163), (51, 157), (59, 143), (54, 137), (43, 132),
     (39, 128), (35, 126), (38, 121), (40, 122), (37, 122), (31, 122), (25, 119), (22, 114),
     (21, 108), (17, 107), (10, 106), (9, 105), (13, 100), (7, 100), (1, 104), (4, 101),
     (8, 98), (16, 97), (22, 91), (20, 86), (16, 81), (10, 80), (8, 77), (15, 74), (21, 72),
     (25, 66), (25, 57), (27, 56), (24, 52), (30, 48), (24, 51), (22, 59), (17, 55), (13, 45),
     (16, 42), (22, 39), (28, 34), (31, 34), (36, 36), (37, 28), (40, 26), (38, 24), (36, 22),
     (40, 20), (42, 19), (45, 13), (42, 13), (38, 16), (40, 15), (41, 13), (44, 8), (43, 3),
     (41, 2), (38, 0), (36, -5)),
    # Africa
    ((35, -6), (32, -9), (28, -13), (21, -17), (15, -17), (10, -15), (5, -8), (4, 2), (6, 5),
     (4, 9), (-1, 9), (-6, 12), (-12, 14), (-17, 12), (-23, 14), (-29, 16), (-34, 18),
     (-35, 20), (-34, 26), (-29, 32), (-25, 35), (-20, 35), (-15, 41), (-10, 40), (-4, 39),
     (2, 45), (10, 51), (12, 44), (15, 40), (22, 37), (28, 33), (31, 32), (32, 22), (30, 19),
     (33, 12), (37, 10), (37, 5), (35, -2)),
    # Australia
    ((-11, 131), (-12, 137), (-17, 141), (-11, 142), (-19, 146), (-25, 153), (-33, 152),
     (-38, 149), (-39, 146), (-38, 140), (-35, 136), (-32, 133), (-35, 118), (-32, 115),
     (-22, 114), (-20, 119), (-14, 126)),
    # Great Britain, Ireland, Japan, Borneo, Sumatra, Madagascar, New Zealand
    ((58, -5), (55, -1), (53, 0), (51, 1), (50, -5), (52, -4), (54, -3), (55, -5)),
    ((55, -7), (54, -6), (52, -6), (52, -10), (54, -10)),
    ((45, 142), (41, 141), (35, 140), (33, 131), (35, 133), (38, 139), (41, 140)),
    ((7, 117), (1, 119), (-4, 114), (1, 109)),
    ((5, 96), (-6, 105), (-3, 101)),
    ((-12, 49), (-25, 47), (-22, 43)),
    ((-35, 173), (-41, 176), (-46, 167), (-41, 172)),
)
WORLD = (-180.0, 180.0, -58.0, 80.0)  # longitude and latitude window of a whole-world view


@dataclass(frozen=True)
class Projection:
    """Equirectangular: x grows with longitude, y with minus latitude, one scale for both."""

    lon0: float
    lon1: float
    lat0: float
    lat1: float
    scale: float
    x0: float
    y0: float

    def xy(self, lat: float, lon: float) -> tuple[float, float]:
        return (self.x0 + (lon - self.lon0) * self.scale,
                self.y0 + (self.lat1 - lat) * self.scale)

    @property
    def world(self) -> bool:
        return (self.lon0, self.lon1, self.lat0, self.lat1) == WORLD


def projection(lats: list[float], lons: list[float], width: float, height: float,
               pad: float) -> Projection:
    """The whole world when the hosts span more than a quarter of it, else their bounding box
    widened by 5 degrees and rounded out to 10; centred in the drawing."""
    if max(lons) - min(lons) > 90 or max(lats) - min(lats) > 60:
        lon0, lon1, lat0, lat1 = WORLD
    else:
        lon0 = max(-180.0, math.floor((min(lons) - 5) / 10) * 10)
        lon1 = min(180.0, math.ceil((max(lons) + 5) / 10) * 10)
        lat0 = max(-90.0, math.floor((min(lats) - 5) / 10) * 10)
        lat1 = min(90.0, math.ceil((max(lats) + 5) / 10) * 10)
    s = min((width - 2 * pad) / (lon1 - lon0), (height - 2 * pad) / (lat1 - lat0))
    return Projection(lon0, lon1, lat0, lat1, s, (width - (lon1 - lon0) * s) / 2,
                      (height - (lat1 - lat0) * s) / 2)


def _located(topo: dict[str, Any]) -> tuple[list[str], list[float], list[float]] | None:
    hosts = [h for h in topo.get("hosts") or [] if isinstance(h, dict) and h.get("name")]
    locs = [h.get("location") for h in hosts]
    if not hosts or not all(isinstance(v, list | tuple) and len(v) == 2 for v in locs):
        return None
    return ([str(h["name"]) for h in hosts], [float(v[0]) for v in locs],  # type: ignore[index]
            [float(v[1]) for v in locs])  # type: ignore[index]


def positions(topo: dict[str, Any], width: float, height: float, pad: float = 40.0
              ) -> tuple[dict[str, tuple[float, float]], str]:
    """(host -> x, y) and how they were placed: `location` (every host has [lat, lon]:
    equirectangular projection, see `projection`; hosts sharing a location on a small ring
    around it), `site` (sites on a circle, their hosts around them) or `circle`."""
    located = _located(topo)
    if located is not None:
        names, lats, lons = located
        proj = projection(lats, lons, width, height, pad)
        together: dict[tuple[float, float], list[str]] = {}
        for n, lat, lon in zip(names, lats, lons, strict=True):
            together.setdefault((lat, lon), []).append(n)
        out: dict[str, tuple[float, float]] = {}
        ring = min(14.0, width / 60)
        for (lat, lon), members in together.items():
            x, y = proj.xy(lat, lon)
            r = 0.0 if len(members) == 1 else ring
            for j, m in enumerate(members):
                b = 2 * math.pi * j / len(members)
                out[m] = (x + r * math.cos(b), y + r * math.sin(b))
        return out, "location"
    hosts = [h for h in topo.get("hosts") or [] if isinstance(h, dict) and h.get("name")]
    out = {}
    for _, (sx, sy, r, members) in site_layout(topo, width, height, pad).items():
        for j, m in enumerate(members):
            b = 2 * math.pi * j / len(members)
            out[m] = (sx + r * math.cos(b), sy + r * math.sin(b))
    sites = {h.get("site") or h["name"] for h in hosts}
    return out, "site" if len(sites) < len(hosts) else "circle"


def site_layout(topo: dict[str, Any], width: float, height: float, pad: float = 40.0
                ) -> dict[str, tuple[float, float, float, list[str]]]:
    """site -> (x, y, ring radius, its hosts): the sites on a circle, in the order their
    first host comes; a host without a site is a site of its own."""
    hosts = [h for h in topo.get("hosts") or [] if isinstance(h, dict) and h.get("name")]
    cx, cy = width / 2, height / 2
    radius = min(width, height) / 2 - pad
    sites: dict[str, list[str]] = {}
    for h in hosts:
        sites.setdefault(str(h.get("site") or h["name"]), []).append(str(h["name"]))
    ring = min(36.0, radius * 0.3)
    if any(len(m) > 1 for m in sites.values()):
        radius -= ring * 0.6  # room for a site's ring (and its outline) inside the drawing
    out = {}
    for i, (site, members) in enumerate(sites.items()):
        a = 2 * math.pi * i / max(len(sites), 1) - math.pi / 2
        r = 0.0 if len(members) == 1 else ring
        out[site] = (cx + radius * math.cos(a), cy + radius * math.sin(a), r, members)
    return out


def site_labels(topo: dict[str, Any], width: float, height: float) -> list[str]:
    """The sites of a drawing placed by site: a dashed ring around each site's hosts and its
    name on the side towards the centre (`<text class="site" data-site=S>`)."""
    cx, cy = width / 2, height / 2
    out = []
    for site, (x, y, r, members) in site_layout(topo, width, height).items():
        if len(members) < 2:
            continue
        d = math.hypot(cx - x, cy - y) or 1.0
        lx, ly = x + (cx - x) / d * (r + 26), y + (cy - y) / d * (r + 26)
        out.append(f'<circle class="site" cx="{x:.1f}" cy="{y:.1f}" r="{r + 10:.1f}" '
                   'fill="none" stroke="#999" stroke-dasharray="4 3"/>'
                   f'<text class="site" data-site="{escape(site)}" x="{lx:.1f}" '
                   f'y="{ly + 4:.1f}" text-anchor="middle" font-size="13" font-weight="600" '
                   f'fill="#444">{escape(site)}</text>')
    return out


def world_map(topo: dict[str, Any], width: float, height: float, pad: float = 40.0,
              labels: bool = True) -> list[str]:
    """The background of a located topology: the coarse continent outline (`OUTLINE`) and
    a graticule every 30 degrees (10 for a regional window), labelled; [] when a host has
    no location."""
    located = _located(topo)
    if located is None:
        return []
    _, lats, lons = located
    proj = projection(lats, lons, width, height, pad)
    out = ['<g class="map">']
    for shape in OUTLINE:
        if all(not (proj.lon0 <= lon <= proj.lon1 and proj.lat0 <= lat <= proj.lat1)
               for lat, lon in shape):
            continue
        points = " ".join(f"{x:.1f},{y:.1f}" for x, y in
                          (proj.xy(min(max(lat, proj.lat0), proj.lat1),
                                   min(max(lon, proj.lon0), proj.lon1)) for lat, lon in shape))
        out.append(f'<polygon class="land" points="{points}" fill="#ecece4" '
                   'stroke="#c8c8bc" stroke-width="0.8"/>')
    step = 30 if proj.world else 10
    (left, top), (right, bottom) = proj.xy(proj.lat1, proj.lon0), proj.xy(proj.lat0, proj.lon1)
    for lat in range(math.ceil(proj.lat0 / step) * step, int(proj.lat1) + 1, step):
        _, y = proj.xy(lat, 0)
        out.append(f'<line class="graticule" x1="{left:.1f}" y1="{y:.1f}" x2="{right:.1f}" '
                   f'y2="{y:.1f}" stroke="#ddd" stroke-width="0.6"/>')
        if labels:
            out.append(f'<text x="{left + 2:.1f}" y="{y - 2:.1f}" font-size="9" fill="#999">'
                       f'{abs(lat)}°{"N" if lat > 0 else "S" if lat < 0 else ""}</text>')
    for lon in range(math.ceil(proj.lon0 / step) * step, int(proj.lon1) + 1, step):
        x, _ = proj.xy(0, lon)
        out.append(f'<line class="graticule" x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" '
                   f'y2="{bottom:.1f}" stroke="#ddd" stroke-width="0.6"/>')
        if labels:
            out.append(f'<text x="{x + 2:.1f}" y="{bottom - 2:.1f}" font-size="9" fill="#999">'
                       f'{abs(lon)}°{"E" if lon > 0 else "W" if lon < 0 else ""}</text>')
    out.append(f'<rect x="{left:.1f}" y="{top:.1f}" width="{right - left:.1f}" '
               f'height="{bottom - top:.1f}" fill="none" stroke="#ccc"/></g>')
    return out


def _delays(lock: dict[str, Any]) -> dict[tuple[str, str], float]:
    return {pair: float(p["delay"]) for pair, p in lock_paths(lock).items()
            if isinstance(p.get("delay"), int | float)}


def _svg(name: str, width: int, height: int, title: str, body: list[str]) -> str:
    return (f'<svg class="topo" data-view="{escape(name)}" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" role="img">'
            f"<title>{escape(title)}</title>{''.join(body)}</svg>")


def _hosts(pos: dict[str, tuple[float, float]], colour: dict[str, str], small: bool
           ) -> list[str]:
    r = 4 if small else 6
    out = []
    for h, (x, y) in pos.items():
        label = "" if small or len(pos) > MAX_LINKED else (
            f'<text x="{x + 8:.1f}" y="{y + 4:.1f}" font-size="11">{escape(h)}</text>')
        out.append(f'<g class="host" data-host="{escape(h)}"><circle cx="{x:.1f}" '
                   f'cy="{y:.1f}" r="{r}" fill="{colour.get(h, "#333")}"><title>{escape(h)}'
                   f"</title></circle>{label}</g>")
    return out


def groups_after(cuts: list[tuple[str, str]] | set[tuple[str, str]], hosts: list[str]
                 ) -> list[list[str]]:
    """The groups of hosts still connected (either way) once `cuts` (ordered pairs whose
    traffic is dropped) hold: a host joins the group of the first host it can reach both ways;
    smallest group first, as the report labels them."""
    cut = set(cuts)
    side: dict[str, int] = {}
    for n in hosts:
        if n not in side:
            side[n] = len(set(side.values()))
            for m in hosts:
                if m not in side and (n, m) not in cut and (m, n) not in cut:
                    side[m] = side[n]
    groups: dict[int, list[str]] = {}
    for n, g in side.items():
        groups.setdefault(g, []).append(n)
    return sorted(groups.values(), key=len)


def groups_of(label: str) -> list[list[str]]:
    """The partition groups of a fault label ('partition h4 | h1 h2 h3'; report_data.py)."""
    text = label.removeprefix("partition").strip()
    return [g.split() for g in text.split("|") if g.split()] if text else []


def topology_svg(lock: dict[str, Any], width: int = plots.WIDTH, height: int = 440
                 ) -> tuple[str, str]:
    """The topology drawing of a lock file (links with `data-a`, `data-b` and their mean
    one-way delay; hosts `<g class="host" data-host=H>`) and its caption; ('', '') without a
    topology."""
    topo = lock.get("topology") or {}
    if not isinstance(topo, dict) or not topo.get("hosts"):
        return "", ""
    pos, placed = positions(topo, width, height)
    delays = _delays(lock)
    names = list(pos)
    means = {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            ds = [d for d in (delays.get((a, b)), delays.get((b, a))) if d is not None]
            if ds:
                means[(a, b)] = (sum(ds) / len(ds), delays.get((a, b)), delays.get((b, a)))
    lo = min((m for m, _, _ in means.values()), default=0.0)
    hi = max((m for m, _, _ in means.values()), default=0.0)
    body = world_map(topo, width, height)
    if len(names) <= MAX_LINKED:
        for (a, b), (mean, ab, ba) in sorted(means.items(), key=lambda kv: -kv[1][0]):
            (x1, y1), (x2, y2) = pos[a], pos[b]
            body.append(
                f'<line class="link" data-pair="{escape(a)}-{escape(b)}" '
                f'data-delay-ms="{mean:.3f}" data-a="{escape(a)}" data-b="{escape(b)}" '
                f'x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
                f'stroke="{_scale(mean, lo, hi)}" '
                f'stroke-width="1.6" stroke-opacity="0.75"><title>{escape(a)} -> {escape(b)} '
                f"{ab} ms, {escape(b)} -> {escape(a)} {ba} ms</title></line>")
    if placed == "site":
        body += site_labels(topo, width, height)
    body += _hosts(pos, {}, small=False)
    digits = 0 if hi - lo >= 10 else 1
    legend = " ".join(
        f'<span style="color:{c}">■</span> {lo + (hi - lo) * i / len(SCALE):.{digits}f}'
        f"–{lo + (hi - lo) * (i + 1) / len(SCALE):.{digits}f} ms" for i, c in enumerate(SCALE))
    how = {"location": "placed by latitude and longitude on a world map (equirectangular; "
                       "a coarse hand-drawn outline of the continents)",
           "site": "placed by site", "circle": "on a circle"}[placed]
    links = ("each link coloured by its one-way delay (mean of the two directions): "
             + legend) if len(names) <= MAX_LINKED else (
                 f"links not drawn (more than {MAX_LINKED} hosts)")
    return (_svg("topology", width, height, f"topology {topo.get('name', '')}", body),
            f"{len(names)} hosts {how}; {links}")


def topology_html(lock: dict[str, Any], faults: list[Any]) -> str:
    """The report section: the topology and one view per partition fault ('' without a
    topology in the lock file)."""
    svg, caption = topology_svg(lock)
    if not svg:
        return ""
    topo = lock["topology"]
    names = [str(h["name"]) for h in topo["hosts"] if isinstance(h, dict) and h.get("name")]
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    parts = [f'<h2>Topology</h2><p class="facts">{caption}</p>', svg]
    views = []
    for f in [f for f in faults if getattr(f, "kind", "") == "partition"][:MAX_PARTITION_VIEWS]:
        groups = groups_of(f.label)
        colour = {h: plots.color(i) for i, g in enumerate(groups) for h in g}
        w, h = 280, 200
        small, _ = positions(topo, w, h, pad=16)
        marks: list[str] = world_map(topo, w, h, pad=16, labels=False)
        if len(names) <= MAX_LINKED:
            for a, b in pairs:
                if colour.get(a) != colour.get(b):
                    (x1, y1), (x2, y2) = small[a], small[b]
                    marks.append(f'<line class="cut" x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}"'
                                 f' y2="{y2:.1f}" stroke="#D55E00" stroke-dasharray="3 3" '
                                 'stroke-opacity="0.5"/>')
        marks += _hosts(small, colour, small=True)
        stop = "never healed" if f.stop is None else f"{f.stop:.2f} s"
        caption = " | ".join(" ".join(g) for g in groups) or f.label
        views.append(f'<figure class="partition" data-fault="{f.fault}">'
                     + _svg(f"partition-{f.fault}", w, h, f.label, marks)
                     + f"<figcaption>{f.start:.2f} s – {stop}: {escape(caption)}"
                     "</figcaption></figure>")
    if views:
        parts.append('<h3>Partitions</h3><div style="display:flex;flex-wrap:wrap;gap:1em">'
                     + "".join(views) + "</div>")
    return "".join(parts)
