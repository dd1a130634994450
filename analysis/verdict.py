"""The run's verdict: what the checks, the drain and the protocol's claims add up to.

One function, `finish`, turns a summary whose `checks` are counted into the judged summary:
membership checks (primary runs), Local Order's claim, the QoS bound, liveness from the drain
and the protocol's liveness claim, and `verdict` / `ok`. The Spark job (analysis/job.py) and
the in-process judge call it alike, so both give the same verdict for the same counts.

`verdict` is pure on the summary: safety `held` or `violated` (every claimed check and the
nodes' errors); liveness `quiescent`, `stalled-as-claimed` (the protocol's liveness claim,
nodes/protocols/catalogue.py `Liveness`, promises no progress under this run's faults: the
summary's `liveness.promised` is false; correct hosts that disagree still fail agreement:
analysis/liveness.py `judge_disagreement`), `stalled` (it does: the messages of correct
hosts never delivered at correct hosts fail the run) or `cut-short` (the runner stopped the nodes
at its wall limit, drain.json `cut_short`: not ok whatever the claims, the reason says why).
`liveness_promise` answers the claim from the catalogue entry, the run's resolved params and
its faults (`run_faults`: the topology's link model from spec.lock.yaml and faults.jsonl).

A protocol's documented hazards (catalogue `Hazard`: a schedule under which its paper's rule
is itself unsafe) are matched against the same params and faults (`run_hazards`); the checks
a matched hazard voids get `claimed: false` and `hazard: <reason>` (`apply_hazards`), the
summary lists the matched hazards under `hazards`, and `verdict` names each among its
reasons without failing for it. A hazard voiding `liveness` withdraws the liveness promise.

A claimed latency bound that was not judged (`checks.latency_bound.judged: false`: the QoS
run left the bound's model) is a reason in `verdict` and fails the run; its `note` says why.

`add_expectations` judges the experiment's `expect:` lines on the judged summary and folds
them into the verdict before summary.json is written: a failed one fails the run and names
itself among the reasons. The console's last line, the exit code, summary.json's `ok` and
`verdict`, the report, `testbed serve` and the nightly all read this one `verdict`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from analysis.context import add_context
from analysis.fault_history import FaultHistory
from analysis.liveness import (
    disagreement_reason,
    excuse_restarted,
    judge_disagreement,
    liveness_section,
)
from analysis.membership import membership_section
from analysis.qos import latency_check, qos_for_run
from analysis.record import RunRecord
from nodes.protocols import catalogue
from nodes.quiescence import connected_groups, cut_off

KIND_TEXT = {"loss": "datagram loss", "duplicate": "duplication", "reorder": "reordering links",
             "crash": "a crash", "pause": "a pause", "partition": "a partition",
             "clock": "clock faults"}


@dataclass(frozen=True)
class Fault:
    """One fault of the run as a liveness claim sees it: its kind (catalogue.FAULT_KINDS),
    where or whom it hit, when it started (seconds from the workload start; None for the
    topology's links, which hold all along), and whether it ended before the run did."""

    kind: str
    what: str
    hosts: tuple[str, ...] = ()
    start_s: float | None = None
    ended: bool = True
    nontransitive: bool = False  # a partition other than disjoint groups cut both ways

    def when(self) -> str:
        return "" if self.start_s is None else f" at {self.start_s:.1f} s"


def link_faults(link: dict[str, Any], where: str) -> list[Fault]:
    """The datagram faults one topology link (a spec.lock.yaml link dict) sets."""
    out = []
    lossy = [k for k in ("loss", "corrupt") if float(link.get(k) or 0) > 0]
    if lossy or link.get("gemodel"):
        out.append(Fault("loss", f"{where}: " + ", ".join(
            [f"{k} {float(link[k]):g}" for k in lossy] + (["gemodel"] if link.get(
                "gemodel") else []))))
    if float(link.get("duplicate") or 0) > 0:
        out.append(Fault("duplicate", f"{where}: duplicate {float(link['duplicate']):g}"))
    reorder = link.get("reorder", True)
    if isinstance(reorder, dict) and float(reorder.get("probability") or 0) > 0:
        out.append(Fault("reorder", f"{where}: reorder {float(reorder['probability']):g}"))
    elif reorder is not False and _ns(link.get("jitter")) > 0:
        out.append(Fault("reorder", f"{where}: jitter {link.get('jitter')} without "
                                    "`reorder: false`"))
    return out


def _ns(value: Any) -> int:
    """A lock file's duration (`500us`, `0ns`, a number of ns) in ns; 0 when unreadable."""
    if isinstance(value, (int, float)):
        return int(value)
    if not isinstance(value, str):
        return 0
    text = value.strip()
    for unit, scale in (("ns", 1), ("us", 1_000), ("µs", 1_000), ("ms", 1_000_000),
                        ("s", 1_000_000_000)):
        if text.endswith(unit):
            try:
                return int(float(text[: -len(unit)]) * scale)
            except ValueError:
                return 0
    try:
        return int(float(text))
    except ValueError:
        return 0


def topology_links(topo: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every link of a resolved topology dict, with where it is written."""
    out = [(f"sites.{name}.lan", (site or {}).get("lan") or {})
           for name, site in (topo.get("sites") or {}).items()]
    out += [(f"wan[{i}]", link) for i, link in enumerate(topo.get("wan") or [])]
    for src, row in (topo.get("matrix") or {}).items():
        out += [(f"matrix.{src}.{dst}", e) for dst, e in (row or {}).items() if isinstance(e, dict)]
    return out


def run_faults(record: RunRecord, history: FaultHistory) -> list[Fault]:
    """The run's faults: its topology's datagram faults (spec.lock.yaml; none under `transport:
    tls`, whose streams turn loss into delay) and its fault history (faults.jsonl), times from
    the workload start (the record's `since_start_s`)."""
    lock = record.lock
    faults: list[Fault] = []
    exp = lock.get("experiment") or {}
    if exp.get("transport") != "tls":
        for where, link in topology_links(lock.get("topology") or {}):
            faults += link_faults(link, where)
    stamps = {}  # the params of each `link` fault start (loss, jitter), by time and fault id
    for line in record.faults:
        if line.get("kind") == "link" and line.get("phase", "start") == "start":
            stamps[(int(line.get("t", 0)), line.get("fault"))] = line.get("params") or {}

    secs = record.since_start_s
    for f in history.intervals:
        ended = not math.isinf(f.stop)
        if f.kind == "crash":
            for h in f.hosts:
                faults.append(Fault("crash", f"{h} crashed", (h,), secs(f.start), ended))
        elif f.kind == "pause":
            for h in f.hosts:
                faults.append(Fault("pause", f"{h} paused", (h,), secs(f.start), ended))
        elif f.kind == "partition":
            off = sorted(cut_off(history.nodes, f.cuts))
            odd = nontransitive(history.nodes, f.cuts)
            faults.append(Fault("partition", ("non-transitive " if odd else "") + "partition "
                                "cutting off " + (", ".join(off) if off else "no majority"),
                                tuple(off), secs(f.start), ended, odd))
        elif f.kind == "clock":
            faults.append(Fault("clock", f"clock fault on {', '.join(f.hosts)}", f.hosts,
                                secs(f.start), ended))
        elif f.kind == "link":
            params = stamps.get((f.start, f.fault), {})
            between = "-".join(params.get("between") or f.hosts)
            if float(params.get("loss") or 0) > 0:
                faults.append(Fault("loss", f"link {between} loss {params['loss']:g}",
                                    f.hosts, secs(f.start), ended))
            if int(params.get("jitter_ns") or 0) > 0:
                faults.append(Fault("reorder", f"link {between} jitter", f.hosts,
                                    secs(f.start), ended))
            elif int(params.get("delay_ns") or 0) > 0:
                # the path's delay changes and changes back: datagrams sent after either
                # change can overtake ones still in flight, as jitter's do
                faults.append(Fault("reorder", f"link {between} delay change", f.hosts,
                                    secs(f.start), ended))
    return faults


def nontransitive(hosts: list[str], cuts: Any) -> bool:
    """Whether a partition's blocked (src, dst) pairs are other than a split into disjoint
    groups cut off from each other both ways: a majorities ring, a bridge, a one-way cut (some
    host then reaches two hosts that do not reach each other, or is reached without reaching
    back)."""
    blocked = {(str(a), str(b)) for a, b in cuts}
    group = {h: i for i, g in enumerate(connected_groups(hosts, cuts)) for h in g}
    clean = {(a, b) for a in hosts for b in hosts if a != b and group.get(a) != group.get(b)}
    return blocked != clean


def role_hosts(entry: catalogue.Entry, params: dict[str, Any], hosts: list[str],
               roles: tuple[str, ...] | None = None) -> dict[str, str]:
    """host -> role for `roles` (default: the entry's liveness roles; a param left out takes
    its default, the first host when that is None)."""
    defaults = {f.name: f.default for f in fields(entry.params)}
    out: dict[str, str] = {}
    for role in entry.liveness.roles if roles is None else roles:
        host = params.get(role, defaults.get(role))
        if host is None and hosts:
            host = hosts[0]
        if isinstance(host, str):
            out.setdefault(host, role)
    return out


def liveness_promise(entry: catalogue.Entry, params: dict[str, Any], hosts: list[str],
                     faults: list[Fault]) -> tuple[bool, str]:
    """Whether `entry`'s liveness claim promises that every message of a correct host is
    final-delivered by every correct host under `faults`; the reason either way."""
    claim = entry.liveness
    roles = role_hosts(entry, params, hosts)
    for f in faults:
        if f.kind not in claim.tolerates:
            return False, (f"{f.what}{f.when()}: `{entry.name}` claims no progress under "
                           f"{KIND_TEXT.get(f.kind, f.kind)}")
        if f.kind in ("pause", "partition") and not f.ended:
            return False, (f"{f.what}{f.when()}, never ended: `{entry.name}` claims progress "
                           f"only once a {f.kind} ends")
        if f.kind == "crash":
            for h in f.hosts:
                if h in roles:
                    return False, (f"{roles[h]} {h} crashed{f.when()}: `{entry.name}` claims "
                                   f"no progress without its {roles[h]}")
    crashed = {h for f in faults if f.kind == "crash" for h in f.hosts}
    if claim.quorum and hosts and 2 * len(crashed) >= len(hosts):
        return False, (f"{len(crashed)} of {len(hosts)} hosts crashed "
                       f"({', '.join(sorted(crashed))}): `{entry.name}` claims progress only "
                       "while a majority never crashed")
    for name, sub, sub_params in nested_instances(entry, params):
        ok, why = liveness_promise(sub, sub_params, hosts, faults)
        if not ok:
            return False, f"instance {name}: {why}"
    if not faults:
        return True, "no faults"
    return True, f"every fault of the run is within `{entry.name}`'s liveness claim"


def nested_instances(entry: catalogue.Entry, params: dict[str, Any]
                     ) -> list[tuple[str, catalogue.Entry, dict[str, Any]]]:
    """The protocol instances a container (`Liveness.nested`: switching's `instances`) runs,
    as (name, catalogue entry, params): each must itself survive the fault plan, so its
    liveness claim and its hazards hold for the container too."""
    if not entry.liveness.nested:
        return []
    from nodes.protocols.switching import instance_specs

    nested: Any = params.get(entry.liveness.nested) or instance_specs({})
    out = []
    for inst in nested if isinstance(nested, list) else []:
        if not isinstance(inst, dict):
            continue
        sub = catalogue.find(str(inst.get("protocol")))
        if sub is None:
            continue
        sub_params = inst.get("params")
        out.append((str(inst.get("name", sub.name)), sub,
                    sub_params if isinstance(sub_params, dict) else {}))
    return out


def run_promise(record: RunRecord, history: FaultHistory) -> tuple[bool, str] | None:
    """The liveness claim judged on a run; None for an unknown protocol."""
    name, params = record.protocol
    entry = catalogue.find(name)
    if entry is None:
        return None
    return liveness_promise(entry, dict(params), list(history.nodes),
                            run_faults(record, history))


def fault_kinds(faults: list[Fault]) -> set[str]:
    """The kinds a hazard can name (catalogue.HAZARD_FAULTS) present among `faults`."""
    kinds = {f.kind for f in faults}
    if any(f.kind == "partition" and f.nontransitive for f in faults):
        kinds.add(catalogue.NONTRANSITIVE)
    if any(f.kind == "partition" and not f.ended for f in faults):
        kinds.add(catalogue.UNHEALED)
    return kinds


def matching_hazards(entry: catalogue.Entry, params: dict[str, Any],
                     faults: list[Fault], hosts: list[str] | None = None
                     ) -> list[tuple[catalogue.Hazard, dict[str, list[str]]]]:
    """The entry's hazards the run matches (params equal, every fault kind present, a crash
    of a host of the hazard's roles when it names some; `hosts`: the run's, for a role param
    left unset), and those of the instances it runs (`nested_instances`), each with the
    faults that made it match, by kind."""
    defaults = {f.name: f.default for f in fields(entry.params)}
    out = []
    for h in entry.hazards:
        if any(params.get(k, defaults.get(k)) != v for k, v in h.params):
            continue
        hit = faults
        if h.roles:
            held = role_hosts(entry, params, hosts or [], h.roles)
            hit = [f for f in faults if f.kind != "crash" or set(f.hosts) & set(held)]
        if not h.faults <= fault_kinds(hit):
            continue
        why = {kind: [f"{f.what}{f.when()}" for f in hit
                      if f.kind == kind or (kind == catalogue.NONTRANSITIVE
                                            and f.kind == "partition" and f.nontransitive)
                      or (kind == catalogue.UNHEALED and f.kind == "partition"
                          and not f.ended)]
               for kind in sorted(h.faults)}
        out.append((h, why))
    for _, sub, sub_params in nested_instances(entry, params):
        out += [m for m in matching_hazards(sub, sub_params, faults, hosts)
                if m[0] not in (h for h, _ in out)]
    return out


def run_hazards(record: RunRecord, history: FaultHistory) -> list[dict[str, Any]]:
    """The run's matched hazards as summary.json lists them under `hazards`."""
    name, params = record.protocol
    entry = catalogue.find(name)
    if entry is None:
        return []
    found = matching_hazards(entry, dict(params), run_faults(record, history),
                             list(history.nodes))
    # the first fault of each kind the hazard names, and how many faults matched
    return [{"reason": h.reason, "voids": sorted(h.voids),
             "faults": [texts[0] for texts in why.values() if texts],
             "matched": sum(len(texts) for texts in why.values()),
             "params": {k: v for k, v in h.params}} for h, why in found]


def apply_hazards(summary: dict[str, Any], hazards: list[dict[str, Any]]) -> None:
    """Void the checks of each matched hazard in `summary` (in place): a claimed check gets
    `claimed: false` and `hazard: <reason>`; `liveness` withdraws the liveness promise
    (needs the `liveness` section). The hazards are kept under `hazards` for `verdict`."""
    if not hazards:
        return
    summary["hazards"] = hazards
    for h in hazards:
        for name in h["voids"]:
            check = summary.get("checks", {}).get(name)
            if isinstance(check, dict) and check.get("claimed", True):
                check["claimed"] = False
                check["hazard"] = h["reason"]
        live = summary.get("liveness")
        if "liveness" in h["voids"] and isinstance(live, dict) and live.get("promised", True):
            live["promised"] = False
            live["promise"] = "no progress claimed under a documented hazard (below)"


def spare_faulty_senders(checks: dict[str, Any], record: RunRecord) -> None:
    """Where a claim of the run's protocol spares faulty senders (catalogue
    `ParamClaim.spares_faulty`: 004 Definition 2 lets a crashed sender's last messages reach
    some correct processes only), take agreement's findings among their messages out of its
    violations (in place), counted under `spared`."""
    name, params = record.protocol
    entry = catalogue.find(name)
    check = checks.get("agreement")
    n = int((check or {}).get("faulty_senders") or 0)
    if check is None or not n or entry is None or not any(
            c.spares_faulty for c in entry.param_claims_of(params)):
        return
    check["violations"] -= n
    check["spared"] = n
    check["note"] = ("messages of faulty senders that reached some correct hosts only are "
                     "spared (`spared`): the claim binds correct senders' messages")


def checks_ok(summary: dict[str, Any]) -> bool:
    """True when every claimed checker in the summary found no violation (a check without
    `claimed`, from an older summary, counts as claimed) and no node caught an exception
    (`node_errors`: an exception in a node is a bug, never a silent limp)."""
    return (all(c.get("violations", 0) == 0 for c in summary.get("checks", {}).values()
                if c.get("claimed", True))
            and not summary.get("node_errors", {}).get("total", 0))


def stall_reason(live: dict[str, Any]) -> str:
    """Why a stall the claims do not excuse fails the run, from the `liveness` section."""
    unproven = live.get("unproven") or {}
    missing = live.get("in_flight")
    if missing is None:  # no drain count: what agreement and validity could not prove
        missing = int(unproven.get("agreement") or 0) + int(unproven.get("validity") or 0)
    text = (f"stalled: {missing} deliveries of correct hosts' messages missing at correct "
            f"hosts after a {live.get('drain_s', 0):g} s drain")
    if unproven:
        text += " (unproven: " + ", ".join(f"{k} {v}" for k, v in sorted(unproven.items())) + ")"
    if live.get("promise"):
        text += f"; claimed: {live['promise']}"
    return text


def verdict(summary: dict[str, Any]) -> dict[str, Any]:
    """`{ok, safety, liveness, reasons, not_judged}` of a judged summary (pure on the
    summary): not ok when a claimed check failed, a node erred, the run stalled against its
    claims or was cut short, an expectation (`expectations`, `add_expectations`) failed, or
    the emulation was degraded (`fidelity`) and the experiment did not accept it
    (`fidelity: best-effort`: then only a reason).
    A claimed check not judged is a reason, with why (`not_judged`), never a count."""
    reasons = [f"{name}: {c.get('violations')} violation(s)"
               for name, c in summary.get("checks", {}).items()
               if c.get("claimed", True) and c.get("violations", 0)]
    errors = summary.get("node_errors", {}).get("total", 0)
    if errors:
        reasons.append(f"node errors: {errors}")
    safety = "violated" if reasons else "held"
    # a claimed bound that was not judged (the run left its model) vouches for nothing
    bound = summary.get("checks", {}).get("latency_bound") or {}
    unjudged = bound.get("claimed", True) and bound.get("judged") is False
    if unjudged:
        reasons.append(f"latency_bound: {bound.get('note') or 'not judged'}")
    live = summary.get("liveness") or {}
    liveness = "quiescent"
    if live.get("cut_short"):  # stopped at the runner's wall limit: no progress to vouch for
        liveness = "cut-short"
        why = f"cut short: {live['cut_short']}"
        if live.get("quiescent") is False and isinstance(live.get("in_flight"), int):
            why += (f" ({live['in_flight']} deliveries of correct hosts' messages missing at "
                    "correct hosts when stopped)")
        reasons.append(why)
    elif live.get("quiescent") is False:
        if live.get("promised") is False:
            liveness = "stalled-as-claimed"
            reasons.append(str(live.get("promise") or "the protocol claims no progress"))
            if live.get("disagreement"):
                reasons.append(disagreement_reason(summary))
        else:
            liveness = "stalled"
            reasons.append(stall_reason(live))
    for h in summary.get("hazards") or []:
        # informational: the claims a documented hazard voids were not made for this run
        faults = h.get("faults") or []
        more = int(h.get("matched") or len(faults)) - len(faults)
        where = (", ".join(faults) + (f", +{more} more" if more > 0 else "")) if faults \
            else "params"
        reasons.append(f"hazard ({where}): {h.get('reason')}; not claimed: "
                       f"{', '.join(h.get('voids') or [])}")
    not_judged = not_judged_checks(summary)
    others = {n: w for n, w in not_judged.items() if n != "latency_bound"}  # its own reason
    if others:
        for why in dict.fromkeys(others.values()):
            names = [n for n, w in others.items() if w == why]
            reasons.append(f"not judged: {', '.join(names)} ({why})")
    failed = [r for r in summary.get("expectations") or [] if not r.get("ok")]
    reasons += [f"expectation failed: {r.get('expectation')} ({r.get('reason')})"
                for r in failed]
    fid = summary.get("fidelity") or {}
    degraded = fid.get("status") == "degraded"
    if degraded:
        reasons.append(f"emulation degraded: {fid.get('cause') or 'no cause recorded'}")
    ok = (safety == "held" and not unjudged and liveness not in ("stalled", "cut-short")
          and not failed and not (degraded and fid.get("policy") != "best-effort"))
    out: dict[str, Any] = {"ok": ok, "safety": safety, "liveness": liveness, "reasons": reasons}
    if not_judged:
        out["not_judged"] = not_judged
    return out


def not_judged_checks(summary: dict[str, Any]) -> dict[str, str]:
    """The claimed checks the run could not judge (`judged: false`: agreement and validity on
    a run that did not settle, a bound on a run outside its model), each with why."""
    out = {}
    for name, c in summary.get("checks", {}).items():
        if c.get("claimed", True) and c.get("judged") is False:
            note = str(c.get("note") or "no reason recorded")
            out[name] = note.removeprefix("not judged: ")
    return out


def add_expectations(summary: dict[str, Any], expect: Sequence[str]) -> dict[str, Any]:
    """Judge the run's `expect:` lines (analysis/expect.py) on the judged `summary` (in place):
    their results under `expectations`, then `verdict` and `ok` again, so a failed one fails
    the run and names itself among the reasons. The lines read the summary as judged without
    them (`ok == 1`: the claims, the liveness and the nodes). Returns the summary."""
    from analysis.expect import evaluate

    results = evaluate(expect, summary)
    summary["expectations"] = [r.as_dict() for r in results]
    summary["verdict"] = verdict(summary)
    summary["ok"] = summary["verdict"]["ok"]
    return summary


def add_membership(summary: dict[str, Any], record: RunRecord, history: FaultHistory) -> None:
    """`membership`: primary views (001 §4.1) and notifications, and their checks."""
    membership = membership_section(record)
    if membership:
        summary["checks"].update(membership["checks"])
        summary["membership"] = membership["membership"]


def add_qos(summary: dict[str, Any], record: RunRecord, history: FaultHistory) -> None:
    """`qos`: 004's bounds (docs/qos.md). A latency above the bound fails the run only when
    the run met the bound's assumptions; a run with gaps (§7) is held to Def. 2 instead of
    agreement and validity."""
    qos = qos_for_run(record, history, history.correct)
    if qos:
        summary["qos"] = qos
        summary["checks"]["latency_bound"] = {**latency_check(qos), "claimed": True}
        if "gaps" in qos:
            summary["checks"]["gap_liveness"] = {**qos["gaps"], "claimed": True}
            for name in ("agreement", "validity"):
                summary["checks"][name]["claimed"] = False


def add_fidelity(summary: dict[str, Any], record: RunRecord, history: FaultHistory,
                 measured: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> None:
    """`fidelity`: whether the emulated WAN was the one configured (analysis/fidelity.py),
    from the nodes' `ev=emulation` lines (`measured`: records of that shape made otherwise,
    a Maelstrom run's from its agents' logs), paths.csv and cpu.jsonl, read here; on a
    degraded emulation the latency, throughput and QoS-bound judgements say they were made
    on one."""
    from analysis import fidelity as fid

    lock = record.lock
    exp = lock.get("experiment") or {}
    policy = str(exp.get("fidelity") or "strict")
    if exp.get("backend") == "sim":
        summary["fidelity"] = fid.by_construction(policy)
        return
    records = measured if measured is not None else record.events({"emulation"})
    faulted: dict[str, str] = {}
    for f in history.intervals:
        hosts = set(f.hosts) | {h for cut in f.cuts for h in cut}
        for h in sorted(hosts):
            faulted.setdefault(h, f"{f.kind} fault")

    def text(name: str) -> str:
        try:
            return (record.path / name).read_text()
        except OSError:
            return ""

    modelled = [where for where, link in topology_links(lock.get("topology") or {})
                if link.get("gemodel") or float(link.get("corrupt") or 0) > 0]
    loss_note = (f"{modelled[0]} loses by a model beyond paths.csv's loss" if modelled
                 else None)
    summary["fidelity"] = fid.fidelity(records, fid.parse_paths(text("paths.csv")),
                                       text("cpu.jsonl"), record.clock_offsets_ns(),
                                       faulted, policy, loss_note,
                                       "transport: tls (streams wait for connections and "
                                       "retransmit: transit is not the network's alone)"
                                       if exp.get("transport") == "tls" else None)
    if summary["fidelity"]["status"] == "degraded":
        marked = [summary.get(k) for k in ("latency", "throughput", "qos")]
        marked.append(summary.get("checks", {}).get("latency_bound"))
        for section in marked:
            if isinstance(section, dict):
                section["emulation"] = "degraded"


# The analysis sections a protocol's catalogue entry names (`Entry.sections`, by key) that
# judging completes, in this order; `switching` needs the Spark events (analysis/job.py).
SECTIONS: dict[str, Callable[[dict[str, Any], RunRecord, FaultHistory], None]] = {
    "membership": add_membership,
    "qos": add_qos,
    "context": add_context,
}


def run_sections(record: RunRecord) -> tuple[str, ...]:
    """The analysis sections of the run's protocol (nodes/protocols/catalogue.py
    `sections`)."""
    name, params = record.protocol
    return catalogue.sections(name, dict(params))


def finish(summary: dict[str, Any], record: RunRecord, history: FaultHistory,
           claims: frozenset[str],
           measured: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> dict[str, Any]:
    """Complete `summary` (counted checks in `checks`, `local_order` at top level when the
    run opt-delivers) in place: the sections the run's protocol adds (membership, QoS),
    fidelity (of `measured` where given, add_fidelity), liveness, verdict and `ok`; return
    it."""
    wanted = run_sections(record)
    spare_faulty_senders(summary["checks"], record)
    if "local_order" in summary:
        summary["checks"]["local_order"] = summary.pop("local_order")
        summary["checks"]["local_order"]["claimed"] = "local_order" in claims
    for key, add in SECTIONS.items():
        if key in wanted:
            add(summary, record, history)
    add_fidelity(summary, record, history, measured)
    summary["liveness"] = liveness_section(record.drain, summary["checks"])
    promise = run_promise(record, history)
    if promise is not None:
        summary["liveness"]["promised"], summary["liveness"]["promise"] = promise
    apply_hazards(summary, run_hazards(record, history))
    excuse_restarted(summary["checks"], summary["liveness"])
    judge_disagreement(summary["checks"], summary["liveness"], healed=not any(
        f.kind == "partition" and math.isinf(f.stop) for f in history.intervals))
    summary["verdict"] = verdict(summary)
    summary["ok"] = summary["verdict"]["ok"]
    return summary


def verdict_line(summary: dict[str, Any]) -> str:
    """The console's last line: `verdict.ok`, safety, liveness and the reasons."""
    v = summary.get("verdict") or verdict(summary)
    head = "verdict: ok" if v["ok"] else "verdict: NOT OK"
    line = f"{head} (safety {v['safety']}, {v['liveness']})"
    if v["reasons"]:
        line += ": " + "; ".join(v["reasons"])
    return line
