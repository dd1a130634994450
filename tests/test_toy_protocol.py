"""Adding a protocol takes one module and one catalogue entry (docs/architecture.md, "Adding a
protocol"): a toy layer over reliable multicast, written here and registered through
`catalogue.register` only, runs on the simulator and is judged by the checker suite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from analysis.record import read_record
from nodes.protocols import catalogue
from nodes.protocols.base import Action, FinalDeliver, Log, Received
from nodes.protocols.catalogue import RELIABLE_FIFO, Entry, Liveness
from nodes.protocols.reliable import Below, OnReliable, ReliableParams
from nodes.sim import Simulator
from nodes.wire import Header, Message, MsgType
from tests.sim_golden import S, configs

TOY_WIRE_ID = 120


class Toy(OnReliable):
    """Delivers every message as reliable FIFO multicast hands it up, each one's own at once,
    with the payload's first byte doubled as a mark: the log shows that the layer, not the
    one below, made the delivery. `skip`: a broken variant that drops every third message
    from others (the checker suite must catch it)."""

    def __init__(self, me: int, members: list[int], params: dict[str, Any], skip: bool = False):
        self.me = me
        self.rm = Below(me, members, params, TOY_WIRE_ID, self._r_deliver)
        self.mno = self.seq = 0
        self.skip = skip

    def broadcast(self, payload: bytes, now: int) -> list[Action]:
        self.mno += 1
        header = Header(MsgType.DATA, origin=self.me, mno=self.mno, ts=now)
        out: list[Action] = [Log("send", {"mno": self.mno, "size": len(payload)})]
        return out + self.rm.multicast(header, payload[:1] * 2 + payload, now)

    def _r_deliver(self, src: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        if h.type != MsgType.DATA or msg.payload[:1] != msg.payload[1:2]:
            return []
        out: list[Action] = [] if h.origin == self.me else \
            [Received(h.origin, h.mno, len(msg.payload) - 2)]
        if self.skip and h.origin != self.me and h.mno % 3 == 0:
            return out
        self.seq += 1
        return [*out, FinalDeliver(h.origin, h.mno, self.seq, len(msg.payload) - 2)]


def entry(name: str, skip: bool) -> Entry:
    return Entry(name, TOY_WIRE_ID + skip, lambda me, members, params: Toy(me, members, params,
                                                                           skip),
                 ReliableParams, RELIABLE_FIFO,
                 liveness=Liveness(frozenset(), note="a toy: no liveness claimed"),
                 summary="a toy layer over reliable multicast (tests/test_toy_protocol.py)")


@pytest.fixture
def isolated_catalogue(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test leave the catalogue as it was."""
    monkeypatch.setattr(catalogue, "_BY_NAME", dict(catalogue._BY_NAME))
    monkeypatch.setattr(catalogue, "_BY_WIRE", dict(catalogue._BY_WIRE))


def run(tmp_path: Path, protocol: str) -> dict[str, Any]:
    """Four hosts on jittered, lossy and bandwidth-limited paths (tests/sim_golden.py), then
    the in-process judge (analysis/judge.py) on the run directory."""
    from analysis.judge import judge_run

    run_dir = tmp_path / protocol
    cfgs = configs(run_dir / "nodes", protocol, {})
    for cfg in cfgs:
        Path(cfg.log_path).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.log_path).with_name("config.json").write_text(json.dumps(cfg.to_dict()))
    Simulator(cfgs, seed=3).run(cfgs[0].start_at_ns + 3 * S)
    return judge_run(read_record(run_dir))


@pytest.mark.usefixtures("isolated_catalogue")
def test_a_toy_protocol_runs_from_its_catalogue_entry_alone(tmp_path: Path) -> None:
    catalogue.register(entry("toy", skip=False))
    summary = run(tmp_path, "toy")
    logs = {n: [json.loads(line) for line in (tmp_path / "toy" / "nodes" / n / "events.jsonl")
                .read_text().splitlines()] for n in summary["nodes"]}
    sent = {(e["mid"]) for evs in logs.values() for e in evs if e["ev"] == "send"}
    assert len(sent) > 400
    for evs in logs.values():  # every node final-delivers every message once
        fnl = [e["mid"] for e in evs if e["ev"] == "fnl"]
        assert sorted(fnl) == sorted(sent)
    checks = summary["checks"]
    assert {k: checks[k]["violations"] for k in RELIABLE_FIFO} == dict.fromkeys(RELIABLE_FIFO, 0)
    assert summary["ok"], summary["verdict"]


@pytest.mark.usefixtures("isolated_catalogue")
def test_the_checker_suite_catches_a_broken_toy(tmp_path: Path) -> None:
    """The same path with a toy that drops messages: agreement and validity fail."""
    catalogue.register(entry("toy-broken", skip=True))
    summary = run(tmp_path, "toy-broken")
    assert summary["checks"]["agreement"]["violations"] > 0
    assert not summary["ok"]


@pytest.mark.usefixtures("isolated_catalogue")
def test_an_entry_that_does_not_hold_is_refused_and_changes_nothing() -> None:
    with pytest.raises(RuntimeError, match="unique"):
        catalogue.register(entry("sequencer", skip=False))
    with pytest.raises(RuntimeError, match="sections"):
        catalogue.register(Entry("toy", TOY_WIRE_ID, Toy, ReliableParams, RELIABLE_FIFO,
                                 sections=("nope",)))
    assert catalogue.find("toy") is None and catalogue.find_wire(TOY_WIRE_ID) is None
