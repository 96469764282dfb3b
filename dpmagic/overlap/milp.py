"""The max-overlap integer program and its LP relaxation, solved by HiGHS (``scipy.optimize.milp``).

One-hot ``y[c, atom]``, ``z_q ≤ Σ_{atom ∈ q_c} y[c, atom]``, maximise ``Σ w_q z_q`` (docs/design.md §2).  Its
incumbent is only a candidate witness; its dual bound (or the LP optimum) plus a tolerance margin
(:func:`milp_margin`) is a proven upper bound.  Size ``Σ a_c + n`` variables (:func:`milp_size`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from dpmagic.overlap.encoding import Problem
from dpmagic.overlap.rounding import grid_of, proven_upper, sum_up

__all__ = [
    "milp_overlap",
    "milp_margin",
    "milp_size",
    "fold",
    "Folded",
    "undominated_atoms",
    "MILP_MAX_VARS",
    "MILP_MAX_NNZ",
]

#: HiGHS is only tried on problems up to this size (variables, non-zeros of the constraint matrix)
MILP_MAX_VARS = 60_000
MILP_MAX_NNZ = 2_000_000
#: HiGHS relative gap (the dual bound, not the incumbent, is used) and the per-term tolerance of its margin
MILP_REL_GAP = 1e-9
MILP_TOL = 1e-6
#: HiGHS gets this share of the time left minus this many seconds (it stops up to ~20% late)
MILP_TIME_SHARE = 0.8
MILP_TIME_OVERHEAD = 0.02
#: HiGHS's overrun of its time limit per non-zero of the constraint matrix (MILP / LP), measured on this
#: 2-core machine with presolve off, and the least time worth giving it
MILP_OVERRUN_PER_NNZ = 1.2e-5
LP_OVERRUN_PER_NNZ = 3e-6
HIGHS_MIN_SECONDS = 0.05
#: HiGHS's presolve (not interruptible) is only used when the time left is at least this per non-zero
#: (measured: 7 s at 48k non-zeros, 22 s at 87k, for a 1 s limit)
PRESOLVE_SECONDS_PER_NNZ = 3e-4
#: ... and always on models of at most this many non-zeros (issue 28, drill-down regions: 6,600–14,100 non-zeros,
#: 190–540 queries over 8–9 columns; with presolve HiGHS closed them in 0.13–0.51 s within a 0.8 s budget, without it
#: none within 0.8 s, 0.9–1.2 s each with more time; PUMS regions of 32,000–45,000 non-zeros overran a 0.08–0.23 s
#: limit by 0.1–0.26 s with presolve; measured in session 12f on the captured region solves of
#: benchmarks/results/bench_session_issue28_s12_heldout2.md, see bench_session_issue28_s12_heldout2_after.md)
PRESOLVE_SMALL_NNZ = 16_000


def milp_overlap(
    prob: Problem, time_limit: float, *, relax: bool = False, rel_gap: float = MILP_REL_GAP
) -> tuple[float | None, dict[str, int] | None, float | None]:
    """Solve the max-overlap integer program of ``prob`` with HiGHS.

    Returns ``(incumbent objective or None, atoms of the incumbent or None, proven upper bound or None)``.
    The incumbent is only a *candidate* witness (its load is recomputed exactly by the caller); the upper
    bound is never the incumbent's objective but HiGHS's dual bound (``mip_dual_bound``; with ``relax=True``
    the LP relaxation's optimum) plus :func:`milp_margin`, rounded up (:func:`~.rounding.proven_upper`).
    Weights are scaled by a power of two (exact) so the largest is in ``[0.5, 1)`` before HiGHS sees them: its
    tolerances are absolute.  ``time_limit`` (seconds, wall clock) covers building the model and
    the solve; HiGHS gets only what is left.  Variables: ``y[c, v]`` (one-hot per column), ``z_q ∈ [0, 1]`` for
    the distinct queries constraining two columns or more (the others are folded into the objective, see below).
    At most ``Σ a_c + n`` variables and ``Σ_c (1 + #queries constraining c)`` rows.  ``rel_gap``: HiGHS's
    relative gap (its dual bound is used either way).
    """
    from scipy.optimize import Bounds as LBounds
    from scipy.optimize import LinearConstraint, milp

    deadline = time.perf_counter() + time_limit
    n = prob.n
    cols = prob.columns
    w = np.asarray(prob.weights, dtype=np.float64)
    grid = grid_of(w)
    if n == 0:
        return 0.0, {}, 0.0
    if not cols:  # no query constrains any column: every row is covered by all of them
        return float(w.sum()), {}, sum_up(w.tolist())
    f = fold(prob)
    dense, cons, multi, wm, keep = f.dense, f.cons, f.multi, f.wm, f.keep
    const = float(f.const.sum())
    ycoef = np.concatenate(f.ycol)
    coefs = np.concatenate([ycoef, wm])
    cmax = float(coefs.max()) if len(coefs) else 0.0
    if cmax <= 0.0:  # only constant queries
        return const, {c.name: 0 for c in cols}, sum_up(f.const.tolist())
    wmax = float(w.max())
    scale = math.ldexp(1.0, -math.frexp(wmax)[1])  # largest scaled weight in [0.5, 1): exact
    offs = np.cumsum([0] + [len(k) for k in keep])
    ny = int(offs[-1])
    nz = len(multi)
    nvar = ny + nz
    rows_i: list[np.ndarray] = []
    rows_j: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    lo: list[np.ndarray] = []
    hi: list[np.ndarray] = []
    r = 0
    for ci in range(len(cols)):
        if time.perf_counter() > deadline:
            return None, None, None
        # one-hot
        rows_i.append(np.full(len(keep[ci]), r))
        rows_j.append(np.arange(offs[ci], offs[ci + 1]))
        vals.append(np.ones(len(keep[ci])))
        lo.append(np.array([1.0]))
        hi.append(np.array([1.0]))
        r += 1
        constrained = np.flatnonzero(cons[multi, ci])  # z indices
        if len(constrained) == 0:
            continue
        sub = dense[ci][multi[constrained]]
        qq, vv = np.nonzero(sub)
        row_of = r + np.arange(len(constrained))
        rows_i.append(row_of)
        rows_j.append(ny + constrained)
        vals.append(np.ones(len(constrained)))
        rows_i.append(row_of[qq])
        rows_j.append(offs[ci] + vv)
        vals.append(-np.ones(len(qq)))
        lo.append(np.full(len(constrained), -np.inf))
        hi.append(np.zeros(len(constrained)))
        r += len(constrained)
    import scipy.sparse as sp

    A = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows_i), np.concatenate(rows_j))), shape=(r, nvar))
    cobj = -coefs * scale
    integrality = np.zeros(nvar)
    if not relax:
        integrality[:ny] = 1
    # HiGHS overruns its own limit: its MIP presolve is not interrupted (a 1 s limit ran 7-22 s on dense
    # t = 2,000-3,000 instances), so presolve is only on when the time left covers PRESOLVE_SECONDS_PER_NNZ per
    # non-zero (it pays on small hard models); without it HiGHS still stops late, by about
    # ``*_OVERRUN_PER_NNZ · nnz`` (measured: a 0.3 s limit ran 0.5 s at 48k non-zeros, 1.5 s at 120k), so it
    # only gets the time left minus that, and is not started when that is below ``HIGHS_MIN_SECONDS``.  Small models
    # (``PRESOLVE_SMALL_NNZ``) always presolve: there it is what closes the gap within an admission's budget
    nnz = float(sum(len(v) for v in vals))
    per_nnz = LP_OVERRUN_PER_NNZ if relax else MILP_OVERRUN_PER_NNZ
    left = MILP_TIME_SHARE * (deadline - time.perf_counter()) - MILP_TIME_OVERHEAD - per_nnz * nnz
    if left < HIGHS_MIN_SECONDS:
        return None, None, None
    presolve = nnz <= PRESOLVE_SMALL_NNZ or left >= PRESOLVE_SECONDS_PER_NNZ * nnz
    res = milp(
        cobj,
        constraints=LinearConstraint(A, np.concatenate(lo), np.concatenate(hi)),
        integrality=integrality,
        bounds=LBounds(np.zeros(nvar), np.ones(nvar)),
        options={"time_limit": left, "disp": False, "mip_rel_gap": rel_gap, "presolve": presolve},
    )
    margin = milp_margin(nvar, r)
    bound_s: float | None = None  # proven (up to HiGHS's tolerances) upper bound, scaled units
    if relax:
        if res.status == 0 and res.fun is not None and np.isfinite(res.fun):
            bound_s = -float(res.fun)
    else:
        dual = getattr(res, "mip_dual_bound", None)
        if dual is not None and np.isfinite(dual):
            bound_s = -float(dual)
    upper = None
    if bound_s is not None:
        # scaled → unscaled is exact (power of two); the margin covers HiGHS's absolute tolerances; the constant
        # queries' weight (and the rounding of its sum and of the folded coefficients) on top
        upper = proven_upper((bound_s + margin) / scale + const, 2 * n + 4, scale=float(w.sum()) + 1.0, grid=grid)
    if relax or res.x is None:
        return None, None, upper
    x = res.x
    atoms = {c.name: int(keep[i][np.argmax(x[offs[i] : offs[i + 1]])]) for i, c in enumerate(cols)}
    return (float(-res.fun) / scale + const if res.fun is not None else None), atoms, upper


@dataclass
class Folded:
    """A problem reduced for an LP model (:func:`fold`): ``dense`` (each column's membership over its kept atoms
    ``keep``), ``cons`` (query × column: constrained), ``const`` (the weights of the queries constraining no column),
    ``ycol`` (per column, over its kept atoms, the summed weight of the one-column queries covering each), ``multi``
    (the distinct queries constraining two columns or more) with their summed weights ``wm``."""

    dense: list[np.ndarray]
    cons: np.ndarray
    const: np.ndarray
    ycol: list[np.ndarray]
    multi: np.ndarray
    wm: np.ndarray
    keep: list[np.ndarray]


def fold(prob: Problem) -> Folded:
    """The reformulation the integer program and the pairwise LP (:mod:`.pairlp`) share (same integer optimum, same
    LP relaxation): a query constraining no column is a constant; a query constraining one column c is, for one-hot
    y, exactly Σ_{atom ∈ q_c} y[c, atom] (its row z_q ≤ Σ y is tight at the optimum, also in the relaxation, where
    Σ_{atom ∈ q_c} y ≤ 1), so its weight goes onto those y's objective coefficients; queries with identical sets on
    every column are one variable with the summed weight (dense analyst sessions, issue 28, are mostly such
    queries); and dominated atoms are dropped (:func:`undominated_atoms`: an atom whose multi-column queries are a
    subset of another's and whose folded coefficient is not larger is never needed).  ``prob`` has columns.
    ``O(Σ_c n a_c)`` plus the dominance test."""
    w = np.asarray(prob.weights, dtype=np.float64)
    dense = [c.dense() for c in prob.columns]
    cons = np.stack([~M.all(axis=1) for M in dense], axis=1)  # (n, columns): q constrains column c
    ncons = cons.sum(axis=1)
    ycol = [w[ncons == 1] @ (dense[ci][ncons == 1] & cons[ncons == 1, ci, None]) for ci in range(len(dense))]
    multi = np.flatnonzero(ncons >= 2)
    if len(multi):
        key = np.concatenate([M[multi] for M in dense], axis=1)
        _, first, inv = np.unique(np.packbits(key, axis=1), axis=0, return_index=True, return_inverse=True)
        wm = np.zeros(len(first))
        np.add.at(wm, inv.ravel(), w[multi])
        multi = multi[first]
    else:
        wm = np.zeros(0)
    keep = [undominated_atoms(dense[ci][multi][cons[multi, ci]].T, ycol[ci]) for ci in range(len(dense))]
    return Folded(
        [M[:, k] for M, k in zip(dense, keep)], cons, w[ncons == 0], [y[k] for y, k in zip(ycol, keep)], multi, wm, keep
    )


#: dominance between a column's atoms is tested when ``atoms² · queries`` is at most this (else all are kept)
DOMINANCE_MAX_WORK = 4_000_000


def undominated_atoms(mem: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """The atoms (sorted indices) of one column that no other atom dominates: ``mem`` (atoms × multi-column
    queries constraining the column) says which atoms each query contains, ``coef`` is each atom's folded weight.

    ``x`` dominates ``b`` when every query containing ``b`` contains ``x`` and ``coef[x] ≥ coef[b]``, strictly in one
    of the two or, when equal in both, ``x < b`` (a strict partial order: of equal atoms the first is kept).  Moving
    a solution's choice from ``b`` to ``x`` keeps every query it covers and does not lower the objective, so the
    integer program over the kept atoms has the same optimum; its relaxation and dual bounds bound that optimum.
    ``O(a² · m)`` (skipped above :data:`DOMINANCE_MAX_WORK`).
    """
    a = mem.shape[0]
    if a <= 1 or a * a * max(mem.shape[1], 1) > DOMINANCE_MAX_WORK:
        return np.arange(a)
    covers = np.ones((a, a), dtype=bool)  # covers[x, b]: every query containing b contains x
    for j in range(mem.shape[1]):
        col = mem[:, j]
        covers &= col[:, None] | ~col[None, :]
    same = covers & covers.T
    ge, gt = coef[:, None] >= coef[None, :], coef[:, None] > coef[None, :]
    idx = np.arange(a)
    dom = covers & ge & ((~same) | gt | (idx[:, None] < idx[None, :]))
    np.fill_diagonal(dom, False)
    return np.flatnonzero(~dom.any(axis=0))


def milp_margin(nvar: int, nrows: int) -> float:
    """Margin added to HiGHS's dual bound (in scaled units, largest weight in ``[0.5, 1)``).

    HiGHS's bounds hold up to its absolute tolerances (primal/dual feasibility 1e-7, MIP feasibility and
    absolute gap 1e-6): a dual solution infeasible by δ per variable or row moves the weak-duality bound by at
    most δ per variable (all in ``[0, 1]``) and per row.  ``MILP_TOL`` (≥ every such tolerance) times the
    number of variables and rows, plus the absolute gap, is a margin covering all of them together.
    """
    return MILP_TOL * (nvar + nrows + 2)


def milp_size(prob: Problem) -> tuple[int, float]:
    """(variables, estimated non-zeros) of the MILP of ``prob``."""
    nvar = sum(c.a for c in prob.columns) + prob.n
    nnz = 0.0
    for c in prob.columns:
        if c.M is not None:
            nnz += float(c.M.sum())
        else:
            rs, re = c.runs()
            nnz += float(np.sum(re - rs))
    return nvar, nnz
