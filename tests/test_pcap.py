"""The fast pcap reader against hand-written files, scapy, and tcpdump/tshark captures."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop
from scapy.layers.l2 import ARP, CookedLinux, Dot1Q, Ether
from scapy.packet import Packet, Raw
from scapy.utils import EDecimal, PcapWriter

from analysis import scapy_wire
from analysis.pcap import PcapFormatError, capture_stats, pcap_to_parquet, read_pcap
from analysis.scapy_wire import packet_row, scapy_rows
from nodes import maelstrom, wire
from tests.procs import stop_process

T0 = 1_700_000_000_123_456_789
T0_US = T0 // 1000 * 1000  # what a microsecond pcap can hold


def wire_bytes(mno: int, payload: bytes = b"payload", **fields: int) -> bytes:
    header = wire.Header(wire.MsgType.DATA, wire.Proto.SETO, sender=2, rseq=mno, origin=3,
                         mno=mno, seq=mno * 2, hint=-1234, slot=77, ts=T0 + mno, aux=5)
    return wire.encode(wire.Message(header.with_(**fields), payload))


def eth() -> Ether:
    # Explicit addresses: without them scapy would ARP for the destination on the network.
    return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def frames(count: int) -> list[bytes]:
    """Ethernet frames: UDP with the wire header, plain UDP, TCP, IPv6 UDP, ARP."""
    out = []
    for k in range(count):
        kind = k % 5
        eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        if kind == 0:
            pkt = eth / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=40000 + k, dport=7001)
            pkt = pkt / Raw(wire_bytes(k))
        elif kind == 1:
            pkt = eth / IP(src="10.0.0.3", dst="10.0.0.4") / UDP(sport=5000, dport=6000) / b"x"
        elif kind == 2:
            pkt = eth / IP(src="10.0.0.5", dst="10.0.0.6") / TCP(sport=1234, dport=80)
        elif kind == 3:
            pkt = eth / IPv6(src="fd00::1", dst="fd00::2") / UDP(sport=9, dport=7002)
            pkt = pkt / Raw(wire_bytes(k, b""))
        else:
            pkt = eth / ARP()
        out.append(bytes(pkt))
    return out


def write_classic(path: Path, recs: list[tuple[int, bytes]], *, little: bool = True,
                  nanos: bool = False, linktype: int = 1, snaplen: int = 65535) -> list[int]:
    """A classic pcap; returns each record's offset."""
    e = "<" if little else ">"
    magic = 0xA1B23C4D if nanos else 0xA1B2C3D4
    data = bytearray(struct.pack(e + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype))
    offsets = []
    for ts, frame in recs:
        frac = ts % 10**9 if nanos else ts % 10**9 // 1000
        offsets.append(len(data))
        data += struct.pack(e + "IIII", ts // 10**9, frac, len(frame), len(frame)) + frame
    path.write_bytes(bytes(data))
    return offsets


def pcapng_block(e: str, btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    return struct.pack(e + "II", btype, len(body) + 12) + body + struct.pack(e + "I",
                                                                            len(body) + 12)


def pcapng_idb(e: str, linktype: int, tsresol: int | None) -> bytes:
    opts = b""
    if tsresol is not None:
        opts = struct.pack(e + "HHB3x", 9, 1, tsresol) + struct.pack(e + "HH", 0, 0)
    return pcapng_block(e, 1, struct.pack(e + "HHI", linktype, 0, 0) + opts)


def pcapng_shb(e: str) -> bytes:
    return pcapng_block(e, 0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1))


def pcapng_epb(e: str, iface: int, ticks: int, frame: bytes) -> bytes:
    head = struct.pack(e + "IIIII", iface, ticks >> 32, ticks & 0xFFFFFFFF, len(frame),
                       len(frame))
    return pcapng_block(e, 6, head + frame)


def table_rows(path: Path) -> list[dict]:
    return read_pcap(path).to_pylist()


# ------------------------------------------------------------------ classic pcap variants


@pytest.mark.parametrize("little", [True, False], ids=["little-endian", "big-endian"])
@pytest.mark.parametrize("nanos", [False, True], ids=["usec", "nsec"])
def test_classic_pcap_in_any_byte_order_and_resolution_reads_every_field(
        tmp_path: Path, little: bool, nanos: bool) -> None:
    fs = frames(50)
    recs = [(T0 + k * 1_000_003, f) for k, f in enumerate(fs)]
    path = tmp_path / "x.pcap"
    write_classic(path, recs, little=little, nanos=nanos)
    table = read_pcap(path)
    rows = table.to_pylist()
    assert len(rows) == 50
    for k, row in enumerate(rows):
        expect_ts = recs[k][0] if nanos else recs[k][0] // 1000 * 1000
        assert row["ts_ns"] == expect_ts
        assert row["frame_len"] == len(fs[k])
    assert rows[0]["src"] == "10.0.0.1" and rows[0]["dport"] == 7001
    assert rows[0]["tb_mno"] == 0 and rows[0]["tb_hint"] == -1234 and rows[0]["tb_ts"] == T0
    assert rows[2]["proto"] == 6 and rows[2]["tb_type"] is None
    assert rows[3]["src"] == "fd00::1" and rows[3]["ip_version"] == 6 and rows[3]["tb_mno"] == 3
    assert rows[4]["src"] is None and rows[4]["proto"] is None
    stats = capture_stats(table)
    assert stats.non_ip == 10 and stats.wire_headers == 20
    assert stats.truncated_records == stats.corrupt_records == 0


def test_truncated_last_record_is_counted_and_all_earlier_records_kept(tmp_path: Path) -> None:
    fs = frames(20)
    path = tmp_path / "t.pcap"
    offsets = write_classic(path, [(T0 + k, f) for k, f in enumerate(fs)])
    data = path.read_bytes()
    path.write_bytes(data[: offsets[-1] + 16 + 10])  # last record: header and 10 bytes
    table = read_pcap(path)
    assert table.num_rows == 19
    assert capture_stats(table).truncated_records == 1
    assert capture_stats(table).corrupt_records == 0
    assert table.column("frame_len").to_pylist() == [len(f) for f in fs[:19]]


def test_corrupt_record_header_is_skipped_and_every_intact_record_kept(tmp_path: Path) -> None:
    fs = frames(30)
    path = tmp_path / "c.pcap"
    offsets = write_classic(path, [(T0_US + k * 1000, f) for k, f in enumerate(fs)])
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, offsets[11] + 8, 0xFFFFFFF0)  # absurd incl_len
    path.write_bytes(bytes(data))
    table = read_pcap(path)
    stats = capture_stats(table)
    assert stats.corrupt_records == 1 and stats.truncated_records == 0
    assert stats.skipped_bytes == 16 + len(fs[11])
    kept = table.column("ts_ns").to_pylist()
    assert kept == [T0_US + k * 1000 for k in range(30) if k != 11]


def test_plausible_but_wrong_length_derails_then_resynchronises(tmp_path: Path) -> None:
    fs = frames(30)
    path = tmp_path / "c.pcap"
    offsets = write_classic(path, [(T0_US + k * 1000, f) for k, f in enumerate(fs)])
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, offsets[7] + 8, 3)  # believable, but wrong
    path.write_bytes(bytes(data))
    table = read_pcap(path)
    assert capture_stats(table).corrupt_records == 1
    ts = table.column("ts_ns").to_pylist()
    # Record 7 itself looks intact (3 bytes); everything after it is found again.
    assert ts == [T0_US + k * 1000 for k in range(30)]
    assert table.column("cap_len").to_pylist()[7] == 3


def test_unknown_link_type_keeps_records_with_null_network_fields(tmp_path: Path) -> None:
    path = tmp_path / "u.pcap"
    write_classic(path, [(T0, f) for f in frames(7)], linktype=147)
    table = read_pcap(path)
    assert table.num_rows == 7
    assert capture_stats(table).unknown_link_types == {147: 7}
    assert table.column("src").null_count == 7
    assert table.column("tb_mno").null_count == 7


def test_not_a_capture_raises_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "n.pcap"
    path.write_bytes(b"hello world, not a capture")
    with pytest.raises(PcapFormatError):
        read_pcap(path)


def test_snapped_packets_yield_nulls_not_garbage(tmp_path: Path) -> None:
    frame = frames(1)[0]
    path = tmp_path / "s.pcap"
    # 14 Ethernet + 20 IP + 8 UDP + 10 bytes of the wire header
    data = bytearray(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 52, 1))
    data += struct.pack("<IIII", 1, 0, 52, len(frame)) + frame[:52]
    path.write_bytes(bytes(data))
    row = read_pcap(path).to_pylist()[0]
    assert row["sport"] == 40000 and row["frame_len"] == len(frame) and row["cap_len"] == 52
    assert row["tb_mno"] is None


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_random_damage_never_raises_and_keeps_undamaged_records(tmp_path: Path,
                                                                fmt: str) -> None:
    fs = frames(200)
    stamps = [T0_US + k * 1000 for k in range(200)]
    if fmt == "pcap":
        offsets = write_classic(tmp_path / "clean", list(zip(stamps, fs, strict=True)))
        clean = (tmp_path / "clean").read_bytes()
    else:
        head = pcapng_shb("<") + pcapng_idb("<", 1, None)
        blocks = [pcapng_epb("<", 0, t // 1000, f) for t, f in zip(stamps, fs, strict=True)]
        offsets = [len(head) + sum(map(len, blocks[:k])) for k in range(200)]
        clean = head + b"".join(blocks)
    ends = offsets[1:] + [len(clean)]
    path = tmp_path / f"damaged.{fmt}"
    rng = random.Random(7)
    for _ in range(40):
        data = bytearray(clean)
        hit = rng.randrange(offsets[0], len(data) - 4)
        data[hit : hit + 4] = rng.randbytes(4)
        cut = rng.choice([len(data), rng.randrange(hit, len(data))])
        path.write_bytes(bytes(data[:cut]))
        table = read_pcap(path)
        kept = set(table.column("ts_ns").to_pylist())
        intact = [stamps[k] for k in range(200) if ends[k] <= cut
                  and not offsets[k] <= hit < ends[k] and not offsets[k] <= hit + 3 < ends[k]]
        before = [t for k, t in enumerate(stamps) if ends[k] <= hit]
        assert set(before) <= kept  # everything before the damage, exactly
        assert len(set(intact) & kept) >= len(intact) - 2  # after it, resynchronised
        assert capture_stats(table).packets == table.num_rows


# ------------------------------------------------------------------ pcapng


@pytest.mark.parametrize("e", ["<", ">"], ids=["little-endian", "big-endian"])
def test_pcapng_interfaces_resolutions_and_simple_packet_blocks(tmp_path: Path, e: str) -> None:
    eth = frames(1)[0]
    raw_ip = eth[14:]
    blocks = [
        pcapng_shb(e),
        pcapng_idb(e, 1, None),  # Ethernet, default microseconds
        pcapng_idb(e, 101, 9),  # raw IP, nanoseconds
        pcapng_idb(e, 113, 0x80 | 20),  # Linux cooked v1, 2^-20 s
        pcapng_epb(e, 0, T0 // 1000, eth),
        pcapng_epb(e, 1, T0, raw_ip),
        pcapng_epb(e, 2, (T0 // 10**9 << 20) + (1 << 19), bytes(CookedLinux(proto=0x0800))
                   + raw_ip),
        pcapng_block(e, 3, struct.pack(e + "I", len(eth)) + eth),  # SPB: no timestamp
        pcapng_block(e, 0x80000001, b"custom block"),
        pcapng_epb(e, 5, T0, eth),  # names an interface that was never declared
    ]
    path = tmp_path / "x.pcapng"
    path.write_bytes(b"".join(blocks))
    table = read_pcap(path)
    rows = table.to_pylist()
    assert [r["link_type"] for r in rows] == [1, 101, 113, 1, -1]
    assert [r["ts_ns"] for r in rows] == [T0 // 1000 * 1000, T0, T0 // 10**9 * 10**9 + 5 * 10**8,
                                         None, None]
    for row in rows[:4]:
        assert (row["src"], row["dport"], row["tb_hint"]) == ("10.0.0.1", 7001, -1234)
    stats = capture_stats(table)
    assert stats.unknown_link_types == {-1: 1}
    assert stats.corrupt_records == stats.truncated_records == 0


def test_pcapng_corrupt_and_truncated_blocks_are_counted(tmp_path: Path) -> None:
    fs = frames(10)
    epbs = [pcapng_epb("<", 0, T0 // 1000 + k, f) for k, f in enumerate(fs)]
    broken = bytearray(epbs[4])
    struct.pack_into("<I", broken, len(broken) - 4, 12345)  # trailing length disagrees
    body = pcapng_shb("<") + pcapng_idb("<", 1, None) + b"".join(epbs[:4]) + bytes(broken)
    body += b"".join(epbs[5:]) + pcapng_epb("<", 0, T0 // 1000, fs[0])[:30]
    path = tmp_path / "d.pcapng"
    path.write_bytes(body)
    table = read_pcap(path)
    stats = capture_stats(table)
    assert stats.corrupt_records == 1 and stats.truncated_records == 1
    assert table.column("ts_ns").to_pylist() == [(T0 // 1000 + k) * 1000 for k in range(10)
                                                 if k != 4]


# ------------------------------------------------------------------ scapy layer


def test_scapy_layer_crafts_exactly_what_nodes_wire_encodes() -> None:
    layer = scapy_wire.TestbedWire
    crafted = layer(type=2, proto=2, sender=1, rseq=9, origin=4, mno=17, seq=3, hint=-7,
                    slot=11, ts=T0, aux=2) / b"abc"
    msg = wire.Message(wire.Header(wire.MsgType.ORDER, wire.Proto.SEQUENCER, 0, 1, 9, 4, 17, 3,
                                   -7, 11, T0, 2), b"abc")
    assert bytes(crafted) == wire.encode(msg)
    parsed = UDP(bytes(UDP(sport=1000, dport=1001) / crafted))
    assert parsed[layer].mno == 17 and parsed[layer].load == b"abc"
    foreign = UDP(bytes(UDP(sport=1000, dport=1001) / (b"TX" + bytes(50))))
    assert layer not in foreign and Raw in foreign


def crafted_packets(count: int, rng: random.Random) -> list[Packet]:
    pkts: list[Packet] = []
    for k in range(count):
        l3 = (IP(src=f"10.1.{rng.randrange(4)}.{rng.randrange(1, 9)}", dst="10.2.0.1")
              if rng.random() < 0.7 else
              IPv6(src=f"fd00::{rng.randrange(1, 9):x}", dst="fd00::ff"))
        if isinstance(l3, IPv6) and k % 17 == 0:
            l3 = l3 / IPv6ExtHdrHopByHop()
        kind = rng.random()
        l4: Packet
        sport, dport = rng.randrange(30000, 40000), rng.randrange(30000, 40000)
        if kind < 0.6:
            # ts below 2^63: tb_ts is int64 (see analysis/pcap.py).
            payload = wire_bytes(k, bytes(rng.randrange(0, 60)), type=rng.randrange(1, 11),
                                 hint=rng.randrange(-2**31, 2**31), ts=rng.randrange(2**63),
                                 seq=rng.randrange(2**32))
            l4 = UDP(sport=sport, dport=dport) / Raw(payload)
        elif kind < 0.7:
            # The Maelstrom host agent's frames: whole messages, fragments, a wrong version.
            line = json.dumps({"src": "n1", "dest": "n2", "body": {
                "type": rng.choice(["gossip", "broadcast_ok", "read"]), "msg_id": k,
                "message": "x" * rng.randrange(0, 90)}}).encode()
            frags = maelstrom.fragments(k, line, chunk=rng.choice([1200, 40]))
            frame = frags[rng.randrange(len(frags))]
            if k % 7 == 0:
                frame = frame[:2] + b"\x09" + frame[3:]
            l4 = UDP(sport=sport, dport=dport) / Raw(frame)
        elif kind < 0.8:
            l4 = UDP(sport=sport, dport=dport) / Raw(bytes(rng.randrange(0, 80)))
        else:
            l4 = TCP(sport=sport, dport=dport)
        pkt = eth() / (Dot1Q(vlan=5) / l3 / l4 if k % 13 == 0 else l3 / l4)
        if k % 101 == 0 and isinstance(l3, IP):
            pkt = eth() / IP(src="10.9.9.9", dst="10.2.0.1", frag=10, proto=17) / b"later frag"
        if k % 103 == 0:
            pkt = eth() / IPv6(src="fd00::9", dst="fd00::ff") / IPv6ExtHdrFragment(
                offset=5, nh=17) / b"later fragment"
        pkt.time = EDecimal(T0 + k * 1_234_567) / 10**9
        pkts.append(pkt)
    return pkts


@pytest.mark.parametrize("nano", [False, True], ids=["usec", "nsec"])
def test_scapy_and_fast_path_agree_field_by_field(tmp_path: Path, nano: bool) -> None:
    count = 10_000 if nano else 2_000
    path = tmp_path / "crafted.pcap"
    with PcapWriter(str(path), nano=nano, linktype=1) as writer:
        writer.write(crafted_packets(count, random.Random(count)))
    fast = read_pcap(path).to_pylist()
    reference = list(scapy_rows(path))
    assert len(fast) == len(reference) == count
    for k, (ours, theirs) in enumerate(zip(fast, reference, strict=True)):
        for name, value in theirs.items():
            assert ours[name] == value, (k, name, ours[name], value)
    assert sum(r["tb_mno"] is not None for r in fast) > count // 2
    agent = [r for r in fast if r["tm_number"] is not None]
    assert len(agent) > count // 20
    assert {r["tm_type"] for r in agent} >= {"gossip", "broadcast_ok", "read", None}
    assert any(r["tm_count"] > 1 for r in agent)


def test_cooked_capture_agrees_with_scapy(tmp_path: Path) -> None:
    path = tmp_path / "cooked.pcap"
    pkts = [CookedLinux(proto=0x0800) / p[IP] if IP in p else CookedLinux(proto=0x86DD) / p[IPv6]
            for p in crafted_packets(300, random.Random(3)) if IP in p or IPv6 in p]
    with PcapWriter(str(path), linktype=113) as writer:
        writer.write(pkts)
    fast = read_pcap(path).to_pylist()
    reference = [packet_row(p) for p in scapy_rows_raw(path)]
    for ours, theirs in zip(fast, reference, strict=True):
        for name, value in theirs.items():
            assert ours[name] == value, (name, ours[name], value)


def scapy_rows_raw(path: Path) -> list:
    from scapy.utils import rdpcap

    return list(rdpcap(str(path)))


def test_pcap_to_parquet_writes_one_file_per_capture_with_stats(tmp_path: Path) -> None:
    a, b, bad = tmp_path / "h1.pcap", tmp_path / "h2.pcap", tmp_path / "bad.pcap"
    write_classic(a, [(T0, f) for f in frames(10)])
    offsets = write_classic(b, [(T0, f) for f in frames(5)])
    b.write_bytes(b.read_bytes()[: offsets[-1] + 3])
    bad.write_bytes(b"nope")
    stats = pcap_to_parquet([a, b, bad], tmp_path / "out")
    assert stats["files"] == 2 and stats["packets"] == 14 and stats["truncated_records"] == 1
    failed = stats["failed"]
    assert isinstance(failed, dict) and list(failed) == [str(bad)]
    t = pq.read_table(tmp_path / "out" / "h1.parquet")
    assert t.num_rows == 10 and set(t.column("capture").to_pylist()) == {"h1.pcap"}
    assert capture_stats(pq.read_table(tmp_path / "out" / "h2.parquet")).truncated_records == 1


# ------------------------------------------------------------------ real captures


needs_root = pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true",
                                reason="capturing needs root")

TSHARK_FIELDS = ("frame.time_epoch", "ip.src", "ipv6.src", "ip.dst", "ipv6.dst", "ip.proto",
                 "udp.srcport", "udp.dstport", "ip.len", "frame.len", "frame.cap_len")


def start_capture(argv: list[str], ready: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    deadline = time.monotonic() + 15
    seen = b""
    while ready.encode() not in seen:
        line = proc.stderr.readline()
        if not line or time.monotonic() > deadline:
            stop(proc)
            raise RuntimeError(f"{argv[0]} did not start: {seen.decode(errors='replace')}")
        seen += line
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    stop_process(proc, signal.SIGINT)  # tcpdump and dumpcap flush their files on SIGINT


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if shutil.which("tcpdump") is None or shutil.which("dumpcap") is None:
        pytest.fail("tcpdump and tshark must be installed (apt-get install -y tcpdump tshark)")
    out = tmp_path_factory.mktemp("captures")
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    port = rx.getsockname()[1]
    flt = f"udp port {port}"
    files = {"lo": out / "lo.pcap", "any-sll": out / "any-sll.pcap",
             "any-sll2": out / "any-sll2.pcap", "any-pcapng": out / "any.pcapng"}
    procs: list[subprocess.Popen[bytes]] = []
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def send(mno: int) -> None:
        tx.sendto(wire_bytes(mno, bytes(mno % 97)), ("127.0.0.1", port))

    try:
        procs.append(start_capture(["tcpdump", "-i", "lo", "--immediate-mode", "-U", "-w",
                                    str(files["lo"]), flt], "listening on"))
        procs.append(start_capture(["tcpdump", "-i", "any", "-y", "LINUX_SLL",
                                    "--immediate-mode", "-U", "--time-stamp-precision=nano",
                                    "-w", str(files["any-sll"]), flt], "listening on"))
        procs.append(start_capture(["tcpdump", "-i", "any", "-y", "LINUX_SLL2",
                                    "--immediate-mode", "-U", "-w", str(files["any-sll2"]), flt],
                                   "listening on"))
        procs.append(start_capture(["dumpcap", "-i", "any", "-f", flt, "-w",
                                    str(files["any-pcapng"])], "Capturing on"))
        captured = list(files.values())
        send_until_captured(captured, {0}, send)
        send_until_captured(captured, set(range(1, 201)), send)
    finally:
        for proc in procs:
            stop(proc)
        tx.close()
        rx.close()
    return files


def send_until_captured(paths: list[Path], mnos: set[int],
                        send: Callable[[int], None]) -> None:
    """Send each mno, then resend what some capture lacks: under load the kernel may drop a
    loopback packet on the receive path that `-i any` captures from (libpcap skips the
    outgoing copy on lo), and "listening" comes a moment before packets flow."""
    missing = set(mnos)
    deadline = time.monotonic() + 20
    while missing:
        if time.monotonic() > deadline:
            raise AssertionError(f"captures still lack datagrams {sorted(missing)[:10]}")
        for mno in sorted(missing):
            send(mno)
            time.sleep(0.001)  # a burst can outrun a capture process on a busy machine
        time.sleep(0.1)
        seen: set[int] = set(mnos)
        for path in paths:
            with contextlib.suppress(PcapFormatError, OSError):
                seen &= set(read_pcap(path).column("tb_mno").to_pylist())
                continue
            seen = set()
        missing = mnos - seen


def tshark_rows(path: Path) -> list[dict[str, str]]:
    argv = ["tshark", "-r", str(path), "-T", "fields", "-E", "separator=|"]
    for name in TSHARK_FIELDS:
        argv += ["-e", name]
    text = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60).stdout
    return [dict(zip(TSHARK_FIELDS, line.split("|"), strict=True))
            for line in text.splitlines()]


@pytest.mark.root
@needs_root
@pytest.mark.parametrize("name,link_types", [("lo", {1}), ("any-sll", {113}),
                                             ("any-sll2", {276}), ("any-pcapng", {113, 276})])
def test_real_capture_matches_tshark_packet_by_packet(captures: dict[str, Path], name: str,
                                                      link_types: set[int]) -> None:
    table = read_pcap(captures[name])
    ours = table.to_pylist()
    theirs = tshark_rows(captures[name])
    assert len(ours) == len(theirs) >= 200
    for mine, ts in zip(ours, theirs, strict=True):
        assert mine["ts_ns"] == int(Decimal(ts["frame.time_epoch"]) * 10**9)
        assert mine["src"] == (ts["ip.src"] or ts["ipv6.src"])
        assert mine["dst"] == (ts["ip.dst"] or ts["ipv6.dst"])
        assert mine["proto"] == int(ts["ip.proto"])
        assert (mine["sport"], mine["dport"]) == (int(ts["udp.srcport"]),
                                                  int(ts["udp.dstport"]))
        assert mine["ip_len"] == int(ts["ip.len"])
        assert (mine["frame_len"], mine["cap_len"]) == (int(ts["frame.len"]),
                                                        int(ts["frame.cap_len"]))
    assert set(table.column("link_type").to_pylist()) <= link_types
    # tshark cannot read our header; the datagrams we sent can be: every mno is there.
    mnos = table.column("tb_mno").to_pylist()
    assert set(mnos) == set(range(201))
    lengths = {m: n for m, n in zip(mnos, table.column("tb_length").to_pylist(), strict=True)}
    assert all(lengths[m] == m % 97 for m in range(1, 201))
