"""One seed of `testbed explore`: (experiment, seed, schedule) -> a plain experiment, run on
the simulator in this process and judged in this process (analysis/judge.py).

`Base` is the experiment as loaded once (validated by the loader); a `Case` is one seed's
schedule with the parameters drawn or shrunk. Without parameter changes a case costs no
spec re-validation: the base spec is copied with the seed and the drawn faults (each fault
entry validated on its own). The run directory lives under a temporary root and is deleted
after judging unless kept.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import random
import shutil
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from testbed.explore.generators import Context, Item, Model, describe, draw
from testbed.explore.ranges import draw_value, set_path

NETWORK = "network"
MS_NS = 1_000_000
# World mode's cap on the drain: a drawn partition or pause may outlast the detector timeout
# five times (`long`: up to 5 s) and a lossy, slow world needs its retransmissions after it;
# beyond it, the time a protocol's throughput ceiling needs for the world's backlog
# (`world_drain_max`).
WORLD_DRAIN_MAX = "15s"
# A seed's budget (docs/explore.md "Budget"): a run that needs more simulator events than
# EVENTS_PER_MESSAGE x planned messages x hosts (at least MIN_EVENTS), or more than
# SEED_WALL_S wall seconds, is stopped and fails as `livelock`. A healthy quickstart seed needs
# ~30,000 events for 2,000 messages; a zero-delay event storm never ends.
EVENTS_PER_MESSAGE = 200
MIN_EVENTS = 1_000_000
SEED_WALL_S = 300.0
LIVELOCK = "livelock"
_FAULTS: Any = None  # a pydantic TypeAdapter of one `faults:` entry, built on first use


class InvalidCase(Exception):
    """The case's spec is refused by the spec checks (not a failure of the protocol)."""


class Livelock(Exception):  # noqa: N818 -- a finding, like a failing check
    """The case's run exceeded its event or wall-clock budget (`simulate`)."""

    def __init__(self, message: str, stats: dict[str, Any]):
        super().__init__(message)
        self.stats = stats


@dataclass(frozen=True)
class Case:
    seed: int
    items: tuple[Item, ...] = ()
    params: tuple[tuple[str, Any], ...] = ()  # (workload.rate, "50/s"), ...
    drop_hosts: tuple[str, ...] = ()
    duration_ns: int | None = None
    features: tuple[str, ...] = ()  # world mode: the world features this seed turned on
    refused: str = ""  # world mode: why the drawn world was refused (today's set-up ran)

    def record(self) -> dict[str, Any]:
        return {"seed": self.seed, "items": list(self.items), "params": list(self.params),
                "drop_hosts": list(self.drop_hosts), "duration_ns": self.duration_ns,
                "features": list(self.features), "refused": self.refused}

    @classmethod
    def from_record(cls, r: dict[str, Any]) -> Case:
        return cls(int(r["seed"]), tuple(r.get("items", ())),
                   tuple((k, v) for k, v in r.get("params", ())),
                   tuple(r.get("drop_hosts", ())), r.get("duration_ns"),
                   tuple(r.get("features", ())), str(r.get("refused", "")))

    def topology(self) -> dict[str, Any] | None:
        """The drawn topology (world mode), or None."""
        return next((v for k, v in self.params if k == "topology"), None)


@dataclass
class Base:
    """The explored experiment, validated once: raw spec data (topology inlined) and models."""

    data: dict[str, Any]
    exp: Any  # ExperimentSpec
    topo: Any  # TopologySpec
    checks: tuple[str, ...] = ()  # --check: judged even when not claimed
    ctx: Context = field(init=False)

    def __post_init__(self) -> None:
        topo_data = self.data.get("topology")
        has_links = isinstance(topo_data, dict) and bool(topo_data.get("sites") or
                                                         topo_data.get("wan"))
        self.ctx = Context(tuple(self.topo.paths().hosts), self.exp.duration, model_of(self.exp),
                           has_links)

    @classmethod
    def from_data(cls, data: dict[str, Any], checks: tuple[str, ...] = ()) -> Base:
        """Validate `data` (topology inlined) as the loader would; InvalidCase if refused."""
        exp, topo = validate_data(data)
        return cls(data, exp, topo, checks)

    @property
    def explore(self) -> Any:
        from testbed.spec.experiment import ExploreSpec

        return self.exp.explore or ExploreSpec()


def model_of(exp: Any) -> Model:
    """What the generators may draw for this protocol (generators.py)."""
    from nodes.protocols import catalogue

    entry = catalogue.find(exp.protocol.name)
    model = getattr(entry, "model", None)
    if model is None or getattr(exp, "outside_model", False):
        return Model()
    loss = model.loss and (not model.loss_param or
                           float(exp.protocol.params.get(model.loss_param) or 0) > 0)
    return Model(failures=frozenset(model.failures), loss=loss, reorder=not model.fifo,
                 duplicate=model.duplicate, clock=not model.clocks, clock_beyond=not model.clocks,
                 delays=not model.delays, reserved_rate=model.reserved_rate,
                 slot_burst=model.slot_burst, delay_bound="delta" if model.delays else "")


def load_base(path: Path, checks: tuple[str, ...] = ()) -> Base:
    """The experiment at `path` (SpecError as the loader raises it), topology inlined."""
    from testbed.spec.loader import load_experiment

    load_experiment(path, "sim")  # every file:line error first
    return Base.from_data(raw_data(path), checks)


def raw_data(path: Path, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """The experiment file's data as written, the topology file's inlined, backend sim."""
    from testbed.spec.loader import read_document

    data = {k: v for k, v in read_document(path).data.items() if k not in drop}
    if isinstance(data.get("topology"), str):
        data["topology"] = read_document((path.parent / data["topology"]).resolve()).data
    data["backend"] = "sim"
    return data


def validate_data(data: dict[str, Any]) -> tuple[Any, Any]:
    """(ExperimentSpec, TopologySpec) of spec data with an inline topology, or InvalidCase
    with the first problems."""
    from pydantic import ValidationError

    from testbed.spec.experiment import ExperimentSpec, check_experiment
    from testbed.spec.topology import TopologySpec, check_link_model, check_topology

    try:
        exp = ExperimentSpec.model_validate(data, context={"defer_checks": True})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidCase(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None
    topo = exp.topology
    assert isinstance(topo, TopologySpec)
    problems = (check_topology(topo) + check_experiment(exp, topo)
                + check_link_model(topo, "sim", exp.transport))
    if problems:
        loc, msg = problems[0]
        raise InvalidCase(f"{'.'.join(str(p) for p in loc)}: {msg}")
    return exp, topo


def world_case(base: Base, seed: int, features: tuple[str, ...] | None = None) -> Case:
    """World mode (world.py): seed `seed`'s world, then its schedule drawn in that world
    from a random subset of the generators (swarm testing)."""
    from nodes.protocols import catalogue
    from testbed.explore.world import FEATURES, draw_world
    from testbed.spec.experiment import WORLD_GENERATORS

    ex = base.explore
    entry = catalogue.find(base.exp.protocol.name)
    if features is None:
        features = tuple(ex.features) if ex.features is not None else FEATURES
    world = draw_world(seed, base.ctx.model, entry.params if entry else None, features,
                       base.exp.protocol.params)
    drawn = dict(world.overrides)
    topo = drawn["topology"]
    timeout = drawn.get("protocol.params.fd_timeout_ms") or base.exp.protocol.params.get(
        "fd_timeout_ms") or 1000
    params = base.exp.protocol.params
    instances = tuple(str(i.get("name")) for i in params.get("instances") or []
                      if isinstance(i, dict)) or (("seq-a", "seq-b") if base.exp.protocol.name
                                                  == "switching" else ())
    ctx = Context(tuple(h["name"] for h in topo["hosts"]), world.duration_ns, base.ctx.model,
                  False, round(float(timeout) * MS_NS), base.exp.protocol.name, instances)
    items = draw(seed, ctx, list(ex.generators or WORLD_GENERATORS), ex.max_faults, swarm=True)
    return Case(seed, tuple(items), (*world.overrides, ("drain_max", WORLD_DRAIN_MAX)),
                duration_ns=world.duration_ns, features=world.features)


def world_drain_max(data: dict[str, Any]) -> str:
    """A world's `drain_max` (`data`: the case as a plain experiment, shrunk or not):
    WORLD_DRAIN_MAX, plus, for a protocol with a throughput ceiling (catalogue
    `Entry.ceiling`), the time the ceiling needs beyond the run to order the messages the
    world offers: above it, the backlog outlasts any fixed cap, and a run cut before its
    backlog is ordered tells nothing about the protocol."""
    from nodes.protocols import catalogue
    from testbed.spec.units import parse_duration

    protocol = data.get("protocol") or {}
    entry = catalogue.find(str(protocol.get("name")))
    topo = data["topology"]
    if entry is None or entry.ceiling is None or "matrix" not in topo:
        return WORLD_DRAIN_MAX
    hosts = [h["name"] for h in topo["hosts"]]
    matrix = topo["matrix"]
    senders = data["workload"].get("senders", "all")
    n_send = len(hosts) if senders == "all" else len(senders)

    def path(a: str, b: str) -> tuple[float, float]:
        link = matrix[a][b]
        return (parse_duration(str(link["delay"])) / 1e9,
                float(str(link.get("loss", "0%")).removesuffix("%")) / 100)

    cap = entry.ceiling(dict(protocol.get("params") or {}), hosts, n_send, path)
    duration = parse_duration(str(data["duration"])) / 1e9
    offered = float(str(data["workload"]["rate"]).removesuffix("/s")) * duration * n_send
    backlog = max(0.0, offered / cap - duration)
    return f"{math.ceil(parse_duration(WORLD_DRAIN_MAX) / 1e9 + backlog)}s"


def draw_case(base: Base, seed: int) -> Case:
    """Seed `seed`'s case: its schedule from the generators (world mode: its world too), its
    parameters from the ranges; items the spec checks refuse (a protocol's model, say) are
    dropped from the end. A drawn world the checks refuse runs as today's set-up, the reason
    kept in the case (`refused`)."""
    from testbed.spec.experiment import EXPLORE_GENERATORS

    ex = base.explore
    rng = random.Random(f"explore:{seed}:ranges")
    params = tuple((k, draw_value(lo, hi, rng)) for k, (lo, hi) in sorted(ex.ranges.items()))
    refused = ""
    if ex.world:
        case = world_case(base, seed)
        case = replace(case, params=case.params + params)
        try:
            materialise(base, replace(case, items=()))
        except InvalidCase as exc:
            refused = str(exc)
    if not ex.world or refused:
        items = draw(seed, base.ctx, list(ex.generators or EXPLORE_GENERATORS),
                     ex.max_faults)
        case = Case(seed, tuple(items), params, refused=refused)
    items = list(case.items)
    try:
        materialise(base, case)
        return case
    except InvalidCase:
        if not case.items:
            raise
    kept: tuple[Item, ...] = ()  # greedily, in order: each item the checks accept
    for item in items:
        try:
            materialise(base, replace(case, items=(*kept, item)))
            kept = (*kept, item)
        except InvalidCase:
            continue
    case = replace(case, items=kept)
    materialise(base, case)  # the parameters alone may be refused: InvalidCase
    return case


def spec_data(base: Base, case: Case) -> dict[str, Any]:
    """The case as a plain experiment (what a reproducer holds): topology inlined, faults
    filled in, the seed set, drawn parameters applied, no `explore:` section."""
    data = {k: copy.deepcopy(v) for k, v in base.data.items() if k != "explore"}
    data["backend"] = "sim"
    data["seed"] = case.seed
    if case.duration_ns is not None:
        from testbed.spec.units import format_duration

        data["duration"] = format_duration(case.duration_ns)
    for key, value in case.params:
        set_path(data, key, copy.deepcopy(value))
    topo = data["topology"]
    for item in case.items:
        if item.get("kind") == NETWORK:
            _apply_network(topo, item)
    if case.drop_hosts:
        _drop_hosts(topo, set(case.drop_hosts))
        senders = (data.get("workload") or {}).get("senders")
        if isinstance(senders, list):
            data["workload"]["senders"] = [s for s in senders if s not in case.drop_hosts]
    data["faults"] = [dict(i) for i in case.items if i.get("kind") != NETWORK]
    if case.features and dict(case.params).get("drain_max") == WORLD_DRAIN_MAX:
        data["drain_max"] = world_drain_max(data)  # the world as shrunk so far
    return data


def _apply_network(topo: dict[str, Any], item: Item) -> None:
    change = {k: v for k, v in item.items() if k != "kind"}
    for site in (topo.get("sites") or {}).values():
        if isinstance(site, dict):
            site["lan"] = {**(site.get("lan") or {}), **change}
    topo["wan"] = [{**w, **change} for w in topo.get("wan") or []]


def _drop_hosts(topo: dict[str, Any], gone: set[str]) -> None:
    topo["hosts"] = [h for h in topo.get("hosts", []) if h.get("name") not in gone]
    if isinstance(topo.get("matrix"), dict):
        topo["matrix"] = {a: {b: e for b, e in row.items() if b not in gone}
                          for a, row in topo["matrix"].items() if a not in gone}
    used = {h.get("site") for h in topo["hosts"]}
    if isinstance(topo.get("sites"), dict):
        topo["sites"] = {k: v for k, v in topo["sites"].items() if k in used}
        topo["wan"] = [w for w in topo.get("wan") or []
                       if all(s in used for s in w.get("between", []))]


def materialise(base: Base, case: Case) -> tuple[Any, Any]:
    """(ExperimentSpec, TopologySpec) of the case; InvalidCase when the checks refuse it."""
    global _FAULTS
    cheap = not case.params and not case.drop_hosts and case.duration_ns is None and not any(
        i.get("kind") == NETWORK for i in case.items)
    if not cheap:
        return validate_data(spec_data(base, case))
    from pydantic import TypeAdapter, ValidationError

    from testbed.faults.schedule import check_faults
    from testbed.faults.spec import FaultSpec

    if _FAULTS is None:
        _FAULTS = TypeAdapter(FaultSpec)
    try:
        faults = [_FAULTS.validate_python(dict(i)) for i in case.items]
    except ValidationError as exc:
        raise InvalidCase(str(exc.errors()[0]["msg"])) from None
    exp = base.exp.model_copy(update={"faults": faults, "seed": case.seed})
    problems = check_faults(faults, list(base.ctx.hosts), exp.duration)
    if problems:
        raise InvalidCase(f"{'.'.join(str(p) for p in problems[0][0])}: {problems[0][1]}")
    return exp, base.topo


def event_budget(exp: Any, configs: list[Any]) -> int:
    """The most simulator events one seed may take: `explore.max_events` when the spec sets
    it, else EVENTS_PER_MESSAGE x planned messages x hosts, at least MIN_EVENTS."""
    explicit = getattr(getattr(exp, "explore", None), "max_events", None)
    if explicit:
        return int(explicit)
    messages = sum(c.workload.rate * c.duration_ns / 1e9 for c in configs if c.workload.send)
    return max(MIN_EVENTS, int(EVENTS_PER_MESSAGE * messages * len(configs)))


def simulate(exp: Any, topo: Any, root: Path, max_events: int | None = None,
             max_wall_s: float = SEED_WALL_S) -> tuple[Path, dict[str, Any]]:
    """Run the experiment on the simulator in this process, as the sim backend would in its
    subprocess (same configs, fault timeline and drain): (run directory, simulator stats).

    The run is bounded: at most `max_events` events (default `event_budget`) and `max_wall_s`
    wall seconds (0: no limit). A run stopped there has `livelock` in its stats: the reason
    and the virtual time reached (the nodes' logs end there)."""
    from nodes.quiescence import DRAIN_FILE
    from nodes.sim import BudgetExceeded, Quiesce, Simulator
    from testbed.backends.base import HostAddress
    from testbed.rundir import RunDir
    from testbed.runner import write_lock
    from testbed.runplan import RunPlan

    plan = RunPlan.build(exp, topo)
    run = RunDir.create(root, exp.name)
    write_lock(run, exp, topo, plan.paths)
    addresses = {h: HostAddress(f"198.18.0.{i + 1}", 7000, "127.0.0.1")
                 for i, h in enumerate(plan.hosts)}
    start = plan.start_time(0)
    plan = plan.realise(run, addresses, start)
    configs = plan.configs
    plan.write(run)
    sim = Simulator(configs, seed=configs[0].seed)
    budget = event_budget(exp, configs) if max_events is None else max_events
    sim.max_events, sim.max_wall_s = budget, max_wall_s
    if plan.actions:
        sim.schedule_faults([{"t_ns": start + a.at_ns, "op": a.op, "params": a.params,
                              "fault": a.fault} for a in plan.actions],
                            run.path / "faults.jsonl")
    end = max(c.start_at_ns + c.duration_ns + c.drain_ns for c in configs)
    workload_end = max(c.start_at_ns + c.duration_ns for c in configs)
    quiesce = Quiesce(plan.correct, workload_end, end - workload_end,
                      max(end, max(c.end_ns for c in configs)), run.path / DRAIN_FILE)
    livelock = None
    try:
        stats = sim.run(end, quiesce)
    except BudgetExceeded as exc:
        stats = exc.stats
        livelock = {"reason": exc.reason, "virtual_s": round(exc.virtual_s, 6),
                    "max_events": budget}
    record: dict[str, Any] = {"events": stats.events, "datagrams": stats.datagrams,
                              "lost": stats.lost, "wall_s": round(stats.wall_s, 3),
                              "virtual_s": stats.virtual_s, "max_events": budget}
    if livelock is not None:
        record[LIVELOCK] = livelock
    (run.path / "sim.log").write_text(json.dumps(record) + "\n")
    record["counters"] = counters(sim)
    return run.path, record


COUNTER_BEANS = ("TotalOrder", "Transport")  # Node and Clock count no protocol event


def counters(sim: Any) -> dict[str, int]:
    """The protocol's own event counters at the end of the run, summed over the hosts: every
    integer attribute of the nodes' `TotalOrder` (the layers' `managed()` declarations) and
    `Transport` (malformed, rejected datagrams, errors) MBeans, as `Type.Attribute`
    (coverage.json)."""
    from nodes.management.node_mbeans import build_node_registry

    out: dict[str, int] = {}
    for core in sim.cores.values():
        for bean in build_node_registry(core, true_now=lambda: sim.now):
            kind = bean.name.canonical.partition("type=")[2].partition(",")[0]
            if kind not in COUNTER_BEANS:
                continue
            for name, value in bean.read_all().items():
                if isinstance(value, int) and not isinstance(value, bool):
                    out[f"{kind}.{name}"] = out.get(f"{kind}.{name}", 0) + value
    return out


def world_columns(base: Base, case: Case) -> dict[str, Any]:
    """The world's columns of a seed's row (seeds.parquet): features on, topology shape,
    duration; the drawn values themselves are in `params`."""
    from testbed.explore.world import shape

    topo = case.topology() or base.data.get("topology") or {}
    hosts = [h for h in (topo.get("hosts") or []) if h.get("name") not in case.drop_hosts]
    return {"features": list(case.features),
            "shape": shape({**topo, "hosts": hosts}) if isinstance(topo, dict) else "",
            "duration_s": (case.duration_ns or base.exp.duration) / 1e9,
            "refused": case.refused, "counters": "{}"}


def digests(run_dir: Path) -> dict[str, str]:
    """sha256 of each node's delivery log, by host."""
    from analysis.record import log_files

    return {host: hashlib.sha256(p.read_bytes()).hexdigest() for host, p in log_files(run_dir)}


def failing_checks(summary: dict[str, Any], extra: tuple[str, ...] = ()) -> list[str]:
    """What failed: claimed checks (and the `--check`ed ones) with violations, a stall the
    claims do not excuse (`liveness`), exceptions in nodes (`node_errors`)."""
    out = {name for name, c in summary.get("checks", {}).items()
           if c.get("violations", 0) and (c.get("claimed", True) or name in extra)}
    if (summary.get("verdict") or {}).get("liveness") == "stalled":
        out.add("liveness")
    if summary.get("node_errors", {}).get("total", 0):
        out.add("node_errors")
    return sorted(out)


def judge(run_dir: Path) -> dict[str, Any]:
    from analysis.judge import judge_run
    from analysis.record import read_record

    return judge_run(read_record(run_dir))


def run_case(base: Base, case: Case, root: Path, keep: Path | None = None,
             keep_failing: bool = False) -> dict[str, Any]:
    """Run and judge one case: the seed's row of seeds.parquet (plus `digests` and `run_dir`
    when the run is kept). `keep`: move the run directory there; `keep_failing`: only if it
    failed."""
    began = time.perf_counter()
    row: dict[str, Any] = {"seed": case.seed, "faults": json.dumps(list(case.items)),
                           "params": json.dumps(dict(case.params)), "ok": True,
                           "verdict_ok": True, "liveness": "", "failing": [], "events": 0,
                           "checks": [], "error": "", **world_columns(base, case)}
    run_dir: Path | None = None
    try:
        exp, topo = materialise(base, case)
        run_dir, stats = simulate(exp, topo, root)
        row["max_events"] = stats["max_events"]
        row["counters"] = json.dumps(stats["counters"], sort_keys=True)
        if LIVELOCK in stats:  # stopped at its budget: a failure, not judged
            stop = stats[LIVELOCK]
            raise Livelock(f"{LIVELOCK}: {stop['reason']} at virtual time "
                           f"{stop['virtual_s']:.3f} s", stats)
        summary = judge(run_dir)
        verdict = summary.get("verdict") or {}
        row.update(verdict_ok=bool(verdict.get("ok", summary.get("ok", True))),
                   liveness=str(verdict.get("liveness", "")),
                   failing=failing_checks(summary, base.checks), events=stats["events"],
                   checks=sorted(summary.get("checks", {})))
        row["ok"] = not row["failing"]
        row["summary"] = {k: summary.get(k) for k in ("checks", "verdict", "liveness")}
    except InvalidCase as exc:
        row.update(ok=True, error=f"invalid: {exc}")
    except Livelock as exc:
        row.update(ok=False, verdict_ok=False, failing=[LIVELOCK], liveness="stalled",
                   events=exc.stats["events"], error=str(exc))
    except Exception as exc:  # a crash of the simulator or the judge is a finding
        row.update(ok=False, verdict_ok=False, failing=["error"],
                   error=f"{type(exc).__name__}: {exc}",
                   traceback="".join(traceback.format_exc(limit=8)))
    if run_dir is not None:
        wanted = keep is not None and (not keep_failing or not row["ok"])
        if wanted and keep is not None:
            row["digests"] = digests(run_dir)
            if keep.exists():
                shutil.rmtree(keep)
            keep.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(run_dir), keep)
            row["run_dir"] = str(keep)
        else:
            if not row["ok"]:
                row["digests"] = digests(run_dir)
            shutil.rmtree(run_dir, ignore_errors=True)
    row["wall_s"] = round(time.perf_counter() - began, 4)
    return row


def reproducer_text(base: Base, case: Case, row: dict[str, Any], source: str,
                    shrunk_from: int | None) -> str:
    """The reproducer: a plain experiment (`testbed run` accepts it) with the failure and
    each node's delivery-log digest in comments (`testbed explore --replay` compares them)."""
    data = spec_data(base, case)
    failing = list(row.get("failing", []))
    checks = [c for c in failing if c in row.get("checks", [])]
    data["expect"] = [f"checks.{c}.violations == 0" for c in checks]
    head = [f"# testbed explore reproducer: seed {case.seed} of {source}",
            f"# failing: {', '.join(failing) or 'none'}"]
    if shrunk_from is not None:
        head.append(f"# shrunk from {shrunk_from} to {len(case.items)} fault item(s)")
    head += [f"#   {describe(i)}" for i in case.items]
    if LIVELOCK in failing:
        head.append(f"# {row.get('error', LIVELOCK)}")
        head.append("# replay: testbed explore --replay THIS_FILE (testbed run has no event "
                    "budget: it would not end)")
    else:
        head.append("# replay: testbed explore --replay THIS_FILE (or testbed run THIS_FILE)")
    if row.get("max_events"):
        head.append(f"# event budget {row['max_events']} events")
    head += [f"# sha256 nodes/{h}/events.jsonl {d}" for h, d in
             sorted(row.get("digests", {}).items())]
    return "\n".join(head) + "\n" + yaml.safe_dump(data, sort_keys=False)


def recorded_budget(text: str) -> int | None:
    """The event budget a reproducer records (`# event budget N events`), if any."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[:3] == ["#", "event", "budget"] and parts[3].isdigit():
            return int(parts[3])
    return None


def recorded_digests(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[:2] == ["#", "sha256"] and parts[2].startswith("nodes/"):
            out[parts[2].split("/")[1]] = parts[3]
    return out
