"""Typed fault primitives and their one dispatcher (docs/architecture.md "Faults").

A fault timeline (testbed/faults/schedule.py) expands into primitives: block/heal the data
plane between peers, crash/restart/pause/resume a node, set a path, set a clock, a management
request. Each primitive is a small immutable value (Chaos Mesh's typed faults rather than an
`op` string dispatched by `if`) that names the capability applying it:

  process control  crash, restart, pause, resume       (signals, containers, the simulator)
  network control  block, heal, set a path            (iptables + shaper, node filters, sim)
  node control     set the clock, a management request (the node's MBeans)

Every backend, the simulator included, hands `apply` a `Controls` of the three; `apply` is the
only dispatch, and `FaultHistory` the only writer of `faults.jsonl`. This module lives in
`nodes/` because the simulator (which must not import `testbed/`) applies the same values.

History record (one JSON object per line):
`{"t": true ns, "kind": partition|crash|pause|clock|link|mgmt, "phase": start|stop,
  "hosts": [...], "fault": index in faults:, "params": {...}, "measured": {...}}`
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

Measured = dict[str, Any]


class ProcessControl(Protocol):
    def crash(self, host: str) -> Measured: ...
    def restart(self, host: str) -> Measured: ...
    def pause(self, host: str) -> Measured: ...
    def resume(self, host: str) -> Measured: ...


class NetworkControl(Protocol):
    def block(self, cuts: list[tuple[str, str]]) -> Measured: ...
    def heal(self) -> Measured: ...
    def set_path(self, fault: SetPath) -> Measured: ...


class NodeControl(Protocol):
    def set_clock(self, fault: SetClock) -> Measured: ...
    def management(self, fault: Management) -> Measured: ...


@dataclass(frozen=True)
class Controls:
    """What a backend can do to its hosts, one object per capability."""

    process: ProcessControl
    network: NetworkControl
    node: NodeControl


@dataclass(frozen=True)
class Primitive:
    op: ClassVar[str]  # the timeline's name for it (schedule.Action.op, sim.json)
    kind: ClassVar[str]  # the history's fault kind
    phase: ClassVar[str] = "start"

    def apply(self, controls: Controls) -> Measured:
        raise NotImplementedError

    def hosts(self) -> list[str]:
        return []

    def params(self) -> dict[str, Any]:
        """The timeline parameters, as the history records them."""
        return {}

    def record(self, t: int, measured: Measured, fault: int) -> dict[str, Any]:
        return {"t": t, "kind": self.kind, "phase": self.phase, "hosts": self.hosts(),
                "fault": fault, "params": self.params(), "measured": measured}


@dataclass(frozen=True)
class HostPrimitive(Primitive):
    host: str

    def hosts(self) -> list[str]:
        return [self.host]


@dataclass(frozen=True)
class Crash(HostPrimitive):
    op, kind = "crash", "crash"

    def apply(self, controls: Controls) -> Measured:
        return controls.process.crash(self.host)


@dataclass(frozen=True)
class Restart(HostPrimitive):
    op, kind, phase = "restart", "crash", "stop"

    def apply(self, controls: Controls) -> Measured:
        return controls.process.restart(self.host)


@dataclass(frozen=True)
class Pause(HostPrimitive):
    op, kind = "pause", "pause"

    def apply(self, controls: Controls) -> Measured:
        return controls.process.pause(self.host)


@dataclass(frozen=True)
class Resume(HostPrimitive):
    op, kind, phase = "resume", "pause", "stop"

    def apply(self, controls: Controls) -> Measured:
        return controls.process.resume(self.host)


@dataclass(frozen=True)
class Block(Primitive):
    """Drop data-plane datagrams from each `src` to its `dst` (one-way cuts)."""

    op, kind = "block", "partition"
    cuts: tuple[tuple[str, str], ...]

    def apply(self, controls: Controls) -> Measured:
        return controls.network.block(list(self.cuts))

    def hosts(self) -> list[str]:
        return sorted({h for c in self.cuts for h in c})

    def params(self) -> dict[str, Any]:
        return {"cuts": [list(c) for c in self.cuts]}


@dataclass(frozen=True)
class Heal(Primitive):
    op, kind, phase = "heal", "partition", "stop"

    def apply(self, controls: Controls) -> Measured:
        return controls.network.heal()


@dataclass(frozen=True)
class SetPath(Primitive):
    """Both directions between two hosts; a field left None keeps the current value, `reset`
    goes back to the planned path."""

    op, kind = "path", "link"
    between: tuple[str, str]
    delay_ns: int | None = None
    jitter_ns: int | None = None
    loss: float | None = None
    reset: bool = False

    @property
    def phase(self) -> str:  # type: ignore[override]
        return "stop" if self.reset else "start"

    def apply(self, controls: Controls) -> Measured:
        return controls.network.set_path(self)

    def hosts(self) -> list[str]:
        return list(self.between)

    def changes(self) -> dict[str, Any]:
        """The fields this fault sets (delay_ns, jitter_ns, loss)."""
        return {k: v for k, v in (("delay_ns", self.delay_ns), ("jitter_ns", self.jitter_ns),
                                  ("loss", self.loss)) if v is not None}

    def params(self) -> dict[str, Any]:
        return {"between": list(self.between), **self.changes(),
                **({"reset": True} if self.reset else {})}


@dataclass(frozen=True)
class SetClock(HostPrimitive):
    """Exactly one of: step the clock, set its offset, set its drift."""

    op, kind = "clock", "clock"
    jump_ns: int | None = None
    offset_ns: int | None = None
    drift_ppm: float | None = None

    def apply(self, controls: Controls) -> Measured:
        return controls.node.set_clock(self)

    def params(self) -> dict[str, Any]:
        return {k: v for k, v in (("jump_ns", self.jump_ns), ("offset_ns", self.offset_ns),
                                  ("drift_ppm", self.drift_ppm)) if v is not None}


@dataclass(frozen=True)
class Management(HostPrimitive):
    """A management write (attributes of one MBean) or an operation with its arguments."""

    op, kind = "mgmt", "mgmt"
    mbean: str = ""
    write: Mapping[str, Any] | None = None
    exec: tuple[Any, ...] | None = None

    def apply(self, controls: Controls) -> Measured:
        return controls.node.management(self)

    def params(self) -> dict[str, Any]:
        return {"mbean": self.mbean, "write": None if self.write is None else dict(self.write),
                "exec": None if self.exec is None else list(self.exec)}


def primitive(op: str, params: Mapping[str, Any]) -> Primitive:
    """The typed value of one timeline entry (`op` and its parameters)."""
    p = params
    if op in HOST_OPS:
        return HOST_OPS[op](p["host"])
    if op == "block":
        return Block(tuple((src, dst) for src, dst in p["cuts"]))
    if op == "heal":
        return Heal()
    if op == "path":
        a, b = p["between"]
        return SetPath((a, b), p.get("delay_ns"), p.get("jitter_ns"), p.get("loss"),
                       bool(p.get("reset")))
    if op == "clock":
        return SetClock(p["host"], p.get("jump_ns"), p.get("offset_ns"), p.get("drift_ppm"))
    if op == "mgmt":
        return Management(p["host"], p["mbean"], p.get("write"),
                          None if p.get("exec") is None else tuple(p["exec"]))
    raise ValueError(f"unknown fault primitive {op!r}")


HOST_OPS: dict[str, type[HostPrimitive]] = {
    c.op: c for c in (Crash, Restart, Pause, Resume)}


def apply(controls: Controls, fault: Primitive) -> Measured:
    """The one dispatch: the primitive picks its capability."""
    return fault.apply(controls)


class FaultHistory:
    """`faults.jsonl`: every applied primitive with the true time it took effect and what was
    measured afterwards.

    Cuts add up (a block adds its cuts to those still on) and a heal lifts them all, so a
    heal stops every partition then on, not only the fault it belongs to: each of those gets
    its own stop record (same time and measurement, `params.healed_by` the fault whose heal
    it was), and a reader pairing starts and stops by fault id sees the partition end when
    the network did. The partitions still on are read back from the file, so a history
    appended by several writers (`testbed fault` calls on one run) stays right."""

    def __init__(self, path: Path):
        self.path = path
        self._open: set[Any] | None = None  # fault ids of the partitions on, once read

    def append(self, fault: Primitive, t: int, measured: Measured, index: int = 0
               ) -> dict[str, Any]:
        record = fault.record(t, measured, index)
        records = [record]
        if isinstance(fault, Heal):
            records += [{**record, "fault": other, "params": {"healed_by": index}}
                        for other in sorted(self._partitions_on() - {index}, key=str)]
            self._partitions_on().clear()
        elif isinstance(fault, Block):
            self._partitions_on().add(index)
        with self.path.open("a", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
        return record

    def _partitions_on(self) -> set[Any]:
        if self._open is None:
            self._open = set()
            try:
                lines = self.path.read_text(encoding="utf-8").splitlines()
            except OSError:
                lines = []
            for line in lines:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue  # a line cut short
                if not isinstance(r, dict) or r.get("kind") != "partition":
                    continue
                if r.get("phase", "start") == "start":
                    self._open.add(r.get("fault"))
                else:
                    self._open.discard(r.get("fault"))
        return self._open
