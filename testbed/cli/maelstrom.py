"""`testbed maelstrom test`: a node program written for Maelstrom, with Maelstrom's own flags,
on the emulated WAN (docs/maelstrom.md). The flags become an experiment spec like any other
(`spec.lock.yaml` in the run directory; `--dry-run` prints it), run by `testbed run`'s
runner and judged in-process. Exit 0 valid, 1 invalid, 2 bad input; the last line says which
in Maelstrom's words."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from nodes.maelstrom import LATENCY_DISTS, NEMESES, TOPOLOGIES, WORKLOADS, node_names
from testbed.backends import BackendError
from testbed.cli.common import console, err, fail, print_summary, spec_errors
from testbed.rundir import DEFAULT_RUNS
from testbed.spec.loader import SpecError, load_experiment

maelstrom_app = typer.Typer(no_args_is_help=True, help="Run a node program written for "
                            "Maelstrom on the emulated WAN (docs/maelstrom.md).\n\nExample: "
                            "[bold]testbed maelstrom test -w broadcast --bin ./node "
                            "--node-count 5[/]")
BUILT_NEMESES = ("partition", "kill", "pause", "clock")
AGENT = "testbed:type=Agent"
GOOD = "Everything looks good! ヽ(‘ー`)ノ"
BAD = "Analysis invalid! (ﾉಥ益ಥ）ﾉ ┻━┻"


def _concurrency(text: str, nodes: int) -> int:
    """Maelstrom's --concurrency: a number, or `Kn` for K clients per node."""
    try:
        n = int(text[:-1]) * nodes if text.endswith("n") else int(text)
    except ValueError:
        raise fail(f"--concurrency {text!r}: a number of clients, or e.g. 2n (two per node)"
                   ) from None
    if n < 1:
        raise fail(f"--concurrency {text!r}: at least one client")
    return n


def _faults(nemesis: list[str], interval_s: float, duration_s: float, hosts: list[str],
            seed: int) -> list[dict[str, Any]]:
    """Maelstrom's nemesis schedule: every interval one fault of the given kinds in turn, on
    for half the interval and over before the workload ends. `kill` and `pause` act on the
    program through its agent (`testbed:type=Agent`), so the clients, which live in the
    agent, see the node go and come back as Maelstrom's clients do."""
    rng = random.Random(f"{seed}:maelstrom-nemesis")
    out: list[dict[str, Any]] = []
    k = 0
    at = interval_s / 2
    while nemesis and at + interval_s / 2 < duration_s:
        kind = nemesis[k % len(nemesis)]
        span = f"{interval_s / 2:g}s"
        if kind == "partition":
            out.append({"kind": "partition", "shape": "halves", "seed": k, "at": f"{at:g}s",
                        "for": span})
        elif kind == "clock":  # one program's wall clock off by up to a minute, then back
            host = rng.choice(hosts)
            skew = rng.choice((-1, 1)) * rng.randint(1_000, 60_000)
            out.append({"kind": "mgmt", "host": host, "mbean": AGENT, "exec": ["skew", skew],
                        "at": f"{at:g}s"})
            out.append({"kind": "mgmt", "host": host, "mbean": AGENT, "exec": ["skew", 0],
                        "at": f"{at + interval_s / 2:g}s"})
        else:  # pause: SIGSTOP, then SIGCONT; kill: SIGKILL, then a fresh start and init
            down, up = ("pause", "resume") if kind == "pause" else ("kill", "start")
            host = rng.choice(hosts)
            out.append({"kind": "mgmt", "host": host, "mbean": AGENT, "exec": [down],
                        "at": f"{at:g}s"})
            out.append({"kind": "mgmt", "host": host, "mbean": AGENT, "exec": [up],
                        "at": f"{at + interval_s / 2:g}s"})
        k += 1
        at += interval_s
    return out


def _inventory_hosts(inventory: Path, count: int) -> list[str]:
    """A flat network on the remote backend: its hosts are the inventory's first `count`
    (in the inventory's order), which are n1..nN to the program."""
    from testbed.backends.ansible import InventoryError, load_inventory

    try:
        names = list(load_inventory(inventory))
    except InventoryError as exc:
        raise fail(str(exc)) from None
    if count > len(names):
        raise fail(f"--node-count {count} but {inventory} has {len(names)} hosts")
    return names[:count]


def build(workload: str, program: list[str], node_count: int, time_limit: float, rate: float,
          concurrency: str, latency: float, latency_dist: str, topology: str,
          nemesis: list[str], interval: float, net: Path | None, backend: str,
          seed: int, settle: float = 10.0, inventory: Path | None = None) -> dict[str, Any]:
    """The experiment (with its topology inline, or the `--net` file) the flags describe."""
    if workload not in WORKLOADS:
        raise fail(f"-w {workload!r}: not a workload; known: {', '.join(WORKLOADS)}")
    if topology not in TOPOLOGIES:
        raise fail(f"--topology {topology!r}: known: {', '.join(TOPOLOGIES)}")
    if latency_dist not in LATENCY_DISTS:
        raise fail(f"--latency-dist {latency_dist!r}: known: {', '.join(LATENCY_DISTS)}")
    for kind in nemesis:
        if kind not in NEMESES:
            raise fail(f"--nemesis {kind!r}: known: {', '.join(NEMESES)}")
        if kind not in BUILT_NEMESES:
            raise fail(f"--nemesis {kind} is not built yet for Maelstrom programs "
                       f"({', '.join(BUILT_NEMESES)} are)")
    if time_limit <= 0 or rate <= 0 or interval <= 0 or latency < 0 or settle < 0:
        raise fail("--time-limit, --rate and --nemesis-interval must be positive, --latency "
                   "and --settle not negative")
    topo: Any
    where: dict[str, Any] = {}
    if backend == "remote":  # the hosts (docs/remote.md); recorded in the spec
        if inventory is None or not inventory.is_file():
            raise fail("--backend remote needs --inventory hosts.yaml (`testbed lab up` writes "
                       f"one){f': no file {inventory}' if inventory else ''}")
        where["inventory"] = str(inventory.resolve())
    if net is not None:
        try:
            data = yaml.safe_load(net.read_text())
            hosts = [str(h["name"]) for h in data["hosts"]]
        except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
            raise fail(f"--net {net}: not a topology with hosts ({exc})") from None
        if node_count and node_count != len(hosts):
            raise fail(f"--node-count {node_count} but {net} has {len(hosts)} hosts")
        topo = str(net.resolve())
    else:
        if node_count < 1:
            raise fail("--node-count must be at least 1")
        hosts = node_names(node_count)
        if inventory is not None and backend == "remote":
            hosts = _inventory_hosts(inventory, node_count)
        lan: dict[str, Any] = {"delay": f"{latency:g}ms"}
        if latency_dist in ("uniform", "exponential") and latency > 0:
            # uniform: between 0 and twice --latency; exponential: delay + jitter x (E - 1)
            # with delay = jitter, so an exponential delay of mean --latency (link-model.md)
            lan.update(jitter=f"{latency:g}ms", jitter_dist=latency_dist)
        topo = {"name": "maelstrom-flat", "sites": {"net": {"lan": lan}},
                "hosts": [{"name": h, "site": "net"} for h in hosts]}
    return {
        "name": f"maelstrom-{workload}",
        "topology": topo,
        "backend": backend,
        "duration": f"{time_limit:g}s",
        "drain": f"{settle:g}s",
        "seed": seed,
        "node": {"program": program, "speaks": "maelstrom"},
        "workload": {"maelstrom": workload, "rate": f"{rate:g}/s",
                     "concurrency": _concurrency(concurrency, len(hosts)),
                     "topology": topology},
        "faults": _faults(nemesis, interval, time_limit, hosts, seed),
        **where,
    }


@maelstrom_app.command(context_settings={"allow_extra_args": True,
                                         "ignore_unknown_options": True})
def test(
    ctx: typer.Context,
    workload: Annotated[str, typer.Option("-w", "--workload", help=", ".join(WORKLOADS),
                                          metavar="WORKLOAD")],
    bin_: Annotated[str, typer.Option("--bin", help="the node program; its arguments after "
                                      "`--`", metavar="PROGRAM")],
    node_count: Annotated[int, typer.Option("--node-count", help="nodes n1..nN (with --net: "
                                            "the topology's hosts)")] = 0,
    time_limit: Annotated[float, typer.Option("--time-limit", help="seconds of workload")
                          ] = 10.0,
    rate: Annotated[float, typer.Option("--rate", help="operations per second, all "
                                        "clients together")] = 5.0,
    concurrency: Annotated[str, typer.Option("--concurrency", help="clients: a number or "
                                             "Kn (K per node)", metavar="N|Kn")] = "1n",
    latency: Annotated[float, typer.Option("--latency", help="one-way ms between nodes "
                                           "(a flat network; ignored with --net)")] = 0.0,
    latency_dist: Annotated[str, typer.Option("--latency-dist", help="constant, uniform "
                                              "(0 to 2x --latency) or exponential (mean "
                                              "--latency)", metavar="DIST")] = "constant",
    topology: Annotated[str, typer.Option("--topology", help="broadcast's neighbour map: "
                                          + ", ".join(TOPOLOGIES), metavar="MAP")] = "grid",
    nemesis: Annotated[str, typer.Option("--nemesis", help="faults, comma-separated: "
                                         "partition, kill, pause, clock", metavar="FAULTS")] = "",
    nemesis_interval: Annotated[float, typer.Option("--nemesis-interval",
                                                    help="seconds between faults")] = 10.0,
    net: Annotated[Path | None, typer.Option("--net", help="a topology YAML (our WAN model);"
                                             " its hosts are n1..nN in order")] = None,
    backend: Annotated[str, typer.Option("--backend", help="local, mininet, docker or "
                                         "remote", metavar="BACKEND")] = "local",
    inventory: Annotated[Path | None, typer.Option("--inventory", help="remote backend: "
                                                   "the hosts (docs/remote.md)")] = None,
    out: Annotated[Path, typer.Option("--out", help="runs directory")] = DEFAULT_RUNS,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the experiment, run "
                                          "nothing")] = False,
    seed: Annotated[int, typer.Option("--seed", help="random seed")] = 1,
    settle: Annotated[float, typer.Option("--settle", help="seconds from the workload's end "
                                          "(faults healed) to the final reads; Maelstrom "
                                          "waits 10")] = 10.0,
) -> None:
    """Test a Maelstrom node program; exit 0 valid, 1 invalid, 2 bad input.

    Example: [bold]testbed maelstrom test -w broadcast --bin ./node.py --node-count 5
    --time-limit 20 --rate 10 --nemesis partition[/]
    """
    from testbed.runner import run_experiment

    program = [str(Path(bin_).resolve()) if Path(bin_).is_file() else bin_, *ctx.args]
    kinds = [k.strip() for k in nemesis.split(",") if k.strip()]
    if not (node_count or net):
        node_count = 1
    spec = build(workload, program, node_count, time_limit, rate, concurrency, latency,
                 latency_dist, topology, kinds, nemesis_interval, net, backend, seed, settle,
                 inventory)
    text = yaml.safe_dump(spec, sort_keys=False, allow_unicode=True)
    with tempfile.TemporaryDirectory(prefix="testbed-maelstrom-") as tmp:
        path = Path(tmp) / "maelstrom.yaml"
        path.write_text(text)
        try:
            exp, topo = load_experiment(path)
        except SpecError as exc:
            raise spec_errors(exc) from None
    if dry_run:
        console.print(text, highlight=False, markup=False, soft_wrap=True)  # YAML: never wrapped
        console.print("dry run: nothing created")
        return
    try:
        result = run_experiment(exp, topo, out, console,
                                inventory=Path(exp.inventory) if exp.inventory else None)
    except BackendError as exc:
        raise fail(str(exc)) from None
    summary = result.summary
    print_summary(summary)
    m = summary.get("maelstrom") or {}
    ops = m.get("ops") or {}
    console.print(f"{m.get('workload')}: {ops.get('total', 0)} operations, {ops.get('ok', 0)} "
                  f"ok, {ops.get('fail', 0)} fail, {ops.get('info', 0)} info; "
                  f"{m.get('server_messages', 0)} server messages "
                  f"({(m.get('msgs_per_op') or {}).get('servers', 0)} per op); lost "
                  f"{m.get('lost', 0)}, unexpected {m.get('unexpected', 0)}; stable latency "
                  f"{m.get('stable_latency_ms') or '-'} ms; malformed lines "
                  f"{m.get('malformed', 0)}", highlight=False)
    for line in result.failures:
        err.print(f"[red]{line}[/]", highlight=False)
    console.print(f"results in {result.run.path}")
    if result.ok:
        console.print(GOOD, style="green", highlight=False)
        raise typer.Exit(0)
    console.print(BAD, style="red", highlight=False)
    raise typer.Exit(1)
