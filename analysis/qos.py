"""Judging the QoS-preserving total orders (004): summary.json's `qos` section.

Per run, from the nodes' delivery logs (the events of docs/qos.md "Log events") and the
protocol's name and params (each node's config.json), never from a protocol's code:

- the empirical Δ: the largest one-way network latency of data, dummy and rate messages,
  `netrecv.t - net.t` joined on (sender, rseq), and for data also `recv.t - net.t` by mid;
- the empirical Γ: `2 * max |lt - t|` over every event (004 §2.2 bounds each clock by Γ/2);
- the bound that applies (catalogue entry's `bound`): Δ+Γ (CBR, Thm 1), Δ+Γ+Θ (VBR, Thm 2),
  Δ+2Γ+Θ (VBR with failures in the fault schedule, Thm 5, or with `loss_tolerance` > 0, §7.2),
  2Δ+pO (leader broadcast, §8.1), 2Δ+max(pO, Θ) (timestamp leader, §8.2.1's two cases with
  the preceding block's request up to Δ later than the message: `bound_ns`), pO the largest
  relay or grant wait the leader logged;
- the maximum application latency: per message, the latest final delivery minus the
  message's network send (`net`, the tick that carried it; `send` when there is none);
- `assumptions_hold`: Δ_meas <= Δ, Γ_meas <= Γ (not for the leader-based ones, which assume no
  clock synchrony, §8) and no reservation refused. Only then is a latency above the bound a
  violation; otherwise the run is flagged and only safety is judged;
- rates: per process the network's and the application's average message rate over the
  spans it was sending (per incarnation); the check (Thm 3; rates in msgs/s, so 1/Θ is one
  message per slot) is net = declared rate for CBR and net <= avg + 1/Θ for VBR;
- total order with gaps (§7, Def. 2) for `qos-vbr` with `loss_tolerance` > 0: every data
  message a correct process received (`recv`) and did not drop as `late` is delivered there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.protocols import catalogue
from nodes.protocols.qos_common import NS_PER_S, duration_ns

if TYPE_CHECKING:
    from analysis.record import RunRecord

# The events analysis reads; the others only count for Γ (lt - t).
WANTED = frozenset({"send", "fnl", "net", "netrecv", "recv", "reserve", "relay",
                    "grant", "late", "start", "porder"})
EPSILON_SIM_NS = 1_000  # sim ε = 1 µs: nothing runs late in virtual time (docs/qos.md)
EPSILON_REAL_NS = 2_000_000  # real backends: timer lateness and processing
RATE_TOLERANCE = 0.02  # relative, on averages over the whole run

Events = dict[str, list[dict[str, Any]]]


def bound_kind(protocol: str) -> str:
    """The latency bound protocol `protocol` claims: its catalogue entry's `bound` ("" for
    none, or a protocol the catalogue does not know)."""
    entry = catalogue.find(protocol)
    return entry.bound if entry is not None else ""


def read_events(record: RunRecord) -> tuple[Events, float]:
    """The QoS-relevant events per node, and max |lt - t| over all events (ns)."""
    events: Events = {}
    skew = 0.0
    for node, evs in record.events().items():
        for e in evs:
            lt = e.get("lt")
            if isinstance(lt, int):
                skew = max(skew, abs(lt - e["t"]))
        events[node] = [e for e in evs if e["ev"] in WANTED]
    return events, skew


def _ms(ns: float | None) -> float | None:
    return None if ns is None else round(ns / 1e6, 6)


def delta_measured(events: Events) -> int | None:
    """Δ_meas (004 §2.1's Δ, measured; docs/qos.md "Judging a run"): the largest
    send-to-receive time of any data, dummy or rate
    message, from `net`/`netrecv` pairs joined on (sender, incarnation, rseq): a restarted
    sender counts rseq from 1 again, its `start` event carries the incarnation and its
    receivers log it on each `netrecv` (`member_inc`, analysis/deliverylog.py), so a pair
    never spans two incarnations. For a log without `netrecv` events, from data messages' `net`
    and `recv` by mid (not for relayed messages: their mid's recv is two hops after the
    origin's net)."""
    sent: dict[tuple[str, int, int], int] = {}
    sent_mid: dict[str, tuple[str, int]] = {}
    for node, evs in events.items():
        inc = 0
        for e in sorted(evs, key=lambda e: (e["t"], e.get("i", 0))):
            if e["ev"] == "start":
                inc = int(e.get("incarnation", 0) or 0)
            elif e["ev"] == "net":
                if isinstance(e.get("rseq"), int):
                    sent[(node, inc, e["rseq"])] = e["t"]
                if "mid" in e:
                    sent_mid[e["mid"]] = (node, e["t"])
    worst: int | None = None
    by_rseq = any(e["ev"] == "netrecv" for evs in events.values() for e in evs)
    for node, evs in events.items():
        for e in evs:
            d = None
            key = (e.get("member"), e.get("member_inc", 0), e.get("rseq"))
            if e["ev"] == "netrecv" and key in sent:
                d = e["t"] - sent[key]  # type: ignore[index]
            elif not by_rseq and e["ev"] == "recv" and e.get("mid") in sent_mid:
                origin, t = sent_mid[e["mid"]]
                if origin != node:
                    d = e["t"] - t
            if d is not None and (worst is None or d > worst):
                worst = d
    return worst


Down = dict[str, list[tuple[int, float]]]


def down_spans(history: Any) -> Down:
    """Per host, the true-time spans it took no steps: crashed until restarted, paused until
    resumed (`math.inf` when it never came back) -- 004's failed process (§2, §6)."""
    out: Down = {}
    for f in history.intervals:
        if f.kind in ("crash", "pause"):
            for host in f.hosts:
                out.setdefault(host, []).append((f.start, f.stop))
    return out


def excused(node: str, sent: int, down: Down, bound: int, init: int) -> bool:
    """Whether Thm 5 (§6.5: "let i and j be two correct processes") leaves the delivery
    of a message sent at `sent` at `node` out: `node` failed before the message's deadline
    (`sent + bound`) and the message was sent before its initialization time after it woke
    had passed (§6.3: a process that recovers delivers "all the messages that were sent at
    least Δ+2Γ+Θ after [it] wakes up", `init`). A process that was down meanwhile delivers
    late, if at all; one that failed only after the deadline had no excuse to be late."""
    return any(start < sent + bound and sent < stop + init
               for start, stop in down.get(node, ()))


def latencies(events: Events) -> dict[str, int]:
    """Per mid: latest final delivery minus its network send (`net`, else `send`)."""
    return split_latencies(events, None, 0, 0)[0]


def split_latencies(events: Events, down: Down | None, bound: int, init: int
                    ) -> tuple[dict[str, int], dict[str, int]]:
    """`latencies` over the deliveries Thm 5 covers, and over those it leaves out (`excused`
    with `down`, `bound` and `init`)."""
    start: dict[str, int] = {}
    for evs in events.values():
        for e in evs:
            if e["ev"] == "send" and "mid" in e:
                start.setdefault(e["mid"], e["t"])
    for evs in events.values():
        for e in evs:
            if e["ev"] == "net" and "mid" in e:
                start[e["mid"]] = e["t"]
    out: dict[str, int] = {}
    out_excused: dict[str, int] = {}
    for node, evs in events.items():
        for e in evs:
            if e["ev"] == "fnl" and e.get("mid") in start:
                sent = start[e["mid"]]
                d = e["t"] - sent
                into = out_excused if down and excused(node, sent, down, bound, init) \
                    else out
                if d > into.get(e["mid"], -1):
                    into[e["mid"]] = d
    return out, out_excused


def bound_ns(kind: str, delta: int, gamma: int, theta: int, po: int, failures: bool) -> int:
    if kind == "cbr":
        return delta + gamma  # Thm 1
    if kind == "vbr":
        return delta + (2 * gamma if failures else gamma) + theta  # Thm 2, Thm 5
    if kind == "leader":
        return 2 * delta + po  # §8.1
    if kind == "timestamp-leader":
        # 004 §8.2.1 claims Δ + max(Δ+pO, Θ): case A, m's own timestamp, 2Δ+pO;
        # case B, the messages with earlier timestamps, Δ+Θ after m was sent. Case B holds
        # only for blocks requested no later than m was sent. The leader grants in the order
        # requests reach it (§8.2), so a block requested up to Δ after m on a shorter path
        # to the leader is granted first, stays open up to Θ and takes up to Δ to arrive:
        # Δ + Θ + Δ. With equal paths to the leader the paper's value is what runs reach.
        return delta + max(delta + po, delta + theta)
    raise ValueError(f"unknown bound {kind!r}")


def rates(events: Events, kind: str, theta: int) -> dict[str, Any]:
    """Average rates per process over its sending span, and the Thm 3 / §4.4 check."""
    per_node: dict[str, dict[str, Any]] = {}
    violations = 0
    for node, evs in events.items():
        # the init-rate leaves before the grid starts (`init`): not part of the rate
        # the span a process was sending: per incarnation (a `start` opens one), so the
        # downtime of a crashed and restarted process does not dilute its rates
        runs: list[list[int]] = [[]]
        for e in sorted(evs, key=lambda e: (e["t"], e.get("i", 0))):
            if e["ev"] == "start" and runs[-1]:
                runs.append([])
            elif e["ev"] == "net" and not e.get("init"):
                runs[-1].append(e["t"])
        app = sum(1 for e in evs if e["ev"] == "send")
        # the protocol's own `reserve` lines carry `avg` (msgs/s); a transport may log more
        reserved = [e for e in evs if e["ev"] == "reserve" and "avg" in e]
        runs = [r for r in runs if len(r) >= 2]
        if not runs:
            continue
        span = sum(r[-1] - r[0] for r in runs) / NS_PER_S
        gaps_n = sum(len(r) - 1 for r in runs)
        row: dict[str, Any] = {"net": round(gaps_n / span, 3) if span else 0.0,
                               "app": round(app / span, 3) if span else 0.0}
        if reserved:
            avg = float(reserved[-1].get("avg", 0))
            expected = avg + (NS_PER_S / theta if kind == "vbr" and theta else 0.0)
            row["declared"] = expected
            changed = len({r.get("avg") for r in reserved}) > 1
            if kind == "cbr" and not changed:
                row["ok"] = abs(row["net"] - expected) <= max(1.0, RATE_TOLERANCE * expected)
            elif kind == "vbr":
                row["ok"] = row["net"] <= expected * (1 + RATE_TOLERANCE) + 1.0
            if row.get("ok") is False:
                violations += 1
        per_node[node] = row
    nets = [r["net"] for r in per_node.values()]
    apps = [r["app"] for r in per_node.values()]
    net_rate = round(sum(nets) / len(nets), 3) if nets else None
    app_rate = round(sum(apps) / len(apps), 3) if apps else None
    return {"net_rate": net_rate, "app_rate": app_rate,
            # what the protocol adds per process: 1/Θ (a DUMMY or RATE per slot not filled by
            # the application) for VBR, Thm 3
            "overhead_rate": None if net_rate is None or app_rate is None
            else round(net_rate - app_rate, 3),
            "rate_check": {"violations": violations, "per_node": per_node}}


def gaps(events: Events, correct: list[str]) -> dict[str, Any]:
    """Def. 2 liveness (§7.1): received and not `late` implies delivered, per correct node."""
    missing = 0
    examples: list[dict[str, Any]] = []
    for node in correct:
        evs = events.get(node, [])
        got = {e["mid"] for e in evs if e["ev"] == "recv" and "mid" in e}
        late = {e["mid"] for e in evs if e["ev"] == "late" and "mid" in e}
        done = {e["mid"] for e in evs if e["ev"] == "fnl" and "mid" in e}
        lost = sorted(got - late - done)
        missing += len(lost)
        examples += [{"node": node, "mid": m} for m in lost[:3]]
    return {"violations": missing, "examples": examples[:10]}


def porder_mismatches(events: Events) -> int:
    """Lemma 4.1: every process computes the same schedule and cursor at the same change.
    Counts the positions where a node's k-th `porder` (hash, cycle, current) differs from
    the first node's (the shorter log is compared as a prefix)."""
    logs = [[(e.get("hash"), e.get("cycle"), e.get("current")) for e in evs
             if e["ev"] == "porder"] for evs in events.values()]
    logs = [log for log in logs if log]
    if len(logs) < 2:
        return 0
    ref = max(logs, key=len)
    return sum(1 for log in logs for a, b in zip(log, ref, strict=False) if a != b)


def path_counts(events: Events, holes_at: set[str] | None = None
                ) -> tuple[dict[str, int], dict[str, int]]:
    """Per path (`<sender member id>-><receiver>`): datagrams the receiver's FIFO channel
    dropped as late (overtaken or duplicated: the link reordered or duplicated them), and
    datagrams that never arrived (holes in the accepted rseqs of each sender incarnation, at
    each receiver incarnation, that no late arrival fills), counted at the receivers
    `holes_at` (None: all) -- the ones every datagram of a sender goes to: everyone for CBR
    and VBR (one rseq per multicast), the leader for the leader-based ones (whose grants and
    relays skip members)."""
    late: dict[str, int] = {}
    lost: dict[str, int] = {}
    for node, evs in events.items():
        got: dict[tuple[Any, Any, int], list[int]] = {}
        for e in evs:
            member, rseq = e.get("member"), e.get("rseq")
            if member is None or not isinstance(rseq, int):
                continue
            if e["ev"] == "late":
                key = f"{member}->{node}"
                late[key] = late.get(key, 0) + 1
            elif e["ev"] == "netrecv":
                # per receiver incarnation too: what a crashed receiver missed while down
                # is not a hole in what the network carried
                got.setdefault((member, e.get("member_inc", 0), e.get("inc", 0)),
                               []).append(rseq)
        if holes_at is not None and node not in holes_at:
            continue
        for (member, _sender_inc, _inc), seqs in got.items():
            # between the first and the last datagram received: a sender's first rseq need
            # not be a logged multicast (qos-vbr's first datagram is its join announcement)
            holes = max(seqs) - min(seqs) + 1 - len(set(seqs))
            key = f"{member}->{node}"
            holes -= min(holes, late.get(key, 0))
            if holes > 0:
                lost[key] = lost.get(key, 0) + holes
    return late, lost


def assumptions(protocol: str, model: Any, params: dict[str, Any], failure_kinds: list[str],
                d_meas: int | None, delta: int, g_meas: float, gamma: int, refused: int,
                events: Events) -> list[dict[str, Any]]:
    """Each assumption of the bound's model (catalogue `Model`) with whether this run held
    it and what was measured: `reorder`, FIFO links (datagrams reordered or duplicated per
    path, seen as late at the receiver's FIFO channel), `loss` (datagrams lost per path; held
    too where the model allows loss), `failures` (the fault
    kinds in the history), clocks within Γ/2 (Γ_meas), delays within Δ (Δ_meas), and the
    reservations granted."""
    holes_at = None
    if bound_kind(protocol) in ("leader", "timestamp-leader"):
        leader = params.get("leader") or min(events, default=None)
        holes_at = {str(leader)}
    late, lost = path_counts(events, holes_at)
    out: list[dict[str, Any]] = []
    if model is None or model.fifo:
        out.append({"name": "reorder", "held": not late,
                    "measured": {"reordered": sum(late.values()), "per_path": late}})
    loss_ok = model is not None and model.loss and (
        not model.loss_param or float(params.get(model.loss_param, 0) or 0) > 0)
    out.append({"name": "loss", "held": loss_ok or not lost, "allowed": loss_ok,
                "measured": {"lost": sum(lost.values()), "per_path": lost}})
    allowed = model.failures if model is not None else frozenset()
    out.append({"name": "failures", "held": all(k in allowed for k in failure_kinds),
                "measured": sorted(failure_kinds), "allowed": sorted(allowed)})
    if model is None or model.clocks:
        out.append({"name": "clocks", "held": g_meas <= gamma,
                    "measured": {"gamma_ms": _ms(g_meas), "declared_ms": _ms(gamma)}})
    out.append({"name": "delays", "held": d_meas is None or d_meas <= delta,
                "measured": {"delta_ms": _ms(d_meas), "declared_ms": _ms(delta)}})
    out.append({"name": "reservations", "held": not refused, "measured": {"refused": refused}})
    return out


def qos_section(events: Events, skew_ns: float, protocol: str, params: dict[str, Any],
                failures: bool, sim: bool, correct: list[str] | None = None,
                failure_kinds: list[str] | None = None, down: Down | None = None
                ) -> dict[str, Any]:
    """The `qos` section; {} for a protocol that claims no latency bound. `down`: per host
    the spans it was crashed or paused (`down_spans`); a `vbr` bound then leaves out the
    deliveries at a host that was down around them (`excused`)."""
    kind = bound_kind(protocol)
    if not kind:
        return {}
    lossy = protocol == "qos-vbr" and int(params.get("loss_tolerance", 0) or 0) > 0
    # §7.2: with message loss (x > 0) a lost slot is passed at its deadline, as a crashed
    # process is: the bound is Thm 5's Δ+2Γ+Θ
    failures = failures or lossy
    delta = duration_ns(params.get("delta", 50))
    gamma = duration_ns(params.get("gamma", 10))
    theta = duration_ns(params.get("theta", 20))
    po = max((int(e.get("po_ns", 0)) for evs in events.values() for e in evs
              if e["ev"] in ("relay", "grant")), default=0)
    bound = bound_ns(kind, delta, gamma, theta, po, failures)
    d_meas = delta_measured(events)
    g_meas = 2 * skew_ns
    # The node core logs every answer of admission control (`reserve` with `granted`,
    # nodes/core.py); a protocol's own `refused` line is the same refusal seen from above.
    refused = sum(1 for evs in events.values() for e in evs
                  if e["ev"] == "reserve" and e.get("granted") is False)
    # Thm 5 covers correct processes only; a process down (crashed or paused: the model's
    # failed process, §6) is correct again Δ+2Γ+Θ after it wakes (§6.3)
    init = delta + 2 * gamma + theta
    lat, lat_excused = split_latencies(events, down if kind == "vbr" else None, bound, init)
    worst = max(lat.values(), default=None)
    clocks_matter = kind in ("cbr", "vbr")
    why: list[str] = []
    if d_meas is not None and d_meas > delta:
        why.append(f"measured Δ {d_meas / 1e6:g} ms > declared {delta / 1e6:g} ms")
    if clocks_matter and g_meas > gamma:
        why.append(f"measured Γ {g_meas / 1e6:g} ms > declared {gamma / 1e6:g} ms")
    if refused:
        why.append(f"{refused} reservation(s) refused")
    entry = catalogue.find(protocol)
    model = entry.model if entry is not None else None
    measured = assumptions(protocol, model, params, failure_kinds or [], d_meas, delta,
                           g_meas, gamma, refused, events)
    for a in measured:
        if a["held"] or a["name"] in ("delays", "clocks", "reservations"):
            continue  # those three are said above, with their numbers
        if a["name"] == "reorder":
            why.append(f"{a['measured']['reordered']} datagram(s) reordered or duplicated "
                       "on FIFO links")
        elif a["name"] == "loss":
            why.append(f"{a['measured']['lost']} datagram(s) lost")
        elif a["name"] == "failures":
            why.append("failures outside the model: " + ", ".join(
                k for k in a["measured"] if k not in a["allowed"]))
    hold = not why
    eps = EPSILON_SIM_NS if sim else EPSILON_REAL_NS
    over = sorted(((d, m) for m, d in lat.items() if d > bound + eps), reverse=True)
    out: dict[str, Any] = {
        "protocol": protocol,
        "formula": {"cbr": "Δ+Γ", "vbr": "Δ+2Γ+Θ" if failures else "Δ+Γ+Θ",
                    "leader": "2Δ+pO", "timestamp-leader": "2Δ+max(pO,Θ)"}[kind],
        "bound_ms": _ms(bound),
        "max_latency_ms": _ms(worst),
        "slack_ms": None if worst is None else _ms(bound - worst),
        "delta_ms": _ms(delta), "gamma_ms": _ms(gamma),
        "theta_ms": _ms(theta) if kind in ("vbr", "timestamp-leader") else None,
        "po_ms": _ms(po) if kind in ("leader", "timestamp-leader") else None,
        "delta_measured_ms": _ms(d_meas),
        "gamma_measured_ms": _ms(g_meas),
        "assumptions_hold": hold,
        "assumptions_violated": why,
        "assumptions": measured,
        "refused": refused,
        "epsilon_ms": _ms(eps),
        "messages": len(lat),
        "above_bound": len(over),
        "examples": [{"mid": m, "latency_ms": _ms(d)} for d, m in over[:5]],
    }
    if lat_excused:
        late = sorted(((d, m) for m, d in lat_excused.items() if d > bound + eps),
                      reverse=True)
        out["excused"] = {
            "why": "delivered at a host crashed or paused before the message's deadline, "
                   "sent before its initialization time Δ+2Γ+Θ after waking had passed "
                   "(004 §6.5 Thm 5, §6.3)",
            "messages": len(lat_excused), "above_bound": len(late),
            "max_latency_ms": _ms(late[0][0] if late else max(lat_excused.values())),
            "examples": [{"mid": m, "latency_ms": _ms(d)} for d, m in late[:5]]}
    out.update(rates(events, kind, theta))
    if kind == "cbr":
        out["porder_mismatches"] = porder_mismatches(events)
    if lossy:
        out["gaps"] = gaps(events, correct if correct is not None else sorted(events))
    return out


def latency_check(qos: dict[str, Any]) -> dict[str, Any]:
    """summary.json `checks.latency_bound`: messages above the bound, judged only when the
    assumptions held (else 0 with `judged: false`)."""
    judged = bool(qos["assumptions_hold"])
    out = {"violations": qos["above_bound"] if judged else 0, "judged": judged,
           "bound_ms": qos["bound_ms"], "examples": qos["examples"] if judged else []}
    if not judged:
        out["note"] = ("not judged: the run left the bound's model ("
                       + "; ".join(qos.get("assumptions_violated") or []) + ")")
    return out


def failures_in(history: Any) -> bool:
    """Whether the fault schedule crashed, paused or cut off a host (Thm 5's set-up)."""
    return bool(history.crashed) or any(
        f.kind in ("crash", "restart", "pause", "partition") for f in history.intervals)


def failure_kinds(history: Any) -> list[str]:
    """The failure kinds in the fault history (crash, pause, partition), each once."""
    kinds = {f.kind for f in history.intervals if f.kind in ("crash", "pause", "partition")}
    return sorted(kinds | ({"crash"} if history.crashed else set()))


def qos_for_run(record: RunRecord, history: Any, correct: list[str]) -> dict[str, Any]:
    protocol, params = record.protocol
    if not bound_kind(protocol):
        return {}
    events, skew = read_events(record)
    return qos_section(events, skew, protocol, dict(params), failures_in(history),
                       record.experiment.get("backend") == "sim", correct, failure_kinds(history),
                       down_spans(history))


def qos_line(summary: dict[str, Any]) -> str:
    """One console line: the bound, the measured maximum and slack, and the assumptions."""
    q = summary.get("qos")
    if not q:
        return ""
    line = (f"QoS {q['protocol']}: bound {q['formula']} = {q['bound_ms']:g} ms, max latency "
            f"{q['max_latency_ms'] if q['max_latency_ms'] is not None else '-'} ms, slack "
            f"{q['slack_ms'] if q['slack_ms'] is not None else '-'} ms; measured Δ "
            f"{q['delta_measured_ms']} ms, Γ {q['gamma_measured_ms']} ms")
    excused = q.get("excused") or {}
    if excused.get("above_bound"):
        line += (f"; {excused['above_bound']} message(s) late only at a host crashed or paused "
                 f"(up to {excused['max_latency_ms']} ms): not bounded by Thm 5")
    if not q["assumptions_hold"]:
        line += "; assumptions violated (" + "; ".join(q["assumptions_violated"]) + \
            "): only safety judged"
    return line


def qos_html(summary: dict[str, Any]) -> str:
    """The report's QoS section: bound, measured maximum and slack, the empirical Δ and Γ
    against the declared ones, and whether the bound was judged."""
    from html import escape

    q = summary.get("qos")
    if not q:
        return ""

    def cell(v: Any) -> str:
        return "<td>–</td>" if v is None else f"<td>{escape(str(v))}</td>"

    rows = [("bound", f"{q['formula']} = {q['bound_ms']} ms"),
            ("max latency (tick to last delivery)", f"{q['max_latency_ms']} ms"),
            ("slack", f"{q['slack_ms']} ms"),
            ("Δ declared / measured", f"{q['delta_ms']} / {q['delta_measured_ms']} ms"),
            ("Γ declared / measured", f"{q['gamma_ms']} / {q['gamma_measured_ms']} ms"),
            ("assumptions", "hold: the bound is judged" if q["assumptions_hold"] else
             "violated (" + "; ".join(q["assumptions_violated"]) + "): only safety judged"),
            ("messages above the bound", q["above_bound"]),
            ("late only at a crashed or paused host (Thm 5 does not bound them)",
             (q.get("excused") or {}).get("above_bound", 0)),
            ("net / app rate per process (msgs/s)", f"{q['net_rate']} / {q['app_rate']}"
             + (f" (overhead {q['overhead_rate']})" if q.get("overhead_rate") is not None
                else "")),
            ("reservations refused", q["refused"])]
    body = "".join(f"<tr><td>{escape(k)}</td>{cell(v)}</tr>" for k, v in rows)
    return (f"<h2>QoS ({escape(q['protocol'])}, 004)</h2>"
            f"<table><tr><th>what</th><th>value</th></tr>{body}</table>")
