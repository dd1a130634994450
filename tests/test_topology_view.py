"""The report's topology view: hosts placed by their measured location (or by site), links
coloured by one-way delay, each partition's groups; from a sim run on an imported topology."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from analysis.topology_view import groups_after, groups_of, positions, projection, topology_svg
from tests.inproc import run_cli
from tests.test_topology_import import PINGS, SERVERS


def test_positions_by_location_by_site_and_on_a_circle() -> None:
    located = {"hosts": [{"name": "toronto", "location": [43.65, -79.38]},
                         {"name": "frankfurt", "location": [50.11, 8.68]},
                         {"name": "sydney", "location": [-33.87, 151.21]}]}
    pos, how = positions(located, 900, 440)
    assert how == "location"
    assert pos["toronto"][0] < pos["frankfurt"][0] < pos["sydney"][0]  # west to east
    assert pos["sydney"][1] > pos["frankfurt"][1]  # south is lower on the page
    sited = {"hosts": [{"name": "h1", "site": "a"}, {"name": "h2", "site": "a"},
                       {"name": "h3", "site": "b"}]}
    pos, how = positions(sited, 900, 440)
    assert how == "site"
    near = abs(pos["h1"][0] - pos["h2"][0]) + abs(pos["h1"][1] - pos["h2"][1])
    far = abs(pos["h1"][0] - pos["h3"][0]) + abs(pos["h1"][1] - pos["h3"][1])
    assert near < far
    assert positions({"hosts": [{"name": "x"}, {"name": "y"}]}, 900, 440)[1] == "circle"
    # Hosts sharing a location sit on a small ring around it, not on top of each other.
    pair = {"hosts": [{"name": "va1", "location": [38.9, -77.4]},
                      {"name": "va2", "location": [38.9, -77.4]},
                      {"name": "tokyo", "location": [35.7, 139.7]}]}
    pos, how = positions(pair, 900, 440)
    assert how == "location" and pos["va1"] != pos["va2"]
    assert abs(pos["va1"][0] - pos["va2"][0]) + abs(pos["va1"][1] - pos["va2"][1]) < 40
    assert groups_after({("c", "a"), ("a", "c"), ("c", "b"), ("b", "c")}, ["a", "b", "c"]) == [
        ["c"], ["a", "b"]]
    assert groups_after(set(), ["a", "b"]) == [["a", "b"]]
    assert groups_of("partition sao-paulo | toronto frankfurt-am-m") == [
        ["sao-paulo"], ["toronto", "frankfurt-am-m"]]


def test_report_of_a_run_on_an_imported_topology(tmp_path: Path) -> None:
    (tmp_path / "pings.csv").write_text(PINGS)
    (tmp_path / "servers.csv").write_text(SERVERS)
    proc = run_cli("topology", "import", "--format", "wonderproxy", str(tmp_path / "pings.csv"),
                   "--servers", str(tmp_path / "servers.csv"), "--select",
                   "Toronto,São Paulo,Frankfurt", "--out", str(tmp_path / "three.yaml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "location: [43.65, -79.38]" in (tmp_path / "three.yaml").read_text()
    (tmp_path / "exp.yaml").write_text(
        "name: view\ntopology: three.yaml\nbackend: sim\nduration: 3s\ndrain: 1s\nseed: 1\n"
        "protocol: {name: reliable-nack}\nworkload: {rate: 20/s, size: 100B}\n"
        "faults: [{kind: partition, isolate: sao-paulo, at: 1s, for: 1s}]\n")
    proc = run_cli("run", str(tmp_path / "exp.yaml"), "--no-analyze", "--out",
                   str(tmp_path / "runs"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = (tmp_path / "runs").iterdir()
    proc = run_cli("report", str(run))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = (run / "report.html").read_text()
    view = page[page.index('<svg class="topo" data-view="topology"'):]
    view = view[:view.index("</svg>")]
    assert "placed by latitude and longitude on a world map" in page
    assert '<polygon class="land"' in view and 'class="graticule"' in view
    hosts = dict(re.findall(r'data-host="([^"]+)"><circle cx="([0-9.]+)"', view))
    assert float(hosts["toronto"]) < float(hosts["frankfurt-am-m"])
    links = dict(re.findall(r'data-pair="([^"]+)" data-delay-ms="([0-9.]+)"', view))
    # the mean of the two imported one-way delays (median RTT / 2 each way)
    assert float(links["toronto-sao-paulo"]) == (124 / 2 + 122 / 2) / 2
    assert float(links["sao-paulo-frankfurt-am-m"]) == (204 / 2 + 206 / 2) / 2
    assert len(links) == 3
    part = page[page.index('<figure class="partition"'):]
    part = part[:part.index("</figure>")]
    assert "sao-paulo | frankfurt-am-m toronto" in part
    assert part.count('class="cut"') == 2  # sao-paulo to each of the other two
    assert "measured topology: dataset wonderproxy measurements pings.csv" in page


def test_world_map_and_regional_window() -> None:
    """Hosts spread over the world: the whole world, equirectangular (the same scale for
    longitude and latitude), with the hand-drawn continents and a graticule every 30 degrees;
    hosts within one region: that region, rounded out to 10 degrees, graticule every 10."""
    world = projection([43.65, 50.11, -33.87], [-79.38, 8.68, 151.21], 900, 440, 40)
    assert world.world and (world.lon0, world.lon1) == (-180, 180)
    (x0, y0), (x1, y1) = world.xy(0, 0), world.xy(30, 30)
    assert x1 - x0 == pytest.approx(y0 - y1) and y0 > y1  # north up, one scale both ways
    europe = projection([51.5, 50.1, 59.3], [-0.1, 8.7, 18.1], 900, 440, 40)
    assert not europe.world and (europe.lon0, europe.lon1, europe.lat0, europe.lat1) == (
        -10, 30, 40, 70)
    lock = {"topology": {"name": "w", "hosts": [
        {"name": "toronto", "location": [43.65, -79.38]},
        {"name": "frankfurt", "location": [50.11, 8.68]},
        {"name": "sydney", "location": [-33.87, 151.21]}]},
        "paths_ms": {"toronto->sydney": {"delay": 100.0}, "sydney->toronto": {"delay": 110.0},
                     "toronto->frankfurt": {"delay": 45.0}, "frankfurt->toronto": {"delay": 45.0},
                     "frankfurt->sydney": {"delay": 130.0},
                     "sydney->frankfurt": {"delay": 130.0}}}
    svg, caption = topology_svg(lock)
    assert "world map" in caption
    assert svg.count('<polygon class="land"') >= 6  # the continents are drawn
    assert "30°N" in svg and "120°E" in svg and "90°W" in svg
    links = dict(re.findall(r'data-pair="([^"]+)" data-delay-ms="([0-9.]+)"', svg))
    assert float(links["toronto-sydney"]) == 105.0
    colours = dict(re.findall(r'data-pair="([^"]+)" [^>]*stroke="(#[0-9a-f]+)"', svg))
    assert colours["toronto-frankfurt"] != colours["frankfurt-sydney"]  # coloured by delay
    svg, caption = topology_svg({"topology": {"hosts": [{"name": "a"}, {"name": "b"}]}})
    assert "land" not in svg and "on a circle" in caption
