"""Container walking for capture files: classic pcap and pcapng, down to packet records.

The walk is the only part of reading a capture that is inherently serial (each record's
length says where the next one starts), so it is a tight loop that only collects offsets;
every per-record field (timestamps, lengths, interface) is then gathered for all records
at once with numpy. Damage never stops the walk: a record header that cannot be right is
counted, and the walk resynchronises on the next plausible record, so every intact record
is kept (`CaptureStats`).

Formats: classic pcap per https://www.ietf.org/archive/id/draft-ietf-opsawg-pcap-04.html
(magic a1b2c3d4 microseconds, a1b23c4d nanoseconds, either byte order) and pcapng per
https://www.ietf.org/archive/id/draft-ietf-opsawg-pcapng-02.html (SHB, IDB with
if_tsresol/if_tsoffset, EPB, SPB and the obsolete Packet Block).
"""

from __future__ import annotations

import mmap
import struct
from array import array
from dataclasses import dataclass, field, fields

import numpy as np

# What the walk reads: the mapped file, or bytes in tests.
Buffer = bytes | memoryview | mmap.mmap

# Largest capture length we believe in: Linux' maximum snaplen, with room for GRO'd frames.
MAX_CAPLEN = 1 << 18
_MAX_FRAME = 1 << 24
_NS = 1_000_000_000
# A resynchronised record must have a timestamp within this much of the last good one.
_RESYNC_WINDOW_S = 366 * 86400

PCAP_MAGIC_US = 0xA1B2C3D4
PCAP_MAGIC_NS = 0xA1B23C4D
PCAPNG_SHB = 0x0A0D0D0A
_PCAPNG_BOM = 0x1A2B3C4D
_IDB, _OPB, _SPB, _EPB = 1, 2, 3, 6
# Block types a resync may land on (those a writer commonly emits).
_KNOWN_BLOCKS = frozenset({_IDB, _OPB, _SPB, 4, 5, _EPB, 7, 9, 10, 0xBAD, 0x40000BAD})


class PcapFormatError(ValueError):
    """The file is not a classic pcap or pcapng capture at all."""


@dataclass
class CaptureStats:
    """What a read found besides packets; damage is counted here instead of raised."""

    format: str = ""
    packets: int = 0
    truncated_records: int = 0  # a last record (or its header) cut short by the end of file
    corrupt_records: int = 0  # record headers / blocks that cannot be right; resynced past
    skipped_bytes: int = 0  # bytes passed over while resynchronising
    unknown_link_types: dict[int, int] = field(default_factory=dict)  # link type -> records
    non_ip: int = 0  # intact frames of a known link type that carry neither IPv4 nor IPv6
    snapped: int = 0  # IP packets whose headers were cut by the capture length
    wire_headers: int = 0  # UDP datagrams that carry a testbed wire header

    def merge(self, other: CaptureStats) -> None:
        for name in ("packets", "truncated_records", "corrupt_records", "skipped_bytes",
                     "non_ip", "snapped", "wire_headers"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for lt, n in other.unknown_link_types.items():
            self.unknown_link_types[lt] = self.unknown_link_types.get(lt, 0) + n


@dataclass
class Records:
    """Per-record arrays, all of one length, in file order."""

    data_off: np.ndarray  # int64: offset of the first captured byte in the buffer
    cap_len: np.ndarray  # int64
    frame_len: np.ndarray  # int64: original length on the wire
    ts_ns: np.ndarray  # int64
    ts_valid: np.ndarray  # bool: False for pcapng Simple Packet Blocks (no timestamp)
    link_type: np.ndarray  # int32; -1 where a pcapng block names an undeclared interface
    iface: np.ndarray  # int32: pcapng interface number in the file (0 for classic pcap)
    little: np.ndarray  # bool: the writer's byte order (DLT_NULL headers are in it)

    def __len__(self) -> int:
        return len(self.data_off)

    def slice(self, start: int, stop: int) -> Records:
        return Records(*(getattr(self, f.name)[start:stop] for f in fields(self)))


def gather(buf: np.ndarray, starts: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """One `dtype` record at each byte offset in `starts` (all must fit in `buf`).

    The buffer is viewed as overlapping records one byte apart, so this is one fancy index
    that copies whole records: no per-byte index arrays, no per-field passes.
    """
    size = dtype.itemsize
    if not len(starts):
        return np.zeros(0, dtype=dtype)
    # Copied as opaque bytes, then viewed: numpy copies structured records field by field.
    raw_t = np.dtype((np.void, size)) if dtype.names else dtype
    overlapping = np.ndarray(shape=(len(buf) - size + 1,), dtype=raw_t, buffer=buf,
                             strides=(1,))
    return overlapping[starts].view(dtype)


def take(records: np.ndarray, index: np.ndarray) -> np.ndarray:
    """records[index] for structured records, copied as opaque bytes (see `gather`)."""
    opaque = np.dtype((np.void, records.dtype.itemsize))
    return records.view(opaque)[index].view(records.dtype)


def gather_u32(buf: np.ndarray, starts: np.ndarray, endian: str) -> np.ndarray:
    """One 32-bit word at each start, as int64. pcapng blocks are 4-byte aligned, so there
    this is a plain index into the file viewed as words (much faster than row gathers)."""
    if len(starts) and not (starts & 3).any():
        words = buf[: len(buf) // 4 * 4].view(endian + "u4")
        return words[starts >> 2].astype(np.int64)
    return gather(buf, starts, np.dtype(endian + "u4")).astype(np.int64)


def read_records(buf: np.ndarray, raw: Buffer, stats: CaptureStats) -> Records:
    """Walk the capture in `raw` (also viewed as uint8 `buf`) into per-record arrays."""
    if len(raw) < 4:
        raise PcapFormatError("file is too short to be a capture")
    magic_le = struct.unpack_from("<I", raw, 0)[0]
    magic_be = struct.unpack_from(">I", raw, 0)[0]
    if magic_le == PCAPNG_SHB:
        stats.format = "pcapng"
        return _read_pcapng(buf, raw, stats)
    for magic, little in ((magic_le, True), (magic_be, False)):
        if magic in (PCAP_MAGIC_US, PCAP_MAGIC_NS):
            stats.format = "pcap-ns" if magic == PCAP_MAGIC_NS else "pcap"
            return _read_classic(buf, raw, little, magic == PCAP_MAGIC_NS, stats)
    raise PcapFormatError(f"unknown capture magic {magic_be:#010x}")


# ---------------------------------------------------------------- classic pcap


def _classic_plausible(raw: Buffer, p: int, hdr: struct.Struct, n: int,
                       frac_max: int, limit: int, ref_sec: int | None) -> int:
    """The next record's offset if a believable record header starts at p, else -1."""
    if p + 16 > n:
        return -1
    sec, frac, incl, orig = hdr.unpack_from(raw, p)
    if frac >= frac_max or incl > limit or incl > orig or orig > _MAX_FRAME:
        return -1
    if ref_sec is not None and abs(sec - ref_sec) > _RESYNC_WINDOW_S:
        return -1
    nxt = p + 16 + incl
    return nxt if nxt <= n else -1


def _classic_resync(raw: Buffer, start: int, hdr: struct.Struct, n: int,
                    frac_max: int, limit: int, ref_sec: int | None) -> int:
    """First offset >= start where two chained plausible records (or one ending the file) are."""
    for p in range(start, n - 15):
        nxt = _classic_plausible(raw, p, hdr, n, frac_max, limit, ref_sec)
        if nxt < 0:
            continue
        if nxt == n or n - nxt < 16:
            return p
        if _classic_plausible(raw, nxt, hdr, n, frac_max, limit, ref_sec) >= 0:
            return p
    return n


def _read_classic(buf: np.ndarray, raw: Buffer, little: bool, nanos: bool,
                  stats: CaptureStats) -> Records:
    if len(raw) < 24:
        stats.truncated_records += 1
        return _empty_records()
    endian = "<" if little else ">"
    snaplen, linktype = struct.unpack_from(endian + "II", raw, 16)
    # The upper bits of the link-type field carry FCS information (draft-ietf-opsawg-pcap §4).
    linktype &= 0x0FFFFFFF
    limit = min(max(snaplen, MAX_CAPLEN), _MAX_FRAME)
    frac_max = _NS if nanos else 1_000_000
    hdr = struct.Struct(endian + "IIII")
    incl_of = struct.Struct(endian + "I").unpack_from
    n = len(raw)
    offs = array("q")
    append = offs.append
    rec_dtype = np.dtype([("sec", endian + "u4"), ("frac", endian + "u4"),
                          ("incl", endian + "u4"), ("orig", endian + "u4")])
    off = 24
    checked = 0
    headers: list[np.ndarray] = []  # record headers already validated, in order
    incl_at = memoryview(raw)[8:]  # so the hot loop reads incl_len at `off` itself
    last_header = n - 16
    while True:
        # The hot loop: follow lengths only; everything else (even an absurd length, which
        # jumps too far) is validated afterwards in bulk, and resynchronised from there.
        while off <= last_header:
            nxt = off + 16 + incl_of(incl_at, off)[0]
            if nxt > n:
                break
            append(off)
            off = nxt
        bad, good = _validate(buf, offs, checked, rec_dtype, frac_max, limit)
        headers.append(good)
        if bad >= 0:
            off = offs[bad]
            del offs[bad:]
        checked = len(offs)
        if off >= n:
            break
        if bad < 0 and off + 16 > n:
            stats.truncated_records += 1
            break
        ref = hdr.unpack_from(raw, offs[-1])[0] if offs else None
        resumed = _classic_resync(raw, off + 1, hdr, n, frac_max, limit, ref)
        if resumed >= n and bad < 0 and incl_of(raw, off + 8)[0] <= limit:
            # Nothing believable follows: the record at `off` is the cut-off end of the file.
            stats.truncated_records += 1
            break
        stats.corrupt_records += 1
        stats.skipped_bytes += resumed - off
        off = resumed
    starts = np.frombuffer(offs, dtype=np.int64).copy()
    recs = np.concatenate(headers)
    sec = recs["sec"].astype(np.int64)
    frac = recs["frac"].astype(np.int64)
    count = len(starts)
    return Records(
        data_off=starts + 16,
        cap_len=recs["incl"].astype(np.int64),
        frame_len=recs["orig"].astype(np.int64),
        ts_ns=sec * _NS + (frac if nanos else frac * 1000),
        ts_valid=np.ones(count, dtype=bool),
        link_type=np.full(count, linktype, dtype=np.int32),
        iface=np.zeros(count, dtype=np.int32),
        little=np.full(count, little, dtype=bool),
    )


def _validate(buf: np.ndarray, offs: array, start: int, dtype: np.dtype, frac_max: int,
              limit: int) -> tuple[int, np.ndarray]:
    """(index of the first record from `start` on whose header cannot be right, or -1;
    the headers of the records before it)."""
    if start >= len(offs):
        return -1, np.zeros(0, dtype=dtype)
    starts = np.frombuffer(offs, dtype=np.int64)[start:]
    recs = gather(buf, starts, dtype)
    bad = ((recs["frac"] >= frac_max) | (recs["incl"] > recs["orig"])
           | (recs["orig"] > _MAX_FRAME) | (recs["incl"] > limit))
    hits = np.flatnonzero(bad)
    if not len(hits):
        return -1, recs
    return start + int(hits[0]), recs[: hits[0]]


def _empty_records() -> Records:
    i64 = np.zeros(0, dtype=np.int64)
    i32 = np.zeros(0, dtype=np.int32)
    b = np.zeros(0, dtype=bool)
    return Records(i64, i64, i64, i64, b, i32, i32, b)


# ---------------------------------------------------------------- pcapng


@dataclass
class _Iface:
    link_type: int
    snaplen: int
    tsresol: int = 6  # if_tsresol byte: MSB clear -> 10^-v s, set -> 2^-(v & 0x7f) s
    tsoffset_s: int = 0


@dataclass
class _Section:
    start: int
    little: bool
    iface_base: int  # index of this section's interface 0 in the file-wide list


def _parse_idb(raw: Buffer, off: int, blen: int, endian: str) -> _Iface:
    linktype, _, snaplen = struct.unpack_from(endian + "HHI", raw, off + 8)
    iface = _Iface(linktype, snaplen)
    p, end = off + 16, off + blen - 4
    while p + 4 <= end:
        code, olen = struct.unpack_from(endian + "HH", raw, p)
        if code == 0:
            break
        if code == 9 and olen >= 1:
            iface.tsresol = raw[p + 4]
        elif code == 14 and olen >= 8:
            iface.tsoffset_s = struct.unpack_from(endian + "q", raw, p + 4)[0]
        p += 4 + ((olen + 3) & ~3)
    return iface


def _pcapng_block_ok(raw: Buffer, p: int, n: int, little: bool) -> bool:
    """A resync candidate: known type, sane length, matching trailing length."""
    if p + 12 > n:
        return False
    endian = "<" if little else ">"
    btype, blen = struct.unpack_from(endian + "II", raw, p)
    if btype == PCAPNG_SHB:
        return True
    if btype not in _KNOWN_BLOCKS or blen < 12 or blen & 3 or p + blen > n:
        return False
    return struct.unpack_from(endian + "I", raw, p + blen - 4)[0] == blen


def _pcapng_resync(raw: Buffer, start: int, n: int, little: bool) -> int:
    p = start
    while p < n and not _pcapng_block_ok(raw, p, n, little):
        p += 4
    return min(p, n)


def _first_doubtful(buf: np.ndarray, offs: array, start: int, little: bool) -> int:
    """Index of the first block from `start` on that is no EPB or whose trailing length
    disagrees, or -1: the hot loop took it on trust, the careful path must look at it."""
    if start >= len(offs):
        return -1
    e = "<" if little else ">"
    starts = np.frombuffer(offs, dtype=np.int64)[start:]
    btype = gather_u32(buf, starts, e)
    blen = gather_u32(buf, starts + 4, e)
    tail = gather_u32(buf, starts + blen - 4, e)
    hits = np.flatnonzero((btype != _EPB) | (tail != blen) | (blen & 3 != 0))
    return start + int(hits[0]) if len(hits) else -1


def _read_pcapng(buf: np.ndarray, raw: Buffer, stats: CaptureStats) -> Records:
    n = len(raw)
    sections: list[_Section] = []
    ifaces: list[_Iface] = []
    offs = array("q")  # packet blocks (EPB, SPB, OPB), in file order
    append = offs.append
    off = 0
    little = True
    head = struct.Struct("<II").unpack_from
    tail = struct.Struct("<I").unpack_from
    blen_at = memoryview(raw)[4:]  # so the hot loop reads the block length at `off` itself
    checked = 0
    batch = 16
    while True:
        # The hot loop follows block lengths only, taking every block for an Enhanced Packet
        # Block; types and trailing lengths are checked afterwards in bulk, and the first
        # doubtful block (any other type, any damage) goes the careful way below. Batches
        # grow while all is well, so a doubtful block costs little re-walking.
        stalled = True
        for _ in range(batch):
            if off + 12 > n:
                break
            nxt = off + tail(blen_at, off)[0]
            if not off + 32 <= nxt <= n:
                break
            append(off)
            off = nxt
        else:
            stalled = False
        bad = _first_doubtful(buf, offs, checked, little)
        if bad >= 0:
            off = offs[bad]
            del offs[bad:]
            batch = 16
        checked = len(offs)
        if bad < 0 and not stalled:
            batch = min(batch * 4, 1 << 16)
            continue
        if off + 12 > n:
            if off < n:
                stats.truncated_records += 1
            break
        btype, blen = head(raw, off)
        if btype == PCAPNG_SHB:
            bom = struct.unpack_from("<I", raw, off + 8)[0]
            if bom not in (_PCAPNG_BOM, 0x4D3C2B1A):
                stats.corrupt_records += 1
                stats.skipped_bytes += n - off
                break
            little = bom == _PCAPNG_BOM
            endian = "<" if little else ">"
            head = struct.Struct(endian + "II").unpack_from
            tail = struct.Struct(endian + "I").unpack_from
            btype, blen = head(raw, off)
            sections.append(_Section(off, little, len(ifaces)))
        sane = blen >= 12 and not blen & 3
        if not sane or off + blen > n or tail(raw, off + blen - 4)[0] != blen:
            resumed = _pcapng_resync(raw, off + 4, n, little)
            if resumed >= n and sane and off + blen > n:
                stats.truncated_records += 1  # the last block was cut by the end of the file
            else:
                stats.corrupt_records += 1
                stats.skipped_bytes += resumed - off
            off = resumed
            continue
        if btype in (_EPB, _SPB, _OPB):
            append(off)
            checked = len(offs)
        elif btype == _IDB and sections:
            ifaces.append(_parse_idb(raw, off, blen, "<" if little else ">"))
        off += blen
    if not sections:
        raise PcapFormatError("pcapng file does not start with a Section Header Block")
    return _pcapng_packets(buf, np.frombuffer(offs, dtype=np.int64), sections, ifaces, stats)


def _pcapng_packets(buf: np.ndarray, offs: np.ndarray, sections: list[_Section],
                    ifaces: list[_Iface], stats: CaptureStats) -> Records:
    count = len(offs)
    sec_starts = np.array([s.start for s in sections], dtype=np.int64)
    sec_of = np.searchsorted(sec_starts, offs, side="right") - 1
    blen = np.zeros(count, dtype=np.int64)
    iface_local = np.zeros(count, dtype=np.int64)
    ts_raw = np.zeros(count, dtype=np.uint64)
    cap = np.zeros(count, dtype=np.int64)
    orig = np.zeros(count, dtype=np.int64)
    data_off = np.zeros(count, dtype=np.int64)
    little = np.zeros(count, dtype=bool)
    kinds = np.zeros(count, dtype=np.int64)
    for si, sec in enumerate(sections):
        e = "<" if sec.little else ">"
        in_sec = sec_of == si
        little[in_sec] = sec.little
        kinds[in_sec] = gather_u32(buf, offs[in_sec], e)
        # EPB: iface u32, ts hi/lo, caplen, origlen; OPB: iface u16, drops u16, same after.
        for kind, iface_t in ((_EPB, "u4"), (_OPB, "u2")):
            sel = _everything_or(np.flatnonzero(in_sec & (kinds == kind)), count)
            if isinstance(sel, np.ndarray) and not len(sel):
                continue
            fields = [("type", e + "u4"), ("blen", e + "u4"), ("iface", e + iface_t)]
            if iface_t == "u2":
                fields.append(("drops", e + "u2"))
            fields += [("hi", e + "u4"), ("lo", e + "u4"), ("cap", e + "u4"),
                       ("orig", e + "u4")]
            r = gather(buf, offs[sel], np.dtype(fields))
            blen[sel] = r["blen"]
            iface_local[sel] = r["iface"]
            ts_raw[sel] = (r["hi"].astype(np.uint64) << np.uint64(32)) | r["lo"]
            cap[sel] = r["cap"]
            orig[sel] = r["orig"]
            data_off[sel] = offs[sel] + 28
        sel = np.flatnonzero(in_sec & (kinds == _SPB))
        if len(sel):
            r = gather(buf, offs[sel], np.dtype([("type", e + "u4"), ("blen", e + "u4"),
                                                 ("orig", e + "u4")]))
            blen[sel] = r["blen"]
            orig[sel] = r["orig"]
            snap = ifaces[sec.iface_base].snaplen if sec.iface_base < len(ifaces) else 0
            room = r["blen"].astype(np.int64) - 16
            c = np.minimum(orig[sel], room)
            cap[sel] = np.where(snap > 0, np.minimum(c, snap), c)
            data_off[sel] = offs[sel] + 12
    # A captured length that overruns its own block is a corrupt record: drop it.
    overrun = data_off + cap > offs + blen - 4
    if overrun.any():
        stats.corrupt_records += int(overrun.sum())
        keep = ~overrun
        offs, kinds, sec_of, iface_local, ts_raw = (
            offs[keep], kinds[keep], sec_of[keep], iface_local[keep], ts_raw[keep])
        cap, orig, data_off, little = cap[keep], orig[keep], data_off[keep], little[keep]
    n_if_sec = np.array([_section_ifaces(sections, ifaces, i) for i in range(len(sections))],
                        dtype=np.int64)
    bases = np.array([s.iface_base for s in sections], dtype=np.int64)
    known = iface_local < n_if_sec[sec_of] if len(sections) else np.zeros(len(offs), bool)
    iface_global = np.where(known, bases[sec_of] + iface_local, -1)
    link_type = np.full(len(offs), -1, dtype=np.int32)
    ts_ns = np.zeros(len(offs), dtype=np.int64)
    used = np.unique(iface_global)
    for gi in used[used >= 0]:
        sel = slice(None) if len(used) == 1 else iface_global == gi
        ifc = ifaces[int(gi)]
        link_type[sel] = ifc.link_type & 0x0FFFFFFF
        ts_ns[sel] = _scale_ts(ts_raw[sel], ifc)
    return Records(
        data_off=data_off,
        cap_len=cap,
        frame_len=orig,
        ts_ns=ts_ns,
        ts_valid=(kinds != _SPB) & (iface_global >= 0),
        link_type=link_type,
        iface=np.where(known, iface_local, -1).astype(np.int32),
        little=little,
    )


def _everything_or(index: np.ndarray, count: int) -> np.ndarray | slice:
    """The index, or a plain slice when it selects every row (no scatter needed then)."""
    return slice(None) if len(index) == count else index


def _section_ifaces(sections: list[_Section], ifaces: list[_Iface], i: int) -> int:
    end = sections[i + 1].iface_base if i + 1 < len(sections) else len(ifaces)
    return end - sections[i].iface_base


def _scale_ts(ts: np.ndarray, ifc: _Iface) -> np.ndarray:
    """Timestamps in units of 10^-v or 2^-v seconds to integer nanoseconds since the epoch."""
    v = ifc.tsresol & 0x7F
    off_ns = np.int64(ifc.tsoffset_s * _NS)
    if ifc.tsresol & 0x80:
        shift = np.uint64(v)
        whole = (ts >> shift).astype(np.int64)
        frac = ts & np.uint64((1 << v) - 1)
        if v <= 33:
            frac_ns = ((frac * np.uint64(_NS)) >> shift).astype(np.int64)
        else:
            frac_ns = (frac.astype(np.float64) * (_NS / 2.0**v)).astype(np.int64)
        return whole * _NS + frac_ns + off_ns
    t = ts.astype(np.int64)
    if v <= 9:
        return t * np.int64(10 ** (9 - v)) + off_ns
    return t // np.int64(10 ** (v - 9)) + off_ns
