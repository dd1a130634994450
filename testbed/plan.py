"""`testbed plan`: what SETO, the Fast SETO heuristic and the optimum would do on a topology.

Renders the one-way delay matrix and, for each planner in `nodes.planner`, the resulting
optimistic-delivery latencies (delta = omega + x) and their overall average latency (003 eq. 3).
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table

from nodes.planner import Plan, heuristic_plan, optimal_plan, seto_plans
from testbed.pathcheck import CONSOLE_HOSTS

_WIDTH = 160


def _rows(matrix: Sequence[Sequence[float]] | np.ndarray) -> list[list[float]]:
    return [[round(float(v), 6) for v in row] for row in np.asarray(matrix, dtype=float)]


def _titled(console: Console, title: str, table: Table) -> None:
    # A separate line, not Table(title=...): rich wraps titles to the table's width.
    console.print(title, markup=False)
    console.print(table)


def _matrix_table(hosts: Sequence[str], matrix: Sequence[Sequence[float]] | np.ndarray) -> Table:
    table = Table()
    table.add_column("from \\ to", style="bold")
    for h in hosts:
        table.add_column(h, justify="right")
    for h, row in zip(hosts, matrix, strict=True):
        table.add_row(h, *(f"{float(v):.2f}" for v in row))
    return table


def _collapsed(hosts: Sequence[str], matrix: Sequence[Sequence[float]] | np.ndarray,
               sites: Mapping[str, str | None]) -> Table:
    """A host matrix per site pair (above CONSOLE_HOSTS hosts): the site pair's value, or the
    min..max of its host pairs (the diagonal's zeros left out)."""
    m = np.asarray(matrix, dtype=float)
    group = [sites.get(h) or h for h in hosts]
    order = list(dict.fromkeys(group))
    idx = {s: [i for i, g in enumerate(group) if g == s] for s in order}
    short = [s[:5] for s in order]  # the columns: the sites' first letters
    if len(set(short)) < len(short):
        short = [str(i) for i, _ in enumerate(order, 1)]
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 0, 0, 1), pad_edge=False)
    table.add_column("from \\ to", style="bold", no_wrap=True)
    table.add_column("hosts", justify="right", no_wrap=True)
    for name in short:
        table.add_column(name, justify="right", no_wrap=True)
    for a, name in zip(order, short, strict=True):
        cells = []
        for b in order:
            vals = [m[i, j] for i in idx[a] for j in idx[b] if i != j]
            if not vals:
                cells.append("-")
                continue
            lo, hi = round(min(vals), 2), round(max(vals), 2)
            cells.append(f"{lo:g}" if lo == hi else f"{lo:g}..{hi:g}")
        table.add_row(a if name == a[:5] else f"{name} {a}", str(len(idx[a])), *cells)
    return table


def _plans(
    omega_ms: Sequence[Sequence[float]], rates: Sequence[float] | None
) -> tuple[list[Plan], Plan, Plan]:
    heuristic = heuristic_plan(omega_ms, rates)
    return seto_plans(omega_ms, rates), heuristic, optimal_plan(omega_ms, rates)


def plan_report(
    hosts: list[str],
    omega_ms: list[list[float]],
    rates: list[float] | None,
    as_json: bool,
    sites: Mapping[str, str | None] | None = None,
) -> str:
    """Plans for one topology, as rich tables (text) or one JSON object.

    ``omega_ms[i][j]`` is the one-way delay from ``hosts[i]`` to ``hosts[j]``; ``rates`` are
    the hosts' sending rates (equal when None), which weight the OAL and the optimum. Above
    CONSOLE_HOSTS hosts the text shows the matrices per site pair of `sites` (host -> site)
    and the best CONSOLE_HOSTS candidate sequencers; the JSON is always per host.
    """
    if len(omega_ms) != len(hosts) or any(len(row) != len(hosts) for row in omega_ms):
        raise ValueError(f"omega_ms must be {len(hosts)} x {len(hosts)} for hosts {hosts}")
    setos, heuristic, optimal = _plans(omega_ms, rates)
    best = min(setos, key=lambda p: p.oal)
    assert best.sequencer is not None
    if as_json:
        doc = {
            "hosts": list(hosts),
            "omega_ms": _rows(omega_ms),
            "plans": {
                "seto": {
                    "sequencer": hosts[best.sequencer],
                    "delay_ms": _rows(best.delta),
                    "oal_ms": float(best.oal),
                },
                "heuristic": {"delay_ms": _rows(heuristic.delta), "oal_ms": float(heuristic.oal)},
                "optimal": {"delay_ms": _rows(optimal.delta), "oal_ms": float(optimal.oal)},
            },
        }
        return json.dumps(doc)

    out = io.StringIO()
    console = Console(file=out, width=_WIDTH, force_terminal=False, color_system=None)
    big = len(hosts) > CONSOLE_HOSTS

    def matrix(values: Sequence[Sequence[float]] | np.ndarray) -> Table:
        return _collapsed(hosts, values, sites or {}) if big else _matrix_table(hosts, values)

    per = " per site pair, min..max where its host pairs differ" if big else ""
    _titled(console, f"one-way delay omega (ms){per}", matrix(omega_ms))
    if rates is not None and big:
        lo, hi = min(rates), max(rates)
        console.print(f"sending rates (msg/s): {lo:g}" + ("" if lo == hi else f"..{hi:g}"),
                      markup=False)
    elif rates is not None:
        rate_table = Table()
        for h in hosts:
            rate_table.add_column(h, justify="right")
        rate_table.add_row(*(f"{float(r):g}" for r in rates))
        _titled(console, "sending rates (msg/s)", rate_table)

    candidates = Table()
    candidates.add_column("sequencer", style="bold")
    candidates.add_column("OAL (ms)", justify="right")
    shown = sorted(setos, key=lambda p: p.oal)[:CONSOLE_HOSTS] if big else setos
    for p in shown:
        assert p.sequencer is not None
        mark = " (best)" if p is best else ""
        candidates.add_row(hosts[p.sequencer] + mark, f"{p.oal:.2f}")
    _titled(console, "SETO: OAL per candidate sequencer" + (
        f", the best {len(shown)} of {len(setos)}" if big else ""), candidates)

    named = [
        (f"SETO, sequencer {hosts[best.sequencer]}", best),
        ("Fast SETO heuristic", heuristic),
        ("optimum (MOL linear program)", optimal),
    ]
    for label, plan in named:
        title = f"{label}: delivery latency delta = omega + x (ms){per}, OAL {plan.oal:.2f} ms"
        _titled(console, title, matrix(plan.delta))

    summary = Table()
    summary.add_column("planner", style="bold")
    summary.add_column("OAL (ms)", justify="right")
    summary.add_column("above optimum", justify="right")
    for label, plan in named:
        above = (plan.oal / optimal.oal - 1) * 100 if optimal.oal > 0 else 0.0
        summary.add_row(label, f"{plan.oal:.2f}", f"{above:.1f}%")
    _titled(console, "overall average latency, rate-weighted (003 eq. 3)", summary)
    return out.getvalue()
