"""Specs: units, the path matrix, and one located error line per problem for bad input."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.spec.loader import SpecError, load_experiment, load_topology
from testbed.spec.units import (
    parse_bandwidth,
    parse_duration,
    parse_fraction,
    parse_frequency,
    parse_size,
)

ROOT = Path(__file__).resolve().parents[1]

TOPO = """\
name: t
sites:
  a: {lan: {delay: 1ms}}
  b: {lan: {delay: 2ms}}
wan:
  - {between: [a, b], delay: 20ms}
hosts:
  - {name: h1, site: a}
  - {name: h2, site: a}
  - {name: h3, site: b}
"""

EXP = """\
name: e
topology: topo.yaml
duration: 2s
protocol: {name: sequencer, params: {sequencer: h1}}
workload: {rate: 10/s, size: 100B}
"""


def test_units_parse_to_canonical_values() -> None:
    assert parse_duration("10ms") == 10_000_000
    assert parse_duration("1.5s") == 1_500_000_000
    assert parse_duration("250us") == 250_000
    assert parse_bandwidth("100Mbit") == 100_000_000
    assert parse_bandwidth("1mbps") == 8_000_000  # tc(8): mbps is megabytes per second
    assert parse_fraction("0.1%") == pytest.approx(0.001)
    assert parse_frequency("50/s") == 50.0
    assert parse_size("1KiB") == 1024
    assert parse_size("1KB") == 1000
    for bad, fn in (("10", parse_duration), ("10 parsecs", parse_duration),
                    ("fast", parse_bandwidth), ("150%", parse_fraction), ("50", parse_frequency),
                    ("1 lightyear", parse_size)):
        with pytest.raises(ValueError):
            fn(bad)


def test_site_topology_reduces_to_lan_halves_plus_wan(tmp_path: Path) -> None:
    (tmp_path / "topo.yaml").write_text(TOPO)
    paths = load_topology(tmp_path / "topo.yaml").paths()
    assert paths.get("h1", "h2").delay_ns == 1_000_000
    # 1 ms LAN in a (half on h1's access link) + 20 ms WAN + half of b's 2 ms LAN
    assert paths.get("h1", "h3").delay_ns == 500_000 + 20_000_000 + 1_000_000
    assert paths.get("h3", "h1").delay_ns == 1_000_000 + 20_000_000 + 500_000


def test_asymmetric_matrix_topology(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(
        "name: m\nhosts: [{name: x}, {name: y}]\n"
        "matrix:\n  x: {y: 5ms}\n  y: {x: {delay: 7ms, jitter: 1ms, loss: 1%}}\n")
    paths = load_topology(tmp_path / "m.yaml").paths()
    assert paths.get("x", "y").delay_ns == 5_000_000
    back = paths.get("y", "x")
    assert (back.delay_ns, back.jitter_ns, back.loss) == (7_000_000, 1_000_000, 0.01)


# Each case: (file to corrupt, old text, new text, expected line, expected text in message).
BAD = [
    ("topo", "delay: 20ms", "delay: 20 parsecs", 6, "wan.0.delay"),
    ("topo", "  - {name: h3, site: b}", "  - {name: h3, site: b, colour: red}", 10,
     "hosts.2.colour: unknown field"),
    ("topo", "  - {name: h3, site: b}", "  - {name: h3, site: mars}", 10,
     "unknown site 'mars'"),
    ("exp", "name: sequencer", "name: paxos", 4, "unknown protocol 'paxos'"),
    ("exp", "rate: 10/s", "rate: [10", 5, "(yaml)"),
    ("exp", "duration: 2s", "duration: 2s\nflavour: vanilla", 4, "flavour: unknown field"),
    ("exp", "sequencer: h1", "sequencer: h9", 4, "unknown sequencer host 'h9'"),
    ("exp", "size: 100B", "size: 100B, senders: [h1, h7]", 5, "unknown sender host 'h7'"),
    ("topo", "  - {name: h2, site: a}", "  - {name: h1, site: a}", 9, "duplicate host name"),
    ("exp", "topology: topo.yaml", "topology: nowhere.yaml", 2, "topology file nowhere.yaml"),
    ("exp", "duration: 2s", "duration: -2s", 3, "duration"),
    ("topo", "  b: {lan: {delay: 2ms}}", "  b: {lan: {delay: 2ms, loss: 140%}}", 4, "loss"),
    ("topo", "delay: 20ms", "delay: -20ms", 6, "wan.0.delay"),
    # Host names end up in namespace, container and log names: bounded so that every derived
    # name stays within the kernel's 15-character interface limit and friends.
    ("topo", "  - {name: h3, site: b}", "  - {name: a-very-long-host-name, site: b}", 10,
     "hosts.2.name"),
]


@pytest.mark.parametrize("which,old,new,line,text", BAD)
def test_bad_spec_gives_one_located_line_and_creates_nothing(
    tmp_path: Path, which: str, old: str, new: str, line: int, text: str
) -> None:
    topo, exp = TOPO, EXP
    if which == "topo":
        assert old in topo
        topo = topo.replace(old, new)
    else:
        assert old in exp
        exp = exp.replace(old, new)
    (tmp_path / "topo.yaml").write_text(topo)
    (tmp_path / "exp.yaml").write_text(exp)
    with pytest.raises(SpecError) as info:
        load_experiment(tmp_path / "exp.yaml")
    problems = info.value.problems
    assert len(problems) == 1, problems
    bad_file = "topo.yaml" if which == "topo" else "exp.yaml"
    m = re.match(rf"^(.*{bad_file}):(\d+): (.*)$", problems[0])
    assert m, problems[0]
    assert int(m.group(2)) == line, problems[0]
    assert text in m.group(3), problems[0]


def test_cli_exits_2_with_the_error_and_creates_no_run_directory(tmp_path: Path) -> None:
    (tmp_path / "topo.yaml").write_text(TOPO)
    (tmp_path / "exp.yaml").write_text(EXP.replace("10/s", "10 per second"))
    out = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", str(tmp_path / "exp.yaml"),
                           "--out", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and re.match(r".*exp\.yaml:5: workload\.rate: ", lines[0]), lines
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_schema_prints_json_schema() -> None:
    proc = subprocess.run([sys.executable, "-m", "testbed", "schema", "experiment"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0
    assert '"protocol"' in proc.stdout and '"workload"' in proc.stdout


def test_run_dry_run_prints_the_plan_and_creates_nothing(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", "experiments/quickstart.yaml",
                           "--dry-run", "--out", str(out)], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "one-way delay matrix" in proc.stdout and "10.5" in proc.stdout
    assert "dry run: nothing created" in proc.stdout
    assert not out.exists()
