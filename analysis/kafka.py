"""The checker of Maelstrom's kafka workload (docs/maelstrom.md, kafka): the anomalies of
Jepsen's kafka checker (`009`) that single sends and polls can show, under its names.

From every acknowledged send (`[key, [offset, msg]]`) and every successful poll (`{key:
[[offset, msg], ...]}`) it builds each key's log: offset -> messages; the offsets that hold
a message, in order, give each message its index (the version order). Then:

- `inconsistent-offsets`: an offset holding two messages.
- `duplicate`: a message at two offsets.
- `lost-write`: a message acknowledged at an index no higher than the highest index some
  poll read, that no poll read.
- `unseen`: a message acknowledged that no poll read (the final polls read every key from
  offset 0, so this is a lost message too).
- `G1a`: a message read whose send failed (a definite error: it never happened).
- `int-poll-skip` / `int-nonmonotonic-poll`: within one poll of a key, two successive
  messages whose indexes differ by more than one / by less than one.
- `poll-skip` / `nonmonotonic-poll`: a client's poll of a key that starts more than one
  index past / not past where its previous poll of the key ended; a client's first poll of
  a key since it assigned itself the key starts past a message known to be at or after
  the offset it asked for (the committed offset, or where it was), also `poll-skip`. The
  final polls start again from offset 0, as after Jepsen's seek to the beginning.
- `nonmonotonic-send`: a client's send to a key at an index not past its previous send's.

Every type found makes the result invalid, as in Maelstrom's kafka test (Jepsen allows only
`int-send-skip` and the G0 family there; a single send never shows them). Jepsen's cycle
search over transactions (Elle) is left out: without transactions it finds nothing beyond
these.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Protocol

SHOWN = {"duplicate": 32, "inconsistent-offsets": 32}  # errs shown per type; others 8


class KafkaOp(Protocol):
    node: str
    inc: int
    client: str
    f: str
    value: Any
    invoke_t: int
    type: str
    result: Any
    error: str
    final: bool


def _h(v: Any) -> Any:
    return json.dumps(v, sort_keys=True) if isinstance(v, list | dict) else v


def _order(v: Any) -> tuple[bool, float, str]:
    """Messages in order: numbers by value, then the rest by their text."""
    num = isinstance(v, int | float) and not isinstance(v, bool)
    return (not num, v if num else 0, str(v))


def _show(op: KafkaOp) -> dict[str, Any]:
    return {"process": f"{op.node}/{op.client}", "type": op.type, "f": op.f,
            "value": op.result if op.type == "ok" else op.value, "time": op.invoke_t}


def _pairs(op: KafkaOp) -> dict[str, list[tuple[int, Any]]]:
    """A successful poll's messages per key, as (offset, message)."""
    if op.f != "poll" or op.type != "ok" or not isinstance(op.result, dict):
        return {}
    return {str(k): [(int(p[0]), p[1]) for p in ps] for k, ps in op.result.items()}


def _send(op: KafkaOp) -> tuple[str, int | None, Any]:
    """A send's key, offset (None unless acknowledged) and message."""
    if op.type == "ok":
        k, (offset, msg) = op.result
        return str(k), int(offset), msg
    k, msg = op.value
    return str(k), None, msg


class Orders:
    """Each key's log and version order."""

    def __init__(self, ops: Sequence[KafkaOp]) -> None:
        self.log: dict[str, dict[int, set[Any]]] = defaultdict(lambda: defaultdict(set))
        for op in ops:
            if op.f == "send" and op.type == "ok":
                k, offset, msg = _send(op)
                assert offset is not None
                self.log[k][offset].add(_h(msg))
            for k, pairs in _pairs(op).items():
                for offset, msg in pairs:
                    self.log[k][offset].add(_h(msg))
        self.offsets = {k: sorted(log) for k, log in self.log.items()}
        # index: position among the offsets holding a message; a message's first index
        self.index_of_offset = {k: {o: i for i, o in enumerate(offs)}
                                for k, offs in self.offsets.items()}
        self.first: dict[str, dict[Any, int]] = {}
        self.last: dict[str, dict[Any, int]] = {}
        for k, offs in self.offsets.items():
            first: dict[Any, int] = {}
            last: dict[Any, int] = {}
            for i, o in enumerate(offs):
                for v in self.log[k][o]:
                    first.setdefault(v, i)
                    last[v] = i
            self.first[k], self.last[k] = first, last

    def at(self, k: str, i: int) -> list[Any]:
        return sorted(self.log[k][self.offsets[k][i]], key=_order)


def check_kafka(ops: Sequence[KafkaOp]) -> dict[str, Any]:
    """Jepsen's kafka result map: `valid?`, `error-types`, `bad-error-types`, per type
    `{count, errs}` (`unseen`: `{unseen: {key: count}, messages: {key: [msg]}}`), and
    `info-txn-causes` (the errors of sends and polls of unknown outcome)."""
    orders = Orders(ops)
    errors: dict[str, list[Any]] = defaultdict(list)
    for k, offs in orders.offsets.items():
        for i, o in enumerate(offs):
            if len(orders.log[k][o]) > 1:
                errors["inconsistent-offsets"].append(
                    {"key": k, "offset": o, "index": i, "values": orders.at(k, i)})
        count: dict[Any, list[int]] = defaultdict(list)
        for o in offs:
            for v in orders.log[k][o]:
                count[v].append(o)
        for v, where in sorted(count.items(), key=lambda x: str(x[0])):
            if len(where) > 1:
                errors["duplicate"].append({"key": k, "value": v, "count": len(where),
                                            "offsets": where})
    read: dict[str, set[Any]] = defaultdict(set)
    reader: dict[tuple[str, Any], KafkaOp] = {}
    for op in ops:
        for k, pairs in _pairs(op).items():
            for _, msg in pairs:
                read[k].add(_h(msg))
                reader.setdefault((k, _h(msg)), op)
    acked: dict[str, dict[Any, KafkaOp]] = defaultdict(dict)
    failed: dict[tuple[str, Any], KafkaOp] = {}
    for op in ops:
        if op.f != "send":
            continue
        k, _, msg = _send(op)
        if op.type == "ok":
            acked[k][_h(msg)] = op
        elif op.type == "fail":
            failed[(k, _h(msg))] = op
    _lost_writes(orders, read, acked, reader, errors)
    unseen = {k: sorted((v for v in sent if v not in read[k]), key=_order)
              for k, sent in sorted(acked.items())}
    unseen = {k: vs for k, vs in unseen.items() if vs}
    for (k, v), op in sorted(failed.items(), key=str):
        if v in read[k]:
            errors["G1a"].append({"key": k, "value": v, "writer": _show(op),
                                  "reader": _show(reader[(k, v)])})
    _internal(orders, ops, errors)
    _per_client(orders, ops, errors)
    out: dict[str, Any] = {}
    for kind, errs in sorted(errors.items()):
        if errs:
            ordered = sorted(errs, key=lambda e: e.get("delta", 0)) if "delta" in errs[0] \
                else errs
            shown = ordered[-SHOWN.get(kind, 8):] if "skip" in kind \
                else ordered[:SHOWN.get(kind, 8)]
            out[kind] = {"count": len(errs), "errs": shown}
    if unseen:
        out["unseen"] = {"unseen": {k: len(vs) for k, vs in unseen.items()},
                         "messages": {k: vs[:32] for k, vs in unseen.items()}}
    kinds = sorted(out)
    causes = sorted({op.error for op in ops if op.type == "info" and op.f in ("send", "poll")
                     and op.error})
    return {"valid?": not kinds, "error-types": kinds, "bad-error-types": kinds,
            "info-txn-causes": causes, **out}


def _lost_writes(orders: Orders, read: dict[str, set[Any]],
                 acked: dict[str, dict[Any, KafkaOp]], reader: dict[tuple[str, Any], KafkaOp],
                 errors: dict[str, list[Any]]) -> None:
    for k, vs in read.items():
        first = orders.first.get(k, {})
        bound = max((first[v] for v in vs if v in first), default=-1)
        if bound < 0:
            continue
        top = orders.at(k, bound)[0]
        for v, op in acked.get(k, {}).items():
            if v not in vs and orders.last[k].get(v, bound + 1) <= bound:
                errors["lost-write"].append({
                    "key": k, "value": v, "index": first.get(v), "max-read-index": bound,
                    "writer": _show(op), "max-read": _show(reader[(k, top)])
                    if (k, top) in reader else None})


def _skip_or_back(orders: Orders, k: str, v1: Any, v2: Any) -> tuple[str, int, list[Any]]:
    """("skip" / "nonmonotonic" / "", delta, skipped) between two successive reads."""
    first = orders.first[k]
    if v1 not in first or v2 not in first:
        return "", 1, []
    i1, i2 = first[v1], first[v2]
    delta = i2 - i1
    if delta > 1:
        return "skip", delta, [orders.at(k, i)[0] for i in range(i1 + 1, i2)]
    if delta < 1:
        return "nonmonotonic", delta, []
    return "", delta, []


def _internal(orders: Orders, ops: Sequence[KafkaOp], errors: dict[str, list[Any]]) -> None:
    for op in ops:
        for k, pairs in _pairs(op).items():
            for (_, m1), (_, m2) in zip(pairs, pairs[1:], strict=False):
                kind, delta, skipped = _skip_or_back(orders, k, _h(m1), _h(m2))
                if kind:
                    e: dict[str, Any] = {"key": k, "values": [m1, m2], "delta": delta,
                                         "op": _show(op)}
                    if skipped:
                        e["skipped"] = skipped
                    errors[f"int-poll-{kind}" if kind == "skip"
                           else "int-nonmonotonic-poll"].append(e)


def _per_client(orders: Orders, ops: Sequence[KafkaOp], errors: dict[str, list[Any]]) -> None:
    by_process: dict[tuple[str, int, str], list[KafkaOp]] = defaultdict(list)
    for op in ops:
        by_process[(op.node, op.inc, op.client)].append(op)
    for mine in by_process.values():
        mine.sort(key=lambda o: o.invoke_t)
        last_read: dict[str, tuple[Any, KafkaOp]] = {}
        last_sent: dict[str, tuple[Any, KafkaOp]] = {}
        final = False
        for op in mine:
            if op.final and not final:  # the final polls seek to offset 0 of every key
                final, last_read = True, {}
            if op.f == "list_committed_offsets" and op.type == "ok":
                keep = {str(k) for k in op.value or []}
                last_read = {k: x for k, x in last_read.items() if k in keep}
            elif op.f == "send" and op.type == "ok":
                k, _, msg = _send(op)
                if k in last_sent:
                    before, prev = last_sent[k]
                    kind, delta, _ = _skip_or_back(orders, k, before, _h(msg))
                    if kind == "nonmonotonic":
                        errors["nonmonotonic-send"].append(
                            {"key": k, "values": [before, msg], "delta": delta,
                             "ops": [_show(prev), _show(op)]})
                last_sent[k] = (_h(msg), op)
            elif op.f == "poll" and op.type == "ok":
                asked = op.value if isinstance(op.value, dict) else {}
                for k, pairs in _pairs(op).items():
                    if not pairs:
                        continue
                    head = _h(pairs[0][1])
                    if k in last_read:
                        before, prev = last_read[k]
                        kind, delta, skipped = _skip_or_back(orders, k, before, head)
                        if kind == "skip":
                            errors["poll-skip"].append({"key": k, "delta": delta,
                                                        "skipped": skipped,
                                                        "ops": [_show(prev), _show(op)]})
                        elif kind:
                            errors["nonmonotonic-poll"].append(
                                {"key": k, "values": [before, head], "delta": delta,
                                 "ops": [_show(prev), _show(op)]})
                    elif isinstance(asked.get(k), int):
                        known = [o for o in orders.offsets[k] if asked[k] <= o < pairs[0][0]]
                        if known:
                            errors["poll-skip"].append(
                                {"key": k, "delta": len(known) + 1, "requested": asked[k],
                                 "skipped": [orders.at(k, orders.index_of_offset[k][o])[0]
                                             for o in known],
                                 "ops": [_show(op)]})
                    last_read[k] = (_h(pairs[-1][1]), op)
