"""The run record: a run directory read once, by this module only (docs/architecture.md "Run
record").

A run directory (testbed/rundir.py) holds what a run produced. Every reader after the run --
the checks and sections, the judge (analysis/judge.py, analysis/job.py), the report, `testbed
serve`, `testbed explore`, the nightly, `testbed analyze` -- takes a `RunRecord`, never the
directory: what a file means (which lines of faults.jsonl count, when the workload started,
whether the run is a Maelstrom program's) is decided here, once.

`read_record` reads the small artefacts at once: spec.lock.yaml (analysis/lockfile.py), plan.json,
faults.jsonl and faults.skipped.jsonl (every line that is a JSON object, in file order; a broken
line is skipped and logged), drain.json, the hosts under `nodes/`, the protocol and whether it
is a Maelstrom run. The delivery logs can be large: `events` parses them on each call, only the
kinds asked for (analysis/deliverylog.py, the line format), so callers may change what they get;
the engines that read whole logs in bulk (Arrow in analysis/ingest.py, Spark) take their paths
from `log_paths`, the captures from `capture_files`.

Fault times are true times (ns, the orchestrator's clock, as the delivery logs' `t`);
`since_start_s` puts one on the spec's time base, seconds since the workload's start (plan.json
`start_at_ns`), as the fault schedule's `at:` counts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis import deliverylog
from analysis.deliverylog import Event, NodeLog
from analysis.fault_history import FaultHistory, fault_history
from analysis.lockfile import read_lock

log = logging.getLogger(__name__)

PLAN = "plan.json"
FAULTS = "faults.jsonl"
#: the faults a run planned but did not apply, as the records they would have had
#: (testbed/faults/nemesis.py)
SKIPPED_FAULTS = "faults.skipped.jsonl"
DRAIN = "drain.json"
NODES = "nodes"
PCAPS = "pcaps"


class NotARunError(FileNotFoundError):
    """The directory has no `nodes/` folder: not a run directory."""


@dataclass(frozen=True)
class RunRecord:
    """One run directory as its readers see it. The documents (`lock`, `plan`, `drain`, the
    fault entries) are shared between readers: never modify them."""

    path: Path
    nodes: tuple[str, ...]  # hosts with a directory under nodes/, logged or not
    lock: Mapping[str, Any]  # spec.lock.yaml; {} without one
    plan: Mapping[str, Any] | None  # plan.json; None without one
    faults: tuple[dict[str, Any], ...]  # faults.jsonl, in file order
    skipped_faults: tuple[dict[str, Any], ...]  # faults.skipped.jsonl
    drain: Mapping[str, Any] | None  # drain.json when it is a drain record
    protocol: tuple[str, Mapping[str, Any]]  # name and params; ("", {}) when unknown
    workload: str | None  # the Maelstrom workload; None for a protocol run

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def params_by_protocol(self) -> dict[str, Mapping[str, Any]]:
        """The run's protocol params by protocol name ({} when unknown), as the claims take
        them (analysis/checks.py `claims_of`)."""
        name, params = self.protocol
        return {name: params} if name else {}

    @property
    def is_maelstrom(self) -> bool:
        """Whether the run ran a user's Maelstrom program (docs/maelstrom.md), judged by the
        workload's checkers instead of the delivery-log suite."""
        return self.workload is not None

    @property
    def experiment(self) -> Mapping[str, Any]:
        """The resolved experiment of the lock, {} without one."""
        exp = self.lock.get("experiment")
        return exp if isinstance(exp, dict) else {}

    @property
    def expect(self) -> list[str]:
        """The experiment's `expect:` lines."""
        found = self.experiment.get("expect") or []
        return [str(e) for e in found] if isinstance(found, list) else []

    @property
    def start_ns(self) -> int | None:
        """The workload's start (plan.json `start_at_ns`): the origin of the spec's fault
        times; None for a run without a plan."""
        start = (self.plan or {}).get("start_at_ns")
        return start if isinstance(start, int) and start > 0 else None

    def since_start_s(self, t: int) -> float:
        """True time `t` (ns) in seconds since the workload's start (since the epoch without
        a plan), to the millisecond."""
        start = self.start_ns
        return round((t - start) / 1e9, 3) if start else round(t / 1e9, 3)

    def history(self) -> FaultHistory:
        """The fault history over the run's hosts (analysis/fault_history.py), a new one each
        call."""
        return fault_history(list(self.nodes), list(self.faults))

    def clock_offsets_ns(self) -> dict[str, int]:
        """Hosts whose clock is not the orchestrator's (the remote backend measures each
        offset before the run: spec.lock.yaml `clocks`, docs/remote.md): host clock minus
        orchestrator clock, ns. Empty for backends on one machine."""
        clocks = self.lock.get("clocks") or {}
        return {h: int(round(float(c.get("offset_ms", 0)) * 1e6)) for h, c in clocks.items()
                if isinstance(c, dict)}

    def log_paths(self) -> list[tuple[str, Path]]:
        """(host, its events.jsonl) for every host that has one, in host order."""
        return log_files(self.path)

    def log_bytes(self) -> int:
        """The delivery logs' total size, to size a job by."""
        return sum(p.stat().st_size for _, p in self.log_paths())

    def node_logs(self, kinds: Collection[str] | None = None,
                  revoke: bool = False) -> dict[str, NodeLog]:
        """Every host's log (analysis/deliverylog.py `read_node`), by host."""
        return {host: deliverylog.read_node(path, host, kinds, revoke)
                for host, path in self.log_paths()}

    def events(self, kinds: Collection[str] | None = None,
               revoke: bool = False) -> dict[str, list[Event]]:
        """Per host, its events (all, or those of `kinds`), sorted by `i`, each with `inc`;
        with `revoke`, without the deliveries a later state transfer revokes."""
        return {host: nl.events for host, nl in self.node_logs(kinds, revoke).items()}

    def iter_events(self, kinds: Collection[str] | None = None,
                    revoke: bool = False) -> Iterator[Event]:
        """The events of every host, host after host."""
        for evs in self.events(kinds, revoke).values():
            yield from evs

    def logs_mention(self, kind: str) -> bool:
        """Whether some delivery log holds the quoted name `kind` (an `ev` of that kind, or
        the same text elsewhere in a line), without parsing: a cheap test for a section that
        only some protocols' runs have."""
        mark = json.dumps(kind).encode()
        return any(mark in p.read_bytes() for _, p in self.log_paths())

    def capture_files(self) -> list[tuple[str, Path]]:
        """(host, file) for every capture of the run: the manifest's list, else
        `pcaps/<host>-*`."""
        pcaps = self.path / PCAPS
        manifest = pcaps / "manifest.json"
        if manifest.is_file():
            entries = json.loads(manifest.read_text())
            return [(str(e["host"]), pcaps / str(e["file"])) for e in entries
                    if (pcaps / str(e["file"])).is_file()]
        if not pcaps.is_dir():
            return []
        return [(p.name.split("-", 1)[0], p) for p in sorted(pcaps.iterdir())
                if p.is_file() and ".pcap" in p.name]


def log_files(path: Path) -> list[tuple[str, Path]]:
    """(host, its events.jsonl) for every host of the run in `path` that has one, in host
    order: where the delivery logs are, for whoever hashes or copies them whole."""
    return [(p.parent.name, p) for p in sorted((Path(path) / NODES).glob(
        f"*/{deliverylog.LOG}"))]


def drained(path: Path) -> bool:
    """Whether the run in `path` wrote its drain record: its nodes stopped."""
    return (Path(path) / DRAIN).is_file()


def read_record(path: Path, need_nodes: bool = True) -> RunRecord:
    """The run in `path`. NotARunError without a `nodes/` folder when `need_nodes` (to judge a
    run; a page that shows what there is reads a run without one as having no hosts); a
    malformed spec.lock.yaml raises yaml.YAMLError."""
    path = Path(path)
    has_nodes = (path / NODES).is_dir()
    if need_nodes and not has_nodes:
        raise NotARunError(f"{path} has no nodes/ folder; is it a run directory?")
    lock = read_lock(path)
    return RunRecord(
        path=path,
        nodes=tuple(sorted(p.name for p in (path / NODES).iterdir() if p.is_dir()))
        if has_nodes else (),
        lock=lock,
        plan=_json_object(path / PLAN),
        faults=_fault_lines(path / FAULTS),
        skipped_faults=_fault_lines(path / SKIPPED_FAULTS),
        drain=_drain(path / DRAIN),
        protocol=_protocol(path, lock),
        workload=_maelstrom_workload(lock),
    )


def _json_object(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _fault_lines(path: Path) -> tuple[dict[str, Any], ...]:
    """The JSON objects of a file of fault records; missing file, blank or broken lines give
    fewer entries."""
    try:
        text = path.read_text()
    except OSError:
        return ()
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            log.warning("skipped a malformed line in %s", path.name)
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return tuple(out)


def _drain(path: Path) -> dict[str, Any] | None:
    rec = _json_object(path)
    return rec if rec is not None and "quiescent" in rec else None


def _protocol(path: Path, lock: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The protocol's name and params: spec.lock.yaml, else the first node's config.json."""
    exp = lock.get("experiment")
    proto = exp.get("protocol") if isinstance(exp, dict) else None
    if isinstance(proto, dict) and proto.get("name"):
        return str(proto["name"]), dict(proto.get("params") or {})
    for cfg in sorted((path / NODES).glob("*/config.json")):
        d = json.loads(cfg.read_text())
        return str(d.get("protocol", "")), dict(d.get("params") or {})
    return "", {}


def _maelstrom_workload(lock: Mapping[str, Any]) -> str | None:
    """The run's Maelstrom workload: the experiment runs a user's `node` program under a
    `workload.maelstrom`; None for a protocol run."""
    exp = lock.get("experiment") or {}
    if not exp.get("node"):
        return None
    w = (exp.get("workload") or {}).get("maelstrom")
    return str(w) if w else None
