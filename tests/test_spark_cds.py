"""The analysis's class-data archive (analysis/cds.py): named only when built, and mapped by
the driver JVM for Spark's own classes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import cds
from tests.conftest import IN_CI


def test_options_name_the_archive_only_when_it_is_built(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cds.DUMP_ENV, raising=False)
    monkeypatch.delenv(cds.OFF_ENV, raising=False)
    monkeypatch.setattr(cds, "CACHE", tmp_path)
    path = cds.archive_path()
    assert path is not None and path.parent == tmp_path
    assert cds.java_options() == ""  # not built: Spark as it was
    path.write_bytes(b"")
    assert cds.java_options() == f"-XX:SharedArchiveFile={path} {cds.QUIET}"
    monkeypatch.setenv(cds.OFF_ENV, "1")
    assert cds.java_options() == ""
    monkeypatch.setenv(cds.DUMP_ENV, str(tmp_path / "x.partial"))
    assert cds.java_options().startswith(f"-XX:ArchiveClassesAtExit={tmp_path / 'x.partial'}")


CHILD = """
import sys
import analysis.session as s
start = s.start_jvm
def logged(options):
    options["spark.driver.extraJavaOptions"] += f" -Xlog:class+load=info:file={sys.argv[1]}"
    start(options)
s.start_jvm = logged
assert s.spark_session(app="cds-test").range(10).count() == 10
"""


def test_the_driver_jvm_loads_sparks_classes_from_the_archive(tmp_path: Path) -> None:
    """`make test` builds the archive first; a driver JVM then takes thousands of Spark's
    classes from it (`shared objects file (top)`: the dynamic archive, not the JDK's)."""
    path = cds.archive_path()
    if path is None or not path.exists():
        if IN_CI:
            pytest.fail("no class-data archive in CI: `make test` builds it first")
        pytest.skip("no class-data archive: python -m analysis.cds build")
    log = tmp_path / "classes.log"
    env = {k: v for k, v in os.environ.items() if k not in (cds.DUMP_ENV, cds.OFF_ENV)}
    subprocess.run([sys.executable, "-c", CHILD, str(log)], env=env, check=True,
                   timeout=300, cwd=Path(__file__).resolve().parent.parent)
    lines = log.read_text().splitlines()
    top = [x for x in lines if "source: shared objects file (top)" in x]
    assert len(top) > 1000 and any("org.apache.spark" in x for x in top), len(top)
