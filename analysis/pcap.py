"""Fast pcap/pcapng reader: capture files to Arrow tables and Parquet.

`read_pcap` maps the file once, walks its records (`analysis.pcap_classic`,
`analysis.pcap_ng`) and dissects all packets at once with numpy (`analysis.pcap_decode`):
Ethernet (with VLAN tags), Linux cooked v1/v2 (`tcpdump -i any`), raw IP, BSD loopback;
IPv4/IPv6; UDP/TCP ports; and our wire header (`nodes/wire.py`) at the start of UDP
payloads. Damaged files are read as far as they are intact: the damage is counted in
`CaptureStats`, which travels with the table in its schema metadata (`capture_stats`) and
so also lands in the Parquet footer.

Columns: ts_ns, src, dst, proto, sport, dport, ip_len, frame_len, cap_len, ip_version,
link_type, iface, then `WIRE_COLUMNS` (tb_version, tb_type, ..., tb_length), then
`AGENT_COLUMNS` (tm_number, tm_fragment, tm_count, tm_type: the Maelstrom host agent's
frames, docs/maelstrom.md). A field that a
packet does not have (a port of an ICMP packet, the wire header of a TCP segment, the
timestamp of a pcapng Simple Packet Block) is null. Unsigned header fields are widened to
signed types that Spark reads natively; the one 64-bit field, tb_ts (ns), is int64, exact
until the year 2262.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import mmap
import struct
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from analysis.pcap_classic import PCAP_MAGIC_NS, PCAP_MAGIC_US, read_classic
from analysis.pcap_decode import WIRE_COLUMNS, arrow, decode, strings
from analysis.pcap_formats import Buffer, CaptureStats, PcapFormatError, Records
from analysis.pcap_ng import PCAPNG_SHB, read_pcapng

__all__ = ["WIRE_COLUMNS", "CaptureStats", "PcapFormatError", "capture_stats", "pcap_to_parquet",
           "read_pcap"]

log = logging.getLogger(__name__)
STATS_KEY = b"testbed.pcap.stats"
CHUNK = 1 << 16  # packets decoded at a time
_POPULATE_MAX = 1 << 30


def read_pcap(path: str | Path) -> pa.Table:
    """One row per intact packet record of the capture at `path`, in file order.

    Raises PcapFormatError only when the file is no capture at all; damage inside a
    capture is counted (see `capture_stats`) and logged as a warning.
    """
    path = Path(path)
    stats = CaptureStats()
    with path.open("rb") as f:
        size = f.seek(0, 2)
        if size == 0:
            raise PcapFormatError(f"{path} is empty")
        # Populating the map up front is one kernel call instead of a fault per page; not
        # for files so big that they might not fit in memory.
        populate = getattr(mmap, "MAP_POPULATE", 0) if size <= _POPULATE_MAX else 0
        flags = mmap.MAP_SHARED | populate
        mm = mmap.mmap(f.fileno(), 0, flags=flags, prot=mmap.PROT_READ)
        try:
            batches = _dissect(mm, stats)
        finally:
            # A traceback in flight may still hold a view; the map then goes with it.
            with contextlib.suppress(BufferError):
                mm.close()
    table = pa.Table.from_batches(batches)
    stats.packets = table.num_rows
    if stats.truncated_records or stats.corrupt_records or stats.unknown_link_types:
        log.warning("%s: %d truncated and %d corrupt records, unknown link types %s; "
                    "all intact records kept", path, stats.truncated_records,
                    stats.corrupt_records, stats.unknown_link_types or "none")
    meta = {STATS_KEY: json.dumps(dataclasses.asdict(stats)).encode()}
    return table.replace_schema_metadata(meta)


def _dissect(mm: mmap.mmap, stats: CaptureStats) -> list[pa.RecordBatch]:
    # Everything returned is a copy, so no view of the map outlives this call and the map
    # can be closed by the caller.
    buf = np.frombuffer(mm, dtype=np.uint8)
    try:
        records = read_records(buf, mm, stats)
        # Decoding in chunks keeps the temporaries in cache and reuses their memory.
        return [pa.RecordBatch.from_pydict(decode(buf, records.slice(a, a + CHUNK), stats))
                for a in range(0, max(len(records), 1), CHUNK)]
    finally:
        del buf


def read_records(buf: np.ndarray, raw: Buffer, stats: CaptureStats) -> Records:
    """Walk the capture in `raw` (also viewed as uint8 `buf`) into per-record arrays."""
    if len(raw) < 4:
        raise PcapFormatError("file is too short to be a capture")
    magic_le = struct.unpack_from("<I", raw, 0)[0]
    magic_be = struct.unpack_from(">I", raw, 0)[0]
    if magic_le == PCAPNG_SHB:
        stats.format = "pcapng"
        return read_pcapng(buf, raw, stats)
    for magic, little in ((magic_le, True), (magic_be, False)):
        if magic in (PCAP_MAGIC_US, PCAP_MAGIC_NS):
            stats.format = "pcap-ns" if magic == PCAP_MAGIC_NS else "pcap"
            return read_classic(buf, raw, little, magic == PCAP_MAGIC_NS, stats)
    raise PcapFormatError(f"unknown capture magic {magic_be:#010x}")


def capture_stats(table: pa.Table) -> CaptureStats:
    """The damage counts `read_pcap` stored in the table (or a Parquet file's schema)."""
    raw = (table.schema.metadata or {}).get(STATS_KEY)
    if raw is None:
        return CaptureStats()
    data = json.loads(raw)
    data["unknown_link_types"] = {int(k): v for k, v in data["unknown_link_types"].items()}
    return CaptureStats(**data)


def pcap_to_parquet(paths: list[Path], out_dir: Path) -> dict[str, object]:
    """Convert each capture to `out_dir/<name>.parquet` (with a `capture` column naming the
    source file); returns totals and per-file stats. A file that is no capture is listed
    under "failed" with the reason instead of stopping the conversion."""
    out_dir.mkdir(parents=True, exist_ok=True)
    total = CaptureStats()
    per_file: dict[str, dict[str, object]] = {}
    failed: dict[str, str] = {}
    used: set[str] = set()
    started = time.perf_counter()
    for path in paths:
        path = Path(path)
        try:
            table = read_pcap(path)
        except (PcapFormatError, OSError) as exc:
            failed[str(path)] = str(exc)
            continue
        stats = capture_stats(table)
        total.merge(stats)
        name = _unique_name(path, used)
        capture = pa.DictionaryArray.from_arrays(
            arrow(np.zeros(table.num_rows, dtype=np.int32)), strings([path.name]))
        table = table.append_column("capture", capture)
        out = out_dir / f"{name}.parquet"
        pq.write_table(table, out, compression="zstd")
        per_file[str(path)] = {"parquet": str(out), **dataclasses.asdict(stats)}
    return {
        "files": len(per_file),
        "failed": failed,
        "seconds": round(time.perf_counter() - started, 3),
        **{k: v for k, v in dataclasses.asdict(total).items() if k != "format"},
        "per_file": per_file,
    }


def _unique_name(path: Path, used: set[str]) -> str:
    base = path.name.removesuffix(".gz")
    for suffix in (".pcapng", ".pcap", ".cap"):
        base = base.removesuffix(suffix)
    name, k = base, 1
    while name in used:
        k += 1
        name = f"{base}-{k}"
    used.add(name)
    return name
