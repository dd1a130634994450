"""The live view of a running run in `testbed serve` (docs/serve.md): per node the messages
sent and final-delivered (from the nodes' management endpoints) and the latency quantiles
(from the delivery logs' new lines), the faults as a timeline, the partition in force drawn
on the topology; pushed as server-sent events about once a second until the run ends, then
its verdict (summary.json's `ok` and reasons, once the analysis wrote them) and a link to
its report."""

from __future__ import annotations

import asyncio
import collections
import html
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import yaml

from analysis.deliverylog import parse_line
from testbed.serve.files import read_json
from testbed.serve.page import href
from testbed.serve.runs import finished, reasons_of, verdict_of

NODE_MBEAN = "testbed:type=Node"
LIVE_EVERY_S = 1.0
LATENCY_WINDOW = 2000  # the last deliveries per node its quantiles are taken over
ANALYSIS_WAIT_S = 1800.0  # how long the stream waits for the analysis of a run that ended


def fault_words(rec: dict[str, Any], hosts: list[str]) -> str:
    """What a fault record does, in a few words: a partition's groups, else its hosts and
    scalar parameters."""
    given = rec.get("params")
    params: dict[str, Any] = given if isinstance(given, dict) else {}
    cuts = params.get("cuts")
    if rec.get("kind") == "partition" and isinstance(cuts, list):
        from analysis.topology_view import groups_after

        pairs = {(c[0], c[1]) for c in cuts if isinstance(c, list) and len(c) == 2
                 and all(isinstance(h, str) for h in c)}
        return " | ".join(" ".join(g) for g in groups_after(pairs, hosts))
    words = [" ".join(str(h) for h in rec.get("hosts") or [])]
    words += [f"{k} {v}" for k, v in params.items() if isinstance(v, str | int | float)]
    return ", ".join(w for w in words if w)


def will_analyse(d: Path) -> bool:
    """The run's `begin` journal record says an analysis follows it (`testbed run` without
    `--no-analyze`)."""
    try:
        with (d / "journal.jsonl").open() as f:
            first = json.loads(f.readline() or "{}")
    except (OSError, ValueError):
        return False
    return isinstance(first, dict) and first.get("op") == "begin" and bool(first.get("analyze"))


def outcome(rel: str, d: Path) -> dict[str, Any] | None:
    """The end of a run that stopped, for its live page: the verdict summary.json states and
    its reasons, links to the report and summary; None while its analysis is still to come."""
    summary = read_json(d / "summary.json")
    done = bool(summary) and (d / "report.html").is_file()
    if not done and will_analyse(d):
        return None
    return {"verdict": verdict_of(summary) or "NOT ANALYSED",
            "reasons": reasons_of(summary),
            "report": href(rel + "/report.html") if (d / "report.html").is_file() else None,
            "summary": href(rel + "/summary.json") if summary else None}


class LiveRun:
    """What a running run shows, polled about once a second: per node the `Progress` of its
    management endpoint (messages sent, final deliveries), read over the control plane as the
    drain reads it (testbed/drain.py), with the run's token when it has one (for a node
    without one, the simulator's, its log's `send` and `fnl` lines counted); per node the
    final-delivery latency quantiles of its last deliveries, from the delivery logs' new lines
    (send time from the sender's log, first `fnl` from the receiver's); the fault records
    (faults.jsonl) as they are written. Reads only."""

    def __init__(self, d: Path):
        self.d = d
        plan = read_json(d / "plan.json")
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
        self.t_last: int | None = None
        # per node, sends and final deliveries counted in its log: the counts of a node
        # without a management endpoint (the simulator's)
        self.logged: dict[str, dict[str, int]] = {h: {"sent": 0, "delivered": 0}
                                                  for h in self.hosts}
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

        info = read_json(self.d / "nodes" / host / "control.json")
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
                if self.t_last is None or rec["t"] > self.t_last:
                    self.t_last = rec["t"]
                mid = rec.get("mid")
                count = self.logged.setdefault(host, {"sent": 0, "delivered": 0})
                if rec.get("ev") == "send" and isinstance(mid, str):
                    self.send_t.setdefault(mid, rec["t"])
                    count["sent"] += 1
                elif rec.get("ev") == "fnl" and isinstance(mid, str):
                    fnls.append((host, mid, rec["t"]))
                    count["delivered"] += 1
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
            logged = self.logged.get(h, {})
            nodes[h] = {
                "reachable": reachable,
                "sent": p.get("sent") if p else logged.get("sent"),
                "delivered": (sum(v for v in delivered.values() if isinstance(v, int))
                              if isinstance(delivered, dict) else logged.get("delivered")),
                "p50": float(np.quantile(values, 0.5)) if len(values) else None,
                "p99": float(np.quantile(values, 0.99)) if len(values) else None,
            }
        partition = None
        if self.cuts:
            from analysis.topology_view import groups_after

            since = self.cut_since
            partition = {"groups": groups_after(self.cuts, self.hosts),
                         "cuts": sorted([a, b] for a, b in self.cuts),
                         "since_s": ((since - self.t0) / 1e9 if since is not None
                                     and self.t0 is not None else None)}
        return {"nodes": nodes, "faults": self.timeline(), "partition": partition,
                "now_s": self._at(self.t_last), "finished": finished(self.d)}

    def _at(self, t: Any) -> float | None:
        return (t - self.t0) / 1e9 if isinstance(t, int) and self.t0 is not None else None

    def timeline(self) -> list[dict[str, Any]]:
        """One entry per fault (its records paired by their `fault` index): kind, hosts, what
        it does in words, start and stop in seconds from the first logged event (stop None
        while in force)."""
        out: dict[Any, dict[str, Any]] = {}
        for k, rec in enumerate(self.faults):
            key = rec.get("fault", f"record-{k}")
            at = self._at(rec.get("t"))
            if rec.get("phase") == "stop" and key in out:
                out[key]["stop_s"] = at
                continue
            out[key] = {"kind": str(rec.get("kind", "")), "start_s": at, "stop_s": None,
                        "what": fault_words(rec, self.hosts)}
        return list(out.values())

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
const esc = s => String(s).replace(/[&<>"]/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;',
  '"': '&quot;'})[c]);
const status = document.getElementById('status');
let updates = 0;
const totals = [];
const ticks = (end) => {
  const step = [1, 2, 5, 10, 20, 30, 60, 120, 300].find(s => end / s <= 10) || 600;
  const out = [];
  for (let t = 0; t <= end; t += step) out.push(t);
  return out;
};
const drawFaults = (faults, now) => {
  const box = document.getElementById('faults');
  box.dataset.faults = JSON.stringify(faults.map(f => [f.kind, f.start_s, f.stop_s]));
  if (!faults.length) { box.innerHTML = '<p><small>none</small></p>'; return; }
  const end = Math.max(now || 0, 1, ...faults.map(f => Math.max(f.start_s || 0,
    f.stop_s || 0))) * 1.02;
  const W = 760, L = 260, R = 10, row = 24, H = faults.length * row + 26;
  const x = t => L + (W - L - R) * t / end;
  let s = `<svg class="timeline" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">`;
  faults.forEach((f, i) => {
    const y = i * row + 4, a = f.start_s || 0, b = f.stop_s === null ? (now || a) : f.stop_s;
    const open = f.stop_s === null;
    const when = (f.start_s === null ? '?' : f.start_s.toFixed(2)) + '\\u2013' +
      (open ? 'in force' : f.stop_s.toFixed(2) + ' s');
    s += `<g class="fault${open ? ' open' : ''}" data-kind="${esc(f.kind)}">` +
      `<text x="0" y="${y + 15}" font-size="12">${esc(f.kind)} ${esc(f.what)}</text>` +
      `<rect x="${x(a)}" y="${y + 3}" width="${Math.max(3, x(b) - x(a))}" height="16" ` +
      `fill="${GROUPS[1]}" fill-opacity="${open ? 0.45 : 0.8}"><title>${esc(when)}</title>` +
      `</rect><text x="${Math.min(x(b) + 4, W - 90)}" y="${y + 15}" font-size="11" ` +
      `fill="#555">${esc(when)}</text></g>`;
  });
  const base = faults.length * row + 6;
  s += `<line x1="${L}" x2="${W - R}" y1="${base}" y2="${base}" stroke="#999"/>`;
  for (const t of ticks(end)) s += `<text x="${x(t)}" y="${base + 14}" font-size="10" ` +
    `text-anchor="middle" fill="#555">${t} s</text>`;
  box.innerHTML = s + '</svg>';
};
const drawHistory = () => {
  const svg = document.getElementById('history');
  svg.dataset.totals = totals.join(' ');
  const W = 760, H = 120, top = Math.max(1, ...totals);
  const pts = totals.map((v, i) => (40 + (W - 50) * (totals.length > 1 ? i /
    (totals.length - 1) : 0)).toFixed(1) + ',' + (H - 20 - (H - 30) * v / top).toFixed(1));
  svg.innerHTML = `<polyline fill="none" stroke="${GROUPS[0]}" stroke-width="2" ` +
    `points="${pts.join(' ')}"/><text x="40" y="12" font-size="11" fill="#555">${top} ` +
    `final deliveries</text><text x="40" y="${H - 4}" font-size="11" fill="#555">update 1` +
    `</text><text x="${W - 10}" y="${H - 4}" font-size="11" text-anchor="end" ` +
    `fill="#555">update ${totals.length}</text>`;
};
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
  drawFaults(d.faults, d.now_s);
  drawPartition(d.partition);
  totals.push(Object.values(d.nodes).reduce((a, n) => a + (n.delivered || 0), 0));
  drawHistory();
  status.textContent = 'running: update ' + updates;
  status.dataset.updates = updates;
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
es.addEventListener('analysing', () => {
  status.textContent = 'run ended after ' + updates + ' updates; analysing\\u2026';
});
es.addEventListener('end', (e) => {
  es.close();
  const d = JSON.parse(e.data);
  status.textContent = 'finished: ';
  const v = document.createElement('span');
  v.id = 'verdict';
  v.className = d.verdict.replace(' ', '-');
  v.textContent = d.verdict;
  status.appendChild(v);
  status.dataset.verdict = d.verdict;
  if (d.reasons.length) status.append(' (' + d.reasons.join('; ') + ')');
  for (const [id, url, text] of [['report', d.report, 'report'],
                                 ['summary', d.summary, 'summary.json']]) {
    if (!url) continue;
    status.append(' \\u00b7 ');
    const a = document.createElement('a');
    a.id = id; a.href = url; a.textContent = text;
    status.appendChild(a);
  }
  if (d.error) status.append(' (the stream ended: ' + d.error + ')');
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
    return (f'<p class="status"><span id="status" data-updates="0">connecting</span></p>'
            f'<p><a href="{href(rel + "/spec.lock.yaml")}">spec.lock.yaml</a> · '
            '<a href="/">all runs</a></p>'
            '<table id="live"><thead><tr><th class="l">node</th><th>sent</th>'
            '<th>final-delivered</th><th>p50 ms</th><th>p99 ms</th></tr></thead>'
            f'<tbody>{rows}</tbody></table><h2>Faults</h2><div id="faults"></div>'
            f'{topology}<h2>Final deliveries, all nodes</h2>'
            '<svg id="history" width="760" height="120" viewBox="0 0 760 120"></svg>'
            f"<script>const GROUPS = {groups};\n{_LIVE_JS}</script>")


def _event(name: str, data: Any) -> str:
    return (f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}\n\n"


async def stream(rel: str, d: Path, gone: Callable[[], Any]) -> AsyncIterator[str]:
    """The live page's events: an update about every LIVE_EVERY_S (`partition` at once when
    the partition in force changes) until the run stops; then `analysing` while its analysis
    runs, and `end` with its outcome. Stops when the client (`gone()`) has left."""
    from starlette.concurrency import run_in_threadpool

    watch = LiveRun(d)
    partition = "null"
    while True:
        try:
            state = await run_in_threadpool(watch.poll)
        except Exception as exc:  # noqa: BLE001 - a bad poll ends the stream, said
            yield _event("end", {"verdict": "", "reasons": [], "report": None, "summary": None,
                                 "error": str(exc)})
            return
        drawn = json.dumps(state["partition"])
        if drawn != partition:  # the partition in force changed: say so at once
            partition = drawn
            yield f"event: partition\ndata: {drawn}\n\n"
        yield _event("", state)
        if state["finished"]:
            break
        if await gone():
            return
        await asyncio.sleep(LIVE_EVERY_S)
    deadline = time.monotonic() + ANALYSIS_WAIT_S
    said = False
    while (end := outcome(rel, d)) is None and time.monotonic() < deadline:
        if not said:
            yield _event("analysing", {})
            said = True
        if await gone():
            return
        await asyncio.sleep(LIVE_EVERY_S)
    yield _event("end", end or {"verdict": "NOT ANALYSED", "reasons": [
        f"no summary.json {ANALYSIS_WAIT_S:.0f} s after the run ended"], "report": None,
        "summary": None})
