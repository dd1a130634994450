"""Spark standalone on the remote hosts, for `testbed analyze RUN --master spark://...`
(docs/remote.md, "Spark on the hosts").

`testbed spark up --inventory INV` runs playbooks/spark.yml: it checks (and on a real host
installs) a JRE and the orchestrator's own pyspark distribution in a venv on every host, then
starts a standalone master on the inventory's first host and a worker on each of the others
(one host: master and worker on it), detached with pidfiles, bound to the hosts' control
addresses. `testbed spark down --inventory INV` stops them (playbook `tb_spark_state: absent`).

What the executors need, and where it comes from:

  Python   the same pyspark, py4j, pyarrow, numpy, pandas, scapy and PyYAML as the driver's
           (SPARK_DISTS, copied from this interpreter's site-packages: no registry), in
           SPARK_VENV on every host; the driver names it with PYSPARK_PYTHON. The lab image
           variant `testbed-lab-spark` (`testbed lab up --spark`) holds it and a JRE already:
           lab hosts cannot download anything (their networks do not masquerade).
  code     `analysis/` and `nodes/` as a zip the driver ships with the job (`addPyFile`).
  data     the job's Python tasks write Parquet that Spark reads back, so driver and workers
           need one filesystem at the same path: the inventory's `spark: shared_dir` (a bind
           mount on the lab, an NFS mount on real hosts). `analyze_on_cluster` copies the
           run's inputs there, analyses the copy and copies the results back.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import secrets
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console

ROOT = Path(__file__).resolve().parent.parent
# What the analysis job's Python tasks import on an executor (analysis/*.py), with what those
# need at run time; copied from the orchestrator's interpreter so every version matches.
SPARK_DISTS = ("pyspark", "py4j", "pyarrow", "numpy", "pandas", "python-dateutil", "pytz",
               "tzdata", "six", "scapy", "PyYAML")
PYVER = f"{sys.version_info.major}.{sys.version_info.minor}"
SPARK_VENV = "/opt/testbed-spark/venv"
SPARK_PYTHON = f"{SPARK_VENV}/bin/python"
SPARK_DIR = "/var/tmp/tb-spark"  # pidfiles, logs, the workers' app directories
MASTER_PORT = 7077
MASTER_UI_PORT = 8080
WORKER_UI_PORT = 8081
CACHE = Path.home() / ".cache" / "testbed"
SPARK_LAB_REPO = "testbed-lab-spark"
SPARK_DOCKERFILE = f"""\
ARG LAB_IMAGE
FROM ${{LAB_IMAGE}}
# A JRE for Spark from Debian (testbed/spark.py); the build runs on the host network.
RUN command -v java >/dev/null || (apt-get update \\
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
       default-jre-headless && rm -rf /var/lib/apt/lists/*)
# The orchestrator's own pyspark and the executors' Python packages (SPARK_DISTS).
RUN python3 -m venv --system-site-packages {SPARK_VENV}
ADD site.tar {SPARK_VENV}/lib/python{PYVER}/site-packages/
RUN {SPARK_PYTHON} -c 'import pyspark, pyarrow, pandas, scapy, yaml' && mkdir -p {SPARK_DIR}
LABEL org.testbed.image=lab-spark
"""

spark_app = typer.Typer(help="Spark standalone on an inventory's hosts, for `testbed analyze "
                             "--master`.\n\nExample: [bold]testbed spark up --inventory "
                             "lab/latest/inventory.yaml[/]", no_args_is_help=True)
console = Console()
err = Console(stderr=True)


class SparkError(Exception):
    """Spark cannot be installed, started or used on the hosts; one sentence."""


# --- the distribution: the driver's packages as one tarball -------------------------------


def _distributions() -> list[md.Distribution]:
    out = []
    for name in SPARK_DISTS:
        try:
            out.append(md.distribution(name))
        except md.PackageNotFoundError:
            if name == "six":  # python-dateutil < 2.9 only
                continue
            raise SparkError(f"{name} is not installed here; the executors need the driver's "
                             "copy (pip install -e '.[analysis]')") from None
    return out


def bundle_key() -> str:
    """Content key of the executors' Python: interpreter version and every distribution's
    name, version and RECORD (which lists each file's hash)."""
    h = hashlib.sha256(PYVER.encode())
    for d in _distributions():
        record = d.read_text("RECORD") or ""
        h.update(f"\0{d.metadata['Name']}=={d.version}\0".encode() + record.encode())
    return h.hexdigest()[:12]


def bundle(cache: Path = CACHE) -> Path:
    """An uncompressed tar of SPARK_DISTS as they sit in site-packages (cached by content
    key): ADDed by the lab image, pushed to real hosts by playbooks/spark.yml."""
    out = cache / f"spark-site-{bundle_key()}.tar"
    if out.exists():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as tar:
        for d in _distributions():
            for f in d.files or []:
                if f.parts[0] == ".." or "__pycache__" in f.parts:
                    continue  # console scripts outside site-packages; bytecode
                src = Path(str(d.locate_file(f)))
                if src.is_file():
                    tar.add(src, arcname=str(f), recursive=False)
    tmp.rename(out)
    return out


def spark_image() -> str:
    """The `testbed-lab-spark` image: the lab image plus a JRE and the bundle, tagged by the
    lab image, the recipe and the bundle's content key; built once per machine."""

    from testbed.labimage import build_once, lab_image

    lab = lab_image()
    recipe = hashlib.sha256(SPARK_DOCKERFILE.encode()).hexdigest()[:6]
    tag = f"{SPARK_LAB_REPO}:{lab.split(':', 1)[1]}-{recipe}{bundle_key()[:6]}"
    if not _has_image(tag):
        site = bundle()  # built only when the image is missing
        return build_once(tag, SPARK_DOCKERFILE, {"LAB_IMAGE": lab}, "lab-spark",
                          files={"site.tar": site}, timeout=1800)
    return tag


def _has_image(tag: str) -> bool:
    import docker as sdk

    from testbed.engine import client

    docker = client()
    try:
        docker.images.get(tag)
        return True
    except sdk.errors.ImageNotFound:
        return False
    finally:
        docker.close()


# --- the cluster: playbooks/spark.yml over an inventory -----------------------------------


def _inventory(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The inventory's hosts (testbed/backends/ansible.py) and its optional `spark:` section
    (`python`: the executors' interpreter, `shared_dir`: one filesystem at the same path on
    this machine and every host)."""
    from testbed.backends.ansible import InventoryError, load_inventory

    try:
        hosts = load_inventory(path)
    except InventoryError as exc:
        raise SparkError(str(exc)) from None
    doc = yaml.safe_load(path.read_text()) or {}
    section = doc.get("spark") or {}
    if not isinstance(section, dict):
        raise SparkError(f"{path}: spark: expected a mapping (python, shared_dir)")
    return hosts, section


def master_url(inventory: Path) -> str:
    hosts, _ = _inventory(inventory)
    first = next(iter(hosts.values()))
    return f"spark://{first.control_address}:{MASTER_PORT}"


def _run(inventory: Path, state: str, cores: int = 2, memory: str = "2g") -> Any:
    import pyspark

    from testbed.backends.ansible import Playbooks

    hosts, section = _inventory(inventory)
    python = str(section.get("python") or SPARK_PYTHON)
    names = list(hosts)
    url = master_url(inventory)
    common = {"tb_spark_state": state, "tb_spark_python": python,
              "tb_spark_venv": str(Path(python).parent.parent), "tb_spark_dir": SPARK_DIR,
              "tb_spark_pyver": PYVER, "tb_spark_version": pyspark.__version__,
              "tb_spark_bundle": str(bundle()) if state == "present" else "",
              "tb_spark_url": url, "tb_spark_port": MASTER_PORT,
              "tb_spark_ui_port": MASTER_UI_PORT, "tb_spark_worker_ui_port": WORKER_UI_PORT,
              "tb_spark_cores": cores, "tb_spark_memory": memory}
    hostvars = {h: {**common, "tb_spark_bind": hosts[h].control_address,
                    "tb_spark_master": h == names[0],
                    "tb_spark_worker": h != names[0] or len(names) == 1} for h in names}
    # The job needs `shared_dir` to be one filesystem here and on every host: a marker
    # written here must read back the same on each host (the playbook's check).
    marker = None
    shared = section.get("shared_dir")
    if state == "present" and shared:
        if not Path(str(shared)).is_dir():
            raise SparkError(f"{inventory}: spark: shared_dir {shared} is not a directory here")
        token = secrets.token_hex(8)
        marker = Path(str(shared)) / f".tb-spark-check-{token}"
        marker.write_text(token + "\n")
        for v in hostvars.values():
            v.update(tb_spark_marker=str(marker), tb_spark_token=token)
    for v in hostvars.values():
        v.setdefault("tb_spark_marker", "")
        v.setdefault("tb_spark_token", "")
    base = Path(tempfile.mkdtemp(prefix="tb-spark-ansible-"))
    try:
        res = Playbooks(base, hosts).run("spark", hostvars)
    finally:
        if marker is not None:
            marker.unlink(missing_ok=True)
    if res.problems:
        raise SparkError("; ".join(f"spark {'up' if state == 'present' else 'down'} failed on "
                                   f"{h}: {m}" for h, m in sorted(res.problems.items()))
                         + f" (ansible output in {base})")
    shutil.rmtree(base, ignore_errors=True)
    return res


def alive_workers(inventory: Path) -> list[str]:
    """The workers the master reports ALIVE (its JSON status page)."""
    hosts, _ = _inventory(inventory)
    first = next(iter(hosts.values()))
    with urllib.request.urlopen(f"http://{first.control_address}:{MASTER_UI_PORT}/json/",
                                timeout=3) as r:
        state = json.load(r)
    return sorted(str(w.get("host")) for w in state.get("workers", [])
                  if w.get("state") == "ALIVE")


def up(inventory: Path, cores: int = 2, memory: str = "2g",
       timeout_s: float = 120.0) -> tuple[str, dict[str, int]]:
    """Start (or find running) the master and workers; returns the master URL and the hosts
    the playbook changed. Waits until every worker has registered."""
    hosts, _ = _inventory(inventory)
    res = _run(inventory, "present", cores, memory)
    want = len(hosts) - 1 or 1
    deadline = time.monotonic() + timeout_s
    alive: list[str] = []
    while time.monotonic() < deadline:
        try:
            alive = alive_workers(inventory)
        except OSError:
            alive = []
        if len(alive) >= want:
            return master_url(inventory), {h: n for h, n in res.changed.items() if n}
        time.sleep(0.5)
    raise SparkError(f"{len(alive)} of {want} Spark worker(s) registered with the master in "
                     f"{timeout_s:.0f} s; logs in {SPARK_DIR}/logs on the hosts")


def down(inventory: Path) -> dict[str, int]:
    """Stop every Spark daemon (and its executors) the pidfiles name; returns the hosts
    where something was stopped."""
    res = _run(inventory, "absent")
    return {h: n for h, n in res.changed.items() if n}


# --- the driver: analysing a run on the cluster -------------------------------------------


def code_zip(dest: Path) -> Path:
    """`analysis/` and `nodes/` as one zip for `addPyFile`: what the executors import."""
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        for pkg in ("analysis", "nodes"):
            for f in sorted((ROOT / pkg).rglob("*")):
                if f.is_file() and "__pycache__" not in f.parts:
                    z.write(f, str(f.relative_to(ROOT)))
    return dest


def _signature(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


@contextmanager
def staged(run_dir: Path, inventory: Path) -> Iterator[Path]:
    """A copy of the run in the inventory's `shared_dir` (the same path on every worker) to
    analyse there; on success, what the analysis wrote or changed is copied back into the
    run directory. The copy is removed either way."""
    _, section = _inventory(inventory)
    shared = section.get("shared_dir")
    if not shared:
        raise SparkError(f"{inventory}: spark: shared_dir is missing (a directory at the same "
                         "path on this machine and every host; docs/remote.md)")
    shared_dir = Path(str(shared))
    if not shared_dir.is_dir():
        raise SparkError(f"{inventory}: spark: shared_dir {shared_dir} is not a directory here")
    run_dir = run_dir.resolve()
    top = shared_dir / f"analyze-{secrets.token_hex(4)}"
    stage = top / run_dir.name
    try:
        shutil.copytree(run_dir, stage, ignore=shutil.ignore_patterns(
            "parquet", "ansible", "summary.json", "report.html"))
        before = {p.relative_to(stage): _signature(p) for p in stage.rglob("*") if p.is_file()}
        yield stage
        for p in sorted(stage.rglob("*")):
            rel = p.relative_to(stage)
            if p.is_file() and before.get(rel) != _signature(p):
                (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(p, run_dir / rel)
        for sub in ("parquet",):  # rewritten whole by the job: drop stale files
            if (stage / sub).is_dir():
                for old in (run_dir / sub).rglob("*"):
                    if old.is_file() and not (stage / sub / old.relative_to(run_dir / sub)
                                              ).exists():
                        old.unlink()
    finally:
        shutil.rmtree(top, ignore_errors=True)


def start_driver(run_dir: Path, master: str, inventory: Path) -> Any:
    """The driver's SparkSession for `master` with the inventory's executor Python and this
    tree's code shipped to the executors; `analysis.job.analyze` then uses it."""
    import os

    from analysis.record import log_files
    from analysis.session import EVENT_LINE_BYTES, spark_session

    _, section = _inventory(inventory)
    os.environ["PYSPARK_PYTHON"] = str(section.get("python") or SPARK_PYTHON)
    logs = sum(p.stat().st_size for _, p in log_files(run_dir))
    spark = spark_session(master, app=f"testbed-analyze-{run_dir.name}",
                          events=logs // EVENT_LINE_BYTES)  # as analysis.job.analyze does
    spark.sparkContext.addPyFile(str(code_zip(run_dir.parent / "testbed-code.zip")))
    return spark


# --- CLI --------------------------------------------------------------------------------

InventoryOpt = Annotated[Path, typer.Option("--inventory", help="hosts (what `testbed lab up` "
                                            "writes); the first runs the master")]


@spark_app.command("up")
def up_cmd(
    inventory: InventoryOpt,
    cores: Annotated[int, typer.Option(help="cores each worker offers")] = 2,
    memory: Annotated[str, typer.Option(help="memory each worker offers", metavar="SIZE")] = "2g",
) -> None:
    """Start a Spark standalone master on the first host and workers on the others
    (idempotent); print the master URL.

    Example: [bold]sudo testbed lab up --hosts 3 --spark && sudo testbed spark up --inventory
    lab/latest/inventory.yaml[/], then [bold]testbed analyze RUN --master spark://...
    --inventory lab/latest/inventory.yaml[/]
    """
    try:
        with console.status("starting Spark on the hosts"):
            url, changed = up(inventory, cores, memory)
    except SparkError as exc:
        err.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    console.print(f"changed: {', '.join(sorted(changed)) or 'nothing'}", highlight=False)
    print(url)
    console.print(f"analyse with: testbed analyze RUN --master {url} --inventory {inventory}",
                  highlight=False)


@spark_app.command("down")
def down_cmd(inventory: InventoryOpt) -> None:
    """Stop the Spark daemons and their executors on every host (idempotent).

    Example: [bold]testbed spark down --inventory lab/latest/inventory.yaml[/]
    """
    try:
        stopped = down(inventory)
    except SparkError as exc:
        err.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    console.print(f"spark down: stopped on {', '.join(sorted(stopped)) or 'no host'}",
                  highlight=False)
