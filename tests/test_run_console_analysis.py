"""What `testbed run` prints to the user's console: with --no-analyze the command that judges
the run later, and never the JVM's incubator-module warning when Spark starts."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "experiments" / "quickstart.yaml"


def _testbed(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "testbed", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_no_analyze_prints_the_command_that_judges_the_run_later(tmp_path: Path) -> None:
    # The quickstart without its latency line, which only the Spark analysis measures.
    spec = yaml.safe_load(QUICKSTART.read_text())
    spec["expect"] = [e for e in spec["expect"] if not e.startswith("latency.")]
    spec["topology"] = str((QUICKSTART.parent / spec["topology"]).resolve())
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(spec))
    runs = tmp_path / "runs"
    proc = _testbed("run", str(tmp_path / "exp.yaml"), "--backend", "sim", "--engine",
                    "in-process", "--out", str(runs), "--no-analyze")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verdict" not in proc.stdout
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("judge it later: testbed analyze "), proc.stdout
    words = shlex.split(last.removeprefix("judge it later: "))
    [run_dir] = runs.iterdir()
    assert words == ["testbed", "analyze", str(run_dir), "--engine", "in-process"]
    assert not (run_dir / "summary.json").exists()
    judged = _testbed(*words[1:])  # the printed command, as the user runs it
    assert judged.returncode == 0, judged.stdout + judged.stderr
    assert judged.stdout.strip().splitlines()[-1].startswith("verdict: ok")
    assert (run_dir / "summary.json").is_file()


def test_a_spark_analysed_run_prints_no_jvm_incubator_warning(tmp_path: Path) -> None:
    proc = _testbed("run", str(QUICKSTART), "--backend", "sim", "--engine", "spark",
                    "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("verdict: ok")
    console = proc.stdout + proc.stderr
    assert not [line for line in console.splitlines() if "incubator" in line.lower()], console
