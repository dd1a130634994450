"""Cross-field checks of the QoS protocols' params (004) against the topology.

The params `delta`, `gamma`, `theta` (and `epoch_ms`) are durations: a number of ms or a text
with a unit (nodes/protocols/qos_common.py `duration_ns`). Δ is a promise about the network
(004 §2.1: the largest one-way latency), so a declared Δ below the topology's largest path
delay plus jitter can never hold; Θ = 0 makes every slot empty (§5). Each problem is reported
at the param's line, and nothing is created.
"""

from __future__ import annotations

from typing import Any

from nodes.protocols.qos_common import duration_ns
from testbed.spec.topology import Loc, TopologySpec

DURATIONS = ("delta", "gamma", "theta")


def check_qos_params(name: str, params: dict[str, Any], topo: TopologySpec,
                     bound: str) -> list[tuple[Loc, str]]:
    if not bound:
        return []
    problems: list[tuple[Loc, str]] = []
    values: dict[str, int] = {}
    for key in DURATIONS:
        if key not in params:
            continue
        loc: Loc = ("protocol", "params", key)
        try:
            values[key] = duration_ns(params[key])
        except ValueError as exc:
            problems.append((loc, str(exc)))
            continue
        if values[key] < 0 or (values[key] == 0 and key != "gamma"):  # Γ = 0: exact clocks
            problems.append((loc, f"{key} must be positive, got {params[key]!r}"))
    delta = values.get("delta")
    if delta is not None and delta > 0:
        try:
            paths = topo.paths().paths
        except Exception:  # the topology's own checks report it
            paths = {}
        worst = max(((p.delay_ns + p.jitter_ns, f"{a}->{b}") for (a, b), p in paths.items()),
                    default=None)
        if worst is not None and worst[0] > delta:
            problems.append((("protocol", "params", "delta"),
                             f"delta {delta / 1e6:g}ms is smaller than the topology's largest "
                             f"path delay ({worst[1]}: {worst[0] / 1e6:g}ms with jitter); "
                             f"{name}'s bound would never hold"))
    return problems
