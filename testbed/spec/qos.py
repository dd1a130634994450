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


def check_model(entry: Any, params: dict[str, Any], topo: TopologySpec,
                faults: list[Any]) -> tuple[list[tuple[Loc, str]], list[tuple[Loc, str]]]:
    """A topology or fault plan outside the model the protocol's bound is proven in
    (catalogue `Model`, 004 §2.1 and the algorithm's section): (problems located in the
    topology, problems located in the experiment). None for a protocol without a model; an
    experiment with `outside_model: true` is not checked (the run measures each assumption
    instead, summary.json `qos.assumptions`)."""
    from testbed.spec.topology import ReorderSpec, links

    model = entry.model
    if model is None:
        return [], []
    name = entry.name
    why = f"outside {name}'s model ({model.source}); `outside_model: true` runs it anyway"
    loss_ok = model.loss and (not model.loss_param
                              or float(params.get(model.loss_param, 0) or 0) > 0)
    loss_text = (f"no loss unless `{model.loss_param}` > 0" if model.loss and model.loss_param
                 else "no loss")
    topo_problems: list[tuple[Loc, str]] = []
    for loc, link in links(topo):
        if model.fifo and isinstance(link.reorder, ReorderSpec) and link.reorder.probability:
            topo_problems.append((loc + ("reorder",), f"reordering links: {name} assumes FIFO "
                                                      f"links; {why}"))
        elif model.fifo and link.jitter and link.reorder is not False:
            topo_problems.append((loc + ("reorder",), "jitter without `reorder: false` "
                                  f"reorders datagrams: {name} assumes FIFO links; {why}"))
        if not loss_ok:
            for key in ("loss", "gemodel", "corrupt"):
                if getattr(link, key, None):
                    topo_problems.append((loc + (key,), f"lossy link: {name} assumes "
                                                        f"{loss_text}; {why}"))
        if not model.duplicate and link.duplicate:
            topo_problems.append((loc + ("duplicate",), f"duplicating link: {name} assumes "
                                                        f"none; {why}"))
    gamma = params.get("gamma", 10)
    try:
        half_gamma: int | None = duration_ns(gamma) // 2
    except ValueError:
        half_gamma = None  # check_qos_params reports it
    if half_gamma is not None and half_gamma < 0:
        half_gamma = None
    if model.clocks and half_gamma is not None:
        for i, host in enumerate(topo.hosts):
            if abs(host.clock.offset) > half_gamma:
                topo_problems.append((("hosts", i, "clock", "offset"), f"clock offset "
                                      f"{host.clock.offset / 1e6:g}ms beyond Γ/2 = "
                                      f"{half_gamma / 1e6:g}ms (004 §2.2); {why}"))
            elif host.clock.drift:
                topo_problems.append((("hosts", i, "clock", "drift"), "a drifting clock "
                                      f"leaves Γ/2 (004 §2.2); {why}"))
    exp_problems: list[tuple[Loc, str]] = []
    failure = {"crash": "crash", "restart": "crash", "pause": "pause", "resume": "pause",
               "partition": "partition", "heal": "partition"}
    for i, f in enumerate(faults):
        at: Loc = ("faults", i, "kind")
        kind = getattr(f, "kind", "")
        if kind in failure and failure[kind] not in model.failures:
            allowed = ", ".join(sorted(model.failures)) or "none"
            exp_problems.append((at, f"{kind}: {name} assumes no such failure (allowed: "
                                      f"{allowed}); {why}"))
        elif kind == "clock" and model.clocks:
            offset = getattr(f, "offset", None)
            if offset is None or half_gamma is None or abs(offset) > half_gamma:
                exp_problems.append((at, f"clock fault: {name} assumes clock offsets within "
                                          f"Γ/2 (004 §2.2); {why}"))
        elif kind in ("link", "loss-burst"):
            if getattr(f, "loss", None) and not loss_ok:
                exp_problems.append((("faults", i, "loss"), f"link loss: {name} assumes "
                                                            f"{loss_text}; {why}"))
            if getattr(f, "path_jitter", None) and model.fifo:
                exp_problems.append((("faults", i, "path_jitter"), f"link jitter may reorder: "
                                     f"{name} assumes FIFO links; {why}"))
    return topo_problems, exp_problems
