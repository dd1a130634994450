"""Benchmark: packets per second per core for our pcap reader, dpkt and scapy.

Writes synthetic captures (classic pcap and pcapng) of Ethernet/IPv4/UDP datagrams that
carry the testbed wire header, with varied payload sizes so records have varied lengths,
then reads the same files with each reader, extracting the same fields (addresses, ports,
lengths, timestamps, wire header). The figure is packets / CPU second of this process
(time.process_time), i.e. per core. scapy is run on the first `--scapy-packets` packets
only and extrapolated; the output says so.

    python bench/pcap_reader.py                    # 1M packets
    python bench/pcap_reader.py --packets 5000000
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.pcap import read_pcap  # noqa: E402
from analysis.pcap_decode import WIRE_DTYPE  # noqa: E402
from analysis.scapy_wire import scapy_rows  # noqa: E402
from nodes import wire  # noqa: E402

_FRAME = np.dtype([
    ("eth_dst", "V6"), ("eth_src", "V6"), ("ethertype", ">u2"),
    ("vihl", "u1"), ("tos", "u1"), ("ip_len", ">u2"), ("ip_id", ">u2"), ("frag", ">u2"),
    ("ttl", "u1"), ("p", "u1"), ("ip_sum", ">u2"), ("src", ">u4"), ("dst", ">u4"),
    ("sport", ">u2"), ("dport", ">u2"), ("udp_len", ">u2"), ("udp_sum", ">u2"),
    ("wire", WIRE_DTYPE),
])
_PCAP_REC = np.dtype([("sec", "<u4"), ("frac", "<u4"), ("incl", "<u4"), ("orig", "<u4")])
_EPB_HEAD = np.dtype([("type", "<u4"), ("blen", "<u4"), ("iface", "<u4"), ("hi", "<u4"),
                      ("lo", "<u4"), ("cap", "<u4"), ("orig", "<u4")])
_CHUNK = 200_000


def synthetic_frames(n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fixed headers as _FRAME records, payload sizes, timestamps ns) for n datagrams."""
    rng = np.random.default_rng(seed)
    payload = rng.choice(np.array([0, 16, 64, 200, 1000]), size=n)
    f = np.zeros(n, dtype=_FRAME)
    f["ethertype"] = 0x0800
    f["vihl"] = 0x45
    f["ttl"] = 64
    f["p"] = 17
    udp_len = 8 + wire.HEADER_SIZE + payload
    f["ip_len"] = 20 + udp_len
    f["udp_len"] = udp_len
    f["ip_id"] = np.arange(n) & 0xFFFF
    f["src"] = 0x0A000001 + rng.integers(0, 8, n)
    f["dst"] = 0x0A000001 + rng.integers(0, 8, n)
    f["sport"] = rng.integers(1024, 65536, n)
    f["dport"] = 7000 + rng.integers(0, 8, n)
    w = f["wire"]
    w["magic"] = wire.MAGIC
    w["version"] = wire.WIRE_VERSION
    w["type"] = rng.integers(1, 11, n)
    w["proto"] = rng.integers(0, 5, n)
    w["sender"] = rng.integers(0, 8, n)
    w["rseq"] = np.arange(n)
    w["origin"] = rng.integers(0, 8, n)
    w["mno"] = np.arange(n) + 1
    w["seq"] = np.arange(n)
    w["hint"] = rng.integers(-5000, 5000, n)
    w["slot"] = rng.integers(0, 1 << 20, n)
    w["ts"] = 1_700_000_000_000_000_000 + np.arange(n) * 1000
    w["aux"] = rng.integers(0, 100, n)
    w["length"] = payload
    ts = 1_700_000_000_000_000_000 + np.cumsum(rng.integers(1, 20_000, n))
    return f, payload, ts


def _scatter(out: np.ndarray, offs: np.ndarray, rows: np.ndarray) -> None:
    """out[offs[i] : offs[i] + rowlen] = rows[i], in chunks to bound the index array."""
    width = rows.dtype.itemsize
    flat = rows.view(np.uint8).reshape(len(rows), width)
    cols = np.arange(width)
    for a in range(0, len(offs), _CHUNK):
        out[offs[a:a + _CHUNK, None] + cols] = flat[a:a + _CHUNK]


def write_pcap(path: Path, n: int, seed: int = 1) -> None:
    frames, payload, ts = synthetic_frames(n, seed)
    frame_len = _FRAME.itemsize + payload
    rec_len = 16 + frame_len
    offs = 24 + np.concatenate([[0], np.cumsum(rec_len)[:-1]])
    out = np.zeros(24 + int(rec_len.sum()), dtype=np.uint8)
    out[:24] = np.frombuffer(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1),
                             dtype=np.uint8)
    hdr = np.zeros(n, dtype=_PCAP_REC)
    hdr["sec"] = ts // 1_000_000_000
    hdr["frac"] = ts % 1_000_000_000 // 1000
    hdr["incl"] = frame_len
    hdr["orig"] = frame_len
    _scatter(out, offs, hdr)
    _scatter(out, offs + 16, frames)
    path.write_bytes(out.tobytes())


def write_pcapng(path: Path, n: int, seed: int = 1) -> None:
    frames, payload, ts = synthetic_frames(n, seed)
    frame_len = _FRAME.itemsize + payload
    padded = (frame_len + 3) & ~3
    blen = 28 + padded + 4
    shb = struct.pack("<IIIHHqI", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1, 28)
    opts = struct.pack("<HHB3x", 9, 1, 9) + struct.pack("<HH", 0, 0)  # if_tsresol = 10^-9
    idb_len = 20 + len(opts)
    idb = struct.pack("<IIHHI", 1, idb_len, 1, 0, 0) + opts + struct.pack("<I", idb_len)
    head = shb + idb
    offs = len(head) + np.concatenate([[0], np.cumsum(blen)[:-1]])
    out = np.zeros(len(head) + int(blen.sum()), dtype=np.uint8)
    out[: len(head)] = np.frombuffer(head, dtype=np.uint8)
    epb = np.zeros(n, dtype=_EPB_HEAD)
    epb["type"] = 6
    epb["blen"] = blen
    epb["hi"] = ts >> 32
    epb["lo"] = ts & 0xFFFFFFFF
    epb["cap"] = frame_len
    epb["orig"] = frame_len
    _scatter(out, offs, epb)
    _scatter(out, offs + 28, frames)
    _scatter(out, offs + blen - 4, blen.astype("<u4"))
    path.write_bytes(out.tobytes())


def read_ours(path: Path, limit: int | None = None) -> int:
    return int(read_pcap(path).num_rows)


def read_dpkt(path: Path, limit: int | None = None) -> int:
    """What a careful dpkt user writes: the same fields, one packet at a time."""
    import dpkt

    unpack = wire.HEADER.unpack_from
    rows: list[tuple[Any, ...]] = []
    with path.open("rb") as f:
        magic = f.read(4)
        f.seek(0)
        reader = dpkt.pcapng.Reader(f) if magic == b"\x0a\x0d\x0d\x0a" else dpkt.pcap.Reader(f)
        for ts, buf in reader:
            eth = dpkt.ethernet.Ethernet(buf)
            ip = eth.data
            if isinstance(ip, dpkt.ip.IP):
                src, dst = socket.inet_ntoa(ip.src), socket.inet_ntoa(ip.dst)
                ip_len = ip.len
            elif isinstance(ip, dpkt.ip6.IP6):
                src = socket.inet_ntop(socket.AF_INET6, ip.src)
                dst = socket.inet_ntop(socket.AF_INET6, ip.dst)
                ip_len = ip.plen + 40
            else:
                rows.append((ts, len(buf)))
                continue
            l4 = ip.data
            sport = dport = None
            tb: tuple[Any, ...] = ()
            if isinstance(l4, dpkt.udp.UDP | dpkt.tcp.TCP):
                sport, dport = l4.sport, l4.dport
                if isinstance(l4, dpkt.udp.UDP) and l4.data[:2] == wire.MAGIC:
                    tb = unpack(l4.data)
            rows.append((int(ts * 1_000_000_000), src, dst, ip.p, sport, dport, ip_len,
                         len(buf), tb))
    return len(rows)


def read_scapy(path: Path, limit: int | None = None) -> int:
    return sum(1 for _ in scapy_rows(path, limit=limit))


def measure(reader: Callable[[Path, int | None], int], path: Path,
            limit: int | None = None) -> tuple[int, float]:
    t0 = time.process_time()
    count = reader(path, limit)
    return count, time.process_time() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--scapy-packets", type=int, default=20_000)
    ap.add_argument("--skip-dpkt", action="store_true", help="only ours and scapy")
    ap.add_argument("--dir", type=Path, default=None, help="where to write the captures")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for fmt, writer in (("pcap", write_pcap), ("pcapng", write_pcapng)):
            path = Path(tmp) / f"synthetic.{fmt}"
            t0 = time.perf_counter()
            writer(path, args.packets)
            mib = path.stat().st_size / 2**20
            print(f"\n{fmt}: {args.packets:,} packets, {mib:,.0f} MiB "
                  f"(written in {time.perf_counter() - t0:.1f} s)")
            ours_n, ours_s = measure(read_ours, path)
            assert ours_n == args.packets, (ours_n, args.packets)
            rates = {"ours (analysis.pcap)": ours_n / ours_s}
            if not args.skip_dpkt:
                n, s = measure(read_dpkt, path)
                assert n == args.packets
                rates["dpkt"] = n / s
            n, s = measure(read_scapy, path, args.scapy_packets)
            rates[f"scapy ({n:,}-packet subset, extrapolated)"] = n / s
            for name, rate in rates.items():
                ratio = rates["ours (analysis.pcap)"] / rate
                print(f"  {name:<44} {rate:>12,.0f} packets/s per core   ours/this = "
                      f"{ratio:,.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
