"""Inline SVG charts for the HTML report: line charts, node lanes, bars, spacetime diagrams.

Plain SVG strings built in Python, so a report is one file that opens offline, archives
well and needs no JavaScript. Every chart is `<svg class="plot" data-plot=NAME>` and every
mark that carries data has class `d`, so tests (and users' scripts) can find the data in
the DOM. Hover text comes from SVG `<title>` elements, which browsers show natively.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442",
           "#000000", "#999999", "#882255")
FAULT_COLORS = {"partition": "#E69F00", "crash": "#D55E00", "pause": "#CC79A7",
                "clock": "#0072B2", "link": "#F0E442", "mgmt": "#999999",
                "switch": "#56B4E9"}
WIDTH = 900
_M_LEFT, _M_RIGHT, _M_TOP, _M_BOTTOM = 64, 16, 34, 40


def color(i: int) -> str:
    """The i-th categorical colour."""
    return PALETTE[i % len(PALETTE)]


@dataclass(frozen=True)
class Series:
    """One line (or dot cloud) of a chart; `None` in ys breaks the line."""

    name: str
    xs: Sequence[float]
    ys: Sequence[float | None]
    color: str
    dash: bool = False
    dots: bool = False


@dataclass(frozen=True)
class Band:
    """A shaded x interval (a fault period); `lane` limits it to one lane of a lanes chart."""

    x0: float
    x1: float
    label: str
    kind: str
    lane: str | None = None


@dataclass(frozen=True)
class Arrow:
    """A message in a spacetime diagram: from (src lane, t0) to (dst lane, t1)."""

    src: str
    t0: float
    dst: str
    t1: float
    label: str
    color: str


@dataclass
class _Frame:
    """Maps data coordinates onto the plot area of one chart."""

    x0: float
    x1: float
    y0: float
    y1: float
    width: int = WIDTH
    height: int = 260
    ylog: bool = False
    parts: list[str] = field(default_factory=list)

    def sx(self, x: float) -> float:
        span = (self.x1 - self.x0) or 1.0
        return _M_LEFT + (x - self.x0) / span * (self.width - _M_LEFT - _M_RIGHT)

    def sy(self, y: float) -> float:
        lo, hi, v = self.y0, self.y1, y
        if self.ylog:
            lo, hi, v = math.log10(lo), math.log10(hi), math.log10(max(y, self.y0))
        span = (hi - lo) or 1.0
        return self.height - _M_BOTTOM - (v - lo) / span * (self.height - _M_TOP - _M_BOTTOM)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About n round-numbered ticks covering [lo, hi]."""
    if not math.isfinite(lo) or not math.isfinite(hi) or hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    count = int(math.floor((hi - first) / step + 1e-9)) + 1
    return [round(first + k * step, 10) for k in range(count)]


def _num(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _label(v: float) -> str:
    if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-2):
        return f"{v:.0e}"
    return f"{v:,.2f}".rstrip("0").rstrip(".")


def _open(name: str, width: int, height: int, title: str) -> str:
    return (f'<svg class="plot" data-plot="{escape(name)}" xmlns="http://www.w3.org/2000/svg" '
            f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
            f'style="max-width:{width}px" role="img" '
            f'aria-label="{escape(title)}"><title>{escape(title)}</title>')


def _axes(f: _Frame, xlabel: str, ylabel: str, yticks: bool = True, xticks: bool = True
          ) -> None:
    left, right = _M_LEFT, f.width - _M_RIGHT
    top, bottom = _M_TOP, f.height - _M_BOTTOM
    p = f.parts
    p.append(f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" '
             'fill="#fff" stroke="#ccc"/>')
    for x in nice_ticks(f.x0, f.x1, 8) if xticks else []:
        sx = _num(f.sx(x))
        p.append(f'<line x1="{sx}" x2="{sx}" y1="{top}" y2="{bottom}" stroke="#eee"/>'
                 f'<text x="{sx}" y="{bottom + 14}" class="tick" text-anchor="middle">'
                 f"{_label(x)}</text>")
    if yticks:
        ticks = (_log_ticks(f.y0, f.y1) if f.ylog else nice_ticks(f.y0, f.y1, 5))
        for y in ticks:
            sy = _num(f.sy(y))
            p.append(f'<line x1="{left}" x2="{right}" y1="{sy}" y2="{sy}" stroke="#eee"/>'
                     f'<text x="{left - 6}" y="{sy}" class="tick" text-anchor="end" '
                     f'dominant-baseline="middle">{_label(y)}</text>')
    p.append(f'<text x="{(left + right) / 2}" y="{f.height - 6}" class="axis" '
             f'text-anchor="middle">{escape(xlabel)}</text>')
    if ylabel:
        p.append(f'<text transform="translate(14 {(top + bottom) / 2}) rotate(-90)" '
                 f'class="axis" text-anchor="middle">{escape(ylabel)}</text>')


def _log_ticks(lo: float, hi: float) -> list[float]:
    return [10.0**k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
            if lo <= 10.0**k <= hi]


def _bands(f: _Frame, bands: Sequence[Band], lanes: dict[str, tuple[float, float]] | None = None
           ) -> None:
    """Fault periods: translucent spans with their label along the top edge."""
    top, bottom = _M_TOP, f.height - _M_BOTTOM
    for k, b in enumerate(bands):
        c = FAULT_COLORS.get(b.kind, "#999")
        x0, x1 = f.sx(max(b.x0, f.x0)), f.sx(min(b.x1, f.x1))
        y0, y1 = (lanes[b.lane] if lanes and b.lane in lanes else (top, bottom))
        tip = f"<title>{escape(b.label)}</title>"
        if x1 - x0 < 2:  # an instant fault (a clock jump): a line, not an area
            p = f'<line class="d fault" x1="{_num(x0)}" x2="{_num(x0)}" y1="{_num(y0)}" '
            f.parts.append(p + f'y2="{_num(y1)}" stroke="{c}" stroke-width="2" '
                           f'stroke-dasharray="4 3">{tip}</line>')
        else:
            f.parts.append(f'<rect class="d fault" x="{_num(x0)}" y="{_num(y0)}" '
                           f'width="{_num(x1 - x0)}" height="{_num(y1 - y0)}" fill="{c}" '
                           f'fill-opacity="0.22" stroke="{c}" stroke-opacity="0.6">{tip}</rect>')
        if lanes is None or b.lane is None:
            f.parts.append(f'<text x="{_num(x0 + 3)}" y="{top - 4 - 11 * (k % 2)}" '
                           f'class="flabel" fill="{c}">{escape(b.label)}</text>')


def _legend(f: _Frame, items: Sequence[tuple[str, str, bool]]) -> None:
    x = float(f.width - _M_RIGHT)
    for name, c, dash in reversed(items):
        w = 34 + 6.5 * len(name)
        x -= w
        d = ' stroke-dasharray="5 3"' if dash else ""
        f.parts.append(f'<line x1="{_num(x)}" x2="{_num(x + 18)}" y1="{_M_TOP - 8}" '
                       f'y2="{_M_TOP - 8}" stroke="{c}" stroke-width="2.5"{d}/>'
                       f'<text x="{_num(x + 22)}" y="{_M_TOP - 4}" class="legend">'
                       f"{escape(name)}</text>")


def _polyline(f: _Frame, s: Series) -> None:
    runs: list[list[str]] = [[]]
    for x, y in zip(s.xs, s.ys, strict=True):
        if y is None or not math.isfinite(y):
            runs.append([])
            continue
        runs[-1].append(f"{_num(f.sx(x))},{_num(f.sy(y))}")
    dash = ' stroke-dasharray="5 3"' if s.dash else ""
    for pts in runs:
        if len(pts) >= 2:
            f.parts.append(f'<polyline class="d" points="{" ".join(pts)}" fill="none" '
                           f'stroke="{s.color}" stroke-width="1.8"{dash}>'
                           f"<title>{escape(s.name)}</title></polyline>")
        elif pts:
            cx, cy = pts[0].split(",")
            f.parts.append(f'<circle class="d" cx="{cx}" cy="{cy}" r="2" fill="{s.color}"/>')


def _dots(f: _Frame, s: Series) -> None:
    # One path of tiny squares instead of one element per point keeps the file small.
    cells = [f"M{_num(f.sx(x) - 1)} {_num(f.sy(y) - 1)}h2v2h-2z"
             for x, y in zip(s.xs, s.ys, strict=True) if y is not None and math.isfinite(y)]
    if cells:
        f.parts.append(f'<path class="d" d="{"".join(cells)}" fill="{s.color}" '
                       f'fill-opacity="0.55"><title>{escape(s.name)}</title></path>')


def line_chart(name: str, title: str, series: Sequence[Series], *, xlabel: str, ylabel: str,
               x_range: tuple[float, float] | None = None, bands: Sequence[Band] = (),
               hlines: Sequence[tuple[float, str, str]] = (), ylog: bool = False,
               height: int = 260, ymin: float | None = None, width: int = WIDTH) -> str:
    """Lines over a shared x axis, fault bands behind them, dashed horizontal references
    (`hlines`: value, label, colour) such as a QoS reservation."""
    xs = [x for s in series for x in s.xs]
    ys = [y for s in series for y in s.ys if y is not None and math.isfinite(y)]
    ys += [h[0] for h in hlines]
    x0, x1 = x_range or ((min(xs), max(xs)) if xs else (0.0, 1.0))
    if ylog:
        pos = [y for y in ys if y > 0] or [1.0]
        y0, y1 = 10 ** math.floor(math.log10(min(pos))), 10 ** math.ceil(math.log10(max(pos)))
    else:
        y0 = ymin if ymin is not None else min([0.0, *ys])
        top = max(ys) if ys else 1.0
        y1 = top * 1.08 if top > y0 else y0 + 1.0
    f = _Frame(x0, x1 if x1 > x0 else x0 + 1, y0, y1, width=width, height=height, ylog=ylog)
    _axes(f, xlabel, ylabel)
    _bands(f, bands)
    for value, label, c in hlines:
        sy = _num(f.sy(value))
        f.parts.append(f'<line class="d" x1="{_M_LEFT}" x2="{f.width - _M_RIGHT}" y1="{sy}" '
                       f'y2="{sy}" stroke="{c}" stroke-width="1.5" stroke-dasharray="8 4">'
                       f"<title>{escape(label)}</title></line>"
                       f'<text x="{_M_LEFT + 4}" y="{float(sy) - 4}" class="legend" '
                       f'fill="{c}">{escape(label)}</text>')
    # Clipped to the plot area: a chart may zoom in on part of the data (a CDF's tail).
    f.parts.append(f'<clipPath id="clip-{escape(name)}"><rect x="{_M_LEFT}" y="{_M_TOP}" '
                   f'width="{f.width - _M_LEFT - _M_RIGHT}" '
                   f'height="{f.height - _M_TOP - _M_BOTTOM}"/></clipPath>'
                   f'<g clip-path="url(#clip-{escape(name)})">')
    for s in series:
        (_dots if s.dots else _polyline)(f, s)
    f.parts.append("</g>")
    _legend(f, [(s.name, s.color, s.dash) for s in series])
    return _open(name, f.width, f.height, title) + "".join(f.parts) + "</svg>"


def lanes_chart(name: str, title: str, lanes: Mapping[str, Sequence[float]], *, x0: float,
                step: float, bands: Sequence[Band] = (), unit: str = "deliveries/s") -> str:
    """One horizontal strip per node; each cell's darkness is its rate relative to the node's
    busiest cell, so gaps (crash, partition, stall) stand out as pale stretches."""
    lane_h, gap = 22, 6
    height = _M_TOP + _M_BOTTOM + len(lanes) * (lane_h + gap)
    n = max((len(v) for v in lanes.values()), default=1)
    f = _Frame(x0, x0 + n * step, 0, 1, height=height)
    _axes(f, "time since start (s)", "", yticks=False)
    rows: dict[str, tuple[float, float]] = {}
    for k, (node, values) in enumerate(lanes.items()):
        y = _M_TOP + gap / 2 + k * (lane_h + gap)
        rows[node] = (y, y + lane_h)
        f.parts.append(f'<text x="{_M_LEFT - 6}" y="{y + lane_h / 2}" class="tick" '
                       f'text-anchor="end" dominant-baseline="middle">{escape(node)}</text>')
        # The 95th percentile, not the maximum: a catch-up burst after a partition would
        # otherwise make the steady state look pale.
        busy = sorted(v for v in values if v > 0)
        peak = busy[int(0.95 * (len(busy) - 1))] if busy else 1.0
        cells = []
        for j, v in enumerate(values):
            cx, cw = f.sx(x0 + j * step), f.sx(x0 + (j + 1) * step) - f.sx(x0 + j * step)
            shade = 0.08 + 0.92 * min(v / peak, 1.0) if v > 0 else 0.0
            tip = f"{node} {x0 + j * step:.2f}s: {v:.0f} {unit}"
            cells.append(f'<rect class="d" x="{_num(cx)}" y="{_num(y)}" width="{_num(cw + .3)}" '
                         f'height="{lane_h}" fill="{color(k)}" fill-opacity="{shade:.2f}">'
                         f"<title>{escape(tip)}</title></rect>")
        f.parts.append("".join(cells))
    _bands(f, [b for b in bands if b.lane is not None and b.lane in rows], rows)
    _bands(f, [b for b in bands if b.lane is None])
    return _open(name, f.width, f.height, title) + "".join(f.parts) + "</svg>"


def bar_chart(name: str, title: str, bars: Sequence[tuple[str, float, str]], *, ylabel: str,
              ymax: float = 1.0) -> str:
    """Vertical bars (label, value, hover note) on a fixed [0, ymax] scale."""
    f = _Frame(0, max(len(bars), 1), 0, ymax, height=240, width=min(WIDTH, 160 + 90 * len(bars)))
    _axes(f, "", ylabel, xticks=False)
    for k, (label, value, note) in enumerate(bars):
        x, w = f.sx(k + 0.15), f.sx(k + 0.85) - f.sx(k + 0.15)
        y = f.sy(value)
        f.parts.append(f'<rect class="d" x="{_num(x)}" y="{_num(y)}" width="{_num(w)}" '
                       f'height="{_num(f.sy(0) - y)}" fill="{color(k)}">'
                       f"<title>{escape(note)}</title></rect>"
                       f'<text x="{_num(x + w / 2)}" y="{_num(y - 4)}" class="legend" '
                       f'text-anchor="middle">{value:.1%}</text>'
                       f'<text x="{_num(x + w / 2)}" y="{f.height - _M_BOTTOM + 14}" '
                       f'class="tick" text-anchor="middle">{escape(label)}</text>')
    return _open(name, f.width, f.height, title) + "".join(f.parts) + "</svg>"


def spacetime(name: str, title: str, lanes: Sequence[str], arrows: Sequence[Arrow], *,
              x0: float, x1: float) -> str:
    """A Lamport diagram: one horizontal lane per node, time to the right, one arrow per
    (message, receiver) from the origin's send to the receiver's final delivery."""
    lane_h = 44
    height = _M_TOP + _M_BOTTOM + lane_h * max(len(lanes) - 1, 1) + 20
    f = _Frame(x0, x1, 0, 1, height=height)
    _axes(f, "time since start (ms)", "", yticks=False)
    ys = {n: _M_TOP + 10 + k * lane_h for k, n in enumerate(lanes)}
    f.parts.append(f'<defs><marker id="ah-{escape(name)}" viewBox="0 0 8 8" refX="7" refY="4" '
                   'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
                   '<path d="M0 0L8 4L0 8z" fill="context-stroke"/></marker></defs>')
    for n, y in ys.items():
        f.parts.append(f'<line x1="{_M_LEFT}" x2="{f.width - _M_RIGHT}" y1="{y}" y2="{y}" '
                       f'stroke="#555"/><text x="{_M_LEFT - 6}" y="{y}" class="tick" '
                       f'text-anchor="end" dominant-baseline="middle">{escape(n)}</text>')
    for a in arrows:
        if a.src not in ys or a.dst not in ys:
            continue
        sx0, sx1, sy0, sy1 = f.sx(a.t0), f.sx(a.t1), ys[a.src], ys[a.dst]
        tip = f"<title>{escape(a.label)}</title>"
        if a.src == a.dst:  # the origin's own delivery: a mark on its lane
            f.parts.append(f'<circle class="d" cx="{_num(sx1)}" cy="{sy1}" r="3.5" '
                           f'fill="{a.color}">{tip}</circle>')
            continue
        f.parts.append(f'<line class="d" x1="{_num(sx0)}" y1="{sy0}" x2="{_num(sx1)}" '
                       f'y2="{sy1}" stroke="{a.color}" stroke-width="1.6" '
                       f'marker-end="url(#ah-{escape(name)})">{tip}</line>')
    for src, t0, c in sorted({(a.src, a.t0, a.color) for a in arrows}):
        f.parts.append(f'<circle cx="{_num(f.sx(t0))}" cy="{ys.get(src, 0)}" r="3" '
                       f'fill="#fff" stroke="{c}" stroke-width="2"/>')
    return _open(name, f.width, f.height, title) + "".join(f.parts) + "</svg>"


# The report's text styles (analysis/report.py CSS), for a chart saved as its own file.
_STANDALONE_CSS = ("text{font-family:system-ui,sans-serif}.tick{font-size:11px;fill:#555}"
                   ".axis{font-size:12px;fill:#333}.legend{font-size:11px;fill:#333}")


def standalone(charts: Sequence[str], title: str) -> str:
    """Charts of this module stacked into one SVG file (a bench's plot linked from
    docs/benchmarks.md): each chart keeps its size, the report's text styles come along."""
    import re

    sizes = [(int(m.group(1)), int(m.group(2))) for m in
             (re.search(r'viewBox="0 0 (\d+) (\d+)"', c) for c in charts) if m]
    width = max((w for w, _ in sizes), default=WIDTH)
    parts, y = [], 0
    for chart, (_, h) in zip(charts, sizes, strict=True):
        parts.append(chart.replace("<svg ", f'<svg y="{y}" ', 1))
        y += h
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<svg xmlns="http://www.w3.org/2000/svg" '
            f'viewBox="0 0 {width} {y}" width="{width}" height="{y}">'
            f"<title>{escape(title)}</title><style>{_STANDALONE_CSS}</style>"
            + "".join(parts) + "</svg>\n")
