"""`testbed serve` as a real server on loopback: the runs table lists runs made here and sorts
and filters them, reports and comparisons open, `..` and symlinked paths are refused, and a
non-local bind serves TLS and refuses requests without the token or the Basic credential;
headless Chromium loads the table and a report (screenshots in the test's tmp folder)."""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chromium import CHROMIUM, DevTools, browse
from tests.inproc import run_cli
from tests.procs import stop_process

ROOT = Path(__file__).resolve().parents[1]

# Two hosts, one one-way delay each: the runs' latencies differ by construction.
TOPO = """\
name: pair
hosts: [{{name: a}}, {{name: b}}]
matrix: {{a: {{b: {delay}}}, b: {{a: {delay}}}}}
"""
EXP = """\
name: {name}
topology: topo-{name}.yaml
backend: sim
duration: 1s
drain: 1s
seed: 2
protocol: {{name: reliable-nack}}
workload: {{rate: 20/s, size: 100B, arrival: poisson}}
"""
DELAYS = {"near": "5ms", "far": "60ms", "mid": "20ms"}
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three sim runs (never analysed; their reports written by `testbed report`)."""
    root = tmp_path_factory.mktemp("served")
    specs = tmp_path_factory.mktemp("specs")
    for name, delay in DELAYS.items():
        (specs / f"topo-{name}.yaml").write_text(TOPO.format(delay=delay))
        (specs / f"{name}.yaml").write_text(EXP.format(name=name))
        proc = run_cli("run", str(specs / f"{name}.yaml"), "--no-analyze", "--out", str(root))
        assert proc.returncode == 0, proc.stdout + proc.stderr
    for d in root.iterdir():
        proc = run_cli("report", str(d))
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def start(args: list[str], host: str, port: int, ssl_ctx: ssl.SSLContext | None = None
          ) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "serve", *args, "--host", host,
                             "--port", str(port)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=ENV)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("testbed serve did not start listening")


def stop(proc: subprocess.Popen[str]) -> None:
    stop_process(proc)


@pytest.fixture(scope="module")
def local(runs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`testbed serve` on 127.0.0.1 over the runs folder; yields its base URL."""
    state = tmp_path_factory.mktemp("state")
    port = free_port("127.0.0.1")
    proc = start(["--runs", str(runs), "--state", str(state)], "127.0.0.1", port)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop(proc)
    assert not (state / "token").exists()  # a loopback bind needs no credentials


def get(base: str, path: str, headers: dict[str, str] | None = None,
        ctx: ssl.SSLContext | None = None) -> tuple[int, str]:
    host, port = base.rsplit(":", 1)
    conn: http.client.HTTPConnection = (
        http.client.HTTPSConnection(host, int(port), context=ctx, timeout=30)
        if ctx is not None else http.client.HTTPConnection(host, int(port), timeout=30))
    conn.request("GET", path, headers=headers or {})  # the path goes out as given
    resp = conn.getresponse()
    body = resp.read().decode(errors="replace")
    conn.close()
    return resp.status, body


def table_rows(page: str) -> list[tuple[str, float]]:
    """(experiment, p99) of each row of the runs table, in page order."""
    out = []
    for m in re.finditer(r'<tr class="run".*?</tr>', page, re.S):
        name = re.search(r'<td class="l">([a-z]+)<br>', m[0])
        p99 = re.search(r'<td class="p99">([0-9.]+)</td>', m[0])
        assert name and p99, m[0]
        out.append((name[1], float(p99[1])))
    return out


def test_table_lists_sorts_and_filters(local: str, runs: Path) -> None:
    status, page = get(local, "/?sort=p99&order=desc")
    assert status == 200
    rows = table_rows(page)
    assert [n for n, _ in rows] == ["far", "mid", "near"]
    # reliable-nack delivers on receipt: p99 is the one-way delay (plus 0 for the own message)
    assert [p for _, p in rows] == [60.0, 20.0, 5.0]
    status, page = get(local, "/?sort=p99&order=asc")
    assert [n for n, _ in table_rows(page)] == ["near", "mid", "far"]
    status, page = get(local, "/?q=mid&sort=p99")
    assert [n for n, _ in table_rows(page)] == ["mid"]
    status, page = get(local, "/?verdict=FAIL")
    assert table_rows(page) == []
    status, body = get(local, "/api/runs")
    api = json.loads(body)
    assert {r["experiment"] for r in api} == set(DELAYS)
    assert all(r["backend"] == "sim" and r["protocol"] == "reliable-nack" and r["hosts"] == 2
               and r["verdict"] == "NOT ANALYSED" for r in api)


def test_report_and_comparison_open(local: str, runs: Path) -> None:
    run = next(d.name for d in runs.iterdir() if "-far-" in d.name)
    status, page = get(local, f"/r/{run}/report.html")
    assert status == 200 and "<h1>" in page and run in page
    status, lock = get(local, f"/r/{run}/spec.lock.yaml")
    assert status == 200 and "reliable-nack" in lock
    picked = "&".join(f"run={d.name}" for d in sorted(runs.iterdir())[:2])
    status, page = get(local, f"/compare?{picked}")
    assert status == 200 and "Comparison of 2 runs" in page
    status, _ = get(local, "/compare?run=nope&run=../x")
    assert status == 404


def test_paths_outside_the_folders_are_refused(local: str, runs: Path, tmp_path: Path) -> None:
    secret = runs.parent / "secret.txt"
    secret.write_text("do not serve")
    run = next(iter(runs.iterdir())).name
    link = runs / run / "escape.txt"
    link.symlink_to(secret)
    try:
        for path in ("/r/../secret.txt", "/r/%2e%2e/secret.txt", f"/r/{run}/../../secret.txt",
                     "/r//etc/passwd", f"/r/{run}/escape.txt", "/r/" + str(secret),
                     "/r/..%2fsecret.txt"):
            status, body = get(local, path)
            assert status == 404 and "do not serve" not in body, (path, status)
        status, _ = get(local, f"/r/{run}/spec.lock.yaml")
        assert status == 200
    finally:
        link.unlink()
        secret.unlink()


def test_non_local_bind_needs_credentials_and_tls(runs: Path, tmp_path: Path) -> None:
    """On 127.0.0.2 (loopback, but not the default address) the server speaks TLS with a
    certificate of testbed/certs.py and refuses requests without the token or Basic."""
    host = "127.0.0.2"
    port = free_port(host)
    state = tmp_path / "state"
    proc = start(["--runs", str(runs), "--state", str(state)], host, port)
    base = f"{host}:{port}"
    try:
        ctx = ssl.create_default_context(cafile=str(state / "certs" / "ca.pem"))
        token = (state / "token").read_text().strip()
        basic = (state / "basic").read_text().strip()
        assert oct((state / "token").stat().st_mode & 0o777) == "0o600"
        assert get(base, "/", ctx=ctx)[0] == 401
        assert get(base, "/api/runs", {"Authorization": "Bearer wrong"}, ctx=ctx)[0] == 401
        assert get(base, "/r/x", {"Authorization": "Basic !!"}, ctx=ctx)[0] == 401
        status, body = get(base, "/api/runs", {"Authorization": f"Bearer {token}"}, ctx=ctx)
        assert status == 200 and len(json.loads(body)) == 3
        auth = base64.b64encode(basic.encode()).decode()
        assert get(base, "/", {"Authorization": f"Basic {auth}"}, ctx=ctx)[0] == 200
        assert get(base, f"/?token={token}", ctx=ctx)[0] == 200
        # No plain HTTP on that address.
        with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
            status, _ = get(base, "/")
            assert status >= 400
            raise ConnectionError(f"plain HTTP answered {status}")
    finally:
        stop(proc)


@pytest.mark.skipif(CHROMIUM is None and os.environ.get("CI") != "true",
                    reason="chromium is not installed (apt-get install chromium)")
def test_chromium_loads_table_sorted_by_p99_and_a_report(local: str, runs: Path,
                                                         tmp_path: Path) -> None:
    dom = browse(f"http://{local}/?sort=p99&order=desc")
    assert [n for n, _ in table_rows(dom)] == ["far", "mid", "near"]
    browse(f"http://{local}/?sort=p99&order=desc", tmp_path / "runs-table.png")
    run = next(d.name for d in runs.iterdir() if "-near-" in d.name)
    dom = browse(f"http://{local}/r/{run}/report.html")
    assert f"<h1>{run}</h1>" in dom and 'data-plot="latency"' in dom
    browse(f"http://{local}/r/{run}/report.html", tmp_path / "report.png")
    for shot in ("runs-table.png", "report.png"):
        assert (tmp_path / shot).stat().st_size > 5000, shot


def test_nightly_and_explore_pages(local: str, runs: Path) -> None:
    """A trend report written by the nightly's writer (one night whose run is a served run)
    and a real two-seed exploration, both found under the served folder and opened."""
    from testbed.nightly.catalogue import load_catalogue
    from testbed.nightly.detect import judge
    from testbed.nightly.history import Outcome, read_history, write_night
    from testbed.nightly.trend import write_trend

    run = next(d for d in runs.iterdir() if "-mid-" in d.name)
    history = runs.parent / "history"
    outcome = Outcome("smoke.seto.sim", "reliable-nack", "sim", "pass", "",
                      metrics={"latency.fnl.all.p50_ms": (10.0, "up")}, run_dir=str(run))
    write_night(history, "2026-11-25", "smoke", [outcome], "ab" * 20, {"python": "3"},
                {"cpus": 2})
    catalogue = load_catalogue()
    write_trend(judge(read_history(history), catalogue.thresholds, catalogue.index.flaky),
                runs / "smoke" / "nightly.html")
    proc = run_cli("explore", str(ROOT / "experiments" / "quickstart.yaml"), "--seeds", "2",
                   "--duration", "2s", "--workers", "1", "--shrink", "0", "--out",
                   str(runs / "explore" / "quick"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status, page = get(local, "/nightly")
    assert status == 200 and 'href="/r/smoke/nightly.html"' in page
    status, page = get(local, "/r/smoke/nightly.html")
    assert status == 200 and "smoke.seto.sim" in page
    status, page = get(local, "/explore")
    assert status == 200 and 'href="/exploration/explore/quick"' in page
    status, page = get(local, "/exploration/explore/quick")
    assert status == 200 and 'href="/r/explore/quick/index.html"' in page
    status, page = get(local, "/r/explore/quick/index.html")
    assert status == 200 and "seed" in page
    # Neither is a run: the table holds the three runs and the exploration's one row.
    rows = json.loads(get(local, "/api/runs")[1])
    assert sorted(r["kind"] for r in rows) == ["exploration", "run", "run", "run"]


LIVE_EXP = """\
name: live
topology: topo.yaml
backend: local
duration: 10s
drain: 1s
seed: 4
protocol: {name: reliable-nack}
workload: {rate: 30/s, size: 100B, arrival: poisson}
faults: [{kind: partition, isolate: c, at: 2s, for: 4s}]
"""


# The page's state in one read: the final-delivery total of the node table, the status line,
# the partition drawn on the topology (hosts' groups, cut links) and the partitions' log.
PAGE_STATE = """(() => {
  const cells = [...document.querySelectorAll('td[id^="delivered-"]')];
  const svg = document.querySelector('svg.topo[data-view="topology"]');
  return {
    total: cells.reduce((a, c) => a + (parseInt(c.textContent) || 0), 0),
    updates: parseInt(document.getElementById('status').dataset.updates),
    status: document.getElementById('status').textContent,
    drawn: svg ? (svg.dataset.partition || '') : null,
    cut: svg ? [...svg.querySelectorAll('line.link.cut')].map(l => l.dataset.a + '-' +
      l.dataset.b).sort() : [],
    groups: svg ? Object.fromEntries([...svg.querySelectorAll('g.host')].map(
      g => [g.dataset.host, g.dataset.group])) : {},
    log: [...document.querySelectorAll('#partitions li')].map(li => ({groups: li.dataset.groups,
      cut: li.dataset.cut, hosts: li.dataset.hosts})),
    history: (document.getElementById('history').dataset.totals || '').split(' ').filter(
      x => x).map(Number),
  };
})()"""


def test_live_view_of_a_running_local_run(tmp_path: Path) -> None:
    """A run on the local backend (real node processes on loopback) with a partition while
    `serve` watches: the table marks it RUNNING with a live link; the event stream pushes
    per-node counts from the nodes' management endpoints that grow, and the partition (its
    groups and cuts) as an event when it starts and when it heals. In headless Chromium the
    live page's final-delivered count, read twice while the run is running, grows; the page
    draws the partition on the topology (the isolated host in its own group, its links
    dashed) and its heal; once the run ends the page says so, its per-update totals never
    fell. Screenshots: live-running.png, live-partition.png (when caught during the
    partition), live-healed.png, live-finished.png. The run is started with `--serve`: its own
    server lists it too."""
    root = tmp_path / "runs"
    root.mkdir()
    (tmp_path / "topo.yaml").write_text(
        "name: trio\nhosts: [{name: a}, {name: b}, {name: c}]\n"
        "matrix: {a: {b: 2ms, c: 4ms}, b: {a: 2ms, c: 3ms}, c: {a: 4ms, b: 3ms}}\n")
    (tmp_path / "live.yaml").write_text(LIVE_EXP)
    port = free_port("127.0.0.1")
    server = start(["--runs", str(root), "--state", str(tmp_path / "state")], "127.0.0.1",
                   port)
    base = f"127.0.0.1:{port}"
    browser = DevTools() if CHROMIUM is not None else None  # starts while the run does
    own = free_port("127.0.0.1")  # `testbed run --serve`: its own server beside the run
    run = subprocess.Popen([sys.executable, "-m", "testbed", "run", str(tmp_path / "live.yaml"),
                            "--no-analyze", "--out", str(root), "--serve", "--serve-port",
                            str(own)], cwd=ROOT, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=ENV)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            dirs = list(root.iterdir())
            if dirs and len(list(dirs[0].glob("nodes/*/control.json"))) == 3:
                break
            assert run.poll() is None, run.stdout.read() if run.stdout else ""
            time.sleep(0.1)
        (d,) = root.iterdir()
        if browser is not None:
            browser.open(f"http://{base}/live/{d.name}")
        host, p = base.split(":")
        conn = http.client.HTTPConnection(host, int(p), timeout=30)
        conn.request("GET", f"/events/{d.name}")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("content-type", "").startswith(
            "text/event-stream")
        (row,) = json.loads(get(base, "/api/runs")[1])
        assert row["verdict"] == "RUNNING" and row["backend"] == "local"
        (row,) = json.loads(get(f"127.0.0.1:{own}", "/api/runs")[1])
        assert row["verdict"] == "RUNNING"
        assert f'href="/live/{d.name}"' in get(base, "/")[1]
        running = d / "drain.json"  # written once the run stops sending
        if browser is not None:
            # Two reads of the page while the run runs: the count pushed to it grows.
            first = browser.wait(f"(s => s.updates >= 1 && s.total > 0 && s)({PAGE_STATE})")
            assert not running.exists() and first["status"].startswith("running"), first
            browser.screenshot(tmp_path / "live-running.png")
            second = browser.wait(f"(s => s.total > {first['total']} && s)({PAGE_STATE})")
            assert not running.exists() and second["status"].startswith("running"), second
            assert second["updates"] > first["updates"]
            # The partition as drawn while in force (a picture only: the log below is the check).
            during = browser.wait(f"(s => s.log.length >= 1 && s)({PAGE_STATE})")
            if len(during["log"]) == 1:
                assert during["drawn"] == "c | a b" and during["cut"] == ["a-c", "b-c"], during
                browser.screenshot(tmp_path / "live-partition.png")
        # The event stream (opened before the partition, read below): counts from management
        # that grow, the partition as it happens.
        pushed: list[dict[str, Any]] = []
        partitions: list[Any] = []
        event = "message"
        while len(partitions) < 2 or len(pushed) < 3:
            line = resp.readline().decode()
            assert line, (pushed[-1:], partitions)  # the stream ended first
            if line.startswith("event: "):
                event = line[7:].strip()
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                if event == "partition":
                    partitions.append(data)
                elif event == "message":
                    pushed.append(data)
                    assert data["partition"] == (partitions[-1] if partitions else None)
            elif not line.strip():
                event = "message"
        conn.close()
        assert partitions[0]["groups"] == [["c"], ["a", "b"]], partitions
        assert sorted(map(tuple, partitions[0]["cuts"])) == [
            ("a", "c"), ("b", "c"), ("c", "a"), ("c", "b")]
        assert partitions[1] is None  # then healed
        # since the workload's start, as the spec's `at: 2s` counts (applied on the wall clock)
        assert 1.9 <= partitions[0]["since_s"] <= 3.5, partitions[0]
        totals = [sum(n["delivered"] or 0 for n in e["nodes"].values()) for e in pushed]
        assert totals[0] < totals[-1], totals
        if browser is not None:
            # The page drew the partition when it came and its heal: each entry of its log
            # says what the topology showed just after drawing (c in a group of its own, its
            # two links dashed; then no group and no cut link).
            state = browser.wait(f"(s => s.log.length >= 2 && s)({PAGE_STATE})")
            assert state["log"][:2] == [{"groups": '[["c"],["a","b"]]', "cut": "a-c b-c",
                                         "hosts": "a:1 b:1 c:0"},
                                        {"groups": "", "cut": "", "hosts": "a: b: c:"}], state
            assert state["drawn"] == "" and state["cut"] == [], state
            browser.screenshot(tmp_path / "live-healed.png")
            final = browser.wait(f"(s => s.status.startsWith('finished') && s)({PAGE_STATE})")
            assert final["status"] == "finished: NOT ANALYSED", final  # --no-analyze
            history = final["history"]
            assert len(history) >= 3 and history == sorted(history), history
            browser.screenshot(tmp_path / "live-finished.png")
            for shot in ("live-running.png", "live-finished.png"):
                assert (tmp_path / shot).stat().st_size > 5000, shot
        # The run ended (not analysed); `run --serve` keeps serving its live page until Ctrl-C.
        deadline = time.monotonic() + 120
        while json.loads(get(f"127.0.0.1:{own}", "/api/runs")[1])[0]["verdict"] == "RUNNING":
            assert time.monotonic() < deadline, "the run never ended"
            time.sleep(0.5)
        assert get(f"127.0.0.1:{own}", f"/live/{d.name}")[0] == 200 and run.poll() is None
        run.send_signal(signal.SIGINT)
        out, _ = run.communicate(timeout=60)
        assert run.returncode == 0, out
        assert f"live view: http://127.0.0.1:{own}/live/{d.name}" in out
        assert f"serving the result at http://127.0.0.1:{own}/live/{d.name} until Ctrl-C" in out
        (row,) = json.loads(get(base, "/api/runs")[1])
        assert row["verdict"] == "NOT ANALYSED" and row["p50"] is not None
    finally:
        if browser is not None:
            browser.close()
        if run.poll() is None:  # a failed check: interrupt the run, undo what it made
            stop_process(run, signal.SIGINT, timeout_s=30)
            run_cli("teardown", "--runs", str(root))
        stop(server)


def test_run_serve_on_a_taken_port_is_one_sentence(tmp_path: Path) -> None:
    (tmp_path / "topo.yaml").write_text(TOPO.format(delay="5ms"))
    (tmp_path / "x.yaml").write_text(EXP.format(name="x").replace("topo-x.yaml", "topo.yaml"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_cli("run", str(tmp_path / "x.yaml"), "--out", str(tmp_path / "runs"),
                       "--serve", "--serve-port", str(port))
    assert proc.returncode == 2
    assert f"--serve: cannot listen on 127.0.0.1:{port}" in proc.stderr
    assert not (tmp_path / "runs").exists()
