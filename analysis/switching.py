"""Checkers and per-switch metrics for the `switching` protocol (001 ch. 2: the
properties of §2.1 and the baselines of §2.2), written to summary.json as `switching`.

- **No duplicate delivery across a switch** (Table 2.1 TO4, Fig. 2.1 l.23): no message is
  final-delivered twice at a node; `duplicates_across_instances` counts those whose copies
  came from two instances (the classic failure: the same id ordered by both).
- **Total order across a switch** (TO1): the layer numbers its deliveries 1, 2, ... (`seq`)
  across switches, so every position must hold the same message at every node;
  `order_violations` counts positions where nodes disagree.
- **Per switch** (Figs. 2.4-2.9, §2.2.2): the request, the window from the first `start` to
  the last `end`, the switch duration per node, the switch time (first delivery of the new
  instance minus the request: the Performance section's figure), the largest inter-delivery
  gap around the window, the largest latency of a message delivered in it, and the extra
  bytes the mode put on the instances (`live`: payloads sent on both instances; `rabp`:
  re-issued, i.e. retransmitted, payloads).

The `switch` events carry fields the event table does not keep, so they are read from the
nodes' logs directly (there are a few per switch); deliveries come from the event table.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from analysis.record import RunRecord


PAD_NS = 200_000_000  # deliveries this long around a window count for its gap
SCHEDULE_SLACK_NS = 1_000_000_000  # a schedule's switchTo reaches the node within this


SWITCH_EVENTS = ("switch", "switch_rejected", "switch_policy")


def switch_events(record: RunRecord) -> list[dict[str, Any]]:
    """The `switch`, `switch_rejected` and `switch_policy` events of every node."""
    return list(record.iter_events(SWITCH_EVENTS))


def switching_section(events: Any, record: RunRecord) -> dict[str, Any]:
    """`summary.json` `switching`, or {} for a run without switching events. The fnl and
    send events come to the driver in one Spark job (as Arrow); the rest is computed here."""
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    sw = switch_events(record)
    both = (events.filter(F.col("ev").isin("fnl", "send"))
            .select("ev", "node", "mid", "t", "proto", "seq").toArrow())
    fnl = both.filter(pc.equal(both["ev"], "fnl"))
    if not sw and not pc.any(pc.starts_with(pc.fill_null(fnl["proto"], ""),
                                            "switching#")).as_py():
        return {}
    copies = fnl.group_by(["node", "mid"]).aggregate([
        ("proto", "count", pc.CountOptions(mode="all")), ("proto", "count_distinct")])
    copies = copies.filter(pc.greater(copies["proto_count"], 1))
    dup_rows = sorted(zip(*(copies[c].to_pylist() for c in (
        "node", "mid", "proto_count", "proto_count_distinct")), strict=True),
        key=lambda r: (r[0] or "", r[1] or ""))
    ordered = fnl.filter(pc.is_valid(fnl["seq"]))
    positions = ordered.group_by("seq").aggregate([("mid", "count_distinct")])
    disputed = sorted(positions.filter(pc.greater(positions["mid_count_distinct"], 1))["seq"]
                      .to_pylist())
    sends = both.filter(pc.and_(pc.equal(both["ev"], "send"), pc.is_valid(both["mid"])))
    sent_at: dict[str, list[int]] = defaultdict(list)
    for mid, t in zip(sends["mid"].to_pylist(), sends["t"].to_pylist(), strict=True):
        sent_at[mid].append(t)
    per_node: dict[str, list[tuple[int, str, int | None]]] = defaultdict(list)
    for node, mid, t, proto in zip(*(fnl[c].to_pylist() for c in ("node", "mid", "t", "proto")),
                                   strict=True):
        for sent in sent_at.get(mid, [None]) if mid is not None else [None]:
            per_node[node].append((int(t), proto or "", sent))
    for dl in per_node.values():
        dl.sort(key=lambda d: d[0])
    switches = _per_switch(sw, per_node, scheduled_switches(record))
    mode = next((e.get("mode") for e in sw if e.get("mode")), None)
    extra = sum(s["extra_bytes"] for s in switches)
    gaps = [s["max_gap_ms"] for s in switches if s["max_gap_ms"] is not None]
    return {
        "mode": mode,
        "switches": sum(1 for s in switches if s["completed"]),
        "requested": sum(1 for e in sw if e.get("phase") == "request"),
        "rejected": sum(1 for e in sw if e["ev"] == "switch_rejected"),
        "policy_requests": sum(1 for e in sw if e["ev"] == "switch_policy"),
        "duplicates": sum(n - 1 for _, _, n, _ in dup_rows),
        "duplicates_across_instances": sum(n - 1 for _, _, n, instances in dup_rows
                                           if instances > 1),
        "duplicate_examples": [f"{node}:{mid}" for node, mid, _, _ in dup_rows[:5]],
        "order_violations": len(disputed),
        "order_examples": [int(seq) for seq in disputed[:5]],
        "steady_gap_p99_ms": _steady_gap_p99(per_node, switches),
        "max_gap_ms": max(gaps) if gaps else None,
        "mean_max_gap_ms": round(sum(gaps) / len(gaps), 3) if gaps else None,
        "max_switch_ms": max((s["switch_ms"] for s in switches if s["switch_ms"] is not None),
                             default=None),
        "extra_bytes": extra,
        "retransmitted_bytes": extra if mode == "rabp" else 0,
        "per_switch": switches,
    }


def scheduled_switches(record: RunRecord) -> list[tuple[int, str]]:
    """(true ns, host) of every `switchTo` the fault schedule called (faults.jsonl `mgmt`
    entries), so that a request can be told apart from an operator's or a client's."""
    out: list[tuple[int, str]] = []
    for f in record.faults:
        params = f.get("params") or {}
        if isinstance(f, dict) and f.get("kind") == "mgmt" and \
                (params.get("exec") or [None])[0] == "switchTo":
            out += [(int(f["t"]), str(h)) for h in f.get("hosts") or []]
    return out


def _why(request: dict[str, Any] | None, scheduled: list[tuple[int, str]]) -> str:
    """mgmt (a management client's `switchTo`), schedule (a `mgmt` fault entry's) or
    policy (the layer's own, `adapt_to_all`/`adapt_to_one`)."""
    if request is None:
        return ""
    reason = str(request.get("reason", "mgmt"))
    if reason == "mgmt":
        # the layer picks a request up at its next tick, wait_ms after the call, and the
        # call reaches the node a little after the schedule's time (HTTP on real backends)
        waited = round(float(request.get("wait_ms", 0)) * 1e6) + SCHEDULE_SLACK_NS
        if any(host == request.get("node") and request["t"] - waited <= t <= request["t"]
               for t, host in scheduled):
            return "schedule"
    return reason


def _per_switch(sw: list[dict[str, Any]], per_node: dict[str, list[tuple[int, str, int | None]]],
                scheduled: list[tuple[int, str]] | None = None) -> list[dict[str, Any]]:
    by_epoch: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in sw:
        if e["ev"] == "switch" and isinstance(e.get("epoch"), int):
            by_epoch[e["epoch"]].append(e)
    nodes = sorted(per_node)
    index = {node: [t for t, _, _ in dl] for node, dl in per_node.items()}
    out = []
    for epoch in sorted(by_epoch):
        evs = by_epoch[epoch]
        starts = [e for e in evs if e.get("phase") == "start"]
        ends = [e for e in evs if e.get("phase") == "end"]
        requests = [e["t"] for e in evs if e.get("phase") == "request"]
        # the request behind the switch: the first for the epoch (rivals for the same epoch
        # are rejected, `switch_rejected`)
        winner = min((e for e in evs if e.get("phase") == "request"), key=lambda e: e["t"],
                     default=None)
        if not starts:
            continue
        to = starts[0].get("to", "")
        w0 = min(e["t"] for e in starts)
        w1 = max(e["t"] for e in ends) if ends else w0
        asked = min(requests) if requests else w0
        first_new = []
        gaps = []
        worst_latency = None
        for node in nodes:
            dl = per_node[node]
            times = index[node]
            lo, hi = bisect.bisect_left(times, w0), bisect.bisect_right(times, w1 + PAD_NS)
            new = next((t for t, proto, _ in dl[lo:] if proto == f"switching#{to}"), None)
            if new is not None:
                first_new.append(new)
            edge = times[max(0, bisect.bisect_left(times, w0 - PAD_NS) - 1):
                         bisect.bisect_right(times, w1 + PAD_NS) + 1]
            if len(edge) > 1:
                gaps.append(max(b - a for a, b in zip(edge, edge[1:], strict=False)))
            for t, _, sent in dl[lo:hi]:
                if sent is not None:
                    lat = t - int(sent)
                    worst_latency = lat if worst_latency is None else max(worst_latency, lat)
        durations = [float(e.get("duration_ms", 0.0)) for e in ends]
        out.append({
            "epoch": epoch,
            "from": starts[0].get("from"),
            "to": to,
            "requested_t": asked,
            "requested_by": winner["node"] if winner else None,
            "reason": _why(winner, scheduled or []),
            "window_ms": round((w1 - w0) / 1e6, 3),
            "completed": len({e["node"] for e in ends}) == len(nodes) and bool(nodes),
            "duration_ms_max": max(durations) if durations else None,
            "switch_ms": round((max(first_new) - asked) / 1e6, 3)
            if len(first_new) == len(nodes) and nodes else None,
            "max_gap_ms": round(max(gaps) / 1e6, 3) if gaps else None,
            "max_latency_ms": round(worst_latency / 1e6, 3) if worst_latency is not None
            else None,
            "extra_msgs": sum(int(e.get("dup_msgs", 0)) for e in ends),
            "extra_bytes": sum(int(e.get("dup_bytes", 0)) for e in ends),
        })
    return out


def _steady_gap_p99(per_node: dict[str, list[tuple[int, str, int | None]]],
                    switches: list[dict[str, Any]]) -> float | None:
    """The p99 inter-delivery gap away from any switch window (the baseline against which
    001 §2.2.2's "no stop in the flow" is judged)."""
    windows = [(s["requested_t"] - PAD_NS, s["requested_t"] + round(s["window_ms"] * 1e6)
                + 2 * PAD_NS) for s in switches]
    gaps: list[int] = []
    for dl in per_node.values():
        times = [t for t, _, _ in dl]
        for a, b in zip(times, times[1:], strict=False):
            if not any(lo <= a <= hi or lo <= b <= hi for lo, hi in windows):
                gaps.append(b - a)
    if not gaps:
        return None
    gaps.sort()
    return round(gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))] / 1e6, 3)


def switch_windows(record: RunRecord) -> dict[int, tuple[int, int]]:
    """Per epoch: (first `start`, last `end`) in true ns, over all nodes (report shading)."""
    starts: dict[int, int] = {}
    ends: dict[int, int] = {}
    for e in switch_events(record):
        epoch = e.get("epoch")
        if e["ev"] != "switch" or not isinstance(epoch, int):
            continue
        if e.get("phase") == "start":
            starts[epoch] = min(starts.get(epoch, e["t"]), e["t"])
        elif e.get("phase") == "end":
            ends[epoch] = max(ends.get(epoch, e["t"]), e["t"])
    return {k: (v, ends.get(k, v)) for k, v in starts.items()}
