"""Reproduce the evaluation of Fast SETO (003 sec. 5): SETO and the heuristic against the optimum.

Run from the repository root:

    python -m bench.plane_size                      # all three sections, 20 topologies each
    python -m bench.plane_size --section plane --topologies 5

Topologies are BRITE-like (003 sec. 5 used BRITE): N routers placed uniformly at random on a
square plane, linked with BRITE's incremental Waxman model (each new node links to m=2 earlier
ones, P(u,v) = alpha * exp(-d / (beta * L)), alpha=0.15, beta=0.2, L the plane diagonal); a
link's delay is its length (1 plane unit = 1 ms) and the one-way delay between two processes
is the shortest routed path (``--delays direct`` uses straight-line distance instead).

Two measures of "above the optimum" are printed: on the overall average latency (003 eq. 3)
and on the MOL objective itself, the rate-weighted added delay (003 eq. 7).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from rich.console import Console
from rich.table import Table
from scipy.sparse.csgraph import shortest_path

from nodes.planner import (
    Matrix,
    Plan,
    best_seto_plan,
    heuristic_plan,
    mol_cost,
    optimal_plan,
    seto_plan,
)

SIDES = (1000, 2000, 3000, 4000, 5000)
RATE_SDS = tuple(range(0, 101, 10))


def brite_topology(
    n: int,
    side: float,
    rng: np.random.Generator,
    *,
    delays: str = "path",
    m: int = 2,
    alpha: float = 0.15,
    beta: float = 0.2,
) -> Matrix:
    """One-way delay matrix (ms) of a BRITE-like Waxman router topology (see module doc)."""
    pts = rng.uniform(0.0, side, size=(n, 2))
    dist = np.linalg.norm(pts[:, None, :] - pts[None, :, :], axis=2)
    if delays == "direct":
        return dist
    diag = side * np.sqrt(2.0)
    graph = np.zeros((n, n))
    for v in range(1, n):
        weight = alpha * np.exp(-dist[v, :v] / (beta * diag))
        peers = rng.choice(v, size=min(m, v), replace=False, p=weight / weight.sum())
        graph[peers, v] = graph[v, peers] = dist[v, peers]
    routed: Matrix = shortest_path(graph, directed=False)
    return routed


def _above(value: float, optimum: float) -> float:
    return (value / optimum - 1.0) * 100.0 if optimum > 0 else 0.0


def _measures(plan: Plan, optimum: Plan, rates: Matrix) -> tuple[float, float]:
    return (
        _above(plan.oal, optimum.oal),
        _above(mol_cost(plan.x, rates), mol_cost(optimum.x, rates)),
    )


def _pct(values: list[float]) -> str:
    return f"{np.mean(values):.1f}%"


def plane_section(console: Console, topologies: int, seed: int, delays: str, rates: str) -> None:
    """003 sec. 5.1 / Fig. 8: 30 nodes, plane side 1000..5000, random SETO sequencer."""
    table = Table()
    for col in (
        "side",
        "opt OAL (ms)",
        "SETO OAL",
        "heur OAL",
        "best-SETO OAL",
        "SETO eq.7",
        "heur eq.7",
    ):
        table.add_column(col, justify="right")
    all_seto: list[float] = []
    all_heur: list[float] = []
    for side in SIDES:
        rng = np.random.default_rng([seed, side])
        opt_oal, s_oal, h_oal, b_oal, s_cost, h_cost = [], [], [], [], [], []
        for _ in range(topologies):
            w = brite_topology(30, side, rng, delays=delays)
            r = rng.uniform(0.0, 100.0, 30) if rates == "uniform" else np.ones(30)
            opt = optimal_plan(w, r)
            seto = seto_plan(w, int(rng.integers(30)), r)
            so, sc = _measures(seto, opt, r)
            ho, hc = _measures(heuristic_plan(w, r), opt, r)
            opt_oal.append(opt.oal)
            s_oal.append(so)
            h_oal.append(ho)
            s_cost.append(sc)
            h_cost.append(hc)
            b_oal.append(_measures(best_seto_plan(w, r), opt, r)[0])
        all_seto.append(float(np.mean(s_cost)))
        all_heur.append(float(np.mean(h_cost)))
        table.add_row(
            str(side),
            f"{np.mean(opt_oal):.0f}",
            _pct(s_oal),
            _pct(h_oal),
            _pct(b_oal),
            _pct(s_cost),
            _pct(h_cost),
        )
    table.add_row("paper", "-", "-", "-", "-", "66-114%", "16-33%")
    table.add_row(
        "ours",
        "-",
        "-",
        "-",
        "-",
        f"{min(all_seto):.0f}-{max(all_seto):.0f}%",
        f"{min(all_heur):.0f}-{max(all_heur):.0f}%",
    )
    console.print(
        f"5.1 plane size: 30 nodes, {topologies} topologies per side, {delays} delays, "
        f"{rates} rates; mean % above the optimum on OAL (eq. 3) and on added delay (eq. 7)"
    )
    console.print(table)


def rates_section(console: Console, topologies: int, seed: int, delays: str, side: int) -> None:
    """003 sec. 5.2 / Fig. 9: rates with mean 300 msg/s and standard deviation 0..100%."""
    table = Table()
    table.add_column("rate sd", justify="right")
    for who in ("SETO", "heur"):
        for stat in ("min", "avg", "max"):
            table.add_column(f"{who} {stat}", justify="right")
    table.add_column("SETO OAL avg", justify="right")
    table.add_column("heur OAL avg", justify="right")
    rng = np.random.default_rng([seed, 52])
    nets = [brite_topology(30, side, rng, delays=delays) for _ in range(topologies)]
    sequencers = [int(rng.integers(30)) for _ in nets]
    for sd in RATE_SDS:
        seto_c, heur_c, seto_o, heur_o = [], [], [], []
        for w, s in zip(nets, sequencers, strict=True):
            # Gamma keeps the mean and standard deviation while keeping rates positive.
            cv = sd / 100.0
            r = rng.gamma(1.0 / cv**2, 300.0 * cv**2, 30) if cv > 0 else np.full(30, 300.0)
            opt = optimal_plan(w, r)
            so, sc = _measures(seto_plan(w, s, r), opt, r)
            ho, hc = _measures(heuristic_plan(w, r), opt, r)
            seto_c.append(sc)
            heur_c.append(hc)
            seto_o.append(so)
            heur_o.append(ho)
        cells = [f"{f(v):.0f}%" for v in (seto_c, heur_c) for f in (np.min, np.mean, np.max)]
        table.add_row(f"{sd}%", *cells, _pct(seto_o), _pct(heur_o))
    console.print(
        f"5.2 rate variance: 30 nodes, side {side}, {topologies} topologies, mean 300 msg/s; "
        "% above the optimum on added delay (eq. 7) min/avg/max over topologies, then OAL avg"
    )
    console.print(table)


def sequencer_section(console: Console, topologies: int, seed: int, delays: str, side: int) -> None:
    """003 sec. 5.3 / Fig. 10: 10 nodes, rates uniform in 0..100 msg/s, SETO per sequencer."""
    rng = np.random.default_rng([seed, 53])
    nets = [brite_topology(10, side, rng, delays=delays) for _ in range(topologies)]
    rates = [rng.uniform(0.0, 100.0, 10) for _ in nets]
    opts = [optimal_plan(w, r) for w, r in zip(nets, rates, strict=True)]
    heurs = [heuristic_plan(w, r) for w, r in zip(nets, rates, strict=True)]
    table = Table()
    columns = ("sequencer", "SETO OAL", "heur OAL", "opt OAL", "SETO eq.7", "heur eq.7", "opt eq.7")
    for col in columns:
        table.add_column(col, justify="right")

    def mean(plans: list[Plan], f: Callable[[Plan, Matrix], float]) -> float:
        return float(np.mean([f(p, r) for p, r in zip(plans, rates, strict=True)]))

    def get_oal(p: Plan, r: Matrix) -> float:
        return p.oal

    def get_cost(p: Plan, r: Matrix) -> float:
        return mol_cost(p.x, r)

    for s in range(10):
        setos = [seto_plan(w, s, r) for w, r in zip(nets, rates, strict=True)]
        table.add_row(
            f"p{s + 1}",
            *(f"{mean(ps, get_oal):.0f}" for ps in (setos, heurs, opts)),
            *(f"{mean(ps, get_cost):.0f}" for ps in (setos, heurs, opts)),
        )
    console.print(
        f"5.3 sequencer position: 10 nodes, side {side}, {topologies} topologies (the same for "
        "every position), rates uniform 0..100 msg/s; mean OAL (ms) and mean eq. 7 cost "
        "(ms x msg/s); paper: SETO between ~500 and ~700 ms, always above the others"
    )
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--section", choices=("plane", "rates", "sequencer", "all"), default="all")
    parser.add_argument("--topologies", type=int, default=20, help="per side / per point")
    parser.add_argument("--seed", type=int, default=2006)
    parser.add_argument("--delays", choices=("path", "direct"), default="path")
    parser.add_argument(
        "--rates",
        choices=("equal", "uniform", "both"),
        default="both",
        help="sending rates in sec. 5.1 (the paper does not say)",
    )
    parser.add_argument("--side", type=int, default=1000, help="plane side for 5.2 and 5.3")
    args = parser.parse_args()
    console = Console(width=150)
    start = time.perf_counter()
    if args.section in ("plane", "all"):
        for rates in ("equal", "uniform") if args.rates == "both" else (args.rates,):
            plane_section(console, args.topologies, args.seed, args.delays, rates)
    if args.section in ("rates", "all"):
        rates_section(console, args.topologies, args.seed, args.delays, args.side)
    if args.section in ("sequencer", "all"):
        sequencer_section(console, args.topologies, args.seed, args.delays, args.side)
    console.print(f"done in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
