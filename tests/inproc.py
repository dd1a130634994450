"""The `testbed` command run inside the test process, for tests whose run ends in the Spark
analysis.

`python -m testbed run ...` in a subprocess starts a JVM for its analysis: about 10 s on a
2-core machine before the first job, per test. In this process the analysis finds the session's
active SparkSession (analysis/session.py `spark_session` returns it) and starts none. The code
path is the same Typer app that `testbed` runs (testbed/cli), so exit codes, stdout and stderr
are what a user sees; only the process boundary is gone.
"""

from __future__ import annotations

import json
import os
import subprocess
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from testbed.cli import app

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def _cwd(path: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def run_cli(*args: str, env: dict[str, str] | None = None,
            cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """`testbed ARGS` in this process; the result reads like `subprocess.run`'s."""
    with _cwd(cwd):
        result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200", **(env or {})})
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(["testbed", *args], result.exit_code, result.stdout,
                                       stderr)


def maelstrom_run(out: Path, *args: str) -> tuple[Path, dict[str, Any]]:
    """`testbed maelstrom test ARGS --out OUT`, which must pass: its run directory and
    summary.json."""
    r = run_cli("maelstrom", "test", *args, "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    run = sorted(p for p in out.iterdir() if p.is_dir())[-1]
    return run, json.loads((run / "summary.json").read_text())


# Four hosts on two sites, 10 ms apart (topologies/two-sites.yaml inline): the topology of the
# tests' small inline experiments.
TWO_SITES = """\
topology:
  name: two-sites
  sites:
    lisbon: {lan: {delay: 0.5ms}}
    boston: {lan: {delay: 0.5ms}}
  wan:
    - {between: [lisbon, boston], delay: 10ms}
  hosts:
    - {name: h1, site: lisbon}
    - {name: h2, site: lisbon}
    - {name: h3, site: boston}
    - {name: h4, site: boston}
"""
