"""The comparison page of `testbed serve`: what differs between the ticked runs' specs (the
named keys first: backend, protocol, params, topology, seed; then every other key of their
spec.lock.yaml that differs), the spec diff, and the multi-run report (analysis/report.py
`render_comparison`) below."""

from __future__ import annotations

import difflib
import html
import json
from pathlib import Path
from typing import Any

import yaml

from testbed.serve.files import read_json, read_yaml
from testbed.serve.page import href

# The keys a user asks about first, as labels of spec.lock.yaml keys (flattened with dots).
NAMED = (("backend", "experiment.backend"), ("protocol", "experiment.protocol.name"),
         ("params", "experiment.protocol.params"), ("topology", "topology.name"),
         ("seed", "experiment.seed"))
IGNORED = ("run_id", "versions")  # differ between any two runs; not what was asked for
SAME_AS_NAMED = ("seed",)  # the lock's top-level copy of experiment.seed
MAX_VALUE = 80  # characters of a value shown in the table of differences
MAX_KEYS = 40


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    """Mappings flattened to dotted keys; lists and scalars are values."""
    if not isinstance(data, dict) or (prefix and not data):
        return {prefix: data}
    out: dict[str, Any] = {}
    for k, v in data.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= MAX_VALUE else text[:MAX_VALUE - 1] + "…"


def differences(locks: list[dict[str, Any]]) -> list[tuple[str, list[Any]]]:
    """(key, the value in each lock) for every key whose values differ: the NAMED ones first
    (labelled as there; `params` is the protocol's parameters as a whole), then the others in
    the locks' order."""
    flats = [{k: v for k, v in _flat(lock).items() if k.split(".")[0] not in IGNORED}
             for lock in locks]
    out: list[tuple[str, list[Any]]] = []
    for label, key in NAMED:
        parts = key.split(".")
        values = []
        for lock in locks:
            v: Any = lock
            for p in parts:
                v = v.get(p) if isinstance(v, dict) else None
            values.append(v)
        if any(v != values[0] for v in values):
            out.append((label, values))
    named = tuple(k for _, k in NAMED) + SAME_AS_NAMED
    keys = list(dict.fromkeys(k for f in flats for k in f))
    for key in keys:
        if key.startswith(named):
            continue
        values = [f.get(key) for f in flats]
        if any(v != values[0] for v in values):
            out.append((key, values))
    return out


def _spec_text(lock: dict[str, Any]) -> list[str]:
    shown = {k: v for k, v in lock.items() if k not in IGNORED}
    return yaml.safe_dump(shown, sort_keys=False, width=100).splitlines()


def spec_diff(names: list[str], locks: list[dict[str, Any]]) -> str:
    """The unified diff of each lock against the first (run_id and versions left out)."""
    blocks = []
    first = _spec_text(locks[0])
    for name, lock in zip(names[1:], locks[1:], strict=True):
        lines = []
        for line in difflib.unified_diff(first, _spec_text(lock), names[0], name, lineterm="",
                                         n=2):
            cls = ("add" if line.startswith("+") else "del" if line.startswith("-") else
                   "at" if line.startswith("@@") else "")
            lines.append(f'<span class="{cls}">{html.escape(line)}</span>' if cls
                         else html.escape(line))
        blocks.append('<pre class="diff">' + ("\n".join(lines) or "(identical specs)")
                      + "</pre>")
    return "".join(blocks)


def comparison_page(rels: list[str], dirs: list[Path]) -> str:
    """The whole page: a link back to the runs, what differs, the spec diff, the report."""
    from analysis import report_data as rd
    from analysis.record import read_record
    from analysis.report import render_comparison

    locks = [read_yaml(d / "spec.lock.yaml") for d in dirs]
    diffs = differences(locks)
    head = "".join(f'<th class="l"><a href="{href(rel + "/spec.lock.yaml")}">'
                   f"{html.escape(d.name)}</a></th>" for rel, d in zip(rels, dirs, strict=True))
    rows = "".join(
        f'<tr class="differs" data-key="{html.escape(key)}"><td class="l"><b>'
        f"{html.escape(key)}</b></td>"
        + "".join(f'<td class="l">{html.escape(_text(v))}</td>' for v in values) + "</tr>"
        for key, values in diffs[:MAX_KEYS])
    more = (f"<p><small>and {len(diffs) - MAX_KEYS} more keys (the diff below)</small></p>"
            if len(diffs) > MAX_KEYS else "")
    named = [k for k, _ in diffs if k in dict(NAMED)]
    said = ("differ in " + ", ".join(named) if named else
            "same backend, protocol, params, topology and seed")
    top = (f'<nav class="back"><a id="back" href="/">← all runs</a></nav>'
           f'<h2>What differs</h2><p id="differs">{html.escape(said)}'
           f"{'; other keys below' if len(diffs) > len(named) else ''}</p>"
           + (f'<table id="differences"><thead><tr><th class="l">key</th>{head}</tr></thead>'
              f"<tbody>{rows}</tbody></table>{more}" if diffs else
              "<p>the specs are the same (run_id and versions aside)</p>")
           + "<details open><summary>spec.lock.yaml diff</summary>"
           + spec_diff([d.name for d in dirs], locks) + "</details>")
    style = ("<style>pre.diff{background:#f7f7f7;padding:.6em;overflow:auto;font-size:12px}"
             ".diff .add{color:#17803d}.diff .del{color:#b91c1c}.diff .at{color:#1d4ed8}"
             "nav.back{margin-bottom:1em}</style>")
    report = render_comparison([(read_json(d / "summary.json"),
                                 rd.load_run(read_record(d, need_nodes=False))) for d in dirs])
    # The report's own header stays; what differs goes first after its title.
    marker = "</h1>"
    at = report.index(marker) + len(marker)
    return report[:at].replace("</head>", style + "</head>", 1) + top + report[at:]
