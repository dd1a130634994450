"""The topology view of a run's report (and so of `testbed serve`): hosts placed by site, or by
their `location` on a longitude/latitude plane, every pair's link coloured by its one-way delay,
and one small copy per partition fault with the hosts coloured by the group they were cut into.

Inline SVG like analysis/plots.py (`<svg class="topo" data-view=NAME>`; hosts are
`<g class="host" data-host=H>`, links `<line class="link" data-pair="A-B" data-delay-ms=D>`),
from the run's spec.lock.yaml (`topology`, `paths_ms`) and its fault spans. No JavaScript.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from analysis import plots

# Low to high one-way delay (viridis-like stops; readable with colour-vision deficiencies).
SCALE = ("#440154", "#3b528b", "#21918c", "#5ec962", "#c9b700")
MAX_LINKED = 40  # more hosts than this: hosts only, links would be a solid blot
MAX_PARTITION_VIEWS = 6


def _scale(value: float, lo: float, hi: float) -> str:
    if hi <= lo:
        return SCALE[0]
    x = min(1.0, max(0.0, (value - lo) / (hi - lo)))
    return SCALE[min(len(SCALE) - 1, int(x * len(SCALE)))]


def positions(topo: dict[str, Any], width: float, height: float, pad: float = 40.0
              ) -> tuple[dict[str, tuple[float, float]], str]:
    """(host -> x, y) and how they were placed: `location` (every host has [lat, lon]:
    equirectangular, the hosts' bounding box), `site` (sites on a circle, their hosts
    around them) or `circle`."""
    hosts = [h for h in topo.get("hosts") or [] if isinstance(h, dict) and h.get("name")]
    names = [str(h["name"]) for h in hosts]
    locs = [h.get("location") for h in hosts]
    if names and all(isinstance(v, list | tuple) and len(v) == 2 for v in locs):
        lats = [float(v[0]) for v in locs]  # type: ignore[index]
        lons = [float(v[1]) for v in locs]  # type: ignore[index]
        lat0, lat1 = min(lats) - 5, max(lats) + 5
        lon0, lon1 = min(lons) - 5, max(lons) + 5
        sx = (width - 2 * pad) / max(lon1 - lon0, 1e-9)
        sy = (height - 2 * pad) / max(lat1 - lat0, 1e-9)
        s = min(sx, sy)
        return ({n: (pad + (lon - lon0) * s, pad + (lat1 - lat) * s)
                 for n, lat, lon in zip(names, lats, lons, strict=True)}, "location")
    cx, cy = width / 2, height / 2
    radius = min(width, height) / 2 - pad
    sites: dict[str, list[str]] = {}
    for h in hosts:
        sites.setdefault(str(h.get("site") or h["name"]), []).append(str(h["name"]))
    out: dict[str, tuple[float, float]] = {}
    for i, (_, members) in enumerate(sites.items()):
        a = 2 * math.pi * i / max(len(sites), 1) - math.pi / 2
        sx, sy = cx + radius * math.cos(a), cy + radius * math.sin(a)
        r = 0.0 if len(members) == 1 else min(36.0, radius * 0.3)
        for j, m in enumerate(members):
            b = 2 * math.pi * j / len(members)
            out[m] = (sx + r * math.cos(b), sy + r * math.sin(b))
    return out, "site" if len(sites) < len(hosts) else "circle"


def _delays(lock: dict[str, Any]) -> dict[tuple[str, str], float]:
    out = {}
    for key, p in (lock.get("paths_ms") or {}).items():
        a, _, b = str(key).partition("->")
        if isinstance(p, dict) and isinstance(p.get("delay"), int | float):
            out[(a, b)] = float(p["delay"])
    return out


def _svg(name: str, width: int, height: int, title: str, body: list[str]) -> str:
    return (f'<svg class="topo" data-view="{escape(name)}" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" role="img">'
            f"<title>{escape(title)}</title>{''.join(body)}</svg>")


def _graticule(width: int, height: int) -> list[str]:
    return [f'<line x1="0" y1="{y}" x2="{width}" y2="{y}" stroke="#eee"/>'
            for y in range(0, height, 40)] + [
        f'<line x1="{x}" y1="0" x2="{x}" y2="{height}" stroke="#eee"/>'
        for x in range(0, width, 40)]


def _hosts(pos: dict[str, tuple[float, float]], colour: dict[str, str], small: bool
           ) -> list[str]:
    r = 4 if small else 6
    out = []
    for h, (x, y) in pos.items():
        label = "" if small else (f'<text x="{x + 8:.1f}" y="{y + 4:.1f}" font-size="11">'
                                  f"{escape(h)}</text>")
        out.append(f'<g class="host" data-host="{escape(h)}"><circle cx="{x:.1f}" '
                   f'cy="{y:.1f}" r="{r}" fill="{colour.get(h, "#333")}"><title>{escape(h)}'
                   f"</title></circle>{label}</g>")
    return out


def groups_of(label: str) -> list[list[str]]:
    """The partition groups of a fault label ('partition h4 | h1 h2 h3'; report_data.py)."""
    text = label.removeprefix("partition").strip()
    return [g.split() for g in text.split("|") if g.split()] if text else []


def topology_html(lock: dict[str, Any], faults: list[Any]) -> str:
    """The report section: the topology and one view per partition fault ('' without a
    topology in the lock file)."""
    topo = lock.get("topology") or {}
    if not isinstance(topo, dict) or not topo.get("hosts"):
        return ""
    width, height = plots.WIDTH, 440
    pos, placed = positions(topo, width, height)
    delays = _delays(lock)
    names = list(pos)
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    means = {}
    for a, b in pairs:
        ds = [d for d in (delays.get((a, b)), delays.get((b, a))) if d is not None]
        if ds:
            means[(a, b)] = (sum(ds) / len(ds), delays.get((a, b)), delays.get((b, a)))
    lo = min((m for m, _, _ in means.values()), default=0.0)
    hi = max((m for m, _, _ in means.values()), default=0.0)
    body = _graticule(width, height) if placed == "location" else []
    if len(names) <= MAX_LINKED:
        for (a, b), (mean, ab, ba) in sorted(means.items(), key=lambda kv: -kv[1][0]):
            (x1, y1), (x2, y2) = pos[a], pos[b]
            body.append(
                f'<line class="link" data-pair="{escape(a)}-{escape(b)}" '
                f'data-delay-ms="{mean:.3f}" x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" '
                f'y2="{y2:.1f}" stroke="{_scale(mean, lo, hi)}" stroke-width="1.6" '
                f'stroke-opacity="0.75"><title>{escape(a)} -> {escape(b)} {ab} ms, '
                f"{escape(b)} -> {escape(a)} {ba} ms</title></line>")
    body += _hosts(pos, {}, small=False)
    legend = " ".join(
        f'<span style="color:{c}">■</span> {lo + (hi - lo) * i / len(SCALE):.0f}'
        f"–{lo + (hi - lo) * (i + 1) / len(SCALE):.0f} ms" for i, c in enumerate(SCALE))
    how = {"location": "placed by latitude and longitude (no coastlines)",
           "site": "placed by site", "circle": "on a circle"}[placed]
    parts = [f"<h2>Topology</h2><p class=\"facts\">{len(names)} hosts {how}; each link "
             f"coloured by its one-way delay (mean of the two directions): {legend}</p>",
             _svg("topology", width, height, f"topology {topo.get('name', '')}", body)]
    views = []
    for f in [f for f in faults if getattr(f, "kind", "") == "partition"][:MAX_PARTITION_VIEWS]:
        groups = groups_of(f.label)
        colour = {h: plots.color(i) for i, g in enumerate(groups) for h in g}
        w, h = 280, 200
        small, _ = positions(topo, w, h, pad=16)
        marks: list[str] = []
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
