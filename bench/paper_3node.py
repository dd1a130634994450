"""The worked 3-node example of 003 (Figs. 3, 5, 6): SETO, the heuristic step by step, the optimum.

Run from the repository root: ``python -m bench.paper_3node``. Matrices are printed in the
paper's layout (row = receiver, column = sender), i.e. transposed from `nodes.planner`'s.
"""

from __future__ import annotations

import numpy as np
from rich.console import Console
from rich.table import Table

from nodes.planner import (
    heuristic_costs,
    heuristic_plan,
    heuristic_steps,
    optimal_plan,
    seto_plans,
)

# Fig. 5's Omega: p1-p2 5 ms, p1-p3 7 ms, p2-p3 9 ms, symmetric.
OMEGA = [[0.0, 5.0, 7.0], [5.0, 0.0, 9.0], [7.0, 9.0, 0.0]]
# The paper truncates to two decimals (23/3 -> 7.66, 43/6 -> 7.16). Fig. 3(a)'s sequencer is
# p2: its farthest process, p3, is 9 ms away, the own-message delay the text describes.
PUBLISHED = {
    "SETO, sequencer p2 (Fig. 3(b))": "7.66",
    "heuristic (Fig. 6)": "7.16",
    "optimum (Fig. 3(d))": "7.00",
}


def _cell(v: float) -> str:
    return "?" if np.isnan(v) else f"{v:.1f}"


def _triple(delta: np.ndarray, omega: np.ndarray, x: np.ndarray) -> Table:
    """Delta = Omega + x side by side, as Fig. 6 draws them (receiver-major)."""
    table = Table(show_header=False, box=None, padding=(0, 1))
    for _ in range(3 * 3 + 2):
        table.add_column(justify="right")
    for i in range(3):
        row = [_cell(delta[j, i]) for j in range(3)] + ["=" if i == 1 else ""]
        row += [_cell(omega[j, i]) for j in range(3)] + ["+" if i == 1 else ""]
        row += [_cell(x[j, i]) for j in range(3)]
        table.add_row(*row)
    return table


def main() -> None:
    console = Console(width=120)
    w = np.array(OMEGA)
    setos = seto_plans(w)
    console.print("SETO (003 Fig. 3(b)): OAL per sequencer")
    for p in setos:
        assert p.sequencer is not None
        console.print(f"  sequencer p{p.sequencer + 1}: OAL {p.oal:.4f}")
    costs = heuristic_costs(w)
    console.print(
        "heuristic costs c_i (003 sec. 4.2): "
        + ", ".join(f"c{i + 1} = {c:g}" for i, c in enumerate(costs))
    )
    for n, step in enumerate(heuristic_steps(w), start=1):
        console.print(f"Step {n}: insert p{step.process + 1}   (Delta = Omega + x, Fig. 6)")
        console.print(_triple(step.delta, w, step.x))
    opt = optimal_plan(w)
    console.print("optimum (MOL, 003 eqs. 7-9; Fig. 5):")
    console.print(_triple(opt.delta, w, opt.x))

    table = Table(title="overall average latency (003 eq. 3), equal rates")
    table.add_column("planner")
    table.add_column("ours", justify="right")
    table.add_column("ours, truncated", justify="right")
    table.add_column("paper", justify="right")
    best = min(setos, key=lambda p: p.oal)
    heur_oal = heuristic_plan(w).oal
    for (label, paper), value in zip(
        PUBLISHED.items(), (setos[1].oal, heur_oal, opt.oal), strict=True
    ):
        table.add_row(label, f"{value:.4f}", f"{np.floor(value * 100) / 100:.2f}", paper)
    table.add_row("SETO, best sequencer", f"{best.oal:.4f}", "", "")
    console.print(table)


if __name__ == "__main__":
    main()
