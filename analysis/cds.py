"""A class-data-sharing archive for the analysis's driver JVM: its start and first queries.

A Spark analysis of a small run spends most of its time in a cold JVM loading and verifying
the same few thousand classes every time. Java's dynamic CDS archive (JDK 13 and later) holds
them parsed and verified, mapped read-only and shared by every JVM that uses it: the sim
quickstart's analysis then needs about half the JVM time (docs/benchmarks.md, "Time to
verdict").

`python -m analysis.cds build` makes the archive once per Java and Spark install (`make run`
and `make test` call it): a child process rehearses the analysis (analysis/job.py `rehearse`)
in a JVM started with `-XX:ArchiveClassesAtExit`, and the archive is moved into place only
when that JVM has exited whole. `java_options()` names it to every later driver JVM. The key
covers the Java binary and Spark's jars and where they are, so a changed install never maps
an old archive (the JVM would refuse it anyway); no archive, or a failed build, leaves Spark
as it was: a build never fails a set-up. `TESTBED_NO_CDS=1` leaves the archive out.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "testbed" / "spark-cds"
#: set in the training child: where its JVM writes the archive at exit
DUMP_ENV = "TESTBED_CDS_DUMP"
OFF_ENV = "TESTBED_NO_CDS"
# The JVM's own notes on classes it cannot archive (signed jars, generated classes) or on an
# archive it cannot map say nothing to a user.
QUIET = "-Xlog:cds=off,cds+dynamic=off"
BUILD_TIMEOUT_S = 900


class CdsBuildError(RuntimeError):
    """The training JVM did not leave an archive."""


def _java() -> Path | None:
    """The java that Spark's launcher runs: JAVA_HOME's, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else None
    if found is None or not found.exists():
        which = shutil.which("java")
        found = Path(which) if which else None
    return found.resolve() if found is not None else None


def archive_path() -> Path | None:
    """Where this install's archive lives (whether or not it is built); None without Java."""
    java = _java()
    if java is None:
        return None
    import pyspark

    digest = hashlib.sha256()
    libjvm = sorted(java.parent.parent.glob("lib/server/libjvm.so"))
    for f in [java, *libjvm]:
        st = f.stat()
        digest.update(f"{f}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    digest.update(f"{jars}\n".encode())  # the archive holds the class path it was made on
    for jar in sorted(jars.glob("*.jar")):
        # the JVM refuses an archive whose class path jars changed size or modification time
        # (a reinstall of the same pyspark makes new mtimes), and says so only in its logs
        st = jar.stat()
        digest.update(f"{jar.name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    digest.update(f"{pyspark.__version__}:{sys.version_info[:2]}".encode())
    return CACHE / f"{digest.hexdigest()[:16]}.jsa"


def java_options() -> str:
    """The driver JVM's options for the archive: writing it (in the training child), mapping
    it (once built), or none."""
    dump = os.environ.get(DUMP_ENV)
    if dump:
        return f"-XX:ArchiveClassesAtExit={dump} {QUIET}"
    if os.environ.get(OFF_ENV):
        return ""
    path = archive_path()
    return f"-XX:SharedArchiveFile={path} {QUIET}" if path and path.exists() else ""


def end_jvm() -> None:
    """Stop this process's Spark and wait for its driver JVM to exit: in the training child
    (analysis/job.py run as a module), so that the archive is whole when the child ends."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    sc = SparkContext._active_spark_context
    if sc is not None:
        sc.stop()
    proc = getattr(gateway, "proc", None)
    if proc is not None and proc.stdin is not None:
        proc.stdin.close()  # the gateway exits on end of input, and the archive is written
        proc.wait(timeout=BUILD_TIMEOUT_S)


def build() -> Path:
    """The archive for this install, built when missing."""
    path = archive_path()
    if path is None:
        raise CdsBuildError("no java on PATH")
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.stem}.{os.getpid()}.partial")
    env = {**os.environ, DUMP_ENV: str(partial)}
    try:
        done = subprocess.run([sys.executable, "-m", "analysis.job", "--rehearse"], env=env,
                              capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        if done.returncode != 0 or not partial.exists():
            tail = (done.stderr.strip().splitlines() or ["no archive written"])[-1]
            raise CdsBuildError(tail[:300])
        os.replace(partial, path)  # whole, or not there
    except subprocess.TimeoutExpired as exc:
        raise CdsBuildError(f"the training JVM took over {BUILD_TIMEOUT_S} s") from exc
    finally:
        partial.unlink(missing_ok=True)
    return path


def main(argv: list[str]) -> int:
    if argv[:1] != ["build"]:
        print("usage: python -m analysis.cds build", file=sys.stderr)
        return 2
    try:
        path = build()
    except CdsBuildError as exc:  # Spark runs without it: never a failed set-up
        print(f"spark class-data archive not built ({exc}); analyses start slower")
        return 0
    print(f"spark class-data archive: {path} ({path.stat().st_size >> 20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
