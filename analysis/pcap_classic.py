"""Classic pcap files: https://www.ietf.org/archive/id/draft-ietf-opsawg-pcap-04.html

Magic a1b2c3d4 (microseconds) or a1b23c4d (nanoseconds), in either byte order.
"""

from __future__ import annotations

import struct
from array import array

import numpy as np

from analysis.pcap_formats import (
    MAX_CAPLEN,
    MAX_FRAME,
    NS,
    Buffer,
    CaptureStats,
    Records,
    empty_records,
    gather,
)

PCAP_MAGIC_US = 0xA1B2C3D4
PCAP_MAGIC_NS = 0xA1B23C4D
# A resynchronised record must have a timestamp within this much of the last good one.
_RESYNC_WINDOW_S = 366 * 86400


def _classic_plausible(raw: Buffer, p: int, hdr: struct.Struct, n: int,
                       frac_max: int, limit: int, ref_sec: int | None) -> int:
    """The next record's offset if a believable record header starts at p, else -1."""
    if p + 16 > n:
        return -1
    sec, frac, incl, orig = hdr.unpack_from(raw, p)
    if frac >= frac_max or incl > limit or incl > orig or orig > MAX_FRAME:
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


def read_classic(buf: np.ndarray, raw: Buffer, little: bool, nanos: bool,
                  stats: CaptureStats) -> Records:
    if len(raw) < 24:
        stats.truncated_records += 1
        return empty_records()
    endian = "<" if little else ">"
    snaplen, linktype = struct.unpack_from(endian + "II", raw, 16)
    # The upper bits of the link-type field carry FCS information (draft-ietf-opsawg-pcap §4).
    linktype &= 0x0FFFFFFF
    limit = min(max(snaplen, MAX_CAPLEN), MAX_FRAME)
    frac_max = NS if nanos else 1_000_000
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
        ts_ns=sec * NS + (frac if nanos else frac * 1000),
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
           | (recs["orig"] > MAX_FRAME) | (recs["incl"] > limit))
    hits = np.flatnonzero(bad)
    if not len(hits):
        return -1, recs
    return start + int(hits[0]), recs[: hits[0]]
