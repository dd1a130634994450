#!/usr/bin/env python3
"""A Maelstrom program for the txn-list-append and txn-rw-register workloads
(docs/maelstrom.md): `["append", k, v]` appends to a list, `["w", k, v]` sets a register,
`["r", k, null]` reads either (null for a key never written).

- `--serial` (strict serializable): every transaction goes to `n0`, which applies them one
  at a time and answers with the completed transaction; a forwarded one unanswered for a
  second answers error 0 (timeout, indefinite).
- `--local` (not serializable): each node applies transactions to its own state, so nodes
  disagree on every key both write.
- `--intermediate` (not read committed): as `--serial`, but a transaction that writes a
  register twice leaves its first value, not its last, for the others to read (while it
  reads its own last write itself).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from mnode import Node

node = Node()
state: dict[str, Any] = {}
Reply = Callable[[dict[str, Any]], None]
pending: dict[int, tuple[float, Reply]] = {}
TIMEOUT_S = 1.0


def apply(txn: list[list[Any]]) -> list[list[Any]]:
    mine: dict[str, Any] = {}  # the transaction's own register writes
    done = []
    for f, k, v in txn:
        key = str(k)
        if f == "r":
            got = mine.get(key, state.get(key))
            done.append([f, k, list(got) if isinstance(got, list) else got])
        elif f == "append":
            state.setdefault(key, []).append(v)
            done.append([f, k, v])
        else:
            if key not in mine or "--intermediate" not in sys.argv:
                state[key] = v
            mine[key] = v
            done.append([f, k, v])
    return done


def on_txn(msg: dict[str, Any]) -> None:
    if "--local" in sys.argv or node.node_id == node.node_ids[0]:
        node.reply(msg, {"type": "txn_ok", "txn": apply(msg["body"]["txn"])})
        return

    def back(r: dict[str, Any]) -> None:
        node.reply(msg, {k: v for k, v in r.items() if k not in ("in_reply_to", "msg_id")})

    msg_id = node.rpc(node.node_ids[0], {"type": "txn", "txn": msg["body"]["txn"]})
    pending[msg_id] = (time.monotonic() + TIMEOUT_S, back)


def on_reply(msg: dict[str, Any]) -> None:
    got = pending.pop(msg["body"].get("in_reply_to"), None)
    if got is not None:
        got[1](msg["body"])


def expire() -> None:
    now = time.monotonic()
    for msg_id, (deadline, then) in list(pending.items()):
        if now > deadline:
            del pending[msg_id]
            then({"type": "error", "code": 0, "text": "n0 timeout"})


node.on("txn", on_txn)
node.on("txn_ok", on_reply)
node.on("error", on_reply)
node.every(0.1, expire)
node.run()
