#!/usr/bin/env python3
"""A Maelstrom program on Maelstrom's services (docs/maelstrom.md, Services).

- `--counter SERVICE` (g-counter, pn-counter): the count is one key of the key-value service
  SERVICE; an `add` reads it and compare-and-sets it to the sum (the first with
  `create_if_not_exists`), again until the cas holds; a `read` first writes a key of its
  own with a fresh value (a change: seq-kv then serves this node from its latest state) and
  then reads the count. A service request unanswered for a second answers the client with
  error 0 (timeout, indefinite).
- `--tso` (unique-ids): an id is a timestamp of `lin-tso`.
- `--refuse` (any workload): a `read` is answered with nothing read (`value` 0, `messages`
  []) and `topology` with `topology_ok`; every other request with error 10 (not-supported,
  definite), so no write ever succeeds.
- `--probe DEST` (echo): each echo first sends a request to DEST; the echo is answered only
  when that request was answered with error 1 (node-not-found), so the run is valid exactly
  when the harness answers an unknown destination that way.
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
syncs = 0
TIMEOUT_S = 1.0


def arg(flag: str) -> str | None:
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else None


def call(dest: str, body: dict[str, Any], then: Reply) -> None:
    pending[node.rpc(dest, body)] = (time.monotonic() + TIMEOUT_S, then)


def on_reply(msg: dict[str, Any]) -> None:
    got = pending.pop(msg["body"].get("in_reply_to"), None)
    if got is not None:
        got[1](msg["body"])


def expire() -> None:
    now = time.monotonic()
    for msg_id, (deadline, then) in list(pending.items()):
        if now > deadline:
            del pending[msg_id]
            then({"type": "error", "code": 0, "text": "service timeout"})


def counter(service: str) -> None:
    def add(msg: dict[str, Any]) -> None:
        delta = msg["body"]["delta"]

        def attempt(current: Any, first: bool) -> None:
            def done(r: dict[str, Any]) -> None:
                if r["type"] == "cas_ok":
                    node.reply(msg, {"type": "add_ok"})
                elif r.get("code") in (20, 22):  # gone or moved on: read again
                    call(service, {"type": "read", "key": "count"}, read_then_cas)
                else:
                    node.reply(msg, {"type": "error", "code": r.get("code", 13),
                                     "text": f"{service}: {r.get('text')}"})

            call(service, {"type": "cas", "key": "count", "from": current,
                           "to": current + delta, "create_if_not_exists": first}, done)

        def read_then_cas(r: dict[str, Any]) -> None:
            if r["type"] == "read_ok":
                attempt(r["value"], False)
            elif r.get("code") == 20:
                attempt(0, True)
            else:
                node.reply(msg, {"type": "error", "code": r.get("code", 13),
                                 "text": f"{service}: {r.get('text')}"})

        call(service, {"type": "read", "key": "count"}, read_then_cas)

    def read(msg: dict[str, Any]) -> None:
        global syncs
        syncs += 1

        def got(r: dict[str, Any]) -> None:
            if r["type"] == "read_ok":
                node.reply(msg, {"type": "read_ok", "value": r["value"]})
            elif r.get("code") == 20:
                node.reply(msg, {"type": "read_ok", "value": 0})
            else:
                node.reply(msg, {"type": "error", "code": r.get("code", 13),
                                 "text": f"{service}: {r.get('text')}"})

        call(service, {"type": "write", "key": f"sync-{node.node_id}", "value": syncs},
             lambda _: call(service, {"type": "read", "key": "count"}, got))

    node.on("add", add)
    node.on("read", read)


def tso() -> None:
    def generate(msg: dict[str, Any]) -> None:
        def got(r: dict[str, Any]) -> None:
            if r["type"] == "ts_ok":
                node.reply(msg, {"type": "generate_ok", "id": r["ts"]})
            else:
                node.reply(msg, {"type": "error", "code": 0, "text": "lin-tso unanswered"})

        call("lin-tso", {"type": "ts"}, got)

    node.on("generate", generate)


def probe(dest: str) -> None:
    def echo(msg: dict[str, Any]) -> None:
        def got(r: dict[str, Any]) -> None:
            if r.get("type") == "error" and r.get("code") == 1:
                node.reply(msg, {"type": "echo_ok", "echo": msg["body"]["echo"]})
            else:
                node.reply(msg, {"type": "error", "code": 14, "text": f"{dest}: {r}"})

        call(dest, {"type": "read", "key": "x"}, got)

    node.on("echo", echo)


def refuse() -> None:
    node.on("read", lambda msg: node.reply(msg, {"type": "read_ok", "value": 0,
                                                 "messages": []}))
    node.on("topology", lambda msg: node.reply(msg, {"type": "topology_ok"}))


for kind in ("read_ok", "write_ok", "cas_ok", "ts_ok", "error"):
    node.on(kind, on_reply)
if arg("--counter"):
    counter(str(arg("--counter")))
elif "--tso" in sys.argv:
    tso()
elif "--refuse" in sys.argv:
    refuse()
elif arg("--probe"):
    probe(str(arg("--probe")))
node.every(0.1, expire)
node.run()
