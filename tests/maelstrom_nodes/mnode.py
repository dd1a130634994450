"""A small Maelstrom node harness for this project's test programs: JSON lines on stdin and
stdout, `init`, request/reply helpers and periodic tasks (a reader thread feeds a queue)."""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

Handler = Callable[[dict[str, Any]], None]


class Node:
    def __init__(self) -> None:
        self.node_id = ""
        self.node_ids: list[str] = []
        self.handlers: dict[str, Handler] = {}
        self.next_id = 0
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.tasks: list[tuple[float, Callable[[], None], list[float]]] = []

    def on(self, kind: str, fn: Handler) -> None:
        self.handlers[kind] = fn

    def every(self, period_s: float, fn: Callable[[], None]) -> None:
        self.tasks.append((period_s, fn, [time.monotonic() + period_s]))

    def send(self, dest: str, body: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps({"src": self.node_id, "dest": dest, "body": body}) + "\n")
        sys.stdout.flush()

    def rpc(self, dest: str, body: dict[str, Any]) -> int:
        self.next_id += 1
        self.send(dest, {**body, "msg_id": self.next_id})
        return self.next_id

    def reply(self, req: dict[str, Any], body: dict[str, Any]) -> None:
        self.send(req["src"], {**body, "in_reply_to": req["body"].get("msg_id")})

    def _read(self) -> None:
        for line in sys.stdin:
            if line.strip():
                self.inbox.put(json.loads(line))
        self.inbox.put(None)

    def run(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()
        while True:
            due = min((t[2][0] for t in self.tasks), default=time.monotonic() + 1)
            try:
                msg = self.inbox.get(timeout=max(0.0, due - time.monotonic()))
            except queue.Empty:
                msg = {}
            if msg is None:
                return
            if msg:
                body = msg["body"]
                if body["type"] == "init":
                    self.node_id, self.node_ids = body["node_id"], body["node_ids"]
                    self.reply(msg, {"type": "init_ok"})
                elif body["type"] in self.handlers:
                    self.handlers[body["type"]](msg)
                elif "msg_id" in body:
                    self.reply(msg, {"type": "error", "code": 10,
                                     "text": f"not supported: {body['type']}"})
            now = time.monotonic()
            for period, fn, nxt in self.tasks:
                if now >= nxt[0] and self.node_id:
                    fn()
                    nxt[0] = now + period
