"""Linearizability of one register's history (docs/maelstrom.md, lin-kv): the Wing-Gong
search (`006`) with Lowe's just-in-time linearization and cache of (linearized set, state)
configurations (`007`, the WGL algorithm), over Knossos's compare-and-set register model
(`008`); linearizability as `005` §2 defines it.

A history is a list of `RegisterOp`s: `ok` operations took effect between their invocation
and their completion; `info` ones (a timeout, a crash) may have taken effect at any time
after their invocation, or never; `fail` ones never did and are left out. The search walks
the events in time order, linearizes a pending operation when the model allows it, and
backtracks when it meets the return of an operation not linearized yet; a (linearized set,
state) pair already explored is not explored again. It stops after `time_limit_s`: the
verdict is then unknown.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

TIME_LIMIT_S = 30.0  # per key, by default
CHECK_EVERY = 4096  # search steps between looks at the clock


@dataclass
class RegisterOp:
    """One operation on one register: `f` read, write or cas; `value` what was read or
    written, or [from, to] for cas; times in ns; `type` ok, info or fail."""

    f: str
    value: Any
    invoke_t: int
    complete_t: int | None
    type: str = "ok"
    label: Any = None  # what a report shows of the operation (its client, its times)


def _canon(v: Any) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


NOTHING = _canon(None)  # the state of a key never written


def step(state: str, op: RegisterOp) -> str | None:
    """The compare-and-set register: the state after `op`, or None when `op` cannot happen
    in `state` (a read of another value, a cas whose `from` differs)."""
    if op.f == "read":
        return state if _canon(op.value) == state else None
    if op.f == "write":
        return _canon(op.value)
    if op.f == "cas":
        frm, to = op.value
        return _canon(to) if _canon(frm) == state else None
    raise ValueError(f"unknown register operation {op.f!r}")


@dataclass
class Result:
    """`valid`: True, False or "unknown" (the search ran out of time); when False, `op` is
    the operation whose return came before any linearization of the longest linearizable
    prefix found could place it, `previous_ok` the last operation of that prefix, and
    `state` the register's value there."""

    valid: bool | str
    op: RegisterOp | None = None
    previous_ok: RegisterOp | None = None
    state: Any = None
    explored: int = 0


def check(ops: list[RegisterOp], initial: Any = None,
          time_limit_s: float = TIME_LIMIT_S) -> Result:
    """Whether `ops` (one register) are linearizable from `initial`."""
    live = [op for op in ops if op.type == "ok" or (op.type == "info" and op.f != "read")]
    n = len(live)
    # Events: (time, 0 call / 1 return, op index); at equal times calls come first (two
    # operations at the same instant overlap). An info operation has no return.
    events = sorted([(op.invoke_t, 0, i) for i, op in enumerate(live)]
                    + [(op.complete_t if op.complete_t is not None else op.invoke_t, 1, i)
                       for i, op in enumerate(live) if op.type == "ok"])
    size = len(events)
    # A doubly linked list over the events, with a head sentinel at index `size`.
    nxt = list(range(1, size + 1)) + [0]
    prv = [size] + list(range(0, size - 1)) + [size - 1]
    nxt[size] = 0 if size else -1
    if size:
        nxt[size - 1] = -1
    prv[size] = -1
    call_at = [0] * n
    ret_at = [-1] * n
    for pos, (_, kind, i) in enumerate(events):
        if kind == 0:
            call_at[i] = pos
        else:
            ret_at[i] = pos

    def unlink(pos: int) -> None:
        p, q = prv[pos], nxt[pos]
        nxt[p] = q
        if q != -1:
            prv[q] = p

    def relink(pos: int) -> None:
        p, q = prv[pos], nxt[pos]
        nxt[p] = pos
        if q != -1:
            prv[q] = pos

    state = _canon(initial)
    linearized = 0
    seen: set[tuple[int, str]] = set()
    stack: list[tuple[int, str]] = []  # (op index, state before it)
    best = (-1, Result(False))
    deadline = time.monotonic() + time_limit_s
    steps = 0
    entry = nxt[size]
    while entry != -1:
        steps += 1
        if steps % CHECK_EVERY == 0 and time.monotonic() > deadline:
            return Result("unknown", explored=len(seen))
        _, kind, i = events[entry]
        if kind == 0:
            after = step(state, live[i])
            if after is not None:
                key = (linearized | (1 << i), after)
                if key not in seen:
                    seen.add(key)
                    stack.append((i, state))
                    state, linearized = after, key[0]
                    unlink(call_at[i])
                    if ret_at[i] >= 0:
                        unlink(ret_at[i])
                    entry = nxt[size]
                    continue
            entry = nxt[entry]
            continue
        # The return of an operation not linearized yet: undo the last linearization.
        if len(stack) > best[0]:
            best = (len(stack), Result(False, live[i], live[stack[-1][0]] if stack else None,
                                       json.loads(state)))
        if not stack:
            break
        j, state = stack.pop()
        linearized &= ~(1 << j)
        if ret_at[j] >= 0:
            relink(ret_at[j])
        relink(call_at[j])
        entry = nxt[call_at[j]]
    else:
        return Result(True, explored=len(seen))
    result = best[1]
    result.explored = len(seen)
    return result
