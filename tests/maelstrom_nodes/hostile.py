#!/usr/bin/env python3
"""A Maelstrom echo node that also misbehaves on purpose: after `init` it writes four lines
the agent must count as malformed (not JSON, not an object, no dest, a line over 1 MiB), one
message to a destination that does not exist (counted apart) and one valid 300 kB message to
the next node, which travels in fragments. It answers echo requests correctly, so the run
stays valid."""

from __future__ import annotations

import json
import sys


def out(obj: object) -> None:
    sys.stdout.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
    sys.stdout.flush()


me = ""
for line in sys.stdin:
    msg = json.loads(line)
    body = msg["body"]
    if body["type"] == "init":
        me, ids = body["node_id"], body["node_ids"]
        out({"src": me, "dest": msg["src"], "body": {"type": "init_ok",
                                                     "in_reply_to": body["msg_id"]}})
        out("this is not JSON")
        out("[1, 2, 3]")
        out({"src": me, "body": {"type": "lost"}})
        out({"src": me, "dest": "zz9", "body": {"type": "nowhere"}})
        out({"src": me, "dest": ids[0], "body": {"type": "huge", "pad": "x" * (3 << 19)}})
        nxt = ids[(ids.index(me) + 1) % len(ids)]
        out({"src": me, "dest": nxt, "body": {"type": "big", "pad": "y" * 300_000}})
    elif body["type"] == "big":
        print(f"{me}: got big from {msg['src']}: {len(body['pad'])} bytes", file=sys.stderr,
              flush=True)
    elif body["type"] == "echo":
        out({"src": me, "dest": msg["src"], "body": {"type": "echo_ok", "echo": body["echo"],
                                                     "in_reply_to": body["msg_id"]}})
