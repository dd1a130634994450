"""Spec validation of a QoS bound's model (testbed/spec/qos.py `check_model`): every way out
of the model -- a fault, the topology, a management write, a `link` fault, a link's bandwidth
-- is refused with one located line, and accepted with `outside_model: true`."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.spec.loader import SpecError, load_experiment
from tests.inproc import run_cli

# qos-vbr on three hosts, 5 ms paths: Δ = 40 ms, Γ/2 = 5 ms; each host reserves
# (avg 50 + 1/Θ 50) msgs/s x 144 B x 2 copies = 230,400 bit/s
SPEC = """name: model
backend: sim
duration: 3s
drain: 1s
{outside}protocol:
  name: {protocol}
  params: {{delta: 40ms, gamma: 10ms{params}}}
topology:
  name: three
  hosts: [{{name: h1}}, {{name: h2}}, {{name: h3}}]
  matrix:
    h1: {{h2: {link}, h3: 5ms}}
    h2: {{h1: 5ms, h3: 5ms}}
    h3: {{h1: 5ms, h2: 5ms}}
workload: {{rate: 20/s, size: 100B}}
faults:
  - {fault}
"""

CRASH = "{kind: crash, host: h3, at: 2s}"


def spec(tmp_path: Path, fault: str = CRASH, link: str = "5ms", protocol: str = "qos-vbr",
         outside: bool = False) -> Path:
    path = tmp_path / f"exp{len(list(tmp_path.iterdir()))}.yaml"
    params = ", theta: 20ms" if protocol == "qos-vbr" else ", rate: 50"
    path.write_text(SPEC.format(outside="outside_model: true\n" if outside else "",
                                protocol=protocol, params=params, link=link, fault=fault))
    return path


# (what leaves the model, fault, h1->h2 link, protocol, the refused line's field and words)
OUT = [
    ("clock offset written beyond Γ/2",
     '{kind: mgmt, at: 1s, host: h2, mbean: "testbed:type=Clock", write: {OffsetMs: 30}}',
     "5ms", "qos-vbr", "faults.0.write", "clock write"),
    ("clock drift written",
     '{kind: mgmt, at: 1s, host: h2, mbean: "testbed:type=Clock", write: {DriftPpm: 100}}',
     "5ms", "qos-vbr", "faults.0.write", "clock write"),
    ("clock jump",
     '{kind: mgmt, at: 1s, host: h2, mbean: "testbed:type=Clock,*", exec: [jump, 2]}',
     "5ms", "qos-vbr", "faults.0.exec", "clock write"),
    ("path changed by management",
     '{kind: mgmt, at: 1s, host: h2, mbean: "testbed:type=Paths", '
     'exec: [setPath, h1, 80, 0, 0]}',
     "5ms", "qos-vbr", "faults.0.exec", "path change"),
    ("partition by management", '{kind: mgmt, at: 1s, host: h2, mbean: "testbed:type=Network"'
     ', exec: [block, [h1], [h1]]}', "5ms", "qos-cbr", "faults.0.exec", "partition"),
    ("crash by management", '{kind: mgmt, at: 1s, host: h2, mbean: "testbed:type=Node", '
     'exec: [stop]}', "5ms", "qos-cbr", "faults.0.exec", "crash"),
    ("clock fault beyond Γ/2", "{kind: clock, host: h2, at: 1s, offset: 30ms}", "5ms",
     "qos-vbr", "faults.0.kind", "clock fault"),
    ("link delay beyond Δ", "{kind: link, between: [h1, h2], at: 1s, delay: 60ms}", "5ms",
     "qos-vbr", "faults.0.delay", "beyond Δ"),
    ("link delay lowered", "{kind: link, between: [h1, h2], at: 1s, delay: 1ms}", "5ms",
     "qos-vbr", "faults.0.delay", "FIFO"),
    ("link delay raised, then back", "{kind: link, between: [h1, h2], at: 1s, for: 1s, "
     "delay: 20ms}", "5ms", "qos-vbr", "faults.0.delay", "FIFO"),
    ("bandwidth below the reservation", CRASH, "{delay: 5ms, bandwidth: 200kbit}", "qos-vbr",
     "topology.matrix.h1.h2.bandwidth", "reservation 230,400"),
    ("failure outside the model", CRASH, "5ms", "qos-cbr", "faults.0.kind",
     "no such failure"),
]


@pytest.mark.parametrize(("fault", "link", "protocol", "field", "words"),
                         [o[1:] for o in OUT], ids=[o[0] for o in OUT])
def test_each_way_out_of_the_model_is_refused_unless_outside_model(
        tmp_path: Path, fault: str, link: str, protocol: str, field: str, words: str) -> None:
    path = spec(tmp_path, fault, link, protocol)
    with pytest.raises(SpecError) as err:
        load_experiment(path)
    assert len(err.value.problems) == 1, err.value.problems
    line = err.value.problems[0]
    assert line.startswith(f"{path}:") and f": {field}: " in line, line
    assert words in line and "`outside_model: true` runs it anyway" in line, line
    load_experiment(spec(tmp_path, fault, link, protocol, outside=True))


INSIDE = [
    ("clock offset written within Γ/2",
     '{kind: mgmt, at: 1s, host: h2, mbean: "testbed:type=Clock", write: {OffsetMs: 4}}',
     "5ms"),
    ("another management write",
     '{kind: mgmt, at: 1s, host: h2, mbean: "testbed:type=QoS", exec: [newRate, "40"]}',
     "5ms"),
    ("link delay raised for good within Δ",
     "{kind: link, between: [h1, h2], at: 1s, delay: 20ms}", "5ms"),
    ("bandwidth above the reservation", CRASH, "{delay: 5ms, bandwidth: 300kbit}"),
]


@pytest.mark.parametrize(("fault", "link"), [o[1:] for o in INSIDE], ids=[o[0] for o in INSIDE])
def test_what_stays_inside_the_model_is_accepted(tmp_path: Path, fault: str, link: str) -> None:
    load_experiment(spec(tmp_path, fault, link))


def test_the_cli_refuses_with_one_line_exit_2_and_starts_nothing(tmp_path: Path) -> None:
    path = spec(tmp_path, '{kind: mgmt, at: 1s, host: h2, mbean: "testbed:type=Clock", '
                          'write: {OffsetMs: 30}}')
    proc = run_cli("run", str(path), "--out", str(tmp_path / "runs"))
    lines = [x for x in (proc.stdout + proc.stderr).splitlines() if x.strip()]
    assert proc.returncode == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"{path}:") and "faults.0.write: management clock write" in lines[0]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("protocol", ["qos-vbr", "qos-cbr"])
def test_a_path_beyond_the_default_delta_is_outside_the_model(tmp_path: Path,
                                                               protocol: str) -> None:
    """No `delta` given: the default Δ (50 ms) is the model's bound all the same."""
    def without_delta(link: str, outside: bool = False) -> Path:
        path = spec(tmp_path, "{kind: clock, host: h2, at: 1s, offset: 2ms}", link, protocol,
                    outside)
        path.write_text(path.read_text().replace("delta: 40ms, ", ""))
        return path

    path = without_delta("60ms")
    with pytest.raises(SpecError) as err:
        load_experiment(path)
    assert len(err.value.problems) == 1, err.value.problems
    line = err.value.problems[0]
    assert f"{path}:" in line and ": protocol.name: path h1->h2: 60ms" in line, line
    assert "default delta 50ms" in line and "`outside_model: true`" in line, line
    load_experiment(without_delta("60ms", outside=True))
    load_experiment(without_delta("45ms"))
