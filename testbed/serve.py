"""`testbed serve`: every run, nightly trend report and exploration under some folders, in the
browser (docs/serve.md).

A Starlette application (run by uvicorn) over folders it only reads:

- `/` the runs table: date, experiment, backend, protocol, hosts, faults, verdict, p50/p99,
  throughput of every run directory found under the folders; sorted (`?sort=p99&order=desc`)
  and filtered (`?q=text&verdict=FAIL`) on the server, so links keep their view; tick runs and
  "compare" opens the multi-run report (analysis/report.py `render_comparison`);
- `/r/<path>` any file under a folder, by its path relative to that folder (a run's
  `report.html`, `summary.json`, `spec.lock.yaml`; a nightly's `nightly.html`; an
  exploration's `index.html` and `reproducers/`): links survive a restart as long as the same
  folders are served;
- `/nightly` and `/explore`: the trend reports and explorations found;
- `/api/runs`: the table as JSON.

A path with a `..` segment, an absolute one, or one that resolves (through symlinks) outside
its folder is refused with 404. On any address but 127.0.0.1, localhost and ::1 every request
needs the token (`Authorization: Bearer`, or `?token=` once, which sets a cookie) or the Basic
credential of the state folder, and the server speaks TLS with a certificate from
testbed/certs.py (`testbed serve` does both).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import hmac
import html
import json
import os
import re
import secrets
import socket
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from analysis.deliverylog import parse_line

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
MAX_DEPTH = 4  # how deep under a folder runs, nightlies and explorations are looked for
COLUMNS = (("date", "date"), ("experiment", "experiment"), ("backend", "backend"),
           ("protocol", "protocol"), ("hosts", "hosts"), ("faults", "faults"),
           ("verdict", "verdict"), ("p50", "p50 ms"), ("p99", "p99 ms"),
           ("throughput", "min msgs/s"))
_STAMP = re.compile(r"^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z-")


def is_local(host: str) -> bool:
    return host in LOCAL_HOSTS


# --- credentials (the state folder) -----------------------------------------------------------


def _secret(path: Path, make: str) -> str:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(make)
    return path.read_text().strip()


@dataclass(frozen=True)
class Credentials:
    token: str
    basic: str  # "user:password"

    @classmethod
    def load(cls, state: Path) -> Credentials:
        """The server's bearer token and Basic credential (created on first use, mode 0600,
        like a run's management token: testbed/rundir.py)."""
        return cls(_secret(state / "token", secrets.token_urlsafe(24)),
                   _secret(state / "basic", f"testbed:{secrets.token_urlsafe(18)}"))

    def accepts(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer":
            return hmac.compare_digest(value.strip().encode(), self.token.encode())
        if scheme.lower() == "basic":
            try:
                given = base64.b64decode(value.strip(), validate=True)
            except ValueError:
                return False
            return hmac.compare_digest(given, self.basic.encode())
        cookie = request.cookies.get("testbed_serve", "")
        query = request.query_params.get("token", "")
        return any(hmac.compare_digest(c.encode(), self.token.encode())
                   for c in (cookie, query) if c)


def server_certificate(state: Path, host: str) -> tuple[Path, Path, Path]:
    """(certificate, key, CA) for serving TLS on `host`, from testbed/certs.py: the state
    folder's CA (kept once made) and a certificate for `host` issued again on every start."""
    from testbed.certs import make_run_certs

    made = make_run_certs(state, "serve", {"serve": [host, "127.0.0.1"]})["serve"]
    return made.cert_path, made.key_path, state / "certs" / "ca.pem"


class AuthMiddleware:
    """Every request needs the credentials (a non-local bind)."""

    def __init__(self, app: ASGIApp, credentials: Credentials):
        self.app = app
        self.credentials = credentials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        if not self.credentials.accepts(request):
            response: Response = Response(
                "authentication required: Authorization: Bearer TOKEN (the token file of "
                "testbed serve's state folder), Basic, or ?token=TOKEN\n", status_code=401,
                headers={"WWW-Authenticate": 'Basic realm="testbed serve"'},
                media_type="text/plain")
            await response(scope, receive, send)
            return
        if request.query_params.get("token"):
            async def send_cookie(message: Any) -> None:
                if message["type"] == "http.response.start":
                    cookie = (f"testbed_serve={self.credentials.token}; HttpOnly; Secure; "
                              "SameSite=Strict; Path=/")
                    message.setdefault("headers", []).append(
                        (b"set-cookie", cookie.encode()))
                await send(message)
            await self.app(scope, receive, send_cookie)
            return
        await self.app(scope, receive, send)


# --- what is under the folders ----------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _walk(root: Path, depth: int = MAX_DEPTH) -> list[Path]:
    """Directories under `root` (itself included), `depth` levels deep, symlinks not
    followed, hidden ones skipped, in name order; a run directory's insides are not
    entered."""
    out: list[Path] = []
    stack = [(root, 0)]
    while stack:
        d, level = stack.pop()
        out.append(d)
        if level >= depth or _is_run(d):
            continue
        try:
            children = sorted((p for p in d.iterdir() if p.is_dir() and not p.is_symlink()),
                              reverse=True)
        except OSError:
            continue
        stack += [(c, level + 1) for c in children if not c.name.startswith(".")]
    return out


def _is_run(d: Path) -> bool:
    return (d / "spec.lock.yaml").is_file() and ((d / "nodes").is_dir()
                                                 or (d / "summary.json").is_file())


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


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
    lock = _read_yaml(d / "spec.lock.yaml")
    summary = _read_json(d / "summary.json")
    exp = lock.get("experiment") or {}
    topo = lock.get("topology") or {}
    verdict = summary.get("verdict") or {}
    journal = d / "journal.jsonl"
    if summary.get("checks"):
        state = "PASS" if summary.get("ok", verdict.get("ok")) else "FAIL"
    elif journal.is_file() and '"op": "down"' not in journal.read_text(errors="replace") \
            and not (d / "drain.json").is_file():
        state = "RUNNING"
    else:
        state = "NOT ANALYSED"
    fnl = ((summary.get("latency") or {}).get("fnl") or {}).get("all") or {}
    throughput = (summary.get("throughput") or {}).get("min_msgs_per_s")
    source = "summary"
    if fnl.get("p50_ms") is None and state != "RUNNING":
        fnl, throughput = from_events(d)
        source = "events"
    stamp = _STAMP.match(d.name)
    date = ("{}-{}-{} {}:{}:{}".format(*stamp.groups()) if stamp else "")
    faults = exp.get("faults") or []
    rel = d.relative_to(root).as_posix()
    return {
        "path": rel, "run": d.name,
        "date": date,
        "experiment": str(exp.get("name") or ""),
        "backend": str(exp.get("backend") or ""),
        "protocol": str((exp.get("protocol") or {}).get("name") or ""),
        "hosts": len(topo.get("hosts") or []),
        "faults": len(faults) if isinstance(faults, list) else 0,
        "fault_kinds": sorted({str(f.get("kind") or f.get("type") or "")
                               for f in faults if isinstance(f, dict)} - {""})
        if isinstance(faults, list) else [],
        "verdict": state,
        "reasons": list(verdict.get("reasons") or []),
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
    logs = sorted((d / "nodes").glob("*/events.jsonl"))
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
    from analysis.report import min_rate

    try:
        data = rd.load_run(d)
        values = rd.latencies(data.events, data.t0)["latency_ms"].to_numpy()
        fnl = ({"p50_ms": float(np.quantile(values, 0.5)),
                "p99_ms": float(np.quantile(values, 0.99))} if len(values) else {})
        rate: float | None = min_rate(data)
    except (OSError, ValueError, KeyError):
        fnl, rate = {}, None
    _EVENTS_CACHE[d] = (key, fnl, rate)
    return fnl, rate


@dataclass(frozen=True)
class Found:
    runs: list[dict[str, Any]]
    nightly: list[dict[str, Any]]
    explore: list[dict[str, Any]]


def _join(rel: str, name: str) -> str:
    return name if rel in ("", ".") else f"{rel}/{name}"


def scan(roots: list[Path]) -> Found:
    runs: list[dict[str, Any]] = []
    nightly: list[dict[str, Any]] = []
    explore: list[dict[str, Any]] = []
    seen: set[str] = set()
    for root in roots:
        for d in _walk(root):
            rel = d.relative_to(root).as_posix()
            if _is_run(d):
                if rel not in seen:
                    seen.add(rel)
                    runs.append(cached_row(root, d))
                continue
            if (d / "nightly.html").is_file():
                nightly.append({"path": _join(rel, "nightly.html"), "name": rel})
            if (d / "seeds.parquet").is_file() and (d / "index.html").is_file():
                repro = d / "reproducers"
                count = len(list(repro.glob("*.yaml"))) if repro.is_dir() else 0
                explore.append({"path": _join(rel, "index.html"), "name": rel,
                                "reproducers": count,
                                "reproducers_path": _join(rel, "reproducers/")})
    runs.sort(key=lambda r: (r["date"], r["run"]), reverse=True)
    return Found(runs, nightly, explore)


def sort_filter(rows: list[dict[str, Any]], sort: str, order: str, q: str, verdict: str
                ) -> list[dict[str, Any]]:
    keys = {k for k, _ in COLUMNS}
    out = rows
    if q:
        words = q.lower().split()
        out = [r for r in out if all(w in " ".join(
            str(r[k]) for k in ("run", "experiment", "backend", "protocol", "topology",
                                "verdict", "date") + tuple(r["fault_kinds"])).lower()
            for w in words)]
    if verdict:
        out = [r for r in out if r["verdict"] == verdict.upper()]
    if sort in keys:
        present = [r for r in out if r[sort] is not None and r[sort] != ""]
        missing = [r for r in out if r[sort] is None or r[sort] == ""]
        present.sort(key=lambda r: r[sort], reverse=order == "desc")
        out = present + missing  # rows without the value last, either way
    return out


def safe_file(roots: list[Path], rel: str) -> Path | None:
    """The file `rel` names under one of the folders, or None: `..` segments, absolute paths
    and anything resolving outside its folder are refused."""
    if not rel or rel.startswith("/") or "\\" in rel or "\x00" in rel:
        return None
    parts = rel.split("/")
    if any(p in ("..", ".") for p in parts):
        return None
    for root in roots:
        base = root.resolve()
        target = (base / rel).resolve()
        if target.is_relative_to(base) and target.is_file():
            return target
        if target.is_relative_to(base) and target.is_dir() and (target / "index.html").is_file():
            return target / "index.html"
    return None



# --- the live view of a running run -----------------------------------------------------------

NODE_MBEAN = "testbed:type=Node"
LIVE_EVERY_S = 1.0
LATENCY_WINDOW = 2000  # the last deliveries per node its quantiles are taken over


def _finished(d: Path) -> bool:
    journal = d / "journal.jsonl"
    try:
        text = journal.read_text(errors="replace")
    except OSError:
        return True
    return '"op": "down"' in text or (d / "drain.json").is_file()


class LiveRun:
    """What a running run shows, polled about once a second: per node the `Progress` of its
    management endpoint (messages sent, final deliveries), read over the control plane as the
    drain reads it (testbed/drain.py), with the run's token when it has one; per node the
    final-delivery latency quantiles of its last deliveries, from the delivery logs' new lines
    (send time from the sender's log, first `fnl` from the receiver's); the fault records
    (faults.jsonl) as they are written. Reads only."""

    def __init__(self, d: Path):
        self.d = d
        plan = _read_json(d / "plan.json")
        hosts = plan.get("hosts")
        self.hosts: list[str] = ([str(h) for h in hosts] if isinstance(hosts, list) else
                                 sorted(p.name for p in (d / "nodes").glob("*") if p.is_dir()))
        token_file = d / "token"
        self.token = token_file.read_text().strip() if token_file.is_file() else ""
        self.offsets: dict[Path, int] = {}
        self.send_t: dict[str, int] = {}
        self.pending: list[tuple[str, str, int]] = []
        self.seen: set[tuple[str, str]] = set()
        self.latency: dict[str, collections.deque[float]] = {
            h: collections.deque(maxlen=LATENCY_WINDOW) for h in self.hosts}
        self.faults: list[dict[str, Any]] = []
        self.cuts: set[tuple[str, str]] = set()  # the partition's one-way cuts in force
        self.cut_since: int | None = None
        # the workload's start, the origin of the spec's fault times (the first event before
        # the plan is written)
        start = plan.get("start_at_ns")
        self.t0: int | None = start if isinstance(start, int) and start > 0 else None
        self.planned = self.t0 is not None
        self.last: dict[str, dict[str, Any]] = {}  # a node's last answer (it stops at the end)

    def _new_lines(self, path: Path) -> list[str]:
        """Complete lines appended to `path` since the last call."""
        try:
            with path.open("rb") as f:
                f.seek(self.offsets.get(path, 0))
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self.offsets[path] = self.offsets.get(path, 0) + end
        return data[:end].decode(errors="replace").splitlines()

    def _progress(self, host: str) -> dict[str, Any] | None:
        from testbed.mgmt import MgmtClient, MgmtError

        info = _read_json(self.d / "nodes" / host / "control.json")
        if not info.get("port"):
            return None
        url = f"{info.get('scheme', 'http')}://{info.get('host')}:{info['port']}/jolokia"
        ca = self.d / "certs" / "ca.pem"
        cert = self.d / "certs" / "orchestrator.pem"
        try:
            client = MgmtClient(url, self.token, timeout_s=0.8,
                                cafile=ca if ca.is_file() else None,
                                client_cert=cert if cert.is_file() else None)
            value = client.read(NODE_MBEAN, "Progress")
        except (MgmtError, OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def _read_logs(self) -> None:
        fnls: list[tuple[str, str, int]] = []
        for host in self.hosts:
            for line in self._new_lines(self.d / "nodes" / host / "events.jsonl"):
                rec = parse_line(line, host)  # the delivery log's one parsing
                if rec is None:
                    continue
                if not self.planned and (self.t0 is None or rec["t"] < self.t0):
                    self.t0 = rec["t"]
                mid = rec.get("mid")
                if rec.get("ev") == "send" and isinstance(mid, str):
                    self.send_t.setdefault(mid, rec["t"])
                elif rec.get("ev") == "fnl" and isinstance(mid, str):
                    fnls.append((host, mid, rec["t"]))
        waiting = []
        for host, mid, t in self.pending + fnls:
            if (host, mid) in self.seen:
                continue
            sent = self.send_t.get(mid)
            if sent is None:
                waiting.append((host, mid, t))  # its send line is not in the logs yet
                continue
            self.seen.add((host, mid))
            self.latency.setdefault(host, collections.deque(maxlen=LATENCY_WINDOW)).append(
                (t - sent) / 1e6)
        self.pending = waiting[-100_000:]

    def poll(self) -> dict[str, Any]:
        from concurrent.futures import ThreadPoolExecutor

        import numpy as np

        with ThreadPoolExecutor(max(1, min(8, len(self.hosts)))) as pool:
            progress = dict(zip(self.hosts, pool.map(self._progress, self.hosts), strict=True))
        self._read_logs()
        for line in self._new_lines(self.d / "faults.jsonl"):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                self.faults.append(rec)
                self._partition(rec)
        nodes = {}
        for h in self.hosts:
            p = progress.get(h)
            if p is not None:
                self.last[h] = p
            reachable = p is not None
            p = p or self.last.get(h)
            delivered = p.get("delivered") if p else None
            values = np.fromiter(self.latency.get(h, ()), float)
            nodes[h] = {
                "reachable": reachable,
                "sent": p.get("sent") if p else None,
                "delivered": (sum(v for v in delivered.values() if isinstance(v, int))
                              if isinstance(delivered, dict) else None),
                "p50": float(np.quantile(values, 0.5)) if len(values) else None,
                "p99": float(np.quantile(values, 0.99)) if len(values) else None,
            }
        faults = []
        for rec in self.faults:
            t = rec.get("t")
            at = (t - self.t0) / 1e9 if isinstance(t, int) and self.t0 is not None else None
            faults.append({"at_s": at, "kind": str(rec.get("kind", "")),
                           "phase": str(rec.get("phase", rec.get("op", ""))),
                           "detail": json.dumps({k: v for k, v in rec.items()
                                                 if k not in ("t", "kind", "phase", "op")})[:200]})
        partition = None
        if self.cuts:
            from analysis.topology_view import groups_after

            since = self.cut_since
            partition = {"groups": groups_after(self.cuts, self.hosts),
                         "cuts": sorted([a, b] for a, b in self.cuts),
                         "since_s": ((since - self.t0) / 1e9 if since is not None
                                     and self.t0 is not None else None)}
        return {"nodes": nodes, "faults": faults, "partition": partition,
                "finished": _finished(self.d)}

    def _partition(self, rec: dict[str, Any]) -> None:
        """Follow the partition in force: a `block` (partition start) adds its cuts, a `heal`
        (its stop) lifts them all, as the nodes and the simulator do (nodes/agent.py,
        nodes/sim.py)."""
        if rec.get("kind") != "partition":
            return
        if rec.get("phase") == "stop":
            self.cuts, self.cut_since = set(), None
            return
        params = rec.get("params")
        cuts = params.get("cuts") if isinstance(params, dict) else None
        if not isinstance(cuts, list):
            return
        self.cuts |= {(c[0], c[1]) for c in cuts if isinstance(c, list) and len(c) == 2
                      and all(isinstance(h, str) for h in c)}
        t = rec.get("t")
        if self.cut_since is None and isinstance(t, int):
            self.cut_since = t


_LIVE_JS = """
const path = document.body.dataset.run;
const es = new EventSource('/events/' + path.split('/').map(encodeURIComponent).join('/'));
const fmt = v => v === null || v === undefined ? '\\u2013' :
  (typeof v === 'number' && !Number.isInteger(v) ? v.toFixed(1) : String(v));
let updates = 0;
es.onmessage = (e) => {
  const d = JSON.parse(e.data);
  updates += 1;
  for (const [h, n] of Object.entries(d.nodes)) {
    for (const k of ['sent', 'delivered', 'p50', 'p99']) {
      const cell = document.getElementById(k + '-' + h);
      if (cell) cell.textContent = fmt(n[k]);
    }
    const row = document.getElementById('node-' + h);
    if (row) row.className = n.reachable ? 'up' : 'down';
  }
  const list = document.getElementById('faults');
  list.innerHTML = '';
  for (const f of d.faults) {
    const li = document.createElement('li');
    li.textContent = (f.at_s === null ? '?' : f.at_s.toFixed(2) + ' s') + ' ' + f.kind + ' ' +
      f.phase + ' ' + f.detail;
    list.appendChild(li);
  }
  drawPartition(d.partition);
  const total = Object.values(d.nodes).reduce((a, n) => a + (n.delivered || 0), 0);
  const item = document.createElement('li');
  item.dataset.delivered = total;
  item.textContent = 'update ' + updates + ': ' + total + ' final deliveries';
  const history = document.getElementById('history');
  history.appendChild(item);
  while (history.children.length > 120) history.removeChild(history.firstChild);
  document.getElementById('status').textContent = 'running: update ' + updates;
  document.getElementById('status').dataset.updates = updates;
};
let drawn = 'null';
const drawPartition = (p) => {
  const now = JSON.stringify(p ? p.groups : null);
  if (now === drawn) return;
  drawn = now;
  const log = document.createElement('li');
  log.dataset.groups = p ? JSON.stringify(p.groups) : '';
  log.textContent = 'update ' + updates + ': ' + (p ? 'partition ' +
    p.groups.map(g => g.join(' ')).join(' | ') : 'healed');
  document.getElementById('partitions').appendChild(log);
  const svg = document.querySelector('svg.topo');
  const group = {};
  if (p) p.groups.forEach((g, i) => g.forEach(h => { group[h] = i; }));
  const cut = new Set(p ? p.cuts.map(c => c[0] + ' ' + c[1]) : []);
  if (svg) {
    svg.querySelectorAll('g.host').forEach(g => {
      const i = group[g.dataset.host];
      g.dataset.group = i === undefined ? '' : String(i);
      g.querySelector('circle').setAttribute('fill', i === undefined ? '#333' :
        GROUPS[i % GROUPS.length]);
    });
    svg.querySelectorAll('line.link').forEach(l => {
      const a = l.dataset.a, b = l.dataset.b;
      l.classList.toggle('cut', cut.has(a + ' ' + b) || cut.has(b + ' ' + a));
    });
    svg.dataset.partition = p ? p.groups.map(g => g.join(' ')).join(' | ') : '';
    log.dataset.cut = [...svg.querySelectorAll('line.link.cut')].map(l => l.dataset.a + '-' +
      l.dataset.b).sort().join(' ');
    log.dataset.hosts = [...svg.querySelectorAll('g.host')].map(g => g.dataset.host + ':' +
      g.dataset.group).sort().join(' ');
  }
  const say = document.getElementById('partition');
  say.textContent = p ? 'partition since ' + (p.since_s === null ? '?' : p.since_s.toFixed(2) +
    ' s') + ': ' + p.groups.map(g => g.join(' ')).join(' | ') : 'no partition';
  say.dataset.groups = p ? JSON.stringify(p.groups) : '';
};
es.addEventListener('partition', (e) => drawPartition(JSON.parse(e.data)));
es.addEventListener('end', () => {
  es.close();
  document.getElementById('status').textContent = 'finished after ' + updates + ' updates';
});
"""


def live_page(rel: str, live: LiveRun) -> str:
    from analysis import plots
    from analysis.topology_view import topology_svg

    try:
        lock = yaml.safe_load((live.d / "spec.lock.yaml").read_text())
    except (OSError, yaml.YAMLError):
        lock = None
    svg, caption = topology_svg(lock if isinstance(lock, dict) else {}, 760, 380)
    topology = (f'<h2>Topology</h2><p id="partition" data-groups="">no partition</p>{svg}'
                f"<p><small>{caption}; during a partition the hosts take the colour of their "
                "group and the cut links are dashed</small></p>") if svg else (
                    '<p id="partition" data-groups="">no partition</p>')
    topology += '<h3>Partitions drawn</h3><ol id="partitions"></ol>'
    groups = json.dumps([plots.color(i) for i in range(len(plots.PALETTE))])
    rows = "".join(
        f'<tr id="node-{html.escape(h)}"><td class="l">{html.escape(h)}</td>'
        + "".join(f'<td id="{k}-{html.escape(h)}">–</td>' for k in ("sent", "delivered",
                                                                       "p50", "p99"))
        + "</tr>" for h in live.hosts)
    return (f'<p><span id="status" data-updates="0">connecting</span> · '
            f'<a href="{_href(rel + "/spec.lock.yaml")}">spec.lock.yaml</a></p>'
            '<table id="live"><thead><tr><th class="l">node</th><th>sent</th>'
            '<th>final-delivered</th><th>p50 ms</th><th>p99 ms</th></tr></thead>'
            f'<tbody>{rows}</tbody></table><h2>Faults</h2><ul id="faults"></ul>'
            f'{topology}<h2>Updates</h2><ol id="history"></ol>'
            f"<script>const GROUPS = {groups};\n{_LIVE_JS}</script>")


# --- pages ------------------------------------------------------------------------------------

_CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse}th,td{padding:.25em .6em;border-bottom:1px solid #ddd;
text-align:right;white-space:nowrap}th{background:#f4f4f4}td.l,th.l{text-align:left}
th a{color:#222;text-decoration:none}.PASS{color:#17803d;font-weight:600}
.FAIL{color:#b91c1c;font-weight:600}.RUNNING{color:#1d4ed8}nav a{margin-right:1em}
form.filter{margin:.8em 0}small{color:#666}
svg.topo line.link.cut{stroke:#D55E00;stroke-dasharray:6 4;stroke-opacity:1;stroke-width:2}"""


def _page(title: str, body: str, run: str = "") -> HTMLResponse:
    nav = ('<nav><a href="/">runs</a><a href="/nightly">nightly</a>'
           '<a href="/explore">explorations</a></nav>')
    return HTMLResponse(f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
                        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>"
                        f'<body data-run="{html.escape(run)}">{nav}<h1>{html.escape(title)}'
                        f"</h1>{body}</body></html>")


def _href(path: str) -> str:
    return "/r/" + urllib.parse.quote(path)


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
        link = (f'<a href="{_href(r["path"] + "/report.html")}">{html.escape(r["run"])}</a>'
                if r["report"] else html.escape(r["run"]))
        if r["verdict"] == "RUNNING":
            live = "/live/" + urllib.parse.quote(r["path"])
            link += f' · <a class="live" href="{live}">live</a>'

        why = html.escape("; ".join(r["reasons"]))
        kinds = html.escape(", ".join(r["fault_kinds"]))
        body.append(
            f'<tr class="run" data-run="{html.escape(r["path"])}">'
            f'<td><input type="checkbox" name="run" value="{html.escape(r["path"])}"></td>'
            f'<td class="l">{html.escape(r["date"])}</td>'
            f'<td class="l">{html.escape(r["experiment"])}<br><small>{link}</small></td>'
            f'<td class="l">{html.escape(r["backend"])}</td>'
            f'<td class="l">{html.escape(r["protocol"])}</td><td>{r["hosts"]}</td>'
            f'<td title="{kinds}">{r["faults"]}</td>'
            f'<td class="l {r["verdict"].split()[0]}" title="{why}">{r["verdict"]}</td>'
            f'<td class="p50">{_fmt(r["p50"])}</td><td class="p99">{_fmt(r["p99"])}</td>'
            f'<td>{_fmt(r["throughput"])}</td></tr>')
    options = "".join(f'<option{" selected" if verdict == v else ""}>{v}</option>'
                      for v in ("", "PASS", "FAIL", "RUNNING", "NOT ANALYSED"))
    filter_form = (f'<form class="filter" method="get" action="/">'
                   f'<input type="hidden" name="sort" value="{html.escape(sort)}">'
                   f'<input type="hidden" name="order" value="{html.escape(order)}">'
                   f'<input name="q" placeholder="filter: experiment, protocol, fault, ..." '
                   f'value="{html.escape(q)}" size="40"> verdict <select name="verdict">'
                   f'{options}</select> <button>filter</button></form>')
    header = "<th></th>" + "".join(head(k, label) for k, label in COLUMNS)
    return (filter_form + f'<form method="get" action="/compare"><p>{len(rows)} runs · '
            f'<button id="compare">compare ticked runs</button></p>'
            f'<table id="runs"><thead><tr>{header}</tr></thead><tbody>{"".join(body)}'
            f"</tbody></table></form>")


def build_app(roots: list[Path], credentials: Credentials | None = None) -> Starlette:
    """The application over `roots`; `credentials` makes every request authenticate."""
    roots = [Path(r).resolve() for r in roots]

    async def index(request: Request) -> Response:
        p = request.query_params
        sort, order = p.get("sort", "date"), p.get("order", "desc")
        q, verdict = p.get("q", ""), p.get("verdict", "")
        rows = sort_filter(scan(roots).runs, sort, order, q, verdict)
        folders = ", ".join(html.escape(str(r)) for r in roots)
        return _page("testbed runs", f"<p><small>{folders}</small></p>"
                     + runs_table(rows, sort, order, q, verdict))

    async def api_runs(request: Request) -> Response:
        return JSONResponse(scan(roots).runs)

    async def file(request: Request) -> Response:
        path = safe_file(roots, request.path_params["path"])
        if path is None:
            return Response("not found\n", status_code=404, media_type="text/plain")
        media = {".yaml": "text/plain; charset=utf-8", ".jsonl": "text/plain; charset=utf-8",
                 ".log": "text/plain; charset=utf-8"}.get(path.suffix)
        return FileResponse(path, media_type=media)

    async def compare(request: Request) -> Response:
        from analysis import report_data as rd
        from analysis.report import render_comparison

        picked = request.query_params.getlist("run")
        runs = []
        for rel in picked:
            summary_file = safe_file(roots, f"{rel}/spec.lock.yaml")
            if summary_file is None or not _is_run(summary_file.parent):
                return Response(f"no run {rel!r} under the served folders\n",
                                status_code=404, media_type="text/plain")
            d = summary_file.parent
            runs.append((_read_json(d / "summary.json"), rd.load_run(d)))
        if len(runs) < 2:
            return Response("tick at least two runs to compare\n", status_code=400,
                            media_type="text/plain")
        return HTMLResponse(render_comparison(runs))

    async def nightly(request: Request) -> Response:
        found = scan(roots).nightly
        items = "".join(f'<li><a href="{_href(n["path"])}">{html.escape(n["name"])}</a></li>'
                        for n in found) or "<li>no nightly.html under the folders</li>"
        return _page("nightly trend reports", f"<ul>{items}</ul>")

    async def explore(request: Request) -> Response:
        found = scan(roots).explore
        items = "".join(
            f'<li><a href="{_href(e["path"])}">{html.escape(e["name"])}</a> · '
            f'{e["reproducers"]} reproducer(s) '
            f'<small>{html.escape(e["reproducers_path"])}</small></li>' for e in found
        ) or "<li>no explorations (seeds.parquet and index.html) under the folders</li>"
        return _page("explorations", f"<ul>{items}</ul>")

    def run_dir(rel: str) -> Path | None:
        lock = safe_file(roots, f"{rel}/spec.lock.yaml")
        return lock.parent if lock is not None and _is_run(lock.parent) else None

    async def live(request: Request) -> Response:
        rel = request.path_params["path"].rstrip("/")
        d = run_dir(rel)
        if d is None:
            return Response("not found\n", status_code=404, media_type="text/plain")
        return _page(f"live: {d.name}", live_page(rel, LiveRun(d)), run=rel)

    async def events(request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import StreamingResponse

        rel = request.path_params["path"].rstrip("/")
        d = run_dir(rel)
        if d is None:
            return Response("not found\n", status_code=404, media_type="text/plain")
        watch = LiveRun(d)

        async def stream() -> Any:
            partition = "null"
            while True:
                try:
                    state = await run_in_threadpool(watch.poll)
                except Exception as exc:  # noqa: BLE001 - a bad poll ends the stream, said
                    yield f"event: end\ndata: {json.dumps({'error': str(exc)})}\n\n"
                    return
                drawn = json.dumps(state["partition"])
                if drawn != partition:  # the partition in force changed: say so at once
                    partition = drawn
                    yield f"event: partition\ndata: {drawn}\n\n"
                yield f"data: {json.dumps(state)}\n\n"
                if state["finished"]:
                    yield "event: end\ndata: {}\n\n"
                    return
                if await request.is_disconnected():
                    return
                await asyncio.sleep(LIVE_EVERY_S)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store"})

    routes = [Route("/", index), Route("/api/runs", api_runs), Route("/compare", compare),
              Route("/live/{path:path}", live), Route("/events/{path:path}", events),
              Route("/nightly", nightly), Route("/explore", explore),
              Route("/r/{path:path}", file)]
    middleware = ([Middleware(AuthMiddleware, credentials=credentials)]
                  if credentials is not None else [])
    return Starlette(routes=routes, middleware=middleware)


def serve_in_background(roots: list[Path], port: int, host: str = "127.0.0.1") -> Any:
    """`testbed run --serve`: the same application on `host`:`port` (loopback only: no
    credentials) in a daemon thread for the life of the run; returns a function that stops
    it. OSError when the port is taken."""
    import threading

    import uvicorn

    if not is_local(host):
        raise ValueError("testbed run --serve binds loopback only; use testbed serve --host")
    with socket.socket() as probe:  # a taken port: one sentence, not a thread dying later
        probe.bind((host, port))
    server = uvicorn.Server(uvicorn.Config(build_app(roots), host=host, port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, name="testbed-serve", daemon=True)
    thread.start()

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=5)

    return stop
