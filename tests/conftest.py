"""Shared test policy.

- `root` tests need root, namespaces, iptables or UML: they run when root, and in CI
  (CI=true) a missing capability is a failure, never a silent skip.
- A session fixture asserts that the suite left nothing behind: no process started for a run,
  no testbed network namespace, veth, bridge or iptables chain.
- Under pytest-xdist (`make test`: two workers, `--dist loadgroup`) every `root` or `timing`
  test is in one group, so they run one after another on one worker -- never two emulated
  networks or two timed runs at once -- while the rest (sim, local, Spark, parsing) run on
  the other worker beside them. A timing test thus shares the machine with one busy worker,
  the load `make test-stress` proves it survives.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# TESTBED_SIM_COMPILED=1: run the in-process simulator tests on the compiled hot path
# (nodes/fastpath.py; mypyc enforces annotations at run time, so the sim tests must pass on
# it too). Activation has to precede every import of the compiled modules.
if os.environ.get("TESTBED_SIM_COMPILED") == "1":
    from nodes.fastpath import activate

    if not activate():
        raise RuntimeError("TESTBED_SIM_COMPILED=1 but the compiled hot path is not active "
                           "(python -m nodes.fastpath build)")

from testbed.rundir import RUN_ENV  # noqa: E402

# Every run the suite analyses with Spark is judged in-process too, and the analysis fails
# when the two judges differ (analysis/judge.py `crosscheck`).
os.environ["TESTBED_CROSSCHECK"] = "1"

IN_CI = os.environ.get("CI") == "true"
# Every process this test session starts inherits this marker, so the leftover check below
# sees only our own processes, not those of anything else running on the machine.
SESSION_MARK = f"TESTBED_TEST_SESSION={os.getpid()}-{time.time_ns()}"
os.environ["TESTBED_TEST_SESSION"] = SESSION_MARK.split("=", 1)[1]
IS_ROOT = os.geteuid() == 0
SERIAL_GROUP = "serial"  # the xdist group of every root or timing test
_ran_root = False  # whether this session (this xdist worker) ran a root test


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the group into the node id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("root") or item.get_closest_marker("timing"):
            item.add_marker(pytest.mark.xdist_group(SERIAL_GROUP))


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Under `--dist loadgroup`, xdist names every grouped test `<id>@serial` on the workers;
    a pytest or xdist that silently stops doing so would run two emulated networks at once."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    lost = [i.nodeid for i in session.items
            if (i.get_closest_marker("root") or i.get_closest_marker("timing"))
            and not i.nodeid.endswith(f"@{SERIAL_GROUP}")]
    if lost:
        raise pytest.UsageError(f"xdist did not group {len(lost)} root/timing tests (e.g. "
                                f"{lost[0]}): this pytest/xdist pair ignores xdist_group")


@pytest.fixture(autouse=True)
def _root_policy(request: pytest.FixtureRequest) -> None:
    global _ran_root
    if "root" in request.keywords:
        _ran_root = True
    if "root" in request.keywords and not IS_ROOT:
        if IN_CI:
            pytest.fail("root test in CI without root: CI must run the suite as root")
        pytest.skip("needs root (runs in CI)")


def _leftover_processes() -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if SESSION_MARK.encode() in env and any(e.startswith(f"{RUN_ENV}=".encode())
                                                for e in env):
            found.append(entry.name)
    return found


def _testbed_netns() -> list[str]:
    try:
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    except OSError:
        return []
    return [line.split()[0] for line in out.splitlines() if line.startswith("tb")]


@pytest.fixture(scope="session", autouse=True)
def nothing_left_behind():
    before_ns = set(_testbed_netns())
    before_procs = set(_leftover_processes())
    yield
    procs = sorted(set(_leftover_processes()) - before_procs)
    # Only a session that ran root tests can create namespaces; under xdist another worker's
    # namespaces may exist while this one ends (its own check covers them).
    ns = sorted(set(_testbed_netns()) - before_ns) if _ran_root else []
    assert not procs, f"test session left run processes behind: pids {procs}"
    assert not ns, f"test session left network namespaces behind: {ns}"


@pytest.fixture(scope="session")
def spark():
    from analysis.session import spark_session

    session = spark_session("local[2]")
    yield session


@pytest.fixture(scope="session")
def docker_image() -> Iterator[dict[str, str]]:
    if os.geteuid() != 0:
        pytest.skip("needs root")  # _root_policy decides skip vs fail in CI
    from testbed.engine import ensure_engine, stop_engine
    from testbed.images import build

    started = ensure_engine()
    try:
        yield build("auto")
    finally:
        if started:
            stop_engine()


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A lab of 4 SSH hosts (containers) for the remote backend; its inventory file."""
    if os.geteuid() != 0:
        pytest.skip("needs root")  # _root_policy decides skip vs fail in CI
    from tests.remotelab import lab_of

    with lab_of(4, tmp_path_factory.mktemp("lab")) as inventory:
        yield inventory
