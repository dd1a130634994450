"""Delay planners (nodes/planner.py) against 003's worked example and the LP's own constraints."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from nodes.planner import (
    best_seto_plan,
    heuristic_plan,
    heuristic_steps,
    mol_cost,
    oal,
    optimal_plan,
    order_residual,
    seto_plan,
    seto_plans,
)
from testbed.plan import plan_report

# 003 Fig. 5: p1-p2 5 ms, p1-p3 7 ms, p2-p3 9 ms.
PAPER_OMEGA = [[0.0, 5.0, 7.0], [5.0, 0.0, 9.0], [7.0, 9.0, 0.0]]


def truncated(value: float) -> float:
    """The paper prints OALs truncated, not rounded (23/3 appears as 7.66)."""
    return math.floor(value * 100 + 1e-9) / 100


def random_topology(n: int, seed: int, symmetric: bool = True) -> np.ndarray:
    rng = np.random.default_rng(seed)
    pts = rng.uniform(0, 1000, (n, 2))
    w = np.linalg.norm(pts[:, None] - pts[None], axis=2)
    if not symmetric:
        w = w * rng.uniform(0.7, 1.3, (n, n))
    np.fill_diagonal(w, rng.uniform(0, 1, n))
    return w


def test_seto_with_sequencer_p2_has_the_published_oal_7_66() -> None:
    plan = seto_plan(PAPER_OMEGA, 1)
    assert truncated(plan.oal) == 7.66
    # Fig. 3(a): the sequencer delays its own messages by 9 ms, its distance to p3.
    assert plan.x[1][1] == pytest.approx(9.0)


def test_heuristic_reproduces_figure_6_step_by_step() -> None:
    steps = heuristic_steps(PAPER_OMEGA)
    assert [s.process for s in steps] == [0, 1, 2]
    assert steps[0].delta[0][0] == pytest.approx(2.5)  # firstDelay: 5 * (14-12)/(16-12)
    assert steps[1].delta[1][1] == pytest.approx(7.5)
    assert np.isnan(steps[1].delta[2][2])
    fig6 = [[2.5, 5.0, 7.0], [5.0, 7.5, 9.5], [7.0, 9.5, 11.5]]
    np.testing.assert_allclose(steps[-1].delta, fig6)
    assert truncated(heuristic_plan(PAPER_OMEGA).oal) == 7.16


def test_optimum_of_the_example_is_7_00() -> None:
    plan = optimal_plan(PAPER_OMEGA)
    assert truncated(plan.oal) == 7.00
    assert plan.oal == pytest.approx(7.0, abs=1e-7)


def test_best_seto_beats_or_ties_every_sequencer_and_loses_to_heuristic_here() -> None:
    plans = seto_plans(PAPER_OMEGA)
    best = best_seto_plan(PAPER_OMEGA)
    assert best.oal == min(p.oal for p in plans)
    assert [round(p.oal, 4) for p in plans] == [8.3333, 7.6667, 7.6667]
    assert optimal_plan(PAPER_OMEGA).oal < heuristic_plan(PAPER_OMEGA).oal < best.oal


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_every_plan_is_a_total_order_with_non_negative_delays(seed: int, symmetric: bool) -> None:
    w = random_topology(12, seed, symmetric)
    rates = np.random.default_rng(seed).uniform(1, 100, 12)
    plans = [*seto_plans(w, rates), heuristic_plan(w, rates), optimal_plan(w, rates)]
    for plan in plans:
        np.testing.assert_allclose(plan.delta, w + plan.x)
        assert np.all(plan.x >= 0)
        assert order_residual(plan.delta) < 1e-6, plan.name
        assert plan.oal == pytest.approx(oal(plan.delta, rates))
    opt = plans[-1]
    assert opt.oal <= heuristic_plan(w, rates).oal + 1e-9
    assert opt.oal <= best_seto_plan(w, rates).oal + 1e-9


def test_optimum_satisfies_the_mol_equalities_of_eq_8() -> None:
    w = random_topology(8, 3, symmetric=False)
    d = optimal_plan(w).delta
    for i in range(7):
        for k in range(1, 8):
            assert d[0][i] - d[k][i] == pytest.approx(d[0][i + 1] - d[k][i + 1], abs=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_optimum_matches_an_independent_assignment_solver(seed: int) -> None:
    # With equal rates MOL is the dual of a max-weight assignment on omega: the optimum
    # OAL is that assignment's weight divided by N (delta[k][j] = a_k + b_j, LP duality).
    w = random_topology(15, seed, symmetric=False)
    rows, cols = linear_sum_assignment(w, maximize=True)
    assert optimal_plan(w).oal == pytest.approx(w[rows, cols].sum() / 15, rel=1e-7)


def test_rates_weight_the_oal_and_move_the_optimum() -> None:
    even = optimal_plan(PAPER_OMEGA)
    skewed_rates = [1.0, 1.0, 10.0]
    skewed = optimal_plan(PAPER_OMEGA, skewed_rates)
    # p3 sends most: the optimum lowers p3's own-message latency at the others' expense.
    assert skewed.delta[2].sum() < even.delta[2].sum()
    assert mol_cost(skewed.x, skewed_rates) <= mol_cost(even.x, skewed_rates) + 1e-9


def test_a_silent_process_is_inserted_last_by_the_heuristic() -> None:
    steps = heuristic_steps(PAPER_OMEGA, [0.0, 1.0, 1.0])
    assert steps[-1].process == 0


def test_invalid_inputs_are_rejected() -> None:
    with pytest.raises(ValueError):
        optimal_plan([[0.0, 1.0]])
    with pytest.raises(ValueError):
        seto_plan(PAPER_OMEGA, 3)
    with pytest.raises(ValueError):
        heuristic_plan(PAPER_OMEGA, [1.0, 1.0])
    with pytest.raises(ValueError):
        oal(PAPER_OMEGA, [0.0, 0.0, 0.0])


def test_fast_seto_row_is_what_each_receiver_applies() -> None:
    plan = heuristic_plan(PAPER_OMEGA)
    assert plan.delays_at(2) == pytest.approx((0.0, 0.5, 11.5))


def test_plan_report_json_has_the_contracted_shape() -> None:
    hosts = ["p1", "p2", "p3"]
    doc = json.loads(plan_report(hosts, PAPER_OMEGA, None, as_json=True))
    assert set(doc) == {"hosts", "omega_ms", "plans"}
    assert doc["hosts"] == hosts and doc["omega_ms"] == PAPER_OMEGA
    assert set(doc["plans"]) == {"seto", "heuristic", "optimal"}
    assert doc["plans"]["seto"]["sequencer"] == "p2"
    for plan in doc["plans"].values():
        assert len(plan["delay_ms"]) == 3 and all(len(r) == 3 for r in plan["delay_ms"])
    assert doc["plans"]["optimal"]["oal_ms"] == pytest.approx(7.0)
    assert doc["plans"]["heuristic"]["delay_ms"][2][2] == pytest.approx(11.5)


def test_plan_report_text_shows_every_planner_and_candidate() -> None:
    text = plan_report(["a", "b", "c"], PAPER_OMEGA, [1.0, 1.0, 1.0], as_json=False)
    for needle in ("one-way delay", "b (best)", "heuristic", "optimum", "7.00", "7.17", "8.33"):
        assert needle in text


def test_plan_report_rejects_a_matrix_of_the_wrong_size() -> None:
    with pytest.raises(ValueError):
        plan_report(["a", "b"], PAPER_OMEGA, None, as_json=True)


def test_plan_cli_prints_exactly_one_json_object_for_a_topology() -> None:
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-m", "testbed", "plan", "topologies/five-regions.yaml",
                           "--json"], cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # exactly one object: json.loads rejects trailing data
    n = len(doc["hosts"])
    assert n == 5 and len(doc["omega_ms"]) == n
    assert set(doc["plans"]) == {"seto", "heuristic", "optimal"}
    assert doc["plans"]["seto"]["sequencer"] in doc["hosts"]
    for plan in doc["plans"].values():
        delay = plan["delay_ms"]
        assert len(delay) == n and all(len(row) == n for row in delay)
        assert isinstance(plan["oal_ms"], float)
    assert doc["plans"]["optimal"]["oal_ms"] <= doc["plans"]["heuristic"]["oal_ms"] + 1e-9
    assert doc["plans"]["optimal"]["oal_ms"] <= doc["plans"]["seto"]["oal_ms"] + 1e-9
    bad = subprocess.run([sys.executable, "-m", "testbed", "plan", "topologies/five-regions.yaml",
                          "--rates", "1,2"], cwd=root, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "5 hosts" in bad.stderr
