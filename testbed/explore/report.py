"""`testbed explore`'s outputs: seeds.parquet (one row per seed) and index.html (failures
first, each with a spacetime diagram around its first violation and its fault timeline,
drawn with analysis/plots.py)."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from analysis.record import RunRecord, read_record
from testbed.explore.generators import describe

MS = 1_000_000


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({
        "seed": pa.array([r["seed"] for r in rows], pa.int64()),
        "faults": pa.array([r["faults"] for r in rows], pa.string()),
        "params": pa.array([r.get("params", "{}") for r in rows], pa.string()),
        "ok": pa.array([bool(r["ok"]) for r in rows], pa.bool_()),
        "verdict_ok": pa.array([bool(r.get("verdict_ok", r["ok"])) for r in rows], pa.bool_()),
        "liveness": pa.array([r.get("liveness", "") for r in rows], pa.string()),
        "failing": pa.array([list(r.get("failing", [])) for r in rows], pa.list_(pa.string())),
        "events": pa.array([int(r.get("events", 0)) for r in rows], pa.int64()),
        "wall_s": pa.array([float(r.get("wall_s", 0.0)) for r in rows], pa.float64()),
        "error": pa.array([r.get("error", "") for r in rows], pa.string()),
        "reproducer": pa.array([r.get("reproducer", "") for r in rows], pa.string()),
        "shrunk_faults": pa.array([r.get("shrunk_faults", "") for r in rows], pa.string()),
        # whether the seed ran on the compiled simulator (nodes/fastpath.py)
        "compiled": pa.array([bool(r.get("compiled", False)) for r in rows], pa.bool_()),
        # world mode (docs/explore.md "Worlds"): the drawn values are in `params`
        "features": pa.array([list(r.get("features", [])) for r in rows],
                             pa.list_(pa.string())),
        "shape": pa.array([r.get("shape", "") for r in rows], pa.string()),
        "duration_s": pa.array([float(r.get("duration_s", 0.0)) for r in rows], pa.float64()),
        "refused": pa.array([r.get("refused", "") for r in rows], pa.string()),
        "counters": pa.array([r.get("counters", "{}") for r in rows], pa.string()),
    })
    pq.write_table(table, path)


def _events(record: RunRecord) -> dict[str, list[dict[str, Any]]]:
    """Each node's `send` and `fnl` events, as the checkers see them (revoked deliveries
    dropped; analysis/deliverylog.py)."""
    return record.events(("send", "fnl"), revoke=True)


def first_divergence(events: dict[str, list[dict[str, Any]]]) -> int | None:
    """When two nodes first final-deliver a pair of messages in different orders (ns)."""
    orders = {n: [(e["mid"], e["t"]) for e in evs if e["ev"] == "fnl"]
              for n, evs in events.items()}
    best: int | None = None
    names = sorted(orders)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            pos = {m: k for k, (m, _) in enumerate(orders[b])}
            last = -1
            for m, t in orders[a]:
                k = pos.get(m)
                if k is None:
                    continue
                if k < last:
                    best = t if best is None else min(best, t)
                    break
                last = k
    return best


def _bands(plan: dict[str, Any], start: int, end: int) -> list[Any]:
    from analysis.plots import Band

    opened: dict[tuple[str, str], tuple[int, str]] = {}
    bands = []
    closes = {"heal": "partition", "restart": "crash", "resume": "pause"}
    for f in plan.get("faults", []):
        t, op = (f["at_ns"]) / 1e6, f["op"]
        params = f.get("params", {})
        host = str(params.get("host", ""))
        if op in ("block", "crash", "pause"):
            kind = {"block": "partition"}.get(op, op)
            opened[(kind, host if op != "block" else "")] = (t, kind)
        elif op in closes:
            key = (closes[op], host if op != "heal" else "")
            if key in opened:
                t0, kind = opened.pop(key)
                bands.append(Band(t0 / 1e3, t / 1e3, f"{kind} {key[1]}".strip(), kind))
        elif op == "path":
            key = ("link", "-".join(params.get("between", [])))
            if params.get("reset") and key in opened:
                t0, _ = opened.pop(key)
                bands.append(Band(t0 / 1e3, t / 1e3, f"link {key[1]}", "link"))
            elif not params.get("reset"):
                opened[key] = (t, "link")
        elif op == "clock":
            bands.append(Band(t / 1e3, t / 1e3 + 0.02, f"clock {host}", "clock"))
    for (kind, who), (t0, _) in opened.items():
        bands.append(Band(t0 / 1e3, (end - start) / 1e9, f"{kind} {who}".strip(), kind))
    return bands


def failure_charts(record: RunRecord, name: str) -> str:
    """The spacetime diagram around the first violation (or the first fault) and the fault
    timeline over each node's final deliveries per 100 ms."""
    from analysis import plots

    if record.plan is None:
        raise FileNotFoundError(f"{record.path} has no plan")
    plan = dict(record.plan)
    start = int(plan.get("start_at_ns", 0))
    events = _events(record)
    lanes = sorted(events)
    every = [e for evs in events.values() for e in evs]
    if not every:
        return "<p>no deliveries</p>"
    end = max(e["t"] for e in every)
    first = first_divergence(events)
    if first is None and plan.get("faults"):
        first = start + int(plan["faults"][0]["at_ns"])
    center = first if first is not None else (start + end) // 2
    sends = sorted((e["t"], n, e["mid"]) for n, evs in events.items() for e in evs
                   if e["ev"] == "send")
    near = sorted(sends, key=lambda s: abs(s[0] - center))[:8]
    mids = {m: (n, t) for t, n, m in near}
    arrows = []
    for n, evs in events.items():
        for e in evs:
            if e["ev"] == "fnl" and e["mid"] in mids:
                src, t0 = mids[e["mid"]]
                arrows.append(plots.Arrow(src, (t0 - start) / 1e6, n, (e["t"] - start) / 1e6,
                                          f"{e['mid']} -> {n}",
                                          plots.color(lanes.index(src) if src in lanes else 0)))
    if arrows:
        x0 = min(a.t0 for a in arrows)
        x1 = max(a.t1 for a in arrows)
        x1 = min(x1, x0 + 2000.0)
    else:
        x0, x1 = (center - start) / 1e6 - 100, (center - start) / 1e6 + 100
    pad = max((x1 - x0) * 0.04, 0.05)
    title = "first violation" if first_divergence(events) is not None else "first fault"
    chart = plots.spacetime(f"st-{name}", f"Spacetime around the {title} "
                            f"({(center - start) / 1e9:.3f} s)", lanes, arrows,
                            x0=x0 - pad, x1=x1 + pad)
    step = 0.1
    n_bins = int((end - start) / 1e9 / step) + 1
    series = []
    for k, node in enumerate(lanes):
        counts = [0] * max(n_bins, 1)
        for e in events[node]:
            if e["ev"] == "fnl" and e["t"] >= start:
                counts[min(int((e["t"] - start) / 1e9 / step), n_bins - 1)] += 1
        series.append(plots.Series(node, [i * step for i in range(n_bins)],
                                   [c / step for c in counts], plots.color(k)))
    timeline = plots.line_chart(f"tl-{name}", "Fault timeline: final deliveries per second",
                                series, xlabel="time since start (s)", ylabel="deliveries/s",
                                bands=_bands(plan, start, end), height=220)
    return chart + timeline


CSS = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1000px}"
       "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;"
       "font-size:13px;text-align:left}.fail{color:#b00}.tick{font-size:11px;fill:#555}"
       ".axis{font-size:12px;fill:#333}.legend{font-size:11px;fill:#333}"
       "code{font-size:12px}")


def write_index(out: Path, base: Any, outcome: Any,
                cov: dict[str, dict[str, Any]] | None = None) -> None:
    rows = outcome.rows
    failing = [r for r in rows if not r["ok"]]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>explore "
             f"{escape(base.exp.name)}</title><style>{CSS}</style></head><body>",
             f"<h1>testbed explore: {escape(base.exp.name)}</h1>",
             f"<p>protocol <b>{escape(base.exp.protocol.name)}</b>, {len(rows)} seeds in "
             f"{outcome.explore_s:.1f} s ({len(rows) / max(outcome.explore_s, 1e-9) * 3600:,.0f}"
             f" schedules/hour), <span class='fail'>{len(failing)} failing</span>"
             + (f", extra checks: {escape(', '.join(base.checks))}" if base.checks else "")
             + "</p>"]
    if failing:
        parts.append("<h2>Failures</h2>")
    for r in sorted(failing, key=lambda r: (r["seed"] not in outcome.shrunk, r["seed"])):
        seed = r["seed"]
        parts.append(f"<h3 class='fail'>seed {seed}: {escape(', '.join(r['failing']))}</h3>")
        if r.get("error"):
            parts.append(f"<p><code>{escape(r['error'])}</code></p>")
        if r.get("reproducer"):
            parts.append(f"<p>reproducer <a href='{escape(r['reproducer'])}'>"
                         f"{escape(r['reproducer'])}</a></p>")
        shrunk = outcome.shrunk.get(seed)
        items = json.loads(r.get("shrunk_faults") or r["faults"])
        label = "shrunk schedule" if shrunk else "schedule"
        parts.append(f"<p>{label}: " + ("; ".join(escape(describe(i)) for i in items)
                                          or "no faults") + "</p>")
        if shrunk:
            c = shrunk["case"]
            extra = [f"duration {c['duration_ns'] / 1e9:g} s" if c.get("duration_ns") else "",
                     ", ".join(f"{k} {v}" for k, v in c.get("params", [])
                               if k != "topology"),
                     f"without {', '.join(c['drop_hosts'])}" if c.get("drop_hosts") else ""]
            parts.append(f"<p>from {shrunk['from_items']} item(s) in {shrunk['runs']} runs"
                         + "".join(f"; {escape(x)}" for x in extra if x) + "</p>")
            run_dir = Path(shrunk["row"].get("run_dir", ""))
            if run_dir.is_dir():
                try:
                    parts.append(failure_charts(read_record(run_dir), f"s{seed}"))
                except (OSError, ValueError, KeyError) as exc:
                    parts.append(f"<p>no diagram: {escape(str(exc))}</p>")
    if cov:
        from testbed.explore.coverage import coverage_html

        parts.append(coverage_html(cov))
    parts.append("<h2>All seeds</h2><table><tr><th>seed</th><th>ok</th><th>liveness</th>"
                 "<th>failing</th><th>events</th><th>faults</th></tr>")
    for r in sorted(rows, key=lambda r: (r["ok"], r["seed"])):
        faults = "; ".join(describe(i) for i in json.loads(r["faults"]))
        parts.append(f"<tr><td>{r['seed']}</td><td class='{'' if r['ok'] else 'fail'}'>"
                     f"{'ok' if r['ok'] else 'FAIL'}</td><td>{escape(r.get('liveness', ''))}"
                     f"</td><td>{escape(', '.join(r.get('failing', [])))}</td>"
                     f"<td>{r.get('events', 0)}</td><td>{escape(faults)}</td></tr>")
    parts.append("</table></body></html>\n")
    (out / "index.html").write_text("".join(parts))
