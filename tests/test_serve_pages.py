"""`testbed serve`'s pages as a user meets them, on real servers on loopback over runs made here
(sim backend): the filter on runs with faults, an exploration as one row with its
reproducers on its page, a comparison naming what differs, secrets refused on every bind, a
port in use, and a `run --serve` whose live page ends with the verdict and the report (its
sender x receiver latency matrix, the drawing's sites named). Headless Chromium screenshots
go to the test's tmp folder: filter-faulty.png, runs-exploration.png, exploration.png,
comparison.png, live-verdict.png, report-matrix.png."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chromium import CHROMIUM, DevTools, browse
from tests.inproc import run_cli
from tests.procs import stop_process
from tests.test_serve import ENV, ROOT, free_port, get, start, stop

chromium = pytest.mark.skipif(CHROMIUM is None and os.environ.get("CI") != "true",
                              reason="chromium is not installed (apt-get install chromium)")

TRIO = ("name: trio\nhosts: [{name: a}, {name: b}, {name: c}]\n"
        "matrix: {a: {b: 2ms, c: 4ms}, b: {a: 2ms, c: 3ms}, c: {a: 4ms, b: 3ms}}\n")
# A partition and a crash: the fault kinds the filter once failed on.
FAULTY = """\
name: faulty
topology: trio.yaml
backend: sim
duration: 4s
drain: 1s
seed: {seed}
protocol: {{name: {protocol}}}
workload: {{rate: 20/s, size: 100B, arrival: poisson}}
faults:
- {{kind: partition, isolate: c, at: 1s, for: 1s}}
- {{kind: crash, host: b, at: 2s, for: 1s}}
"""
EXPLORATION = "explore/20261129T010203Z-quickstart"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two faulty sim runs (reliable-nack seed 4, sequencer seed 5; not analysed) and an
    exploration of reliable-nack's total order (it fails: reproducers and a shrunk run)."""
    root = tmp_path_factory.mktemp("served")
    specs = tmp_path_factory.mktemp("specs")
    (specs / "trio.yaml").write_text(TRIO)
    for protocol, seed in (("reliable-nack", 4), ("sequencer", 5)):
        spec = specs / f"{protocol}.yaml"
        spec.write_text(FAULTY.format(protocol=protocol, seed=seed))
        proc = run_cli("run", str(spec), "--no-analyze", "--out", str(root / "runs"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_cli("explore", str(ROOT / "experiments" / "quickstart.yaml"), "--seeds", "4",
                   "--duration", "2s", "--protocol", "reliable-nack", "--check", "total_order",
                   "--workers", "1", "--shrink", "1", "--out", str(root / EXPLORATION))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # seeds failed, as wanted
    return root


@pytest.fixture(scope="module")
def base(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port("127.0.0.1")
    proc = start(["--runs", str(root), "--state", str(tmp_path_factory.mktemp("state"))],
                 "127.0.0.1", port)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop(proc)


def rows(page: str) -> list[tuple[str, str]]:
    """(kind, path) of each row of the runs table, in page order."""
    return re.findall(r'<tr class="(run|exploration)" data-run="([^"]+)"', page)


def faulty_runs(root: Path) -> list[str]:
    """The two runs' paths: reliable-nack's, then sequencer's."""
    by = {protocol_of(d): f"runs/{d.name}" for d in (root / "runs").iterdir()}
    return [by["reliable-nack"], by["sequencer"]]


def protocol_of(d: Path) -> str:
    import yaml

    return str(yaml.safe_load((d / "spec.lock.yaml").read_text())["experiment"]["protocol"]
               ["name"])


def test_filter_on_runs_with_faults(base: str, root: Path, tmp_path: Path) -> None:
    both = sorted(faulty_runs(root))
    for q in ("crash", "partition", "faulty", "crash partition", "trio"):
        status, page = get(base, f"/?q={q.replace(' ', '+')}")
        assert status == 200, (q, page[-500:])
        assert sorted(p for _, p in rows(page)) == both, q
    status, page = get(base, "/?q=sequencer&sort=faults&order=asc")
    assert status == 200 and [p for _, p in rows(page)] == faulty_runs(root)[1:]
    status, page = get(base, "/?q=nothing-like-this")
    assert status == 200 and rows(page) == []
    status, page = get(base, "/?verdict=FAIL&sort=p99")
    assert status == 200 and rows(page) == [("exploration", EXPLORATION)]
    if CHROMIUM is not None:
        dom = browse(f"http://{base}/?q=crash")
        assert sorted(p for _, p in rows(dom)) == both
        browse(f"http://{base}/?q=crash", tmp_path / "filter-faulty.png")
        assert (tmp_path / "filter-faulty.png").stat().st_size > 5000


def test_an_exploration_is_one_row_with_its_reproducers(base: str, root: Path,
                                                        tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    seeds = pq.read_table(root / EXPLORATION / "seeds.parquet").to_pylist()
    failing = [s for s in seeds if not s["ok"]]
    assert failing
    api = json.loads(get(base, "/api/runs")[1])
    assert sorted((r["kind"], r["path"]) for r in api) == sorted(
        [("exploration", EXPLORATION)] + [("run", p) for p in faulty_runs(root)])
    (row,) = [r for r in api if r["kind"] == "exploration"]
    # Named after what it ran (the reproducers' protocol), dated, its seeds counted.
    assert (row["experiment"], row["protocol"], row["backend"], row["date"]) == (
        "quickstart", "reliable-nack", "sim", "2026-11-29 01:02:03")
    assert (row["seeds"], row["failing"], row["verdict"]) == (4, len(failing), "FAIL")
    status, page = get(base, "/")
    assert f'href="/exploration/{EXPLORATION}"' in page and "seed-" not in page
    status, page = get(base, f"/exploration/{EXPLORATION}")
    assert status == 200
    listed = re.findall(r'<tr class="reproducer" data-seed="(\d+)">', page)
    assert [int(s) for s in listed] == [s["seed"] for s in failing]
    for s in failing:
        status, text = get(base, f"/r/{EXPLORATION}/{s['reproducer']}")
        assert status == 200 and text.startswith("# testbed explore reproducer"), s
        assert f'href="/r/{EXPLORATION}/{s["reproducer"]}"' in page
    shrunk = [s for s in failing if s["shrunk_faults"]]
    assert shrunk and all(f'runs/seed-{s["seed"]}</a>' in page for s in shrunk)
    if CHROMIUM is not None:
        dom = browse(f"http://{base}/")
        assert ("exploration", EXPLORATION) in rows(dom)
        browse(f"http://{base}/", tmp_path / "runs-exploration.png")
        dom = browse(f"http://{base}/exploration/{EXPLORATION}")
        assert len(re.findall(r'<tr class="reproducer"', dom)) == len(failing)
        browse(f"http://{base}/exploration/{EXPLORATION}", tmp_path / "exploration.png")
        for shot in ("runs-exploration.png", "exploration.png"):
            assert (tmp_path / shot).stat().st_size > 5000, shot


def test_comparison_names_what_differs(base: str, root: Path, tmp_path: Path) -> None:
    a, b = faulty_runs(root)
    url = f"/compare?run={a}&run={b}"
    status, page = get(base, url)
    assert status == 200
    keys = re.findall(r'<tr class="differs" data-key="([^"]+)"', page)
    # The named keys first (the protocol's params are the same: {}), then the others: the
    # command (each spec file's own path) and nothing else.
    assert keys == ["protocol", "seed", "command"], keys
    assert re.search(r'<td class="l">reliable-nack</td><td class="l">sequencer</td>', page)
    assert '<p id="differs">differ in protocol, seed; other keys below</p>' in page
    assert '<span class="del">-    name: reliable-nack</span>' in page
    assert '<span class="add">+    name: sequencer</span>' in page
    assert '<a id="back" href="/">' in page and "Comparison of 2 runs" in page
    status, same = get(base, f"/compare?run={a}&run={a}")
    assert status == 200 and 'id="differences"' not in same and "(identical specs)" in same
    if CHROMIUM is not None:
        dom = browse(f"http://{base}{url}")
        assert re.findall(r'<tr class="differs" data-key="([^"]+)"', dom) == keys
        browse(f"http://{base}{url}", tmp_path / "comparison.png")
        assert (tmp_path / "comparison.png").stat().st_size > 5000


def _plant_secrets(run: Path) -> list[str]:
    """Beside the run's own token and mgmt.basic: a private key by name, one by content,
    and a file of mode 0600; their paths under the run."""
    key = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n"
    (run / "certs").mkdir(exist_ok=True)
    (run / "certs" / "h1.key").write_text(key)
    (run / "certs" / "bundle.pem").write_text(key)
    (run / "notes.txt").write_text("mine only\n")
    (run / "notes.txt").chmod(0o600)
    (run / "public.txt").write_text("anyone\n")
    for p in ("certs/h1.key", "certs/bundle.pem", "public.txt"):
        (run / p).chmod(0o644)
    assert (run / "token").is_file() and (run / "mgmt.basic").is_file()
    return ["token", "mgmt.basic", "certs/h1.key", "certs/bundle.pem", "notes.txt"]


def test_secrets_are_never_served(base: str, root: Path, tmp_path: Path) -> None:
    """On loopback (no credentials) and on 0.0.0.0 (TLS, the token; fetched via 127.0.0.1):
    every secret of a run is 404, while a plain file beside them is served."""
    run = faulty_runs(root)[0]
    secrets = _plant_secrets(root / run)
    token_text = (root / run / "token").read_text().strip()
    for p in secrets:
        status, body = get(base, f"/r/{run}/{p}")
        assert status == 404 and token_text not in body, p
    assert get(base, f"/r/{run}/public.txt") == (200, "anyone\n")
    port = free_port("0.0.0.0")
    state = tmp_path / "state"
    proc = start(["--runs", str(root), "--state", str(state)], "0.0.0.0", port)
    try:
        ctx = ssl.create_default_context(cafile=str(state / "certs" / "ca.pem"))
        auth = {"Authorization": f"Bearer {(state / 'token').read_text().strip()}"}
        far = f"127.0.0.1:{port}"
        for p in secrets:
            status, body = get(far, f"/r/{run}/{p}", auth, ctx=ctx)
            assert status == 404 and token_text not in body, p
        assert get(far, f"/r/{run}/public.txt", auth, ctx=ctx) == (200, "anyone\n")
        assert get(far, "/r/token", auth, ctx=ctx)[0] == 404  # nor the server's own
    finally:
        stop(proc)


def test_serve_on_a_port_in_use_is_one_line(root: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "testbed", "serve", "--runs", str(root),
                               "--port", str(port)], cwd=ROOT, env=ENV, capture_output=True,
                              text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: cannot listen on 127.0.0.1:{port} (Address already in use); pick another "
        "with --port"], proc.stderr
    assert "serving" not in proc.stdout


# The live page's end: its status line, the verdict shown, the report link.
END_STATE = """(() => {
  const s = document.getElementById('status');
  const r = document.getElementById('report');
  return s.textContent.startsWith('finished') && {status: s.textContent,
    verdict: s.dataset.verdict, report: r ? r.getAttribute('href') : null};
})()"""


@chromium
def test_run_serve_ends_with_the_verdict_and_the_report(tmp_path: Path) -> None:
    """`testbed run --serve` (sim, analysed with Spark): the printed URL is the run's live
    page; it ends with the verdict summary.json states and a link to the report, served
    after the run until Ctrl-C; the report has the header (description, date, seed, backend,
    the reproduce command, the lock), the drain outcome, the latency matrix of
    summary.json's per_pair, and the sites named on the drawing."""
    out = tmp_path / "runs"
    port = free_port("127.0.0.1")
    run = subprocess.Popen([sys.executable, "-m", "testbed", "run", "experiments/quickstart.yaml",
                            "--backend", "sim", "--out", str(out), "--serve", "--serve-port",
                            str(port)], cwd=ROOT, env=ENV, text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
    browser = DevTools()
    try:
        assert run.stdout is not None
        said = ""
        while "live view: " not in said:
            line = run.stdout.readline()
            assert line, said
            said += line
        url = said.split("live view: ", 1)[1].split()[0]
        (d,) = out.iterdir()
        assert url == f"http://127.0.0.1:{port}/live/{d.name}"
        browser.open(url)
        end = browser.wait(END_STATE, timeout=900)  # the analysis on a loaded machine
        browser.screenshot(tmp_path / "live-verdict.png")
        summary = json.loads((d / "summary.json").read_text())
        assert summary["ok"] is True and end["verdict"] == "PASS", (end, summary["verdict"])
        assert end["status"].startswith("finished: PASS") and end["report"] == (
            f"/r/{d.name}/report.html")
        status, report = get(f"127.0.0.1:{port}", end["report"])
        assert status == 200 and run.poll() is None  # still serving after the run
        # The header and the drain.
        assert "Sequencer total order on a two-site WAN" in report
        assert "reproduce: <code>testbed run experiments/quickstart.yaml --backend sim</code>" \
            in report and '<a id="spec-lock" href="spec.lock.yaml">' in report
        stamp = d.name[:16]
        assert (f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]} {stamp[9:11]}:{stamp[11:13]}:"
                f"{stamp[13:15]} UTC") in report
        assert "seed <b>1</b>" in report and "backend <b>sim</b>" in report
        live = summary["liveness"]
        assert live["quiescent"] is True
        assert f"drain: quiescent after {live['drain_s']:g} s" in report
        # The matrix: every pair of summary.json's per_pair, its p99, coloured lowest green
        # to highest red.
        per_pair = summary["latency"]["fnl"]["per_pair"]
        cells = dict(re.findall(r'data-pair="([^"]+)" data-p99="([^"]+)"', report))
        assert {k: float(v) for k, v in cells.items()} == {
            k: float(v["p99_ms"]) for k, v in per_pair.items()}
        assert len(cells) == 16
        p99s = {k: v["p99_ms"] for k, v in per_pair.items()}
        low, high = min(p99s, key=p99s.__getitem__), max(p99s, key=p99s.__getitem__)
        for pair, hue in ((low, 120), (high, 0)):
            assert re.search(rf'data-pair="{re.escape(pair)}" data-p99="[^"]+" '
                             rf'style="background:hsl\({hue},', report), pair
        # The two sites named on the drawing.
        assert 'data-site="lisbon"' in report and 'data-site="boston"' in report
        browser.open(f"http://127.0.0.1:{port}{end['report']}")
        browser.wait("document.querySelectorAll('td.pair').length === 16")
        browser.screenshot(tmp_path / "report-matrix.png")
        for shot in ("live-verdict.png", "report-matrix.png"):
            assert (tmp_path / shot).stat().st_size > 5000, shot
        run.send_signal(signal.SIGINT)
        rest, _ = run.communicate(timeout=60)
        assert run.returncode == 0, said + rest
        assert f"serving the result at {url} until Ctrl-C" in rest
    finally:
        browser.close()
        if run.poll() is None:
            stop_process(run, signal.SIGINT, timeout_s=30)
        if out.is_dir():
            run_cli("teardown", "--runs", str(out))
    with socket.socket() as s:  # nothing listens any more (connections may linger closing)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
