"""The one place that builds a SparkSession for the analysis jobs.

Defaults suit the testbed's own machine (2 cores, 24 GiB): local mode, few shuffle
partitions (delivery logs are megabytes, not terabytes; more for a job over millions of
events, shuffle_partitions), no UI, errors-only logging.
A `--master` URL hands the same jobs to a real cluster.

A session that analysis/warmup.py started while the run ran is waited for and returned.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import warnings
from pathlib import Path

from pyspark.sql import SparkSession

from analysis.cds import java_options
from analysis.warmup import await_warm_up

_LOG4J = Path(__file__).with_name("log4j2.properties")
# The project root: Python workers on executors import `analysis` (and `nodes.wire`) from it.
_ROOT = Path(__file__).resolve().parent.parent


def _is_local(master: str) -> bool:
    return master.startswith("local")


def _route_source(master: str) -> str | None:
    """This machine's address on the route to the (first) master: where a cluster's executors
    can reach the driver. None when there is no such route."""
    import socket

    host = master.removeprefix("spark://").split(",")[0].rsplit(":", 1)[0]
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 7077))  # UDP: picks the route, sends nothing
            return str(s.getsockname()[0])
    except OSError:
        return None


def _loopback_master(master: str) -> bool:
    hosts = master.removeprefix("spark://").split(",")
    return all(h.split(":")[0] in ("127.0.0.1", "localhost") for h in hosts)


# From about this many log events on, a job runs long enough for the JVM's optimizing JIT to
# pay off (bench/checker_scale.py, local[2], C1-only + serial GC vs full JIT + parallel GC:
# 100k events 3.6 vs 4.5 s, 1M 9.2 vs 8.1 s, 10M 64 vs 36 s).
LARGE_JOB_EVENTS = 500_000
# Bytes per event line in nodes/*/events.jsonl, about: to size a job from its input files.
EVENT_LINE_BYTES = 130
# Events per shuffle partition, about, for a large job: a Python pass holds a partition's rows
# at once (analysis/checks_mid.py MidPass), so its memory stays bounded however long the run.
PARTITION_EVENTS = 2_000_000


def shuffle_partitions(events: int) -> int:
    """Shuffle partitions for a job over about `events` log events: 4, and one per
    PARTITION_EVENTS above that."""
    return max(4, -(-events // PARTITION_EVENTS))


def job_conf(events: int) -> dict[str, str]:
    """The SQL settings of a job over about `events` log events, which a running session
    takes too: its shuffle partitions, and adaptive execution for a large job only (on a small
    one each of its re-plannings is one more Spark job, and there is no skew to adapt to)."""
    return {"spark.sql.shuffle.partitions": str(shuffle_partitions(events)),
            "spark.sql.adaptive.enabled": str(events >= LARGE_JOB_EVENTS).lower()}


# A line the JVM prints on stderr at its start that says nothing to the user: Spark's launcher
# adds the incubating vector module to every driver JVM, and Java announces it.
_JVM_NOISE = re.compile(rb"^WARNING: Using incubator modules: ")


def _forward_stderr(fd: int) -> None:
    """Copy what the JVM writes to the pipe `fd` to this process's stderr (file descriptor 2,
    where it wrote when it inherited it), without the _JVM_NOISE lines."""
    with os.fdopen(fd, "rb") as stream:
        for line in stream:
            if not _JVM_NOISE.match(line):
                os.write(2, line)


def start_jvm(options: dict[str, str]) -> None:
    """Start the driver JVM with these Spark options (as SparkContext would) unless this
    process has one, its stderr forwarded by a daemon thread without the _JVM_NOISE lines."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return
        read, write = os.pipe()
        threading.Thread(target=_forward_stderr, args=(read,), name="jvm-stderr",
                         daemon=True).start()
        try:  # the thread reads from the start: a JVM that fails to start says why
            gateway = launch_gateway(SparkConf(loadDefaults=False).setAll(list(options.items())),
                                     popen_kwargs={"stderr": write})
        finally:
            os.close(write)  # the JVM holds its own copy; the thread ends when it exits
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm


def spark_session(master: str | None = None, app: str = "testbed",
                  events: int = 0) -> SparkSession:
    """Return the active SparkSession (the one analysis/warmup.py started, once it is up), or
    start one (default master `local[*]`).

    `events` is about how many log events the job will read: a local JVM is tuned for a short
    job below LARGE_JOB_EVENTS and for throughput from there on; a session already up gets
    the shuffle partitions for them."""
    await_warm_up()
    active = SparkSession.getActiveSession() or SparkSession._instantiatedSession
    if active is not None:
        if events:
            for key, value in job_conf(events).items():
                active.conf.set(key, value)
        return active
    return new_session(master, app, events)


LOCAL = "local[*]"


def new_session(master: str | None, app: str, events: int) -> SparkSession:
    """A new SparkSession with the project's settings."""
    master = master or LOCAL
    java_opts = f"-Dlog4j2.configurationFile={_LOG4J.as_uri()}"
    options: dict[str, str] = {
        "spark.master": master,
        "spark.app.name": app,
        "spark.default.parallelism": "4",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        # The checkers hand each node's (or each message range's) rows to numpy through
        # Arrow: larger batches cut the per-batch cost of that hand-over on millions of
        # deliveries.
        "spark.sql.execution.arrow.maxRecordsPerBatch": "200000",
        # ... and rows of large values (the checker suite's Arrow IPC blobs) in batches well
        # under the 2 GiB an Arrow binary column holds.
        "spark.sql.execution.arrow.maxBytesPerBatch": str(256 << 20),
        **job_conf(events),
    }
    # Python tasks (pcap decoding, per-node order checks) run in this interpreter, which has
    # pyarrow (the default `python3` may not); a cluster's workers need it at the same path.
    # pyspark reads only the environment variable for this.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Most delivery logs are small and analyses short, so the JVM's warm-up dominates: the
    # C1-only JIT and the serial GC cut the CPU of a first analysis by about 40% on 2
    # cores. Millions of events need the optimizing JIT (and a GC that uses both cores).
    fast_jvm = ("-XX:+UseParallelGC" if events >= LARGE_JOB_EVENTS
                else "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    # The driver JVM maps the class-data archive of this install when it is built.
    options["spark.driver.extraJavaOptions"] = f"{java_opts} {fast_jvm} {java_options()}".strip()
    if _is_local(master):
        # Local mode runs in the driver JVM: give it a quarter of a 24 GiB box, and keep
        # every Spark socket on loopback (the testbed's network rule; also skips the slow
        # hostname lookup on start).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        options |= {"spark.driver.memory": "4g", "spark.driver.host": "127.0.0.1",
                    "spark.driver.bindAddress": "127.0.0.1"}
    else:
        pythonpath = os.pathsep.join(p for p in (str(_ROOT), os.environ.get("PYTHONPATH")) if p)
        # The same JIT and GC choice for the driver and the executors (their JVMs start for
        # this one job too).
        options |= {"spark.executor.extraJavaOptions": f"{java_opts} {fast_jvm}",
                    "spark.executorEnv.PYTHONPATH": pythonpath}
        if _loopback_master(master):
            # A master on loopback means a cluster on this machine: keep the driver's sockets
            # there too (the testbed's network rule).
            options |= {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
        elif (os.environ.get("SPARK_LOCAL_IP", "127.").startswith("127.")
              and (source := _route_source(master))):
            # A master elsewhere (e.g. `testbed spark up` on remote or lab hosts,
            # docs/remote.md): executors connect back to the driver, so it listens on this
            # machine's address facing the master, not on whatever the hostname resolves to,
            # nor on the loopback SPARK_LOCAL_IP a local-mode analysis in this process (or
            # its parent) set. An explicit other SPARK_LOCAL_IP wins.
            options |= {"spark.driver.host": source, "spark.driver.bindAddress": source}
    start_jvm(options)
    with warnings.catch_warnings():
        # pyspark warns about the pandas version on start; the analysis does not use pandas.
        warnings.simplefilter("ignore", FutureWarning)
        spark = SparkSession.builder.config(map={k: v for k, v in options.items()}).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
