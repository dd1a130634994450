"""A harness for the protocol tests: run a protocol on the deterministic simulator over a
uniform or explicit delay matrix with loss and jitter, then judge the delivery logs with plain
Python oracles (the Spark checker suite is exercised separately, in tests/test_protocols.py).

The oracles follow the definitions of 002 ("FIFO ordering", "Causal ordering", "Total Order"), with
happened-before rebuilt from the logs alone: m1 -> m2 iff the sender of m2 sent or delivered
m1 before sending m2, closed transitively (per-node vector clocks over the logs, in true time).
Each order oracle counts the deliveries that must move, as the checker suite does.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodes.config import Member, NodeConfig, PathConfig, WorkloadConfig
from nodes.protocols.base import Layer
from nodes.sim import SIM_EPOCH_NS, Simulator

Events = dict[str, list[dict[str, Any]]]


def configs(protocol: str, out: Path, *, n: int = 5, delay_ms: float = 5.0,
            matrix_ms: list[list[float]] | None = None, jitter_ms: float = 1.0,
            loss: float = 0.02, rate: float = 20.0, duration_s: float = 10.0,
            drain_s: float = 3.0, params: dict[str, Any] | None = None,
            senders: set[int] | None = None, seed: int = 7,
            arrival: str = "poisson") -> list[NodeConfig]:
    if matrix_ms is not None:
        n = len(matrix_ms)
    names = [f"h{i + 1}" for i in range(n)]
    members = [Member(i, names[i], f"198.18.0.{i + 1}", 7000) for i in range(n)]

    def d(i: int, j: int) -> float:
        return matrix_ms[i][j] if matrix_ms is not None else delay_ms

    return [
        NodeConfig(
            node_id=i, name=names[i], members=members, protocol=protocol,
            params=dict(params or {}), log_path=str(out / "nodes" / names[i] / "events.jsonl"),
            seed=seed, start_at_ns=SIM_EPOCH_NS, duration_ns=round(duration_s * 1e9),
            drain_ns=round(drain_s * 1e9),
            workload=WorkloadConfig(senders is None or i in senders, rate, 100, arrival),
            paths={j: PathConfig(round(d(i, j) * 1e6), round(jitter_ms * 1e6), loss=loss)
                   for j in range(n) if j != i})
        for i in range(n)
    ]


def run(cfgs: list[NodeConfig], seed: int = 7,
        patch: Callable[[int, Layer], None] | None = None) -> Simulator:
    """Run to the end of the drain; `patch(node_id, layer)` may alter a protocol first (the
    negative controls)."""
    sim = Simulator(cfgs, seed=seed)
    if patch is not None:
        for nid, core in sim.cores.items():
            patch(nid, core.protocol)
    sim.run(max(c.start_at_ns + c.duration_ns + c.drain_ns for c in cfgs))
    return sim


def read_events(out: Path) -> Events:
    events: Events = {}
    for path in sorted((out / "nodes").glob("*/events.jsonl")):
        events[path.parent.name] = [json.loads(line) for line in path.read_text().splitlines()]
    return events


def deliveries(events: Events) -> dict[str, list[str]]:
    return {h: [e["mid"] for e in evs if e["ev"] == "fnl"] for h, evs in events.items()}


def _split(mid: str) -> tuple[str, int]:
    origin, n = mid.rsplit(":", 1)
    return origin, int(n)


def _lis(values: list[int]) -> int:
    tails: list[int] = []
    for v in values:
        k = bisect.bisect_left(tails, v)
        if k == len(tails):
            tails.append(v)
        else:
            tails[k] = v
    return len(tails)


def fifo_moves(events: Events) -> dict[str, int]:
    """Per node: the fewest deliveries that must move to restore each sender's order."""
    out = {}
    for h, mids in deliveries(events).items():
        per: dict[str, list[int]] = {}
        for mid in dict.fromkeys(mids):
            o, k = _split(mid)
            per.setdefault(o, []).append(k)
        out[h] = sum(len(v) - _lis(v) for v in per.values())
    return {h: v for h, v in out.items() if v}


def total_order_pairs(events: Events) -> int:
    """Pairs of messages two nodes deliver in different orders (gaps allowed)."""
    pos = {h: {m: k for k, m in enumerate(dict.fromkeys(mids))}
           for h, mids in deliveries(events).items()}
    bad: set[tuple[str, str]] = set()
    hosts = sorted(pos)
    for a_i, a in enumerate(hosts):
        for b in hosts[a_i + 1:]:
            common = [m for m in pos[a] if m in pos[b]]
            order_b = sorted(common, key=lambda m: pos[b][m])
            # inversions between a's order and b's order, by brute force over the displaced
            rank_a = {m: pos[a][m] for m in common}
            seq = [rank_a[m] for m in order_b]
            for x in range(len(seq)):
                for y in range(x + 1, min(len(seq), x + 400)):
                    if seq[x] > seq[y]:
                        bad.add(tuple(sorted((order_b[x], order_b[y]))))  # type: ignore[arg-type]
    return len(bad)


def sent(events: Events) -> dict[str, str]:
    """mid -> the host that sent it."""
    return {e["mid"]: h for h, evs in events.items() for e in evs if e["ev"] == "send"}


def integrity(events: Events) -> int:
    s = sent(events)
    bad = 0
    for mids in deliveries(events).values():
        bad += len(mids) - len(set(mids))
        bad += sum(1 for m in mids if m not in s)
    return bad


def agreement(events: Events, correct: set[str] | None = None) -> int:
    """(node, mid) pairs: a correct node missing a sent message some node delivered."""
    dl = {h: set(m) for h, m in deliveries(events).items()}
    hosts = correct if correct is not None else set(dl)
    everyone = set().union(*dl.values()) & set(sent(events))
    return sum(len(everyone - dl[h]) for h in hosts)


def validity(events: Events) -> int:
    """Messages sent by a node that some node (its sender included) never delivered."""
    dl = {h: set(m) for h, m in deliveries(events).items()}
    return sum(1 for m in sent(events) for h in dl if m not in dl[h])


def causal_moves(events: Events) -> dict[str, int]:
    """Per node: deliveries out of causal order. A delivery is `early` when a causal
    predecessor the node also delivers comes later, `late` when a causal successor came
    earlier; removing either kind leaves a causal sequence, so the smaller count bounds the
    deliveries that must move (exactly, for one misplaced delivery)."""
    # Replay every node's events in true time to rebuild happened-before as vector clocks.
    merged = sorted(((e["t"], h, k, e) for h, evs in events.items() for k, e in enumerate(evs)
                     if e["ev"] in ("send", "fnl")), key=lambda x: x[:3])
    vc: dict[str, dict[str, int]] = {h: {} for h in events}
    stamp: dict[str, dict[str, int]] = {}
    for _, h, _, e in merged:
        mine = vc[h]
        if e["ev"] == "send":
            o, k = _split(e["mid"])
            mine[o] = max(mine.get(o, 0), k)
            stamp[e["mid"]] = dict(mine)
        elif e["mid"] in stamp:
            for q, k in stamp[e["mid"]].items():
                if k > mine.get(q, 0):
                    mine[q] = k
    out = {}
    for h, mids in deliveries(events).items():
        order = [m for m in dict.fromkeys(mids) if m in stamp]
        pos = {m: k for k, m in enumerate(order)}
        by_origin: dict[str, list[tuple[int, int]]] = {}
        for m in order:
            o, k = _split(m)
            by_origin.setdefault(o, []).append((k, pos[m]))
        for v in by_origin.values():
            v.sort()
        # prefix max of positions per origin, by message number
        pref: dict[str, tuple[list[int], list[int]]] = {}
        for o, v in by_origin.items():
            ks = [k for k, _ in v]
            best, run_max = [], -1
            for _, p in v:
                run_max = max(run_max, p)
                best.append(run_max)
            pref[o] = (ks, best)
        early: set[str] = set()
        late: set[str] = set()
        for m in order:
            o_m, k_m = _split(m)
            for q, k in stamp[m].items():
                if q == o_m:
                    k -= 1  # m's own number: predecessors only
                if q not in pref or k <= 0:
                    continue
                ks, best = pref[q]
                idx = bisect.bisect_right(ks, k) - 1
                if idx >= 0 and best[idx] > pos[m]:
                    early.add(m)
                    for kk, pp in by_origin[q][: idx + 1]:
                        if pp > pos[m]:
                            late.add(f"{q}:{kk}")
        n = min(len(early), len(late))
        if n:
            out[h] = n
    return out


def latencies_ms(events: Events) -> list[float]:
    t_send = {e["mid"]: e["t"] for evs in events.values() for e in evs if e["ev"] == "send"}
    return sorted((e["t"] - t_send[e["mid"]]) / 1e6 for evs in events.values() for e in evs
                  if e["ev"] == "fnl" and e["mid"] in t_send)


def quantile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")
