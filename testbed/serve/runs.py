"""The runs table of `testbed serve`: every run directory and exploration found under the
served folders, one row each, sorted and filtered on the server (docs/serve.md). A row's
verdict is summary.json's `ok` as the analysis wrote it, never judged again here."""

from __future__ import annotations

import html
import re
import urllib.parse
from pathlib import Path
from typing import Any

from testbed.serve.files import read_json, read_yaml
from testbed.serve.page import fmt, href

COLUMNS = (("date", "date"), ("experiment", "experiment"), ("backend", "backend"),
           ("protocol", "protocol"), ("hosts", "hosts"), ("faults", "faults"),
           ("verdict", "verdict"), ("p50", "p50 ms"), ("p99", "p99 ms"),
           ("throughput", "min msgs/s"))
VERDICTS = ("PASS", "FAIL", "NOT JUDGED", "RUNNING", "NOT ANALYSED")
TEXT_KEYS = ("run", "experiment", "backend", "protocol", "topology", "verdict", "date")
STAMP = re.compile(r"^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z-")


def date_of(name: str) -> str:
    """The UTC time a run or exploration directory's name starts with, readable; "" if none."""
    stamp = STAMP.match(name)
    return "{}-{}-{} {}:{}:{}".format(*stamp.groups()) if stamp else ""


def is_run(d: Path) -> bool:
    return (d / "spec.lock.yaml").is_file() and ((d / "nodes").is_dir()
                                                 or (d / "summary.json").is_file())


def finished(d: Path) -> bool:
    """The run stopped: its journal has `down` (torn down) or it wrote drain.json."""
    from analysis.record import drained

    try:
        text = (d / "journal.jsonl").read_text(errors="replace")
    except OSError:
        return True
    return '"op": "down"' in text or drained(d)


def judged(summary: dict[str, Any]) -> dict[str, Any]:
    """summary.json's `verdict` mapping ({} if it has none)."""
    v = summary.get("verdict")
    return v if isinstance(v, dict) else {}


def verdict_of(summary: dict[str, Any]) -> str:
    """PASS or FAIL as summary.json's `ok` says (its `verdict.ok` in older summaries), NOT
    JUDGED when it says neither, "" without a summary."""
    if not summary:
        return ""
    ok = summary.get("ok", judged(summary).get("ok"))
    return "PASS" if ok is True else "FAIL" if ok is False else "NOT JUDGED"


def reasons_of(summary: dict[str, Any]) -> list[str]:
    """The verdict's reasons, as summary.json states them."""
    return [str(r) for r in judged(summary).get("reasons") or []]


_ROWS: dict[Path, tuple[tuple[float, ...], dict[str, Any]]] = {}


def _stamp(d: Path) -> tuple[float, ...]:
    out: list[float] = []
    for name in ("spec.lock.yaml", "summary.json", "journal.jsonl", "drain.json",
                 "report.html"):
        try:
            st = (d / name).stat()
            out += [st.st_mtime, float(st.st_size)]
        except OSError:
            out += [0.0, -1.0]
    return tuple(out)


def cached_row(root: Path, d: Path) -> dict[str, Any]:
    """run_row, read again only when one of the run's files changed (a running run's row
    is read on every request)."""
    stamp = _stamp(d)
    hit = _ROWS.get(d)
    if hit is not None and hit[0] == stamp and hit[1]["verdict"] != "RUNNING":
        return {**hit[1], "path": d.relative_to(root).as_posix()}
    row = run_row(root, d)
    _ROWS[d] = (stamp, row)
    return row


def run_row(root: Path, d: Path) -> dict[str, Any]:
    """One row of the runs table, from the run's spec.lock.yaml and summary.json."""
    lock = read_yaml(d / "spec.lock.yaml")
    summary = read_json(d / "summary.json")
    exp = lock.get("experiment") or {}
    topo = lock.get("topology") or {}
    state = verdict_of(summary)
    if not state:
        state = "NOT ANALYSED" if finished(d) else "RUNNING"
    fnl = ((summary.get("latency") or {}).get("fnl") or {}).get("all") or {}
    throughput = (summary.get("throughput") or {}).get("min_msgs_per_s")
    source = "summary"
    if fnl.get("p50_ms") is None and state != "RUNNING":
        fnl, throughput = from_events(d)
        source = "events"
    faults = exp.get("faults") or []
    return {
        "kind": "run", "path": d.relative_to(root).as_posix(), "run": d.name,
        "date": date_of(d.name),
        "experiment": str(exp.get("name") or ""),
        "backend": str(exp.get("backend") or ""),
        "protocol": str((exp.get("protocol") or {}).get("name") or ""),
        "hosts": len(topo.get("hosts") or []),
        "faults": len(faults) if isinstance(faults, list) else 0,
        "fault_kinds": sorted({str(f.get("kind") or f.get("type") or "")
                               for f in faults if isinstance(f, dict)} - {""})
        if isinstance(faults, list) else [],
        "verdict": state,
        "reasons": reasons_of(summary),
        "p50": fnl.get("p50_ms"), "p99": fnl.get("p99_ms"),
        "throughput": throughput, "measured_from": source,
        "report": (d / "report.html").is_file(),
        "topology": str(topo.get("name") or ""),
    }


MAX_EVENTS_BYTES = 64 << 20
_EVENTS_CACHE: dict[Path, tuple[tuple[float, ...], dict[str, Any], float | None]] = {}


def from_events(d: Path) -> tuple[dict[str, Any], float | None]:
    """p50/p99 final-delivery latency and the slowest node's rate of a run never analysed,
    from its delivery logs with the functions the multi-run report uses (no Spark), cached
    until a log changes; nothing for logs over MAX_EVENTS_BYTES."""
    from analysis.record import log_files

    logs = [p for _, p in log_files(d)]
    try:
        stats = [p.stat() for p in logs]
    except OSError:
        return {}, None
    if not logs or sum(st.st_size for st in stats) > MAX_EVENTS_BYTES:
        return {}, None
    key = tuple(x for st in stats for x in (st.st_mtime, float(st.st_size)))
    cached = _EVENTS_CACHE.get(d)
    if cached is not None and cached[0] == key:
        return cached[1], cached[2]
    import numpy as np

    from analysis import report_data as rd
    from analysis.record import read_record
    from analysis.report import min_rate

    try:
        data = rd.load_run(read_record(d))
        values = rd.latencies(data.events, data.t0)["latency_ms"].to_numpy()
        fnl = ({"p50_ms": float(np.quantile(values, 0.5)),
                "p99_ms": float(np.quantile(values, 0.99))} if len(values) else {})
        rate: float | None = min_rate(data)
    except (OSError, ValueError, KeyError):
        fnl, rate = {}, None
    _EVENTS_CACHE[d] = (key, fnl, rate)
    return fnl, rate


def sort_filter(rows: list[dict[str, Any]], sort: str, order: str, q: str, verdict: str
                ) -> list[dict[str, Any]]:
    """The rows whose text holds every word of `q` (the TEXT_KEYS and fault kinds) and whose
    verdict is `verdict` (any when ""), sorted by the column `sort`; rows without a value
    last, either way."""
    keys = {k for k, _ in COLUMNS}
    out = rows
    if q:
        words = q.lower().split()
        out = [r for r in out if all(w in " ".join(
            [str(r.get(k, "")) for k in TEXT_KEYS] + list(r.get("fault_kinds", []))).lower()
            for w in words)]
    if verdict:
        out = [r for r in out if r["verdict"] == verdict.upper()]
    if sort in keys:
        present = [r for r in out if r.get(sort) is not None and r.get(sort) != ""]
        missing = [r for r in out if r.get(sort) is None or r.get(sort) == ""]
        present.sort(key=lambda r: r[sort], reverse=order == "desc")
        out = present + missing
    return out


def _run_cell(r: dict[str, Any]) -> str:
    """The experiment cell's second line: the run's report (and live page), or the
    exploration's page with its seeds."""
    if r["kind"] == "exploration":
        return (f'<a class="exploration" href="/exploration/{urllib.parse.quote(r["path"])}">'
                f'exploration: {r["seeds"]} seeds, {r["failing"]} failing, '
                f'{r["reproducers"]} reproducer(s)</a>')
    link = (f'<a href="{href(r["path"] + "/report.html")}">{html.escape(r["run"])}</a>'
            if r["report"] else html.escape(r["run"]))
    if r["verdict"] == "RUNNING":
        link += f' · <a class="live" href="/live/{urllib.parse.quote(r["path"])}">live</a>'
    return link


def runs_table(rows: list[dict[str, Any]], sort: str, order: str, q: str, verdict: str) -> str:
    def head(key: str, label: str) -> str:
        nxt = "asc" if sort == key and order == "desc" else "desc"
        arrow = (" ▼" if order == "desc" else " ▲") if sort == key else ""
        query = urllib.parse.urlencode({"sort": key, "order": nxt, "q": q, "verdict": verdict})
        cls = ' class="l"' if key in ("date", "experiment", "backend", "protocol",
                                      "verdict") else ""
        return f'<th{cls}><a id="sort-{key}" href="/?{query}">{html.escape(label)}{arrow}</a></th>'

    body = []
    for r in rows:
        why = html.escape("; ".join(r["reasons"]))
        kinds = html.escape(", ".join(r["fault_kinds"]))
        path = html.escape(r["path"])
        tick = (f'<input type="checkbox" name="run" value="{path}">' if r["kind"] == "run"
                else "")
        body.append(
            f'<tr class="{r["kind"]}" data-run="{path}"><td>{tick}</td>'
            f'<td class="l">{html.escape(r["date"])}</td>'
            f'<td class="l">{html.escape(r["experiment"])}<br><small>{_run_cell(r)}</small></td>'
            f'<td class="l">{html.escape(r["backend"])}</td>'
            f'<td class="l">{html.escape(r["protocol"])}</td><td>{fmt(r["hosts"])}</td>'
            f'<td title="{kinds}">{fmt(r["faults"])}</td>'
            f'<td class="l {r["verdict"].replace(" ", "-")}" title="{why}">{r["verdict"]}</td>'
            f'<td class="p50">{fmt(r["p50"])}</td><td class="p99">{fmt(r["p99"])}</td>'
            f'<td>{fmt(r["throughput"])}</td></tr>')
    options = "".join(f'<option{" selected" if verdict == v else ""}>{v}</option>'
                      for v in ("", *VERDICTS))
    filter_form = (f'<form class="filter" method="get" action="/">'
                   f'<input type="hidden" name="sort" value="{html.escape(sort)}">'
                   f'<input type="hidden" name="order" value="{html.escape(order)}">'
                   f'<input name="q" placeholder="filter: experiment, protocol, fault, ..." '
                   f'value="{html.escape(q)}" size="40"> verdict <select name="verdict">'
                   f'{options}</select> <button>filter</button></form>')
    header = "<th></th>" + "".join(head(k, label) for k, label in COLUMNS)
    return (filter_form + f'<form method="get" action="/compare"><p>{len(rows)} rows · '
            f'<button id="compare">compare ticked runs</button></p>'
            f'<table id="runs"><thead><tr>{header}</tr></thead><tbody>{"".join(body)}'
            f"</tbody></table></form>")
