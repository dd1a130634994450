"""`testbed maelstrom test`: a node program written for Maelstrom, with Maelstrom's own flags,
on the emulated WAN (docs/maelstrom.md). The flags become an experiment spec like any other
(`spec.lock.yaml` in the run directory; `--dry-run` prints it), run by `testbed run`'s
runner and judged in-process. Exit codes are Maelstrom's: 0 valid, 1 invalid, 2 unknown (and 2
for bad input, with one `error:` line and nothing created); the last line says which in
Maelstrom's words, and `results.json` beside `summary.json` holds Maelstrom's result keys."""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from typer._click.core import Context as ClickContext  # Typer's own click: no public names
from typer._click.exceptions import UsageError

from nodes.maelstrom import (
    CONSISTENCY_MODELS,
    LATENCY_DISTS,
    NEMESES,
    TOPOLOGIES,
    TXN_WRITES,
    WORKLOADS,
    node_names,
)
from testbed.backends import BackendError
from testbed.cli.common import console, err, fail, print_summary, spec_errors
from testbed.cli.help import Command
from testbed.maelstrom import maelstrom_names, preflight
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
UNKNOWN = "Errors occurred during analysis, but no anomalies found. ಠ~ಠ"
EXIT = {True: 0, False: 1, "unknown": 2}  # Maelstrom's (Jepsen's) exit codes by `valid?`
DEFAULT_NODES = "n1,n2,n3,n4,n5"  # Maelstrom's nodes without --node-count or --nodes
KEYED = ("lin-kv", "kafka", *TXN_WRITES)  # the workloads --key-count acts on
RETIRING = ("kafka", *TXN_WRITES)  # the workloads --max-writes-per-key acts on


class MaelstromCommand(Command):
    """`maelstrom test`'s parsing: a usage error is one line (exit 2), and the program's own
    arguments are exactly those after `--` (`ctx.meta["program_args"]`), so a flag before it
    that is not Maelstrom's is an error, not an argument of the program."""

    def parse_args(self, ctx: ClickContext, args: list[str]) -> list[str]:
        ctx.meta["program_args"] = args[args.index("--") + 1:] if "--" in args else []
        try:
            return super().parse_args(ctx, args)
        except UsageError as exc:
            raise fail(exc.format_message()) from None


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


PARTITION_TARGETS = ("one", "minority-third", "majority", "majorities-ring")


def _partitions(interval_s: float, duration_s: float, hosts: list[str],
                rng: random.Random) -> list[dict[str, Any]]:
    """Maelstrom's partition nemesis (Jepsen's combined partition package, which Maelstrom
    uses with its default targets): start and heal in turn, each after a staggered delay
    drawn uniformly from [0, 2 x interval), every partition a target drawn from
    PARTITION_TARGETS: one node cut off, a random minority third (the largest number of
    nodes strictly below a third) from the rest, random halves with a majority side, or a
    ring of overlapping majorities. The last one heals before the workload ends."""
    out: list[dict[str, Any]] = []
    at = rng.uniform(0, 2 * interval_s)
    while at < duration_s:
        lasts = rng.uniform(0, 2 * interval_s)
        target = rng.choice(PARTITION_TARGETS)
        span = {"at": f"{at:.3f}s", "for": f"{max(0.001, min(lasts, duration_s - at)):.3f}s"}
        shuffled = rng.sample(hosts, len(hosts))
        third = (len(hosts) - 1) // 3
        if target == "one" and len(hosts) > 1:
            out.append({"kind": "partition", "isolate": shuffled[0], **span})
        elif target == "minority-third" and third > 0:
            out.append({"kind": "partition", "groups": [shuffled[:third], shuffled[third:]],
                        **span})
        elif target == "majority" and len(hosts) > 1:
            out.append({"kind": "partition", "shape": "majority", "seed": rng.randrange(2**31),
                        **span})
        elif target == "majorities-ring" and len(hosts) > 2:
            out.append({"kind": "partition", "shape": "majorities-ring",
                        "seed": rng.randrange(2**31), **span})
        at += lasts + rng.uniform(0, 2 * interval_s)
    return out


def _faults(nemesis: list[str], interval_s: float, duration_s: float, hosts: list[str],
            seed: int) -> list[dict[str, Any]]:
    """Maelstrom's nemesis schedule. Partitions as Maelstrom draws them (`_partitions`); the
    other kinds every interval in turn, on for half the interval and over before the
    workload ends. `kill` and `pause` act on the program through its agent
    (`testbed:type=Agent`), so the clients, which live in the agent, see the node go and
    come back as Maelstrom's clients do."""
    rng = random.Random(f"{seed}:maelstrom-nemesis")
    out: list[dict[str, Any]] = []
    if "partition" in nemesis:
        out += _partitions(interval_s, duration_s, hosts, rng)
    others = [k for k in nemesis if k != "partition"]
    k = 0
    at = interval_s / 2
    while others and at + interval_s / 2 < duration_s:
        kind = others[k % len(others)]
        if kind == "clock":  # one program's wall clock off by up to a minute, then back
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
    return sorted(out, key=lambda f: float(str(f["at"]).rstrip("s")))


def _inventory_hosts(inventory: Path, count: int) -> list[str]:
    """A flat network on the remote backend: its hosts are the inventory's first `count`
    (in the inventory's order), which are n0..n(N-1) to the program."""
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
          seed: int, settle: float = 10.0, inventory: Path | None = None,
          nodes: list[str] | None = None, key_count: int | None = None,
          max_writes_per_key: int | None = None, max_txn_length: int | None = None,
          consistency_models: list[str] | None = None) -> dict[str, Any]:
    """The experiment (with its topology inline, or the `--net` file) the flags describe:
    `node_count` nodes n0..n(N-1), or the names `nodes` (node_count 0)."""
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
    if time_limit <= 0 or rate < 0 or interval <= 0 or latency < 0 or settle < 0:
        raise fail("--time-limit and --nemesis-interval must be positive, --rate, --latency "
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
        hosts = node_names(node_count) if node_count else list(nodes or [])
        if not hosts:
            raise fail("--node-count must be at least 1")
        if maelstrom_names(hosts) != hosts or len(set(hosts)) != len(hosts):
            raise fail(f"--nodes {','.join(hosts)}: distinct names n<number>, e.g. "
                       "n1,n2,n3")
        if inventory is not None and backend == "remote":
            hosts = _inventory_hosts(inventory, len(hosts))
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
        # --rate 0: no `rate`, so the clients make no operations (final reads only)
        "workload": {"maelstrom": workload, **({"rate": f"{rate:g}/s"} if rate else {}),
                     "concurrency": _concurrency(concurrency, len(hosts)),
                     "topology": topology,
                     **({"key_count": key_count} if key_count and workload in KEYED else {}),
                     **({"max_writes_per_key": max_writes_per_key}
                        if max_writes_per_key and workload in RETIRING else {}),
                     **({"max_txn_length": max_txn_length}
                        if max_txn_length and workload in TXN_WRITES else {}),
                     **({"consistency_models": consistency_models}
                        if consistency_models and workload in TXN_WRITES else {})},
        "faults": _faults(nemesis, interval, time_limit, hosts, seed),
        **where,
    }


def _positive(name: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise fail(f"{name} {value}: must be positive")


def _models(text: str | None) -> list[str] | None:
    """Maelstrom's --consistency-models: comma-separated names; None: the default."""
    if text is None:
        return None
    models = [m.strip() for m in text.split(",") if m.strip()]
    for m in models or [text]:
        if m not in CONSISTENCY_MODELS:
            raise fail(f"--consistency-models {m!r}: known: {', '.join(CONSISTENCY_MODELS)}")
    return models


def _availability(text: str | None) -> float | None:
    """Maelstrom's --availability: `total` (1.0) or a fraction; None: not checked."""
    if text is None:
        return None
    if text == "total":
        return 1.0
    try:
        a = float(text)
    except ValueError:
        a = -1.0
    if not 0 <= a <= 1:
        raise fail(f"--availability {text!r}: either 'total' or a number between 0 and 1")
    return a


@maelstrom_app.command(cls=MaelstromCommand,
                       context_settings={"allow_extra_args": True,
                                         "ignore_unknown_options": False})
def test(
    ctx: typer.Context,
    workload: Annotated[str, typer.Option("-w", "--workload", help=", ".join(WORKLOADS),
                                          metavar="WORKLOAD")],
    bin_: Annotated[str, typer.Option("--bin", help="the node program; its arguments after "
                                      "`--`", metavar="PROGRAM")],
    node_count: Annotated[int | None, typer.Option(
        "--node-count", help="nodes n0..n(N-1) (with --net: the topology's hosts)")] = None,
    nodes: Annotated[str | None, typer.Option(
        "--nodes", help=f"node names, comma-separated (default {DEFAULT_NODES})",
        metavar="NAMES")] = None,
    time_limit: Annotated[float, typer.Option("--time-limit", help="seconds of workload")
                          ] = 10.0,
    rate: Annotated[float, typer.Option("--rate", help="operations per second, all "
                                        "clients together (0: none, final reads only)")] = 5.0,
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
    availability: Annotated[str | None, typer.Option(
        "--availability", help="the fraction of operations that must succeed: 0 to 1, or "
        "total; default: not checked", metavar="A")] = None,
    consistency_models: Annotated[str | None, typer.Option(
        "--consistency-models", help="txn-list-append, txn-rw-register: the models to check, "
        "comma-separated "
        "(default strict-serializable): " + ", ".join(CONSISTENCY_MODELS),
        metavar="MODELS")] = None,
    test_count: Annotated[int, typer.Option("--test-count", help="run the test this many "
                                            "times (seeds --seed, --seed+1, ...)")] = 1,
    key_count: Annotated[int | None, typer.Option(
        "--key-count", help="lin-kv, kafka, txn-list-append, txn-rw-register: keys in use at "
        "once (default 3; the txn ones 10)")] = None,
    max_txn_length: Annotated[int, typer.Option(
        "--max-txn-length", help="txn-list-append, txn-rw-register: micro-operations per "
        "transaction, at most")] = 4,
    max_writes_per_key: Annotated[int, typer.Option(
        "--max-writes-per-key", help="kafka, txn-list-append, txn-rw-register: writes to a "
        "key (from one node's clients) before the key is retired")] = 16,
    log_stderr: Annotated[bool, typer.Option(
        "--log-stderr", help="print each node's last stderr lines after the run (always "
        "in nodes/HOST/node.log)")] = False,
    log_net_send: Annotated[bool, typer.Option(
        "--log-net-send", help="no effect: every message sent is logged (ev=nsend)")] = False,
    log_net_recv: Annotated[bool, typer.Option(
        "--log-net-recv", help="no effect: every message received is logged (ev=nrecv)")
                            ] = False,
    net: Annotated[Path | None, typer.Option("--net", help="a topology YAML (our WAN model);"
                                             " its hosts are n0..n(N-1) in order")] = None,
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
    """Test a Maelstrom node program; exit 0 valid, 1 invalid, 2 unknown or bad input.

    Example: [bold]testbed maelstrom test -w broadcast --bin ./node.py --node-count 5
    --time-limit 20 --rate 10 --nemesis partition[/]
    """
    given = ctx.meta.get("program_args", [])
    stray = ctx.args[:len(ctx.args) - len(given)]
    if stray:
        raise fail(f"{stray[0]}: not a flag of maelstrom test (the program's own arguments "
                   "go after --)")
    models = _models(consistency_models)
    for name, value in (("--node-count", node_count), ("--test-count", test_count),
                        ("--key-count", key_count), ("--max-txn-length", max_txn_length),
                        ("--max-writes-per-key", max_writes_per_key)):
        _positive(name, value)
    expected = _availability(availability)
    program = [str(Path(bin_).resolve()) if Path(bin_).is_file() else bin_, *given]
    kinds = [k.strip() for k in nemesis.split(",") if k.strip()]
    names = [] if net or node_count else [
        n.strip() for n in (nodes or DEFAULT_NODES).split(",") if n.strip()]
    specs = [build(workload, program, node_count or 0, time_limit, rate, concurrency, latency,
                   latency_dist, topology, kinds, nemesis_interval, net, backend, seed + k,
                   settle, inventory, names, key_count, max_writes_per_key, max_txn_length,
                   models)
             for k in range(test_count)]
    loaded = []
    for spec in specs:
        text = yaml.safe_dump(spec, sort_keys=False, allow_unicode=True)
        with tempfile.TemporaryDirectory(prefix="testbed-maelstrom-") as tmp:
            path = Path(tmp) / "maelstrom.yaml"
            path.write_text(text)
            try:
                loaded.append(load_experiment(path))
            except SpecError as exc:
                raise spec_errors(exc) from None
    if dry_run:
        text = yaml.safe_dump(specs[0], sort_keys=False, allow_unicode=True)
        console.print(text, highlight=False, markup=False, soft_wrap=True)  # YAML: never wrapped
        console.print("dry run: nothing created")
        return
    if backend in ("local", "mininet"):  # the program runs on this machine: try it first
        why = preflight(program, "n0")
        if why is not None:
            raise fail(f"--bin {bin_}: the program cannot start: {why}")
    worst: bool | str = True
    for exp, topo in loaded:
        valid = _run_one(exp, topo, out, expected, log_stderr)
        worst = valid if valid is False or worst is True else worst
    raise typer.Exit(EXIT[worst])


def _run_one(exp: Any, topo: Any, out: Path, availability: float | None,
             log_stderr: bool) -> bool | str:
    """One test: run, print its figures, write results.json; Maelstrom's `valid?`."""
    from testbed.runner import run_experiment

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
    if m.get("services"):
        console.print("services: " + ", ".join(f"{k} {v}" for k, v in
                                              sorted(m["services"].items())), highlight=False)
    from analysis.maelstrom import results  # pandas and pyarrow: not for every CLI start

    res = results(summary, availability)
    (result.run.path / "results.json").write_text(json.dumps(res, indent=1) + "\n")
    for line in result.failures:
        err.print(f"[red]{line}[/]", highlight=False)
    for note in res["notes"]:
        err.print(f"[yellow]{note}[/]", highlight=False)
    if log_stderr:
        for log in sorted((result.run.path / "nodes").glob("*/node.log")):
            tail = log.read_text(errors="replace").splitlines()[-20:]
            console.print(f"--- {log.parent.name} stderr (last {len(tail)} lines)",
                          highlight=False, markup=False)
            console.print("\n".join(tail), highlight=False, markup=False)
    console.print(f"results in {result.run.path}")
    valid = res["valid?"]
    if valid is True:
        console.print(GOOD, style="green", highlight=False)
    elif valid == "unknown":
        console.print(UNKNOWN, style="yellow", highlight=False)
    else:
        console.print(BAD, style="red", highlight=False)
    return bool(valid) if valid != "unknown" else "unknown"
