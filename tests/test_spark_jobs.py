"""How many Spark jobs the analysis of an ordinary run starts, counted by Spark's status tracker
(on a small run each job's fixed cost, not its data, is what the verdict waits for:
docs/benchmarks.md "Time to verdict"); and the hash partitioning the checks compute in Python
agrees with Spark's."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from analysis.checks import partition_keys, spark_hash_long
from analysis.job import analyze
from analysis.record import read_record
from analysis.session import spark_session
from tests.eventlogs import run_dir_of

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[1]
# The sim quickstart's analysis runs 6 jobs (the overview's two, the checks, the latency and
# throughput with its broadcast, the clock samples); 15 before they were folded together.
QUICKSTART_JOBS = 6
MARGIN = 2


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    yield spark_session()


def jobs_of(spark: SparkSession, group: str) -> list[int]:
    return list(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def test_sim_quickstart_analysis_runs_few_spark_jobs(spark: SparkSession,
                                                     tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "testbed", "run",
                           str(ROOT / "experiments" / "quickstart.yaml"), "--backend", "sim",
                           "--out", str(tmp_path / "runs"), "--no-analyze"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = read_record(run_dir_of(tmp_path / "runs"))
    group = f"jobs-{tmp_path.name}"
    spark.sparkContext.setJobGroup(group, "the sim quickstart's analysis")
    try:
        summary = analyze(record)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    assert summary["ok"] is True, summary["verdict"]
    assert summary["latency"]["fnl"]["all"]["count"] > 0
    found = jobs_of(spark, group)
    assert 0 < len(found) <= QUICKSTART_JOBS + MARGIN, found


def test_partition_keys_land_where_spark_hashes_them(spark: SparkSession) -> None:
    ids = [*range(-2000, 2000), 2**62, -(2**63), 2**63 - 1, 123_456_789_012]
    rows = spark.createDataFrame([(i,) for i in ids], "id long").select(
        "id", F.expr("hash(id)").alias("h")).collect()
    assert {r["id"]: spark_hash_long(r["id"]) for r in rows} == {r["id"]: r["h"] for r in rows}
    for n in (1, 5, 31):
        keys = partition_keys(n)
        parts = spark.createDataFrame([(k,) for k in keys], "id long").select(
            F.expr(f"pmod(hash(id), {n})").alias("p")).collect()
        assert [r["p"] for r in parts] == list(range(n))
