"""Whether the emulated WAN was the one configured: summary.json `fidelity`.

A saturated machine delays the shapers, the kernel and the nodes' event loops, and a run's
datagrams then cross a slower, lossier network than its topology says, with nothing in the
checks to show it (Handigol et al., CoNEXT 2012: monitor the emulation's invariants and say
when a run was not faithful). The nodes measure what they saw (nodes/emulation.py, one
`ev=emulation` line per incarnation), the runner samples the machine's CPU
(testbed/cpuload.py, cpu.jsonl); `fidelity` judges them against the configured paths
(paths.csv), pure on those inputs.

Per ordered pair (src, dst), from src's own stamped data datagrams:

- transit: the p99 of the one-way transit measured at dst, corrected for the emulated clock of
  src (`skew_ns`) and for measured host clock offsets (remote, `offsets`), less src's p99
  stamp-to-transmit hold (what the protocol held back is not the network's), against the
  configured delay: degraded when the excess passes `allowed_excess_ms` = max(MIN_EXCESS_MS,
  DELAY_FRACTION x delay) + JITTER_K x jitter;
- loss: 1 - received / sent (sent: handed to the network before the link model, so the
  model's own drops are the configured loss), degraded when it exceeds the configured loss by
  more than max(MIN_LOSS_EXCESS, 4 binomial standard deviations); not judged when a link
  of the topology loses by a model paths.csv does not carry (`gemodel`, `corrupt`).

A pair is judged on at least MIN_SAMPLES datagrams, and not at all when a fault touched one
of its hosts (a crash, pause, partition, link or clock fault changes the path on purpose) or
its path has a bandwidth limit (queueing is then the configured behaviour), and no pair is
under `transport: tls` (streams wait for connections and retransmit). The node loops'
lag and the CPU samples are reported and named in the cause; they decide nothing alone.
The status is `degraded` when a judged pair is, `faithful` when at least one pair was judged
and none is, `not judged` otherwise. The simulator's network is the configured one by
construction (`faithful`, `by: construction`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MIN_EXCESS_MS = 50.0  # p99 transit excess allowed whatever the delay
DELAY_FRACTION = 0.5  # ... or this fraction of the configured delay, whichever is larger
JITTER_K = 3.0  # configured jitter allowed on top, this many times
MIN_SAMPLES = 100  # datagrams a pair is judged on at least (a p99 needs a hundred)
MIN_LOSS_EXCESS = 0.02  # loss beyond the configured allowed whatever the sample
SATURATED = 0.95  # a CPU sample this busy counts as saturated
QUANTILES = (0.5, 0.99)


@dataclass(frozen=True)
class ConfiguredPath:
    """One ordered pair's configured path (paths.csv)."""

    delay_ms: float
    jitter_ms: float = 0.0
    loss: float = 0.0
    bandwidth_bps: int | None = None


def parse_paths(text: str) -> dict[tuple[str, str], ConfiguredPath]:
    """paths.csv's rows by (src, dst); rows that do not parse are left out."""
    import csv
    import io

    out = {}
    for row in csv.DictReader(io.StringIO(text)):
        try:
            bw = row.get("bandwidth_bps") or ""
            out[(row["src"], row["dst"])] = ConfiguredPath(float(row["delay_ms"]),
                                                 float(row["jitter_ms"] or 0),
                                                 float(row["loss"] or 0),
                                                 int(float(bw)) if bw else None)
        except (KeyError, ValueError, TypeError):
            continue
    return out


def _hist(raw: Any) -> dict[int, int]:
    """A logged histogram ({"bin µs": count}) with what does not parse left out."""
    out: dict[int, int] = {}
    if not isinstance(raw, dict):
        return out
    for k, v in raw.items():
        try:
            b, n = int(k), int(v)
        except (TypeError, ValueError):
            continue
        if n > 0:
            out[b] = out.get(b, 0) + n
    return out


def _merge(into: dict[int, int], more: Mapping[int, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def quantiles(hist: Mapping[int, int]) -> dict[str, float | int | None]:
    """p50, p99 and max (ms, bins' lower bounds) and the count of a histogram."""
    n = sum(hist.values())
    out: dict[str, float | int | None] = {"count": n}
    keys = sorted(hist)
    for q in QUANTILES:
        want, seen, at = q * n, 0, None
        for k in keys:
            seen += hist[k]
            if seen >= want:
                at = k
                break
        out[f"p{round(q * 100)}_ms"] = None if at is None else at / 1e3
    out["max_ms"] = keys[-1] / 1e3 if keys else None
    return out


def _cpu(text: str) -> dict[str, Any]:
    busy, loads, cpus = [], [], 0
    for line in text.splitlines():
        try:
            rec = json.loads(line)
            busy.append(float(rec["busy"]))
            cpus = int(rec.get("cpus") or cpus)
            if rec.get("load1") is not None:
                loads.append(float(rec["load1"]))
        except (ValueError, KeyError, TypeError):
            continue
    if not busy:
        return {"samples": 0}
    return {"samples": len(busy), "cpus": cpus, "busy_mean": round(sum(busy) / len(busy), 3),
            "busy_max": round(max(busy), 3),
            "saturated_samples": sum(1 for b in busy if b >= SATURATED),
            "load1_max": max(loads) if loads else None}


def fidelity(records: Mapping[str, Iterable[Mapping[str, Any]]],
             paths: Mapping[tuple[str, str], ConfiguredPath], cpu_text: str = "",
             offsets: Mapping[str, int] | None = None,
             faulted: Mapping[str, str] | None = None,
             policy: str = "strict", loss_note: str | None = None,
             not_judged: str | None = None) -> dict[str, Any]:
    """The `fidelity` section (module docstring). `records`: each host's `ev=emulation`
    events; `paths`: the configured paths; `cpu_text`: cpu.jsonl; `offsets`: host clock minus
    orchestrator clock, ns (remote); `faulted`: host -> the fault that excuses its pairs;
    `policy`: the experiment's `fidelity` (strict or best-effort); `loss_note`: why loss is
    not judged (a loss model beyond paths.csv's `loss`), None to judge it; `not_judged`: why
    no pair is judged (measured and reported all the same), None to judge them."""
    offsets = offsets or {}
    faulted = faulted or {}
    if not_judged is not None:
        faulted = {**dict.fromkeys(records, not_judged), **faulted}
    transit: dict[tuple[str, str], dict[int, int]] = {}
    received: dict[tuple[str, str], int] = {}
    sent: dict[tuple[str, str], int] = {}
    hold: dict[str, dict[int, int]] = {}
    lag: dict[str, dict[int, int]] = {}
    skew: dict[str, set[int]] = {}
    for host, recs in records.items():
        for r in recs:
            for src, h in (r.get("transit") or {}).items():
                _merge(transit.setdefault((str(src), host), {}), _hist(h))
            for src, n in (r.get("received") or {}).items():
                if isinstance(n, int):
                    received[(str(src), host)] = received.get((str(src), host), 0) + n
            for dst, n in (r.get("sent") or {}).items():
                if isinstance(n, int):
                    sent[(host, str(dst))] = sent.get((host, str(dst)), 0) + n
            _merge(hold.setdefault(host, {}), _hist(r.get("hold")))
            _merge(lag.setdefault(host, {}), _hist(r.get("lag")))
            if isinstance(r.get("skew_ns"), int):
                skew.setdefault(host, set()).add(int(r["skew_ns"]))
    holds = {h: quantiles(v) for h, v in hold.items()}
    pairs = []
    for (src, dst) in sorted(set(transit) | set(sent)):
        path = paths.get((src, dst))
        if path is None or src == dst:
            continue
        row = _pair(src, dst, path, transit.get((src, dst), {}), sent.get((src, dst), 0),
                    received.get((src, dst), 0), holds.get(src, {}), offsets, skew, faulted,
                    loss_note)
        pairs.append(row)
    judged = [p for p in pairs if p["judged"]]
    bad = [p for p in judged if p["degraded"]]
    out: dict[str, Any] = {
        "status": "degraded" if bad else "faithful" if judged else "not judged",
        "policy": policy,
        "thresholds": {"min_excess_ms": MIN_EXCESS_MS, "delay_fraction": DELAY_FRACTION,
                       "jitter_k": JITTER_K, "min_samples": MIN_SAMPLES,
                       "min_loss_excess": MIN_LOSS_EXCESS},
        "pairs": pairs,
        "judged_pairs": len(judged),
        "degraded_pairs": len(bad),
        "loop_lag": {h: quantiles(v) for h, v in sorted(lag.items()) if v},
        "hold": {h: q for h, q in sorted(holds.items()) if q.get("count")},
        "cpu": _cpu(cpu_text),
    }
    if bad:
        out["cause"] = cause(bad, len(judged), out["loop_lag"], out["cpu"])
    elif not judged:
        out["note"] = ("no pair had an unfaulted, unlimited path with "
                       f"{MIN_SAMPLES} measured data datagrams" if pairs
                       else "no node measured its datagrams (nodes/emulation.py)")
    return out


def _pair(src: str, dst: str, path: ConfiguredPath, hist: dict[int, int], sent: int,
          received: int,
          hold: Mapping[str, Any], offsets: Mapping[str, int], skew: Mapping[str, set[int]],
          faulted: Mapping[str, str], loss_note: str | None) -> dict[str, Any]:
    q = quantiles(hist)
    # transit at dst = dst's host clock - src's emulated stamp: add src's emulated skew, take
    # off the hosts' clock difference (remote)
    shift_ms = (next(iter(skew.get(src) or {0})) - offsets.get(dst, 0)
                + offsets.get(src, 0)) / 1e6
    for k in ("p50_ms", "p99_ms", "max_ms"):
        if q.get(k) is not None:
            q[k] = round(float(q[k] or 0) + shift_ms, 3)
    held = float(hold.get("p99_ms") or 0.0)
    allowed = max(MIN_EXCESS_MS, DELAY_FRACTION * path.delay_ms) + JITTER_K * path.jitter_ms
    row: dict[str, Any] = {
        "src": src, "dst": dst, "delay_ms": path.delay_ms, "jitter_ms": path.jitter_ms,
        "loss": path.loss, "samples": q["count"], "p50_ms": q["p50_ms"], "p99_ms": q["p99_ms"],
        "max_ms": q["max_ms"], "hold_p99_ms": held, "allowed_excess_ms": allowed,
        "allowed_p99_ms": round(path.delay_ms + held + allowed, 3),
        "sent": sent, "received": received, "judged": False, "degraded": False}
    why = next((f"{h}: {faulted[h]}" for h in (src, dst) if h in faulted), None)
    if why is None and len(skew.get(src) or ()) > 1:
        why = f"{src}'s emulated clock moved"
    if why is None and path.bandwidth_bps:
        why = "bandwidth-limited path: queueing is configured behaviour"
    if why is None and int(q["count"] or 0) < MIN_SAMPLES:
        why = f"{q['count']} data datagrams measured, fewer than {MIN_SAMPLES}"
    if why is not None:
        row["note"] = why
        return row
    row["judged"] = True
    excess = float(q["p99_ms"] or 0) - held - path.delay_ms
    row["excess_p99_ms"] = round(excess, 3)
    problems = []
    if excess > allowed:
        problems.append("transit")
    if loss_note is not None:
        row["loss_note"] = loss_note
    elif sent >= MIN_SAMPLES:
        lost = max(0.0, 1 - received / sent)
        p = max(path.loss, 1 / sent)
        allowed_loss = path.loss + max(MIN_LOSS_EXCESS, 4 * math.sqrt(p * (1 - p) / sent))
        row["measured_loss"] = round(lost, 4)
        row["allowed_loss"] = round(allowed_loss, 4)
        if lost > allowed_loss:
            problems.append("loss")
    if problems:
        row["degraded"] = True
        row["why"] = problems
    return row


def cause(bad: list[dict[str, Any]], judged: int, lag: Mapping[str, Any],
          cpu: Mapping[str, Any]) -> str:
    """One line: what went wrong on how many pairs, the worst, and the machine's state."""
    parts = []
    slow = [p for p in bad if "transit" in p.get("why", ())]
    if slow:
        w = max(slow, key=lambda p: p["excess_p99_ms"])
        parts.append(f"p99 one-way transit over the configured delay on {len(slow)} of "
                     f"{judged} pairs (worst {w['src']}->{w['dst']}: {w['p99_ms']:g} ms for "
                     f"{w['delay_ms']:g} ms configured)")
    lossy = [p for p in bad if "loss" in p.get("why", ())]
    if lossy:
        w = max(lossy, key=lambda p: p["measured_loss"] - p["loss"])
        parts.append(f"loss beyond the configured on {len(lossy)} of {judged} pairs (worst "
                     f"{w['src']}->{w['dst']}: {w['measured_loss']:.1%} for {w['loss']:.1%} "
                     "configured)")
    if cpu.get("samples"):
        parts.append(f"CPU {cpu['busy_mean']:.0%} busy on average, saturated in "
                     f"{cpu['saturated_samples']} of {cpu['samples']} samples")
    lagged = [(float(v.get("p99_ms") or 0), h) for h, v in lag.items()]
    if lagged:
        worst, host = max(lagged)
        parts.append(f"node loop lag p99 up to {worst:g} ms ({host})")
    return "; ".join(parts)


def by_construction(policy: str = "strict") -> dict[str, Any]:
    """The simulator's section: its network is the configured one by construction."""
    return {"status": "faithful", "by": "construction", "policy": policy}
