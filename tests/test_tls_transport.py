"""The `tls` transport (nodes/tls_transport.py): TCP + TLS 1.3 with mutual authentication by
the run's certificates, length-prefixed frames carrying unchanged wire datagrams.

In-process: two members exchange datagrams; a node whose certificate comes from another CA is
refused (and counted) on both sides; a peer cannot claim another member's sender id. End to
end: a quickstart-like local run over `tls` with HTTPS management keeps one total order with
every message delivered everywhere, and no datagram is refused.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from nodes.config import Member, NodeConfig
from nodes.tls_transport import TlsTransport
from nodes.wire import Header, Message, MsgType, encode
from testbed.certs import make_run_certs
from tests.eventlogs import fnl_sequences, read_events

ROOT = Path(__file__).resolve().parents[1]


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
