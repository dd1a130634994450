"""Jolokia GET paths: ``<type>/<arg1>/<arg2>/...`` with ``!`` escapes, to request objects.

Escaping follows the Jolokia protocol reference ("Escaping rules in GET requests") and its
EscapeUtil: ``!/`` is a slash inside a part, ``!!`` an exclamation mark, ``!`` before any
other character takes it literally; ``[null]`` spells null and ``""`` the empty string in
write values and exec arguments; a read's attribute list is comma-separated (``\\,`` for
a comma inside a name).
"""

from __future__ import annotations

from typing import Any

from nodes.management.mbeans import BadRequest


def split_path(path: str) -> list[str]:
    """Split a GET path on unescaped ``/`` and unescape ``!x`` to ``x``.

    A trailing slash adds no empty part, as in Jolokia's EscapeUtil.split.
    """
    parts: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(path):
        ch = path[i]
        if ch == "!" and i + 1 < len(path):
            current.append(path[i + 1])
            i += 2
            continue
        if ch == "/":
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    if current:
        parts.append("".join(current))
    return parts


def escape_part(part: str) -> str:
    """Escape one path part so that ``split_path`` gives it back unchanged."""
    return part.replace("!", "!!").replace("/", "!/")


def _special_value(text: str) -> str | None:
    """GET spellings of values a URL cannot hold: ``[null]`` and ``""``."""
    if text == "[null]":
        return None
    if text == '""':
        return ""
    return text


def _path_text(parts: list[str]) -> str | None:
    return "/".join(escape_part(p) for p in parts) or None


def parse_get_path(path: str) -> dict[str, Any]:
    """Turn a decoded GET path (``read/testbed:type=Clock/OffsetMs``) into a request object."""
    parts = split_path(path[1:] if path.startswith("/") else path)
    if not parts:
        return {"type": "version"}
    kind, args = parts[0].lower(), parts[1:]

    def need(count: int, what: str) -> None:
        if len(args) < count:
            raise BadRequest(f"a GET {kind} needs {what}: {kind}/{'/'.join(what.split(', '))}")

    request: dict[str, Any] = {"type": kind}
    if kind == "read":
        need(1, "mbean")
        request["mbean"] = args[0]
        if len(args) > 1 and args[1]:
            names = _split_csv(args[1])
            request["attribute"] = names if len(names) > 1 else names[0]
        path_text = _path_text(args[2:])
    elif kind == "write":
        need(3, "mbean, attribute, value")
        request.update(mbean=args[0], attribute=args[1], value=_special_value(args[2]))
        path_text = _path_text(args[3:])
    elif kind == "exec":
        need(2, "mbean, operation")
        request.update(
            mbean=args[0], operation=args[1], arguments=[_special_value(a) for a in args[2:]]
        )
        path_text = None
    elif kind == "list":
        path_text = _path_text(args)
    elif kind == "search":
        need(1, "pattern")
        request["mbean"] = args[0]
        path_text = None
    elif kind == "version":
        path_text = None
    else:
        raise BadRequest(
            f"unknown request type {kind!r}; use read, write, exec, list, search or version"
        )
    if path_text is not None:
        request["path"] = path_text
    return request


def _split_csv(text: str) -> list[str]:
    """Split an attribute list on commas not escaped with a backslash (Jolokia CSV_ESCAPE)."""
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for ch in text:
        if escaped:
            current.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p for p in parts if p]
