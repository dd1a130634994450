"""Shaping plans: what each host's egress must look like to realise the path matrix.

Per host: an HTB root whose class 1:1 carries the host's reserved rate (its QoS capacity), one
child class per destination with that path's rate, and a leaf with the path's delay, jitter
(with its distribution), loss and queue limit, selected by a u32 filter on the destination IP.
Traffic to anything else (ARP, the control plane never crosses this device) falls into the
unshaped default class 1:2. This is the structure Mininet's `TCIntf.config` builds per link,
here per destination so one access interface realises a full one-way delay matrix.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from testbed.spec.topology import Path, PathMatrix, TopologySpec

#: Rate assumed when neither the path nor the host names one; only sizes queues and the root.
DEFAULT_LINK_BPS = 1_000_000_000
#: netem's default queue limit, in packets.
NETEM_DEFAULT_LIMIT = 1000
MTU_BYTES = 1500
#: Smallest datagram the queue-size bound assumes (an ICMP echo or a small protocol message);
#: bandwidth x delay over this size bounds how many packets can sit in a delay line.
MIN_PACKET_BYTES = 100
FIRST_MINOR = 0x100


@dataclass(frozen=True, slots=True)
class ClassPlan:
    """One destination's class: HTB rate and the delay line in front of it."""

    dst: str
    dst_ip: str
    minor: int  # HTB class 1:<minor>, netem handle <minor>: (both hex in tc syntax)
    delay_ns: int
    jitter_ns: int
    distribution: str
    loss: float
    rate_bps: int
    limit: int
    # The whole path, for what the fields above do not say: netem's correlations, the
    # Gilbert-Elliott model, duplication, corruption, reordering, `rate`, FIFO
    # (docs/link-model.md).
    path: Path = Path(0)

    @property
    def classid(self) -> str:
        return f"1:{self.minor:x}"

    @property
    def handle(self) -> str:
        return f"{self.minor:x}:"


@dataclass(frozen=True)
class HostPlan:
    host: str
    dev: str
    root_rate_bps: int
    classes: list[ClassPlan]
    warnings: list[str] = field(default_factory=list)

    def by_ip(self) -> dict[str, ClassPlan]:
        return {c.dst_ip: c for c in self.classes}

    def class_for(self, dst: str) -> ClassPlan:
        for c in self.classes:
            if dst in (c.dst, c.dst_ip):
                return c
        raise KeyError(f"{self.host} has no class for {dst}")


def queue_limit(rate_bps: int, delay_ns: int, jitter_ns: int) -> int:
    """Packets that can be in the delay line at once: rate x (delay + 3 jitter) over the
    smallest packet, with 25% headroom; never below netem's default."""
    seconds = (delay_ns + 3 * jitter_ns) / 1e9
    packets = math.ceil(1.25 * rate_bps * seconds / (8 * MIN_PACKET_BYTES))
    return max(NETEM_DEFAULT_LIMIT, packets)


def class_plan(dst: str, dst_ip: str, minor: int, path: Path, root_rate: int) -> ClassPlan:
    rate = min(path.bandwidth_bps or root_rate, root_rate)
    limit = path.limit or queue_limit(rate, path.delay_ns, path.jitter_ns)
    return ClassPlan(dst, dst_ip, minor, path.delay_ns, path.jitter_ns, path.distribution,
                     path.loss, rate, limit, path)


def host_plans(topology: TopologySpec, paths: PathMatrix, addresses: dict[str, str],
               dev: str) -> dict[str, HostPlan]:
    """One plan per host; `addresses` maps host name to its data-plane IPv4."""
    qos = {h.name: h.qos.rate for h in topology.hosts}
    plans = {}
    for src in paths.hosts:
        root = qos.get(src) or DEFAULT_LINK_BPS
        classes, warnings = [], []
        for i, dst in enumerate(d for d in paths.hosts if d != src):
            c = class_plan(dst, addresses[dst], FIRST_MINOR + i, paths.get(src, dst), root)
            configured = paths.get(src, dst).bandwidth_bps or qos.get(src)
            # Only a rate the topology names is worth a warning; the default just sizes queues.
            if configured and c.limit > NETEM_DEFAULT_LIMIT and not c.path.limit:
                warnings.append(
                    f"{src}->{dst}: {c.rate_bps / 1e6:g} Mbit/s x "
                    f"{(c.delay_ns + 3 * c.jitter_ns) / 1e6:g} ms holds up to {c.limit} packets; "
                    f"netem's default limit {NETEM_DEFAULT_LIMIT} would drop, limit set to "
                    f"{c.limit}")
            classes.append(c)
        plans[src] = HostPlan(src, dev, root, classes, warnings)
    return plans


def with_path(plan: HostPlan, dst: str, path: Path) -> HostPlan:
    """The plan after a runtime change of one destination's path."""
    old = plan.class_for(dst)
    new = class_plan(old.dst, old.dst_ip, old.minor, path, plan.root_rate_bps)
    return replace(plan, classes=[new if c.minor == old.minor else c for c in plan.classes])


def change_link(plans: dict[str, HostPlan], paths: PathMatrix, between: tuple[str, str],
                changes: dict[str, Any], reset: bool,
                change: Callable[[str, HostPlan, ClassPlan], None]) -> dict[str, Any]:
    """A link fault on hosts that shape real interfaces (mininet, docker, remote): each end's
    class for the other end set to the planned path with `changes` (or, with `reset`, back to
    the planned path), realised by `change(src, new plan, class)`, and `plans` updated.
    Returns what each end's class now holds."""
    a, b = between
    out = {}
    for src, dst in ((a, b), (b, a)):
        base = paths.get(src, dst)
        # replace() keeps the link model's other keys (docs/link-model.md)
        path = base if reset else replace(base, **changes)
        plan = with_path(plans[src], dst, path)
        plans[src] = plan
        c = plan.class_for(dst)
        change(src, plan, c)
        out[src] = {"delay_ms": c.delay_ns / 1e6, "jitter_ms": c.jitter_ns / 1e6,
                    "loss": c.loss}
    return {"paths": out}
