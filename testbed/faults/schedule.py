"""When faults happen: expand the `faults:` entries of an experiment into one timeline of
primitive actions, each at an offset from the workload start. Auto-heal (`for`), repetition
(`every` with seeded jitter) and partition shapes are resolved here, so backends only apply
primitives: block, heal, crash, restart, pause, resume, clock, path, mgmt."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from nodes.faults import Primitive, primitive
from nodes.quiescence import cut_off
from testbed.faults.spec import (
    ClockFault,
    HealFault,
    HostFault,
    LinkFault,
    MgmtFault,
    PartitionFault,
)
from testbed.spec.topology import Loc


@dataclass(frozen=True)
class Action:
    at_ns: int  # offset from the workload start
    op: str
    params: dict[str, Any] = field(default_factory=dict)
    fault: int = 0  # index of the faults: entry it comes from

    def record(self) -> dict[str, Any]:
        return {"op": self.op, "fault": self.fault, **self.params}

    def primitive(self) -> Primitive:
        """The typed fault this entry applies (nodes/faults.py)."""
        return primitive(self.op, self.params)


def partition_groups(f: PartitionFault, hosts: list[str], rng: random.Random) -> list[list[str]]:
    """Jepsen's partition shapes (nemesis.clj), over the hosts in topology order."""
    if f.groups is not None:
        rest = [h for h in hosts if not any(h in g for g in f.groups)]
        return [list(g) for g in f.groups] + ([rest] if rest else [])
    if f.isolate is not None:
        return [[f.isolate], [h for h in hosts if h != f.isolate]]
    shuffled = hosts[:]
    rng.shuffle(shuffled)
    half = len(hosts) // 2
    if f.shape in ("halves", "minority"):
        return [shuffled[:half], shuffled[half:]]
    if f.shape == "majority":
        return [shuffled[: half + 1], shuffled[half + 1:]]
    raise AssertionError(f.shape)


def cuts(f: PartitionFault, hosts: list[str], rng: random.Random) -> set[tuple[str, str]]:
    """Ordered pairs (src, dst) whose traffic is dropped."""
    n = len(hosts)
    if f.shape == "bridge":
        # Two halves that both still reach one bridge node (shuffled[0], left uncut).
        shuffled = hosts[:]
        rng.shuffle(shuffled)
        rest = shuffled[1:]
        a, b = rest[: len(rest) // 2], rest[len(rest) // 2:]
        return {(x, y) for x in a for y in b} | {(y, x) for x in a for y in b}
    if f.shape == "majorities-ring":
        # Each node sees a majority, but no two nodes see the same one.
        ring = hosts[:]
        rng.shuffle(ring)
        reach = n // 2
        out = set()
        for i, x in enumerate(ring):
            visible = {ring[(i + k) % n] for k in range(-(reach // 2), reach - reach // 2 + 1)}
            out |= {(x, y) for y in hosts if y not in visible and y != x}
        return out | {(y, x) for x, y in out}
    groups = partition_groups(f, hosts, rng)
    out = set()
    for i, g in enumerate(groups):
        for j, other in enumerate(groups):
            if i == j or (f.one_way and i != 0):
                continue
            out |= {(x, y) for x in g for y in other}
    return out


def expand(faults: list[Any], hosts: list[str], duration_ns: int, seed: int) -> list[Action]:
    """The whole timeline, sorted by time (ties keep schedule order)."""
    actions: list[Action] = []
    for idx, f in enumerate(faults):
        rng = random.Random(f"{seed}:{f.seed if f.seed is not None else idx}:fault")
        times = [f.at]
        if f.every is not None:
            t = f.at
            while True:
                t += f.every + (round(rng.uniform(-f.jitter, f.jitter)) if f.jitter else 0)
                if t >= duration_ns:
                    break
                times.append(t)
        for t in times:
            actions += _one(idx, f, t, hosts, rng)
    return sorted(actions, key=lambda a: a.at_ns)


def _one(idx: int, f: Any, t: int, hosts: list[str], rng: random.Random) -> list[Action]:
    heal_at = None if f.for_ is None else t + f.for_
    out: list[Action] = []
    if isinstance(f, PartitionFault):
        cut = sorted(cuts(f, hosts, rng))
        out.append(Action(t, "block", {"cuts": [list(c) for c in cut]}, idx))
        if heal_at is not None:
            out.append(Action(heal_at, "heal", {}, idx))
    elif isinstance(f, HealFault):
        out.append(Action(t, "heal", {}, idx))
    elif isinstance(f, HostFault):
        out.append(Action(t, f.kind, {"host": f.host}, idx))
        back = {"crash": "restart", "pause": "resume"}.get(f.kind)
        after = f.restart_after if f.kind == "crash" else f.for_
        if back and after is not None:
            out.append(Action(t + after, back, {"host": f.host}, idx))
    elif isinstance(f, ClockFault):
        if f.strobe is not None:
            assert f.period is not None and f.for_ is not None
            sign, k = 1, 0
            while k * f.period < f.for_:
                out.append(Action(t + k * f.period, "clock",
                                  {"host": f.host, "jump_ns": sign * f.strobe}, idx))
                sign, k = -sign, k + 1
            if sign == -1:  # leave the clock where it started
                out.append(Action(t + f.for_, "clock", {"host": f.host, "jump_ns": -f.strobe},
                                  idx))
        else:
            change = {"offset_ns": f.offset} if f.offset is not None else (
                {"drift_ppm": f.drift} if f.drift is not None else {"jump_ns": f.jump})
            out.append(Action(t, "clock", {"host": f.host, **change}, idx))
    elif isinstance(f, LinkFault):
        change = {k: v for k, v in (("delay_ns", f.delay), ("jitter_ns", f.path_jitter),
                                    ("loss", f.loss)) if v is not None}
        out.append(Action(t, "path", {"between": list(f.between), **change}, idx))
        if heal_at is not None:
            out.append(Action(heal_at, "path", {"between": list(f.between), "reset": True},
                              idx))
    elif isinstance(f, MgmtFault):
        out.append(Action(t, "mgmt", {"host": f.host, "mbean": f.mbean, "write": f.write,
                                      "exec": f.exec_}, idx))
    return out


def check_faults(faults: list[Any], hosts: list[str], duration_ns: int) -> list[tuple[Loc, str]]:
    """Located problems: unknown hosts, faults after the end of the workload."""
    problems: list[tuple[Loc, str]] = []
    known = set(hosts)
    for i, f in enumerate(faults):
        named: list[tuple[str, str]] = []
        for attr in ("host", "isolate"):
            if getattr(f, attr, None) is not None:
                named.append((attr, getattr(f, attr)))
        for g in getattr(f, "groups", None) or []:
            named += [("groups", h) for h in g]
        named += [("between", h) for h in getattr(f, "between", None) or ()]
        for attr, h in named:
            if h not in known:
                problems.append((("faults", i, attr), f"fault names unknown host {h!r}"))
        if f.at >= duration_ns:
            problems.append((("faults", i, "at"), "fault starts after the workload ends"))
    return problems


def correct_hosts(hosts: list[str], actions: list[Action]) -> list[str]:
    """Hosts the timeline leaves correct: never crashed, and not cut off by a partition still
    on at its end. They are the ones the drain waits for (nodes/quiescence.py) and that the
    checkers hold to agreement and validity."""
    crashed = {a.params["host"] for a in actions if a.op == "crash"}
    gone = crashed | _cut_off_at_end(hosts, actions)
    return [h for h in hosts if h not in gone]


def _cut_off_at_end(hosts: list[str], actions: list[Action]) -> set[str]:
    cuts: list[list[str]] = []
    for a in sorted(actions, key=lambda a: a.at_ns):
        if a.op == "block":
            cuts += a.params["cuts"]
        elif a.op == "heal":
            cuts = []
    return cut_off(hosts, cuts)


def restarted_up(hosts: list[str], actions: list[Action]) -> list[str]:
    """Hosts whose last crash the timeline follows with a restart, not cut off at the end:
    their last incarnation is up at the end, and is held to agreement and validity from its
    restart on (docs/architecture.md "Liveness"), so the drain waits for its messages too."""
    last: dict[str, str] = {}
    for a in sorted(actions, key=lambda a: a.at_ns):
        if a.op in ("crash", "restart"):
            last[a.params["host"]] = a.op
    gone = _cut_off_at_end(hosts, actions)
    return [h for h in hosts if last.get(h) == "restart" and h not in gone]
