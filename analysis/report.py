"""A self-contained HTML report for one run (v0): verdict, checks, latency, throughput.

No JavaScript and no external assets, so the file opens offline and can be archived.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from analysis.job import checks_ok

REPORT = "report.html"

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:60em}
.banner{padding:.8em 1.2em;border-radius:6px;font-size:1.4em;font-weight:600;color:#fff}
.pass{background:#2e7d32}.fail{background:#c62828}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:.3em .7em;text-align:right}
th:first-child,td:first-child{text-align:left}
th{background:#f3f3f3}td.bad{color:#c62828;font-weight:600}
code{font-size:.9em}
"""


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


def _td(value: Any, bad: bool = False) -> str:
    return f'<td class="bad">{_fmt(value)}</td>' if bad else f"<td>{_fmt(value)}</td>"


def _verdict(summary: dict[str, Any]) -> tuple[bool, list[str]]:
    """PASS needs every checker clean and every expectation in `summary["expectations"]`
    (a list of `Result.as_dict()`, when the caller evaluated any) to hold."""
    reasons = [
        f"{name}: {c.get('violations')} violation(s)"
        for name, c in summary.get("checks", {}).items()
        if c.get("violations", 0)
    ]
    reasons += [
        f"expectation failed: {r.get('expectation')} ({r.get('reason')})"
        for r in summary.get("expectations", [])
        if not r.get("ok")
    ]
    return checks_ok(summary) and not reasons, reasons


def _checks_html(summary: dict[str, Any]) -> str:
    rows = []
    for name, check in summary.get("checks", {}).items():
        n = check.get("violations", 0)
        examples = check.get("examples", [])[:3]
        shown = "<br>".join(f"<code>{escape(str(e))}</code>" for e in examples)
        rows.append([_td(name), _td(n, bad=n > 0), f'<td style="text-align:left">{shown}</td>'])
    return _table(["check", "violations", "examples"], rows)


def _latency_html(summary: dict[str, Any]) -> str:
    fnl = summary.get("latency", {}).get("fnl", {})
    keys = ["p50_ms", "p95_ms", "p99_ms", "max_ms", "count"]
    rows = [[_td("all"), *[_td(fnl.get("all", {}).get(k)) for k in keys]]]
    rows += [
        [_td(host), *[_td(stats.get(k)) for k in keys]]
        for host, stats in fnl.get("per_receiver", {}).items()
    ]
    return _table(["receiver", *keys], rows)


def _throughput_html(summary: dict[str, Any]) -> str:
    tp = summary.get("throughput", {})
    fnl = summary.get("messages", {}).get("fnl", {})
    rows = [
        [_td(host), _td(rate), _td(fnl.get(host))] for host, rate in tp.get("per_node", {}).items()
    ]
    rows.append([_td("min"), _td(tp.get("min_msgs_per_s")), _td(None)])
    return _table(["node", "fnl msgs/s", "fnl events"], rows)


def _expectations_html(summary: dict[str, Any]) -> str:
    results = summary.get("expectations", [])
    if not results:
        return ""
    rows = [
        [
            f"<td><code>{escape(str(r.get('expectation')))}</code></td>",
            _td("ok" if r.get("ok") else "FAILED", bad=not r.get("ok")),
            _td(r.get("reason")),
        ]
        for r in results
    ]
    return "<h2>Expectations</h2>" + _table(["expectation", "result", "why"], rows)


def render_report(summary: dict[str, Any]) -> str:
    """The report as one HTML string."""
    ok, reasons = _verdict(summary)
    run = escape(str(summary.get("run", "run")))
    banner = "PASS" if ok else "FAIL"
    why = "".join(f"<li>{escape(r)}</li>" for r in reasons)
    sent = summary.get("messages", {}).get("sent", 0)
    crashed = ", ".join(summary.get("crashed", [])) or "none"
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{run}</title>'
        f"<style>{_CSS}</style></head><body>"
        f"<h1>{run}</h1>"
        f'<div class="banner {banner.lower()}">{banner}</div>'
        f"<ul>{why}</ul>"
        f"<p>Nodes: {escape(', '.join(summary.get('nodes', [])))} · crashed: {escape(crashed)}"
        f" · messages sent: {_fmt(sent)}</p>"
        f"{_expectations_html(summary)}"
        f"<h2>Checks</h2>{_checks_html(summary)}"
        f"<h2>Final-delivery latency (ms)</h2>{_latency_html(summary)}"
        f"<h2>Throughput</h2>{_throughput_html(summary)}"
        "</body></html>\n"
    )


def write_report(run_dir: Path, summary: dict[str, Any]) -> Path:
    """Write `<run>/report.html` and return its path."""
    path = Path(run_dir) / REPORT
    path.write_text(render_report(summary))
    return path
