"""`testbed explore` (docs/explore.md): generators, shrinking, the CLI end to end on the
simulator with the in-process judge, replay, and Spark tasks giving the workers' verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from pydantic import TypeAdapter

from testbed.explore.generators import SHAPES, Context, Model, draw
from testbed.explore.shrink import ddmin
from testbed.faults.schedule import check_faults, expand
from testbed.faults.spec import FaultSpec
from testbed.spec.experiment import EXPLORE_GENERATORS
from testbed.spec.loader import load_experiment
from tests.inproc import ROOT, run_cli

QUICKSTART = ROOT / "experiments" / "quickstart.yaml"
HOSTS = ("h1", "h2", "h3", "h4")
CTX = Context(HOSTS, 3_000_000_000, Model(), has_links=True)
GEN = list(EXPLORE_GENERATORS)  # the default generators (not world mode's)


def _spec(tmp: Path, file: str = "spec.yaml", **changes: object) -> Path:
    data = yaml.safe_load(QUICKSTART.read_text())
    data["topology"] = str(ROOT / "topologies" / "two-sites.yaml")
    data.update(changes)
    path = tmp / file
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_generators_draw_valid_reproducible_schedules() -> None:
    adapter = TypeAdapter(FaultSpec)
    kinds, shapes, flapping = set(), set(), 0
    for seed in range(300):
        items = draw(seed, CTX, GEN, 4)
        assert items == draw(seed, CTX, GEN, 4)  # the seed names its schedule
        assert 1 <= len(items) <= 4
        faults = [adapter.validate_python(i) for i in items if i["kind"] != "network"]
        assert check_faults(faults, list(HOSTS), CTX.duration_ns) == []
        expand(faults, list(HOSTS), CTX.duration_ns, seed)  # every entry expands
        for i in items:
            kinds.add(i["kind"])
            if i["kind"] == "partition":
                shapes.add(i.get("shape") or ("isolate" if "isolate" in i else "groups"))
                flapping += "every" in i
    assert kinds >= {"partition", "crash", "pause", "clock", "link", "loss-burst", "network"}
    assert shapes == set(SHAPES)
    assert flapping > 0
    assert draw(1, CTX, GEN, 4) != draw(2, CTX, GEN, 4)


def test_generators_keep_to_a_bound_model() -> None:
    """A protocol with a latency bound in a model of FIFO links without loss, failures, clock
    faults or delays beyond Δ (004 §2.1) gets no fault at all; one whose model allows crashes
    and unsynchronised clocks gets those."""
    strict = Context(HOSTS, CTX.duration_ns, Model(frozenset(), False, False, False, False,
                                                   False, False), True)
    assert all(draw(seed, strict, GEN, 4) == [] for seed in range(200))
    crashes = Context(HOSTS, CTX.duration_ns, Model(frozenset({"crash"}), False, False, False,
                                                    True, False, False), True)
    kinds = {i["kind"] for seed in range(200) for i in draw(seed, crashes, GEN, 4)}
    assert kinds == {"crash", "clock"}
    for seed in range(200):
        for i in draw(seed, crashes, ["clock"], 4):
            for key in ("offset", "jump", "strobe"):
                if key in i:
                    assert abs(int(str(i[key]).removesuffix("us"))) <= 1000


def test_ddmin_finds_a_one_minimal_subset() -> None:
    calls = []

    def fails(sub: list[int]) -> bool:
        calls.append(sub)
        return 3 in sub and 7 in sub

    assert sorted(ddmin(list(range(10)), fails)) == [3, 7]
    assert ddmin([1, 2, 3], lambda sub: True) == []


def test_explore_finds_shrinks_and_replays_total_order(tmp_path: Path) -> None:
    """reliable-nack does not claim total order: `--check total_order` finds violations,
    one shrinks to a reproducer with at most one fault that `testbed run` accepts and that
    replays byte-identically. (The full acceptance is 300 seeds of 20 s: docs/explore.md.)"""
    out = tmp_path / "out"
    r = run_cli("explore", str(QUICKSTART), "--seeds", "30", "--duration", "3s",
                "--protocol", "reliable-nack", "--check", "total_order", "--workers", "2",
                "--shrink", "1", "--out", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    table = pq.read_table(out / "seeds.parquet").to_pylist()
    assert [row["seed"] for row in table] == list(range(30))
    failing = [row for row in table if not row["ok"]]
    assert failing and all("total_order" in row["failing"] for row in failing)
    shrunk = [row for row in table if row["shrunk_faults"]]
    assert len(shrunk) == 1
    assert len(json.loads(shrunk[0]["shrunk_faults"])) <= 1
    repro = out / shrunk[0]["reproducer"]
    exp, _ = load_experiment(repro)  # a plain experiment
    assert exp.backend == "sim" and exp.seed == shrunk[0]["seed"] and exp.explore is None
    assert len(exp.faults) <= 1
    assert "failing: total_order" in repro.read_text()
    html = (out / "index.html").read_text()
    assert 'data-plot="st-s' in html and 'data-plot="tl-s' in html
    replay = run_cli("explore", "--replay", str(repro))
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "byte-identical" in replay.stdout and "total_order" in replay.stdout
    # A tampered digest is reported.
    text = repro.read_text().splitlines()
    idx = next(k for k, line in enumerate(text) if line.startswith("# sha256"))
    text[idx] = text[idx][:-4] + "0000"
    repro.write_text("\n".join(text) + "\n")
    again = run_cli("explore", "--replay", str(repro))
    assert again.returncode == 1 and "DIFFERENT" in again.stdout


def test_a_seed_past_its_event_budget_fails_as_livelock(tmp_path: Path) -> None:
    """A seed whose run never ends must not hang the exploration: past its event budget the
    simulator stops, the seed fails as `livelock` with the virtual time reached, is shrunk,
    and its reproducer (which records the budget) replays to the same stop, byte-identically.
    A budget far below what a 2 s run needs stands in for an event storm."""
    spec = _spec(tmp_path, explore={"generators": ["pause"], "max_faults": 1,
                                    "max_events": 3000})
    out = tmp_path / "out"
    r = run_cli("explore", str(spec), "--seeds", "2", "--duration", "2s", "--workers", "1",
                "--shrink", "1", "--out", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    rows = pq.read_table(out / "seeds.parquet").to_pylist()
    assert len(rows) == 2 and all(row["failing"] == ["livelock"] for row in rows)
    assert all("event budget of 3000 events exceeded at virtual time" in row["error"]
               for row in rows)
    assert all(4096 <= row["events"] < 2 * 4096 for row in rows)  # checked every 4096
    shrunk = [row for row in rows if row["shrunk_faults"]]
    assert len(shrunk) == 1 and json.loads(shrunk[0]["shrunk_faults"]) == []
    repro = out / shrunk[0]["reproducer"]
    text = repro.read_text()
    assert "# event budget 3000 events" in text and "failing: livelock" in text
    replay = run_cli("explore", "--replay", str(repro))
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "livelock: event budget of 3000 events exceeded" in replay.stdout
    assert "byte-identical" in replay.stdout


def test_the_simulator_stops_at_its_budget_and_only_there(tmp_path: Path) -> None:
    """The budget changes no event: a run under a budget it fits writes the same logs as one
    without; past the budget, BudgetExceeded carries the statistics at the stop."""
    from testbed.explore.case import Base, Case, digests, materialise, raw_data, simulate

    # 2 s: past the 4,096 events between two budget checks (1 s made 3,790 once the reliable
    # layer heartbeats only to laggards).
    base = Base.from_data({**raw_data(QUICKSTART), "duration": "2s"})
    exp, topo = materialise(base, Case(3))
    a, sa = simulate(exp, topo, tmp_path / "a", max_events=0, max_wall_s=0)
    b, sb = simulate(exp, topo, tmp_path / "b", max_events=10_000_000, max_wall_s=600)
    assert digests(a) == digests(b) and sa["events"] == sb["events"] > 4096
    assert "livelock" not in sa and "livelock" not in sb
    _, sc = simulate(exp, topo, tmp_path / "c", max_events=100)
    assert sc["livelock"]["reason"] == "event budget of 100 events exceeded"
    assert sc["events"] == 4096 and 0 < sc["livelock"]["virtual_s"] < sa["virtual_s"]


def _children(pid: int) -> set[int]:
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "sigkill"])
def test_an_interrupted_exploration_leaves_no_worker_and_no_temp_dir(tmp_path: Path,
                                                                     how: str) -> None:
    """Ctrl-C (SIGINT to the process group) or SIGTERM: the session terminates its workers
    and removes its temporary root. SIGKILL of the session: the workers die with it
    (PR_SET_PDEATHSIG) and remove their own run directories."""
    import os
    import signal
    import subprocess
    import sys
    import time

    shm = tmp_path / "shm"
    shm.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TESTBED_EXPLORE_TMP": str(shm)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed", "explore", str(QUICKSTART), "--seeds", "10000",
         "--duration", "2s", "--workers", "2", "--out", str(tmp_path / "out")],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(list(shm.glob("testbed-explore-*/worker-*"))) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
            time.sleep(0.2)
        time.sleep(1.0)  # seeds under way
        workers = _children(proc.pid)
        assert len(workers) >= 2
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
        rc = proc.wait(timeout=60)
        assert rc != 0
        deadline = time.monotonic() + 30
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(w) for w in workers)
        left = list(shm.glob("testbed-explore-*/**/*"))
        assert left == [], left
        if how != "sigkill":
            assert list(shm.iterdir()) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_explore_clean_protocol_reports_no_failure(tmp_path: Path) -> None:
    spec = _spec(tmp_path, explore={"generators": ["clock", "link"], "max_faults": 2})
    out = tmp_path / "out"
    r = run_cli("explore", str(spec), "--seeds", "6", "--duration", "2s", "--workers", "2",
                "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = pq.read_table(out / "seeds.parquet").to_pylist()
    assert len(rows) == 6 and all(row["ok"] for row in rows)
    assert all(row["liveness"] == "quiescent" for row in rows)
    assert all(row["events"] > 0 for row in rows)
    assert not (out / "reproducers").exists()


def test_explore_ranges_and_refusals(tmp_path: Path) -> None:
    spec = _spec(tmp_path, explore={"ranges": {"workload.rate": ["10/s", "40/s"]},
                                    "generators": ["clock"], "max_faults": 1})
    out = tmp_path / "out"
    r = run_cli("explore", str(spec), "--seeds", "4", "--duration", "1s", "--workers", "1",
                "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    rates = [json.loads(row["params"])["workload.rate"]
             for row in pq.read_table(out / "seeds.parquet").to_pylist()]
    assert len(set(rates)) == 4 and all(10 <= float(x[:-2]) <= 40 for x in rates)
    bad = _spec(tmp_path, "bad.yaml", explore={"ranges": {"duration": ["1s", "2s"]}})
    r = run_cli("explore", str(bad), "--seeds", "1")
    assert r.returncode == 2 and "bad.yaml:" in r.stderr and "explore.ranges" in r.stderr
    r = run_cli("explore", str(spec), "--seeds", "2", "--check", "nosuch", "--out",
                str(tmp_path / "nothing"))
    assert r.returncode == 2 and "--check nosuch: no such check" in r.stderr
    assert not (tmp_path / "nothing").exists()
    r = run_cli("explore", str(spec), "--backend", "local")
    assert r.returncode == 2 and "sim backend only" in r.stderr
    r = run_cli("schema", "experiment")
    assert '"explore"' in r.stdout and "max_faults" in r.stdout


@pytest.mark.spark
def test_explore_spark_tasks_give_the_workers_verdicts(tmp_path: Path) -> None:
    args = ["--seeds", "8", "--duration", "2s", "--protocol", "reliable-nack", "--check",
            "total_order", "--shrink", "0"]
    a = run_cli("explore", str(QUICKSTART), *args, "--workers", "2", "--out",
                str(tmp_path / "w"))
    b = run_cli("explore", str(QUICKSTART), *args, "--workers", "1", "--master", "local[2]",
                "--out", str(tmp_path / "s"))
    assert a.returncode == b.returncode == 1, a.stdout + a.stderr + b.stdout + b.stderr
    cols = ["seed", "faults", "ok", "verdict_ok", "liveness", "failing", "events"]
    ta = pq.read_table(tmp_path / "w" / "seeds.parquet", columns=cols).to_pylist()
    tb = pq.read_table(tmp_path / "s" / "seeds.parquet", columns=cols).to_pylist()
    assert ta == tb and len(ta) == 8


NIGHTLY_EXPLORE = """\
name: nx
topology: {root}/topologies/two-sites.yaml
backend: sim
duration: 2s
drain: 1s
protocol: {{name: sequencer}}
workload: {{rate: 10/s, size: 256B}}
explore: {{generators: [clock, link], max_faults: 2}}
nightly:
  suites: [smoke, full]
  protocols: [sequencer]
  explore: {{seeds: {{smoke: 3}}}}
  trend: [{{metric: explore.failing_seeds, bad: up}}]
"""


NIGHTLY_LIVELOCK = NIGHTLY_EXPLORE.replace("name: nx\n", "name: nxl\n").replace(
    "max_faults: 2}", "max_faults: 1, max_events: 1000}")


def test_nightly_explores_new_seeds_each_night(tmp_path: Path) -> None:
    """Explore entries through the nightly runner: one that passes, one whose every seed fails
    (an event budget far below what a seed needs: `livelock`, whatever the protocol does),
    the failure's shrunk reproducer linked from the trend report's "Exploration failures"."""
    from testbed.nightly.catalogue import load_catalogue
    from testbed.nightly.history import read_history
    from testbed.nightly.runner import nightly_seeds

    assert nightly_seeds("2026-11-20", "seto", 3) == nightly_seeds("2026-11-20", "seto", 3)
    assert set(nightly_seeds("2026-11-20", "seto", 3)).isdisjoint(
        nightly_seeds("2026-11-21", "seto", 3) + nightly_seeds("2026-11-20", "lamport", 3))
    real = load_catalogue()
    smoke = [e for e in real.suite("smoke") if e.seeds]
    assert {e.protocol for e in smoke} == {e.name for e in __import__(
        "nodes.protocols.catalogue", fromlist=["CATALOGUE"]).CATALOGUE}
    assert all(e.backend == "sim" and e.seeds == 10 for e in smoke)
    cat = tmp_path / "catalogue"
    cat.mkdir()
    (cat / "catalogue.yaml").write_text((ROOT / "experiments/nightly/catalogue.yaml").read_text())
    (cat / "nx.yaml").write_text(NIGHTLY_EXPLORE.format(root=ROOT))
    (cat / "nxl.yaml").write_text(NIGHTLY_LIVELOCK.format(root=ROOT))
    assert [e.seeds for e in load_catalogue(cat).suite("full")] == []  # no seeds for full
    r = run_cli("nightly", "--catalogue", str(cat), "--history", str(tmp_path / "h"),
                "--runs", str(tmp_path / "runs"), "--date", "2026-11-20")
    assert r.returncode == 1, r.stdout + r.stderr  # a failing entry fails the night
    rows = read_history(tmp_path / "h")
    coverage = rows[rows["metric"].str.startswith("coverage.", na=False)]
    reached = dict(zip(coverage["metric"], coverage["value"], strict=True))
    # every seed of the passing entry broadcast: its share of seeds is 1
    assert reached["coverage.event:TotalOrder.MsgsBroadcast"] == 1.0, reached
    rows = rows[~rows["metric"].str.startswith("coverage.", na=False)].sort_values("experiment")
    assert rows["experiment"].tolist() == ["nx.sequencer.sim",
                                           "nxl.sequencer.sim"], rows["experiment"]
    assert rows["status"].tolist() == ["pass", "fail"]
    assert rows["value"].tolist() == [0.0, 3.0]
    where = Path(rows["run_dir"].iloc[0])
    seeds = pq.read_table(where / "seeds.parquet").column("seed").to_pylist()
    assert seeds == sorted(nightly_seeds("2026-11-20", "sequencer", 3))
    assert (where / "index.html").is_file()
    reason = rows["reason"].iloc[1]
    assert reason.startswith("explore: 3 of 3 seeds failing (livelock); shrunk reproducer "
                             "reproducers/seed-"), reason
    failed = Path(rows["run_dir"].iloc[1])
    repro = reason.rsplit(" ", 1)[1]
    assert (failed / repro).is_file() and "# event budget 1000 events" in (
        failed / repro).read_text()
    page = next((tmp_path / "runs").rglob("nightly.html")).read_text()
    assert "Exploration failures" in page
    assert 'class="reproducer" href="' in page and repro in page


def test_trend_report_links_a_new_exploration_failure(tmp_path: Path) -> None:
    from testbed.nightly.catalogue import FlakyRule, Thresholds
    from testbed.nightly.detect import judge
    from testbed.nightly.history import Outcome, read_history, write_night
    from testbed.nightly.trend import write_trend

    run_dir = tmp_path / "runs" / "explore-x"
    (run_dir / "reproducers").mkdir(parents=True)
    (run_dir / "reproducers" / "seed-7.yaml").write_text("name: x\n")
    (run_dir / "index.html").write_text("<html></html>")
    for night, status, reason in (
            ("2026-11-19", "pass", ""),
            ("2026-11-20", "fail", "explore: 1 of 20 seeds failing (agreement); shrunk "
             "reproducer reproducers/seed-7.yaml")):
        write_night(tmp_path / "h", night, "smoke", [Outcome(
            "explore.seto.sim", "seto", "sim", status, reason, run_dir=str(run_dir))],
            "c" * 40, {}, {})
    j = judge(read_history(tmp_path / "h"), lambda e, m: Thresholds(), FlakyRule())
    page = write_trend(j, tmp_path / "nightly.html").read_text()
    assert "Exploration failures" in page and "new: regression" in page
    assert 'class="reproducer" href="runs/explore-x/reproducers/seed-7.yaml"' in page
    assert 'href="runs/explore-x/index.html"' in page


def test_trend_report_lists_coverage_that_dropped(tmp_path: Path) -> None:
    """An event the night before reached and tonight did not is listed; one reached both
    nights, or only tonight, is not; coverage is no tracked series (no sparkline)."""
    from testbed.nightly.catalogue import FlakyRule, Thresholds
    from testbed.nightly.detect import judge
    from testbed.nightly.history import Outcome, read_history, write_night
    from testbed.nightly.trend import write_trend

    nights = {"2026-11-19": {"event:Transport.Retransmissions": 0.4, "fault:crash": 0.5,
                             "event:TotalOrder.RelayStore": 0.0},
              "2026-11-20": {"event:Transport.Retransmissions": 0.0, "fault:crash": 0.45,
                             "event:TotalOrder.RelayStore": 0.1}}
    for night, items in nights.items():
        metrics: dict[str, tuple[float | None, str]] = {
            f"coverage.{k}": (v, "down") for k, v in items.items()}
        metrics["explore.failing_seeds"] = (0.0, "up")
        write_night(tmp_path / "h", night, "full", [Outcome(
            "explore.seto.sim", "seto", "sim", "pass", metrics=metrics)], "c" * 40, {}, {})
    j = judge(read_history(tmp_path / "h"), lambda e, m: Thresholds(), FlakyRule())
    assert j.coverage_dropped() == [("explore.seto.sim", "event:Transport.Retransmissions",
                                     0.4, "2026-11-19")]
    assert [s.metric for s in j.series] == ["explore.failing_seeds"]
    page = write_trend(j, tmp_path / "nightly.html").read_text()
    assert "Coverage that dropped" in page and "event:Transport.Retransmissions" in page
    assert "40% of seeds on 2026-11-19" in page and "RelayStore" not in page


def test_explore_workers_run_the_compiled_simulator(tmp_path: Path) -> None:
    """The `testbed` script's workers are spawned processes that import the script's module
    (the CLI) again before their initialiser runs; the CLI activates the compiled simulator
    first, so they run it (they ran pure Python: the CLI had imported `nodes.wire`)."""
    import os
    import subprocess
    import sys

    from tests.test_sim_fastpath import compiled_build

    compiled_build()
    spec = _spec(tmp_path)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "TESTBED_PURE_PYTHON"}
    env["PYTHONPATH"] = str(ROOT)  # this tree's sources, not the editable install's
    proc = subprocess.run([str(Path(sys.executable).parent / "testbed"), "explore", str(spec),
                           "--seeds", "2", "--duration", "1s", "--workers", "1",
                           "--out", str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = pq.read_table(out / "seeds.parquet").to_pylist()
    assert [row["compiled"] for row in rows] == [True, True], proc.stderr
    assert "pure-Python" not in proc.stdout and "before activation" not in proc.stderr
