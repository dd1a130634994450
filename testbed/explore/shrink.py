"""Shrinking a failing seed (docs/explore.md "Shrinking"): the smallest experiment that
still fails with the same failing checks, from the same seed.

1. delta debugging (Zeller's ddmin) over the schedule's items: the smallest subset that
   still fails the same way (1-minimal: dropping any one item makes it pass or fail
   differently);
2. the duration: halved while it still fails (never below 1 s; faults must start inside it);
3. the rate: halved while it still fails (never below 1 message/s);
4. the hosts: each host no fault names is dropped while it still fails.

A drawn world (world mode) shrinks too, before steps 2-4: each drawn protocol parameter back
to its default, each link impairment (jitter, reordering, loss, duplication, bandwidth) off,
bursty arrivals constant; after them the message size halved (not below 16 B) and the path
delays rounded to one significant digit.

Every step re-runs the simulator from the seed, so the result reproduces byte-identically.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from testbed.explore.case import Base, Case, run_case

T = TypeVar("T")
MIN_DURATION_NS = 1_000_000_000
MIN_RATE = 1.0
MIN_SIZE = 16
IMPAIRMENTS = ("jitter", "reorder", "loss", "duplicate", "bandwidth")
BURSTY = ("workload.avg", "workload.max_burst", "workload.slot")


def ddmin(items: Sequence[T], fails: Callable[[list[T]], bool]) -> list[T]:
    """A 1-minimal subsequence of `items` on which `fails` holds (it holds on `items`)."""
    current, n = list(items), 2
    if fails([]):
        return []
    while len(current) >= 2:
        chunk = max(1, len(current) // n)
        subsets = [current[i:i + chunk] for i in range(0, len(current), chunk)]
        progress = False
        for k, subset in enumerate(subsets):
            if fails(subset):
                current, n, progress = subset, 2, True
                break
            complement = [x for j, s in enumerate(subsets) if j != k for x in s]
            if len(subsets) > 2 and fails(complement):
                current, n, progress = complement, max(n - 1, 2), True
                break
        if not progress:
            if n >= len(current):
                break
            n = min(len(current), 2 * n)
    return current


def _named_hosts(items: Sequence[dict[str, Any]]) -> set[str]:
    out: set[str] = set()
    for i in items:
        for key in ("host", "isolate"):
            if isinstance(i.get(key), str):
                out.add(i[key])
        for g in i.get("groups") or []:
            out |= set(g)
        out |= set(i.get("between") or [])
    return out


def _without(case: Case, *keys: str) -> Case:
    return replace(case, params=tuple(p for p in case.params if p[0] not in keys))


def _with(case: Case, key: str, value: Any) -> Case:
    return replace(case, params=tuple(p if p[0] != key else (key, value) for p in case.params))


def _round_ms(text: str) -> str:
    """`137.2ms` -> `100ms`: one significant digit."""
    x = float(text.removesuffix("ms"))
    digits = 10 ** math.floor(math.log10(x)) if x > 0 else 1
    return f"{round(x / digits) * digits:g}ms"


def _topology(case: Case, change: Callable[[dict[str, Any]], None]) -> Case | None:
    """The case with `change` made to (a copy of) each matrix entry of its drawn topology, or
    None when that changes nothing."""
    topo = case.topology()
    if topo is None:
        return None
    new = copy.deepcopy(topo)
    for row in new.get("matrix", {}).values():
        for entry in row.values():
            change(entry)
    return None if new == topo else _with(case, "topology", new)


def world_steps(case: Case) -> list[Callable[[Case], Case | None]]:
    """A world's simplifications before the duration, rate and hosts: parameters back to
    their defaults, impairments off, arrivals constant."""
    steps: list[Callable[[Case], Case | None]] = [
        partial(_without_param, key=k) for k, _ in case.params
        if k.startswith("protocol.params.")]
    steps += [partial(_without_impairment, key=k) for k in IMPAIRMENTS]
    steps.append(_constant_arrivals)
    return steps


def _without_param(case: Case, key: str) -> Case | None:
    return _without(case, key)


def _without_impairment(case: Case, key: str) -> Case | None:
    return _topology(case, lambda entry: entry.pop(key, None))


def _constant_arrivals(case: Case) -> Case | None:
    if dict(case.params).get("workload.arrival") in (None, "constant"):
        return None
    return _with(_without(case, *BURSTY), "workload.arrival", "constant")


def shrink(base: Base, case: Case, root: Path, keep: Path) -> dict[str, Any]:
    """Shrink `case` (which failed) to a minimal case with the same failing checks; run the
    result once more and keep its run directory at `keep`. Returns the minimal case, its row
    and how many runs shrinking took."""
    first = run_case(base, case, root)
    target = first["failing"]
    runs = 1

    def same(c: Case) -> bool:
        nonlocal runs
        runs += 1
        row = run_case(base, c, root)
        return bool(row["failing"]) and row["failing"] == target

    def attempt(step: Callable[[Case], Case | None]) -> None:
        nonlocal case
        simpler = step(case)
        if simpler is not None and simpler != case and same(simpler):
            case = simpler

    if target:
        items = ddmin(list(case.items), lambda sub: same(replace(case, items=tuple(sub))))
        case = replace(case, items=tuple(items))
        for step in world_steps(case):
            attempt(step)
        duration = case.duration_ns or base.exp.duration
        while duration // 2 >= MIN_DURATION_NS:
            shorter = replace(case, duration_ns=(duration // 2) // 1_000_000 * 1_000_000)
            if not same(shorter):
                break
            case, duration = shorter, duration // 2
        w = base.exp.workload
        if w.arrival != "vbr" and w.rate:
            rate = float(w.rate)
            drawn = dict(case.params).get("workload.rate")
            if isinstance(drawn, str) and drawn.endswith("/s"):
                rate = float(drawn[:-2])
            while rate / 2 >= MIN_RATE:
                params = tuple(p for p in case.params if p[0] not in (
                    "workload.rate", "workload.avg")) + (("workload.rate", f"{rate / 2:g}/s"),)
                if "workload.avg" in dict(case.params):
                    params += (("workload.avg", f"{rate / 2:g}/s"),)
                slower = replace(case, params=params)
                if not same(slower):
                    break
                case, rate = slower, rate / 2
        named = _named_hosts(case.items)
        topo = case.topology()
        hosts = [h["name"] for h in topo["hosts"]] if topo else list(base.ctx.hosts)
        for host in hosts:
            if host in named or len(hosts) - len(case.drop_hosts) <= 2:
                continue
            fewer = replace(case, drop_hosts=(*case.drop_hosts, host))
            if same(fewer):
                case = fewer
        size = dict(case.params).get("workload.size")
        while isinstance(size, str) and size.endswith("B") and int(size[:-1]) // 2 >= MIN_SIZE:
            smaller = _with(case, "workload.size", f"{int(size[:-1]) // 2}B")
            if not same(smaller):
                break
            case, size = smaller, f"{int(size[:-1]) // 2}B"
        attempt(lambda c: _topology(c, lambda e: e.update(delay=_round_ms(e["delay"]))))
    final = run_case(base, case, root, keep=keep)
    return {"case": case.record(), "row": final, "runs": runs + 1, "target": target}
