"""Topology specs: sites, hosts, LAN/WAN links or an explicit one-way delay matrix.

Every topology reduces to one `PathMatrix`: the one-way path parameters for each ordered pair of
hosts. That matrix is what every backend and shaping applier realises, what the sim backend
draws from, and what `testbed plan` optimises over.

Path model for site-based topologies: a site's `lan.delay` is the one-way delay between two
hosts of that site, half of it on each host's access link; a WAN link adds its own one-way delay
between the two sites' switches. So h(A)->h(B) = lan(A)/2 + wan(A->B) + lan(B)/2. Jitters add as
independent variances, losses compose, the narrowest bandwidth wins.
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from testbed.spec.units import Bandwidth, Duration, Fraction, Ppm, SignedDuration

NAME = re.compile(r"^[a-z][a-z0-9-]{0,15}$")
DEFAULT_LAN_DELAY = 0


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_name(value: str, what: str) -> str:
    if not NAME.match(value):
        raise ValueError(
            f"{what} name {value!r} must be 1-16 lowercase letters, digits or '-', "
            "starting with a letter"
        )
    return value


class LinkSpec(Strict):
    delay: Duration = 0
    jitter: Duration = 0
    distribution: Literal["normal", "uniform", "pareto", "paretonormal"] = "normal"
    loss: Fraction = 0.0
    bandwidth: Bandwidth | None = None


class SiteSpec(Strict):
    lan: LinkSpec = LinkSpec()


class ClockSpec(Strict):
    offset: SignedDuration = 0
    drift: Ppm = 0.0


class QoSSpec(Strict):
    """A host's reserved capacity (HTB root rate for the shaping plan)."""

    rate: Bandwidth | None = None


class HostSpec(Strict):
    name: str
    site: str | None = None
    clock: ClockSpec = ClockSpec()
    qos: QoSSpec = QoSSpec()
    address: str | None = Field(default=None, description="data-plane IPv4 in 198.18.0.0/15")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v, "host")

    @field_validator("address")
    @classmethod
    def _address(cls, v: str | None) -> str | None:
        if v is None:
            return v
        ip = ipaddress.ip_address(v)
        if ip not in ipaddress.ip_network("198.18.0.0/15"):
            raise ValueError(f"host address {v} is outside the emulation range 198.18.0.0/15")
        return v


class WanSpec(LinkSpec):
    between: tuple[str, str] | None = None
    from_: str | None = Field(default=None, alias="from")
    to: str | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _ends(self) -> WanSpec:
        if (self.between is None) == (self.from_ is None and self.to is None):
            raise ValueError("a WAN link names either `between: [A, B]` or `from: A` and `to: B`")
        if self.between is None and (self.from_ is None or self.to is None):
            raise ValueError("a one-way WAN link needs both `from` and `to`")
        return self

    def directions(self) -> list[tuple[str, str]]:
        if self.between is not None:
            a, b = self.between
            return [(a, b), (b, a)]
        assert self.from_ is not None and self.to is not None
        return [(self.from_, self.to)]


class TopologySpec(Strict):
    name: str
    description: str = ""
    sites: dict[str, SiteSpec] = {}
    hosts: list[HostSpec]
    wan: list[WanSpec] = []
    matrix: dict[str, dict[str, Duration | LinkSpec]] | None = Field(
        default=None,
        description="explicit one-way paths: matrix[src][dst] is a delay or a link; "
        "asymmetric allowed; every ordered pair of distinct hosts must be present",
    )

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> TopologySpec:
        # The spec loader runs these checks itself to point at the offending line.
        if not (info.context or {}).get("defer_checks"):
            problems = check_topology(self)
            if problems:
                raise ValueError(problems[0][1])
        return self

    def paths(self) -> PathMatrix:
        return reduce_topology(self)


Loc = tuple[str | int, ...]


def check_topology(topo: TopologySpec) -> list[tuple[Loc, str]]:
    """Cross-reference checks, each with the spec location it is about."""
    problems: list[tuple[Loc, str]] = []
    names = [h.name for h in topo.hosts]
    if not names:
        problems.append((("hosts",), "a topology needs at least one host"))
    seen: set[str] = set()
    for i, h in enumerate(topo.hosts):
        if h.name in seen:
            problems.append((("hosts", i, "name"), f"duplicate host name {h.name!r}"))
        seen.add(h.name)
        if h.site is not None and h.site not in topo.sites:
            problems.append((("hosts", i, "site"), f"host {h.name} names unknown site {h.site!r}"))
        if topo.matrix is None and h.site is None:
            problems.append((("hosts", i), f"host {h.name} needs a `site` (or give a `matrix`)"))
    addresses = [h.address for h in topo.hosts if h.address]
    if len(set(addresses)) != len(addresses):
        problems.append((("hosts",), "two hosts share one address"))
    for site in topo.sites:
        if not NAME.match(site):
            problems.append((("sites", site), f"site name {site!r} must be lowercase letters, "
                             "digits or '-', starting with a letter"))
    directions: set[tuple[str, str]] = set()
    for i, link in enumerate(topo.wan):
        for a, b in link.directions():
            directions.add((a, b))
            for s in (a, b):
                if s not in topo.sites:
                    problems.append((("wan", i), f"WAN link names unknown site {s!r}"))
    if topo.matrix is None:
        used = sorted({h.site for h in topo.hosts if h.site in topo.sites})
        for a in used:
            for b in used:
                if a != b and (a, b) not in directions:
                    problems.append((("wan",), f"no WAN link from site {a} to site {b}"))
    else:
        known = set(names)
        for src, row in topo.matrix.items():
            if src not in known:
                problems.append((("matrix", src), f"matrix names unknown host {src!r}"))
            for dst in row:
                if dst not in known:
                    problems.append((("matrix", src, dst),
                                     f"matrix row {src} names unknown host {dst!r}"))
        missing = [f"{a}->{b}" for a in names for b in names
                   if a != b and b not in topo.matrix.get(a, {})]
        if missing:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            problems.append((("matrix",),
                             f"matrix is missing pair(s) {', '.join(missing[:3])}{more}"))
    return problems


@dataclass(frozen=True, slots=True)
class Path:
    """One-way path parameters from one host to another."""

    delay_ns: int
    jitter_ns: int = 0
    distribution: str = "normal"
    loss: float = 0.0
    bandwidth_bps: int | None = None


@dataclass(frozen=True)
class PathMatrix:
    hosts: list[str]
    paths: dict[tuple[str, str], Path]

    def get(self, src: str, dst: str) -> Path:
        return self.paths[(src, dst)]

    def delay_ms(self) -> list[list[float]]:
        return [[0.0 if a == b else self.paths[(a, b)].delay_ns / 1e6 for b in self.hosts]
                for a in self.hosts]


def _compose(links: list[LinkSpec], delay_ns: int) -> Path:
    jitter = round(math.sqrt(sum(link.jitter**2 for link in links)))
    keep = 1.0
    for link in links:
        keep *= 1.0 - link.loss
    bws = [link.bandwidth for link in links if link.bandwidth]
    dists = [link.distribution for link in links if link.jitter]
    return Path(delay_ns=delay_ns, jitter_ns=jitter, distribution=dists[0] if dists else "normal",
                loss=round(1.0 - keep, 12), bandwidth_bps=min(bws) if bws else None)


def reduce_topology(topo: TopologySpec) -> PathMatrix:
    names = [h.name for h in topo.hosts]
    paths: dict[tuple[str, str], Path] = {}
    if topo.matrix is not None:
        for src, row in topo.matrix.items():
            for dst, entry in row.items():
                link = (entry if isinstance(entry, LinkSpec)
                        else LinkSpec.model_construct(delay=entry))
                paths[(src, dst)] = _compose([link], link.delay)
        return PathMatrix(names, paths)
    site_of = {h.name: h.site for h in topo.hosts}
    wan: dict[tuple[str, str], LinkSpec] = {}
    for link in topo.wan:
        for a, b in link.directions():
            wan[(a, b)] = link
    for a in names:
        for b in names:
            if a == b:
                continue
            sa, sb = site_of[a], site_of[b]
            assert sa is not None and sb is not None
            lan_a, lan_b = topo.sites[sa].lan, topo.sites[sb].lan
            if sa == sb:
                paths[(a, b)] = _compose([lan_a], lan_a.delay)
                continue
            wan_link = wan.get((sa, sb))
            if wan_link is None:
                raise ValueError(f"no WAN link from site {sa} to site {sb} (host {a} -> {b})")
            half_a = lan_a.model_construct(**{**dict(lan_a), "delay": lan_a.delay // 2,
                                              "jitter": round(lan_a.jitter / math.sqrt(2)),
                                              "loss": lan_a.loss / 2})
            half_b = lan_b.model_construct(**{**dict(lan_b),
                                              "delay": lan_b.delay - lan_b.delay // 2,
                                              "jitter": round(lan_b.jitter / math.sqrt(2)),
                                              "loss": lan_b.loss / 2})
            delay = half_a.delay + wan_link.delay + half_b.delay
            paths[(a, b)] = _compose([half_a, wan_link, half_b], delay)
    return PathMatrix(names, paths)
