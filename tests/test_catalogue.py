"""The protocol catalogue: one entry per protocol, read by spec validation, node configs, the
node core, the management MBeans and the checker suite."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.checks import UNKNOWN_CLAIMS, claims_of
from analysis.report import verdict
from analysis.verdict import checks_ok
from nodes import wire
from nodes.protocols import catalogue, make_protocol
from nodes.protocols.base import LayerBase
from testbed.spec.loader import SpecError, load_experiment

ROOT = Path(__file__).resolve().parents[1]

TOPO = """\
name: t
sites:
  a: {lan: {delay: 1ms}}
hosts:
  - {name: h1, site: a}
  - {name: h2, site: a}
  - {name: h3, site: a}
"""

EXP = """\
name: e
topology: topo.yaml
duration: 2s
protocol:
  name: {name}
  params: {params}
workload: {{rate: 10/s, size: 100B}}
"""


def load(tmp_path: Path, name: str, params: str) -> None:
    (tmp_path / "topo.yaml").write_text(TOPO)
    (tmp_path / "exp.yaml").write_text(EXP.format(name=name, params=params))
    load_experiment(tmp_path / "exp.yaml")


def test_every_entry_builds_a_stack_with_every_hook_and_its_wire_id_decodes() -> None:
    for entry in catalogue.CATALOGUE:
        layer = make_protocol(entry.name, 0, [0, 1, 2], {})
        assert isinstance(layer, LayerBase), entry.name
        for hook in ("start", "broadcast", "on_message", "on_timer", "on_suspect", "on_view"):
            assert callable(getattr(layer, hook)), (entry.name, hook)
        header = wire.Header(wire.MsgType.DATA, entry.wire_id, sender=1, origin=1, mno=1)
        assert wire.decode(wire.encode(wire.Message(header))).header.proto == entry.wire_id
    assert len({e.wire_id for e in catalogue.CATALOGUE}) == len(catalogue.CATALOGUE)


def test_unknown_protocol_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="reliable-nack"):
        make_protocol("paxos", 0, [0, 1], {})


@pytest.mark.parametrize("name", catalogue.names())
def test_every_protocol_loads_with_default_params(tmp_path: Path, name: str) -> None:
    load(tmp_path, name, "{}")


@pytest.mark.parametrize("params,field,text", [
    ("{window: 0}", "protocol.params.window", "greater than or equal to 1"),
    ("{nack_retry_ms: -1}", "protocol.params.nack_retry_ms", "greater than 0"),
    ("{nack_retry_ms: -1s}", "protocol.params.nack_retry_ms", "valid number"),
    ("{colour: red}", "protocol.params.colour", "unknown parameter"),
    ("{alpha: 0.5}", "protocol.params.alpha", "unknown parameter"),  # a SETO parameter
])
def test_bad_params_give_one_located_line_each(tmp_path: Path, params: str, field: str,
                                               text: str) -> None:
    with pytest.raises(SpecError) as info:
        load(tmp_path, "reliable-nack", params)
    assert len(info.value.problems) == 1, info.value.problems
    m = re.match(r"^.*exp\.yaml:(\d+): (\S+): (.*)$", info.value.problems[0])
    assert m and m.group(1) == "6" and m.group(2) == field, info.value.problems
    assert text in m.group(3), info.value.problems


def test_two_bad_params_give_two_lines_and_the_cli_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "topo.yaml").write_text(TOPO)
    (tmp_path / "exp.yaml").write_text(EXP.format(name="seto",
                                                  params="{alpha: 1.5, flavour: x}"))
    out = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", str(tmp_path / "exp.yaml"),
                           "--out", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 2, lines
    assert any("protocol.params.alpha: " in x for x in lines), lines
    assert any("protocol.params.flavour: unknown parameter" in x for x in lines), lines
    assert not out.exists()


def test_schema_shows_every_protocol_with_its_params_and_claims() -> None:
    proc = subprocess.run([sys.executable, "-m", "testbed", "schema", "experiment"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    protos = schema["$defs"]["ProtocolSpec"]["x-protocols"]
    assert set(protos) == set(catalogue.names())
    assert "alpha" in protos["seto"]["params"]["properties"]
    assert "window" in protos["reliable-nack"]["params"]["properties"]
    assert "total_order" not in protos["reliable-nack"]["claims"]
    assert protos["sequencer"]["liveness"]["roles"] == ["sequencer"]
    assert "loss" not in protos["fifo"]["liveness"]["tolerates"]
    assert protos["qos-cbr"]["model"]["fifo"] and protos["qos-cbr"]["model"]["failures"] == []
    assert "model" not in protos["sequencer"]
    assert "outside_model" in schema["properties"]


def test_host_params_come_from_the_catalogue() -> None:
    assert catalogue.get("sequencer").host_params() == ("sequencer",)
    assert catalogue.get("reliable-nack").host_params() == ()


def test_claims_decide_which_checks_fail_the_run() -> None:
    assert "total_order" not in claims_of({"reliable-nack"})
    assert "causal_order" in claims_of({"sequencer"})
    assert claims_of({"raw"}) == UNKNOWN_CLAIMS == claims_of(set())
    summary = {"checks": {"fifo_order": {"violations": 0, "claimed": True},
                          "causal_order": {"violations": 4, "claimed": False}}}
    assert checks_ok(summary)
    assert verdict(summary) == (True, [])
    summary["checks"]["fifo_order"]["violations"] = 1
    assert not checks_ok(summary)
    assert verdict(summary)[1] == ["fifo_order: 1 violation(s)"]


def test_node_mbean_reports_the_protocol_claims_from_the_catalogue() -> None:
    from nodes.config import Member, NodeConfig
    from nodes.core import NodeCore
    from nodes.management.node_mbeans import build_node_registry

    members = [Member(i, f"h{i + 1}", "127.0.0.1", 7000 + i) for i in range(3)]
    for name in ("cbcast", "sequencer"):
        cfg = NodeConfig(node_id=0, name="h1", members=members, protocol=name, params={},
                         log_path="", seed=1, start_at_ns=0, duration_ns=0, drain_ns=0)
        node = build_node_registry(NodeCore(cfg, 0), lambda: 0).get("testbed:type=Node")
        assert node.read("Claims") == sorted(catalogue.get(name).claims)
        assert ("total_order" in node.read("Claims")) == (name == "sequencer")


@pytest.mark.parametrize("params,field,text", [
    ("{token_timeout: -1s}", "protocol.params.token_timeout", "unknown parameter"),
    ("{token_retransmit_ms: -1}", "protocol.params.token_retransmit_ms", "greater than 0"),
    ("{max_per_visit: 0}", "protocol.params.max_per_visit", "greater than or equal to 1"),
])
def test_token_ring_bad_params_give_one_located_line(tmp_path: Path, params: str, field: str,
                                                     text: str) -> None:
    with pytest.raises(SpecError) as info:
        load(tmp_path, "token-ring", params)
    assert len(info.value.problems) == 1, info.value.problems
    assert f"exp.yaml:6: {field}: " in info.value.problems[0], info.value.problems
    assert text in info.value.problems[0]
