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


def reservations(entry: Any, params: dict[str, Any], topo: TopologySpec,
                 payload_size: int) -> dict[str, float]:
    """Per host, the bits/s the protocol reserves when it starts (its `Reserve` actions, the
    largest), asked of the protocol's own code as a node builds it (nodes/core.py
    `resolve_params`, incarnation 0) -- the rate 004 §2.1 assumes the network carries."""
    from nodes.protocols import catalogue
    from nodes.protocols.base import Reserve

    ids = {h.name: i for i, h in enumerate(topo.hosts)}
    resolved = dict(params, incarnation=0, start_at_ns=0, payload_size=payload_size,
                    member_names={i: n for n, i in ids.items()})
    for key in entry.host_params():
        if resolved.get(key) is not None:
            resolved[f"{key}_id"] = ids[resolved.pop(key)]
        else:
            resolved.pop(key, None)
    if entry.resolve_hosts is not None:
        resolved = entry.resolve_hosts(resolved, ids)
    out: dict[str, float] = {}
    for host, me in ids.items():
        acts = catalogue.build(entry.name, me, list(ids.values()), dict(resolved)).start(0)
        out[host] = max((a.rate_bps for a in acts if isinstance(a, Reserve)), default=0.0)
    return out


def _senders(loc: Loc, topo: TopologySpec) -> list[str]:
    """The hosts whose every datagram to some member crosses the link at `loc`: a site's LAN
    carries its hosts' sends, a WAN link its two sites' hosts', a matrix entry its source's."""
    if loc[0] == "sites":
        return [h.name for h in topo.hosts if h.site == loc[1]]
    if loc[0] == "wan":
        ends = {site for pair in topo.wan[int(loc[1])].directions() for site in pair}
        return [h.name for h in topo.hosts if h.site in ends]
    return [str(loc[1])]


def _mbean_type(mbean: str) -> str | None:
    """`type` of a `testbed` MBean name (a pattern: the first of the model-relevant types it
    selects), None for another domain or a malformed name (the run reports it)."""
    from nodes.management.objectname import MalformedObjectName, ObjectName

    try:
        name = ObjectName.parse(mbean)
    except MalformedObjectName:
        return None
    return next((t for t in ("Clock", "Paths", "Network", "Node")
                 if name.matches(ObjectName.parse(f"testbed:type={t}"))), None)


def _mgmt_problem(f: Any, name: str, model: Any, half_gamma: int | None
                  ) -> tuple[str, str] | None:
    """A management write or operation that leaves the model: (the fault's key, what it
    does), None when it stays inside. A clock write is inside only as `OffsetMs` within Γ/2
    (as a `clock` fault's `offset`); `Paths` `setPath` changes a path's delay, jitter and
    loss at run time; `Network` `block` is a partition, `Node` `stop` a crash."""
    kind = _mbean_type(f.mbean)
    op = str(f.exec_[0]) if f.exec_ else ""
    key = "write" if f.write is not None else "exec"
    if kind == "Clock" and model.clocks:
        write = f.write or {}
        try:
            within = (f.exec_ is None and set(write) == {"OffsetMs"} and half_gamma is not None
                      and abs(float(write["OffsetMs"])) * 1e6 <= half_gamma)
        except (TypeError, ValueError):
            within = False
        if not within:
            return key, (f"management clock write other than an `OffsetMs` within Γ/2: {name} "
                         "assumes clock offsets within Γ/2 (004 §2.2)")
    elif kind == "Paths" and op == "setPath":
        return key, (f"management path change (`setPath`): {name} assumes FIFO links and every "
                     "path within Δ (004 §2.1)")
    elif kind == "Network" and op == "block" and "partition" not in model.failures:
        return key, f"management partition (`block`): {name} assumes no such failure"
    elif kind == "Node" and op == "stop" and "crash" not in model.failures:
        return key, f"management crash (`stop`): {name} assumes no such failure"
    return None


def _link_problems(i: int, f: Any, name: str, model: Any, delta: int | None, paths: Any,
                   faults: list[Any], why: str) -> list[tuple[Loc, str]]:
    """A `link` fault's `delay` against the model: beyond Δ with the path's jitter (004 §2.1),
    or, on FIFO links, any change but a raise for good that no other `link` fault touches
    (a lower delay lets later datagrams overtake those in flight; a raise that ends is a
    lowering when it ends)."""
    if f.delay is None:
        return []
    pair = set(f.between)
    both = [p for p in (paths.get(tuple(f.between)), paths.get(tuple(reversed(f.between))))
            if p is not None]
    out: list[tuple[Loc, str]] = []
    at: Loc = ("faults", i, "delay")
    jitter = max([f.path_jitter or 0] + [p.jitter_ns for p in both if f.path_jitter is None])
    if model.delays and delta is not None and f.delay + jitter > delta:
        out.append((at, f"link delay {f.delay / 1e6:g}ms (with jitter {jitter / 1e6:g}ms) "
                        f"beyond Δ = {delta / 1e6:g}ms: {name} assumes every path within Δ "
                        f"(004 §2.1); {why}"))
    elif model.fifo:
        lower = any(f.delay < p.delay_ns for p in both)
        ends = f.for_ is not None or f.every is not None
        other = any(g is not f and getattr(g, "kind", "") in ("link", "loss-burst")
                    and getattr(g, "delay", None) is not None and set(g.between) == pair
                    for g in faults)
        if lower or (ends and any(f.delay != p.delay_ns for p in both)) or other:
            out.append((at, "link delay change reorders datagrams in flight (a lower delay "
                            f"overtakes them; a raise that ends lowers it): {name} assumes "
                            f"FIFO links; {why}"))
    return out


def check_model(entry: Any, params: dict[str, Any], topo: TopologySpec, faults: list[Any],
                payload_size: int) -> tuple[list[tuple[Loc, str]], list[tuple[Loc, str]]]:
    """A topology or fault plan outside the model the protocol's bound is proven in
    (catalogue `Model`, 004 §2.1 and the algorithm's section): (problems located in the
    topology, problems located in the experiment). None for a protocol without a model; an
    experiment with `outside_model: true` is not checked (the run measures each assumption
    instead, summary.json `qos.assumptions`). Every way out is checked: the topology's links
    (reordering, loss, duplication, a bandwidth below a sending host's reservation) and
    clocks, the schedule's failures, `clock` and `link` faults, and management writes
    (`mgmt` faults on `testbed:type=Clock`, `Paths`, `Network`, `Node`)."""
    from testbed.spec.topology import ReorderSpec, links

    model = entry.model
    if model is None:
        return [], []
    name = entry.name
    why = f"outside {name}'s model ({model.source}); `outside_model: true` runs it anyway"
    try:
        paths = topo.paths().paths
    except Exception:  # the topology's own checks report it
        paths = {}
    try:
        delta: int | None = duration_ns(params.get("delta", getattr(entry.params, "delta",
                                                                    50)))
    except ValueError:
        delta = None  # check_qos_params reports it
    loss_ok = model.loss and (not model.loss_param
                              or float(params.get(model.loss_param, 0) or 0) > 0)
    loss_text = (f"no loss unless `{model.loss_param}` > 0" if model.loss and model.loss_param
                 else "no loss")
    topo_problems: list[tuple[Loc, str]] = []
    reserved: dict[str, float] = {}
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
        if link.bandwidth:
            reserved = reserved or reservations(entry, params, topo, payload_size)
            need = max(((reserved.get(h, 0.0), h) for h in _senders(loc, topo)), default=None)
            if need is not None and link.bandwidth < need[0]:
                topo_problems.append((loc + ("bandwidth",), f"bandwidth {link.bandwidth:,} "
                                      f"bit/s below {need[1]}'s reservation {need[0]:,.0f} "
                                      f"bit/s: {name} assumes the network carries the "
                                      f"reserved rate (004 §2.1); {why}"))
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
    if model.delays and delta is not None and "delta" not in params:  # given: check_qos_params
        worst = max(((p.delay_ns + p.jitter_ns, f"{a}->{b}") for (a, b), p in paths.items()),
                    default=None)
        if worst is not None and worst[0] > delta:
            exp_problems.append((("protocol", "name"), f"path {worst[1]}: {worst[0] / 1e6:g}ms "
                                 f"with jitter, beyond {name}'s default delta "
                                 f"{delta / 1e6:g}ms (004 §2.1: every path within Δ); set "
                                 f"`delta`, or: {why}"))
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
        elif kind == "mgmt":
            found = _mgmt_problem(f, name, model, half_gamma)
            if found is not None:
                exp_problems.append((("faults", i, found[0]), f"{found[1]}; {why}"))
        elif kind in ("link", "loss-burst"):
            exp_problems += _link_problems(i, f, name, model, delta, paths, faults, why)
            if getattr(f, "loss", None) and not loss_ok:
                exp_problems.append((("faults", i, "loss"), f"link loss: {name} assumes "
                                                            f"{loss_text}; {why}"))
            if getattr(f, "path_jitter", None) and model.fifo:
                exp_problems.append((("faults", i, "path_jitter"), f"link jitter may reorder: "
                                     f"{name} assumes FIFO links; {why}"))
    return topo_problems, exp_problems
