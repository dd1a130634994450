#!/usr/bin/env python3
"""A Maelstrom program for the lin-kv workload (docs/maelstrom.md, lin-kv).

- `--proxy` (linearizable): every read, write and cas goes to Maelstrom's `lin-kv` service
  and its reply (or error: 20 key-does-not-exist, 22 precondition-failed) goes back to the
  client; a service request unanswered for a second answers error 0 (timeout, indefinite).
- `--local` (not linearizable): each node keeps its own copy of the keys, so a client on
  one node never sees what a client on another wrote (stale reads).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from mnode import Node

node = Node()
Reply = Callable[[dict[str, Any]], None]
pending: dict[int, tuple[float, Reply]] = {}
TIMEOUT_S = 1.0


def proxy(msg: dict[str, Any]) -> None:
    body = {k: v for k, v in msg["body"].items() if k != "msg_id"}

    def back(r: dict[str, Any]) -> None:
        node.reply(msg, {k: v for k, v in r.items() if k not in ("in_reply_to", "msg_id")})

    pending[node.rpc("lin-kv", body)] = (time.monotonic() + TIMEOUT_S, back)


def on_reply(msg: dict[str, Any]) -> None:
    got = pending.pop(msg["body"].get("in_reply_to"), None)
    if got is not None:
        got[1](msg["body"])


def expire() -> None:
    now = time.monotonic()
    for msg_id, (deadline, then) in list(pending.items()):
        if now > deadline:
            del pending[msg_id]
            then({"type": "error", "code": 0, "text": "lin-kv timeout"})


store: dict[str, Any] = {}


def local(msg: dict[str, Any]) -> None:
    b = msg["body"]
    key = str(b["key"])
    if b["type"] == "write":
        store[key] = b["value"]
        node.reply(msg, {"type": "write_ok"})
    elif key not in store:
        node.reply(msg, {"type": "error", "code": 20, "text": "key does not exist"})
    elif b["type"] == "read":
        node.reply(msg, {"type": "read_ok", "value": store[key]})
    elif store[key] != b["from"]:
        node.reply(msg, {"type": "error", "code": 22, "text": f"value is {store[key]}"})
    else:
        store[key] = b["to"]
        node.reply(msg, {"type": "cas_ok"})


handler = local if "--local" in sys.argv else proxy
for kind in ("read", "write", "cas"):
    node.on(kind, handler)
for kind in ("read_ok", "write_ok", "cas_ok", "error"):
    node.on(kind, on_reply)
node.every(0.1, expire)
node.run()
