"""Spark standalone on lab hosts (playbooks/spark.yml, testbed/spark.py, docs/remote.md).

A lab of two `testbed-lab-spark` hosts: `testbed spark up` starts the master on h1 and a
worker on h2 (a second `up` changes nothing), `testbed analyze RUN --master spark://...
--inventory INV` runs the job there and must give local mode's summary, with the executor's
work directory on h2 as proof it ran there; `testbed spark down` must leave no Spark process
on any host (a second `down` stops nothing).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from analysis.job import analyze
from analysis.record import read_record
from testbed.lab import ssh_argv
from tests.remotelab import lab_of
from tests.remotelab import testbed as cli
from tests.test_transit import build_run

pytestmark = [pytest.mark.root, pytest.mark.spark, pytest.mark.slow]

VOLATILE = ("analysis_s", "expectations")  # timing; what the CLI adds
# Every Spark JVM (master, worker, executor) and Python worker on a host, from /proc (the
# node image has no procps); the patterns are split so the probing shell does not match itself.
SPARK_PROCS = ("a=org.apache; b=pyspark; for p in /proc/[0-9]*; do "
               "c=$(tr '\\0' ' ' <$p/cmdline 2>/dev/null); "
               "case \"$c\" in *$a.spark*|*$b.daemon*|*$b.worker*) echo \"${p#/proc/} $c\";; "
               "esac; done")


@pytest.fixture(scope="module")
def spark_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("needs root")  # _root_policy decides skip vs fail in CI
    with lab_of(2, tmp_path_factory.mktemp("sparklab"), "--spark") as inventory:
        try:
            yield inventory
        finally:
            cli("spark", "down", "--inventory", str(inventory))


def on_host(inventory: Path, host: str, command: str) -> str:
    inv = yaml.safe_load(inventory.read_text())
    spec = inv["hosts"][host]
    done = subprocess.run([*ssh_argv(spec, spec["key"]), command], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def comparable(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k not in VOLATILE}


def test_analysis_on_lab_spark_matches_local_mode_and_down_leaves_nothing(
    spark_lab: Path, tmp_path: Path
) -> None:
    inv = yaml.safe_load(spark_lab.read_text())
    url = f"spark://{inv['hosts']['h1']['control_address']}:7077"

    # A shared_dir that is not the hosts' (here: a directory only this machine has) fails the
    # check on every host, before anything starts; without one, analyze refuses to stage.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump({**inv, "spark": {"shared_dir": str(elsewhere)}}))
    bad = cli("spark", "up", "--inventory", str(wrong), timeout=300)
    assert bad.returncode == 1
    assert bad.stderr.count("is not the orchestrator's here") == 2, bad.stderr
    assert "failed on h1" in bad.stderr and "failed on h2" in bad.stderr
    assert list(elsewhere.iterdir()) == []  # the marker is removed
    kept = re.search(r"ansible output in (\S+)\)", bad.stderr)  # kept for the user to read
    assert kept and Path(kept[1]).is_dir()
    shutil.rmtree(kept[1])
    wrong.write_text(yaml.safe_dump({"hosts": inv["hosts"]}))
    refused = cli("analyze", str(build_run(tmp_path / "refused" / "run-000000")), "--inventory",
                  str(wrong))
    assert refused.returncode == 2 and "shared_dir is missing" in refused.stderr

    local_run = build_run(tmp_path / "local" / "run-5a17c0")
    cluster_run = tmp_path / "cluster" / "run-5a17c0"
    shutil.copytree(local_run, cluster_run)
    with ThreadPoolExecutor(1) as pool:  # the local analysis while the daemons start
        starting = pool.submit(cli, "spark", "up", "--inventory", str(spark_lab), timeout=300)
        local = analyze(read_record(local_run))
        up = starting.result()
    assert up.returncode == 0, up.stdout + up.stderr
    assert url in up.stdout.split()
    assert "changed: h1, h2" in up.stdout
    again = cli("spark", "up", "--inventory", str(spark_lab), timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "changed: nothing" in again.stdout  # idempotent: running daemons are left alone

    job = cli("analyze", str(cluster_run), "--master", url, "--inventory", str(spark_lab),
              timeout=300)
    assert job.returncode == 0, job.stdout + job.stderr[-3000:]
    remote = json.loads((cluster_run / "summary.json").read_text())
    assert comparable(remote) == comparable(local)
    assert remote["network"]["pcaps"]["files"] == 4  # Python tasks ran on the executor
    assert sorted(p.name for p in (cluster_run / "parquet" / "events").iterdir()) == [
        "h1.parquet", "h2.parquet", "h3.parquet"]
    # The executor ran on h2, the worker (h1 runs only the master); the staged copy is gone.
    apps = on_host(spark_lab, "h2", "ls -d /var/tmp/tb-spark/work/app-*/0/").split()
    assert len(apps) == 1
    assert "Running task" in on_host(spark_lab, "h2", f"cat {apps[0]}stderr")
    assert on_host(spark_lab, "h1", "ls /var/tmp/tb-spark/work").split() == []
    assert list(Path(inv["spark"]["shared_dir"]).iterdir()) == []

    down = cli("spark", "down", "--inventory", str(spark_lab))
    assert down.returncode == 0, down.stdout + down.stderr
    assert "stopped on h1, h2" in down.stdout
    for host in ("h1", "h2"):
        assert on_host(spark_lab, host, SPARK_PROCS) == "", f"Spark left running on {host}"
    again = cli("spark", "down", "--inventory", str(spark_lab))
    assert again.returncode == 0 and "stopped on no host" in again.stdout
