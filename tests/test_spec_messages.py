"""A bad spec is one line in the spec's own words (testbed/spec/messages.py), exit code 2,
whatever pydantic's error looks like: typos get a "did you mean", a union reports only the
member the value went into, a scalar for a mapping shows the mapping."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.inproc import ROOT, run_cli

EXP = f"""\
name: e
topology: {ROOT}/topologies/two-sites.yaml
backend: sim
duration: 2s
protocol: {{name: sequencer, params: {{sequencer: h1}}}}
workload: {{rate: 10/s, size: 100B}}
faults:
  - {{kind: crash, host: h2, at: 1s}}
"""

INLINE = """\
topology:
  name: t
  sites:
    a: {lan: {delay: 1ms}}
  hosts:
    h1: {site: a}
"""

# (old text, new text, the one line after "exp.yaml:")
CASES = [
    ("duration: 2s", "duraton: 2s", "4: duraton: unknown field (did you mean 'duration'?)"),
    ("protocol: {name: sequencer, params: {sequencer: h1}}", "protocol: sequencer",
     "5: protocol: expected a mapping like {name: sequencer}"),
    ("kind: crash", "kind: crsh", "8: faults.0.kind: unknown fault kind 'crsh' (did you mean "
     "'crash'?)"),
    ("kind: crash", "kind: meteor", "8: faults.0.kind: unknown fault kind 'meteor'; one of "
     "partition, heal, crash, restart, pause, resume, clock, link, loss-burst, mgmt"),
    (f"topology: {ROOT}/topologies/two-sites.yaml\n", INLINE,
     "6: topology.hosts: Input should be a valid list"),
    ("size: 100B}", "size: 100B, sise: 1KiB}", "6: workload.sise: unknown field (did you mean "
     "'size'?)"),
    ("host: h2", "hots: h2", "8: faults.0.hots: unknown field (did you mean 'host'?)"),
    ("size: 100B}", "size: 100B, senders: 5}", "6: workload.senders: expected 'all' or a list, "
     "not 5"),
    (f"topology: {ROOT}/topologies/two-sites.yaml", "topology: 5",
     "2: topology: expected a string or a mapping, not 5"),
]


@pytest.mark.parametrize("old,new,line", CASES)
def test_a_bad_spec_is_one_line_in_its_own_words(tmp_path: Path, old: str, new: str,
                                                  line: str) -> None:
    assert old in EXP
    (tmp_path / "exp.yaml").write_text(EXP.replace(old, new))
    r = run_cli("run", str(tmp_path / "exp.yaml"), "--out", str(tmp_path / "runs"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.splitlines() == [f"{tmp_path / 'exp.yaml'}:{line}"]
    assert not (tmp_path / "runs").exists()


def test_the_spec_as_written_loads(tmp_path: Path) -> None:
    """The cases above fail only by what they change."""
    (tmp_path / "exp.yaml").write_text(EXP)
    r = run_cli("run", str(tmp_path / "exp.yaml"), "--dry-run")
    assert r.returncode == 0, r.stderr
