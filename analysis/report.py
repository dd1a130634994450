"""Self-contained HTML reports: one per run (`write_report`) and side by side (`write_comparison`).

Verdicts first (checkers, expectations), then plots a user reads at a glance: latency over time
with fault periods shaded, a per-node delivery timeline, throughput, bandwidth against the QoS
reservation (when pcaps exist), optimistic accuracy (when nodes opt-deliver) and a spacetime
diagram of a few messages. Inline SVG and CSS only, no scripts or external assets, so the file
opens offline and can be archived with the run.
"""

from __future__ import annotations

import csv
import json
import logging
from html import escape
from pathlib import Path
from typing import Any

import numpy as np

from analysis import plots
from analysis import report_data as rd
from analysis.liveness import liveness_line
from analysis.plots import Arrow, Band, Series
from analysis.qos import qos_html
from analysis.record import RunRecord
from analysis.switching import switch_windows
from analysis.topology_view import topology_html
from analysis.verdict import verdict as run_verdict

REPORT = "report.html"
COMPARISON = "comparison.html"
log = logging.getLogger(__name__)

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;color:#222;max-width:960px;padding:0 1em}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.15em;margin:1.6em 0 .3em;border-bottom:1px solid
#ddd;padding-bottom:.2em}.banner{padding:.6em 1em;border-radius:6px;font-size:1.3em;
font-weight:600;color:#fff;display:flex;gap:1em;align-items:baseline}.banner small{font-weight:400;
font-size:.7em}.pass{background:#2e7d32}.fail{background:#c62828}.none{background:#757575}
.facts{color:#555;margin:.4em 0}
.cards{display:flex;gap:.6em;flex-wrap:wrap;margin:.8em 0}.card{border:1px solid #ddd;
border-radius:6px;padding:.4em .8em;min-width:7em}.card b{display:block;font-size:1.25em}
.card span{color:#666;font-size:.8em}table{border-collapse:collapse;margin:.4em 0 1em;
font-size:.9em}th,td{border:1px solid #ddd;padding:.25em .6em;text-align:right}
th:first-child,td:first-child,td.l{text-align:left}th{background:#f5f5f5}
td.bad{color:#c62828;font-weight:600}td.ok{color:#2e7d32}code{font-size:.9em}
.unclaimed{color:#9e9e9e}.unjudged{color:#b26a00}
.cap{color:#555;font-size:.85em;margin:.1em 0 .4em}svg.plot{width:100%;height:auto;display:block}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:.5em}
svg text{font-family:system-ui,sans-serif}.tick{font-size:11px;fill:#555}
.axis{font-size:12px;fill:#333}.legend{font-size:11px;fill:#333}.flabel{font-size:11px}
.scroll{max-height:28em;overflow:auto}summary{cursor:pointer;color:#555}
"""
# The run directory's full path tables (testbed/pathcheck.py writes them): every ordered pair's
# configured one-way path, and the measured-vs-configured RTT check of `testbed up`.
PATHS_CSV = "paths.csv"
CHECK_CSV = "check.csv"


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return escape(str(value))


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _td(value: Any, bad: bool = False, cls: str = "") -> str:
    c = "bad" if bad else cls
    return f'<td class="{c}">{_fmt(value)}</td>' if c else f"<td>{_fmt(value)}</td>"


def verdict(summary: dict[str, Any]) -> tuple[bool, list[str]]:
    """PASS or FAIL is the run's verdict (`summary["verdict"]`, analysis/verdict.py: claimed
    checks, node errors, liveness against the protocol's claims, the `expect:` lines), with
    its reasons (a stall the claims excuse is a reason, not a failure)."""
    judged = summary.get("verdict") or run_verdict(summary)
    return bool(judged["ok"]), list(judged["reasons"])


def _checks_html(summary: dict[str, Any]) -> str:
    rows = []
    for name, check in summary.get("checks", {}).items():
        n = check.get("violations", 0)
        shown = "<br>".join(f"<code>{escape(json.dumps(e))}</code>"
                            for e in check.get("examples", [])[:3])
        count = _td(n, bad=n > 0, cls="ok")
        if check.get("judged") is False:  # no count: why it was not judged instead
            why = str(check.get("note") or "").removeprefix("not judged: ")
            if "unproven" in check:
                why += f" ({check['unproven']} undelivered)"
            shown = escape(why)
            count = _td("not judged", cls="unjudged")
        if check.get("claimed", True):
            rows.append([_td(name), count, f'<td class="l">{shown}</td>'])
        else:  # not promised by the protocol: shown greyed out, never failing the run
            rows.append([_td(f"{name} (not claimed)", cls="unclaimed"),
                         _td("not judged" if check.get("judged") is False else n,
                             cls="unclaimed"),
                         f'<td class="l unclaimed">{shown}</td>'])
    line = liveness_line(summary)
    note = f'<p class="note">{escape(line)}</p>' if line else ""
    grey = ("<p>Greyed-out checks are not claimed by the protocol (docs/protocols.md): their "
            "counts are for information and do not fail the run.</p>")
    return "<h2>Checks</h2>" + note + _table(["check", "violations", "examples"], rows) + grey


def _expectations_html(summary: dict[str, Any]) -> str:
    results = summary.get("expectations", [])
    if not results:
        return ""
    rows = [[f'<td class="l"><code>{escape(str(r.get("expectation")))}</code></td>',
             _td("ok" if r.get("ok") else "FAILED", bad=not r.get("ok"), cls="ok"),
             f'<td class="l">{_fmt(r.get("reason"))}</td>'] for r in results]
    return "<h2>Expectations</h2>" + _table(["expectation", "result", "why"], rows)


def _latency_html(summary: dict[str, Any]) -> str:
    fnl = summary.get("latency", {}).get("fnl", {})
    keys = ["p50_ms", "p95_ms", "p99_ms", "max_ms", "count"]
    rows = [[_td("all"), *[_td(fnl.get("all", {}).get(k)) for k in keys]]]
    rows += [[_td(host), *[_td(stats.get(k)) for k in keys]]
             for host, stats in fnl.get("per_receiver", {}).items()]
    return _table(["receiver", *keys], rows)


def _throughput_html(summary: dict[str, Any]) -> str:
    tp = summary.get("throughput", {})
    fnl = summary.get("messages", {}).get("fnl", {})
    rows = [[_td(h), _td(rate), _td(fnl.get(h))] for h, rate in tp.get("per_node", {}).items()]
    rows.append([_td("min"), _td(tp.get("min_msgs_per_s")), _td(None)])
    return _table(["node", "fnl msgs/s", "fnl events"], rows)


def _cards(summary: dict[str, Any]) -> str:
    fnl = summary.get("latency", {}).get("fnl", {}).get("all", {})
    acc = summary.get("optimistic", {}).get("accuracy", {}).get("all")
    cards = [("messages sent", _fmt(summary.get("messages", {}).get("sent"))),
             ("p50 latency ms", _fmt(fnl.get("p50_ms"))),
             ("p99 latency ms", _fmt(fnl.get("p99_ms"))),
             ("min throughput msg/s", _fmt(summary.get("throughput", {}).get("min_msgs_per_s")))]
    if acc is not None:
        cards.append(("optimistic accuracy", f"{acc:.1%}"))
    return '<div class="cards">' + "".join(
        f'<div class="card"><b>{v}</b><span>{escape(k)}</span></div>' for k, v in cards) + "</div>"


def _head(title: str) -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>")


def _facts(summary: dict[str, Any], spec: dict[str, Any], run: str) -> str:
    """What ran: the description, date, seed, backend, protocol, topology and nodes, the
    command that reproduces the run and a link to its spec.lock.yaml."""
    exp = spec.get("experiment") or {}
    proto = (exp.get("protocol") or {}).get("name")
    topo = (spec.get("topology") or {}).get("name")
    seed = exp.get("seed", spec.get("seed"))
    parts = [escape(rd.run_date(run)),
             f"seed <b>{escape(str(seed))}</b>" if seed is not None else "",
             f"backend <b>{escape(str(exp.get('backend')))}</b>" if exp.get("backend") else "",
             f"protocol <b>{escape(str(proto))}</b>" if proto else "",
             f"topology {escape(str(topo))}" if topo else "",
             f"duration {escape(str(exp.get('duration')))}" if exp.get("duration") else "",
             f"nodes {escape(', '.join(summary.get('nodes', [])))}",
             f"crashed {escape(', '.join(summary.get('crashed', [])) or 'none')}"]
    description = exp.get("description")
    command = spec.get("command")
    said = (f"<code>{escape(str(command))}</code>" if command else
            "<code>testbed run EXPERIMENT.yaml</code> with the experiment as locked")
    facts = (f'<p class="description">{escape(str(description))}</p>' if description else "")
    facts += (f'<p class="facts reproduce">reproduce: {said} · '
              '<a id="spec-lock" href="spec.lock.yaml">spec.lock.yaml</a></p>') if spec else ""
    facts += '<p class="facts">' + " · ".join(p for p in parts if p) + "</p>"
    source = (spec.get("topology") or {}).get("source")
    if isinstance(source, dict) and source.get("dataset"):
        # A measured topology (testbed topology import): where its delays come from.
        keys = ("dataset", "url", "date", "statistic", "licence", "note")
        said = " · ".join(f"{k} {escape(str(source[k]))}" for k in keys if source.get(k))
        facts += f'<p class="facts source">measured topology: {said}</p>'
    return facts


def _drain_html(summary: dict[str, Any]) -> str:
    """The drain's outcome (summary `liveness`, from drain.json): quiescent after how long,
    within which bounds, with how much in flight; a run cut short or not quiescent says so
    in its checks (`liveness_line`)."""
    live = summary.get("liveness") or {}
    if live.get("quiescent") is not True or live.get("cut_short"):
        return ""
    bounds = (f" (at least {live['drain_min_s']:g} s, at most {live['drain_max_s']:g} s)"
              if isinstance(live.get("drain_min_s"), int | float)
              and isinstance(live.get("drain_max_s"), int | float) else "")
    after = (f" after {live['drain_s']:g} s" if isinstance(live.get("drain_s"), int | float)
             else "")
    return (f'<p class="facts drain">drain: quiescent{after}{bounds}: every message a correct '
            f"host sent was final-delivered at every correct host; "
            f"{live.get('in_flight') or 0} in flight</p>")


MAX_MATRIX = 40  # senders or receivers; more is a page of numbers nobody reads


def _pair_colour(value: float, lo: float, hi: float) -> str:
    """Green (lowest p99) to red (highest), light enough to read the numbers on."""
    frac = 0.0 if hi <= lo else (value - lo) / (hi - lo)
    return f"hsl({120 - 120 * frac:.0f},65%,82%)"


def _pairs_html(summary: dict[str, Any]) -> str:
    """The sender x receiver matrix of final-delivery latency p50 / p99 (summary
    `latency.fnl.per_pair`), each cell coloured by its p99."""
    senders, receivers, cells = rd.pair_matrix(summary)
    if not cells:
        return ""
    caption = ("p50 / p99 ms of the final deliveries of each sender's messages (rows) at each "
               "receiver (columns); the colour is the p99, from green (lowest) to red "
               "(highest). A sender's own messages are on the diagonal.")
    if max(len(senders), len(receivers)) > MAX_MATRIX:
        return _section("Latency by sender and receiver", caption, f"<p>{len(senders)} "
                        f"senders x {len(receivers)} receivers: more than {MAX_MATRIX}, "
                        "see summary.json `latency.fnl.per_pair`</p>")
    p99s = [float(c["p99_ms"]) for c in cells.values()
            if isinstance(c.get("p99_ms"), int | float)]
    lo, hi = min(p99s, default=0.0), max(p99s, default=0.0)
    rows = []
    for s in senders:
        row = [f'<th class="l">{escape(s)}</th>']
        for r in receivers:
            c = cells.get((s, r))
            p50, p99 = (c.get("p50_ms"), c.get("p99_ms")) if c else (None, None)
            if not isinstance(p99, int | float):
                row.append("<td>–</td>")
                continue
            tip = (f"{s} -> {r}: {c.get('count', '?') if c else '?'} deliveries, p95 "
                   f"{_fmt(c.get('p95_ms') if c else None)} ms, max "
                   f"{_fmt(c.get('max_ms') if c else None)} ms")
            row.append(f'<td class="pair" data-pair="{escape(s)}->{escape(r)}" '
                       f'data-p99="{p99}" style="background:{_pair_colour(p99, lo, hi)}" '
                       f'title="{escape(tip)}">{_num(p50)} / <b>{_num(p99)}</b></td>')
        rows.append(row)
    head = "".join(f"<th>{escape(r)}</th>" for r in receivers)
    table = (f'<table class="pairs"><tr><th class="l">sender \\ receiver</th>{head}</tr>'
             + "".join("<tr>" + "".join(r) + "</tr>" for r in rows) + "</table>")
    return _section("Latency by sender and receiver", caption, table)


def _num(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) else "–"


def _bands(data: rd.RunData, lanes: bool = False) -> list[Band]:
    """Fault periods to shade; with `lanes`, a crash or pause of one host only on its lane.
    Switch windows of the `switching` protocol (first `start` to last `end` of an epoch) are
    shaded too, as 001 Figs. 2.4-2.9 mark the switching phases."""
    out = [Band((w0 - data.t0) / 1e9, (w1 - data.t0) / 1e9, f"switch {epoch}", "switch")
           for epoch, (w0, w1) in sorted(switch_windows(data.record).items())]
    for f in data.faults:
        stop = f.start if f.stop is None else f.stop
        own = lanes and f.kind in ("crash", "pause") and len(f.hosts) == 1
        out.append(Band(f.start, stop, f.label, f.kind, lane=f.hosts[0] if own else None))
    return out


def _faults_html(data: rd.RunData) -> str:
    html = ""
    if data.faults:
        rows = [[_td(f.label), _td(f"{f.start:.2f}"),
                 _td("instant" if f.stop is None else f"{f.stop:.2f}"),
                 f'<td class="l"><code>{escape(json.dumps(f.measured)[:240])}</code></td>']
                for f in data.faults]
        html += ('<h2>Faults</h2><p class="cap">Seconds since the workload\'s start, as the '
                 "spec's <code>at:</code> counts them.</p>"
                 + _table(["fault", "start s", "stop s", "measured"], rows))
    if data.skipped:
        rows = [[_td(f.label), _td(f"{f.start:.2f}"),
                 _td(str(f.measured.get("skipped", "")))] for f in data.skipped]
        html += ("<h2>Faults not applied</h2>"
                 + _table(["fault", "planned at s", "why"], rows))
    return html


def _csv_rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    try:
        with path.open(newline="") as f:
            return list(csv.DictReader(f))
    except (OSError, csv.Error, UnicodeDecodeError):
        log.warning("report: %s unreadable, left out", path)
        return []


def _scroll_table(summary: str, header: list[str], rows: list[list[str]]) -> str:
    """A table of any length, collapsed: its summary line, opened on a click, scrolls."""
    return (f"<details><summary>{escape(summary)}</summary><div class=\"scroll\">"
            f"{_table(header, rows)}</div></details>")


def _paths_html(run_dir: Path) -> str:
    """The configured paths (paths.csv) and the RTT check (check.csv), every row, collapsed."""
    out = ""
    paths = _csv_rows(run_dir / PATHS_CSV)
    if paths:
        keys = ["src", "dst", "delay_ms", "jitter_ms", "loss", "bandwidth_bps"]
        rows = [[f'<td class="l">{escape(r.get(k) or "")}</td>' if i < 2
                 else _td(r.get(k) or "") for i, k in enumerate(keys)] for r in paths]
        out += _section("Paths", f"one-way path per ordered pair as configured "
                        f"(<code>{PATHS_CSV}</code>)",
                        _scroll_table(f"{len(paths)} ordered pairs", keys, rows))
    check = _csv_rows(run_dir / CHECK_CSV)
    if check:
        flagged = [r for r in check if r.get("off") == "1"]
        keys = ["src", "dst", "src_site", "dst_site", "configured_ms", "measured_ms"]

        def row(r: dict[str, str]) -> list[str]:
            cells = [f'<td class="l">{escape(r.get(k) or "")}</td>' for k in keys[:4]]
            cells += [_td(r.get("configured_ms")), _td(r.get("measured_ms") or "no reply")]
            return cells + [_td("OFF", bad=True) if r.get("off") == "1" else _td("ok", cls="ok")]

        out += _section(
            "Measured against configured RTT",
            f"{len(check)} pairs pinged, {len(flagged)} flagged (off by more than 10% + 1 ms)"
            f" (<code>{CHECK_CSV}</code>)",
            (_table([*keys, ""], [row(r) for r in flagged]) if flagged else "")
            + _scroll_table(f"every checked pair ({len(check)})", [*keys, ""],
                            [row(r) for r in check]))
    return out


def _fidelity_html(summary: dict[str, Any]) -> str:
    """Configured against measured per ordered pair (summary.json `fidelity`,
    analysis/fidelity.py): the degraded pairs first, then every pair collapsed."""
    fid = summary.get("fidelity") or {}
    if not fid:
        return ""
    status = str(fid.get("status"))
    if fid.get("by") == "construction":
        return _section("Emulation fidelity", "faithful by construction (the simulator's "
                        "network is the configured one)", "")
    pairs = fid.get("pairs") or []
    keys = ["src", "dst", "delay_ms", "jitter_ms", "p50_ms", "p99_ms", "allowed_p99_ms", "loss",
            "measured_loss", "samples"]

    def row(p: dict[str, Any]) -> list[str]:
        cells = [f'<td class="l">{escape(str(p.get(k)))}</td>' for k in keys[:2]]
        why = p.get("why") or ()
        flagged = {k for k, w in (("p99_ms", "transit"), ("measured_loss", "loss")) if w in why}
        cells += [_td(p.get(k), bad=k in flagged) for k in keys[2:]]
        verdict_cell = (_td("DEGRADED", bad=True) if p.get("degraded")
                        else _td("ok", cls="ok") if p.get("judged")
                        else _td(p.get("note") or "not judged"))
        return [*cells, verdict_cell]

    bad = [p for p in pairs if p.get("degraded")]
    caption = (f"{escape(status)}: {fid.get('judged_pairs', 0)} of {len(pairs)} pairs judged, "
               f"{fid.get('degraded_pairs', 0)} degraded (p99 one-way transit over the "
               "configured delay and hold beyond <code>allowed_p99_ms</code>, or loss beyond the "
               "configured); " + escape(str(fid.get("cause") or fid.get("note") or "")))
    return _section("Emulation fidelity", caption,
                    (_table([*keys, ""], [row(p) for p in bad]) if bad else "")
                    + _scroll_table(f"every measured pair ({len(pairs)})", [*keys, ""],
                                    [row(p) for p in pairs]))


def _section(title: str, caption: str, body: str) -> str:
    return f'<h2>{escape(title)}</h2><p class="cap">{caption}</p>{body}'


def _latency_plot(data: rd.RunData, lat: Any, bands: list[Band]) -> str:
    xs, s = rd.latency_over_time(lat, data.end)
    p50 = [v for v in s["p50"] if v is not None]
    top = max((v for v in s["max"] if v is not None), default=1.0)
    ylog = bool(p50) and top > 30 * max(float(np.median(p50)), 1e-3)
    series = [Series("max", xs, s["max"], "#bbbbbb"),
              Series("p99", xs, s["p99"], plots.color(5), dash=True),
              Series("p50", xs, s["p50"], plots.color(0))]
    chart = plots.line_chart("latency", "Final-delivery latency over time", series,
                             xlabel="send time since start (s)",
                             ylabel="latency ms" + (" (log)" if ylog else ""),
                             x_range=(0, data.end), bands=bands, ylog=ylog)
    return _section("Final-delivery latency over time",
                    "Per send-time bin: median, 99th percentile and maximum of send → final "
                    "delivery, over all receivers. Shaded: fault periods.", chart)


def _timeline_plot(data: rd.RunData) -> str:
    w, rates = rd.rate_per_node(data.events, data.t0, data.nodes, "fnl", data.end, 160)
    chart = plots.lanes_chart("timeline", "Final deliveries per node", rates, x0=0.0, step=w,
                              bands=_bands(data, lanes=True))
    return _section("Delivery timeline per node",
                    "Darker = more final deliveries per second at that node; pale stretches are "
                    "stalls. Crashes are shaded on the crashed node's lane.", chart)


def _throughput_plot(data: rd.RunData, bands: list[Band]) -> str:
    w, fnl = rd.rate_per_node(data.events, data.t0, data.nodes, "fnl", data.end, 80)
    _, sends = rd.rate_per_node(data.events, data.t0, data.nodes, "send", data.end, 80)
    xs = [(k + 0.5) * w for k in range(len(next(iter(fnl.values()), [])))]
    total = [sum(v) for v in zip(*sends.values(), strict=True)] if sends else []
    series = [Series(n, xs, v, plots.color(k)) for k, (n, v) in enumerate(fnl.items())]
    series.append(Series("sent (all)", xs, total, "#555555", dash=True))
    chart = plots.line_chart("throughput", "Throughput over time", series,
                             xlabel="time since start (s)", ylabel="messages/s",
                             x_range=(0, data.end), bands=bands)
    return _section("Throughput over time",
                    f"Final deliveries per second at each node ({w:g} s bins), and messages "
                    "TO-multicast per second by all senders.", chart)


def _bandwidth_plot(data: rd.RunData, bands: list[Band]) -> str:
    try:
        w, bw = rd.pcap_bandwidth(data.path, data.t0, data.end)
    except Exception as exc:  # a damaged capture must not cost the user the whole report
        log.warning("pcaps not plotted: %s", exc)
        return ""
    if not bw:
        return ""
    reserved = rd.reservations(data.spec)
    charts = []
    for k, (host, mbit) in enumerate(bw.items()):
        xs = [(j + 0.5) * w for j in range(len(mbit))]
        hl = [(reserved[host] / 1e6, f"reserved {reserved[host] / 1e6:g} Mbit/s", "#c62828")] \
            if host in reserved else []
        charts.append(plots.line_chart(f"bandwidth-{host}", f"{host} egress", [
            Series(f"{host} sent", xs, mbit, plots.color(k))], xlabel="time since start (s)",
            ylabel="Mbit/s", x_range=(0, data.end), bands=bands, hlines=hl, height=220,
            width=460))
    note = "dashed red: the host's QoS reservation" if reserved else \
        "no host has a QoS reservation (topology qos.rate)"
    return _section("Bandwidth per host (from pcaps)",
                    f"Bits per second each host put on its data interface ({w:g} s bins); "
                    f"{note}.", '<div class="grid">' + "".join(charts) + "</div>")


def _accuracy_plot(data: rd.RunData, summary: dict[str, Any]) -> str:
    acc = rd.accuracy_per_node(data.events)
    if not acc:
        return ""
    bars = [(n, a, f"{n}: {m} of {c} optimistic deliveries in final position")
            for n, (a, m, c) in acc.items()]
    chart = plots.bar_chart("accuracy", "Optimistic accuracy per node", bars,
                            ylabel="accuracy")
    win = summary.get("optimistic", {}).get("window", {}).get("per_node", {})
    rows = [[_td(n), _td(f"{a:.1%}"), _td(m), _td(c), _td((win.get(n) or {}).get("p50_ms"))]
            for n, (a, m, c) in acc.items()]
    table = _table(["node", "accuracy", "in order", "opt+fnl", "window p50 ms"], rows)
    return _section("Optimistic accuracy per node",
                    "Share of messages whose optimistic position equals their final position "
                    "(000 sec. 2.2).", chart + table)


def _spacetime_plot(data: rd.RunData, lat: Any) -> str:
    avoid = [(f.start, f.start if f.stop is None else f.stop) for f in data.faults]
    # About 24 arrows stay legible whatever the number of nodes.
    x0, x1, rows = rd.spacetime_sample(lat, data.end, avoid, max(3, 24 // len(data.nodes)))
    if rows.empty:
        return ""
    order = {m: k for k, m in enumerate(rows.groupby("mid")["send_s"].first().sort_values().index)}
    arrows = [Arrow(str(m).rsplit(":", 1)[0], s * 1e3, str(n), f * 1e3,
                    f"{m} → {n}: {lat_ms:.2f} ms", plots.color(order[m]))
              for m, n, s, f, lat_ms in rows[["mid", "node", "send_s", "fnl_s",
                                              "latency_ms"]].itertuples(index=False)]
    chart = plots.spacetime("spacetime", "Spacetime diagram", data.nodes, arrows, x0=x0, x1=x1)
    return _section("Spacetime diagram (sample)",
                    f"{len(order)} consecutive messages from mid-run, away from faults: an "
                    "arrow per receiver from the origin's send (hollow dot) to the final "
                    "delivery; filled dot: the origin's own delivery.", chart)


def render_report(summary: dict[str, Any], data: rd.RunData | None = None) -> str:
    """The report as one HTML string; the plots need the run's data (`report_data.load_run`)."""
    ok, reasons = verdict(summary)
    run = str(summary.get("run", data.path.name if data else "run"))
    why = "".join(f"<li>{escape(r)}</li>" for r in reasons)
    if not summary.get("checks"):
        banner = ('<div class="banner none">NOT ANALYSED<small>no checker results; run '
                  "`testbed analyze` for a verdict</small></div>")
    elif ok:
        judged = summary.get("verdict") or {}
        small = ("safety held; stalled as the protocol claims"
                 if judged.get("liveness") == "stalled-as-claimed"
                 else "all checks and expectations hold")
        banner = f'<div class="banner pass">PASS<small>{small}</small></div>'
    else:
        banner = f'<div class="banner fail">FAIL<small>{len(reasons)} problem(s)</small></div>'
    parts = [_head(run), f"<h1>{escape(run)}</h1>", banner,
             f"<ul>{why}</ul>" if why else "", _facts(summary, data.spec if data else {}, run),
             _drain_html(summary)]
    if "maelstrom" in summary:  # a user's Maelstrom program: no deliveries to plot
        from analysis.report_maelstrom import maelstrom_html

        parts += [_expectations_html(summary), _checks_html(summary),
                  _faults_html(data) if data is not None else "",
                  maelstrom_html(summary, data), "</body></html>\n"]
        return "".join(parts)
    parts += [_cards(summary), _pairs_html(summary), _expectations_html(summary),
              _checks_html(summary), qos_html(summary)]
    if data is not None and len(data.events):
        bands = _bands(data)
        lat = rd.latencies(data.events, data.t0)
        parts += [_faults_html(data), topology_html(data.spec, data.faults),
                  _latency_plot(data, lat, bands),
                  _timeline_plot(data), _throughput_plot(data, bands),
                  _bandwidth_plot(data, bands), _accuracy_plot(data, summary),
                  _spacetime_plot(data, lat)]
    t0 = data.t0 if data is not None else None
    parts += [_paths_html(data.path) if data is not None else "", _fidelity_html(summary),
              _switching_html([summary]),
              _switches_html(summary, t0),
              _membership_html(summary, t0), _theta_html([summary]),
              "<h2>Final-delivery latency (ms)</h2>", _latency_html(summary),
              "<h2>Throughput</h2>", _throughput_html(summary), "</body></html>\n"]
    return "".join(parts)


def write_report(record: RunRecord, summary: dict[str, Any]) -> Path:
    """Write `<run>/report.html` and return its path."""
    path = record.path / REPORT
    path.write_text(render_report(summary, rd.load_run(record)))
    return path


def _run_label(summary: dict[str, Any], spec: dict[str, Any]) -> str:
    name = (spec.get("experiment") or {}).get("name") or summary.get("run", "run")
    proto = ((spec.get("experiment") or {}).get("protocol") or {}).get("name")
    return f"{name} ({proto})" if proto and proto not in str(name) else str(name)


def render_comparison(runs: list[tuple[dict[str, Any], rd.RunData]]) -> str:
    """Several runs side by side: verdicts, latency and throughput, overlaid latency CDFs.

    Latency and throughput come from each run's events, so that every column is computed the
    same way, also for runs that were never analysed (their verdict reads "not analysed")."""
    rows, series, tails = [], [], []
    for k, (summary, data) in enumerate(runs):
        ok, reasons = verdict(summary)
        lat = rd.latencies(data.events, data.t0)
        values = lat["latency_ms"].to_numpy()
        qs = [float(np.quantile(values, q)) if len(values) else None
              for q in (0.5, 0.95, 0.99, 1.0)]
        acc = rd.accuracy_per_node(data.events)
        pooled = (sum(m for _, m, _ in acc.values()) / sum(c for _, _, c in acc.values())
                  if acc else None)
        label = _run_label(summary, data.spec)
        state = ("NOT ANALYSED" if not summary.get("checks") else "PASS" if ok else "FAIL")
        rows.append([f'<td class="l"><span style="color:{plots.color(k)}">■</span> '
                     f"{escape(label)}<br><small>{escape(data.path.name)}</small></td>",
                     _td(state, bad=state == "FAIL", cls="ok" if state == "PASS" else ""),
                     f'<td class="l">{"<br>".join(escape(r) for r in reasons) or "–"}</td>',
                     _td(int((data.events["ev"] == "send").sum())), *[_td(q) for q in qs],
                     _td(min_rate(data)), _td(None if pooled is None else f"{pooled:.1%}")])
        series.append(Series(label, *rd.cdf(values), plots.color(k)))
        if len(values):
            tails.append(float(np.quantile(values, 0.995)))
    table = _table(["run", "verdict", "problems", "sent", "p50 ms", "p95 ms", "p99 ms",
                    "max ms", "min msg/s", "opt accuracy"], rows)
    x1 = max(tails, default=1.0) * 1.05 or 1.0
    chart = plots.line_chart("cdf", "Final-delivery latency CDF", series, xlabel="latency ms",
                             ylabel="fraction of deliveries", x_range=(0.0, x1), height=320)
    return (_head("testbed comparison") + f"<h1>Comparison of {len(runs)} runs</h1>" + table
            + _switching_html([summary for summary, _ in runs],
                              [_run_label(summary, data.spec) for summary, data in runs])
            + _theta_html([summary for summary, _ in runs],
                          [_run_label(summary, data.spec) for summary, data in runs])
            + _section("Final-delivery latency CDF", "Share of (message, receiver) final "
                       "deliveries within x ms of the send; the x axis stops at the "
                       "largest 99.5th percentile.", chart) + "</body></html>\n")


def _switching_html(summaries: list[dict[str, Any]], labels: list[str] | None = None) -> str:
    """The `switching` section (analysis/switching.py), one row per run: live, RABP and
    stop-the-flow side by side (001 §2.2.2, Figs. 2.3-2.9)."""
    rows = []
    for k, summary in enumerate(summaries):
        sw = summary.get("switching")
        if not sw:
            continue
        label = labels[k] if labels else str(summary.get("run", "run"))
        rows.append([f'<td class="l">{escape(label)}</td>', _td(sw.get("mode")),
                     _td(sw.get("switches")), _td(sw.get("duplicates"),
                                                  bad=bool(sw.get("duplicates"))),
                     _td(sw.get("order_violations"), bad=bool(sw.get("order_violations"))),
                     _td(sw.get("steady_gap_p99_ms")), _td(sw.get("max_gap_ms")),
                     _td(sw.get("mean_max_gap_ms")), _td(sw.get("max_switch_ms")),
                     _td(sw.get("extra_bytes")), _td(sw.get("retransmitted_bytes"))])
    if not rows:
        return ""
    return _section("Switching", "Per run: completed switches, duplicate deliveries and "
                    "positions where nodes disagree (both must be 0), the p99 inter-delivery "
                    "gap away from switches, the largest gap around a switch (max and mean "
                    "over switches), the longest request-to-first-new-instance-delivery time, "
                    "and the payload bytes sent twice (live: on both instances; rabp: "
                    "re-issued, i.e. retransmitted).",
                    _table(["run", "mode", "switches", "duplicates", "order", "steady gap p99 "
                            "ms", "max gap ms", "mean max gap ms", "max switch ms",
                            "extra bytes", "retransmitted bytes"], rows))


def _at(t: Any, t0: int | None) -> str:
    """A true-time ns stamp as seconds into the run (absolute when the run's start is not
    known)."""
    if t is None:
        return ""
    return f"{(int(t) - t0) / 1e9:.2f}" if t0 is not None else str(t)


def _switches_html(summary: dict[str, Any], t0: int | None) -> str:
    """Every switch of a `switching` run: who asked and why (a management client's
    `switchTo`, the fault schedule's, or the layer's policy), when, and what it cost (001
    §2.2; the management side of §4.2)."""
    per = (summary.get("switching") or {}).get("per_switch") or []
    if not per:
        return ""
    rows = [[_td(s.get("epoch")), _td(f"{s.get('from')} → {s.get('to')}"),
             _td(s.get("requested_by") or ""), _td(s.get("reason") or ""),
             _td(_at(s.get("requested_t"), t0)), _td(s.get("window_ms")),
             _td(s.get("switch_ms")), _td(s.get("max_gap_ms")),
             _td(s.get("extra_bytes")), _td("yes" if s.get("completed") else "no",
                                            bad=not s.get("completed"))]
            for s in per]
    return _section("Switches", "One row per switch: the host whose request started it and "
                    "why (mgmt: a management client's switchTo; schedule: a mgmt entry of "
                    "the fault schedule; policy: the layer's adapt_to_all/adapt_to_one), "
                    "the request time, the switch window (first start to last end over the "
                    "nodes), request to first new-instance delivery at the last node, the "
                    "largest inter-delivery gap around it and the payload bytes sent twice.",
                    _table(["epoch", "from → to", "requested by", "why", "at s",
                            "window ms", "switch ms", "max gap ms", "extra bytes",
                            "completed"], rows))


def _membership_html(summary: dict[str, Any], t0: int | None) -> str:
    """Primary views (001 §4.1) as installed, the operator's setPrimary calls (§4.2) and
    what each node went through (blocked, excluded, rejoined, refused sends)."""
    m = summary.get("membership")
    if not m:
        return ""
    views = [[_td(v["counter"]), _td(" ".join(v["members"])), _td(_at(v["t"], t0)),
              _td(v["first"]), _td(v["nodes"]),
              _td("setPrimary (operator)" if v.get("operator") else "majority rule")]
             for v in m.get("views", [])]
    calls = [[_td(c["node"]), _td(_at(c["t"], t0)), _td(c.get("status") or "")]
             for c in m.get("set_primary", [])]
    nodes = [[_td(n)] + [_td(c.get(k, 0)) for k in ("blocked", "excluded", "join",
                                                     "refused", "ensured")]
             for n, c in sorted((m.get("per_node") or {}).items())]
    body = _table(["counter", "members", "installed at s", "first at", "nodes",
                   "decided by"], views)
    if calls:
        body += ("<p>setPrimary calls (an operator unblocking a minority):</p>"
                 + _table(["node", "at s", "status before"], calls))
    body += _table(["node", "blocked", "excluded", "joins", "refused", "ensured"], nodes)
    return _section("Membership (primary partitions)", "The primary views in counter order: "
                    "members, when the first node installed it and how many did, and whether "
                    "the majority rule or an operator's setPrimary decided it; then the "
                    "setPrimary calls and, per node, blocks, forced leaves, join events (its own "
                    "rejoin or a member it admitted), "
                    "refused sends and uniform notifications.", body)


THETA_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0)  # the analytic curve: Θ/4 to 4Θ around a run's Θ


def _theta_html(summaries: list[dict[str, Any]], labels: list[str] | None = None) -> str:
    """`qos-vbr`'s Θ trade-off (004 §5.3, Thms 2-3): latency bound Δ+Γ+Θ against the dummy
    overhead 1/Θ per process. One run has one Θ, so its report draws the bound as a curve of Θ
    (the run's Δ, Γ and failure term; overhead 1/Θ) with the run measured as one point; a
    comparison of runs with different Θ (`testbed report RUN RUN...`) draws the measured
    sweep, as bench/qos_theta_sweep.py does on the simulator without run directories."""
    runs = [(labels[k] if labels else str(s.get("run", "run")), s["qos"])
            for k, s in enumerate(summaries)
            if (s.get("qos") or {}).get("protocol") == "qos-vbr"
            and s["qos"].get("theta_ms") and s["qos"].get("bound_ms") is not None]
    if not runs:
        return ""
    runs.sort(key=lambda r: r[1]["theta_ms"])
    # The bound is Δ+Γ+Θ or Δ+2Γ+Θ (failures): its part without Θ, per run.
    fixed = [q["bound_ms"] - q["theta_ms"] for _, q in runs]
    base = runs[len(runs) // 2][1]["theta_ms"]
    curve = sorted({round(base * f, 3) for f in THETA_FACTORS}
                   | {q["theta_ms"] for _, q in runs})
    c = [plots.color(i) for i in range(3)]
    f0 = fixed[len(fixed) // 2]
    formula = runs[0][1].get("formula") or "Δ+Γ+Θ"
    bound_t = Series(f"bound {formula}", curve, [f0 + t for t in curve], c[0], dash=True)
    measured = [q.get("max_latency_ms") for _, q in runs]
    one = len(runs) == 1
    name = "this run's max latency" if one else "max latency, per run"
    by_theta = plots.line_chart(
        "qos-theta", "latency against Θ", [
            bound_t, Series(name, [q["theta_ms"] for _, q in runs], measured, c[1], dots=one)],
        xlabel="Θ (ms)", ylabel="latency (ms)", ymin=0, width=460)
    over = [1000.0 / t for t in curve]
    pts = sorted((q["overhead_rate"], m) for (_, q), m in zip(runs, measured, strict=True)
                 if q.get("overhead_rate") is not None and m is not None)
    by_over = plots.line_chart(
        "qos-theta-overhead", "latency against dummy overhead", [
            Series("bound against 1/Θ", over[::-1], [f0 + t for t in curve][::-1], c[0],
                   dash=True),
            Series(name, [x for x, _ in pts], [y for _, y in pts], c[1], dots=one)],
        xlabel="overhead: net minus app msgs/s per process (≈ 1/Θ)", ylabel="latency (ms)",
        ymin=0, width=460)
    what = ("One run has one Θ: the dashed curve is the bound for other Θ with this run's Δ "
            "and Γ (overhead 1/Θ per process, Thm 3), the dot is this run. A measured sweep "
            "is several runs: compare qos-vbr runs with different Θ (<code>testbed report "
            "RUN RUN...</code>), or <code>python -m bench.qos_theta_sweep</code>."
            if one else "One point per run (sorted by Θ), the dashed curve the bound.")
    return _section("Θ trade-off (qos-vbr)", "004 §5.3: a longer slot Θ costs latency (bound "
                    "Δ+Γ+Θ, Thm 2), a shorter one dummies (1/Θ per process). " + what,
                    '<div class="grid">' + by_theta + by_over + "</div>")


def min_rate(data: rd.RunData) -> float:
    """The slowest node's first fnl deliveries per second over its own first-to-last fnl span;
    0 for a node with no span (analysis/metrics.py `throughput`)."""
    ev = data.events
    first = ev[(ev["ev"] == "fnl") & ev["mid"].notna()].drop_duplicates(["node", "mid"])
    g = first.groupby("node")["t"]
    span = ((g.max() - g.min()) / 1e9).reindex(data.nodes, fill_value=0)
    rates = (g.count().reindex(data.nodes, fill_value=0) / span.where(span > 0)).fillna(0.0)
    return float(rates.min()) if len(rates) else 0.0


def write_comparison(records: list[RunRecord], out: Path) -> Path:
    """Write a comparison of runs to `out` (a file, or `comparison.html` inside an existing
    directory) and return its path. Runs without summary.json are compared as not analysed."""
    runs = []
    for record in records:
        summary_path = record.path / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
        runs.append((summary, rd.load_run(record)))
    out = Path(out)
    path = out / COMPARISON if out.is_dir() else out
    path.write_text(render_comparison(runs))
    return path
