#!/usr/bin/env python3
"""Maelstrom broadcast (and g-set: `add` an element): every value reaches every node, by
gossip with retries until each peer acknowledges it. `--no-forward` keeps each value at the
node that got it (values are lost: the checker must say invalid)."""

from __future__ import annotations

import sys
from typing import Any

from mnode import Node

node = Node()
forward = "--no-forward" not in sys.argv
seen: set[int] = set()
unacked: dict[str, dict[int, int]] = {}  # peer -> value -> msg_id of the last try


def learn(value: int) -> None:
    if value in seen:
        return
    seen.add(value)
    if forward:
        for peer in node.node_ids:
            if peer != node.node_id:
                unacked.setdefault(peer, {})[value] = 0


def on_broadcast(msg: dict[str, Any]) -> None:
    learn(msg["body"]["message"])
    node.reply(msg, {"type": "broadcast_ok"})
    retry()


def on_gossip(msg: dict[str, Any]) -> None:
    for v in msg["body"]["values"]:
        learn(v)
    node.reply(msg, {"type": "gossip_ok", "values": msg["body"]["values"]})


def on_gossip_ok(msg: dict[str, Any]) -> None:
    for v in msg["body"]["values"]:
        unacked.get(msg["src"], {}).pop(v, None)


def retry() -> None:
    for peer, values in unacked.items():
        if values:
            node.rpc(peer, {"type": "gossip", "values": sorted(values)[:200]})


def on_add(msg: dict[str, Any]) -> None:
    learn(msg["body"]["element"])
    node.reply(msg, {"type": "add_ok"})
    retry()


def on_read(msg: dict[str, Any]) -> None:
    values = sorted(seen)
    node.reply(msg, {"type": "read_ok", "messages": values, "value": values})


node.on("broadcast", on_broadcast)
node.on("add", on_add)
node.on("read", on_read)
node.on("topology", lambda m: node.reply(m, {"type": "topology_ok"}))
node.on("gossip", on_gossip)
node.on("gossip_ok", on_gossip_ok)
node.every(0.2, retry)
node.run()
