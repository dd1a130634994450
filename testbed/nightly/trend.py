"""`nightly.html`: the trend report of a history, self-contained like a run's report.html
(inline CSS and SVG, no script, opens offline).

First what needs a human (regressions with their first bad night and commit range, flaky and
failing experiments), then the nights x experiments grid with links to each night's run
reports, then one sparkline per tracked metric with the band it may move in without regressing.
Like the run report, every chart is `<svg class="plot" data-plot=...>` and every data mark has
class `d`.
"""

from __future__ import annotations

import os
import re
from html import escape
from pathlib import Path

from testbed.nightly.detect import Judgement, Series

REPORT = "nightly.html"
WORDS = {"pass": "pass", "fail": "FAIL", "error": "ERROR", "skipped": "skip",
         "regressed": "REGRESSED", "flaky": "FLAKY", "": "–"}
_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;color:#222;max-width:1100px;padding:0 1em}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.15em;margin:1.6em 0 .3em;border-bottom:1px solid
#ddd;padding-bottom:.2em}.banner{padding:.6em 1em;border-radius:6px;font-size:1.2em;color:#fff;
font-weight:600}.ok{background:#2e7d32}.bad{background:#c62828}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:.85em}th,td{border:1px solid #ddd;
padding:.2em .5em;text-align:left}th{background:#f5f5f5}td.c{text-align:center}
td.pass{background:#e8f5e9}td.fail,td.error{background:#ffcdd2;font-weight:600}
td.regressed{background:#ffe0b2;font-weight:600}td.flaky{background:#e1bee7;font-weight:600}
td.skipped{background:#eeeeee;color:#666}.cap{color:#555;font-size:.85em}
.spark{display:grid;grid-template-columns:24em 1fr;gap:.2em 1em;align-items:center}
h3.exp{font-size:1em;margin:.8em 0 0}
svg.plot{display:block}.d{stroke-width:1.5}
"""
SPARK_W, SPARK_H, PAD = 320, 48, 5


def _link(run_dir: str | None, out_dir: Path) -> str | None:
    if not run_dir:
        return None
    page = "index.html" if (Path(run_dir) / "index.html").is_file() else "report.html"
    return os.path.relpath(Path(run_dir) / page, out_dir)


_REPRODUCER = re.compile(r"reproducers/seed-\d+\.yaml")


def _explore_failures(j: Judgement, out_dir: Path) -> str:
    """Tonight's exploration failures; one that passed (or did not run) the night before is
    new: a regression, with its shrunk reproducer linked."""
    if not j.nights:
        return ""
    latest = j.nights[-1]
    before = j.nights[-2] if len(j.nights) > 1 else None
    rows = []
    for exp in j.failures(latest):
        reason = j.reasons.get((latest, exp), "")
        if not reason.startswith("explore:"):
            continue
        new = before is None or j.status.get((before, exp)) in (None, "pass", "skipped")
        found = _REPRODUCER.search(reason)
        run_dir = j.run_dirs.get((latest, exp))
        link = ""
        if found and run_dir:
            href = os.path.relpath(Path(run_dir) / found.group(0), out_dir)
            link = f'<a class="reproducer" href="{escape(href)}">{escape(found.group(0))}</a>'
        rows.append(f'<tr class="{"regression" if new else "known"}"><td>{escape(exp)}</td>'
                    f"<td>{'new: regression' if new else 'known'}</td><td>{escape(reason)}</td>"
                    f"<td>{link}</td></tr>")
    if not rows:
        return ""
    return ("<h2>Exploration failures</h2><table><tr><th>experiment</th><th>state</th>"
            "<th>reason</th><th>shrunk reproducer</th></tr>" + "".join(rows) + "</table>")


def _coverage_dropped(j: Judgement) -> str:
    """Coverage items (protocol events, fault kinds) the latest exploration did not reach and
    the one before did: the seeds may no longer exercise what they used to."""
    rows = "".join(f"<tr><td>{escape(exp)}</td><td><code>{escape(item)}</code></td>"
                   f"<td>{share:.0%} of seeds on {escape(night)}</td></tr>"
                   for exp, item, share, night in j.coverage_dropped())
    if not rows:
        return ""
    return ("<h2>Coverage that dropped</h2><p class=cap>Reached the night before, not "
            "tonight.</p><table><tr><th>experiment</th><th>event or fault kind</th>"
            f"<th>before</th></tr>{rows}</table>")


def _grid(j: Judgement, out_dir: Path) -> str:
    experiments = sorted({e for (_, e) in j.status})
    head = "".join(f"<th>{escape(n)}</th>" for n in j.nights)
    rows = []
    for exp in experiments:
        cells = []
        for night in j.nights:
            word = j.cell(night, exp)
            text = escape(WORDS.get(word, word))
            href = _link(j.run_dirs.get((night, exp)), out_dir)
            if href:
                text = f'<a href="{escape(href)}">{text}</a>'
            title = escape(j.reasons.get((night, exp), ""))
            cells.append(f'<td class="c {word}" title="{title}" data-night="{escape(night)}">'
                         f"{text}</td>")
        rows.append(f'<tr data-experiment="{escape(exp)}"><td>{escape(exp)}</td>'
                    f"{''.join(cells)}</tr>")
    return (f'<table class="grid"><tr><th>experiment</th>{head}</tr>{"".join(rows)}</table>'
            '<p class="cap">Cells link to that night\'s run report; hover for the reason.</p>')


def _regressions(j: Judgement) -> str:
    regs = sorted(j.regressions, key=lambda r: (not r.open, r.first_night, r.experiment))
    if not regs:
        return "<p>No regression in the history.</p>"
    rows = []
    for r in regs:
        rows.append(
            f'<tr class="regression" data-first-night="{escape(r.first_night)}">'
            f"<td>{escape(r.experiment)}</td><td><code>{escape(r.metric)}</code> "
            f"(bad: {r.bad})</td><td>{escape(r.first_night)}</td>"
            f"<td>{escape(r.last_good_night or '–')}</td><td>{r.baseline:,.3g}</td>"
            f"<td>{r.value:,.3g}</td><td>{r.change:+.0%}</td><td>{r.rule}</td>"
            f"<td><code>{escape(r.commits)}</code></td>"
            f"<td>{'open' if r.open else 'settled'}</td></tr>")
    return ("<table><tr><th>experiment</th><th>metric</th><th>first bad night</th>"
            "<th>last good night</th><th>baseline median</th><th>value</th><th>change</th>"
            "<th>rule</th><th>commits</th><th>state</th></tr>" + "".join(rows) + "</table>")


def sparkline(s: Series) -> str:
    """One metric over the nights: the line, the band it may move in, bad nights in red."""
    ys = [p.value for p in s.points] + [v for p in s.points for v in (p.lo, p.hi)
                                        if v is not None]
    lo, hi = min(ys), max(ys)
    span = (hi - lo) or abs(hi) or 1.0
    n = len(s.points)

    def sx(i: int) -> float:
        return PAD + (i / max(n - 1, 1)) * (SPARK_W - 2 * PAD)

    def sy(v: float) -> float:
        return SPARK_H - PAD - (v - lo) / span * (SPARK_H - 2 * PAD)

    name = f"{s.experiment}:{s.metric}"
    parts = [f'<svg class="plot" data-plot="{escape(name)}" xmlns="http://www.w3.org/2000/svg" '
             f'viewBox="0 0 {SPARK_W} {SPARK_H}" width="{SPARK_W}" height="{SPARK_H}">'
             f"<title>{escape(name)}</title>"]
    banded = [(i, p) for i, p in enumerate(s.points) if p.lo is not None and p.hi is not None]
    if banded:
        top = " ".join(f"{sx(i):.1f},{sy(p.hi):.1f}" for i, p in banded)  # type: ignore[arg-type]
        bottom = " ".join(f"{sx(i):.1f},{sy(p.lo):.1f}"  # type: ignore[arg-type]
                          for i, p in reversed(banded))
        parts.append(f'<polygon class="band" points="{top} {bottom}" fill="#0072B2" '
                     'fill-opacity="0.15" stroke="none"/>')
    points = " ".join(f"{sx(i):.1f},{sy(p.value):.1f}" for i, p in enumerate(s.points))
    parts.append(f'<polyline class="d" points="{points}" fill="none" stroke="#0072B2"/>')
    colours = {"regressed": "#c62828", "suspect": "#E69F00"}
    for i, p in enumerate(s.points):
        parts.append(f'<circle class="d {p.state}" cx="{sx(i):.1f}" cy="{sy(p.value):.1f}" '
                     f'r="{3 if p.state in colours else 2}" '
                     f'fill="{colours.get(p.state, "#0072B2")}"><title>{escape(p.night)}: '
                     f"{p.value:,.4g} ({p.state})</title></circle>")
    parts.append("</svg>")
    return "".join(parts)


def render(j: Judgement, title: str, out_dir: Path) -> str:
    latest = j.nights[-1] if j.nights else None
    failing = j.failures(latest) if latest else []
    open_regs = j.open_regressions()
    bad = bool(failing or open_regs)
    banner = (f"{latest}: {len(failing)} failing, {len(open_regs)} open regression(s)"
              if latest else "no nights yet")
    flaky = "".join(f"<li>{escape(e)}: {k} pass/fail flips in the last nights</li>"
                    for e, k in sorted(j.flaky.items())) or "<li>none</li>"
    failures = "".join(f"<li>{escape(e)}: {escape(j.reasons.get((latest, e), ''))}</li>"
                       for e in failing) if latest else ""
    sparks, shown = [], None
    for s in j.series:
        if not s.points:
            continue
        if s.experiment != shown:
            sparks.append(f'<h3 class="exp">{escape(s.experiment)}</h3><div></div>')
            shown = s.experiment
        values = [p.value for p in s.points]
        sparks.append(f"<div><code>{escape(s.metric)}</code><br><small>bad: {s.bad}; last "
                      f"{values[-1]:,.4g}; range {min(values):,.4g}–{max(values):,.4g}"
                      f"</small></div><div>{sparkline(s)}</div>")
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{escape(title)}</h1>"
        f'<div class="banner {"bad" if bad else "ok"}">{escape(banner)}</div>'
        f"<p class=cap>{len(j.nights)} night(s): {escape(', '.join(j.nights))}</p>"
        f"<h2>Regressions</h2>{_regressions(j)}"
        + _explore_failures(j, out_dir) + _coverage_dropped(j) +
        f"<h2>Flaky experiments</h2><ul>{flaky}</ul>"
        + (f"<h2>Failing on {escape(latest)}</h2><ul>{failures or '<li>none</li>'}</ul>"
           if latest else "")
        + f"<h2>Nights</h2>{_grid(j, out_dir)}"
        "<h2>Tracked metrics</h2><p class=cap>Each line is one metric over the nights the "
        "experiment passed; the band is the baseline median plus or minus what a night may "
        "move without regressing; red dots are regressed nights, orange ones a step awaiting "
        f'a second night.</p><div class="spark">{"".join(sparks)}</div></body></html>\n')


def write_trend(j: Judgement, path: Path, title: str = "testbed nightly") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(j, title, path.parent.resolve()))
    return path
