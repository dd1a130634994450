#!/usr/bin/env python3
"""A Maelstrom program for the kafka workload (docs/maelstrom.md, kafka): one leader (the
first node) keeps every log and the committed offsets; the other nodes forward their
clients' requests to it and its replies back (a forward unanswered for a second answers
error 0: timeout, indefinite). A poll returns at most ten messages per key from the offset
asked for.

- `--lose N`: the leader acknowledges every send, but leaves every Nth out of its log (lost
  writes: its offset is acknowledged and never polled).
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
POLL_MAX = 10
LOSE = int(sys.argv[sys.argv.index("--lose") + 1]) if "--lose" in sys.argv else 0
logs: dict[str, list[tuple[int, Any]]] = {}
next_offset: dict[str, int] = {}
committed: dict[str, int] = {}
sends = 0


def leader() -> str:
    return sorted(node.node_ids, key=lambda n: (len(n), n))[0]


def serve(b: dict[str, Any]) -> dict[str, Any]:
    global sends
    if b["type"] == "send":
        key = b["key"]
        offset = next_offset.get(key, 0)
        next_offset[key] = offset + 1
        sends += 1
        if not (LOSE and sends % LOSE == 0):
            logs.setdefault(key, []).append((offset, b["msg"]))
        return {"type": "send_ok", "offset": offset}
    if b["type"] == "poll":
        msgs = {}
        for key, start in b["offsets"].items():
            got = [[o, m] for o, m in logs.get(key, []) if o >= start][:POLL_MAX]
            if got:
                msgs[key] = got
        return {"type": "poll_ok", "msgs": msgs}
    if b["type"] == "commit_offsets":
        for key, offset in b["offsets"].items():
            committed[key] = max(committed.get(key, -1), offset)
        return {"type": "commit_offsets_ok"}
    return {"type": "list_committed_offsets_ok",
            "offsets": {k: committed[k] for k in b["keys"] if k in committed}}


def request(msg: dict[str, Any]) -> None:
    if node.node_id == leader():
        node.reply(msg, serve(msg["body"]))
        return
    body = {k: v for k, v in msg["body"].items() if k != "msg_id"}

    def back(r: dict[str, Any]) -> None:
        node.reply(msg, {k: v for k, v in r.items() if k not in ("in_reply_to", "msg_id")})

    pending[node.rpc(leader(), body)] = (time.monotonic() + TIMEOUT_S, back)


def on_reply(msg: dict[str, Any]) -> None:
    got = pending.pop(msg["body"].get("in_reply_to"), None)
    if got is not None:
        got[1](msg["body"])


def expire() -> None:
    now = time.monotonic()
    for msg_id, (deadline, then) in list(pending.items()):
        if now > deadline:
            del pending[msg_id]
            then({"type": "error", "code": 0, "text": "leader timeout"})


for kind in ("send", "poll", "commit_offsets", "list_committed_offsets"):
    node.on(kind, request)
for kind in ("send_ok", "poll_ok", "commit_offsets_ok", "list_committed_offsets_ok", "error"):
    node.on(kind, on_reply)
node.every(0.1, expire)
node.run()
