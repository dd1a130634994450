"""Explorations (`testbed explore`: seeds.parquet, index.html, reproducers/, runs/) as
`testbed serve` shows them: one row of the runs table each, and a page listing its failing
seeds with their reproducers and runs. What failed is seeds.parquet's `ok` and `failing` as
the exploration wrote them."""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from testbed.serve.files import read_yaml
from testbed.serve.page import href
from testbed.serve.runs import date_of, is_run

SEED_COLUMNS = ["seed", "ok", "failing", "faults", "reproducer", "shrunk_faults"]


def is_exploration(d: Path) -> bool:
    return (d / "seeds.parquet").is_file() and (d / "index.html").is_file()


def seeds(d: Path) -> list[dict[str, Any]]:
    """The exploration's seed rows (SEED_COLUMNS it has), in seed order; [] if unreadable."""
    import pyarrow.parquet as pq

    try:
        names = set(pq.read_schema(d / "seeds.parquet").names)
        rows = pq.read_table(d / "seeds.parquet",
                             columns=[c for c in SEED_COLUMNS if c in names]).to_pylist()
    except (OSError, ValueError):
        return []
    return sorted(rows, key=lambda r: r.get("seed") or 0)


def _experiment(d: Path) -> dict[str, Any]:
    """The experiment the exploration ran, as a reproducer or a seed's run lock states it
    (the protocol and backend it ran, which `--protocol` may have changed); {} if neither."""
    for lock in sorted((d / "runs").glob("*/spec.lock.yaml")):
        exp = read_yaml(lock).get("experiment")
        if isinstance(exp, dict):
            return {**exp, "hosts": len((read_yaml(lock).get("topology") or {}).get("hosts")
                                        or []) or None}
    for repro in sorted((d / "reproducers").glob("*.yaml")):
        exp = read_yaml(repro)
        if exp:
            return exp
    return {}


def exploration_row(root: Path, d: Path) -> dict[str, Any]:
    """The exploration's row of the runs table: FAIL when a seed failed."""
    rows = seeds(d)
    failing = [r for r in rows if r.get("ok") is False]
    exp = _experiment(d)
    checks: dict[str, int] = {}
    for r in failing:
        for check in r.get("failing") or ["error"]:
            checks[check] = checks.get(check, 0) + 1
    date = date_of(d.name) or datetime.fromtimestamp(
        (d / "seeds.parquet").stat().st_mtime, UTC).strftime("%Y-%m-%d %H:%M:%S")
    name = str(exp.get("name") or (d.name[17:] if date_of(d.name) else d.name))
    return {
        "kind": "exploration", "path": d.relative_to(root).as_posix(), "run": d.name,
        "date": date, "experiment": name,
        "backend": str(exp.get("backend") or ""),
        "protocol": str((exp.get("protocol") or {}).get("name") or ""),
        "hosts": exp.get("hosts"), "faults": None, "fault_kinds": [],
        "verdict": "FAIL" if failing else "PASS" if rows else "NOT ANALYSED",
        "reasons": [f"{c} on {n} seed(s)" for c, n in sorted(checks.items())],
        "p50": None, "p99": None, "throughput": None, "measured_from": "",
        "report": False, "topology": "",
        "seeds": len(rows), "failing": len(failing),
        "reproducers": sum(1 for r in rows if r.get("reproducer")),
    }


def fault_lines(text: str) -> list[str]:
    """A seed's fault items (its JSON list) one line each: the kind, then its fields."""
    try:
        items = json.loads(text)
    except ValueError:
        return [text]
    if not isinstance(items, list):
        return [text]
    return [" ".join([str(f.get("kind", "?"))] + [
        f"{k} {' '.join(map(str, v)) if isinstance(v, list) else v}"
        for k, v in f.items() if k != "kind"]) if isinstance(f, dict) else str(f)
        for f in items]


def exploration_page(rel: str, d: Path, row: dict[str, Any]) -> str:
    """Its seeds, failing checks, and per failing seed the reproducer (the experiment to
    replay), the faults it was shrunk to and the shrunk run's files."""
    items = []
    for r in seeds(d):
        if r.get("ok") is not False:
            continue
        seed = r.get("seed")
        repro = str(r.get("reproducer") or "")
        run = d / "runs" / f"seed-{seed}"
        run_link = ""
        if is_run(run):
            target = "report.html" if (run / "report.html").is_file() else "spec.lock.yaml"
            run_link = (f'<a href="{href(f"{rel}/runs/seed-{seed}/{target}")}">'
                        f'runs/seed-{seed}</a>')
        faults = fault_lines(str(r.get("shrunk_faults") or r.get("faults") or "[]"))
        items.append(
            f'<tr class="reproducer" data-seed="{seed}"><td>{seed}</td>'
            f'<td class="l">{html.escape(", ".join(r.get("failing") or []))}</td>'
            f'<td class="l faults">{"<br>".join(map(html.escape, faults)) or "none"}'
            f'{"<br><small>(shrunk)</small>" if r.get("shrunk_faults") else ""}</td>'
            + (f'<td class="l"><a href="{href(f"{rel}/{repro}")}">{html.escape(repro)}</a>'
               f'<br><small><code>testbed explore --replay {html.escape(str(d / repro))}</code>'
               "</small></td>" if repro else '<td class="l">–</td>')
            + f'<td class="l">{run_link or "–"}</td></tr>')
    table = ('<table id="reproducers"><thead><tr><th>seed</th><th class="l">failing checks'
             '</th><th class="l">faults</th><th class="l">reproducer</th>'
             f'<th class="l">run</th></tr></thead><tbody>{"".join(items)}</tbody></table>'
             if items else "<p>no seed failed</p>")
    facts = " · ".join(html.escape(str(x)) for x in (
        row["date"], row["protocol"], row["backend"]) if x)
    why = "".join(f"<li>{html.escape(x)}</li>" for x in row["reasons"])
    return ("<style>td.faults{white-space:normal;min-width:16em;max-width:30em}</style>"
            f"<p>{facts} · {row['seeds']} seeds, <span class=\"{row['verdict']}\">"
            f"{row['failing']} failing</span> · "
            f'<a href="{href(rel + "/index.html")}">seeds and plots (index.html)</a> · '
            f'<a href="{href(rel + "/seeds.parquet")}">seeds.parquet</a> · '
            '<a href="/">all runs</a></p>'
            + (f"<ul>{why}</ul>" if why else "")
            + f"<h2>Failing seeds</h2>{table}")
