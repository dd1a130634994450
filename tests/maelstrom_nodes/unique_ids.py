#!/usr/bin/env python3
"""Maelstrom unique-ids: an id is the node's name and a counter (`--collide`: the counter
alone, so two nodes hand out the same ids: invalid)."""

from __future__ import annotations

import sys
from itertools import count
from typing import Any

from mnode import Node

node = Node()
counter = count()
collide = "--collide" in sys.argv


def on_generate(msg: dict[str, Any]) -> None:
    n = next(counter)
    node.reply(msg, {"type": "generate_ok", "id": n if collide else f"{node.node_id}-{n}"})


node.on("generate", on_generate)
node.run()
