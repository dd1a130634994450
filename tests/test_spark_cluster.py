"""The analysis job runs unchanged on a Spark standalone cluster and gives the local result.

The test starts a standalone master and one worker from the pyspark installation, on
127.0.0.1 only, runs the job there (pcap conversion included, so Python tasks run on the
worker's executor) and stops exactly the two processes it started.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest

from analysis.job import analyze
from analysis.record import read_record
from tests.test_transit import build_run

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parent.parent
SPARK_HOME = Path(pyspark.__file__).parent
VOLATILE = ("analysis_s",)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(check: Any, what: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            found = check()
        except OSError:
            found = None
        if found:
            return found
        time.sleep(0.3)
    raise TimeoutError(f"{what} did not come up in {timeout_s:.0f} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("spark-standalone")
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_WORKER_DIR": str(work / "worker"), "SPARK_LOG_DIR": str(work / "logs"),
           "PYSPARK_PYTHON": sys.executable}
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port, ui = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with (work / "master.log").open("wb") as log:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(ui)],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        with (work / "worker.log").open("wb") as log:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                 "--webui-port", str(free_port()), "--cores", "2", "--memory", "3g", url],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

        def worker_alive() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                state = json.load(r)
            return any(w.get("state") == "ALIVE" for w in state.get("workers", []))

        wait_for(worker_alive, "the standalone master with one worker")
        yield url
    finally:
        for proc in reversed(procs):
            stop(proc)


def comparable(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k not in VOLATILE}


def test_cluster_job_gives_the_same_summary_as_local_mode(
    cluster: str, tmp_path: Path
) -> None:
    local_run = build_run(tmp_path / "local" / "run")
    cluster_run = tmp_path / "cluster" / "run"
    shutil.copytree(local_run, cluster_run)
    local = analyze(read_record(local_run))
    # Its own process: one Python process holds one SparkContext, and the local one is shared.
    code = ("import sys; from pathlib import Path; from analysis.job import analyze; "
            "from analysis.record import read_record; "
            "analyze(read_record(Path(sys.argv[1])), master=sys.argv[2])")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run([sys.executable, "-c", code, str(cluster_run), cluster], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    remote = json.loads((cluster_run / "summary.json").read_text())
    assert comparable(remote) == comparable(local)
    assert remote["network"]["pcaps"]["files"] == 4
    apps = list((tmp_path.parent).glob("spark-standalone*/worker/app-*"))
    assert apps, "the job did not run on the standalone worker"
