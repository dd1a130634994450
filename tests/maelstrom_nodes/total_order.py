#!/usr/bin/env python3
"""The total-order workload: `read` returns the values this node delivered, in delivery
order. `--mode arrival` delivers each value when it arrives (orders differ across nodes under
jitter: invalid); `--mode sequencer` sends each value to n1, which numbers it and sends the
numbered value to everyone, and every node delivers in number order (valid). Both resend
until acknowledged."""

from __future__ import annotations

import sys
from typing import Any

from mnode import Node

node = Node()
mode = sys.argv[sys.argv.index("--mode") + 1] if "--mode" in sys.argv else "sequencer"
delivered: list[int] = []
have: set[int] = set()
pending: dict[str, dict[int, dict[str, Any]]] = {}  # peer -> key -> body to resend
# sequencer state
next_seq = 0
numbered: dict[int, int] = {}  # value -> seq (at the sequencer)
holdback: dict[int, int] = {}  # seq -> value
next_deliver = 0


def resend_later(peer: str, key: int, body: dict[str, Any]) -> None:
    pending.setdefault(peer, {})[key] = body
    node.rpc(peer, body)


def deliver_arrival(value: int) -> None:
    if value not in have:
        have.add(value)
        delivered.append(value)


def order(value: int) -> None:
    """At the sequencer: number a value once, send it to every node."""
    global next_seq
    if value in numbered:
        return
    numbered[value] = next_seq
    next_seq += 1
    for peer in node.node_ids:
        resend_later(peer, value, {"type": "ordered", "value": value, "seq": numbered[value]})


def on_broadcast(msg: dict[str, Any]) -> None:
    value = msg["body"]["message"]
    if mode == "arrival":
        deliver_arrival(value)
        for peer in node.node_ids:
            if peer != node.node_id:
                resend_later(peer, value, {"type": "value", "value": value})
    else:
        resend_later(node.node_ids[0], value, {"type": "to_sequencer", "value": value})
    node.reply(msg, {"type": "broadcast_ok"})


def on_value(msg: dict[str, Any]) -> None:
    deliver_arrival(msg["body"]["value"])
    node.reply(msg, {"type": "ack", "key": msg["body"]["value"]})


def on_to_sequencer(msg: dict[str, Any]) -> None:
    order(msg["body"]["value"])
    node.reply(msg, {"type": "ack", "key": msg["body"]["value"]})


def on_ordered(msg: dict[str, Any]) -> None:
    global next_deliver
    b = msg["body"]
    holdback[b["seq"]] = b["value"]
    while next_deliver in holdback:
        delivered.append(holdback.pop(next_deliver))
        next_deliver += 1
    node.reply(msg, {"type": "ack", "key": b["value"]})


def on_ack(msg: dict[str, Any]) -> None:
    pending.get(msg["src"], {}).pop(msg["body"]["key"], None)


def retry() -> None:
    for peer, bodies in pending.items():
        for body in list(bodies.values())[:100]:
            node.rpc(peer, body)


node.on("broadcast", on_broadcast)
node.on("read", lambda m: node.reply(m, {"type": "read_ok", "messages": list(delivered)}))
node.on("topology", lambda m: node.reply(m, {"type": "topology_ok"}))
node.on("value", on_value)
node.on("to_sequencer", on_to_sequencer)
node.on("ordered", on_ordered)
node.on("ack", on_ack)
node.every(0.25, retry)
node.run()
