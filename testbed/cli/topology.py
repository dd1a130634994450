"""`testbed topology import`: a topology from measured Internet latencies
(testbed/spec/measured.py, docs/topologies.md)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from testbed.cli.common import console, err

topology_app = typer.Typer(no_args_is_help=True, help="Topologies from measured data.\n\n"
                           "Example: [bold]testbed topology import --format grid cities.csv "
                           "--out topologies/cities.yaml[/]")


@topology_app.command(name="import")
def import_cmd(
    file: Annotated[Path, typer.Argument(help="the measurements (pings CSV, grid, matrix)")],
    out: Annotated[Path, typer.Option("--out", help="the topology YAML to write")],
    fmt: Annotated[str, typer.Option("--format", help="wonderproxy, grid or matrix",
                                     metavar="FORMAT")] = "grid",
    servers: Annotated[Path | None, typer.Option(
        help="wonderproxy: its servers CSV (id, name, title, ...); matrix: one name per "
        "line")] = None,
    select: Annotated[str | None, typer.Option(
        help="cities/regions to import, comma-separated, in host order; `label=name` names "
        "a host", metavar="NAMES")] = None,
    statistic: Annotated[str, typer.Option(
        help="over a pair's samples: median, min or p90 (wonderproxy)",
        metavar="STATISTIC")] = "median",
    asymmetry: Annotated[Path | None, typer.Option(
        help="measured one-way delays (a grid of ms) to use instead of RTT/2")] = None,
    locations: Annotated[Path | None, typer.Option(
        help="a CSV of site, latitude, longitude: where the sites are (a grid or a matrix has "
        "no coordinates); hosts get `location:`")] = None,
    unit: Annotated[str, typer.Option(help="matrix: us or ms", metavar="us|ms")] = "ms",
    values: Annotated[str, typer.Option(
        help="grid, matrix: what the numbers are, for source.statistic (e.g. 'monthly P95 "
        "RTT')", metavar="TEXT")] = "",
    name: Annotated[str | None, typer.Option(help="topology name (default: from --out)",
                                             metavar="NAME")] = None,
    dataset: Annotated[str | None, typer.Option(help="source.dataset", metavar="TEXT")] = None,
    url: Annotated[str, typer.Option(help="source.url", metavar="URL")] = "",
    date: Annotated[str | None, typer.Option(
        help="source.date (default: the timestamps' range, wonderproxy)", metavar="DATE")] = None,
    licence: Annotated[str, typer.Option(help="source.licence: the dataset's terms",
                                         metavar="TEXT")] = "",
) -> None:
    """Write a topology whose one-way delays come from measured round trips.

    Example: [bold]testbed topology import --format wonderproxy pings.csv --servers
    servers.csv --select Toronto,Paris,Tokyo --out topologies/three-cities.yaml[/]
    """
    from testbed.spec import measured as m

    try:
        wanted = [s for s in (select or "").split(",") if s.strip()] or None
        if fmt == "wonderproxy":
            data = m.read_wonderproxy(file, servers, wanted)
        elif fmt == "grid":
            data = m.read_grid(file)
        elif fmt == "matrix":
            data = m.read_matrix(file, unit, servers)
        else:
            raise m.MeasuredDataError([f"{file}:1: --format: {fmt!r} is not one of "
                                       f"{', '.join(m.FORMATS)}"])
        sites = m.select_sites(data, wanted, file)
        if locations is not None:
            m.read_locations(locations, sites)
        one_way = m.read_one_way(asymmetry) if asymmetry is not None else None
        topo_name = name or m.host_name(out.stem) or "measured"
        source = {
            "dataset": dataset or f"{fmt} measurements {file.name}",
            "url": url,
            "date": date if date is not None else m.date_range(data),
            "statistic": m.statistic_text(statistic, fmt, asymmetry, values),
            "licence": licence or "not stated: check the dataset's terms before sharing",
        }
        topo = m.build_topology(data, sites, name=topo_name, statistic=statistic,
                                source=source, asymmetry=one_way)
    except m.MeasuredDataError as exc:
        for line in exc.problems:
            err.print(line, highlight=False, markup=False)
        raise typer.Exit(2) from None
    header = (f"Imported by `testbed topology import --format {fmt}` from {file.name}"
              f"{f' (select {select})' if select else ''}; see `source:`.")
    text = m.dump(topo, header)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, out)
    console.print(f"wrote {out}: {len(sites)} hosts, {len(sites) * (len(sites) - 1)} one-way "
                  "paths", highlight=False)
