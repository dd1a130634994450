"""Prometheus text exposition (format 0.0.4) of every numeric MBean attribute.

``testbed:type=TotalOrder,protocol=seto`` attribute ``OptDelivered`` becomes the gauge
``testbed_total_order_opt_delivered{protocol="seto"} 42``: the domain, the ``type`` key and
the attribute, snake-cased; the other ObjectName keys become labels. Booleans are 0/1 so
flags such as "in the primary partition" can be graphed; lists and maps are left out.
"""

from __future__ import annotations

import math
import re
from typing import Any

from nodes.management.mbeans import MBeanRegistry

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_NUMERIC = ("int", "float", "bool")


def snake_case(name: str) -> str:
    """``OffsetMs`` -> ``offset_ms``, ``RTTMillis`` -> ``rtt_millis``, ``QoS`` -> ``qos``.

    A lone capital at the end of a name does not start a new word, so that ``QoS`` (an
    MBean type in docs/architecture.md) reads as one; other non-word characters become ``_``.
    """
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z].)|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return re.sub(r"[^a-zA-Z0-9_]", "_", text).lower()


def _metric_name(*parts: str) -> str:
    name = "_".join(snake_case(p) for p in parts if p)
    name = re.sub(r"_+", "_", name)
    return name if re.match(r"[a-zA-Z_]", name) else f"_{name}"


def _label_name(key: str) -> str:
    name = re.sub(r"[^a-zA-Z0-9_]", "_", key)
    # Names starting with __ are reserved for Prometheus itself.
    return f"k{name}" if name[:1].isdigit() or name.startswith("__") else name


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _format_value(value: Any) -> str | None:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "+Inf" if value > 0 else "-Inf"
        return repr(value)
    return None


def render_metrics(registry: MBeanRegistry) -> str:
    """All numeric attributes of all MBeans, one gauge family per metric name."""
    families: dict[str, tuple[str, list[str]]] = {}
    for bean in registry:
        type_name = bean.name.get("type") or ""
        labels = [
            f'{_label_name(k)}="{_escape_label(bean.name.get(k) or "")}"'
            for k, _ in bean.name.keys
            if k != "type"
        ]
        label_text = "{" + ",".join(labels) + "}" if labels else ""
        for attr in bean.attributes.values():
            if attr.type not in _NUMERIC:
                continue
            try:
                text = _format_value(attr.getter())
            except Exception:  # one failing getter must not take the whole scrape down
                continue
            if text is None:
                continue
            name = _metric_name(bean.name.domain, type_name, attr.name)
            help_text = attr.description or f"{bean.name.canonical} {attr.name}"
            families.setdefault(name, (help_text, []))[1].append(f"{name}{label_text} {text}")
    lines: list[str] = []
    for name, (help_text, samples) in families.items():
        lines.append(f"# HELP {name} {_escape_help(help_text)}")
        lines.append(f"# TYPE {name} gauge")
        lines.extend(samples)
    return "\n".join(lines) + "\n" if lines else ""
