"""Delay planning for optimistic total order: SETO, the Fast SETO heuristic and the optimum.

All functions are pure. Conventions (sender-major, unlike the paper's receiver-major matrices):

- ``omega[k][j]``: one-way network delay of messages from sender ``k`` to receiver ``j``;
  ``omega[j][j]`` is the loopback delay (0 if negligible). Any time unit.
- ``x[k][j]``: artificial delay receiver ``j`` adds before opt-delivering messages from ``k``.
- ``delta = omega + x``: optimistic-delivery latency of ``k``'s messages at ``j``.
- ``rates[k]``: the rate at which ``k`` sends (TO-multicasts) messages.

The paper (003, Mocito et al.) writes delta_i^j for "messages from p_j at p_i", so its Omega and
Delta (Figs. 5, 6) are the transposes of ours.

Equation (1) of 003 (same interval between any two senders at every receiver) holds exactly
when ``delta[k][j] = a[k] + b[j]`` for some sender offsets ``a`` and receiver offsets ``b``.
SETO and the heuristic are computed in that form, which is why their results always give a
total order; the optimum is the paper's MOL linear program itself (eqs. 7-9).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float64]
MatrixLike = Sequence[Sequence[float]] | Matrix
RatesLike = Sequence[float] | npt.NDArray[np.float64] | None
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class Plan:
    """A delay assignment: ``x`` (applied delays), ``delta`` (latencies) and their OAL."""

    name: str
    x: Matrix
    delta: Matrix
    oal: float
    sequencer: int | None = None

    def delays_at(self, receiver: int) -> tuple[float, ...]:
        """Delays ``receiver`` applies to each sender's messages: the row Fast SETO's
        coordinator sends to that process (003 Fig. 7, lines 15-18)."""
        return tuple(float(v) for v in self.x[:, receiver])


@dataclass(frozen=True, eq=False)
class HeuristicStep:
    """State after the heuristic inserted ``process`` (003 Fig. 6); NaN marks unknown entries."""

    process: int
    inserted: tuple[int, ...]
    x: Matrix
    delta: Matrix


def _omega(omega: MatrixLike) -> Matrix:
    w = np.array(omega, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] != w.shape[1] or w.shape[0] == 0:
        raise ValueError(f"omega must be a non-empty square matrix, got shape {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("omega must hold finite, non-negative delays")
    return w


def _rates(rates: RatesLike, n: int) -> Matrix:
    if rates is None:
        return np.ones(n)
    r = np.array(rates, dtype=np.float64)
    if r.shape != (n,):
        raise ValueError(f"rates must have {n} entries, got shape {r.shape}")
    if not np.all(np.isfinite(r)) or np.any(r < 0) or r.sum() <= 0:
        raise ValueError("rates must be finite, non-negative and not all zero")
    return r


def _frozen(m: Matrix) -> Matrix:
    m.setflags(write=False)
    return m


def _plan(name: str, w: Matrix, delta: Matrix, r: Matrix, sequencer: int | None = None) -> Plan:
    # Offsets are computed so that delta >= omega; clip float noise so x >= 0 holds exactly.
    x = np.maximum(delta - w, 0.0)
    delta = w + x
    return Plan(name, _frozen(x), _frozen(delta), oal(delta, r), sequencer)


def oal(delta: MatrixLike, rates: RatesLike = None) -> float:
    """Overall average latency of optimistic delivery, rate-weighted (003 eq. 3):
    sum_k r_k sum_j delta[k][j] / (N sum_k r_k)."""
    d = np.array(delta, dtype=np.float64)
    r = _rates(rates, d.shape[0])
    return float(r @ d.sum(axis=1) / (d.shape[0] * r.sum()))


def mol_cost(x: MatrixLike, rates: RatesLike = None) -> float:
    """Objective of MOL in its delay form (003 eq. 7): sum_k r_k sum_j x[k][j], the
    rate-weighted artificial delay on top of the network's."""
    d = np.array(x, dtype=np.float64)
    return float(_rates(rates, d.shape[0]) @ d.sum(axis=1))


def order_residual(delta: MatrixLike) -> float:
    """Largest violation of 003 eq. (1): |(delta[k][j]-delta[l][j]) - (delta[k][i]-delta[l][i])|.
    Zero means every receiver opt-delivers simultaneous multicasts in the same order."""
    d = np.array(delta, dtype=np.float64)
    # eq. (1) for all k, l, i, j reduces to: every column minus the first is the same vector.
    rel = d - d[:, :1]
    return float(np.max(np.abs(rel - rel[:1, :])))


def seto_plan(omega: MatrixLike, sequencer: int, rates: RatesLike = None) -> Plan:
    """Delays the original SETO (000 Fig. 4, 003 Fig. 2) converges to with this sequencer.

    The sequencer delays its own messages by the longest time one of them takes to reach
    another process (003 sec. 2.2, Fig. 3(a)) and applies no other delay. Every other process p
    makes itself equidistant with the sequencer (000 sec. 3.2): delta[k][p] = delta[k][s] + c_p
    for every sender k, with c_p the smallest value keeping all of p's delays non-negative
    (SETO only adds delay when reducing another is impossible, 000 sec. 3.3).
    """
    w = _omega(omega)
    n = w.shape[0]
    r = _rates(rates, n)
    if not 0 <= sequencer < n:
        raise ValueError(f"sequencer must be in 0..{n - 1}, got {sequencer}")
    others = [j for j in range(n) if j != sequencer]
    own_delay = float(w[sequencer, others].max()) if others else 0.0
    a = w[:, sequencer].copy()  # the sequencer's column is delta[k][s]
    a[sequencer] += own_delay
    b = (w - a[:, None]).max(axis=0)
    b[sequencer] = 0.0
    return _plan("seto", w, a[:, None] + b[None, :], r, sequencer)


def seto_plans(omega: MatrixLike, rates: RatesLike = None) -> list[Plan]:
    """SETO's steady state for every candidate sequencer, in process order."""
    w = _omega(omega)
    return [seto_plan(w, s, rates) for s in range(w.shape[0])]


def best_seto_plan(omega: MatrixLike, rates: RatesLike = None) -> Plan:
    """SETO with the sequencer giving the lowest OAL (003 sec. 5.3 shows it matters)."""
    return min(seto_plans(omega, rates), key=lambda p: p.oal)


def heuristic_costs(omega: MatrixLike, rates: RatesLike = None) -> Matrix:
    """Insertion cost c_i = sum_j omega_i^j / r_i (003 sec. 4.2). In the paper's notation
    omega_i^j is the delay from p_j to p_i, i.e. our column sum. A process that never sends
    (r_i = 0) gets an infinite cost and is inserted last."""
    w = _omega(omega)
    r = _rates(rates, w.shape[0])
    incoming = w.sum(axis=0)
    with np.errstate(divide="ignore"):
        return np.where(r > 0, incoming / np.where(r > 0, r, 1.0), np.inf)


def _first_delay(w: Matrix, c: Matrix) -> float:
    """firstDelay() of 003 Fig. 4: x = omega_iMin^iNextMin * (c_iNextMin - c_iMin)
    / (c_iMax - c_iMin), with omega_iMin^iNextMin the delay from iNextMin to iMin."""
    n = w.shape[0]
    if n < 2:
        return 0.0
    order = np.argsort(c, kind="stable")
    i_min, i_next = int(order[0]), int(order[1])
    finite = c[np.isfinite(c)]
    c_max = float(finite.max())
    spread = c_max - float(c[i_min])
    if spread <= 0 or not np.isfinite(c[i_next]):
        # Equal costs: the numerator is zero as well; its limit, no own delay, is used.
        return 0.0
    return float(w[i_next, i_min] * (c[i_next] - c[i_min]) / spread)


def heuristic_steps(omega: MatrixLike, rates: RatesLike = None) -> list[HeuristicStep]:
    """Run the Fast SETO heuristic (003 Fig. 4) and return the matrices after each insertion.

    Processes are inserted by increasing cost c_i (selectNextMin). The first sets its own
    delay with firstDelay(). Each later process ``n`` places itself as early as the already
    inserted set S allows: its messages get the smallest sender offset a_n keeping every
    x[n][i] >= 0 for i in S (Fig. 4's shift^next loop), and it delivers others' messages with
    the smallest receiver offset b_n keeping every x[i][n] >= 0 (the z_max loop). Fig. 4's
    ``ref`` is only a reference column for those differences; offsets need none.
    """
    w = _omega(omega)
    n = w.shape[0]
    c = heuristic_costs(w, rates)
    order = [int(i) for i in np.argsort(c, kind="stable")]
    a = np.full(n, np.nan)
    b = np.full(n, np.nan)
    steps: list[HeuristicStep] = []
    for pos, p in enumerate(order):
        done = order[:pos]
        if not done:
            b[p] = 0.0
            a[p] = w[p, p] + _first_delay(w, c)
        else:
            b[p] = float((w[done, p] - a[done]).max())
            a[p] = max(float((w[p, done] - b[done]).max()), float(w[p, p] - b[p]))
        known = order[: pos + 1]
        delta = np.full((n, n), np.nan)
        delta[np.ix_(known, known)] = a[known][:, None] + b[known][None, :]
        x = delta - w
        steps.append(HeuristicStep(p, tuple(known), _frozen(x), _frozen(delta)))
    return steps


def heuristic_plan(omega: MatrixLike, rates: RatesLike = None) -> Plan:
    """The Fast SETO heuristic's assignment (003 Fig. 4)."""
    w = _omega(omega)
    r = _rates(rates, w.shape[0])
    last = heuristic_steps(w, r)[-1]
    return _plan("heuristic", w, np.array(last.delta), r)


def _mol_problem(w: Matrix, r: Matrix) -> tuple[Matrix, IntArray, IntArray, Matrix, Matrix]:
    """MOL as 003 eqs. 7-9 in our sender-major layout: variables x[k][j] at k*N + j,
    cost r_k (eq. 7); for receivers i, i+1 and senders 0, k (eq. 8):
    delta[0][i] - delta[k][i] = delta[0][i+1] - delta[k][i+1]; bounds x >= 0 (eq. 9).
    Returns cost, COO rows, cols, values and right-hand sides of the equalities."""
    n = w.shape[0]
    cost = np.repeat(r, n)
    grid_i, grid_k = np.meshgrid(np.arange(n - 1), np.arange(1, n), indexing="ij")
    i, k = grid_i.ravel(), grid_k.ravel()
    row = np.arange(i.size)
    cols = np.stack([0 * n + i, k * n + i, 0 * n + i + 1, k * n + i + 1], axis=1)
    vals = np.tile(np.array([1.0, -1.0, -1.0, 1.0]), (i.size, 1))
    rhs = -(w[0, i] - w[k, i] - w[0, i + 1] + w[k, i + 1])
    return cost, np.repeat(row, 4), cols.ravel(), vals.ravel(), rhs


def optimal_plan(omega: MatrixLike, rates: RatesLike = None) -> Plan:
    """The minimum-OAL assignment: the MOL linear program (003 eqs. 7-9) solved with HiGHS."""
    w = _omega(omega)
    n = w.shape[0]
    r = _rates(rates, n)
    if n == 1:
        return _plan("optimal", w, w.copy(), r)
    import highspy  # lazy: only the exact planner needs the solver

    cost, rows, cols, vals, rhs = _mol_problem(w, r)
    # Column-wise (CSC) arrays for passModel.
    order = np.lexsort((rows, cols))
    start = np.searchsorted(cols[order], np.arange(n * n + 1)).astype(np.int32)
    lp = highspy.HighsLp()
    lp.num_col_ = n * n
    lp.num_row_ = rhs.size
    lp.col_cost_ = cost
    lp.col_lower_ = np.zeros(n * n)
    lp.col_upper_ = np.full(n * n, highspy.kHighsInf)
    lp.row_lower_ = rhs
    lp.row_upper_ = rhs
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = start
    lp.a_matrix_.index_ = rows[order].astype(np.int32)
    lp.a_matrix_.value_ = vals[order]
    h = _quiet_highs(highspy)
    h.setOptionValue("output_flag", False)
    h.passModel(lp)
    h.run()
    status = h.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"HiGHS could not solve MOL: {h.modelStatusToString(status)}")
    x = np.array(h.getSolution().col_value).reshape(n, n)
    return _plan("optimal", w, w + np.maximum(x, 0.0), r)


def _quiet_highs(highspy: Any) -> Any:
    """A HiGHS instance whose construction does not print: highspy >= 1.16 writes its banner
    to the C-level stdout before any option can be set, which would corrupt output such as
    `testbed plan --json`. The banner goes to stderr instead."""
    import os
    import sys

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        return highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
