#!/usr/bin/env python3
"""Maelstrom echo that writes its clocks to stderr at every request: `clock WALL MONO`, the
wall clock (time.time, what libfaketime skews) and the monotonic one (not skewed), so a
test sees the clock nemesis's skew in node.log."""

from __future__ import annotations

import sys
import time
from typing import Any

from mnode import Node

node = Node()


def on_echo(msg: dict[str, Any]) -> None:
    print(f"clock {time.time():.6f} {time.monotonic():.6f}", file=sys.stderr, flush=True)
    node.reply(msg, {"type": "echo_ok", "echo": msg["body"]["echo"]})


node.on("echo", on_echo)
node.run()
