"""Maelstrom's node protocol as the host agent speaks it (docs/maelstrom.md): node names, the
broadcast workload's neighbour maps, error codes, the workloads' client operations and the
datagram framing of node-to-node messages.

A message is one JSON object on one line, `{"src", "dest", "body": {"type", "msg_id",
"in_reply_to", ...}}`; nodes are `n0..n(N-1)` (or the names given), clients `c1, c2, ...`,
services `lin-kv`, `seq-kv`, `lww-kv`, `lin-tso` (nodes/maelstrom_services.py); an error is
`{"type": "error", "in_reply_to", "code", "text"}`. This module is pure (no I/O): the agent
(nodes/agent.py) drives it, the orchestrator and the checkers (analysis/maelstrom.py) read
its constants.
"""

from __future__ import annotations

import math
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

WORKLOADS = ("echo", "broadcast", "g-set", "g-counter", "pn-counter", "unique-ids",
             "total-order", "lin-kv", "kafka", "txn-list-append", "txn-rw-register")
# The transactional workloads and the micro-operation that writes in each.
TXN_WRITES = {"txn-list-append": "append", "txn-rw-register": "w"}
TOPOLOGIES = ("grid", "line", "total", "tree", "tree2", "tree3", "tree4")  # tree: tree2
LATENCY_DISTS = ("constant", "uniform", "exponential")
NEMESES = ("partition", "kill", "pause", "clock")

MAX_LINE = 1 << 20  # a program's output line longer than this is malformed (1 MiB)
CONTROL_CLIENT = "c0"  # the agent's own client: init and topology
CLIENT_TIMEOUT_NS = 5_000_000_000  # a request unanswered this long completes as `info`
KEY_COUNT = 3  # lin-kv and kafka: keys in use at once without --key-count
TXN_KEY_COUNT = 10  # the txn workloads: keys in use at once without --key-count (Elle's)
MAX_WRITES_PER_KEY = 16  # kafka, the txn workloads: writes to a key (from one host) before
# it is retired
MAX_TXN_LENGTH = 4  # the txn workloads: micro-operations per transaction, at most
# the txn workloads: the models --consistency-models names (analysis/elle.py checks them)
CONSISTENCY_MODELS = ("read-uncommitted", "read-committed", "snapshot-isolation",
                      "serializable", "strict-serializable")
REGISTER_VALUES = 5  # lin-kv: written values 0..4, as Jepsen's linearizable-register test
ASSIGN_P = 1 / 16  # kafka: the chance that a client re-assigns its keys instead of an op
FINAL_POLL_S = 10.0  # kafka: how long the final polls try to catch up (Maelstrom's clip)

# Maelstrom's error codes: name and whether the error is definite (the operation certainly
# did not happen: the client records `fail`) or not (`info`: it may have happened).
ERRORS: dict[int, tuple[str, bool]] = {
    0: ("timeout", False),
    1: ("node-not-found", True),
    10: ("not-supported", True),
    11: ("temporarily-unavailable", True),
    12: ("malformed-request", True),
    13: ("crash", False),
    14: ("abort", True),
    20: ("key-does-not-exist", True),
    21: ("key-already-exists", True),
    22: ("precondition-failed", True),
    30: ("txn-conflict", True),
}


def node_names(n: int) -> list[str]:
    """Maelstrom's names for `--node-count n`: n0 .. n(n-1)."""
    return [f"n{i}" for i in range(n)]


def neighbours(names: list[str], kind: str) -> dict[str, list[str]]:
    """The broadcast workload's `topology` message: each node's neighbours, as Maelstrom
    means its `--topology` values (grid: a square lattice, row-major; line: a path; total:
    everyone; treeK: a K-ary tree in name order, parent and children)."""
    n = len(names)
    out: dict[str, list[str]] = {a: [] for a in names}
    if kind == "total":
        return {a: [b for b in names if b != a] for a in names}
    if kind == "line":
        for i, a in enumerate(names):
            out[a] = [names[j] for j in (i - 1, i + 1) if 0 <= j < n]
        return out
    if kind == "grid":
        width = max(1, math.ceil(math.sqrt(n)))
        for i, a in enumerate(names):
            row, col = divmod(i, width)
            cand = [(row - 1, col), (row + 1, col), (row, col - 1), (row, col + 1)]
            for r, c in cand:
                j = r * width + c
                if r >= 0 and 0 <= c < width and j < n:
                    out[a].append(names[j])
        return out
    if kind.startswith("tree") and (kind[4:].isdigit() or kind == "tree"):
        k = int(kind[4:] or 2)
        for i, a in enumerate(names):
            if i > 0:
                parent = names[(i - 1) // k]
                out[a].append(parent)
                out[parent].append(a)
        return out
    raise ValueError(f"unknown topology {kind!r}; known: {', '.join(TOPOLOGIES)}")


@dataclass
class Op:
    """One client operation: `f` (Maelstrom's name), the request body, the value logged."""

    f: str
    body: dict[str, Any]
    value: Any = None


@dataclass
class Consumer:
    """A kafka client's own state: the next offset to poll per assigned key, and the offsets
    its last poll read, to commit next."""

    offsets: dict[str, int] = field(default_factory=dict)
    to_commit: dict[str, int] = field(default_factory=dict)
    final_started: bool = False


@dataclass
class Generator:
    """The client operations of one workload on one host. Values that must be unique in the
    run (broadcast messages, kafka messages) come from this host's index and incarnation, so
    no two hosts or incarnations ever pick the same one.

    lin-kv: read, write and cas on keys 0..key_count-1 (half reads; of the rest one write
    to two cas, values 0..4), as Jepsen's linearizable-register test. kafka: each client
    sends to or polls its keys, commits what a poll read right after it, and now and then
    re-assigns itself the keys in use (`list_committed_offsets`: it then polls from the
    committed offsets, or from where it was), as Maelstrom's kafka client; `key_count` keys
    are in use at once, a key retired after `max_writes_per_key` sends from this host.
    txn-list-append and txn-rw-register: transactions of 1..max_txn_length
    micro-operations, each a read or a write (`append`, `w`; even odds) of a key in use, as
    Elle's list-append and rw-register generators (`010`); a written value is unique in the
    run and increasing per key from this host; `key_count` keys in use, a key retired after
    `max_writes_per_key` writes from this host."""

    workload: str
    host_index: int
    hosts: int
    incarnation: int
    rng: random.Random
    counter: int = 0
    added: int = field(default=0)
    key_count: int = KEY_COUNT
    max_writes_per_key: int = MAX_WRITES_PER_KEY
    max_txn_length: int = MAX_TXN_LENGTH
    consumers: dict[str, Consumer] = field(default_factory=dict)
    active: list[int] = field(default_factory=list)  # kafka: the keys in use
    sends: dict[int, int] = field(default_factory=dict)  # kafka: sends per key from here
    max_offsets: dict[str, int] = field(default_factory=dict)  # kafka: highest offset seen
    final_done: set[str] = field(default_factory=set)

    def _unique(self) -> int:
        return ((self.incarnation << 20) + self.counter) * self.hosts + self.host_index

    def next(self, client: str = "") -> Op:
        self.counter += 1
        w = self.workload
        if w == "echo":
            text = f"Please echo {self.rng.randrange(128)}"
            return Op("echo", {"type": "echo", "echo": text}, text)
        if w in ("broadcast", "total-order"):
            if self.rng.random() < 0.5:
                return Op("read", {"type": "read"})
            value = self._unique()
            return Op("broadcast", {"type": "broadcast", "message": value}, value)
        if w == "g-set":
            if self.rng.random() < 0.5:
                return Op("read", {"type": "read"})
            value = self._unique()
            return Op("add", {"type": "add", "element": value}, value)
        if w in ("g-counter", "pn-counter"):
            if self.rng.random() < 0.5:
                return Op("read", {"type": "read"})
            delta = self.rng.randrange(1, 6)
            if w == "pn-counter" and self.rng.random() < 0.5:
                delta = -delta
            return Op("add", {"type": "add", "delta": delta}, delta)
        if w == "unique-ids":
            return Op("generate", {"type": "generate"})
        if w == "lin-kv":
            return self._register_op()
        if w == "kafka":
            return self._kafka_op(client)
        if w in TXN_WRITES:
            return self._txn_op(TXN_WRITES[w])
        raise ValueError(f"unknown workload {w!r}")

    def _register_op(self) -> Op:
        key = self.rng.randrange(self.key_count)
        x = self.rng.random()
        if x < 0.5:
            return Op("read", {"type": "read", "key": key}, [key, None])
        if x < 2 / 3:
            v = self.rng.randrange(REGISTER_VALUES)
            return Op("write", {"type": "write", "key": key, "value": v}, [key, v])
        a, b = self.rng.randrange(REGISTER_VALUES), self.rng.randrange(REGISTER_VALUES)
        return Op("cas", {"type": "cas", "key": key, "from": a, "to": b}, [key, [a, b]])

    def _keys(self) -> list[str]:
        """kafka: the keys in use (strings, as Maelstrom's), a retired key replaced by the
        next unused one."""
        if not self.active:
            self.active = list(range(self.key_count))
        for i, k in enumerate(self.active):
            if self.sends.get(k, 0) >= self.max_writes_per_key:
                self.active[i] = max(self.active) + 1
        return [str(k) for k in self.active]

    def _txn_op(self, write: str) -> Op:
        txn: list[list[Any]] = []
        for _ in range(self.rng.randint(1, self.max_txn_length)):
            self._keys()
            key = self.rng.choice(self.active)
            if self.rng.random() < 0.5:
                txn.append(["r", key, None])
            else:
                self.sends[key] = self.sends.get(key, 0) + 1
                self.counter += 1
                txn.append([write, key, self._unique()])
        return Op("txn", {"type": "txn", "txn": txn}, txn)

    def _kafka_op(self, client: str) -> Op:
        c = self.consumers.setdefault(client, Consumer())
        if c.to_commit:
            offsets, c.to_commit = c.to_commit, {}
            return Op("commit_offsets", {"type": "commit_offsets", "offsets": offsets}, offsets)
        keys = self._keys()
        if not c.offsets or self.rng.random() < ASSIGN_P:
            return Op("list_committed_offsets", {"type": "list_committed_offsets",
                                                 "keys": keys}, keys)
        if self.rng.random() < 0.5:
            key = self.rng.choice(self.active)
            self.sends[key] = self.sends.get(key, 0) + 1
            msg = self._unique()
            return Op("send", {"type": "send", "key": str(key), "msg": msg}, [str(key), msg])
        offsets = dict(c.offsets)
        return Op("poll", {"type": "poll", "offsets": offsets}, offsets)

    def observe(self, client: str, op: Op, kind: str, value: Any) -> None:
        """A completed operation of `client` (kafka: its consumer's offsets follow its polls
        and assigns; the host's highest offsets, for the final polls)."""
        if self.workload != "kafka" or kind != "ok":
            return
        c = self.consumers.setdefault(client, Consumer())
        if op.f == "send":
            k, (offset, _) = value
            self.max_offsets[k] = max(self.max_offsets.get(k, -1), offset)
        elif op.f == "poll":
            for k, pairs in value.items():
                if pairs:
                    top = max(int(p[0]) for p in pairs)
                    c.offsets[k] = max(c.offsets.get(k, 0), top + 1)
                    c.to_commit[k] = top
                    self.max_offsets[k] = max(self.max_offsets.get(k, -1), top)
        elif op.f == "list_committed_offsets":
            c.offsets = {k: c.offsets.get(k, value.get(k, 0)) for k in op.value}

    def final(self, client: str = "") -> Op | None:
        """The next read of `client` once the network has settled; None when it has read
        enough (most workloads: one read; kafka: polls from offset 0 of every key this
        host saw until its polls reach the highest offset this host saw of each, within
        FINAL_POLL_S, which the agent keeps)."""
        if self.workload == "kafka":
            c = self.consumers.setdefault(client, Consumer())
            if not c.final_started:
                c.final_started = True
                c.offsets = {k: 0 for k in self.max_offsets}
            if not c.offsets or all(c.offsets.get(k, 0) > top
                                    for k, top in self.max_offsets.items()):
                return None
            return Op("poll", {"type": "poll", "offsets": dict(c.offsets)}, dict(c.offsets))
        if client in self.final_done:
            return None
        self.final_done.add(client)
        if self.workload in ("broadcast", "total-order", "g-set", "g-counter", "pn-counter"):
            return Op("read", {"type": "read"})
        return None


def idempotent(op: Op) -> bool:
    """Whether an operation of unknown outcome certainly changed nothing: lin-kv's read
    (Maelstrom's client records any error of it, and its timeout, as `fail`)."""
    return op.f == "read" and "key" in op.body


def completion(op: Op, reply: dict[str, Any], workload: str = "") -> tuple[str, Any, str]:
    """(type, value, note) of an operation's completion from the node's reply body: `ok`
    with the value the workload reads from the reply, `fail` for a definite error, `info`
    for an indefinite one (but `fail` when `idempotent`) or a reply of the wrong type or
    shape (the checker counts those); `workload` tells a txn-rw-register transaction's
    reads from txn-list-append's."""
    rtype = reply.get("type")
    if rtype == "error":
        code = reply.get("code")
        name, definite = ERRORS.get(code, ("unknown", False)) if isinstance(code, int) \
            else ("unknown", False)
        return ("fail" if definite or idempotent(op) else "info"), op.value, \
            f"error {code} {name}: {str(reply.get('text', ''))[:200]}"
    if rtype != f"{op.body['type']}_ok":
        return "info", op.value, f"unexpected reply type {str(rtype)[:40]!r}"
    if op.f == "echo":
        return "ok", reply.get("echo"), ""
    if op.f == "read" and "key" in op.body:  # lin-kv
        return "ok", [op.body["key"], reply.get("value")], ""
    if op.f == "read":
        key = "value" if "value" in reply else "messages"
        return "ok", reply.get(key), ""
    if op.f == "generate":
        return "ok", reply.get("id"), ""
    if op.f in KAFKA_REPLIES:
        field_, valid = KAFKA_REPLIES[op.f]
        got = reply.get(field_)
        if not valid(got):
            return "info", op.value, f"malformed {rtype}: {field_} {str(got)[:100]}"
        if op.f == "send":
            return "ok", [op.body["key"], [got, op.body["msg"]]], ""
        return "ok", got, ""
    if op.f == "txn":
        got = reply.get("txn")
        if not _txn_reply(op.value, got, workload == "txn-rw-register"):
            return "info", op.value, f"malformed txn_ok: txn {str(got)[:100]}"
        return "ok", got, ""
    return "ok", op.value, ""


def _txn_reply(asked: list[list[Any]], got: Any, registers: bool) -> bool:
    """Whether a `txn_ok`'s `txn` completes the one asked: the same micro-operations in the
    same order, each write as sent, each read with a value: a list (null: a key never
    appended), or with `registers` any value (null: a key never written; Maelstrom's
    `Any`)."""
    return isinstance(got, list) and len(got) == len(asked) and all(
        isinstance(m, list) and len(m) == 3 and m[0] == a[0] and m[1] == a[1]
        and (registers or isinstance(m[2], list) or m[2] is None if a[0] == "r"
             else m[2] == a[2])
        for m, a in zip(got, asked, strict=True))


def _offset(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _offset_map(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and _offset(o) for k, o in v.items())


def _msgs(v: Any) -> bool:
    return isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(pairs, list) and all(
            isinstance(p, list) and len(p) == 2 and _offset(p[0]) for p in pairs)
        for k, pairs in v.items())


# kafka: the reply field each operation reads, and what makes it well-formed.
KAFKA_REPLIES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "send": ("offset", _offset), "poll": ("msgs", _msgs),
    "list_committed_offsets": ("offsets", _offset_map)}


# -- node-to-node datagrams -------------------------------------------------------------------
# A message from the program to another node travels as one or more datagrams: a 16-byte
# header (magic "TM", version, 0, the sender's message number, fragment index and count, all
# network byte order), then a slice of the message's line. The receiver reassembles; a
# message is never dropped for its size.
FRAME = struct.Struct("!2sBBQHH")
MAGIC = b"TM"
FRAME_VERSION = 1
CHUNK = 1200  # payload bytes per datagram: one Ethernet frame on every backend's network


def fragments(number: int, data: bytes, chunk: int = CHUNK) -> list[bytes]:
    count = max(1, -(-len(data) // chunk))
    if count > 0xFFFF:
        raise ValueError(f"message of {len(data)} bytes needs more than 65535 fragments")
    return [FRAME.pack(MAGIC, FRAME_VERSION, 0, number, i, count) + data[i * chunk:
                                                                          (i + 1) * chunk]
            for i in range(count)]


class Reassembly:
    """Fragments in, whole messages out; incomplete ones expire (a lost fragment loses the
    message, as a lost datagram would)."""

    def __init__(self, max_pending: int = 4096, expire_ns: int = 30_000_000_000):
        self.pending: dict[tuple[str, int], tuple[int, dict[int, bytes]]] = {}
        self.max_pending = max_pending
        self.expire_ns = expire_ns
        self.expired = 0

    def add(self, sender: str, datagram: bytes, now_ns: int) -> bytes | None:
        """The whole message once its last fragment arrived; ValueError for a bad frame."""
        if len(datagram) < FRAME.size:
            raise ValueError("short datagram")
        magic, version, _, number, index, count = FRAME.unpack_from(datagram)
        if magic != MAGIC or version != FRAME_VERSION or count == 0 or index >= count:
            raise ValueError("bad frame header")
        body = datagram[FRAME.size:]
        if count == 1:
            return body
        key = (sender, number)
        first, parts = self.pending.get(key, (now_ns, {}))
        parts[index] = body
        if len(parts) < count:
            self.pending[key] = (first, parts)
            if len(self.pending) > self.max_pending:
                self._expire(now_ns, force=True)
            return None
        self.pending.pop(key, None)
        return b"".join(parts[i] for i in range(count))

    def _expire(self, now_ns: int, force: bool = False) -> None:
        old = [k for k, (first, _) in self.pending.items() if now_ns - first > self.expire_ns]
        if force and not old:
            old = sorted(self.pending, key=lambda k: self.pending[k][0])[:len(self.pending) // 2]
        for k in old:
            del self.pending[k]
        self.expired += len(old)
