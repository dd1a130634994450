"""Quantities written as text in specs: `10ms`, `100Mbit`, `0.1%`, `50/s`, `1KiB`.

Each parser returns one canonical integer or float (ns, bit/s, fraction, 1/s, bytes) and raises
ValueError with a sentence that shows a valid example, which the spec loader reports as
`file:line: field: message`.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer

_NUMBER = r"(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
_QUANTITY = re.compile(rf"^\s*(?P<all>{_NUMBER})\s*(?P<unit>[A-Za-z%/µ]*)\s*$")

_TIME_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
            "m": 60_000_000_000, "min": 60_000_000_000, "h": 3_600_000_000_000}
_RATE_BPS = {"bit": 1, "bps": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9,
             "kbps": 8 * 10**3, "mbps": 8 * 10**6, "gbps": 8 * 10**9}
_SIZE_B = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20,
           "gib": 2**30}


def _split(text: object, what: str, example: str) -> tuple[float, str]:
    if isinstance(text, bool):
        raise ValueError(f"expected a {what} such as {example!r}, got {text!r}")
    if isinstance(text, int | float):
        if text == 0:
            return 0.0, ""
        raise ValueError(f"a {what} needs a unit, e.g. {example!r} (got bare number {text})")
    if not isinstance(text, str):
        raise ValueError(f"expected a {what} such as {example!r}, got {type(text).__name__}")
    m = _QUANTITY.match(text)
    if not m:
        raise ValueError(f"cannot read {text!r} as a {what}; write it like {example!r}")
    return float(m.group("all")), m.group("unit")


def parse_duration(text: object) -> int:
    """`10ms` -> 10_000_000 (ns). Negative values are not expressible."""
    value, unit = _split(text, "duration", "10ms")
    if value == 0 and unit == "":
        return 0
    if unit not in _TIME_NS:
        raise ValueError(f"unknown time unit {unit!r} in {text!r}; use ns, us, ms, s, m or h")
    return round(value * _TIME_NS[unit])


def parse_bandwidth(text: object) -> int:
    """`100Mbit` -> 100_000_000 (bit/s).

    Units follow tc(8), case-insensitively: `kbit/mbit/gbit` are bits per second and
    `kbps/mbps/gbps` are *bytes* per second, so a spec means what `tc` would.
    """
    value, unit = _split(text, "bandwidth", "100Mbit")
    key = unit.lower().removesuffix("/s")
    if key not in _RATE_BPS:
        raise ValueError(f"unknown bandwidth unit {unit!r} in {text!r}; use bit, kbit, Mbit, Gbit")
    if value <= 0:
        raise ValueError(f"bandwidth must be positive, got {text!r}")
    return round(value * _RATE_BPS[key])


def parse_fraction(text: object) -> float:
    """`0.1%` -> 0.001. A bare number in [0, 1] is taken as a fraction."""
    if isinstance(text, int | float) and not isinstance(text, bool) and 0 <= text <= 1:
        return float(text)
    value, unit = _split(text, "percentage", "0.1%")
    if unit != "%":
        raise ValueError(f"write a percentage like '0.1%', got {text!r}")
    if not 0 <= value <= 100:
        raise ValueError(f"a percentage must lie in 0%..100%, got {text!r}")
    return value / 100


def parse_frequency(text: object) -> float:
    """`50/s` -> 50.0 events per second (also `3000/min`)."""
    value, unit = _split(text, "rate", "50/s")
    per = {"/s": 1.0, "/ms": 1000.0, "/min": 1 / 60, "hz": 1.0}.get(unit.lower())
    if per is None:
        raise ValueError(f"write a rate like '50/s', got {text!r}")
    if value <= 0:
        raise ValueError(f"rate must be positive, got {text!r}")
    return value * per


def parse_size(text: object) -> int:
    """`1KiB` -> 1024 (bytes)."""
    value, unit = _split(text, "size", "1KiB")
    key = unit.lower() or "b"
    if key not in _SIZE_B:
        raise ValueError(f"unknown size unit {unit!r} in {text!r}; use B, KB, KiB, MB, MiB")
    return round(value * _SIZE_B[key])


def parse_ppm(text: object) -> float:
    """`20ppm` -> 20.0; drift may be negative (`-15ppm`)."""
    if isinstance(text, str) and text.strip().startswith("-"):
        return -parse_ppm(text.strip()[1:])
    value, unit = _split(text, "drift", "20ppm")
    if unit not in ("ppm", ""):
        raise ValueError(f"write clock drift like '20ppm', got {text!r}")
    return value


def parse_signed_duration(text: object) -> int:
    """Like parse_duration, but `-5ms` is allowed (clock offsets)."""
    if isinstance(text, str) and text.strip().startswith("-"):
        return -parse_duration(text.strip()[1:])
    return parse_duration(text)


def format_duration(ns: int) -> str:
    for unit, scale in (("s", 10**9), ("ms", 10**6), ("us", 10**3)):
        if ns % scale == 0 and ns != 0:
            return f"{ns // scale}{unit}"
    if ns and abs(ns) >= 10**6:
        return f"{ns / 10**6:g}ms"
    return f"{ns}ns"


def _ser(fn):  # type: ignore[no-untyped-def]
    return PlainSerializer(fn, when_used="json")


Duration = Annotated[int, BeforeValidator(parse_duration), _ser(format_duration)]
SignedDuration = Annotated[int, BeforeValidator(parse_signed_duration), _ser(format_duration)]
Bandwidth = Annotated[int, BeforeValidator(parse_bandwidth)]
Fraction = Annotated[float, BeforeValidator(parse_fraction)]
Frequency = Annotated[float, BeforeValidator(parse_frequency)]
Size = Annotated[int, BeforeValidator(parse_size)]
Ppm = Annotated[float, BeforeValidator(parse_ppm)]
