"""Maelstrom's network services (docs/maelstrom.md, Services): `lin-kv`, `seq-kv`, `lww-kv`
and `lin-tso`, with the request and reply bodies and error codes of Maelstrom's
doc/services.md and doc/protocol.md. Pure (no I/O): the host agent of the service host
(nodes/agent.py) feeds it the requests that reached it over the emulated network and sends
the replies back the same way.

- `lin-kv`: one store; every request acts on its latest state (linearizable).
- `seq-kv`: a history of the store's last states; a request that changes nothing (a read, a
  failed cas, a write of the value already there) may act on any state from the last one
  its caller saw to the latest, later requests of the same caller never on an older one; a
  request that changes the store acts on the latest state and makes it the caller's
  (sequentially consistent: one total order, each caller's view monotonic, reads may be
  stale).
- `lww-kv`: independent replicas, each request served by a random one; before each request
  one random replica merges another's values, the higher Lamport timestamp winning (last
  write wins, eventually consistent: reads may be stale or go back in time). Its `cas`
  never creates a key.
- `lin-tso`: `ts` -> `ts_ok` with the next integer from 0 (linearizable).

Requests: `read` (`key`) -> `read_ok` (`value`); `write` (`key`, `value`) -> `write_ok`;
`cas` (`key`, `from`, `to`, optional `create_if_not_exists`) -> `cas_ok`. Errors: 20
key-does-not-exist, 22 precondition-failed (cas `from` differs), 12 malformed-request (a
field missing), 10 not-supported (another type). Keys and values are any JSON, compared as
JSON (1 and 1.0 and true are three values).
"""

from __future__ import annotations

import json
import random
from collections import deque
from typing import Any

SERVICES = ("lin-kv", "seq-kv", "lww-kv", "lin-tso")
SEQ_HISTORY = 32  # seq-kv: the past states a request may act on
LWW_REPLICAS = 2  # lww-kv: independent replicas

Store = dict[str, tuple[Any, int]]  # JSON key -> (value, Lamport timestamp)


def _canon(v: Any) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


def _error(code: int, text: str) -> dict[str, Any]:
    return {"type": "error", "code": code, "text": text}


def kv_apply(store: Store, body: dict[str, Any], clock: int, create_ok: bool = True
             ) -> tuple[Store | None, dict[str, Any]]:
    """One key-value request on `store`: (the new store, or None when unchanged; the reply
    body without `in_reply_to`). New values carry timestamp `clock`."""
    kind = body.get("type")
    if kind not in ("read", "write", "cas"):
        return None, _error(10, f"{str(kind)[:40]!r} is not supported by this service")
    if "key" not in body:
        return None, _error(12, f"{kind} needs a key")
    key = _canon(body["key"])
    if kind == "read":
        if key not in store:
            return None, _error(20, "key does not exist")
        return None, {"type": "read_ok", "value": store[key][0]}
    if kind == "write":
        if "value" not in body:
            return None, _error(12, "write needs a value")
        if key in store and _canon(store[key][0]) == _canon(body["value"]):
            return None, {"type": "write_ok"}
        return {**store, key: (body["value"], clock)}, {"type": "write_ok"}
    if "from" not in body or "to" not in body:
        return None, _error(12, "cas needs from and to")
    if key not in store:
        if create_ok and body.get("create_if_not_exists") is True:
            return {**store, key: (body["to"], clock)}, {"type": "cas_ok"}
        return None, _error(20, "key does not exist")
    current = store[key][0]
    if _canon(current) != _canon(body["from"]):
        return None, _error(22, f"current value {_canon(current)[:100]} is not "
                                f"{_canon(body['from'])[:100]}")
    if _canon(current) == _canon(body["to"]):
        return None, {"type": "cas_ok"}
    return {**store, key: (body["to"], clock)}, {"type": "cas_ok"}


class LinKV:
    def __init__(self) -> None:
        self.store: Store = {}

    def handle(self, caller: str, body: dict[str, Any]) -> dict[str, Any]:
        new, reply = kv_apply(self.store, body, 0)
        if new is not None:
            self.store = new
        return reply


class SeqKV:
    """The last `SEQ_HISTORY` states; `seen[caller]`: the index of the last state the caller
    acted on (indexes count every state ever made)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.states: deque[Store] = deque([{}], maxlen=SEQ_HISTORY)
        self.last = 0  # the index of states[-1]
        self.seen: dict[str, int] = {}

    def handle(self, caller: str, body: dict[str, Any]) -> dict[str, Any]:
        oldest = self.last - len(self.states) + 1
        lo = max(self.seen.get(caller, 0), oldest)
        index = self.rng.randint(lo, self.last)
        new, reply = kv_apply(self.states[index - oldest], body, 0)
        if new is None:
            self.seen[caller] = index
            return reply
        # A change acts on the latest state, so the total order holds.
        new, reply = kv_apply(self.states[-1], body, 0)
        if new is not None:
            self.states.append(new)
            self.last += 1
        self.seen[caller] = self.last
        return reply


class LwwKV:
    def __init__(self, rng: random.Random, replicas: int = LWW_REPLICAS) -> None:
        self.rng = rng
        self.replicas: list[Store] = [{} for _ in range(replicas)]
        self.clocks = [0] * replicas

    def _merge(self, src: int, dst: int) -> None:
        into = dict(self.replicas[dst])
        for k, (v, ts) in self.replicas[src].items():
            if k not in into or into[k][1] < ts:
                into[k] = (v, ts)
        self.replicas[dst] = into
        self.clocks[dst] = max(self.clocks[dst], self.clocks[src])

    def handle(self, caller: str, body: dict[str, Any]) -> dict[str, Any]:
        n = len(self.replicas)
        self._merge(self.rng.randrange(n), self.rng.randrange(n))
        i = self.rng.randrange(n)
        new, reply = kv_apply(self.replicas[i], body, self.clocks[i], create_ok=False)
        if new is not None:
            self.replicas[i] = new
            self.clocks[i] += 1
        return reply


class LinTSO:
    def __init__(self) -> None:
        self.next = 0

    def handle(self, caller: str, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("type") != "ts":
            return _error(10, f"{str(body.get('type'))[:40]!r} is not supported by lin-tso")
        ts, self.next = self.next, self.next + 1
        return {"type": "ts_ok", "ts": ts}


class Services:
    """All four services of one run, as the service host's agent keeps them."""

    def __init__(self, seed: str) -> None:
        self.by_name: dict[str, LinKV | SeqKV | LwwKV | LinTSO] = {
            "lin-kv": LinKV(), "seq-kv": SeqKV(random.Random(f"{seed}:seq-kv")),
            "lww-kv": LwwKV(random.Random(f"{seed}:lww-kv")), "lin-tso": LinTSO()}

    def handle(self, service: str, caller: str, body: dict[str, Any]) -> dict[str, Any]:
        """The reply body to `caller`'s request `body` (with `in_reply_to` when the request
        had an integer `msg_id`)."""
        reply = self.by_name[service].handle(caller, body)
        msg_id = body.get("msg_id")
        if isinstance(msg_id, int) and not isinstance(msg_id, bool):
            reply["in_reply_to"] = msg_id
        return reply
