"""The `testbed` command line (README.md "The CLI").

Every command is one function with typed parameters and an example in its help; user errors are
one sentence (`file:line: field: message` for specs) and exit code 2, never a traceback.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from testbed.backends import BackendError, make_backend
from testbed.lab import lab_app
from testbed.nightly.command import nightly as nightly_command
from testbed.rundir import DEFAULT_RUNS, RunDir, find_runs, resolve_run
from testbed.spec.loader import SpecError, load_experiment, load_topology
from testbed.teardown import is_active, teardown

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode="rich",
    help="Emulate a WAN, run a total-order multicast protocol on it, inject faults, and judge "
    "the result.\n\nExample: [bold]testbed run experiments/quickstart.yaml[/]",
)
console = Console()
err = Console(stderr=True, soft_wrap=True)

RunsOpt = Annotated[Path, typer.Option("--runs", help="where run directories live")]


def fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[red]error:[/] {message}", highlight=False)
    return typer.Exit(code)


def _spec_errors(exc: SpecError) -> typer.Exit:
    for line in exc.problems:
        err.print(line, highlight=False, markup=False)
    return typer.Exit(2)


@app.command()
def run(
    experiment: Annotated[Path, typer.Argument(help="experiment YAML")],
    backend: Annotated[str | None, typer.Option(help="override the spec: sim, local, ...")] = None,
    out: Annotated[Path, typer.Option("--out", help="runs directory")] = DEFAULT_RUNS,
    master: Annotated[str | None, typer.Option(help="Spark master URL (default local[*])")] = None,
    analyze: Annotated[bool, typer.Option(help="run the Spark analysis afterwards")] = True,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the plan, change nothing")] = (
        False),
    inventory: Annotated[Path | None, typer.Option(help="remote backend: hosts (docs/remote.md)"
                                                   )] = None,
) -> None:
    """Run an experiment end to end and judge it.

    Example: [bold]testbed run experiments/quickstart.yaml --backend sim[/]
    """
    from testbed.runner import run_experiment

    try:
        exp, topo = load_experiment(experiment, backend)
    except SpecError as exc:
        raise _spec_errors(exc) from None
    if dry_run:
        print_run_plan(exp, topo)
        return
    try:
        if inventory is None and exp.inventory:  # relative to the experiment file
            inventory = experiment.parent / exp.inventory
        if exp.backend == "remote" and (inventory is None or not inventory.is_file()):
            raise fail(f"the remote backend needs an inventory file ({inventory or 'none given'}"
                       "): --inventory hosts.yaml or `inventory:` in the experiment")
        result = run_experiment(exp, topo, out, console, master=master, analyze=analyze,
                                inventory=inventory)
    except BackendError as exc:
        raise fail(str(exc)) from None
    if analyze:
        print_summary(result.summary)
        for line in result.failures:
            err.print(f"[red]expectation failed:[/] {line}", highlight=False)
        if result.ok:
            console.print(f"[green]all {len(exp.expect)} expectations hold[/]")
    console.print(f"results in {result.run.path}")
    raise typer.Exit(0 if result.ok else 1)


@app.command()
def up(
    topology: Annotated[Path, typer.Argument(help="topology YAML")],
    backend: Annotated[str, typer.Option(help="local (no root) or mininet (root)")] = "local",
    protocol: Annotated[str, typer.Option(help="protocol the idle nodes run (local)")] = (
        "sequencer"),
    applier: Annotated[str, typer.Option(help="mininet shaping: auto, netem or userspace")] = (
        "auto"),
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the plan, change nothing")] = (
        False),
    out: Annotated[Path, typer.Option("--out", help="runs directory")] = DEFAULT_RUNS,
    transport: Annotated[str, typer.Option(help="local: udp, udp-aead or tls")] = "udp",
    mgmt_tls: Annotated[bool, typer.Option("--mgmt-tls", help="local: HTTPS management with "
                                           "the run's certificates")] = False,
) -> None:
    """Bring a topology up and leave it running (inspect it, then [bold]testbed teardown[/]).

    Examples: [bold]testbed up topologies/two-sites.yaml --dry-run[/],
    [bold]testbed up topologies/two-sites.yaml --transport tls --mgmt-tls[/],
    [bold]sudo testbed up topologies/two-sites.yaml --backend mininet[/]
    """
    if transport not in ("udp", "udp-aead", "tls"):
        raise fail(f"--transport must be udp, udp-aead or tls, not {transport!r}")
    if backend != "local" and (transport != "udp" or mgmt_tls):
        raise fail("--transport and --mgmt-tls apply to the local backend only")
    try:
        topo = load_topology(topology)
    except SpecError as exc:
        raise _spec_errors(exc) from None
    paths = topo.paths()
    print_paths(paths)
    if backend not in ("local", "mininet"):
        raise fail(f"`testbed up` keeps hosts running on local or mininet, not {backend}")
    if dry_run:
        if backend == "mininet":
            print_shaping_plan(topo, paths, applier)
        console.print(f"dry run: would start {len(paths.hosts)} {backend} hosts; nothing changed")
        return
    run_dir = RunDir.create(out, topo.name)
    run_dir.journal.append("begin", topology=topo.name, backend=backend, mode="up")
    try:
        if backend == "mininet":
            _up_mininet(run_dir, topo, applier)
        else:
            _up_local(run_dir, topo, topology, paths, protocol, transport, mgmt_tls)
    except BackendError as exc:
        teardown(run_dir)
        raise fail(str(exc)) from None
    console.print(f"run {run_dir.run_id} in {run_dir.path}; stop it with "
                  f"[bold]testbed teardown {run_dir.run_id}[/]")


def _up_local(run_dir: RunDir, topo: Any, topology: Path, paths: Any, protocol: str,
              transport: str = "udp", mgmt_tls: bool = False) -> None:
    from testbed.deploy import node_configs
    from testbed.runner import security, write_lock
    from testbed.spec.experiment import ExperimentSpec

    exp = ExperimentSpec.model_validate({
        "name": topo.name, "topology": topology.name, "backend": "local", "duration": "1s",
        "protocol": {"name": protocol}, "workload": {"senders": [], "rate": "1/s"},
        "transport": transport, "management": {"tls": mgmt_tls}})
    write_lock(run_dir, exp, topo, paths)
    be = make_backend("local", run_dir, topo, paths)
    addresses = be.up()
    be.deploy(node_configs(exp, topo, paths, addresses, run_dir.path, time.time_ns(),
                           be.inprocess_shaping, duration_ns=0, control_port=0,
                           **security(run_dir, exp, addresses)))
    table = Table("host", "data address", "control", title=f"{topo.name} is up")
    for host, addr in addresses.items():
        table.add_row(host, f"{addr.data}:{addr.port}", addr.control)
    console.print(table)


def _up_mininet(run_dir: RunDir, topo: Any, applier: str) -> None:
    from testbed.backends.mininet import bring_up

    _, addresses, report = bring_up(run_dir, topo, applier=applier)
    table = Table("host", "data address", "control", title=f"{topo.name} is up (mininet)")
    for host, addr in addresses.items():
        table.add_row(host, addr.data, addr.control)
    console.print(table)
    rtt = Table("pair", "configured RTT ms", "measured RTT ms", "",
                title="ping all pairs (flagged: off by more than 10% + 1 ms)")
    for row in report:
        measured = row["measured_ms"]
        rtt.add_row(f"{row['src']}->{row['dst']}", f"{row['configured_ms']:.2f}",
                    "no reply" if measured is None else f"{measured:.2f}",
                    "[red]OFF[/]" if row["off"] else "ok")
    console.print(rtt)


def print_run_plan(exp: Any, topo: Any) -> None:
    from testbed.faults.schedule import correct_hosts, expand

    paths = topo.paths()
    console.print(f"{exp.name}: {exp.protocol.name} on {len(paths.hosts)} {exp.backend} hosts, "
                  f"{exp.duration / 1e9:g} s of {exp.workload.rate:g} msgs/s per sender "
                  f"({exp.workload.arrival}), seed {exp.seed}")
    actions = expand(exp.faults, paths.hosts, exp.duration, exp.seed)
    console.print(f"then drain {exp.drain / 1e9:g} s, up to {max(exp.drain, exp.drain_max) / 1e9:g}"
                  f" s until quiescent among {', '.join(correct_hosts(paths.hosts, actions))}")
    mgmt = exp.management
    console.print(f"transport {exp.transport}; management "
                  f"{'HTTPS' + (' (mutual TLS)' if mgmt.mutual else '') if mgmt.tls else 'HTTP'}"
                  + (f", certificates {mgmt.key}" if mgmt.tls or exp.transport == "tls" else ""))
    print_paths(paths)
    if exp.backend in ("mininet", "docker"):
        print_shaping_plan(topo, paths, "netem")
    if actions:
        t = Table("at s", "action", "parameters", title="fault timeline")
        for a in actions:
            t.add_row(f"{a.at_ns / 1e9:g}", a.op, json.dumps(a.params))
        console.print(t)
    console.print("dry run: nothing created")


def print_shaping_plan(topo: Any, paths: Any, applier: str) -> None:
    from testbed.backends.mininet import data_addresses
    from testbed.shaping import netem
    from testbed.shaping.plan import host_plans

    for host, plan in host_plans(topo, paths, data_addresses(topo), "d0").items():
        print(f"# host {host}")
        print(netem.script(plan))


@app.command()
def status(runs: RunsOpt = DEFAULT_RUNS) -> None:
    """List runs that still hold resources.

    Example: [bold]testbed status[/]
    """
    from testbed.processes import is_alive

    table = Table("run", "state", "live resources")
    for r in find_runs(runs):
        live = r.journal.live()
        procs = [e for e in live if e.get("kind") == "process"
                 and is_alive(e["pid"], e.get("starttime"))]
        state = "active" if is_active(r) else "finished"
        if state == "active" or procs:
            table.add_row(r.path.name, state, ", ".join(e["id"] for e in procs) or "-")
    console.print(table if table.rows else "no active runs")


@app.command(name="teardown")
def teardown_cmd(
    name: Annotated[str | None, typer.Argument(help="run id or directory; default: all")] = None,
    runs: RunsOpt = DEFAULT_RUNS,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list, remove nothing")] = False,
) -> None:
    """Remove everything a run created, from its journal (safe after a crash, idempotent).

    Example: [bold]testbed teardown 3fa2c1[/]
    """
    try:
        targets = [resolve_run(runs, name)] if name else [r for r in find_runs(runs)
                                                          if is_active(r)]
    except LookupError as exc:
        raise fail(str(exc)) from None
    if dry_run:
        for r in targets:
            live = r.journal.live()
            console.print(f"{r.path.name}: would remove {len(live)} resource(s)")
            for e in reversed(live):
                console.print(f"  {e.get('kind')} {e['id']}", highlight=False)
        return
    for r in targets:
        removed = teardown(r)
        console.print(f"{r.path.name}: removed {len(removed)} resource(s)")
        for line in removed:
            console.print(f"  {line}")
    if not targets:
        console.print("nothing to tear down")


image_app = typer.Typer(help="Node images for the docker backend.", no_args_is_help=True)
app.add_typer(image_app, name="image")


@image_app.command("build")
def image_build(
    base: Annotated[str, typer.Option(help="auto, debootstrap, registry or an image name")] = (
        "auto"),
    rebuild: Annotated[bool, typer.Option(help="build even if the tag exists")] = False,
) -> None:
    """Build the node image (no registry needed: the base comes from debootstrap).

    Example: [bold]sudo testbed image build --base debootstrap[/]
    """
    from testbed.engine import EngineError, ensure_engine
    from testbed.images import ImageError, build

    try:
        ensure_engine()
        with console.status("building the node image"):
            info = build(base, rebuild)
    except (ImageError, EngineError) as exc:
        raise fail(str(exc)) from None
    console.print(f"{info['tag']} {info['id']} (base {info['base']})")


fault_app = typer.Typer(
    help="Inject a fault into a running testbed (`testbed up`), now; `--for` heals it later.",
    no_args_is_help=True)
app.add_typer(fault_app, name="fault")
ForOpt = Annotated[str | None, typer.Option("--for", help="heal after this long, e.g. 5s")]
RunOpt = Annotated[str | None, typer.Option("--run", help="run id; default: newest active")]


def _inject(entry: dict[str, Any], run_name: str | None, runs: Path) -> None:
    from pydantic import TypeAdapter, ValidationError

    from testbed.faults.live import inject
    from testbed.faults.spec import FaultSpec

    try:
        fault = TypeAdapter(FaultSpec).validate_python({"at": "0s", **entry})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"][1:]) or entry["kind"]
        raise fail(f"{where}: {first['msg'].removeprefix('Value error, ')}") from None
    try:
        target = _active_run(run_name, runs)
        inject(target, fault, lambda r: console.print(
            f"{r['kind']} {r['phase']} {' '.join(r['hosts'])}: {json.dumps(r['measured'])}",
            highlight=False))
    except (LookupError, BackendError) as exc:
        raise fail(str(exc)) from None


def _active_run(run_name: str | None, runs: Path) -> RunDir:
    if run_name:
        return resolve_run(runs, run_name)
    active = [r for r in find_runs(runs) if is_active(r)]
    if not active:
        raise LookupError(f"no active run under {runs}/; start one with testbed up")
    return active[-1]


def _timing(for_: str | None) -> dict[str, Any]:
    return {} if for_ is None else {"for": for_}


@fault_app.command("partition")
def fault_partition(
    isolate: Annotated[str | None, typer.Option(help="cut one host off")] = None,
    groups: Annotated[str | None, typer.Option(help="sides, e.g. h1,h2/h3,h4")] = None,
    shape: Annotated[str | None, typer.Option(
        help="halves, majority, minority, bridge or majorities-ring")] = None,
    one_way: Annotated[bool, typer.Option(help="cut only traffic from the first group")] = False,
    for_: ForOpt = None, run_name: RunOpt = None, runs: RunsOpt = DEFAULT_RUNS,
) -> None:
    """Partition the data plane. Example: [bold]testbed fault partition --isolate h3 --for 5s[/]"""
    entry: dict[str, Any] = {"kind": "partition", "one_way": one_way, **_timing(for_)}
    if isolate:
        entry["isolate"] = isolate
    if groups:
        entry["groups"] = [g.split(",") for g in groups.split("/")]
    if shape:
        entry["shape"] = shape
    _inject(entry, run_name, runs)


@fault_app.command("heal")
def fault_heal(run_name: RunOpt = None, runs: RunsOpt = DEFAULT_RUNS) -> None:
    """Remove every partition. Example: [bold]testbed fault heal[/]"""
    _inject({"kind": "heal"}, run_name, runs)


def _host_fault(kind: str) -> Any:
    def command(host: Annotated[str, typer.Argument(help="host name")],
                run_name: RunOpt = None, runs: RunsOpt = DEFAULT_RUNS) -> None:
        _inject({"kind": kind, "host": host}, run_name, runs)

    command.__doc__ = {"crash": "Kill a node (SIGKILL).", "restart": "Start a crashed node "
                       "again as a new incarnation.", "pause": "Freeze a node (SIGSTOP).",
                       "resume": "Thaw a paused node."}[kind] + \
        f" Example: [bold]testbed fault {kind} h2[/]"
    return command


for _kind in ("crash", "restart", "pause", "resume"):
    fault_app.command(_kind)(_host_fault(_kind))


@fault_app.command("link")
def fault_link(
    a: Annotated[str, typer.Argument(help="one host")],
    b: Annotated[str, typer.Argument(help="the other host")],
    delay: Annotated[str | None, typer.Option(help="new one-way delay, e.g. 80ms")] = None,
    jitter: Annotated[str | None, typer.Option(help="new jitter")] = None,
    loss: Annotated[str | None, typer.Option(help="new loss, e.g. 5%")] = None,
    for_: ForOpt = None, run_name: RunOpt = None, runs: RunsOpt = DEFAULT_RUNS,
) -> None:
    """Change the path between two hosts (both directions).
    Example: [bold]testbed fault link h1 h3 --delay 80ms --for 10s[/]"""
    entry: dict[str, Any] = {"kind": "link", "between": [a, b], **_timing(for_)}
    for key, value in (("delay", delay), ("path_jitter", jitter), ("loss", loss)):
        if value is not None:
            entry[key] = value
    _inject(entry, run_name, runs)


@fault_app.command("clock")
def fault_clock(
    host: Annotated[str, typer.Argument(help="host name")],
    jump: Annotated[str | None, typer.Option(help="step the clock, e.g. 50ms or -20ms")] = None,
    offset: Annotated[str | None, typer.Option(help="set the offset")] = None,
    drift: Annotated[str | None, typer.Option(help="set the drift, e.g. 50ppm")] = None,
    run_name: RunOpt = None, runs: RunsOpt = DEFAULT_RUNS,
) -> None:
    """Change a node's clock. Example: [bold]testbed fault clock h2 --jump 50ms[/]"""
    entry: dict[str, Any] = {"kind": "clock", "host": host}
    for key, value in (("jump", jump), ("offset", offset), ("drift", drift)):
        if value is not None:
            entry[key] = value
    _inject(entry, run_name, runs)


@app.command()
def pcap(
    files: Annotated[list[Path], typer.Argument(help="pcap or pcapng files")],
    out: Annotated[Path, typer.Option("--out", help="directory for the Parquet files")] = (
        Path("pcap-parquet")),
) -> None:
    """Turn captures (ours or anyone's) into Parquet: timestamps, addresses, ports, lengths,
    and the testbed wire header where present.

    Example: [bold]testbed pcap runs/*/pcaps/*.pcap --out /tmp/packets[/]
    """
    from analysis.pcap import pcap_to_parquet

    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise fail(f"no such capture file: {', '.join(missing)}")
    stats = pcap_to_parquet(files, out)
    print(json.dumps(stats, indent=2, default=str))


@app.command()
def clean(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list, remove nothing")] = False,
) -> None:
    """Remove leftovers that carry testbed's name prefix (namespaces, links, chains), even
    when no journal is left. Never touches anything else.

    Example: [bold]sudo testbed clean --dry-run[/]
    """
    from testbed.clean import clean as clean_leftovers

    removed = clean_leftovers(dry_run)
    verb = "would remove" if dry_run else "removed"
    console.print(f"{verb} {len(removed)} resource(s)")
    for line in removed:
        console.print(f"  {line}")


@app.command(name="analyze")
def analyze_cmd(
    run_dir: Annotated[Path, typer.Argument(help="run directory")],
    master: Annotated[str | None, typer.Option(help="Spark master URL")] = None,
) -> None:
    """(Re)analyse a run with Spark: parquet/, summary.json, report.html.

    Example: [bold]testbed analyze runs/20261121T053000Z-quickstart-3fa2c1[/]
    """
    from testbed.runner import analyze_run

    if not (run_dir / "nodes").is_dir():
        raise fail(f"{run_dir} is not a run directory (no nodes/ inside)")
    exp: list[str] = []
    result = analyze_run(RunDir.open(run_dir), exp, console, master)
    print_summary(result.summary)


@app.command()
def report(
    runs_: Annotated[list[Path], typer.Argument(
        metavar="RUN...", help="run directories, or nightly history files (NIGHT.parquet)")],
    out: Annotated[Path | None, typer.Option(help="file or directory for a comparison")] = None,
) -> None:
    """Write a run's self-contained HTML report, or compare several runs side by side.

    Examples: [bold]testbed report runs/20261121T060012Z-quickstart-c1712e[/],
    [bold]testbed report runs/*seto* --out /tmp/seto.html[/],
    [bold]testbed report history/smoke/2026-11-16.parquet history/smoke/2026-11-23.parquet[/]
    """
    from analysis.report import write_comparison, write_report
    from testbed.nightly.command import is_night_file, write_nights_comparison

    if runs_ and all(is_night_file(r) for r in runs_):
        console.print(f"wrote {write_nights_comparison(runs_, out or Path('comparison.html'))}")
        return
    for r in runs_:
        if not (r / "nodes").is_dir():
            raise fail(f"{r} is not a run directory (no nodes/ inside)")
    if len(runs_) == 1 and out is None:
        summary_path = runs_[0] / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
        console.print(f"wrote {write_report(runs_[0], summary)}")
        return
    console.print(f"wrote {write_comparison(runs_, out or Path('comparison.html'))}")


@app.command()
def schema(
    kind: Annotated[str, typer.Argument(help="topology or experiment")],
) -> None:
    """Print the JSON Schema of a spec.

    Example: [bold]testbed schema experiment[/]
    """
    from testbed.spec.experiment import ExperimentSpec
    from testbed.spec.topology import TopologySpec

    models: dict[str, Any] = {"topology": TopologySpec, "experiment": ExperimentSpec}
    if kind not in models:
        raise fail(f"unknown schema {kind!r}; use topology or experiment")
    print(json.dumps(models[kind].model_json_schema(by_alias=True), indent=2))


@app.command()
def plan(
    topology: Annotated[Path, typer.Argument(help="topology YAML (sites or a delay matrix)")],
    rates: Annotated[str | None, typer.Option(help="sending rates r1,r2,... per host")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Optimistic delivery delays for SETO, the Fast SETO heuristic and the optimum (MOL LP).

    Example: [bold]testbed plan topologies/two-sites.yaml --json[/]
    """
    from testbed.plan import plan_report

    try:
        topo = load_topology(topology)
    except SpecError as exc:
        raise _spec_errors(exc) from None
    paths = topo.paths()
    rate_list = None
    if rates is not None:
        try:
            rate_list = [float(r) for r in rates.split(",")]
        except ValueError:
            raise fail(f"--rates must be numbers separated by commas, got {rates!r}") from None
        if len(rate_list) != len(paths.hosts):
            raise fail(f"--rates has {len(rate_list)} values for {len(paths.hosts)} hosts")
    print(plan_report(paths.hosts, paths.delay_ms(), rate_list, as_json))


@app.command()
def doctor() -> None:
    """Say what this machine can do and how to fix what is missing.

    Example: [bold]testbed doctor[/]
    """
    from testbed.doctor import checks

    table = Table("capability", "status", "enables", "fix")
    for c in checks():
        table.add_row(c.name, "[green]yes[/]" if c.ok else "[red]no[/]", c.enables,
                      "" if c.ok else c.fix)
    console.print(table)


@app.command()
def certs(
    run_name: Annotated[str, typer.Argument(help="run id, directory name or path")],
    key: Annotated[str, typer.Option(help="key algorithm: ecdsa-p256 or rsa-2048")]
    = "ecdsa-p256",
    runs: RunsOpt = DEFAULT_RUNS,
) -> None:
    """Make the run's CA and one certificate per node (the keytool of D3.5 section 4.4).

    Writes certs/ca.pem (what clients trust), certs/<host>.pem and certs/<host>.key (0600) in
    the run directory, for every host in its nodes/*/node.json, with the host's control
    address as IP SAN. An existing CA is kept, so certificates issued again still verify.
    `testbed run` does this itself for experiments with `management: {tls: true}`.

    Example: [bold]testbed certs 3fa9c1 --key rsa-2048[/]
    """
    from nodes.config import NodeConfig
    from testbed.certs import CertError, make_run_certs

    try:
        target = resolve_run(runs, run_name)
    except LookupError as exc:
        raise fail(str(exc)) from None
    hosts: dict[str, list[str]] = {}
    for path in sorted((target.path / "nodes").glob("*/node.json")):
        try:
            cfg = NodeConfig.read(path)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise fail(f"{path}: not a node configuration ({exc})") from None
        hosts[cfg.name] = [cfg.control_host]
    if not hosts:
        raise fail(f"run {target.run_id} has no nodes/*/node.json to issue certificates for")
    try:
        made = make_run_certs(target.path, target.run_id, hosts, key)
    except CertError as exc:
        raise fail(str(exc)) from None
    table = Table("host", "certificate", "key", "addresses", title=f"CA {target.ca_file}")
    for host, cert in made.items():
        table.add_row(host, str(cert.cert_path), str(cert.key_path), ", ".join(hosts[host]))
    console.print(table)


@app.command()
def mgmt(
    host: Annotated[str, typer.Argument(help="host name in the running testbed")],
    op: Annotated[str, typer.Argument(help="read, write, exec, list, search or version")],
    args: Annotated[list[str] | None,
                    typer.Argument(help="MBEAN [ATTRIBUTE|OPERATION] [VALUE|ARGS...]")] = None,
    run_name: Annotated[str | None,
                        typer.Option("--run", help="run id; default: newest active")] = None,
    runs: RunsOpt = DEFAULT_RUNS,
) -> None:
    """Talk to a node's Jolokia management endpoint.

    Examples: [bold]testbed mgmt h2 read testbed:type=Clock OffsetMs[/],
    [bold]testbed mgmt h2 write testbed:type=Clock DriftPpm 50[/],
    [bold]testbed mgmt h2 exec testbed:type=Clock jump 50[/]
    """
    from testbed.mgmt import MgmtClient, MgmtError

    try:
        if run_name:
            target = resolve_run(runs, run_name)
        else:
            active = [r for r in find_runs(runs) if is_active(r)]
            if not active:
                raise LookupError(f"no active run under {runs}/; start one with testbed up")
            target = active[-1]
        client: MgmtClient = target.mgmt_client(host)
    except LookupError as exc:
        raise fail(str(exc)) from None
    a = list(args or [])
    need = {"read": 1, "write": 3, "exec": 2, "list": 0, "search": 0, "version": 0}
    if op not in need:
        raise fail(f"unknown operation {op!r}; use one of {', '.join(need)}")
    if len(a) < need[op]:
        raise fail(f"`mgmt {op}` needs {need[op]} argument(s): see testbed mgmt --help")
    try:
        if op == "read":
            value = client.read(a[0], a[1] if len(a) > 1 else None)
        elif op == "write":
            value = client.write(a[0], a[1], _cli_value(a[2]))
        elif op == "exec":
            value = client.exec(a[0], a[1], *[_cli_value(x) for x in a[2:]])
        elif op == "list":
            value = client.list(a[0] if a else None)
        elif op == "search":
            value = client.search(a[0] if a else "*:*")
        else:
            value = client.version()
    except MgmtError as exc:
        raise fail(str(exc)) from None
    print(json.dumps(value, indent=2, default=str))


def _cli_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def print_paths(paths: Any) -> None:
    table = Table(title="one-way delay matrix (ms): row sends to column")
    table.add_column("from \\ to")
    for h in paths.hosts:
        table.add_column(h, justify="right")
    for a in paths.hosts:
        cells = []
        for b in paths.hosts:
            if a == b:
                cells.append("-")
                continue
            p = paths.get(a, b)
            cell = f"{p.delay_ns / 1e6:g}"
            if p.jitter_ns:
                cell += f"±{p.jitter_ns / 1e6:g}"
            if p.loss:
                cell += f" {p.loss * 100:g}%"
            cells.append(cell)
        table.add_row(a, *cells)
    console.print(table)


def print_summary(summary: dict[str, Any]) -> None:
    checks = summary.get("checks", {})
    table = Table("check", "violations", title=f"run {summary.get('run', '')}")
    for name, res in checks.items():
        v = res.get("violations", 0)
        if not res.get("claimed", True):  # not promised by the protocol: greyed out
            table.add_row(f"[grey50]{name} (not claimed)[/]", f"[grey50]{v}[/]")
            continue
        table.add_row(name, f"[green]{v}[/]" if v == 0 else f"[red]{v}[/]")
    console.print(table)
    from analysis.liveness import liveness_line

    line = liveness_line(summary)
    if line:
        console.print(f"[yellow]{line}[/]")
    errors = summary.get("node_errors", {}).get("total", 0)
    if errors:
        console.print(f"[red]node errors: {errors}[/] (ev=error; tracebacks in node.log)")
    refused = {h: t for h, t in summary.get("transport", {}).items()
               if t.get("malformed") or t.get("rejected")}
    for host, t in sorted(refused.items()):
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(t.get("drops", {}).items()))
        console.print(f"{host} refused {t['malformed'] + t['rejected']} datagram(s): {reasons}",
                      highlight=False)
    lat = summary.get("latency", {}).get("fnl", {})
    per = lat.get("per_receiver", {})
    if per:
        t = Table("receiver", "p50 ms", "p95 ms", "p99 ms", "max ms", "msgs/s",
                  title="final-delivery latency")
        thr = summary.get("throughput", {}).get("per_node", {})
        for node, q in sorted(per.items()):
            t.add_row(node, *(f"{q.get(k, float('nan')):.2f}" for k in
                              ("p50_ms", "p95_ms", "p99_ms", "max_ms")),
                      f"{thr.get(node, 0):.0f}")
        console.print(t)
    acc = summary.get("optimistic", {}).get("accuracy", {}).get("per_node", {})
    if acc:
        window = summary["optimistic"].get("window", {}).get("per_node", {})
        o = Table("node", "opt accuracy", "window p50 ms", title="optimistic delivery")
        for node, a in sorted(acc.items()):
            w = window.get(node, {}).get("p50_ms")
            o.add_row(node, f"{a['accuracy']:.3f}", "-" if w is None else f"{w:.2f}")
        console.print(o)


app.command(name="nightly")(nightly_command)
app.add_typer(lab_app, name="lab")  # testbed/lab.py: SSH hosts for the remote backend


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
