"""One verdict per run, shown the same everywhere: one run per outcome on the simulator, and
for each the console's last line, the exit code, summary.json's `ok` and `verdict`,
report.html and `testbed serve`'s listing agree (analysis/verdict.py). Judged in-process
(`--engine in-process`) but for the failed latency expectation, which the Spark analysis
measures."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analysis.verdict import verdict_line
from testbed import runner
from tests.eventlogs import run_dir_of
from tests.inproc import run_cli

TWO_SITES = """\
topology:
  name: two
  sites: {{a: {{lan: {{delay: 1ms}}}}, b: {{lan: {{delay: 1ms}}}}}}
  wan: [{{from: a, to: b, delay: {wan}}}, {{from: b, to: a, delay: {wan}}}]
  hosts: [{{name: h1, site: a}}, {{name: h2, site: a}}, {{name: h3, site: b}},
          {{name: h4, site: b}}]
"""


def spec(name: str, *, wan: str = "10ms", duration: str = "2s", drain: str = "1s",
         drain_max: str = "5s", extra: str = "") -> str:
    return (f"name: {name}\nbackend: sim\nseed: 3\nduration: {duration}\ndrain: {drain}\n"
            f"drain_max: {drain_max}\n"
            "protocol: {name: sequencer, params: {sequencer: h1}}\n"
            "workload: {senders: all, rate: 20/s, size: 100B, arrival: poisson}\n"
            + TWO_SITES.format(wan=wan) + extra)


SPECS = {
    "ok": spec("ok", extra="expect:\n  - checks.total_order.violations == 0\n  - ok == 1\n"),
    # every message of the last 0.2 s is still on a 1.5 s link when the drain gives up
    "stalled": spec("stalled", wan="1500ms", drain="200ms", drain_max="200ms"),
    # the sequencer crashes for good: the protocol claims no progress without it
    "stalled-as-claimed": spec("stalled-as-claimed", drain="500ms", drain_max="1s", extra=(
        "faults:\n  - {kind: crash, host: h1, at: 1s}\n")),
    "expectation-in-process": spec("expectation-in-process", extra=(
        "expect:\n  - checks.total_order.violations == 0\n  - node_errors.total > 0\n")),
    "bound-not-judged": """\
name: bound-not-judged
topology:
  name: skewed
  hosts:
    - {name: a, clock: {offset: -15ms}}
    - {name: b, clock: {offset: 15ms}}
    - {name: c}
  matrix:
    a: {b: 10ms, c: 40ms}
    b: {a: 10ms, c: 10ms}
    c: {a: 10ms, b: 10ms}
backend: sim
outside_model: true
duration: 3s
drain: 1s
seed: 1
protocol: {name: qos-cbr, params: {delta: 40ms, gamma: 10ms, rate: 50}}
workload: {senders: all, rate: 20/s, size: 100B, arrival: poisson}
""",
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A runs folder and `testbed serve` over it (testbed/serve/, loopback)."""
    from testbed.serve.app import serve_in_background

    root = tmp_path_factory.mktemp("verdicts")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    stop = serve_in_background([root], port)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/", timeout=5).close()
            break
        except OSError:
            time.sleep(0.1)
    yield root, url
    stop()


def listed(url: str, run: str, state: str) -> bool:
    """Whether serve's table filtered to `state` (`?verdict=PASS`) lists the run."""
    with urllib.request.urlopen(f"{url}/?verdict={state}", timeout=30) as r:
        return f"{run}</a>" in r.read().decode()


def agree(proc: Any, run: Path, url: str) -> dict[str, Any]:
    """Assert every surface reads the run's one verdict; return summary.json."""
    summary = json.loads((run / "summary.json").read_text())
    v = summary["verdict"]
    ok = v["ok"]
    assert summary["ok"] is ok
    last = proc.stdout.strip().splitlines()[-1]
    assert last == verdict_line(summary), proc.stdout[-2000:]
    assert last.startswith("verdict: ok (" if ok else "verdict: NOT OK (")
    assert proc.returncode == (0 if ok else 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    report = (run / "report.html").read_text()
    assert ('class="banner pass">PASS' in report) is ok
    assert ('class="banner fail">FAIL' in report) is (not ok)
    assert listed(url, run.name, "PASS") is ok
    assert listed(url, run.name, "FAIL") is (not ok)
    return summary


def run_spec(root: Path, name: str, *args: str) -> tuple[Any, Path]:
    out = root / name
    path = root / f"{name}.yaml"
    path.write_text(SPECS[name])
    proc = run_cli("run", str(path), "--out", str(out), *args)
    return proc, run_dir_of(out)


def test_ok(served: tuple[Path, str]) -> None:
    root, url = served
    proc, run = run_spec(root, "ok", "--engine", "in-process")
    s = agree(proc, run, url)
    assert s["ok"] and s["verdict"]["reasons"] == []
    assert "all 2 expectations hold" in proc.stdout


def test_stalled(served: tuple[Path, str]) -> None:
    root, url = served
    proc, run = run_spec(root, "stalled", "--engine", "in-process")
    s = agree(proc, run, url)
    assert not s["ok"] and s["verdict"]["liveness"] == "stalled"
    # agreement and validity not judged: no count anywhere, why instead
    for name in ("agreement", "validity"):
        assert s["checks"][name]["judged"] is False
        assert s["verdict"]["not_judged"][name].startswith("run not quiescent")
    assert "not judged: agreement, validity (run not quiescent" in proc.stdout
    row = [line for line in proc.stdout.splitlines() if "│ agreement" in line][0]
    assert "not judged" in row and " 0 " not in row, row
    report = (run / "report.html").read_text()
    assert "<td>agreement</td><td class=\"unjudged\">not judged</td>" in report


def test_stalled_as_claimed(served: tuple[Path, str]) -> None:
    root, url = served
    proc, run = run_spec(root, "stalled-as-claimed", "--engine", "in-process")
    s = agree(proc, run, url)
    assert s["ok"] and s["verdict"]["liveness"] == "stalled-as-claimed"
    # an excused stall still judges agreement (no partition open at the end); validity waits
    assert "validity" in s["verdict"]["not_judged"]
    assert "agreement" not in s["verdict"]["not_judged"]
    # the spec's time (`at: 1s`) in the verdict and in the report's fault table alike
    assert s["verdict"]["reasons"][0].startswith("sequencer h1 crashed at 1.0 s: ")
    report = (run / "report.html").read_text()
    assert "<td>crash h1</td><td>1.00</td>" in report


def test_an_expectation_judged_in_process_fails_the_run(served: tuple[Path, str]) -> None:
    root, url = served
    proc, run = run_spec(root, "expectation-in-process", "--engine", "in-process")
    s = agree(proc, run, url)
    assert not s["ok"] and s["verdict"]["safety"] == "held"
    assert s["verdict"]["reasons"] == ["expectation failed: node_errors.total > 0 (0 > 0 fails)"]


def test_bound_not_judged(served: tuple[Path, str]) -> None:
    root, url = served
    proc, run = run_spec(root, "bound-not-judged", "--engine", "in-process")
    s = agree(proc, run, url)
    check = s["checks"]["latency_bound"]
    assert check["judged"] is False and "latency_bound" in s["verdict"]["not_judged"]
    assert not s["ok"]  # a claimed bound not judged vouches for nothing
    assert any(r.startswith("latency_bound: not judged: the run left the bound's model")
               for r in s["verdict"]["reasons"])
    row = [line for line in proc.stdout.splitlines() if "│ latency_bound" in line][0]
    assert "not judged" in row, row


def test_cut_short(served: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    root, url = served
    monkeypatch.setattr(runner, "wall_limit_s", lambda *_: 1.0)
    SPECS["cut-short"] = spec("cut-short", duration="60s").replace("rate: 20/s", "rate: 400/s")
    proc, run = run_spec(root, "cut-short", "--engine", "in-process")
    s = agree(proc, run, url)
    assert not s["ok"] and s["verdict"]["liveness"] == "cut-short"


def test_safety_failed(served: tuple[Path, str]) -> None:
    """A run's log with a message delivered twice (integrity), judged by `testbed analyze`:
    the same surfaces, the exit code `analyze`'s."""
    root, url = served
    SPECS["safety"] = spec("safety")
    proc, run = run_spec(root, "safety", "--engine", "in-process", "--no-analyze")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = run / "nodes" / "h2" / "events.jsonl"
    last = [json.loads(x) for x in log.read_text().splitlines() if '"fnl"' in x][-1]
    again = {**last, "i": last["i"] + 100, "seq": last["seq"] + 1, "t": last["t"] + 1000,
             "lt": last["lt"] + 1000}
    log.write_text(log.read_text() + json.dumps(again) + "\n")
    proc = run_cli("analyze", str(run), "--engine", "in-process")
    s = agree(proc, run, url)
    assert not s["ok"] and s["verdict"]["safety"] == "violated"
    assert s["checks"]["integrity"]["violations"] >= 1


def test_a_failed_latency_expectation_is_the_verdict_everywhere(served: tuple[Path, str]
                                                                ) -> None:
    """The quickstart's shape with `expect: latency.fnl.all.p99_ms < 5`, the Spark analysis."""
    from analysis.expect import parse_expectation, schema_problem

    root, url = served
    SPECS["expectation"] = spec("expectation", extra=(
        "expect:\n  - checks.total_order.violations == 0\n  - latency.fnl.all.p99_ms < 5\n"))
    proc, run = run_spec(root, "expectation")
    s = agree(proc, run, url)
    assert not s["ok"]
    assert proc.stdout.strip().splitlines()[-1].startswith(
        "verdict: NOT OK (safety held, quiescent): expectation failed: "
        "latency.fnl.all.p99_ms < 5 (")
    report = (run / "report.html").read_text()
    assert "expectation failed: latency.fnl.all.p99_ms &lt; 5 (" in report

    # every number of a real summary is a path the schema accepts; no text or section is
    def leaves(node: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
        if isinstance(node, dict) and node:
            for k, v in node.items():
                yield from leaves(v, (*path, k))
        else:
            yield path, node

    for path, value in leaves(s, ()):
        text = ".".join(path) + " == 0"
        problem = schema_problem(parse_expectation(text))
        if isinstance(value, int | float):
            assert problem is None, (text, problem)
        elif isinstance(value, str | list) and path[0] not in ("qos", "optimistic"):
            assert problem is not None, text
