"""Protocol layers (sans-IO) and the registry that builds a stack by name."""

from __future__ import annotations

from typing import Any

from nodes.protocols.base import Layer
from nodes.protocols.fast_seto import FastSeto
from nodes.protocols.sequencer import Sequencer
from nodes.protocols.seto import Seto


def make_protocol(name: str, me: int, members: list[int], params: dict[str, Any]) -> Layer:
    """Build the protocol stack `name` for process `me` (params already use member ids)."""
    if name == "sequencer":
        return Sequencer(me, members, params)
    if name == "seto":
        return Seto(me, members, params)
    if name == "fast-seto":
        return FastSeto(me, members, params)
    raise ValueError(f"protocol {name!r} is not implemented by this node program")
