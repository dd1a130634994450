"""What the container walkers (`pcap_classic`, `pcap_ng`) produce, and how they read.

The walk is the only part of reading a capture that is inherently serial (each record's
length says where the next one starts), so it is a tight loop that only collects offsets;
every per-record field (timestamps, lengths, interface) is then gathered for all records
at once with numpy (`gather`). Damage never stops the walk: a record header that cannot be
right is counted, and the walk resynchronises on the next plausible record, so every
intact record is kept (`CaptureStats`).
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field, fields

import numpy as np

# What the walk reads: the mapped file, or bytes in tests.
Buffer = bytes | memoryview | mmap.mmap

# Largest capture length we believe in: Linux' maximum snaplen, with room for GRO'd frames.
MAX_CAPLEN = 1 << 18
MAX_FRAME = 1 << 24
NS = 1_000_000_000


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
    agent_frames: int = 0  # UDP datagrams of the Maelstrom host agent (nodes/maelstrom.py)

    def merge(self, other: CaptureStats) -> None:
        for name in ("packets", "truncated_records", "corrupt_records", "skipped_bytes",
                     "non_ip", "snapped", "wire_headers", "agent_frames"):
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


def empty_records() -> Records:
    i64 = np.zeros(0, dtype=np.int64)
    i32 = np.zeros(0, dtype=np.int32)
    b = np.zeros(0, dtype=bool)
    return Records(i64, i64, i64, i64, b, i32, i32, b)
