"""The `tls` transport (nodes/tls_transport.py): TCP + TLS 1.3 with mutual authentication by
the run's certificates, length-prefixed frames carrying unchanged wire datagrams.

In-process: two members exchange datagrams; a node whose certificate comes from another CA is
refused (and counted) on both sides; a peer cannot claim another member's sender id. End to
end: a quickstart-like local run over `tls` with HTTPS management keeps one total order with
every message delivered everywhere, and no datagram is refused. On mininet (root): the
quickstart over `tls` with HTTPS management passes every check and no captured TCP or UDP
payload holds a plaintext wire header; a node given a certificate of another CA is refused by
the others, which report `rejected:tls`, and none of its messages is delivered.
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analysis.record import read_record
from nodes.config import Member, NodeConfig
from nodes.protocols import catalogue
from nodes.tls_transport import TlsTransport
from nodes.wire import MAGIC, WIRE_VERSION, Flag, Header, Message, MsgType, encode
from testbed.certs import make_run_certs
from tests.eventlogs import fnl_sequences, read_events, run_dir_of
from tests.inproc import run_cli
from tests.shaping_env import root_only

ROOT = Path(__file__).resolve().parents[1]
HEADER_START = MAGIC + bytes([WIRE_VERSION])
MSG_TYPES = {int(t) for t in MsgType}
# Protocol ids of the catalogue and its layers are small; any below 64 counts as a match.
PROTO_IDS = set(range(64)) | {e.wire_id for e in catalogue.CATALOGUE}
FLAGS = int(sum(Flag))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _configs(tmp: Path) -> list[NodeConfig]:
    members = [Member(i, f"h{i + 1}", "127.0.0.1", _free_port()) for i in range(3)]
    good = make_run_certs(tmp / "run", "r1", {m.name: ["127.0.0.1"] for m in members[:2]})
    ca = (tmp / "run" / "certs" / "ca.pem").read_text()
    # h3 has a certificate with its own name, but from another run's CA.
    rogue = make_run_certs(tmp / "other", "r2", {"h3": ["127.0.0.1"]})["h3"]
    out = []
    for m in members:
        cert = good.get(m.name, rogue)
        out.append(NodeConfig(node_id=m.id, name=m.name, members=members, protocol="sequencer",
                              params={}, log_path="", seed=1, start_at_ns=0, duration_ns=0,
                              drain_ns=0, transport="tls", tls_cert=cert.cert_pem,
                              tls_key=cert.key_pem, tls_ca=ca if m.id < 2 else (
                                  tmp / "other" / "certs" / "ca.pem").read_text()))
    return out


def _datagram(sender: int, mno: int) -> bytes:
    return encode(Message(Header(MsgType.DATA, sender=sender, origin=sender, mno=mno, rseq=mno),
                          b"x" * 100))


def test_members_exchange_frames_and_a_foreign_ca_is_refused(tmp_path: Path) -> None:
    cfgs = _configs(tmp_path)

    async def main() -> tuple[dict[int, list[bytes]], dict[int, list[tuple[str, str]]],
                              list[TlsTransport]]:
        got: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
        refused: dict[int, list[tuple[str, str]]] = {0: [], 1: [], 2: []}
        nodes = [TlsTransport(c, got[c.node_id].append,
                              lambda r, d, i=c.node_id: refused[i].append((r, d)))
                 for c in cfgs]
        for n in nodes:
            await n.start()
        for mno in range(1, 51):
            nodes[0].send(1, _datagram(0, mno))
            nodes[1].send(0, _datagram(1, mno))
            nodes[2].send(0, _datagram(2, mno))  # the rogue dials h1
            nodes[0].send(2, _datagram(0, mno))  # h1 dials the rogue
        nodes[1].send(0, _datagram(2, 99))  # h2 claims to be h3
        for _ in range(100):
            await asyncio.sleep(0.05)
            if len(got[0]) >= 50 and len(got[1]) >= 50 and refused[0] and refused[2]:
                break
        await asyncio.sleep(0.3)
        for n in nodes:
            await n.stop()
        return got, refused, nodes

    got, refused, nodes = asyncio.run(main())
    assert got[0] == [_datagram(1, m) for m in range(1, 51)]  # in order, unchanged
    assert got[1] == [_datagram(0, m) for m in range(1, 51)]
    assert got[2] == []  # h1 would not talk to the rogue...
    assert nodes[0].refused >= 1 and any(r == "tls" for r, _ in refused[0])  # ...nor hear it
    assert nodes[0].rejected_peer == 1 and ("peer", "h2 sent a datagram as sender 2") in \
        refused[0]
    assert any(r == "tls" for r, _ in refused[2])


@pytest.mark.timing
def test_local_run_over_tls_keeps_one_total_order(tmp_path: Path) -> None:
    (tmp_path / "topo.yaml").write_text((ROOT / "topologies" / "two-sites.yaml").read_text())
    (tmp_path / "exp.yaml").write_text(
        "name: tls\ntopology: topo.yaml\nbackend: local\nduration: 5s\ndrain: 2s\n"
        "transport: tls\nmanagement: {tls: true, key: rsa-2048}\n"
        "protocol: {name: sequencer, params: {sequencer: h1}}\n"
        "workload: {rate: 50/s, size: 1KiB, arrival: poisson}\n")
    out = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", str(tmp_path / "exp.yaml"),
                           "--out", str(out), "--no-analyze"], cwd=ROOT, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = next(p for p in out.iterdir() if p.is_dir())
    events = read_events(run)
    stops = {h: evs[-1] for h, evs in events.items()}
    assert all(s["ev"] == "stop" and s["rejected"] == 0 and s["errors"] == 0
               for s in stops.values()), stops
    for host in events:
        assert "Traceback" not in (run / "nodes" / host / "node.log").read_text()
    seqs = fnl_sequences(events)
    sent = {e["mid"] for evs in events.values() for e in evs if e["ev"] == "send"}
    assert len(sent) > 4 * 50 * 5 * 0.5  # Poisson, on a possibly loaded machine
    assert all(s == seqs["h1"] for s in seqs.values()) and set(seqs["h1"]) == sent


def tcp_udp_payloads(pcap: Path) -> Iterator[tuple[int, bytes]]:
    """(IP protocol, transport payload) of every IPv4 TCP or UDP packet of a classic pcap
    (Ethernet or Linux cooked capture), as far as the snap length kept it."""
    data = pcap.read_bytes()
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    link = struct.unpack(endian + "I", data[20:24])[0]
    l2 = {1: 14, 113: 16}[link]
    at = 24
    while at + 16 <= len(data):
        caplen = struct.unpack(endian + "I", data[at + 8:at + 12])[0]
        frame = data[at + 16:at + 16 + caplen]
        at += 16 + caplen
        if len(frame) < l2 + 20 or frame[l2 - 2:l2] != b"\x08\x00":
            continue
        ip = frame[l2:]
        proto = ip[9]
        ihl = (ip[0] & 0x0F) * 4
        if proto == 17:
            yield proto, ip[ihl + 8:]
        elif proto == 6 and len(ip) >= ihl + 20:
            yield proto, ip[ihl + (ip[ihl + 12] >> 4) * 4:]


def plaintext_headers(payload: bytes) -> int:
    """Places in `payload` where a plaintext wire header starts: the magic, the version, a
    message type, a protocol id and flags that nodes/wire.py would accept. Ciphertext matches
    these 6 bytes by chance about once in 10^12 positions."""
    n, at = 0, payload.find(HEADER_START)
    while at >= 0:
        h = payload[at:at + 6]
        if len(h) == 6 and h[3] in MSG_TYPES and h[4] in PROTO_IDS and not h[5] & ~FLAGS:
            n += 1
        at = payload.find(HEADER_START, at + 1)
    return n


def quickstart_on_mininet(tmp_path: Path, duration: str, extra: str) -> Path:
    spec = (ROOT / "experiments" / "quickstart.yaml").read_text()
    spec = spec.replace("backend: local", "backend: mininet").replace(
        "../topologies/two-sites.yaml", str(ROOT / "topologies" / "two-sites.yaml")).replace(
        "duration: 20s", f"duration: {duration}")
    (tmp_path / "exp.yaml").write_text(spec + extra)
    return tmp_path / "exp.yaml"


@pytest.mark.root
@pytest.mark.timing
@root_only
def test_quickstart_over_tls_on_mininet_passes_and_its_pcaps_hold_no_plaintext_header(
        tmp_path: Path) -> None:
    exp = quickstart_on_mininet(tmp_path, "8s", "transport: tls\nmanagement: {tls: true}\n"
                                "capture: {pcap: true, snaplen: 512}\n")
    # In-process (tests/inproc.py): the analysis reuses this session's Spark.
    proc = run_cli("run", str(exp), "--out", str(tmp_path / "runs"))
    assert proc.returncode == 0, proc.stdout + proc.stderr  # every check and expectation
    run = run_dir_of(tmp_path / "runs")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["ok"] and all(c["violations"] == 0 for c in summary["checks"].values())
    assert all(t["rejected"] == 0 for t in summary["transport"].values()), summary["transport"]
    # The control: the scanner finds the header of a plaintext frame, at any offset.
    frame = struct.pack("!I", 60) + _datagram(1, 7)
    assert plaintext_headers(b"\x17\x03\x03" + frame + frame) == 2
    manifest = json.loads((run / "pcaps" / "manifest.json").read_text())
    seen = {6: 0, 17: 0}
    for entry in manifest:
        for proto, payload in tcp_udp_payloads(run / "pcaps" / Path(entry["file"]).name):
            seen[proto] += 1
            assert plaintext_headers(payload) == 0, (entry["file"], payload[:64].hex())
    print(f"scanned {seen[6]} TCP and {seen[17]} UDP payloads: no plaintext wire header")
    assert seen[6] > 4000, seen  # the data plane's TCP segments were captured and read


@pytest.mark.root
@root_only
def test_a_node_with_another_cas_certificate_is_refused_on_mininet_and_reported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from analysis.job import transport_section
    from testbed import runner, runplan
    from testbed.spec.loader import load_experiment

    exp_path = quickstart_on_mininet(tmp_path, "4s", "transport: tls\ndrain_max: 4s\n"
                                     "capture: {pcap: false}\n")
    rogue = make_run_certs(tmp_path / "other", "r2", {"h4": []})["h4"]
    real_security = runplan.security

    def with_rogue_h4(*args: Any, **kwargs: Any) -> dict[str, Any]:
        out = real_security(*args, **kwargs)
        out["certs"]["h4"] = (rogue.cert_pem, rogue.key_pem)  # same name, another CA
        return out

    monkeypatch.setattr(runplan, "security", with_rogue_h4)
    exp, topo = load_experiment(exp_path)
    console = Console(file=io.StringIO(), width=120)
    result = runner.run_experiment(exp, topo, tmp_path / "runs", console, analyze=False)
    refused = transport_section(read_record(result.run.path))
    assert all(refused[h]["drops"].get("rejected:tls", 0) >= 1 for h in ("h1", "h2", "h3")), \
        refused
    events = read_events(result.run.path)
    from_h4 = [e for h in ("h1", "h2", "h3") for e in events[h]
               if e["ev"] == "fnl" and e["mid"].startswith("h4:")]
    assert from_h4 == []  # nothing of h4's reached the group
    log = (result.run.path / "nodes" / "h1" / "events.jsonl").read_text()
    assert '"reason":"rejected:tls"' in log  # the refusal itself is in the event log
