"""Fault generators of `testbed explore` (docs/explore.md "Generators").

A seed's schedule is a list of items, each either one `faults:` entry of the experiment spec
(testbed/faults/spec.py, written as YAML would write it) or one `network` change of the
topology's links (loss, duplication, reordering jitter: nodes/linkmodel.py). Everything is
drawn from `random.Random(f"explore:{seed}")`, so a seed names its schedule.

What a generator may draw depends on the protocol's model: a protocol with a latency bound
(004) declares the model the bound is proven in (catalogue `Model`: FIFO links, loss or not,
the failures it allows, clocks within Γ/2), so unless the experiment says `outside_model:
true` only what that model allows is drawn. Faults under which a protocol promises no
progress are still drawn: the verdict then says `stalled-as-claimed`, a documented hazard is
never hidden.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MS = 1_000_000
Item = dict[str, Any]
SHAPES = ("halves", "majority", "minority", "bridge", "majorities-ring", "isolate", "groups")
CLOCK_INSIDE_NS = 1 * MS  # |offset| / |jump| a clock may be off without breaking a bound
CLOCK_BEYOND_NS = 1000 * MS


@dataclass(frozen=True)
class Model:
    """What the protocol's model lets a generator draw."""

    failures: frozenset[str] = frozenset({"crash", "pause", "partition"})
    loss: bool = True
    reorder: bool = True  # jitter that reorders
    duplicate: bool = True
    clock: bool = True  # clock faults at all (a bound's model may assume clocks within Γ/2)
    clock_beyond: bool = True  # clock faults beyond CLOCK_INSIDE_NS
    delays: bool = True  # path delays may change (a bound's model holds them within Δ)
    # a reserved-rate model (catalogue Model.reserved_rate, slot_burst): the parameters that
    # bound what each sender may offer
    reserved_rate: str = ""
    slot_burst: tuple[str, ...] = ()
    # a bounded-delay model (catalogue Model.delays): the parameter (Δ) every path's delay
    # plus jitter stays within
    delay_bound: str = ""


@dataclass(frozen=True)
class Context:
    hosts: tuple[str, ...]
    duration_ns: int
    model: Model
    has_links: bool  # the topology has site LANs / WAN links a `network` item can change
    timeout_ns: int = 1000 * MS  # the failure detector's timeout (`long`, `mgmt`)
    protocol: str = ""  # the mbean of `switch` requests
    instances: tuple[str, ...] = ()  # switching: the instances a `switch` request names


def ms(ns: float) -> str:
    return f"{max(1, round(ns / MS))}ms"


def _at(rng: random.Random, ctx: Context) -> int:
    return round(rng.uniform(0.05, 0.75) * ctx.duration_ns / MS) * MS


def _timing(rng: random.Random, ctx: Context, flapping: bool) -> dict[str, Any]:
    """One-off (`for`) or flapping (`every` + `for`) timing from `at`."""
    at = _at(rng, ctx)
    if flapping:
        every = rng.randint(150, 1200) * MS
        return {"at": ms(at), "every": ms(every), "for": ms(every * rng.uniform(0.2, 0.7))}
    out: dict[str, Any] = {"at": ms(at)}
    if rng.random() < 0.85:  # mostly healed; sometimes for good
        out["for"] = ms(rng.uniform(0.02, 0.3) * ctx.duration_ns)
    return out


def partition(rng: random.Random, ctx: Context) -> list[Item]:
    if "partition" not in ctx.model.failures or len(ctx.hosts) < 2:
        return []
    shapes = [s for s in SHAPES if s != "groups" or len(ctx.hosts) >= 3]
    shape = rng.choice(shapes)
    item: Item = {"kind": "partition"}
    if shape == "isolate":
        item["isolate"] = rng.choice(ctx.hosts)
    elif shape == "groups":  # three-way
        hosts = list(ctx.hosts)
        rng.shuffle(hosts)
        a, b = sorted(rng.sample(range(1, len(hosts)), 2))
        item["groups"] = [hosts[:a], hosts[a:b]]  # the rest is the third group
    else:
        item["shape"] = shape
    item.update(_timing(rng, ctx, flapping=rng.random() < 0.4))
    if "every" in item and rng.random() < 0.5:
        item["jitter"] = ms(rng.uniform(0.05, 0.3) * int(item["every"][:-2]) * MS)
    return [item]


def crash(rng: random.Random, ctx: Context) -> list[Item]:
    if "crash" not in ctx.model.failures:
        return []
    item: Item = {"kind": "crash", "host": rng.choice(ctx.hosts), "at": ms(_at(rng, ctx))}
    if rng.random() < 0.6:
        item["restart_after"] = ms(rng.uniform(0.02, 0.3) * ctx.duration_ns)
    return [item]


def pause(rng: random.Random, ctx: Context) -> list[Item]:
    if "pause" not in ctx.model.failures:
        return []
    return [{"kind": "pause", "host": rng.choice(ctx.hosts), "at": ms(_at(rng, ctx)),
             "for": ms(rng.uniform(0.01, 0.2) * ctx.duration_ns)}]


def _signed(rng: random.Random, limit_ns: int) -> str:
    v = max(1, round(rng.uniform(0.05, 1.0) * limit_ns / 1000)) * 1000  # whole microseconds
    return f"{'-' if rng.random() < 0.5 else ''}{v // 1000}us"


def clock(rng: random.Random, ctx: Context) -> list[Item]:
    if not ctx.model.clock:
        return []
    beyond = ctx.model.clock_beyond and rng.random() < 0.5
    limit = CLOCK_BEYOND_NS if beyond else CLOCK_INSIDE_NS
    item: Item = {"kind": "clock", "host": rng.choice(ctx.hosts), "at": ms(_at(rng, ctx))}
    change = rng.choice(("offset", "drift", "jump", "strobe"))
    if change == "drift":
        ppm = rng.uniform(1, 500 if beyond else 50)
        item["drift"] = f"{'-' if rng.random() < 0.5 else ''}{ppm:.1f}ppm"
    elif change == "strobe":
        item["strobe"] = _signed(rng, limit).lstrip("-")
        item["period"] = ms(rng.randint(20, 300) * MS)
        item["for"] = ms(rng.uniform(0.05, 0.3) * ctx.duration_ns)
    else:
        item[change] = _signed(rng, limit)
    return [item]


def link(rng: random.Random, ctx: Context) -> list[Item]:
    """A change of one host pair's path for a while: more delay, reordering jitter, or a
    burst of loss."""
    if len(ctx.hosts) < 2:
        return []
    a, b = rng.sample(list(ctx.hosts), 2)
    options = (["delay"] if ctx.model.delays else []) + (
        ["jitter"] if ctx.model.reorder else []) + (["loss"] if ctx.model.loss else [])
    if not options:
        return []
    what = rng.choice(options)
    item: Item = {"kind": "loss-burst" if what == "loss" else "link", "between": [a, b],
                  "at": ms(_at(rng, ctx)),
                  "for": ms(rng.uniform(0.02, 0.3) * ctx.duration_ns)}
    if what == "delay":
        item["delay"] = ms(rng.uniform(1, 200) * MS)
    elif what == "jitter":
        item["path_jitter"] = ms(rng.uniform(1, 50) * MS)
    else:
        item["loss"] = f"{rng.uniform(1, 60):.1f}%"
    return [item]


def network(rng: random.Random, ctx: Context) -> list[Item]:
    """Every link of the topology (site LANs, WAN links) changed for the whole run: loss,
    duplication, reordering jitter."""
    if not ctx.has_links:
        return []
    options = (["loss"] if ctx.model.loss else []) + (
        ["duplicate"] if ctx.model.duplicate else []) + (["jitter"] if ctx.model.reorder else [])
    if not options:
        return []
    what = rng.choice(options)
    item: Item = {"kind": "network"}
    if what == "jitter":
        item["jitter"] = ms(rng.uniform(0.5, 20) * MS)
        item["reorder"] = True
    else:
        item[what] = f"{rng.uniform(0.1, 10):.2f}%"
    return [item]


def restarts(rng: random.Random, ctx: Context) -> list[Item]:
    """One host crashes and restarts again and again: 2-20 times, each down 1-10% of the
    run, all inside the first 75% of it."""
    if "crash" not in ctx.model.failures:
        return []
    host = rng.choice(ctx.hosts)
    t, end = round(0.05 * ctx.duration_ns), round(0.75 * ctx.duration_ns)
    out: list[Item] = []
    for _ in range(rng.randint(2, 20)):
        down = round(rng.uniform(0.01, 0.1) * ctx.duration_ns / MS) * MS
        if t + down + MS > end:
            break
        t = round(t / MS) * MS
        out.append({"kind": "crash", "host": host, "at": ms(t), "restart_after": ms(down)})
        t += down + max(MS, round(rng.uniform(0.005, 0.05) * ctx.duration_ns))
    return out


def crashes(rng: random.Random, ctx: Context) -> list[Item]:
    """Two or more hosts crash at the same instant, some restarting."""
    if "crash" not in ctx.model.failures or len(ctx.hosts) < 2:
        return []
    at = ms(_at(rng, ctx))
    out: list[Item] = []
    for host in rng.sample(list(ctx.hosts), rng.randint(2, len(ctx.hosts))):
        item: Item = {"kind": "crash", "host": host, "at": at}
        if rng.random() < 0.6:
            item["restart_after"] = ms(rng.uniform(0.02, 0.3) * ctx.duration_ns)
        out.append(item)
    return out


def long(rng: random.Random, ctx: Context) -> list[Item]:
    """A partition or a pause longer than the failure detector's timeout (1.5-5 times)."""
    span = ms(rng.uniform(1.5, 5.0) * ctx.timeout_ns)
    at = ms(_at(rng, ctx))
    options = [k for k in ("partition", "pause") if k in ctx.model.failures]
    if not options or len(ctx.hosts) < 2:
        return []
    if rng.choice(options) == "pause":
        return [{"kind": "pause", "host": rng.choice(ctx.hosts), "at": at, "for": span}]
    return [{"kind": "partition", "isolate": rng.choice(ctx.hosts), "at": at, "for": span}]


def mgmt(rng: random.Random, ctx: Context) -> list[Item]:
    """A management write to one host: its failure detector's timeout (100-1,000 ms) or its
    clock's offset (inside the bound, or beyond it when the model allows)."""
    item: Item = {"kind": "mgmt", "host": rng.choice(ctx.hosts), "at": ms(_at(rng, ctx))}
    if ctx.model.clock and rng.random() < 0.5:
        limit = CLOCK_BEYOND_NS if ctx.model.clock_beyond and rng.random() < 0.5 else \
            CLOCK_INSIDE_NS
        offset = round(rng.uniform(-1, 1) * limit / MS, 3)
        item.update(mbean="testbed:type=Clock", write={"OffsetMs": offset})
    else:
        item.update(mbean="testbed:type=FailureDetector",
                    write={"TimeoutMs": rng.randint(100, 1000)})
    return [item]


def switch(rng: random.Random, ctx: Context) -> list[Item]:
    """`switching`: a request to switch to another instance, at one host."""
    if len(ctx.instances) < 2:
        return []
    return [{"kind": "mgmt", "host": rng.choice(ctx.hosts), "at": ms(_at(rng, ctx)),
             "mbean": f"testbed:type=TotalOrder,protocol={ctx.protocol}",
             "exec": ["switchTo", rng.choice(ctx.instances)]}]


GENERATORS: dict[str, Callable[[random.Random, Context], list[Item]]] = {
    "partition": partition, "crash": crash, "pause": pause, "clock": clock, "link": link,
    "network": network, "restarts": restarts, "crashes": crashes, "long": long, "mgmt": mgmt,
    "switch": switch}


def draw(seed: int, ctx: Context, generators: list[str], max_faults: int,
         swarm: bool = False) -> list[Item]:
    """Seed `seed`'s schedule: 1..max_faults draws from the named generators (`swarm`: from
    a random subset of them, each kept with probability 1/2), in time order of `at`
    (network items first)."""
    rng = random.Random(f"explore:{seed}")
    usable = [g for g in generators if g in GENERATORS]
    if swarm and usable:
        usable = [g for g in usable if rng.random() < 0.5] or [rng.choice(usable)]
    items: list[Item] = []
    if not usable or max_faults <= 0:
        return items
    want = rng.randint(1, max_faults)
    for _ in range(want * 4):
        if len(items) >= want:
            break
        drawn = GENERATORS[rng.choice(usable)](rng, ctx)
        if any(i.get("kind") == "network" for i in drawn) and any(
                i.get("kind") == "network" for i in items):
            continue  # one network change per seed
        items += drawn
    return sorted(items, key=_order)


def _order(item: Item) -> tuple[int, int]:
    if item.get("kind") == "network" or "at" not in item:
        return (0, 0)
    from testbed.spec.units import parse_duration

    return (1, parse_duration(item["at"]))


def describe(item: Item) -> str:
    """One line for tables and the HTML timeline."""
    rest = ", ".join(f"{k} {v}" for k, v in item.items() if k != "kind")
    return f"{item.get('kind')}: {rest}"
