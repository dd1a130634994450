"""About specs, before any run: `testbed schema`, `testbed plan`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from testbed.cli.common import fail, spec_errors
from testbed.spec.loader import SpecError, load_topology


def schema(
    kind: Annotated[str, typer.Argument(help="topology or experiment",
                                        metavar="topology|experiment")],
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


def plan(
    topology: Annotated[Path, typer.Argument(help="topology YAML (sites or a delay matrix)")],
    rates: Annotated[str | None, typer.Option(help="sending rates r1,r2,... per host",
                                              metavar="RATES")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """How long optimistic total order waits before delivering, per host, on a topology.

    The delays as protocol seto plans them, as fast-seto's heuristic does, and the optimum
    (a linear program), with the average latency each gives.

    Example: [bold]testbed plan topologies/two-sites.yaml --json[/]
    """
    from testbed.pathcheck import sites_of
    from testbed.plan import plan_report

    try:
        topo = load_topology(topology)
    except SpecError as exc:
        raise spec_errors(exc) from None
    paths = topo.paths()
    rate_list = None
    if rates is not None:
        try:
            rate_list = [float(r) for r in rates.split(",")]
        except ValueError:
            raise fail(f"--rates must be numbers separated by commas, got {rates!r}") from None
        if len(rate_list) != len(paths.hosts):
            raise fail(f"--rates has {len(rate_list)} values for {len(paths.hosts)} hosts")
    print(plan_report(paths.hosts, paths.delay_ms(), rate_list, as_json, sites_of(topo)))


