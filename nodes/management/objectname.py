"""JMX ObjectNames: parsing, canonical form and pattern matching.

A name is ``domain:key=value,key=value``. The canonical form sorts the keys, as JMX's
``getCanonicalName`` does, so ``testbed:type=TotalOrder,protocol=seto`` and
``testbed:protocol=seto,type=TotalOrder`` name the same MBean. Patterns follow
``javax.management.ObjectName``: ``*`` and ``?`` in the domain or in a value, and a trailing
``*`` entry (``testbed:type=Clock,*``, ``*:*``) that lets a match carry more keys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

_KEY_FORBIDDEN = set(':,="*?\n')
_VALUE_FORBIDDEN = set(':,="\n')


class MalformedObjectName(ValueError):
    """The text is not a valid ObjectName (or ObjectName pattern)."""


@cache
def _wildcard_regex(pattern: str) -> re.Pattern[str]:
    # Only * and ? are wildcards; fnmatch would also treat [...] as a class, which JMX does not.
    wild = {"*": ".*", "?": "."}
    return re.compile("".join(wild.get(ch) or re.escape(ch) for ch in pattern), re.DOTALL)


def wildcard_match(pattern: str, text: str) -> bool:
    """True when ``text`` matches ``pattern`` with JMX wildcards ``*`` and ``?``."""
    return _wildcard_regex(pattern).fullmatch(text) is not None


def _has_wildcard(text: str) -> bool:
    return "*" in text or "?" in text


def _split_properties(text: str) -> list[str]:
    """Split on commas that are not inside a quoted value."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    escaped = False
    for ch in text:
        if escaped:
            escaped = False
        elif quoted and ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == "," and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    if quoted:
        raise MalformedObjectName(f"unterminated quoted value in {text!r}")
    parts.append("".join(current))
    return parts


def _check_value(value: str, whole: str) -> None:
    if not value:
        raise MalformedObjectName(f"empty value in {whole!r}")
    if value.startswith('"'):
        if len(value) < 2 or not value.endswith('"'):
            raise MalformedObjectName(f"badly quoted value {value!r} in {whole!r}")
        return
    bad = _VALUE_FORBIDDEN.intersection(value)
    if bad:
        raise MalformedObjectName(f"character {sorted(bad)[0]!r} not allowed in value {value!r}")


@dataclass(frozen=True)
class ObjectName:
    """A parsed ObjectName; ``keys`` is sorted, which makes equality canonical."""

    domain: str
    keys: tuple[tuple[str, str], ...]
    property_pattern: bool = False

    @classmethod
    def parse(cls, text: str) -> ObjectName:
        """Parse ``domain:key=value,...``; raise MalformedObjectName with the reason."""
        if not isinstance(text, str):
            raise MalformedObjectName(f"an ObjectName must be a string, not {type(text).__name__}")
        domain, sep, props = text.partition(":")
        if not sep:
            raise MalformedObjectName(f"{text!r} has no ':' between domain and keys")
        if "\n" in domain:
            raise MalformedObjectName(f"domain of {text!r} contains a newline")
        if not props:
            raise MalformedObjectName(f"{text!r} has no key=value properties")
        keys: dict[str, str] = {}
        property_pattern = False
        for part in _split_properties(props):
            if part == "*":
                if property_pattern:
                    raise MalformedObjectName(f"{text!r} has more than one '*' property entry")
                property_pattern = True
                continue
            key, eq, value = part.partition("=")
            if not eq or not key:
                raise MalformedObjectName(f"property {part!r} of {text!r} is not key=value")
            if _KEY_FORBIDDEN.intersection(key):
                raise MalformedObjectName(f"key {key!r} of {text!r} has a forbidden character")
            if key in keys:
                raise MalformedObjectName(f"key {key!r} appears twice in {text!r}")
            _check_value(value, text)
            keys[key] = value
        return cls(domain, tuple(sorted(keys.items())), property_pattern)

    @property
    def key_dict(self) -> dict[str, str]:
        return dict(self.keys)

    @property
    def key_list(self) -> str:
        """The canonical property list, ``k1=v1,k2=v2`` (keys sorted), with ``,*`` if a pattern."""
        text = ",".join(f"{k}={v}" for k, v in self.keys)
        if self.property_pattern:
            text = f"{text},*" if text else "*"
        return text

    @property
    def canonical(self) -> str:
        return f"{self.domain}:{self.key_list}"

    @property
    def is_pattern(self) -> bool:
        return (
            self.property_pattern
            or _has_wildcard(self.domain)
            or any(_has_wildcard(v) for _, v in self.keys if not v.startswith('"'))
        )

    def get(self, key: str) -> str | None:
        """The value of ``key`` with JMX quoting removed, or None when absent."""
        value = self.key_dict.get(key)
        if value is not None and value.startswith('"'):
            return re.sub(r"\\(.)", r"\1", value[1:-1])
        return value

    def matches(self, name: ObjectName) -> bool:
        """True when ``name`` (a concrete name) is selected by this name used as a pattern."""
        if not wildcard_match(self.domain, name.domain):
            return False
        theirs = name.key_dict
        for key, value in self.keys:
            if key not in theirs:
                return False
            if value.startswith('"') or not _has_wildcard(value):
                if theirs[key] != value:
                    return False
            elif not wildcard_match(value, theirs[key]):
                return False
        return self.property_pattern or len(theirs) == len(self.keys)

    def __str__(self) -> str:
        return self.canonical
