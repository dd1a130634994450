"""The HTML around every page of `testbed serve`: the navigation, the style, links to files."""

from __future__ import annotations

import html
import urllib.parse
from typing import Any

from starlette.responses import HTMLResponse

CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse}th,td{padding:.25em .6em;border-bottom:1px solid #ddd;
text-align:right;white-space:nowrap}th{background:#f4f4f4}td.l,th.l{text-align:left}
th a{color:#222;text-decoration:none}.PASS{color:#17803d;font-weight:600}
.FAIL{color:#b91c1c;font-weight:600}.RUNNING{color:#1d4ed8}nav a{margin-right:1em}
form.filter{margin:.8em 0}small{color:#666}
svg.topo line.link.cut{stroke:#D55E00;stroke-dasharray:6 4;stroke-opacity:1;stroke-width:2}"""


def page(title: str, body: str, run: str = "") -> HTMLResponse:
    nav = ('<nav><a href="/">runs</a><a href="/nightly">nightly</a>'
           '<a href="/explore">explorations</a></nav>')
    return HTMLResponse(f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
                        f"<title>{html.escape(title)}</title><style>{CSS}</style></head>"
                        f'<body data-run="{html.escape(run)}">{nav}<h1>{html.escape(title)}'
                        f"</h1>{body}</body></html>")


def href(path: str) -> str:
    """The URL of a file under a served folder, by its path relative to the folder."""
    return "/r/" + urllib.parse.quote(path)


def fmt(value: Any, digits: int = 1) -> str:
    """A table cell's text: a dash for nothing, floats to `digits` places."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)
