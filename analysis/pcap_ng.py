"""pcapng files: https://www.ietf.org/archive/id/draft-ietf-opsawg-pcapng-02.html

Section Header Blocks (either byte order, several per file), Interface Description Blocks
with if_tsresol and if_tsoffset, Enhanced, Simple and obsolete Packet Blocks; other block
types are skipped.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass

import numpy as np

from analysis.pcap_formats import (
    NS,
    Buffer,
    CaptureStats,
    PcapFormatError,
    Records,
    gather,
    gather_u32,
)

PCAPNG_SHB = 0x0A0D0D0A
_PCAPNG_BOM = 0x1A2B3C4D
_IDB, _OPB, _SPB, _EPB = 1, 2, 3, 6
# Block types a resync may land on (those a writer commonly emits).
_KNOWN_BLOCKS = frozenset({_IDB, _OPB, _SPB, 4, 5, _EPB, 7, 9, 10, 0xBAD, 0x40000BAD})


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


def read_pcapng(buf: np.ndarray, raw: Buffer, stats: CaptureStats) -> Records:
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
    off_ns = np.int64(ifc.tsoffset_s * NS)
    if ifc.tsresol & 0x80:
        shift = np.uint64(v)
        whole = (ts >> shift).astype(np.int64)
        frac = ts & np.uint64((1 << v) - 1)
        if v <= 33:
            frac_ns = ((frac * np.uint64(NS)) >> shift).astype(np.int64)
        else:
            frac_ns = (frac.astype(np.float64) * (NS / 2.0**v)).astype(np.int64)
        return whole * NS + frac_ns + off_ns
    t = ts.astype(np.int64)
    if v <= 9:
        return t * np.int64(10 ** (9 - v)) + off_ns
    return t // np.int64(10 ** (v - 9)) + off_ns
