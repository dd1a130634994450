"""The routes of `testbed serve` (a Starlette application run by uvicorn) over folders it only
reads (docs/serve.md):

- `/` the runs table (testbed/serve/runs.py): runs and explorations, sorted and filtered on
  the server (`?sort=p99&order=desc&q=text&verdict=FAIL`), so links keep their view;
- `/compare?run=A&run=B` what differs between runs and their reports side by side
  (testbed/serve/compare.py);
- `/exploration/<path>` an exploration's failing seeds and reproducers
  (testbed/serve/explorations.py);
- `/live/<run>` and `/events/<run>` a running run's live page and its event stream
  (testbed/serve/live.py);
- `/r/<path>` a file under a folder by its path relative to that folder, secrets never
  (testbed/serve/files.py); `/nightly`, `/explore` the trend reports and explorations found;
  `/api/runs` the table as JSON.

On any address but loopback every request needs the credentials (testbed/serve/access.py).
"""

from __future__ import annotations

import html
import socket
import urllib.parse
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from testbed.serve.access import AuthMiddleware, Credentials, is_local
from testbed.serve.files import safe_file
from testbed.serve.found import scan
from testbed.serve.page import href, page
from testbed.serve.runs import is_run, runs_table, sort_filter

TEXT_TYPES = {".yaml": "text/plain; charset=utf-8", ".jsonl": "text/plain; charset=utf-8",
              ".log": "text/plain; charset=utf-8"}


class PortTaken(OSError):
    """The address and port to serve on are in use (or not this machine's)."""


def check_port(host: str, port: int) -> None:
    """PortTaken unless `host`:`port` can be bound now: said before anything starts, in one
    sentence, rather than as the server's error once it runs."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        # as uvicorn binds: a port whose last connections are still closing is free
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise PortTaken(exc.errno, exc.strerror) from None


def _text(message: str, status: int) -> Response:
    return Response(message + "\n", status_code=status, media_type="text/plain")


def build_app(roots: list[Path], credentials: Credentials | None = None) -> Starlette:
    """The application over `roots`; `credentials` makes every request authenticate."""
    from testbed.serve import live as lv
    from testbed.serve.compare import comparison_page
    from testbed.serve.explorations import exploration_page, exploration_row, is_exploration

    roots = [Path(r).resolve() for r in roots]

    def run_dir(rel: str) -> Path | None:
        lock = safe_file(roots, f"{rel}/spec.lock.yaml")
        return lock.parent if lock is not None and is_run(lock.parent) else None

    async def index(request: Request) -> Response:
        p = request.query_params
        sort, order = p.get("sort", "date"), p.get("order", "desc")
        q, verdict = p.get("q", ""), p.get("verdict", "")
        rows = sort_filter(scan(roots).runs, sort, order, q, verdict)
        folders = ", ".join(html.escape(str(r)) for r in roots)
        return page("testbed runs", f"<p><small>{folders}</small></p>"
                    + runs_table(rows, sort, order, q, verdict))

    async def api_runs(request: Request) -> Response:
        return JSONResponse(scan(roots).runs)

    async def file(request: Request) -> Response:
        path = safe_file(roots, request.path_params["path"])
        if path is None:
            return _text("not found", 404)
        return FileResponse(path, media_type=TEXT_TYPES.get(path.suffix))

    async def compare(request: Request) -> Response:
        picked = request.query_params.getlist("run")
        dirs = []
        for rel in picked:
            d = run_dir(rel)
            if d is None:
                return _text(f"no run {rel!r} under the served folders", 404)
            dirs.append(d)
        if len(dirs) < 2:
            return _text("tick at least two runs to compare", 400)
        return HTMLResponse(comparison_page(picked, dirs))

    async def nightly(request: Request) -> Response:
        found = scan(roots).nightly
        items = "".join(f'<li><a href="{href(n["path"])}">{html.escape(n["name"])}</a></li>'
                        for n in found) or "<li>no nightly.html under the folders</li>"
        return page("nightly trend reports", f"<ul>{items}</ul>")

    async def explore(request: Request) -> Response:
        found = [r for r in scan(roots).runs if r["kind"] == "exploration"]
        items = "".join(
            f'<li><a href="/exploration/{urllib.parse.quote(e["path"])}">'
            f'{html.escape(e["path"])}</a> · {html.escape(e["experiment"])} · {e["seeds"]} '
            f'seeds, {e["failing"]} failing, {e["reproducers"]} reproducer(s)</li>'
            for e in found
        ) or "<li>no explorations (seeds.parquet and index.html) under the folders</li>"
        return page("explorations", f"<ul>{items}</ul>")

    async def exploration(request: Request) -> Response:
        rel = request.path_params["path"].rstrip("/")
        index_file = safe_file(roots, f"{rel}/index.html")
        if index_file is None or not is_exploration(index_file.parent):
            return _text("not found", 404)
        d = index_file.parent
        root = next(r for r in roots if d.is_relative_to(r))
        row = exploration_row(root, d)
        return page(f"exploration: {row['experiment']}", exploration_page(rel, d, row))

    async def live(request: Request) -> Response:
        rel = request.path_params["path"].rstrip("/")
        d = run_dir(rel)
        if d is None:
            return _text("not found", 404)
        return page(f"live: {d.name}", lv.live_page(rel, lv.LiveRun(d)), run=rel)

    async def events(request: Request) -> Response:
        from starlette.responses import StreamingResponse

        rel = request.path_params["path"].rstrip("/")
        d = run_dir(rel)
        if d is None:
            return _text("not found", 404)
        return StreamingResponse(lv.stream(rel, d, request.is_disconnected),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store"})

    routes = [Route("/", index), Route("/api/runs", api_runs), Route("/compare", compare),
              Route("/live/{path:path}", live), Route("/events/{path:path}", events),
              Route("/nightly", nightly), Route("/explore", explore),
              Route("/exploration/{path:path}", exploration), Route("/r/{path:path}", file)]
    middleware = ([Middleware(AuthMiddleware, credentials=credentials)]
                  if credentials is not None else [])
    return Starlette(routes=routes, middleware=middleware)


def serve_in_background(roots: list[Path], port: int, host: str = "127.0.0.1") -> Any:
    """`testbed run --serve`: the same application on `host`:`port` (loopback only: no
    credentials) in a daemon thread; returns a function that stops it. PortTaken when the
    port is taken."""
    import threading

    import uvicorn

    if not is_local(host):
        raise ValueError("testbed run --serve binds loopback only; use testbed serve --host")
    check_port(host, port)
    server = uvicorn.Server(uvicorn.Config(build_app(roots), host=host, port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, name="testbed-serve", daemon=True)
    thread.start()

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=5)

    return stop
