"""The nightly catalogue: `experiments/nightly/` (docs in its README.md).

`catalogue.yaml` holds the suites and the regression thresholds; every other `*.yaml` there is
an ordinary experiment spec with one extra top-level block, `nightly:`, that says which suites
run it, over which protocols and backends, and which summary.json metrics to track (`trend:`)
with the direction that is bad. The block is validated on its own and removed before the rest
is validated as an experiment, so every problem still reads `file:line: field: message`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from nodes.protocols import catalogue as protocol_catalogue
from testbed.spec.experiment import BACKENDS, ExperimentSpec, check_experiment
from testbed.spec.loader import SpecError, read_document, validate
from testbed.spec.qos import check_model
from testbed.spec.topology import Strict, TopologySpec, check_topology

CATALOGUE_DIR = Path(__file__).resolve().parents[2] / "experiments" / "nightly"
INDEX = "catalogue.yaml"
Backend = Literal["sim", "local", "mininet", "docker", "remote"]


def protocols() -> tuple[str, ...]:
    """Every protocol a `protocols: all` entry runs: the whole protocol catalogue
    (nodes/protocols/catalogue.py). A spec's shared params go to each protocol only where it
    takes them (`params_for`), so `sequencer: h1` reaches the sequencer family alone."""
    return tuple(e.name for e in protocol_catalogue.CATALOGUE)


def params_for(protocol: str, shared: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """The params one protocol runs with: the spec's shared params it accepts, then its own."""
    from dataclasses import fields

    accepted = {f.name for f in fields(protocol_catalogue.get(protocol).params)}
    return {**{k: v for k, v in shared.items() if k in accepted}, **own}


class Thresholds(Strict):
    """When a tracked metric counts as regressed (`testbed/nightly/detect.py`)."""

    window: int = Field(default=7, ge=2, description="K: nights in the baseline")
    mad_k: float = Field(default=4.0, gt=0, description="k: robust deviations (MAD) allowed")
    min_change: float = Field(default=0.2, ge=0,
                              description="a single night must move this share of the median")
    step: float = Field(default=0.15, gt=0,
                        description="a move of this share of the median on two nights in a row")
    min_nights: int = Field(default=3, ge=1, description="baseline nights needed to judge")


class FlakyRule(Strict):
    window: int = Field(default=7, ge=3, description="last nights looked at")
    flips: int = Field(default=3, ge=2, description="pass<->fail changes that make it flaky")


class Suite(Strict):
    backends: list[Backend]
    description: str = ""


class Index(Strict):
    suites: dict[str, Suite]
    regression: Thresholds = Thresholds()
    flaky: FlakyRule = FlakyRule()


class Trend(Strict):
    metric: str = Field(description="dot path into summary.json, e.g. latency.fnl.all.p99_ms")
    bad: Literal["up", "down"]
    backends: list[Backend] | None = Field(
        default=None, description="track it only on these backends (default: all)")
    window: int | None = Field(default=None, ge=2)
    mad_k: float | None = Field(default=None, gt=0)
    min_change: float | None = Field(default=None, ge=0)
    step: float | None = Field(default=None, gt=0)
    min_nights: int | None = Field(default=None, ge=1)

    def thresholds(self, defaults: Thresholds) -> Thresholds:
        override = {k: v for k, v in self.model_dump().items()
                    if k in Thresholds.model_fields and v is not None}
        return defaults.model_copy(update=override)


class NightlyExplore(Strict):
    """`testbed explore` of the entry's protocols on the sim backend: this many new seeds a
    night per suite (seed = f(night, protocol, k): new each night, reproducible)."""

    seeds: dict[str, Annotated[int, Field(ge=1)]] = Field(
        description="seeds per night for each suite, e.g. {smoke: 10, full: 200}")


class NightlyBlock(Strict):
    suites: list[str] = Field(min_length=1)
    explore: NightlyExplore | None = Field(
        default=None, description="explore fault schedules instead of one run (sim only; "
        "docs/explore.md)")
    protocols: Literal["all"] | list[str] | None = Field(
        default=None, description="run once per protocol; default: the spec's protocol")
    params: dict[str, dict[str, Any]] = Field(
        default={}, description="protocol parameters per protocol name, over the spec's")
    backends: list[Backend] | None = Field(
        default=None, description="restrict the suite's backends for this entry")
    trend: list[Trend] = []

    @model_validator(mode="after")
    def _known_protocols(self) -> NightlyBlock:
        if isinstance(self.protocols, list):
            unknown = [p for p in self.protocols if p not in protocols()]
            if unknown:
                raise ValueError(f"unknown protocol(s) {', '.join(unknown)}; known: "
                                 f"{', '.join(protocols())}")
        return self


@dataclass(frozen=True)
class Entry:
    """One experiment of one suite: a spec bound to one protocol and one backend."""

    id: str
    source: Path
    spec: ExperimentSpec
    topology: TopologySpec
    trend: tuple[Trend, ...]
    suites: tuple[str, ...]
    explore_seeds: tuple[tuple[str, int], ...] = ()  # (suite, seeds a night) of `explore:`
    seeds: int = 0  # in a suite's list: seeds tonight (0: one plain run)
    outside: str = ""  # why the set-up is outside the protocol's model (then skipped)

    @property
    def protocol(self) -> str:
        return self.spec.protocol.name

    @property
    def backend(self) -> str:
        return self.spec.backend

    @property
    def estimate_s(self) -> float:
        """A first guess of its wall time (run, drain, start-up, analysis) before any history."""
        run_s = (self.spec.duration + self.spec.drain) / 1e9
        if self.seeds:  # two workers, about 0.1 s of simulation per simulated second
            return 5.0 + self.seeds * max(run_s * 0.05, 0.05)
        return (run_s if self.backend != "sim" else run_s / 10) + 12.0


@dataclass(frozen=True)
class Catalogue:
    root: Path
    index: Index
    entries: tuple[Entry, ...]  # of every suite

    def suite(self, name: str, backends: list[str] | None = None) -> list[Entry]:
        if name not in self.index.suites:
            raise SpecError([f"{self.root / INDEX}:1: suites: no suite {name!r}; the catalogue "
                             f"has {', '.join(self.index.suites)}"])
        wanted = set(self.index.suites[name].backends)
        if backends:
            wanted &= set(backends)
        out = []
        for e in self.entries:
            if name not in e.suites or e.backend not in wanted:
                continue
            if e.explore_seeds:
                seeds = dict(e.explore_seeds).get(name, 0)
                if not seeds:
                    continue
                e = replace(e, seeds=seeds)
            out.append(e)
        return out

    def thresholds(self, experiment: str, metric: str) -> Thresholds:
        for e in self.entries:
            if e.id == experiment:
                for t in e.trend:
                    if t.metric == metric:
                        return t.thresholds(self.index.regression)
        return self.index.regression


def load_catalogue(root: Path = CATALOGUE_DIR) -> Catalogue:
    """Read and validate the whole catalogue; every problem in every file at once."""
    problems: list[str] = []
    index_doc = None
    try:
        index_doc = read_document(root / INDEX)
        index = validate(index_doc, Index, index_doc.data)
    except SpecError as exc:
        problems += exc.problems
        index = Index(suites={})
    entries: list[Entry] = []
    for path in sorted(root.glob("*.yaml")):
        if path.name == INDEX:
            continue
        try:
            entries += _load_entries(path, index)
        except SpecError as exc:
            problems += exc.problems
    if problems:
        raise SpecError(problems)
    return Catalogue(root, index, tuple(entries))


def _load_entries(path: Path, index: Index) -> list[Entry]:
    doc = read_document(path)
    data = dict(doc.data)
    if "nightly" not in data:
        raise SpecError([doc.error((), "a catalogue experiment needs a `nightly:` block "
                                   "(suites, trend)")])
    block = validate(doc, NightlyBlock, data.pop("nightly"), ("nightly",))
    unknown = [s for s in block.suites if s not in index.suites]
    if index.suites and unknown:
        raise SpecError([doc.error(("nightly", "suites"), f"unknown suite(s) {', '.join(unknown)};"
                                   f" catalogue.yaml has {', '.join(index.suites)}")])
    base = validate(doc, ExperimentSpec, data)
    if isinstance(base.topology, TopologySpec):
        topo = base.topology
        located = check_topology(topo)
        if located:
            raise SpecError([doc.error(loc, msg, ("topology",)) for loc, msg in located])
    else:
        topo_path = (path.parent / base.topology).resolve()
        if not topo_path.exists():
            raise SpecError([doc.error(("topology",), f"topology file {base.topology} not "
                                       f"found (looked at {topo_path})")])
        from testbed.spec.loader import load_topology

        topo = load_topology(topo_path)
    explore_seeds: tuple[tuple[str, int], ...] = ()
    if block.explore is not None:
        unknown = [s for s in block.explore.seeds if s not in block.suites]
        if unknown:
            raise SpecError([doc.error(("nightly", "explore", "seeds"),
                                       f"suite(s) {', '.join(unknown)} not in this entry's "
                                       f"suites {', '.join(block.suites)}")])
        if block.backends not in (None, ["sim"]):
            raise SpecError([doc.error(("nightly", "backends"), "an explore entry runs on the "
                                       "sim backend only: backends: [sim]")])
        explore_seeds = tuple(sorted(block.explore.seeds.items()))
        block = block.model_copy(update={"backends": ["sim"]})
    names = (list(protocols()) if block.protocols == "all"
             else block.protocols or [base.protocol.name])
    backends = [b for b in BACKENDS
                if any(b in index.suites[s].backends for s in block.suites if s in index.suites)
                and (block.backends is None or b in block.backends)]
    out = []
    for proto in names:
        params = params_for(proto, base.protocol.params, block.params.get(proto, {}))
        for backend in backends:
            spec = base.model_copy(update={
                "name": f"{base.name}-{proto}", "backend": backend,
                "protocol": base.protocol.model_copy(update={"name": proto, "params": params})})
            problems = check_experiment(spec, topo)
            if problems:
                raise SpecError([doc.error(loc, msg) for loc, msg in problems])
            # A set-up outside the protocol's model (a QoS bound's, docs/qos.md) would end NOT
            # OK by construction (a claimed bound not judged): such an entry is listed and
            # skipped with the model's reason, unless the spec itself says `outside_model`.
            entry_of = protocol_catalogue.find(proto)
            outside = [] if entry_of is None or base.outside_model else [
                p for located in check_model(entry_of, params, topo, spec.faults,
                                             spec.workload.size) for p in located]
            trend = tuple(t for t in block.trend if t.backends is None or backend in t.backends)
            out.append(Entry(f"{base.name}.{proto}.{backend}", path, spec, topo, trend,
                             tuple(block.suites), explore_seeds,
                             outside=outside[0][1] if outside else ""))
    return out
