"""`testbed run`: an experiment end to end, or its plan with `--dry-run`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from testbed.backends import BackendError
from testbed.cli.common import (
    console,
    fail,
    print_expectations,
    print_paths,
    print_summary,
    print_verdict,
    spec_errors,
)
from testbed.pathcheck import collapses, sites_of
from testbed.rundir import DEFAULT_RUNS
from testbed.shaping.plan import HostPlan
from testbed.spec.experiment import BACKENDS
from testbed.spec.loader import SpecError, load_experiment


def run(
    experiment: Annotated[Path, typer.Argument(help="experiment YAML")],
    backend: Annotated[str | None, typer.Option(
        help=f"{', '.join(BACKENDS[:-1])} or {BACKENDS[-1]}, instead of the spec's backend",
        metavar="BACKEND")] = None,
    out: Annotated[Path, typer.Option("--out", help="runs directory")] = DEFAULT_RUNS,
    master: Annotated[str | None, typer.Option(help="Spark master URL (default local[*])",
                                               metavar="URL")] = None,
    analyze: Annotated[bool, typer.Option(help="judge the run afterwards")] = True,
    engine: Annotated[str, typer.Option(
        help="how to judge: spark (checks and measurements) or in-process (the checks, the "
        "liveness and the verdict, no JVM)", metavar="ENGINE")] = "spark",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the plan, change nothing")] = (
        False),
    inventory: Annotated[Path | None, typer.Option(help="remote backend: hosts (docs/remote.md)"
                                                   )] = None,
    serve: Annotated[bool, typer.Option(
        "--serve", help="watch it live: testbed serve over --out on 127.0.0.1, its live page "
        "printed; keeps serving the result until Ctrl-C (docs/serve.md)")] = False,
    serve_port: Annotated[int, typer.Option(help="the port of --serve")] = 8080,
) -> None:
    """Run an experiment end to end and judge it.

    Example: [bold]testbed run experiments/quickstart.yaml --backend sim[/]
    """
    from analysis.judge import ENGINES
    from testbed.runner import run_experiment

    if engine not in ENGINES:
        raise fail(f"--engine {engine}: one of {', '.join(ENGINES)}")
    try:
        exp, topo = load_experiment(experiment, backend, engine=engine)
    except SpecError as exc:
        raise spec_errors(exc) from None
    if dry_run:
        print_run_plan(exp, topo)
        return
    try:
        if inventory is None and exp.inventory:  # relative to the experiment file
            inventory = experiment.parent / exp.inventory
        if exp.backend == "remote" and (inventory is None or not inventory.is_file()):
            raise fail(f"the remote backend needs an inventory file ({inventory or 'none given'}"
                       "): --inventory hosts.yaml or `inventory:` in the experiment")
        stop_serving = start_serving(out, serve_port) if serve else None
        try:
            result = run_experiment(
                exp, topo, out, console, master=master, analyze=analyze, inventory=inventory,
                on_start=None if stop_serving is None else
                lambda run: live_url(out, run.path, serve_port),
                command=reproduce(experiment, backend, inventory, engine), engine=engine)
        except BaseException:
            if stop_serving is not None:
                stop_serving()
            raise
    except BackendError as exc:
        raise fail(str(exc)) from None
    if analyze:
        print_summary(result.summary)
        print_expectations(result.summary)
    console.print(f"results in {result.run.path}")
    if analyze:
        print_verdict(result.summary)
    else:
        console.print(f"judge it later: {judge_later(result.run.path, master, engine)}",
                      markup=False, highlight=False, soft_wrap=True)
    if stop_serving is not None:
        keep_serving(stop_serving, out, result.run.path, serve_port)
    raise typer.Exit(0 if result.ok else 1)


def reproduce(experiment: Path, backend: str | None, inventory: Path | None,
              engine: str = "spark") -> str:
    """The command line that runs the experiment again (the seed is in the spec)."""
    import shlex

    words = ["testbed", "run", str(experiment)]
    words += ["--backend", backend] if backend else []
    words += ["--inventory", str(inventory)] if inventory else []
    words += ["--engine", engine] if engine != "spark" else []
    return shlex.join(words)


def judge_later(run_path: Path, master: str | None, engine: str) -> str:
    """The command line that judges a run made with --no-analyze as `testbed run` would have."""
    import shlex

    words = ["testbed", "analyze", str(run_path)]
    words += ["--master", master] if master else []
    words += ["--engine", engine] if engine != "spark" else []
    return shlex.join(words)


def start_serving(out: Path, port: int) -> Any:
    """`--serve`: testbed serve (testbed/serve/) over the runs folder, in this process."""
    from testbed.serve.app import serve_in_background

    try:
        return serve_in_background([out], port)
    except OSError as exc:
        raise fail(f"--serve: cannot listen on 127.0.0.1:{port} ({exc.strerror}); pick "
                   "another with --serve-port") from None


def _url(out: Path, run_path: Path, port: int, route: str) -> str:
    from urllib.parse import quote

    return f"http://127.0.0.1:{port}/{route}/{quote(run_path.relative_to(out).as_posix())}"


def live_url(out: Path, run_path: Path, port: int) -> None:
    """`--serve`: the run's live page, said as soon as its directory exists."""
    console.print(f"live view: {_url(out, run_path, port, 'live')}", highlight=False,
                  soft_wrap=True)


def keep_serving(stop: Any, out: Path, run_path: Path, port: int) -> None:
    """`--serve` after the run: its live page (now with the verdict and the report) stays
    served until Ctrl-C (or SIGTERM)."""
    import signal
    import threading

    done = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: done.set())
    console.print(f"serving the result at {_url(out, run_path, port, 'live')} until Ctrl-C",
                  highlight=False, soft_wrap=True)
    try:
        while not done.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop()


def print_estimate(exp: Any, topo: Any) -> None:
    """The load the experiment will put on this machine (testbed/estimate.py)."""
    from testbed.estimate import EstimateError, cached_cost, describe, simulated_rates

    if exp.maelstrom:
        console.print("load: not estimated for a node program", highlight=False)
        return
    with console.status("estimating the load: simulating a second idle and one under the "
                        "workload"):
        try:
            rates = simulated_rates(exp, topo)
        except EstimateError as exc:
            console.print(f"load: not estimated: {exc}", highlight=False)
            return
    for line in describe(rates, cached_cost()):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def print_run_plan(exp: Any, topo: Any) -> None:
    from testbed.runplan import RunPlan

    plan = RunPlan.build(exp, topo)
    paths = plan.paths
    console.print(f"{exp.name}: {exp.protocol.name} on {len(paths.hosts)} {exp.backend} hosts, "
                  f"{exp.duration / 1e9:g} s of {exp.workload.rate:g} msgs/s per sender "
                  f"({exp.workload.arrival}), seed {exp.seed}")
    among = ", ".join(plan.correct)
    if collapses(paths.hosts):  # the correct hosts by what the timeline leaves out
        left = [h for h in paths.hosts if h not in plan.correct]
        among = (f"{len(plan.correct)} of {len(paths.hosts)} hosts"
                 + (f" (all but {', '.join(left)})" if left else ""))
    console.print(f"then drain {exp.drain / 1e9:g} s, up to {max(exp.drain, exp.drain_max) / 1e9:g}"
                  f" s until quiescent among {among}")
    mgmt = exp.management
    console.print(f"transport {exp.transport}; management "
                  f"{'HTTPS' + (' (mutual TLS)' if mgmt.mutual else '') if mgmt.tls else 'HTTP'}"
                  + (f", certificates {mgmt.key}" if mgmt.tls or exp.transport == "tls" else ""))
    print_paths(paths, sites_of(topo))
    if plan.shaping:
        print_shaping_plan(plan.shaping)
    if plan.actions:
        t = Table("at s", "action", "parameters", title="fault timeline")
        for a in plan.actions:
            text = json.dumps(a.params)
            if collapses(paths.hosts) and len(text) > 160:  # e.g. a partition's N^2 cuts
                cuts = a.params.get("cuts")
                text = text[:150] + "…" + (f" ({len(cuts)} cuts)" if isinstance(cuts, list)
                                           else "")
            t.add_row(f"{a.at_ns / 1e9:g}", a.op, text)
        console.print(t)
    print_estimate(exp, topo)
    console.print("dry run: nothing created")


def print_shaping_plan(plans: dict[str, HostPlan]) -> None:
    from testbed.shaping import netem

    for host, plan in plans.items():
        print(f"# host {host}")
        print(netem.script(plan))
