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
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
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


Distribution = Literal["normal", "uniform", "pareto", "paretonormal", "exponential"]


class ReorderSpec(Strict):
    """netem's `reorder PROB [CORR] gap G`: after `gap - 1` delayed datagrams, the next one is
    sent at once with `probability` (so it overtakes those still in the delay line)."""

    probability: Fraction
    correlation: Fraction = 0.0
    gap: int = Field(default=1, ge=1, description="every gap-th datagram may jump ahead")


class GilbertElliottSpec(Strict):
    """Gilbert-Elliott loss in netem's terms (`loss gemodel p r 1-h 1-k`): a good and a bad
    state; `p` good->bad and `r` bad->good per datagram; a datagram gets through with
    probability `k` in the good state and `h` in the bad one. The defaults (h 0%, k 100%) are
    the simple Gilbert model: every datagram in the bad state is lost, none in the good one, so
    the loss rate is p/(p+r) and bursts last 1/r datagrams on average."""

    p: Fraction
    r: Fraction = 1.0
    h: Fraction = 0.0
    k: Fraction = 1.0

    @model_validator(mode="after")
    def _moves(self) -> GilbertElliottSpec:
        if self.p > 0 and self.r == 0:
            raise ValueError("gemodel r must be above 0%: with p > 0 and r = 0 the link stays "
                             "in the bad state for good")
        return self


class LinkSpec(Strict):
    """One link (a site's LAN, a WAN link, a matrix entry). The keys follow netem (tc-netem(8));
    docs/link-model.md says which backend realises which key and how."""

    delay: Duration = 0
    jitter: Duration = 0
    jitter_dist: Distribution = Field(
        default="normal", validation_alias=AliasChoices("jitter_dist", "distribution"),
        description="jitter distribution; `uniform` is the bounded one (delay +- jitter); "
        "`exponential` adds jitter x (E - 1), E exponential with mean 1 (delay = jitter: an "
        "exponential delay); `distribution` is accepted as an older name")
    jitter_correlation: Fraction = Field(
        default=0.0, description="netem's delay correlation: each jitter draw leans this much "
        "on the previous one")
    reorder: bool | ReorderSpec = Field(
        default=True, description="false: FIFO, a datagram never overtakes an earlier one on "
        "the same path (arrive = max(send + delay, previous arrival)); true: jitter may reorder "
        "(netem's default); {probability, correlation, gap}: netem's reorder")
    loss: Fraction = 0.0
    loss_correlation: Fraction = Field(default=0.0, description="netem's `loss random P CORR`")
    gemodel: GilbertElliottSpec | None = Field(
        default=None, description="Gilbert-Elliott loss instead of `loss` (netem's gemodel)")
    duplicate: Fraction = 0.0
    duplicate_correlation: Fraction = 0.0
    corrupt: Fraction = Field(
        default=0.0, description="one bit flipped per corrupted datagram; the receiver's UDP "
        "checksum then discards it")
    corrupt_correlation: Fraction = 0.0
    limit: int | None = Field(
        default=None, ge=1, description="queue limit in datagrams (netem's `limit`); by "
        "default sized from rate x delay")
    rate: Bandwidth | None = Field(
        default=None, description="netem's `rate`: serialisation delay at this rate, in the "
        "delay line (bandwidth is the HTB class)")
    bandwidth: Bandwidth | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("reorder", mode="before")
    @classmethod
    def _reorder(cls, v: object) -> object:
        # Validated here so that a bad mapping is one problem, not one per union member.
        if isinstance(v, bool | ReorderSpec):
            return v
        if not isinstance(v, dict):
            raise ValueError("reorder is false (FIFO), true, or {probability, correlation, gap}")
        try:
            return ReorderSpec.model_validate(v)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            raise ValueError(f"{where}: {err['msg']}" if where else err["msg"]) from None

    @model_validator(mode="after")
    def _combinations(self) -> LinkSpec:
        if self.gemodel is not None and self.loss:
            raise ValueError("give either `loss` or `gemodel`, not both")
        if isinstance(self.reorder, ReorderSpec) and self.reorder.probability and not self.delay:
            raise ValueError("reordering needs a delay (netem sends reordered datagrams at once, "
                             "ahead of the delayed ones)")
        return self

    @property
    def distribution(self) -> str:
        return self.jitter_dist


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
    location: tuple[float, float] | None = Field(
        default=None, description="[latitude, longitude] in degrees, where the host is: the "
        "report's topology view places it there (`testbed topology import` writes it)")

    @field_validator("location")
    @classmethod
    def _location(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and not (-90 <= v[0] <= 90 and -180 <= v[1] <= 180):
            raise ValueError(f"location {list(v)} is not [latitude -90..90, longitude "
                             "-180..180]")
        return v

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


class SourceSpec(Strict):
    """Where a measured topology's numbers come from (`testbed topology import`,
    docs/topologies.md): copied into every run's spec.lock.yaml and shown in its report."""

    dataset: str = Field(description="the measurement, e.g. `WonderProxy pings` or a URL")
    url: str = ""
    date: str = Field(default="", description="date or date range the measurements cover")
    statistic: str = Field(default="", description="how the delays were derived, e.g. "
                           "`median RTT / 2 per direction`")
    licence: str = Field(default="", description="licence note of the dataset")
    note: str = ""


class TopologySpec(Strict):
    name: str
    description: str = ""
    source: SourceSpec | None = Field(
        default=None, description="measured topologies: the dataset, its date range, the "
        "statistic and a licence note")
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


def links(topo: TopologySpec) -> list[tuple[Loc, LinkSpec]]:
    """Every link of the topology with its spec location."""
    out: list[tuple[Loc, LinkSpec]] = [(("sites", name, "lan"), site.lan)
                                       for name, site in topo.sites.items()]
    out += [(("wan", i), link) for i, link in enumerate(topo.wan)]
    for src, row in (topo.matrix or {}).items():
        out += [(("matrix", src, dst), e) for dst, e in row.items() if isinstance(e, LinkSpec)]
    return out


#: Link keys that lose whole datagrams, which the in-process shaper cannot do to a TCP stream.
DATAGRAM_FAULTS = ("loss", "gemodel", "duplicate", "corrupt", "reorder")


def check_link_model(topo: TopologySpec, backend: str, transport: str) -> list[tuple[Loc, str]]:
    """Link keys this backend's applier cannot realise (docs/link-model.md): one problem per
    key and link. Every applier realises every key over UDP; under `transport: tls` only
    the kernel's (mininet, docker) turn a lost segment into a retransmission, while the
    local backend's in-process shaper sits above TCP and would drop whole datagrams."""
    problems: list[tuple[Loc, str]] = []
    if backend != "local" or transport != "tls":
        return problems
    for loc, link in links(topo):
        for key in DATAGRAM_FAULTS:
            value = getattr(link, key)
            if value and not (key == "reorder" and isinstance(value, bool)):
                problems.append(((*loc, key), f"the local backend cannot realise `{key}` "
                                 "under transport tls: its in-process shaper sits above TCP, "
                                 "where loss becomes delay (use mininet or docker, or udp)"))
    return problems


@dataclass(frozen=True, slots=True)
class Path:
    """One-way path parameters from one host to another."""

    delay_ns: int
    jitter_ns: int = 0
    distribution: str = "normal"
    loss: float = 0.0
    bandwidth_bps: int | None = None
    # The rest of netem's model (docs/link-model.md); the same fields, with the same names, as
    # nodes.config.PathConfig, which carries them to the in-process appliers.
    jitter_corr: float = 0.0
    fifo: bool = False  # `reorder: false`
    loss_corr: float = 0.0
    gemodel: tuple[float, float, float, float] | None = None  # p, r, h, k
    duplicate: float = 0.0
    duplicate_corr: float = 0.0
    corrupt: float = 0.0
    corrupt_corr: float = 0.0
    reorder: float = 0.0
    reorder_corr: float = 0.0
    reorder_gap: int = 0
    limit: int | None = None
    rate_bps: int | None = None

    def model_fields(self) -> dict[str, object]:
        """The link-model fields by name (for nodes.config.PathConfig and the appliers)."""
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


@dataclass(frozen=True)
class PathMatrix:
    hosts: list[str]
    paths: dict[tuple[str, str], Path]

    def get(self, src: str, dst: str) -> Path:
        return self.paths[(src, dst)]

    def delay_ms(self) -> list[list[float]]:
        return [[0.0 if a == b else self.paths[(a, b)].delay_ns / 1e6 for b in self.hosts]
                for a in self.hosts]


def _first(values: list[object], default: object) -> object:
    return next((v for v in values if v), default)


def _compose(links: list[LinkSpec], delay_ns: int) -> Path:
    """A path through `links` (sender's LAN half, WAN, receiver's LAN half). Delays add, jitters
    add as variances, independent losses compose, the narrowest bandwidth, rate and limit win.
    What cannot be composed -- Gilbert-Elliott state, duplication, corruption, reordering and
    the correlations -- comes from the first link that sets it; a Gilbert-Elliott path
    ignores the random `loss` of its other links. The path is FIFO when every link that could
    reorder it (jitter or reordering) says `reorder: false`."""
    jitter = round(math.sqrt(sum(link.jitter**2 for link in links)))
    keep = 1.0
    for link in links:
        keep *= 1.0 - link.loss
    bws = [link.bandwidth for link in links if link.bandwidth]
    rates = [link.rate for link in links if link.rate]
    limits = [link.limit for link in links if link.limit]
    jittered = [link for link in links if link.jitter]
    reordering = [link for link in links if isinstance(link.reorder, ReorderSpec)]
    could_reorder = jittered + reordering
    fifo = bool(could_reorder) and all(link.reorder is False for link in could_reorder)
    ge = next((link.gemodel for link in links if link.gemodel is not None), None)
    lossy = next((link for link in links if link.loss), None)
    dup = next((link for link in links if link.duplicate), None)
    bad = next((link for link in links if link.corrupt), None)
    ro = reordering[0].reorder if reordering else None
    assert ro is None or isinstance(ro, ReorderSpec)
    return Path(
        delay_ns=delay_ns, jitter_ns=jitter,
        distribution=jittered[0].jitter_dist if jittered else "normal",
        loss=round(1.0 - keep, 12), bandwidth_bps=min(bws) if bws else None,
        jitter_corr=jittered[0].jitter_correlation if jittered else 0.0,
        fifo=fifo,
        loss_corr=lossy.loss_correlation if lossy else 0.0,
        gemodel=(ge.p, ge.r, ge.h, ge.k) if ge is not None else None,
        duplicate=dup.duplicate if dup else 0.0,
        duplicate_corr=dup.duplicate_correlation if dup else 0.0,
        corrupt=bad.corrupt if bad else 0.0,
        corrupt_corr=bad.corrupt_correlation if bad else 0.0,
        reorder=ro.probability if ro else 0.0,
        reorder_corr=ro.correlation if ro else 0.0,
        reorder_gap=ro.gap if ro else 0,
        limit=min(limits) if limits else None,
        rate_bps=min(rates) if rates else None)


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
