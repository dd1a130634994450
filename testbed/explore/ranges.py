"""Parameter ranges of an experiment's `explore: ranges:` (docs/explore.md): a value is a
number or a number with a unit (`10/s`, `100ms`, `1KiB`); one seed draws uniformly between
the two ends and writes the draw back with the same unit."""

from __future__ import annotations

import random
import re
from typing import Any

_VALUE = re.compile(r"^\s*(?P<num>-?\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z/%]*)\s*$")


def split_value(value: Any) -> tuple[float, str]:
    """`10/s` -> (10.0, "/s"); 100 -> (100.0, "")."""
    if isinstance(value, bool):
        raise ValueError(f"a range end is a number or a number with a unit, got {value!r}")
    if isinstance(value, int | float):
        return float(value), ""
    m = _VALUE.match(str(value))
    if m is None:
        raise ValueError(f"a range end is a number or a number with a unit (e.g. 10/s, 100ms),"
                         f" got {value!r}")
    return float(m.group("num")), m.group("unit")


def draw_value(lo: Any, hi: Any, rng: random.Random) -> Any:
    """One value in [lo, hi]: an int when both ends are ints, else the unit's form."""
    (a, unit), (b, _) = split_value(lo), split_value(hi)
    if isinstance(lo, int) and isinstance(hi, int) and not isinstance(lo, bool):
        return rng.randint(lo, hi)
    x = rng.uniform(a, b)
    x = round(x, 3) if abs(x) < 100 else round(x)
    return x if not unit else f"{x:g}{unit}"


def set_path(data: dict[str, Any], key: str, value: Any) -> None:
    """`workload.rate` = value in a nested spec mapping (missing levels are created)."""
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
        node[part] = child = dict(child)
        node = child
    node[parts[-1]] = value


def get_path(data: dict[str, Any], key: str) -> Any:
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node
