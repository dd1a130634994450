"""Nightly experiments: the catalogue, a simulated week of nights (synthetic metric rows written
through the real history, judged with the catalogue's thresholds), the trend report in headless
Chromium, the CI workflow against GitHub's schema, and the real smoke suite."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from testbed.cli import app
from testbed.doctor import Check
from testbed.nightly.catalogue import load_catalogue, protocols
from testbed.nightly.detect import judge
from testbed.nightly.history import Outcome, read_history, write_night
from testbed.nightly.runner import blockers, run_night
from testbed.nightly.trend import write_trend
from testbed.spec.loader import SpecError
from tests.inproc import run_cli
from tests.test_report import browse, browser

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = load_catalogue()
WEEK = [(date(2026, 11, 16) + timedelta(days=i)).isoformat() for i in range(7)]
METRIC = "latency.fnl.all.p50_ms"  # default thresholds in the catalogue
EXP = "smoke.seto.sim"  # a real catalogue entry, so its real thresholds apply


def record_week(history: Path, values: list[float], statuses: list[str] | None = None,
                experiment: str = EXP, more: list[list[Outcome]] | None = None) -> None:
    """One history file per night, through the same writer `testbed nightly` uses; `more`
    adds other experiments' outcomes to each night."""
    for k, night in enumerate(WEEK[:len(values)]):
        status = statuses[k] if statuses else "pass"
        outcome = Outcome(experiment, "seto", "sim", status,
                          "" if status == "pass" else "expectation failed",
                          metrics={METRIC: (values[k], "up")}, run_dir=f"/runs/{night}/x")
        write_night(history, night, "smoke", [outcome, *(more[k] if more else [])],
                    f"{k:02d}" + "c" * 38, {"python": "3"}, {"cpus": 2})


def outcomes(experiment: str, values: list[float], statuses: list[str]) -> list[list[Outcome]]:
    return [[Outcome(experiment, "sequencer", "local", st, "" if st == "pass" else "no",
                     metrics={METRIC: (v, "up")})] for v, st in zip(values, statuses, strict=True)]


def judged(history: Path):  # type: ignore[no-untyped-def]
    return judge(read_history(history), CATALOGUE.thresholds, CATALOGUE.index.flaky)


def noisy(seed: int, step_from: int | None = None) -> list[float]:
    """A week of a 20 ms metric with uniform +-10% noise; x1.3 from night `step_from` on."""
    values = 20.0 * np.random.default_rng(seed).uniform(0.9, 1.1, len(WEEK))
    if step_from is not None:
        values[step_from - 1:] *= 1.3
    return values.round(3).tolist()


def test_smoke_suite_covers_every_protocol_on_sim_and_local() -> None:
    smoke = CATALOGUE.suite("smoke")
    covered = {(e.protocol, e.backend) for e in smoke}
    assert {(p, b) for p in protocols() for b in ("sim", "local")} <= covered
    assert {e.backend for e in smoke} == {"sim", "local"}
    assert all(e.trend for e in smoke)
    # A trend entry may be limited to some backends, with its own thresholds there.
    sim, local = (CATALOGUE.thresholds(f"smoke.seto.{b}", "latency.fnl.all.p99_ms")
                  for b in ("sim", "local"))
    assert sim == CATALOGUE.index.regression and local.min_change == 1.0
    # The full suite runs every protocol on every backend and fault family.
    full = CATALOGUE.suite("full")
    families = {e.spec.faults[0].kind if e.spec.faults else "none" for e in full}
    assert families >= {"none", "partition", "crash", "clock"}
    assert {(p, b) for p in protocols() for b in ("sim", "local", "mininet", "docker")} <= \
        {(e.protocol, e.backend) for e in full}
    # A set-up outside a bound's model is skipped with the model's reason (never run to a
    # NOT OK by construction); inside it, every protocol runs.
    outside = {e.protocol for e in full if e.outside}
    assert outside and outside <= {"qos-vbr", "qos-cbr", "leader", "timestamp-leader"}
    assert all("outside" in e.outside and "model" in e.outside for e in full if e.outside)
    assert not any(e.outside for e in smoke)


def test_a_bad_catalogue_entry_is_one_located_error(tmp_path: Path) -> None:
    shutil.copy(ROOT / "experiments/nightly/catalogue.yaml", tmp_path)
    text = (ROOT / "experiments/nightly/smoke-two-sites.yaml").read_text()
    text = text.replace("../../topologies", str(ROOT / "topologies"))
    (tmp_path / "bad.yaml").write_text(text.replace("bad: up}", "bad: sideways}", 1))
    with pytest.raises(SpecError) as info:
        load_catalogue(tmp_path)
    assert len(info.value.problems) == 1
    line = info.value.problems[0]
    assert re.match(rf"{re.escape(str(tmp_path / 'bad.yaml'))}:\d+: nightly\.trend\.2\.bad: ",
                    line), line
    lineno = int(line.split(":")[1])
    assert "sideways" in (tmp_path / "bad.yaml").read_text().splitlines()[lineno - 1]


def test_a_30_percent_step_on_night_5_is_a_regression_first_seen_on_night_5(
        tmp_path: Path) -> None:
    record_week(tmp_path, noisy(7, step_from=5))
    assert len(list(tmp_path.glob("*.parquet"))) == 7
    j = judged(tmp_path)
    [reg] = j.regressions
    assert (reg.experiment, reg.metric, reg.first_night) == (EXP, METRIC, WEEK[4])
    assert reg.last_good_night == WEEK[3]
    assert reg.commits == f"03{'c' * 8}..04{'c' * 8}"
    assert 0.15 < reg.change < 0.5
    assert j.cell(WEEK[4], EXP) == "regressed" and j.cell(WEEK[3], EXP) == "pass"


@pytest.mark.parametrize("seed", range(12))
def test_a_week_of_10_percent_noise_is_no_regression_and_the_step_is_found(
        tmp_path: Path, seed: int) -> None:
    record_week(tmp_path / "calm", noisy(seed))
    assert judged(tmp_path / "calm").regressions == []
    record_week(tmp_path / "step", noisy(seed, step_from=5))
    assert [r.first_night for r in judged(tmp_path / "step").regressions] == [WEEK[4]]


def test_a_metric_that_drops_regresses_when_down_is_bad(tmp_path: Path) -> None:
    for k, night in enumerate(WEEK):
        value = 100.0 if k < 4 else 60.0
        write_night(tmp_path, night, "smoke", [Outcome(
            EXP, "seto", "sim", "pass", metrics={"throughput.min_msgs_per_s": (value, "down")})],
            "c" * 40, {}, {})
    [reg] = judged(tmp_path).regressions
    assert reg.first_night == WEEK[4] and reg.bad == "down" and reg.change == pytest.approx(-0.4)
    assert reg.open and reg.nights == tuple(WEEK[4:])


def test_alternating_pass_and_fail_is_flaky_not_a_regression(tmp_path: Path) -> None:
    statuses = ["pass", "fail"] * 3 + ["pass"]
    record_week(tmp_path, [20.0] * 7, statuses)
    j = judged(tmp_path)
    assert j.flaky == {EXP: 6}
    assert j.regressions == []
    assert j.cell(WEEK[1], EXP) == "flaky"
    # A real break (passing, then failing for good) is a failure, not flakiness.
    record_week(tmp_path / "broken", [20.0] * 7, ["pass"] * 4 + ["fail"] * 3)
    assert judged(tmp_path / "broken").flaky == {}


def test_the_thresholds_are_the_catalogues(tmp_path: Path) -> None:
    """The same week judged with a catalogue that tolerates 40% steps: no regression."""
    cat_dir = tmp_path / "catalogue"
    shutil.copytree(ROOT / "experiments/nightly", cat_dir)
    for f in cat_dir.glob("*.yaml"):
        f.write_text(f.read_text().replace("../../topologies", str(ROOT / "topologies")))
    index = cat_dir / "catalogue.yaml"
    index.write_text(index.read_text().replace("step: 0.15", "step: 0.4")
                     .replace("min_change: 0.2", "min_change: 0.5"))
    tolerant = load_catalogue(cat_dir)
    record_week(tmp_path / "h", noisy(7, step_from=5))
    rows = read_history(tmp_path / "h")
    assert judge(rows, tolerant.thresholds, tolerant.index.flaky).regressions == []
    assert judge(rows, CATALOGUE.thresholds, CATALOGUE.index.flaky).regressions


def test_history_is_plain_parquet_one_file_per_night_and_never_overwritten(
        tmp_path: Path) -> None:
    record_week(tmp_path, [20.0, 21.0])
    record_week(tmp_path, [20.0, 25.0])  # both nights again: new attempts, old files kept
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"{WEEK[0]}.2.parquet", f"{WEEK[0]}.parquet", f"{WEEK[1]}.2.parquet",
        f"{WEEK[1]}.parquet"]
    every = pd.read_parquet(tmp_path)  # any Parquet reader takes the folder as one table
    assert len(every) == 4 and set(every["attempt"]) == {1, 2}
    latest = read_history(tmp_path)
    assert latest["value"].tolist() == [20.0, 25.0]
    schema = pq.read_schema(tmp_path / f"{WEEK[0]}.parquet")
    assert {"night", "experiment", "metric", "value", "status", "commit", "versions",
            "machine"} <= set(schema.names)


def test_history_reads_in_duckdb(tmp_path: Path) -> None:
    import duckdb

    record_week(tmp_path, noisy(1))
    rows = duckdb.sql(f"select night, value from read_parquet('{tmp_path}/*.parquet') "
                      "where metric = 'latency.fnl.all.p50_ms' order by night").fetchall()
    assert [n for n, _ in rows] == WEEK and [v for _, v in rows] == noisy(1)


@pytest.mark.spark
@pytest.mark.slow
def test_history_reads_in_spark(tmp_path: Path) -> None:
    from analysis.session import spark_session

    record_week(tmp_path, noisy(1))
    df = spark_session().read.parquet(str(tmp_path))
    assert df.count() == 7
    assert dict(df.dtypes)["started_at"] == "timestamp" and dict(df.dtypes)["value"] == "double"
    assert sorted(r["night"] for r in df.select("night").collect()) == WEEK


def test_the_night_keeps_going_skips_what_cannot_run_and_respects_the_budget(
        tmp_path: Path) -> None:
    entries = CATALOGUE.suite("full")[:6]
    ran: list[str] = []

    def fake(entry, out, console):  # type: ignore[no-untyped-def]
        ran.append(entry.id)
        if len(ran) == 1:
            return Outcome(entry.id, entry.protocol, entry.backend, "error", "boom")
        return Outcome(entry.id, entry.protocol, entry.backend, "pass", wall_s=1.0)

    skip = blockers({e.backend for e in entries}, lambda: [
        Check("root", True, "", ""), Check("Docker engine", False, "", "start dockerd"),
        Check("Mininet (mnexec)", True, "", ""), Check("iptables", True, "", ""),
        Check("iproute2 (ip, tc)", True, "", "")])
    assert "docker" in skip and "start dockerd" in skip["docker"]
    assert "mininet" not in skip or "java" in skip["mininet"]
    console = Console(file=open(tmp_path / "log", "w"), width=200)  # noqa: SIM115
    out = run_night(entries, tmp_path, 3600, console, {}, skip, run_one=fake)
    assert [o.experiment for o in out] == [e.id for e in entries]
    assert [o.status for o in out if o.backend == "docker"] == ["skipped"] * sum(
        e.backend == "docker" for e in entries)
    assert out[0].status == "error" and len(ran) == sum(e.backend not in skip for e in entries)
    # A budget smaller than one experiment skips them all, saying why.
    tight = run_night(entries, tmp_path, 1, console, {}, {}, run_one=fake)
    assert {o.status for o in tight} == {"skipped"} and "budget" in tight[0].reason
    console.file.close()
    log = (tmp_path / "log").read_text()
    assert f"[1/{len(entries)}] {entries[0].id} - about" in log and "left" in log


@browser
def test_trend_report_renders_grid_sparklines_and_regressions_in_chromium(
        tmp_path: Path) -> None:
    history = tmp_path / "history"
    flaky = outcomes("smoke.sequencer.local", [30.0] * 7, ["pass", "fail"] * 3 + ["pass"])
    skipped = Outcome("smoke.seto.docker", "seto", "docker", "skipped", "doctor: no Docker")
    record_week(history, noisy(3, step_from=5), more=[[*f, skipped] for f in flaky])
    j = judged(history)
    page = write_trend(j, tmp_path / "runs" / "nightly.html")
    dom, console = browse(page)
    assert console == []
    # The grid: one row per experiment, one cell per night, each in its state.
    grid = dom[dom.index('<table class="grid"'):]
    grid = grid[:grid.index("</table>")]
    for exp in (EXP, "smoke.sequencer.local", "smoke.seto.docker"):
        assert grid.count(f'data-experiment="{exp}"') == 1
    assert grid.count("data-night=") == 3 * 7
    assert grid.count("REGRESSED") == 3 and grid.count("FLAKY") == 3
    assert grid.count(">skip<") == 7
    assert "../../runs/2026-11-20/x/report.html" in grid  # links to that night's run report
    # The regression names its first bad night and commit range.
    assert f'data-first-night="{WEEK[4]}"' in dom and f"03{'c' * 8}..04{'c' * 8}" in dom
    # One sparkline per tracked series, with its band and its points.
    sparks = re.findall(r'<svg class="plot" data-plot="([^"]+)"(.*?)</svg>', dom, re.S)
    assert {name for name, _ in sparks} == {f"{EXP}:{METRIC}",
                                            f"smoke.sequencer.local:{METRIC}"}
    body = dict(sparks)[f"{EXP}:{METRIC}"]
    assert 'class="band"' in body and len(re.findall(r'class="d[ "]', body)) == 7 + 1
    assert body.count("d regressed") == 3
    assert page.stat().st_size < 200_000


def test_report_compares_two_nights_of_the_history(tmp_path: Path) -> None:
    record_week(tmp_path, [20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 30.0], ["pass"] * 6 + ["fail"])
    out = tmp_path / "cmp.html"
    proc = subprocess.run([sys.executable, "-m", "testbed", "report",
                           str(tmp_path / f"{WEEK[0]}.parquet"),
                           str(tmp_path / f"{WEEK[6]}.parquet"), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    html = out.read_text()
    assert f"{WEEK[0]} vs {WEEK[6]}" in html
    assert "+50.0%" in html and 'class="worse"' in html and "now failing" in html


def test_workflow_validates_against_the_github_schema_and_only_calls_make_nightly() -> None:
    workflow = ROOT / ".github/workflows/nightly.yml"
    exe = Path(sys.executable).with_name("check-jsonschema")
    assert exe.exists(), "check-jsonschema is a dev dependency (pip install -e '.[dev]')"
    proc = subprocess.run([str(exe), "--builtin-schema", "vendor.github-workflows",
                           str(workflow)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wf = yaml.safe_load(workflow.read_text())
    on = wf[True]  # YAML 1.1 reads the key `on` as true
    minute = int(on["schedule"][0]["cron"].split()[0])
    assert minute % 2 == 1
    assert set(on["workflow_dispatch"]["inputs"]) == {"suite", "backends"}
    assert wf["concurrency"]["cancel-in-progress"] is False
    assert wf["jobs"]["smoke"]["runs-on"] == "ubuntu-latest"
    assert "self-hosted" in wf["jobs"]["full"]["runs-on"]
    for job in wf["jobs"].values():
        assert job["timeout-minutes"] > 0
        runs = [s["run"] for s in job["steps"] if "make" in s.get("run", "")]
        assert len(runs) == 1 and runs[0].startswith("make nightly ")
        assert any(s.get("uses", "").startswith("actions/upload-artifact") for s in job["steps"])
    # `make nightly` is the command a user runs by hand: it calls `testbed nightly`.
    dry = subprocess.run(["make", "-n", "nightly", "SUITE=smoke", "HISTORY=h",
                          "BACKENDS=sim", "DATE=2026-11-20"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert re.search(r"testbed nightly --suite smoke --history h --budget 2h\s*\\?\s*"
                     r"--backends sim --date 2026-11-20", dry.stdout), dry.stdout


CATALOGUE_EXP = """\
name: {name}
topology: {root}/topologies/two-sites.yaml
backend: sim
duration: 2s
drain: 1s
protocol: {{name: sequencer}}
workload: {{rate: 10/s, size: 256B}}
expect: [{expect}]
nightly:
  suites: [smoke]
  backends: [sim]
  trend: [{{metric: latency.fnl.all.p50_ms, bad: up}}]
"""


def nightly(*args: str) -> subprocess.CompletedProcess[str]:
    """`testbed nightly ARGS`, in this process: its runs' analyses reuse this session's Spark
    (tests/inproc.py) instead of starting a JVM per night."""
    return run_cli("nightly", *args)


@pytest.mark.slow
def test_a_failing_expectation_fails_the_night_and_the_rest_still_runs(tmp_path: Path) -> None:
    cat = tmp_path / "catalogue"
    cat.mkdir()
    shutil.copy(ROOT / "experiments/nightly/catalogue.yaml", cat)
    (cat / "a-broken.yaml").write_text(CATALOGUE_EXP.format(
        name="broken", root=ROOT, expect="latency.fnl.all.p50_ms < 0.001"))
    (cat / "b-fine.yaml").write_text(CATALOGUE_EXP.format(
        name="fine", root=ROOT, expect="checks.total_order.violations == 0"))
    proc = nightly("--catalogue", str(cat), "--history", str(tmp_path / "h"), "--runs",
                   str(tmp_path / "runs"), "--date", WEEK[0])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "failed: broken.sequencer.sim" in proc.stderr.replace("\n", " ")
    rows = read_history(tmp_path / "h")
    status = dict(zip(rows["experiment"], rows["status"], strict=True))
    assert status == {"broken.sequencer.sim": "fail", "fine.sequencer.sim": "pass"}
    assert rows["value"].notna().all() and (rows["commit"].str.len() == 40).all()
    assert (tmp_path / "runs" / "smoke" / "nightly.html").exists()


def test_bad_options_are_one_sentence_and_exit_2(tmp_path: Path) -> None:
    for args, words in ((["--date", "2026-13-01"], "--date must be YYYY-MM-DD"),
                        (["--budget", "soon"], "--budget: cannot read 'soon'"),
                        (["--suite", "weekly"], "catalogue.yaml:1: suites: no suite 'weekly'"),
                        (["--backends", "uml"], "no experiment on backends uml")):
        result = CliRunner().invoke(app, ["nightly", *args, "--history", str(tmp_path / "h"),
                                          "--runs", str(tmp_path)])
        assert result.exit_code == 2, result.output
        assert words in result.stderr.replace("\n", " "), result.stderr
    assert not (tmp_path / "h").exists()
    # One history folder per suite: a night of another suite would hide this one's.
    record_week(tmp_path / "h", [1.0])
    result = CliRunner().invoke(app, ["nightly", "--suite", "full", "--history",
                                      str(tmp_path / "h"), "--runs", str(tmp_path)])
    assert result.exit_code == 2 and "holds the smoke suite's nights" in result.stderr


def test_dry_run_lists_the_suite_and_runs_nothing(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["nightly", "--dry-run", "--history", str(tmp_path / "h"),
                                      "--runs", str(tmp_path / "runs")], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for entry in CATALOGUE.suite("smoke"):
        assert entry.id in result.stdout
    assert f"dry run: {len(CATALOGUE.suite('smoke'))} to run" in result.stdout
    assert not (tmp_path / "h").exists() and not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_the_smoke_suite_twice_makes_two_nights_and_a_trend_report(tmp_path: Path) -> None:
    """The real smoke suite's sim half (every protocol, and the faulty run) on a first night,
    and a second night of the same suite: two history files, one trend report with both
    nights. (Every protocol also runs on the local backend in tests/test_protocols.py; the
    whole smoke suite's time is in docs/benchmarks.md.) The second night runs only the catalogue's
    faulty experiment (a catalogue folder holding the real index and smoke-faults.yaml): what
    it proves -- a second file, and a report judging both nights -- needs no second pass of
    every protocol, which cost the test suite 70 s. The catalogue's explore entries are left
    out (a copy of the folder without them): they prove nothing about the history and cost
    minutes; tests/test_explore.py runs explore entries through the nightly runner."""
    history, runs = tmp_path / "history", tmp_path / "runs"
    first = tmp_path / "first"
    first.mkdir()
    for spec in (ROOT / "experiments/nightly").glob("*.yaml"):
        text = spec.read_text()
        if "\n  explore:" in text and spec.name != "catalogue.yaml":
            continue  # an explore entry
        (first / spec.name).write_text(text.replace("../../topologies",
                                                    str(ROOT / "topologies")))
    assert not (first / "sim-explore.yaml").exists()
    second = tmp_path / "catalogue"
    second.mkdir()
    shutil.copy(ROOT / "experiments/nightly/catalogue.yaml", second)
    faults = (ROOT / "experiments/nightly/smoke-faults.yaml").read_text()
    (second / "smoke-faults.yaml").write_text(
        faults.replace("../../topologies", str(ROOT / "topologies")))
    for night, catalogue in ((WEEK[0], first), (WEEK[1], second)):
        done = nightly("--history", str(history), "--runs", str(runs), "--date", night,
                       "--backends", "sim", "--catalogue", str(catalogue))
        assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in history.iterdir()) == [f"{WEEK[0]}.parquet",
                                                         f"{WEEK[1]}.parquet"]
    rows = read_history(history)
    first_night = rows[rows["night"] == WEEK[0]]
    assert set(first_night["protocol"]) == set(protocols())
    assert set(first_night["backend"]) == {"sim"}
    assert set(first_night["status"]) == {"pass"}
    assert not any(e.startswith("explore") for e in first_night["experiment"])
    second_night = rows[rows["night"] == WEEK[1]]
    assert set(second_night["experiment"]) == {"smoke-faults.sequencer.sim"}
    assert set(second_night["status"]) == {"pass"}
    page = (runs / "smoke" / "nightly.html").read_text()
    assert f"<th>{WEEK[0]}</th>" in page and f"<th>{WEEK[1]}</th>" in page
    assert "smoke.fast-seto.sim" in page and "report.html" in page
