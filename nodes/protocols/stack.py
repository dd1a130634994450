"""Hosting inner protocol instances: the container half of the protocol stack
(docs/architecture.md, "Protocol stack").

A layer owns the one layer below it through a helper (`nodes.protocols.reliable.Below`); a
*container* runs whole protocols of the catalogue inside itself, several at once or one after
another (`switching` runs two or more total-order instances and switches between them,
`primary` one per primary view). What every container does for each inner instance is here,
once:

- build it from its catalogue entry (`Hosted`), with an edge gate of its own
  (nodes/edge.py) that checks the instance's datagrams as the node checks a protocol's;
- namespace its timers: `<scope>|<key>`, each namespaced `SetTimer` built once and reused
  (`Hosted.timer`), and parse a fired key back into scope and key (`TimerKeys`);
- stamp the container's wire id (an instance tag) on its datagrams: a protocol whose entry
  says its receive path never reads a header's `proto` (`Entry.tagged_ok`) takes datagrams
  under the tag as they are, and one on reliable multicast stamps the tag itself
  (`Layer.retag`); the container re-stamps the rest;
- pass the failure detector's, the membership's and admission control's events to every
  live instance (`fan_out`).

What an instance's deliveries mean is the container's own rule (switching's Fig. 2.1
routing, primary's delivery by primary view), so each container lifts an instance's actions
itself; it never writes an inner layer's fields, and asks the layer through a method
(`Layer.retag`, `Layer.renumber`) for what it needs of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from nodes.edge import EdgeRules, Gate
from nodes.protocols.base import Action, Layer, SetTimer

TIMER_CACHE = 1024  # namespaced timers kept per instance before the cache starts again
ROUTE_CACHE = 4096  # fired keys parsed and kept per container


class HostedEntry(Protocol):
    """What a container needs of an inner protocol's catalogue entry (nodes/protocols/
    catalogue.py `Entry`): containers get entries through the `lookup` the catalogue gives
    their factory, and never import the catalogue, which imports them."""

    @property
    def name(self) -> str: ...
    @property
    def wire_id(self) -> int: ...
    @property
    def factory(self) -> Callable[[int, list[int], dict[str, Any]], Layer]: ...
    @property
    def edge(self) -> EdgeRules | None: ...
    @property
    def tagged_ok(self) -> bool: ...


Lookup = Callable[[str], HostedEntry]  # a protocol's entry by name (catalogue.py `get`)


class Hosted:
    """One inner protocol instance: its catalogue entry, its layer, its edge gate and its
    timer namespace `scope`."""

    __slots__ = ("entry", "layer", "gate", "scope", "wire_id", "tagged", "_timers")

    def __init__(self, entry: HostedEntry, me: int, members: list[int],
                 params: dict[str, Any], scope: str):
        self.entry = entry
        self.layer: Layer = entry.factory(me, members, params)
        self.gate = Gate(me, members, self.layer, entry.edge, entry.wire_id,
                         int(params.get("incarnation", 0)))
        self.scope = scope
        self.wire_id = self.entry.wire_id
        self.tagged = False  # takes datagrams under the container's tag as they are
        self._timers: dict[SetTimer, SetTimer] = {}

    def tag(self, proto: int) -> bool:
        """Carry the container's wire id `proto` instead of the instance's own, where the
        instance never reads a header's `proto` (`Entry.tagged_ok`): its gate then expects
        `proto`, and a layer that can stamps it on what it sends (`Layer.retag`). Returns
        whether the instance takes tagged datagrams as they are (False: the container puts
        the instance's wire id back on each datagram it hands the instance)."""
        if not self.entry.tagged_ok:
            return False
        self.tagged = True
        self.gate.expect(proto)
        self.layer.retag(proto)
        return True

    def timer(self, a: SetTimer) -> SetTimer:
        """The instance's timer in the container's namespace (`<scope>|<key>`)."""
        timer = self._timers.get(a)  # frozen, so the namespaced one is reused
        if timer is None:
            if len(self._timers) > TIMER_CACHE:
                self._timers.clear()
            timer = self._timers[a] = SetTimer(f"{self.scope}|{a.key}", a.delay_ns)
        return timer


class TimerKeys:
    """Parses a fired timer key back into (scope, the instance's own key), each key once."""

    def __init__(self) -> None:
        self._keys: dict[str, tuple[str, str]] = {}

    def parse(self, key: str) -> tuple[str, str] | None:
        """None for a key no instance set (no `|`)."""
        parsed = self._keys.get(key)
        if parsed is None:
            scope, sep, inner = key.partition("|")
            if not sep:
                return None
            if len(self._keys) > ROUTE_CACHE:
                self._keys.clear()
            parsed = self._keys[key] = (scope, inner)
        return parsed


def fan_out(hosts: list[Hosted], event: Callable[[Layer], list[Action]],
            lift: Callable[[Hosted, list[Action]], list[Action]]) -> list[Action]:
    """`event` on every instance in `hosts`, in that order, each one's actions lifted by the
    container's `lift`."""
    out: list[Action] = []
    for hosted in hosts:
        out += lift(hosted, event(hosted.layer))
    return out
