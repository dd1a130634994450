"""Protocol layers (sans-IO) and the catalogue that builds a stack by name
(nodes/protocols/catalogue.py; docs/protocols.md says how to add one)."""

from __future__ import annotations

from typing import Any

from nodes.protocols.base import Layer


def make_protocol(name: str, me: int, members: list[int], params: dict[str, Any]) -> Layer:
    """Build the protocol stack `name` for process `me` (params already use member ids)."""
    from nodes.protocols import catalogue

    try:
        return catalogue.build(name, me, members, params)
    except KeyError as exc:
        raise ValueError(f"protocol {name!r} is not implemented by this node program: "
                         f"{exc.args[0]}") from None
