"""The in-process judge (analysis/judge.py) gives the Spark job's checks and verdict.

Sim runs with faults (crash and restart, a partition, an optimistic protocol, a primary
partition, a qos run) are judged by both and compared key by key, examples included. The
whole suite runs with TESTBED_CROSSCHECK=1 (tests/conftest.py), so every other run the suite
analyses with Spark is compared too; here the comparison is explicit.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from analysis.judge import differences, judge_run
from analysis.record import read_record
from tests.eventlogs import run_dir_of

ROOT = Path(__file__).resolve().parents[1]

LAN5 = """\
topology:
  name: lan5
  sites:
    a: {lan: {delay: 2ms, jitter: 0.5ms}}
    b: {lan: {delay: 2ms}}
  wan:
    - {between: [a, b], delay: 15ms}
  hosts:
    - {name: h1, site: a}
    - {name: h2, site: a}
    - {name: h3, site: a}
    - {name: h4, site: b}
    - {name: h5, site: b}
"""

RUNS = {
    # The fixed sequencer through an isolation and a crash with restart.
    "sequencer-faults": """\
protocol: {name: sequencer, params: {sequencer: h1}}
workload: {senders: all, rate: 30/s, size: 200B}
faults:
  - {kind: partition, isolate: h4, at: 0.5s, for: 0.6s}
  - {kind: crash, host: h3, at: 1.2s, restart_after: 0.5s}
""",
    # Optimistic deliveries (Local Order, accuracy) with a crash and restart.
    "seto-crash": """\
protocol: {name: seto}
workload: {senders: all, rate: 30/s, size: 200B}
faults:
  - {kind: crash, host: h5, at: 1s, restart_after: 0.5s}
""",
    # Primary views: a 3|2 split that heals (membership checks in the verdict).
    "primary-partition": """\
protocol:
  name: primary
  params: {protocol: sequencer, bootstrap: h1, fd_interval_ms: 50, fd_timeout_ms: 300}
workload: {senders: all, rate: 20/s, size: 200B}
faults:
  - {kind: partition, groups: [[h1, h2, h3], [h4, h5]], at: 0.8s, for: 1s}
""",
    # The paper's primary rule under a flapping majorities ring: a documented hazard voids
    # split brain and what follows it (catalogue `Hazard`), in both judges alike.
    "primary-majority-ring": """\
protocol:
  name: primary
  params: {protocol: sequencer, bootstrap: h1, primary_rule: majority, fd_interval_ms: 30,
           fd_timeout_ms: 150}
workload: {senders: all, rate: 20/s, size: 200B}
faults:
  - {kind: partition, shape: majorities-ring, at: 0.5s, for: 300ms, every: 600ms}
""",
    # A protocol that does not claim total order, under loss: counts reported, not claimed.
    "reliable-nack-partition": """\
protocol: {name: reliable-nack}
workload: {senders: all, rate: 40/s, size: 200B}
faults:
  - {kind: partition, groups: [[h1, h2], [h3, h4, h5]], at: 0.5s, for: 1s}
""",
}


def _sim_run(tmp_path: Path, name: str, body: str, duration: str = "2.5s") -> Path:
    d = tmp_path / name
    d.mkdir()
    spec = (f"name: {name}\n{LAN5}backend: sim\nduration: {duration}\ndrain: 1s\n"
            f"seed: 5\n{body}")
    (d / "exp.yaml").write_text(spec)
    return _run(d / "exp.yaml", d / "runs")


def _run(spec: Path, out: Path) -> Path:
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", str(spec), "--backend", "sim",
                           "--out", str(out), "--no-analyze"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run_dir_of(out)


def _both(run: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], dict[str, Any]]:
    from analysis.job import analyze

    monkeypatch.delenv("TESTBED_CROSSCHECK", raising=False)  # compared here, explicitly
    spark_summary = analyze(read_record(run))
    return spark_summary, judge_run(read_record(run))


@pytest.mark.spark
def test_both_judges_agree_on_faulty_sim_runs(tmp_path: Path, spark: Any,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    runs = {name: _sim_run(tmp_path, name, body) for name, body in RUNS.items()}
    runs["qos-vbr-crash"] = _run(ROOT / "experiments" / "qos-vbr-crash.yaml",
                                 tmp_path / "qos" / "runs")
    seen: dict[str, dict[str, Any]] = {}
    for name, run in runs.items():
        spark_summary, judged = _both(run, monkeypatch)
        assert differences(spark_summary, judged) == [], name
        assert judged["checks"] and judged["verdict"] == spark_summary["verdict"]
        seen[name] = judged
    # The runs exercise what they were built for.
    assert "local_order" in seen["seto-crash"]["checks"]
    assert "split_brain" in seen["primary-partition"]["checks"]
    assert "latency_bound" in seen["qos-vbr-crash"]["checks"]
    assert seen["sequencer-faults"]["crashed"] == ["h3"]
    # the restarted h3 stays up: its second incarnation is held to what it sends and delivers
    assert seen["sequencer-faults"]["checks"]["agreement"]["restarted_nodes"] == ["h3@1"]
    assert not seen["reliable-nack-partition"]["checks"]["total_order"]["claimed"]
    ring = seen["primary-majority-ring"]
    assert ring["hazards"] and ring["checks"]["split_brain"]["claimed"] is False
    assert any(r.startswith("hazard (") for r in ring["verdict"]["reasons"])
    assert "hazards" not in seen["primary-partition"]  # disjoint groups: every claim holds


@pytest.mark.spark
def test_a_difference_is_reported_by_key(tmp_path: Path, spark: Any,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The crosscheck fails, naming the key, when the in-process result differs."""
    from analysis import judge

    run = _sim_run(tmp_path, "seq", RUNS["sequencer-faults"], duration="1.5s")
    spark_summary, judged = _both(run, monkeypatch)
    judged["checks"]["integrity"]["violations"] += 1
    judged["verdict"] = {**judged["verdict"], "ok": False}
    diff = differences(spark_summary, judged)
    assert [d.split(":")[0] for d in diff] == ["checks.integrity.violations", "verdict"]
    monkeypatch.setattr(judge, "judge_run", lambda _run: judged)
    with pytest.raises(AssertionError, match="checks.integrity.violations"):
        judge.crosscheck(read_record(run), spark_summary)


def test_judging_never_imports_spark(tmp_path: Path) -> None:
    """judge_run works in an interpreter where importing pyspark fails."""
    run = _sim_run(tmp_path, "seq", RUNS["sequencer-faults"], duration="1.5s")
    code = ("import sys; sys.modules['pyspark'] = None\n"
            "from pathlib import Path\nfrom analysis.judge import judge_run\n"
            "from analysis.record import read_record\n"
            f"r = judge_run(read_record(Path({str(run)!r})))\n"
            "print(r['ok'], r['checks']['integrity']['claimed'], r['crashed'])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", "['h3']"]


@pytest.mark.parametrize("name,setup", [
    ("reliable-ack", {"matrix_ms": "triangle", "loss": 0.0}),
    ("reliable-nack", {"loss": 0.05, "jitter_ms": 3.0}),
])
def test_causal_count_is_the_happened_before_oracles(tmp_path: Path, name: str,
                                                     setup: dict[str, Any]) -> None:
    """Causal order by transitive happened-before: the judge's count per node equals the
    plain-Python vector-clock oracle's (tests/protosim.py) on runs that break causal order
    (protocols that do not claim it, with loss, jitter or a triangle of delays)."""
    from tests import protosim as ps
    from tests.test_protocols import TRIANGLE

    if setup.get("matrix_ms") == "triangle":
        setup = {**setup, "matrix_ms": TRIANGLE}
    ps.run(ps.configs(name, tmp_path, duration_s=3.0, **setup))
    expected = ps.causal_moves(ps.read_events(tmp_path))
    causal = judge_run(read_record(tmp_path))["checks"]["causal_order"]
    assert expected and causal["per_node"] == expected
    assert causal["violations"] == sum(expected.values()) and not causal["claimed"]


def test_judging_parses_the_lock_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """spec.lock.yaml is parsed once per run directory (analysis/lockfile.py), not once per
    reader; a rewritten lock is read again."""
    import yaml

    from analysis.lockfile import read_lock
    from testbed.explore.case import Base, Case, materialise, raw_data, simulate

    base = Base.from_data({**raw_data(Path(__file__).resolve().parents[1] / "experiments"
                                      / "quickstart.yaml"), "duration": "1s"})
    exp, topo = materialise(base, Case(5, ({"kind": "crash", "host": "h2", "at": "300ms"},)))
    run_dir, _ = simulate(exp, topo, tmp_path)
    parses = []
    real_load = yaml.load

    def counting_load(stream: Any, Loader: Any) -> Any:  # noqa: N803 -- yaml's name
        parses.append(Loader)
        return real_load(stream, Loader=Loader)

    def counting_safe_load(stream: Any) -> Any:
        return counting_load(stream, yaml.SafeLoader)

    monkeypatch.setattr(yaml, "load", counting_load)
    monkeypatch.setattr(yaml, "safe_load", counting_safe_load)
    summary = judge_run(read_record(run_dir))
    assert summary["crashed"] == ["h2"] and summary["checks"]
    assert len(parses) == 1
    if hasattr(yaml, "CSafeLoader"):
        assert parses == [yaml.CSafeLoader]
    assert read_lock(run_dir) is read_lock(run_dir) and len(parses) == 1
    lock = run_dir / "spec.lock.yaml"
    doc = yaml.safe_load(lock.read_text())
    doc["note"] = "rewritten"
    lock.write_text(yaml.safe_dump(doc) + "# longer\n")
    assert read_lock(run_dir)["note"] == "rewritten"
    assert read_lock(tmp_path / "nowhere") == {}
