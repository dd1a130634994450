"""Captures written by the test, joined with matching logs: latency splits into transit and
waiting, overhead per broadcast, and the fault-driven metrics (recovery, clock offsets)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import EDecimal, PcapWriter

from analysis.job import analyze
from analysis.record import read_record
from analysis.synthetic import write_run
from nodes.wire import Header, Message, MsgType, Proto, encode

pytestmark = pytest.mark.spark

MS = 1_000_000
S = 1_000_000_000
HOSTS = ["h1", "h2", "h3"]
IPS = {h: f"10.0.0.{k + 1}" for k, h in enumerate(HOSTS)}
PAYLOAD = b"x" * 50
IP_LEN = 20 + 8 + 44 + len(PAYLOAD)
N = 20
PART_START, HEAL = int(1.5 * S), int(2.5 * S)


def t_send(k: int) -> int:
    return S + k * 100 * MS


def packet(t: int, src: str, dst: str, kind: MsgType, origin: int, mno: int) -> Any:
    msg = Message(Header(type=kind, proto=Proto.SEQUENCER, sender=HOSTS.index(src), rseq=mno,
                         origin=origin, mno=mno), PAYLOAD if kind == MsgType.DATA else b"")
    pkt = (Ether() / IP(src=IPS[src], dst=IPS[dst]) / UDP(sport=7000, dport=7000)
           / Raw(load=encode(msg)))
    pkt.time = EDecimal(t) / EDecimal(S)
    return pkt


def write_pcap(path: Path, packets: list[Any]) -> None:
    writer = PcapWriter(str(path), nano=True, linktype=1, sync=True)
    for p in sorted(packets, key=lambda p: p.time):
        writer.write(p)
    writer.close()


def build_run(run: Path) -> Path:
    """h1 multicasts N messages; h2 gets each 3 ms after the send and delivers it 2 ms later;
    h3 gets each 6 ms after and delivers 4 ms later, except that a partition (1.5 s - 2.5 s)
    cuts h3 off: those messages reach it 50 ms after the heal, 1 ms apart."""
    logs: dict[str, list[dict[str, Any]]] = {h: [] for h in HOSTS}
    caps: dict[str, list[Any]] = {h: [] for h in HOSTS}
    last_h3 = 0
    backlog = 0
    for k in range(1, N + 1):
        t0, mid = t_send(k), f"h1:{k}"
        logs["h1"] += [{"t": t0, "ev": "send", "mid": mid}, {"t": t0 + MS, "ev": "fnl", "mid": mid}]
        caps["h1"] += [packet(t0 + MS // 10, "h1", d, MsgType.DATA, 0, k) for d in ("h2", "h3")]
        caps["h2"] += [packet(t0 + 3 * MS, "h1", "h2", MsgType.DATA, 0, k),
                       packet(t0 + 4 * MS, "h2", "h1", MsgType.ACK, 0, k)]
        # h2's local clock runs 7 ms ahead.
        logs["h2"].append({"t": t0 + 5 * MS, "lt": t0 + 12 * MS, "ev": "fnl", "mid": mid})
        arrive = t0 + 6 * MS
        if PART_START <= t0 < HEAL:
            arrive = HEAL + 50 * MS + backlog * MS
            backlog += 1
        fnl = max(arrive + 4 * MS, last_h3 + MS)
        last_h3 = fnl
        # A relayed copy arriving later must not move the arrival.
        caps["h3"] += [packet(arrive, "h1", "h3", MsgType.DATA, 0, k),
                       packet(arrive + 3 * MS, "h2", "h3", MsgType.DATA, 0, k)]
        logs["h3"].append({"t": fnl, "ev": "fnl", "mid": mid})
    for events in logs.values():
        for e in events:
            e["proto"] = "sequencer"
    cuts = [[a, b] for a in HOSTS for b in HOSTS if a != b and "h3" in (a, b)]
    faults = [{"t": PART_START, "kind": "partition", "phase": "start", "hosts": HOSTS,
               "fault": 0, "params": {"cuts": cuts}},
              {"t": HEAL, "kind": "partition", "phase": "stop", "hosts": [], "fault": 0}]
    write_run(run, logs, faults)
    (run / "spec.lock.yaml").write_text(yaml.safe_dump(
        {"topology": {"hosts": [{"name": h} for h in HOSTS]}}))
    pcaps = run / "pcaps"
    pcaps.mkdir()
    # h2's capture was rotated: two files, both in the manifest.
    half = len(caps["h2"]) // 2
    files = {"h1-d0.pcap": ("h1", caps["h1"]), "h2-d0-1.pcap": ("h2", caps["h2"][:half]),
             "h2-d0-2.pcap": ("h2", caps["h2"][half:]), "h3-d0.pcap": ("h3", caps["h3"])}
    for name, (_, pkts) in files.items():
        write_pcap(pcaps / name, pkts)
    (pcaps / "manifest.json").write_text(json.dumps(
        [{"host": host, "interface": "d0", "file": name} for name, (host, _) in files.items()]))
    return run


@pytest.fixture(scope="module")
def summary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    yield analyze(read_record(build_run(tmp_path_factory.mktemp("transit") / "run")))


def test_every_rotated_capture_is_converted(summary: dict[str, Any], tmp_path: Path) -> None:
    pcaps = summary["network"]["pcaps"]
    assert pcaps["files"] == 4 and pcaps["failed"] == {}
    assert pcaps["wire_packets"] == pcaps["packets"] == 6 * N


def test_latency_splits_into_transit_and_protocol_waiting(summary: dict[str, Any]) -> None:
    split = summary["network"]["latency_split"]
    h2 = split["per_receiver"]["h2"]
    assert (h2["transit"]["p50_ms"], h2["transit"]["max_ms"]) == (pytest.approx(3.0),
                                                                  pytest.approx(3.0))
    assert h2["waiting"]["p99_ms"] == pytest.approx(2.0)
    h3 = split["per_receiver"]["h3"]
    # Ten messages took 6 ms; the ten cut off took 159 ms (sent 2.4 s) and more: the median
    # interpolates between 6 and 159.
    assert h3["transit"]["p50_ms"] == pytest.approx((6 + 159) / 2)
    assert h3["waiting"]["p50_ms"] == pytest.approx(4.0)
    # The messages sent during the partition waited on the wire, not in the protocol.
    assert h3["transit"]["max_ms"] == pytest.approx(HEAL / MS + 50 - t_send(5) / MS)
    assert split["all"]["transit"]["count"] == 2 * N
    assert split["unmatched"] == 0
    assert set(split["per_receiver"]) == {"h2", "h3"}  # the sender's own delivery has no wire


def test_overhead_counts_each_datagram_once_at_its_sender(summary: dict[str, Any]) -> None:
    over = summary["network"]["overhead"]
    assert over["broadcasts"] == N
    # h1's two DATA copies and h2's ACK; the copies h2 and h3 received are not counted again.
    assert over["datagrams_per_type"] == {"DATA": 2 * N, "ACK": N}
    assert over["datagrams_per_broadcast"] == pytest.approx(3.0)
    assert over["bytes_per_broadcast"] == pytest.approx(3 * IP_LEN - len(PAYLOAD))


def test_recovery_after_the_heal_is_measured_for_the_cut_off_host(
    summary: dict[str, Any],
) -> None:
    # Backlog: messages 5..14 (sent 1.5 s - 2.4 s; h1 and h2 delivered them before the heal).
    assert summary["recovery"] == [{
        "fault": 0, "host": "h3", "heal_t": HEAL, "backlog": 10,
        "delivered_again_ms": pytest.approx(54.0), "caught_up_ms": pytest.approx(63.0)}]
    assert summary["partitioned_at_end"] == []


def test_clock_offset_per_host_per_second(summary: dict[str, Any]) -> None:
    clock = summary["clock"]["per_host"]
    assert clock["h2"]["max_abs_ms"] == pytest.approx(7.0)
    assert {s[1] for s in clock["h2"]["samples"]} == {7.0}
    assert clock["h1"]["max_abs_ms"] == 0.0
    assert [s[0] for s in clock["h1"]["samples"]] == [0, 1]


def test_latency_quantiles_per_sender(summary: dict[str, Any]) -> None:
    assert summary["latency"]["fnl"]["per_sender"]["h1"]["count"] == 3 * N


def test_capture_files_fall_back_to_names_without_a_manifest(tmp_path: Path) -> None:
    (tmp_path / "pcaps").mkdir()
    (tmp_path / "pcaps" / "h2-d0.pcap").write_bytes(b"")
    (tmp_path / "pcaps" / "h2-d0.log").write_text("")
    (tmp_path / "nodes").mkdir()
    assert read_record(tmp_path).capture_files() == [("h2", tmp_path / "pcaps" / "h2-d0.pcap")]
