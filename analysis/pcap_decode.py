"""Vectorised dissection of packet records: link layer, IPv4/IPv6, UDP/TCP ports, wire header.

Every layer works on all packets at once: group the packets whose next header sits at the
same kind of place, gather that header for the whole group as rows of bytes, and view the
rows through a structured big-endian dtype, so each field is a numpy column. Every gather
is guarded by the capture length, so a snapped packet yields nulls, never garbage.
"""

from __future__ import annotations

import json
import re
import socket
import struct

import numpy as np
import pyarrow as pa

from analysis.pcap_formats import CaptureStats, Records, gather, take
from nodes import maelstrom, wire

# Link types (https://www.tcpdump.org/linktypes.html).
LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LOOP = 108
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276
_DLT_RAW_ALIASES = (12, 14)  # DLT_RAW as some BSDs number it
SUPPORTED_LINK_TYPES = frozenset({LINKTYPE_NULL, LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LOOP,
                                  LINKTYPE_LINUX_SLL, LINKTYPE_IPV4, LINKTYPE_IPV6,
                                  LINKTYPE_LINUX_SLL2, *_DLT_RAW_ALIASES})

ETH_IPV4, ETH_IPV6 = 0x0800, 0x86DD
_VLAN_TPIDS = (0x8100, 0x88A8, 0x9100)
IPPROTO_TCP, IPPROTO_UDP = 6, 17
_IPV6_EXT = (0, 43, 60)  # hop-by-hop, routing, destination options: (len + 1) * 8 bytes
_IPV6_FRAG = 44
_BSD_AF_INET6 = (10, 24, 28, 30)  # AF_INET6 on Linux, NetBSD/OpenBSD, FreeBSD, macOS

_U16 = np.dtype(">u2")
_U8 = np.dtype("u1")
_IPV4_HDR = np.dtype([("vihl", "u1"), ("tos", "u1"), ("len", ">u2"), ("id", ">u2"),
                      ("frag", ">u2"), ("ttl", "u1"), ("p", "u1"), ("sum", ">u2"),
                      ("src", ">u4"), ("dst", ">u4")])
_IPV6_HDR = np.dtype([("vtcfl", ">u4"), ("plen", ">u2"), ("nh", "u1"), ("hlim", "u1"),
                      ("src_hi", ">u8"), ("src_lo", ">u8"), ("dst_hi", ">u8"),
                      ("dst_lo", ">u8")])
_PORTS = np.dtype([("sport", ">u2"), ("dport", ">u2")])
_EXT_HDR = np.dtype([("nh", "u1"), ("len", "u1"), ("frag", ">u2")])

_STRUCT_FIELD = re.compile(r"(\d*)([a-zA-Z])")
_STRUCT_TO_NUMPY = {"s": "S", "B": "u1", "H": ">u2", "I": ">u4", "i": ">i4", "Q": ">u8"}


def _wire_dtype() -> np.dtype:
    """nodes/wire.py's header struct as a numpy record, so a layout change follows along."""
    codes = [(int(num) if num else 1, code)
             for num, code in _STRUCT_FIELD.findall(wire.HEADER.format.lstrip("!>"))]
    names = ("magic", "version", *wire.FIELDS)
    specs = [(name, f"S{num}" if code == "s" else _STRUCT_TO_NUMPY[code])
             for name, (num, code) in zip(names, codes, strict=True)]
    dt = np.dtype(specs)
    assert dt.itemsize == wire.HEADER_SIZE
    return dt


WIRE_DTYPE = _wire_dtype()
# What follows a bare IP header in our traffic: UDP header, then the wire header.
_L4_WIRE = np.dtype([("sport", ">u2"), ("dport", ">u2"), ("ulen", ">u2"), ("usum", ">u2"),
                     ("wire", WIRE_DTYPE)])
# The same record with the magic as one integer, for a fast comparison.
_WIRE_MAGIC_AS_INT = np.dtype({
    "names": ["magic"], "formats": [">u2"], "offsets": [0], "itemsize": WIRE_DTYPE.itemsize})
_MAGIC_INT = int.from_bytes(wire.MAGIC, "big")
# Column type per wire field: widened to a signed type so Spark reads it without surprises.
_WIDEN: dict[str, type[np.generic]] = {"u1": np.int16, "u2": np.int32, "u4": np.int64,
                                       "i4": np.int32, "u8": np.int64}
WIRE_COLUMNS = tuple(f"tb_{name}" for name in ("version", *wire.FIELDS))
# The host agent's datagrams (nodes/maelstrom.py FRAME: a Maelstrom program's node-to-node
# message, or a fragment of it): message number, fragment index and count, and the type of
# the message's body where the capture holds the whole message.
AGENT_COLUMNS = ("tm_number", "tm_fragment", "tm_count", "tm_type")
_AGENT_L4 = np.dtype([("sport", ">u2"), ("dport", ">u2"), ("ulen", ">u2"), ("usum", ">u2"),
                      ("magic", "S2"), ("version", "u1"), ("zero", "u1"), ("number", ">u8"),
                      ("index", ">u2"), ("count", ">u2")])
assert _AGENT_L4.itemsize == 8 + maelstrom.FRAME.size


def arrow(values: np.ndarray, valid: np.ndarray | None = None,
          dtype: type[np.generic] | None = None) -> pa.Array:
    """A numpy column as an Arrow array, null where not `valid`.

    Built from buffers: `pa.array` on numpy input imports pandas, a fifth of a second that
    would otherwise be charged to every process's first capture.
    """
    data = np.ascontiguousarray(values, dtype=dtype or values.dtype)
    count = len(data)
    bitmap = None
    nulls = 0
    if valid is not None and not valid.all():
        nulls = count - int(np.count_nonzero(valid))
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.from_numpy_dtype(data.dtype), count,
                                 [bitmap, pa.py_buffer(data)], null_count=nulls)


def strings(values: list[str]) -> pa.Array:
    """A list of str as an Arrow string array (from buffers, for the reason in `arrow`)."""
    encoded = [v.encode() for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    offsets[1:] = np.cumsum([len(e) for e in encoded], dtype=np.int64)
    return pa.Array.from_buffers(pa.string(), len(encoded),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))])


def decode(buf: np.ndarray, rec: Records, stats: CaptureStats) -> dict[str, pa.Array]:
    """All packets of `rec` (bytes in `buf`) as Arrow columns, in record order."""
    count = len(rec.data_off)
    end = rec.data_off + rec.cap_len
    l3, ethertype = _link_layer(buf, rec, end, stats)

    is4 = (ethertype == ETH_IPV4) & (l3 + 20 <= end)
    is6 = (ethertype == ETH_IPV6) & (l3 + 40 <= end)
    ip_version = np.zeros(count, dtype=np.int8)
    proto = np.zeros(count, dtype=np.int16)
    ip_len = np.zeros(count, dtype=np.int32)
    l4 = np.full(count, -1, dtype=np.int64)  # -1: no transport header to read
    src_key = np.zeros(count, dtype=np.int64)  # index into the address dictionary
    dst_key = np.zeros(count, dtype=np.int64)
    names: list[str] = []

    # Rows whose transport header (and a wire header after it) came with the IP header.
    pre_rows: list[np.ndarray] = []
    pre_l4: list[np.ndarray] = []
    i4 = np.flatnonzero(is4)
    if len(i4):
        h, long = _gather_ip(buf, i4, l3, end, _IPV4_HDR)
        ok = (h["vihl"] >> 4 == 4) & (h["vihl"] & 15 >= 5)
        if not ok.all():
            i4, h, long = i4[ok], take(h, ok), long[ok]
        ip_version[i4] = 4
        proto[i4] = h["p"]
        ip_len[i4] = h["len"]
        first = (h["frag"] & 0x1FFF) == 0  # only a first fragment holds the L4 header
        l4[i4[first]] = l3[i4[first]] + (h["vihl"][first] & 15).astype(np.int64) * 4
        src_key[i4], dst_key[i4] = _intern4(h["src"], h["dst"], names)
        fast = long & first & ((h["vihl"] & 15) == 5)
        pre_rows.append(i4[fast])
        pre_l4.append(take(h["l4"], fast))
    i6 = np.flatnonzero(is6)
    if len(i6):
        h, long = _gather_ip(buf, i6, l3, end, _IPV6_HDR)
        ok = (h["vtcfl"] >> 28) == 6
        if not ok.all():
            i6, h, long = i6[ok], take(h, ok), long[ok]
        ip_version[i6] = 6
        ip_len[i6] = h["plen"].astype(np.int32) + 40
        nh, pos = _ipv6_upper(buf, h["nh"].astype(np.int16), l3[i6] + 40, end[i6])
        proto[i6] = np.where(nh >= 0, nh, h["nh"])
        l4[i6] = pos
        src_key[i6], dst_key[i6] = _intern6(h, names)
        fast = long & np.isin(h["nh"], (IPPROTO_UDP, IPPROTO_TCP))
        pre_rows.append(i6[fast])
        pre_l4.append(take(h["l4"], fast))
    pr = np.concatenate(pre_rows) if pre_rows else np.zeros(0, dtype=np.int64)
    pl = _concat(pre_l4, _L4_WIRE)
    prefetched = np.zeros(count, dtype=bool)
    prefetched[pr] = True
    is_ip = ip_version > 0
    stats.non_ip += int(np.count_nonzero((l3 >= 0) & ~is_ip))

    has_ports = (l4 >= 0) & ((proto == IPPROTO_UDP) | (proto == IPPROTO_TCP)) & (l4 + 4 <= end)
    stats.snapped += int(np.count_nonzero(is_ip & (l4 >= 0) & (l4 + 4 > end)))
    sport = np.zeros(count, dtype=np.int32)
    dport = np.zeros(count, dtype=np.int32)
    sport[pr] = pl["sport"]
    dport[pr] = pl["dport"]
    ip_ = np.flatnonzero(has_ports & ~prefetched)
    if len(ip_):
        p = gather(buf, l4[ip_], _PORTS)
        sport[ip_] = p["sport"]
        dport[ip_] = p["dport"]

    cols: dict[str, pa.Array] = {}
    cols["ts_ns"] = arrow(rec.ts_ns, rec.ts_valid, np.int64)
    cols["src"] = _addresses(src_key, is_ip, names)
    cols["dst"] = _addresses(dst_key, is_ip, names)
    cols["proto"] = arrow(proto, is_ip, np.int16)
    cols["sport"] = arrow(sport, has_ports, np.int32)
    cols["dport"] = arrow(dport, has_ports, np.int32)
    cols["ip_len"] = arrow(ip_len, is_ip, np.int32)
    cols["frame_len"] = arrow(rec.frame_len, dtype=np.int32)
    cols["cap_len"] = arrow(rec.cap_len, dtype=np.int32)
    cols["ip_version"] = arrow(ip_version, is_ip, np.int8)
    cols["link_type"] = arrow(rec.link_type, dtype=np.int32)
    cols["iface"] = arrow(rec.iface, dtype=np.int32)
    cols.update(_wire_columns(buf, l4, proto, end, stats, pr, pl["wire"]))
    cols.update(_agent_columns(buf, l4, proto, end, stats))
    return cols


def _gather_ip(buf: np.ndarray, rows: np.ndarray, l3: np.ndarray, end: np.ndarray,
               hdr: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """IP headers of `rows`, each with the `_L4_WIRE` bytes after a bare header in field
    "l4" (read in the same pass: one trip to the packet's memory instead of three), and
    which rows are long enough for that field to be real."""
    full = np.dtype([*((name, hdr[name]) for name in hdr.names or ()), ("l4", _L4_WIRE)])
    long = l3[rows] + full.itemsize <= end[rows]
    if long.all():
        return gather(buf, l3[rows], full), long
    out = np.zeros(len(rows), dtype=full)
    opaque = np.dtype((np.void, full.itemsize))
    out.view(opaque)[long] = gather(buf, l3[rows[long]], full).view(opaque)
    short = gather(buf, l3[rows[~long]], hdr)
    for name in hdr.names or ():
        out[name][~long] = short[name]
    return out, long


def _concat(parts: list[np.ndarray], dtype: np.dtype) -> np.ndarray:
    opaque = np.dtype((np.void, dtype.itemsize))
    if not parts:
        return np.zeros(0, dtype=dtype)
    return np.concatenate([p.view(opaque) for p in parts]).view(dtype)


def _link_layer(buf: np.ndarray, rec: Records, end: np.ndarray,
                stats: CaptureStats) -> tuple[np.ndarray, np.ndarray]:
    """Per packet: offset of the network header (-1: none) and its EtherType."""
    count = len(rec.data_off)
    d = rec.data_off
    l3 = np.full(count, -1, dtype=np.int64)
    et = np.zeros(count, dtype=np.int64)
    lts = np.unique(rec.link_type)
    for lt in (int(x) for x in lts):
        sel = np.flatnonzero(rec.link_type == lt) if len(lts) > 1 else np.arange(count)
        if lt not in SUPPORTED_LINK_TYPES:
            stats.unknown_link_types[lt] = stats.unknown_link_types.get(lt, 0) + len(sel)
            continue
        if lt == LINKTYPE_ETHERNET:
            _set(l3, et, sel, d, end, hdr_len=14, type_at=12, buf=buf)
            for _ in range(2):  # 802.1Q / QinQ tags sit between the MACs and the EtherType
                tagged = sel[np.isin(et[sel], _VLAN_TPIDS) & (l3[sel] + 4 <= end[sel])]
                if len(tagged):
                    et[tagged] = gather(buf, l3[tagged] + 2, _U16)
                    l3[tagged] += 4
        elif lt == LINKTYPE_LINUX_SLL:
            _set(l3, et, sel, d, end, hdr_len=16, type_at=14, buf=buf)
        elif lt == LINKTYPE_LINUX_SLL2:
            _set(l3, et, sel, d, end, hdr_len=20, type_at=0, buf=buf)
        elif lt in (LINKTYPE_IPV4, LINKTYPE_IPV6):
            ok = sel[end[sel] > d[sel]]
            l3[ok] = d[ok]
            et[ok] = ETH_IPV4 if lt == LINKTYPE_IPV4 else ETH_IPV6
        elif lt in (LINKTYPE_RAW, *_DLT_RAW_ALIASES):
            ok = sel[end[sel] > d[sel]]
            version = buf[d[ok]] >> 4
            l3[ok] = d[ok]
            et[ok] = np.where(version == 4, ETH_IPV4, np.where(version == 6, ETH_IPV6, 0))
        else:  # NULL (writer's byte order) and LOOP (network order): 4-byte address family
            ok = sel[d[sel] + 4 <= end[sel]]
            fam_be = gather(buf, d[ok], np.dtype(">u4")).astype(np.int64)
            fam_le = gather(buf, d[ok], np.dtype("<u4")).astype(np.int64)
            fam = fam_be if lt == LINKTYPE_LOOP else np.where(rec.little[ok], fam_le, fam_be)
            l3[ok] = d[ok] + 4
            et[ok] = np.where(fam == socket.AF_INET, ETH_IPV4,
                              np.where(np.isin(fam, _BSD_AF_INET6), ETH_IPV6, 0))
    return l3, et


def _set(l3: np.ndarray, et: np.ndarray, sel: np.ndarray, d: np.ndarray, end: np.ndarray,
         hdr_len: int, type_at: int, buf: np.ndarray) -> None:
    ok = sel[d[sel] + hdr_len <= end[sel]]
    l3[ok] = d[ok] + hdr_len
    et[ok] = gather(buf, d[ok] + type_at, _U16)


def _ipv6_upper(buf: np.ndarray, nh: np.ndarray, pos: np.ndarray,
                end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Skip IPv6 extension headers: (upper-layer protocol or -1, its offset or -1)."""
    nh, pos = nh.copy(), pos.copy()
    for _ in range(4):
        ext = (np.isin(nh, _IPV6_EXT) | (nh == _IPV6_FRAG)) & (pos >= 0) & (pos + 4 <= end)
        k = np.flatnonzero(ext)
        if not len(k):
            break
        h = gather(buf, pos[k], _EXT_HDR)
        is_frag = nh[k] == _IPV6_FRAG
        later_fragment = is_frag & ((h["frag"] >> 3) != 0)
        pos[k] += np.where(is_frag, 8, (h["len"].astype(np.int64) + 1) * 8)
        nh[k] = h["nh"]
        pos[k[later_fragment]] = -1
    unresolved = np.isin(nh, _IPV6_EXT) | (nh == _IPV6_FRAG)
    pos[unresolved] = -1
    return np.where(unresolved, -1, nh), pos


def _intern4(src: np.ndarray, dst: np.ndarray, names: list[str]) -> tuple[np.ndarray, ...]:
    """Dictionary-encode IPv4 addresses: few distinct ones, so format each only once."""
    uniq, inv = np.unique(np.concatenate([src, dst]), return_inverse=True)
    base = len(names)
    names.extend(socket.inet_ntoa(struct.pack("!I", int(a))) for a in uniq)
    keys = inv.astype(np.int64) + base
    return keys[: len(src)], keys[len(src):]


def _intern6(h: np.ndarray, names: list[str]) -> tuple[np.ndarray, ...]:
    both = np.concatenate([
        np.stack([h["src_hi"], h["src_lo"]], axis=1).astype(np.uint64),
        np.stack([h["dst_hi"], h["dst_lo"]], axis=1).astype(np.uint64),
    ])
    uniq, inv = np.unique(both, axis=0, return_inverse=True)
    base = len(names)
    names.extend(socket.inet_ntop(socket.AF_INET6, struct.pack("!QQ", int(a), int(b)))
                 for a, b in uniq)
    keys = inv.reshape(-1).astype(np.int64) + base
    n = len(h)
    return keys[:n], keys[n:]


def _addresses(keys: np.ndarray, valid: np.ndarray, names: list[str]) -> pa.Array:
    # Dictionary-encoded: a capture has few distinct addresses, and this is what Parquet
    # stores anyway; readers see plain strings.
    indices = arrow(keys, valid, np.int32)
    return pa.DictionaryArray.from_arrays(indices, strings(names))


def _wire_columns(buf: np.ndarray, l4: np.ndarray, proto: np.ndarray, end: np.ndarray,
                  stats: CaptureStats, pre_rows: np.ndarray,
                  pre_wire: np.ndarray) -> dict[str, pa.Array]:
    """The testbed header where a UDP payload starts with it (magic and version match).
    `pre_wire` holds the candidate headers of `pre_rows`, already read with the IP header."""
    count = len(l4)
    room = (l4 >= 0) & (proto == IPPROTO_UDP) & (l4 + 8 + wire.HEADER_SIZE <= end)
    mine = room[pre_rows]
    rows, h = pre_rows[mine], take(pre_wire, mine)
    fetched = np.zeros(count, dtype=bool)
    fetched[pre_rows] = True
    rest = np.flatnonzero(room & ~fetched)
    if len(rest):
        rows = np.concatenate([rows, rest])
        h = _concat([h, gather(buf, l4[rest] + 8, WIRE_DTYPE)], WIRE_DTYPE)
    magic = h.view(_WIRE_MAGIC_AS_INT)["magic"]
    ok = (magic == _MAGIC_INT) & (h["version"] == wire.WIRE_VERSION)
    if not ok.all():
        rows, h = rows[ok], take(h, ok)
    everyone = len(rows) == count and bool((rows[1:] > rows[:-1]).all())
    stats.wire_headers += len(rows)
    present: np.ndarray | None = None
    if not everyone:
        present = np.zeros(count, dtype=bool)
        present[rows] = True
    out: dict[str, pa.Array] = {}
    for name, col in zip(("version", *wire.FIELDS), WIRE_COLUMNS, strict=True):
        np_typ = _WIDEN[WIRE_DTYPE[name].str.lstrip("<>|=")]
        field = h[name].astype(np_typ)
        if everyone:
            values = field
        else:
            values = np.zeros(count, dtype=field.dtype)
            values[rows] = field
        out[col] = arrow(values, present, np_typ)
    return out


def agent_message_type(payload: bytes, whole: bool) -> str | None:
    """The `type` of a captured agent message's body: only from a whole message (one
    fragment, not cut by the capture's snap length) that parses as Maelstrom's JSON."""
    if not whole:
        return None
    try:
        body = json.loads(payload).get("body")
        mtype = body.get("type") if isinstance(body, dict) else None
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None
    return mtype[:64] if isinstance(mtype, str) else None


def _agent_columns(buf: np.ndarray, l4: np.ndarray, proto: np.ndarray, end: np.ndarray,
                   stats: CaptureStats) -> dict[str, pa.Array]:
    """The agent's frame header where a UDP payload starts with it (magic and version)."""
    count = len(l4)
    rows = np.flatnonzero((l4 >= 0) & (proto == IPPROTO_UDP) & (l4 + _AGENT_L4.itemsize <= end))
    number = np.zeros(count, dtype=np.int64)
    index = np.zeros(count, dtype=np.int32)
    total = np.zeros(count, dtype=np.int32)
    present = np.zeros(count, dtype=bool)
    types: list[str | None] = [None] * count
    if len(rows):
        h = gather(buf, l4[rows], _AGENT_L4)
        ok = (h["magic"] == maelstrom.MAGIC) & (h["version"] == maelstrom.FRAME_VERSION)
        rows, h = rows[ok], take(h, ok)
        present[rows] = True
        number[rows] = h["number"].astype(np.int64)
        index[rows] = h["index"]
        total[rows] = h["count"]
        stats.agent_frames += len(rows)
        for r, ulen, k, n in zip(rows.tolist(), h["ulen"].tolist(), h["index"].tolist(),
                                 h["count"].tolist(), strict=True):
            if k == 0:
                start = int(l4[r]) + _AGENT_L4.itemsize
                # Up to the UDP length: an Ethernet frame's padding is no payload.
                payload = buf[start:min(int(end[r]), int(l4[r]) + ulen)].tobytes()
                types[r] = agent_message_type(
                    payload, n == 1 and len(payload) == ulen - _AGENT_L4.itemsize)
    valid = present if not present.all() else None
    return {"tm_number": arrow(number, valid, np.int64),
            "tm_fragment": arrow(index, valid, np.int32),
            "tm_count": arrow(total, valid, np.int32),
            "tm_type": pa.array(types, type=pa.string())}
