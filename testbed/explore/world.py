"""Drawing a seed's world for `testbed explore` in world mode (docs/explore.md "Worlds").

A world is everything around the fault schedule: the hosts and their one-way paths (a delay
matrix, asymmetric and breaking the triangle inequality at will, with jitter, loss,
duplication, reordering and bandwidth where the protocol's model allows them), the workload
(senders, rate, sizes, arrivals, duration) and the protocol's parameters. Every value comes
from `random.Random(f"explore:{seed}:world")`, so a seed names its world.

Swarm testing (Groce et al., ISSTA 2012): each seed turns a random subset of FEATURES on; a
feature that is off keeps today's set-up for its part of the world (four hosts on two sites
10 ms apart, all sending 20 messages/s of 512 B for 3 s, default parameters). A world's work
is bounded: planned messages x hosts stay within MESSAGE_BUDGET, the duration shrinking
first, then the rate, so that a drawn world costs at most a few of today's seeds.

A drawn world is a list of (key, value) overrides of the spec (`topology`,
`workload.rate`, `protocol.params.fd_timeout_ms`, ...) plus the duration: what the case
applies and what shrinking moves back toward round values and defaults.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any

from nodes.protocols.qos_common import duration_ns
from testbed.explore.generators import Model

FEATURES = ("hosts", "sites", "delays", "asymmetric", "triangle", "jitter", "loss",
            "one_way_loss", "duplicate", "reorder", "bandwidth", "senders", "rate", "size",
            "arrival", "duration", "params", "fd_timeout")
MESSAGE_BUDGET = 10_000  # planned messages x hosts (today's set-up: 240 x 4 = 960)
DEFAULT_HOSTS, DEFAULT_SITES = 4, 2
LAN_MS, WAN_MS = 0.5, 10.0
DEFAULT_RATE, DEFAULT_SIZE, DEFAULT_DURATION_S = 20.0, 512, 3.0
MAX_RATE = 2000.0
#: The share of its reservation a reserved sender offers at most (nodes/reservation.py: the
#: policer holds 200 ms of it).
RESERVATION_SHARE = 0.5
#: The share of Δ a bounded-delay model's largest path delay plus jitter takes at most, and
#: of that the share jitter takes: the rest absorbs serialisation and processing time.
DELTA_SHARE, JITTER_SHARE = 0.8, 0.1
BANDWIDTH_HEADROOM = 4  # "overload": far beyond what a WAN sequencer orders
Override = tuple[str, Any]


@dataclass(frozen=True)
class World:
    """A drawn world: the features on, the spec overrides and the duration."""

    features: tuple[str, ...]
    overrides: tuple[Override, ...]
    duration_ns: int


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def _ms(x: float) -> str:
    return f"{round(x, 3):g}ms"


def _pct(x: float) -> str:
    return f"{round(x, 2):g}%"


def topology(rng: random.Random, on: set[str], model: Model) -> dict[str, Any]:
    """An inline matrix topology: hosts h1..hN spread over sites, a one-way link per ordered
    pair."""
    n = rng.randint(2, 9) if "hosts" in on else DEFAULT_HOSTS
    k = min(n, rng.randint(1, 4)) if "sites" in on else min(n, DEFAULT_SITES)
    site = [i * k // n for i in range(n)]  # contiguous blocks: h1.. on site 0, ...
    if "delays" in on:  # per pair of sites (both directions) and per site's LAN
        lan = [_log_uniform(rng, 0.1, 5.0) for _ in range(k)]
        wan = {(a, b): _log_uniform(rng, 1.0, 300.0) for a in range(k) for b in range(a + 1, k)}
    else:
        lan, wan = [LAN_MS] * k, {(a, b): WAN_MS for a in range(k) for b in range(a + 1, k)}
    names = [f"h{i + 1}" for i in range(n)]
    delay: dict[tuple[int, int], float] = {}
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            a, b = sorted((site[i], site[j]))
            d = lan[a] if a == b else wan[(a, b)]
            if "asymmetric" in on and i < j:
                d *= _log_uniform(rng, 0.3, 3.0)
            delay[(i, j)] = max(0.1, min(300.0, d))
    if "triangle" in on and n >= 3:  # a direct path slower than the detour via a third host
        i, j, m = rng.sample(range(n), 3)
        delay[(i, j)] = min(300.0, max(delay[(i, j)], 3 * (delay[(i, m)] + delay[(m, j)])))
    link: dict[str, Any] = {}
    if "jitter" in on:
        link["jitter"] = _ms(_log_uniform(rng, 0.05, 10.0))
        if not ("reorder" in on and model.reorder):
            link["reorder"] = False  # jitter, FIFO per path
    if "reorder" in on and model.reorder:
        link["reorder"] = True
        link.setdefault("jitter", _ms(_log_uniform(rng, 0.5, 10.0)))
    if "loss" in on and model.loss:
        link["loss"] = _pct(rng.uniform(0.1, 30.0))
    if "duplicate" in on and model.duplicate:
        link["duplicate"] = _pct(rng.uniform(0.1, 10.0))
    if "bandwidth" in on and model.delays:
        link["bandwidth"] = f"{round(_log_uniform(rng, 1, 1000))}mbit"
    one_way, one_way_loss = None, ""
    if "one_way_loss" in on and model.loss and n >= 2:
        one_way = tuple(rng.sample(range(n), 2))
        one_way_loss = _pct(rng.uniform(1.0, 30.0))
    matrix: dict[str, dict[str, Any]] = {}
    for (i, j), d in sorted(delay.items()):
        entry: dict[str, Any] = {"delay": _ms(d), **link}
        if (i, j) == one_way:
            entry["loss"] = one_way_loss
        matrix.setdefault(names[i], {})[names[j]] = entry
    return {"name": f"world-{n}h{k}s", "hosts": [{"name": h} for h in names],
            "matrix": matrix}


def workload(rng: random.Random, on: set[str], hosts: list[str]) -> tuple[list[Override], float]:
    """Workload overrides and the duration in seconds, within MESSAGE_BUDGET."""
    out: list[Override] = []
    senders: list[str] = hosts
    if "senders" in on and len(hosts) > 1:
        senders = sorted(rng.sample(hosts, rng.randint(1, len(hosts))), key=hosts.index)
        out.append(("workload.senders", senders))
    else:
        out.append(("workload.senders", "all"))
    rate = _log_uniform(rng, 1.0, MAX_RATE) if "rate" in on else DEFAULT_RATE
    duration = rng.uniform(1.0, 30.0) if "duration" in on else DEFAULT_DURATION_S
    work = len(senders) * len(hosts)  # messages x hosts per (message/s x s)
    if rate * duration * work > MESSAGE_BUDGET:  # shorter first, then slower
        duration = max(1.0, MESSAGE_BUDGET / (rate * work))
        rate = min(rate, MESSAGE_BUDGET / (duration * work))
    out.append(("workload.rate", f"{max(1.0, round(rate, 1)):g}/s"))
    size = round(_log_uniform(rng, 16, 65536)) if "size" in on else DEFAULT_SIZE
    out.append(("workload.size", f"{size}B"))
    arrival = rng.choice(("constant", "poisson", "bursty")) if "arrival" in on else "poisson"
    if arrival == "bursty":
        slot_ms = rng.choice((50, 100, 200, 500))
        per_slot = max(1.0, rate * slot_ms / 1000)
        out += [("workload.arrival", "vbr"), ("workload.avg", f"{max(1.0, round(rate, 1)):g}/s"),
                ("workload.max_burst", max(1, round(per_slot * rng.uniform(2, 8)))),
                ("workload.slot", f"{slot_ms}ms")]
    else:
        out.append(("workload.arrival", arrival))
    return out, round(duration, 1)


def params(rng: random.Random, on: set[str], params_cls: type | None) -> list[Override]:
    """Protocol parameters: the detector timeout in 100-1,000 ms, and a random subset of the
    numeric parameters in [default / 4, default x 4] within their documented limits."""
    out: list[Override] = []
    if "fd_timeout" in on:
        out.append(("protocol.params.fd_timeout_ms", rng.randint(100, 1000)))
    if "params" not in on or params_cls is None:
        return out
    for f in fields(params_cls):
        if f.name.startswith("fd_") or f.default is MISSING:
            continue
        default = f.default
        if isinstance(default, bool) or not isinstance(default, int | float) or default <= 0:
            continue
        if rng.random() < 0.5:
            continue
        meta = f.metadata
        lo, hi = default / 4, default * 4
        lo = max(lo, float(meta.get("ge", meta.get("gt", lo))))
        hi = min(hi, float(meta.get("le", meta.get("lt", hi))))
        if lo > hi:
            continue
        value: Any = _log_uniform(rng, max(lo, 1e-3), max(hi, 1e-3))
        value = max(int(lo) if lo == int(lo) else 1, round(value)) if isinstance(
            default, int) else round(value, 3)
        if "gt" in meta and value <= meta["gt"]:
            continue
        out.append((f"protocol.params.{f.name}", value))
    return out


def _enough_bandwidth(topo: dict[str, Any], load: dict[str, Any], hosts: int) -> None:
    """A drawn bandwidth carries at least BANDWIDTH_HEADROOM x the workload's offered bits
    per second (every sender's messages on one path): a path slower than that never drains,
    and a run that cannot drain tells nothing about the protocol."""
    senders = hosts if load["workload.senders"] == "all" else len(load["workload.senders"])
    rate = float(str(load["workload.rate"]).removesuffix("/s"))
    size = int(str(load["workload.size"]).removesuffix("B"))
    need = math.ceil(BANDWIDTH_HEADROOM * rate * size * 8 * senders / 1e6)
    for row in topo["matrix"].values():
        for entry in row.values():
            if "bandwidth" in entry:
                have = int(entry["bandwidth"].removesuffix("mbit"))
                entry["bandwidth"] = f"{max(have, need)}mbit"


def _param_value(drawn: list[Override], model_params: type | None,
                 spec: Mapping[str, Any]) -> Any:
    """A lookup of the world's protocol parameters: drawn, else the spec's, else the
    default."""
    values = {**spec, **{k.removeprefix("protocol.params."): v for k, v in drawn}}
    defaults = {f.name: f.default for f in fields(model_params)} if model_params else {}

    def value(name: str) -> Any:
        return values.get(name, defaults.get(name))

    return value


def _within_reservation(load: list[Override], drawn: list[Override], model: Model,
                        params_cls: type | None, spec: Mapping[str, Any]) -> list[Override]:
    """The workload of a reserved-rate model (Model.reserved_rate): each sender offers at most
    RESERVATION_SHARE of its reservation (and of k messages per slot Θ, Model.slot_burst), at
    constant intervals: a Poisson source does not conform to a token bucket (at half a 14/s
    reservation it overflowed the policer's 200 ms queue within seconds). Beyond its
    reservation a sender is policed and its datagrams dropped, or queues without end, which
    the model rules out (004 §2.1) and no protocol of it recovers from."""
    if not model.reserved_rate or params_cls is None:
        return load
    value = _param_value(drawn, params_cls, spec)
    reserved = value(model.reserved_rate)
    cap = float(min(reserved.values()) if isinstance(reserved, dict) else reserved)
    if model.slot_burst:
        k, theta = model.slot_burst
        cap = min(cap, float(value(k)) * 1e9 / duration_ns(value(theta)))
    cap = max(1.0, math.floor(cap * RESERVATION_SHARE))
    out: list[Override] = []
    for key, v in load:
        if key in ("workload.avg", "workload.max_burst", "workload.slot"):
            continue
        if key == "workload.rate":
            v = f"{min(float(str(v).removesuffix('/s')), cap):g}/s"
        elif key == "workload.arrival":
            v = "constant"
        out.append((key, v))
    return out


def _within_delta(topo: dict[str, Any], drawn: list[Override], model: Model,
                  params_cls: type | None, spec: Mapping[str, Any]) -> None:
    """The paths of a bounded-delay model (Model.delay_bound: every path's delay plus jitter
    within Δ, 004 §2.1), scaled down together, asymmetry and triangles kept: the largest
    delay plus jitter takes at most DELTA_SHARE of Δ, jitter JITTER_SHARE of that. A path
    beyond Δ leaves the model (spec validation refuses it), and a late datagram there is
    a failure the protocol's detector acts on (004 §6.2)."""
    if not model.delay_bound or params_cls is None:
        return
    budget = duration_ns(_param_value(drawn, params_cls, spec)(model.delay_bound)) / 1e6
    budget *= DELTA_SHARE
    entries = [e for row in topo["matrix"].values() for e in row.values()]
    jitter = max((duration_ns(e["jitter"]) / 1e6 for e in entries if "jitter" in e),
                 default=0.0)
    jitter = min(jitter, budget * JITTER_SHARE)
    worst = max(duration_ns(e["delay"]) / 1e6 for e in entries)
    scale = min(1.0, (budget - jitter) / worst)
    for e in entries:
        e["delay"] = _ms(max(0.1, duration_ns(e["delay"]) / 1e6 * scale))
        if "jitter" in e:
            e["jitter"] = _ms(min(duration_ns(e["jitter"]) / 1e6, jitter))


def draw_world(seed: int, model: Model, params_cls: type | None,
               features: tuple[str, ...] = FEATURES,
               spec_params: Mapping[str, Any] | None = None) -> World:
    """Seed `seed`'s world: each of `features` on with probability 1/2 (swarm testing).
    `spec_params`: the spec's own protocol parameters (a reserved-rate model's bounds)."""
    rng = random.Random(f"explore:{seed}:world")
    on = {f for f in features if rng.random() < 0.5}
    topo = topology(rng, on, model)
    hosts = [h["name"] for h in topo["hosts"]]
    load, duration_s = workload(rng, on, hosts)
    _enough_bandwidth(topo, dict(load), len(hosts))
    drawn = params(rng, on, params_cls)
    load = _within_reservation(load, drawn, model, params_cls, spec_params or {})
    _within_delta(topo, drawn, model, params_cls, spec_params or {})
    overrides: list[Override] = [("topology", topo), *load, *drawn]
    return World(tuple(f for f in FEATURES if f in on), tuple(overrides),
                 round(duration_s * 1000) * 1_000_000)


def shape(topo: dict[str, Any]) -> str:
    """The topology's shape for coverage: hosts, sites, and how its paths look."""
    hosts = len(topo.get("hosts") or [])
    sites = len(topo.get("sites") or {}) or str(topo.get("name", "")).rpartition("h")[2]
    return f"{hosts}h{sites}" if topo.get("matrix") else f"{hosts}h{sites}s"
