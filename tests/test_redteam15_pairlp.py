"""Red-team pass on the pairwise-marginal LP (:mod:`dpmagic.overlap.pairlp`, issue 28 session 15).

The bound is charged against a privacy budget, so it must never be below the true maximum load.  Every check here
compares with an *exact* oracle (sums of :class:`fractions.Fraction`), never with a float sum within a tolerance:

* hand-built :class:`Problem` instances (random membership matrices: empty sets, full rows, one-column queries,
  queries constraining nothing, many identical queries, one column) against brute force over the atoms;
* workloads on the shared small schema with extreme weights (1e-300, 1e300, mixed magnitudes, subnormal);
* HiGHS replaced by adversarial duals (zero, random, sign-flipped, huge, NaN): the certified bound must hold for
  any multipliers, so the returned bound must still be ≥ the maximum (or ``None``);
* :func:`certified_dual_bound` on LPs whose optimum (or a feasible point) is known exactly, with multipliers at and
  around the optimal duals, huge, NaN and infinite;
* the portfolio step with ``pair_lp_bound`` failing or timing out.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from overlap_support import SCHEMA, _candidates, boxes, problem_of
from scipy.optimize import linprog as _REAL_LINPROG  # the real solver, before any test patches it

import dpmagic.overlap.pairlp as pl
from dpmagic.domain.schema import CategoricalColumn, Schema
from dpmagic.domain.sets import Box, CategorySet
from dpmagic.overlap import PortfolioConfig, max_overlap
from dpmagic.overlap.encoding import BoxStore, Problem, ProblemColumn, build_problem
from dpmagic.overlap.pairlp import certified_dual_bound, pair_lp_bound
from dpmagic.overlap.portfolio import witness_row

SOME = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PAIRLP = PortfolioConfig(steps=frozenset({"pairlp"}))

#: positive finite weights of every magnitude pair_lp_bound supports (below 2^-1024 too: test_subnormal_weights_do_not_raise)
EXTREME = [1e-300, 1e300, 2.0**-1022, 2.0**-1023, 2.0**-1024, 1e-10, 0.1, 1.0, 3.0, 2.0**53 + 2, 1e15 + 1, 7e299]
extreme_weights = st.one_of(
    st.sampled_from(EXTREME),
    st.floats(min_value=2.0**-1024, max_value=1e300, allow_nan=False, allow_infinity=False),
)


# ------------------------------------------------------------------------------------------------------
# exact oracles
# ------------------------------------------------------------------------------------------------------
def exact_problem_max(prob: Problem) -> Fraction:
    """Max over every atom tuple of the exact sum of the weights of the queries containing it."""
    dense = [c.dense() for c in prob.columns]
    best = Fraction(0)
    for combo in itertools.product(*(range(c.a) for c in prob.columns)):
        inside = np.ones(prob.n, dtype=bool)
        for M, a in zip(dense, combo):
            inside &= M[:, a]
        best = max(best, sum((Fraction(float(x)) for x in prob.weights[inside]), Fraction(0)))
    return best


def exact_atoms_load(prob: Problem, atoms: dict[str, int]) -> Fraction:
    inside = np.ones(prob.n, dtype=bool)
    for c in prob.columns:
        a = atoms[c.name]
        assert 0 <= a < c.a
        inside &= c.dense()[:, a]
    return sum((Fraction(float(x)) for x in prob.weights[inside]), Fraction(0))


def exact_brute_max(schema, bx, ws, region=None) -> Fraction:
    """``overlap_support.brute_max`` with exact sums (the float fsum may round the maximum either way)."""
    cand = _candidates(schema, bx, region)
    names = list(cand)
    best = Fraction(0)
    for combo in itertools.product(*(cand[n] for n in names)):
        row = dict(zip(names, combo))
        if region is not None and not region.contains_row(row):
            continue
        load = sum((Fraction(w) for b, w in zip(bx, ws) if not b.is_empty() and b.contains_row(row)), Fraction(0))
        best = max(best, load)
    return best


def assert_proven(upper: float | None, truth: Fraction) -> None:
    assert upper is not None
    assert not math.isnan(upper)
    assert upper == math.inf or Fraction(upper) >= truth, (upper, float(truth), truth - Fraction(upper))


# ------------------------------------------------------------------------------------------------------
# hand-built problems
# ------------------------------------------------------------------------------------------------------
@st.composite
def raw_problems(draw, weights=extreme_weights, max_cols=4, max_atoms=4, max_queries=8):
    """A :class:`Problem` from random membership matrices: per query and column a full row (the query does not
    constrain it), an empty set, a single atom, the complement of one atom or any subset; queries are optionally
    copied many times (dedupe), columns may have one atom."""
    ncols = draw(st.integers(1, max_cols))
    sizes = [draw(st.integers(1, max_atoms)) for _ in range(ncols)]
    nq = draw(st.integers(1, max_queries))
    rows: list[list[np.ndarray]] = []
    ws: list[float] = []
    for _ in range(nq):
        row = []
        for a in sizes:
            kind = draw(st.sampled_from(["full", "full", "empty", "one", "allbutone", "any", "any"]))
            if kind == "full":
                m = np.ones(a, dtype=bool)
            elif kind == "empty":
                m = np.zeros(a, dtype=bool)
            elif kind == "one":
                m = np.zeros(a, dtype=bool)
                m[draw(st.integers(0, a - 1))] = True
            elif kind == "allbutone":
                m = np.ones(a, dtype=bool)
                m[draw(st.integers(0, a - 1))] = False
            else:
                m = np.array(draw(st.lists(st.booleans(), min_size=a, max_size=a)), dtype=bool)
            row.append(m)
        copies = draw(st.sampled_from([1, 1, 1, 2, 3, 17]))
        w = draw(weights)
        for _ in range(copies):
            rows.append(row)
            ws.append(w if copies < 3 else draw(weights))
    n = len(rows)
    cols = []
    for ci, a in enumerate(sizes):
        M = np.array([r[ci] for r in rows], dtype=bool).reshape(n, a)
        cols.append(ProblemColumn(f"c{ci}", a, [f"v{k}" for k in range(a)], M=M))
    return Problem(np.arange(n), np.array(ws, dtype=np.float64), cols)


@given(raw_problems(), st.sampled_from([math.inf, 0.0, 1.0, 4.0]))
@SOME
def test_raw_problem_bound_is_proven(prob, pair_max) -> None:
    """The bound is ≥ the exact maximum; the witness atoms are in range and their exact load is ≤ the bound."""
    truth = exact_problem_max(prob)
    upper, atoms = pair_lp_bound(prob, 30.0, pair_max)
    assert_proven(upper, truth)
    assert atoms is not None
    assert set(atoms) == {c.name for c in prob.columns}
    assert exact_atoms_load(prob, atoms) <= Fraction(upper)


@given(raw_problems(weights=st.sampled_from([1.0, 0.5, 2.0, 0.25, 3.0, 0.1, 0.3])))
@SOME
def test_raw_problem_bound_is_proven_ordinary_weights(prob) -> None:
    """Same with ordinary weights (the grid snap of :func:`~.rounding.proven_upper` is active on dyadic weights)."""
    assert_proven(pair_lp_bound(prob, 30.0)[0], exact_problem_max(prob))


@given(raw_problems(max_cols=1, max_atoms=6, max_queries=10))
@SOME
def test_single_column_problem(prob) -> None:
    """One column: every query is a one-column query or constrains nothing (everything folded into ``y``)."""
    assert_proven(pair_lp_bound(prob, 30.0)[0], exact_problem_max(prob))


@st.composite
def wide_problems(draw):
    """2–3 columns of 6–10 atoms, each atom its own class (diagonal one-atom queries on every pair of columns), plus
    queries missing few atoms (complements): the cheapest form of their rows is then ``y(S) − p(S×T̄)``,
    ``y(T) − p(S̄×T)`` or ``y(S) + y(T) − 1 + p(S̄×T̄)``, not only ``p(S×T)`` (which small instances always pick)."""
    ncols = draw(st.integers(2, 3))
    sizes = [draw(st.integers(6, 10)) for _ in range(ncols)]
    tiny = draw(st.sampled_from([2.0**-20, 1e-300, 0.001]))
    rows, ws = [], []
    for k in range(max(sizes)):  # the diagonal: atom k of every column in one query
        rows.append([np.arange(a) == min(k, a - 1) for a in sizes])
        ws.append(tiny)
    for _ in range(draw(st.integers(1, 5))):
        row = []
        for a in sizes:
            m = np.ones(a, dtype=bool)
            miss = draw(st.lists(st.integers(0, a - 1), min_size=0, max_size=3))
            m[miss] = False
            if draw(st.integers(0, 4)) == 0:
                m = ~m  # a small set on this column
            row.append(m)
        rows.append(row)
        ws.append(draw(st.sampled_from([1.0, 0.5, 2.0, 0.75, 1e300, 0.1])))
    n = len(rows)
    cols = [
        ProblemColumn(f"c{ci}", a, list(range(a)), M=np.array([r[ci] for r in rows], dtype=bool).reshape(n, a))
        for ci, a in enumerate(sizes)
    ]
    return Problem(np.arange(n), np.array(ws, dtype=np.float64), cols)


@given(wide_problems())
@FEW
def test_wide_problems_every_row_form(prob) -> None:
    """The four equal forms of a pair row, each exercised, against brute force."""
    assert_proven(pair_lp_bound(prob, 30.0)[0], exact_problem_max(prob))


def test_form_three_instance() -> None:
    """Two columns of 9 atoms (all distinguished by one-atom queries), one query missing two atoms on each: its row
    takes the fourth form ``z ≤ y(S) + y(T) − 1 + p(S̄×T̄)``; the maximum is that query plus one diagonal query."""
    a = 9
    rows = [[np.arange(a) == k, np.arange(a) == k] for k in range(a)]
    big = np.ones(a, dtype=bool)
    big[[7, 8]] = False
    rows.append([big, big])
    ws = [0.25] * a + [1.0]
    n = len(rows)
    cols = [ProblemColumn(f"c{ci}", a, list(range(a)), M=np.array([r[ci] for r in rows])) for ci in range(2)]
    prob = Problem(np.arange(n), np.array(ws), cols)
    truth = exact_problem_max(prob)
    assert truth == Fraction(5, 4)
    upper, _ = pair_lp_bound(prob, 30.0)
    assert_proven(upper, truth)
    assert upper == 1.25  # the relaxation is exact here and the bound snaps to the quarter grid


def _two_col_problem(rows: list[tuple[list[int], list[int]]], ws: list[float], a: int = 3) -> Problem:
    n = len(rows)
    M1 = np.zeros((n, a), dtype=bool)
    M2 = np.zeros((n, a), dtype=bool)
    for q, (s, t) in enumerate(rows):
        M1[q, s] = True
        M2[q, t] = True
    cols = [ProblemColumn(f"c{k}", a, list(range(a)), M=M) for k, M in enumerate((M1, M2))]
    return Problem(np.arange(n), np.array(ws, dtype=np.float64), cols)


def test_many_identical_queries_and_mixed_magnitudes() -> None:
    """1,000 copies of one two-column query of weight 1e-300 next to one of 1e300 elsewhere, and 500 copies of
    a 0.1 query: the copies are one variable with the summed weight."""
    rows = [([0], [0])] * 1000 + [([1], [1])] + [([0, 2], [0, 1])] * 500
    ws = [1e-300] * 1000 + [1e300] + [0.1] * 500
    prob = _two_col_problem(rows, ws)
    upper, _ = pair_lp_bound(prob, 30.0)
    assert_proven(upper, exact_problem_max(prob))
    # weights summing to just above a float: 0.1 * 3 copies + a tiny one
    rows = [([0], [0])] * 3 + [([0, 1], [0, 1])] + [([2], [2])]
    ws = [0.1, 0.1, 0.1, 2.0**-60, 0.3]
    prob = _two_col_problem(rows, ws)
    assert_proven(pair_lp_bound(prob, 30.0)[0], exact_problem_max(prob))


def test_folded_and_deduped_sums_that_round_down() -> None:
    """One-column weights ``1 + 2⁻⁵⁴`` on one atom fold to the float 1.0 (in any order), and identical multi-column
    queries ``0.5 + 2⁻⁵⁵`` sum to 0.5: the LP's optimum is below the maximum by those roundings, which the margin of
    :func:`~.rounding.proven_upper` must cover (without it the bound is 1.5 < 1.5 + 2⁻⁵⁴ + 2⁻⁵⁵)."""
    rows = [([0], [0, 1, 2]), ([0], [0, 1, 2]), ([0, 1], [0]), ([0, 1], [0]), ([2], [2])]
    ws = [1.0, 2.0**-54, 0.5, 2.0**-55, 0.25]
    prob = _two_col_problem(rows, ws)
    truth = exact_problem_max(prob)
    assert truth == 1 + Fraction(1, 2) + Fraction(1, 2**54) + Fraction(1, 2**55)
    assert_proven(pair_lp_bound(prob, 30.0)[0], truth)
    one_col = Problem(np.arange(2), np.array([1.0, 2.0**-54]), [prob.columns[0].sub(np.arange(2))])
    assert_proven(pair_lp_bound(one_col, 30.0)[0], Fraction(1) + Fraction(1, 2**54))


def test_many_tiny_copies_after_a_heavy_one() -> None:
    """A two-column query of weight 1 then 2,000 identical copies of weight 2⁻⁵⁴: summed in order (``np.add.at``)
    the copies vanish (1.0), the maximum is ``1 + 2000·2⁻⁵⁴``, ≈ 500 ulps above; the dual bound's own slack is a
    few ulps, so only the margin of :func:`~.rounding.proven_upper` (``2n + 4`` terms) keeps the bound above."""
    rows = [([0], [0])] * 2001 + [([1, 2], [1])]
    ws = [1.0] + [2.0**-54] * 2000 + [0.5]
    prob = _two_col_problem(rows, ws)
    truth = 1 + Fraction(2000, 2**54)
    assert exact_problem_max(prob) == truth
    assert_proven(pair_lp_bound(prob, 30.0)[0], truth)


def test_empty_sets_and_unconstrained_queries() -> None:
    """A query empty on one column covers nothing; a query full on every column covers every row."""
    rows = [([], [0, 1, 2]), ([0, 1, 2], [0, 1, 2]), ([0], []), ([1], [2]), ([0, 1, 2], [1])]
    ws = [100.0, 0.5, 50.0, 1.0, 1.0]
    prob = _two_col_problem(rows, ws)
    truth = exact_problem_max(prob)
    assert truth == Fraction(3, 2)
    assert_proven(pair_lp_bound(prob, 30.0)[0], truth)


def test_dominance_with_float_ties_of_folded_weights() -> None:
    """One-column weights that round to equal folded coefficients (1 vs 1 + 3·2⁻⁵⁵, both 1.0 in float): dominance
    may keep the wrong atom; the rounding margin of the bound must still cover the exact maximum."""
    a = 3
    eps = 3 * 2.0**-55
    # one-column queries on c0: atom 0 gets {1.0}, atom 1 gets {1.0 (on atoms 0,1), eps}
    rows0 = [[0, 1], [1], [0, 1, 2]]
    rows1 = [[0, 1, 2], [0, 1, 2], [0]]
    ws = [1.0, eps, 2.0**-70]
    n = len(ws)
    M0 = np.zeros((n, a), dtype=bool)
    M1 = np.zeros((n, a), dtype=bool)
    for q in range(n):
        M0[q, rows0[q]] = True
        M1[q, rows1[q]] = True
    cols = [ProblemColumn("c0", a, [0, 1, 2], M=M0), ProblemColumn("c1", a, [0, 1, 2], M=M1)]
    prob = Problem(np.arange(n), np.array(ws), cols)
    assert_proven(pair_lp_bound(prob, 30.0)[0], exact_problem_max(prob))


# ------------------------------------------------------------------------------------------------------
# workloads on the shared schema with extreme weights
# ------------------------------------------------------------------------------------------------------
extreme_workloads = st.lists(st.tuples(boxes(), extreme_weights), min_size=1, max_size=8)


@given(extreme_workloads, st.one_of(st.none(), boxes()), st.sampled_from([math.inf, 0.0, 4.0]))
@SOME
def test_extreme_weight_workloads(wl, region, pair_max) -> None:
    bx, ws = [b for b, _ in wl], [w for _, w in wl]
    if region is not None and region.is_empty():
        return
    store, prob = problem_of(bx, ws, region)
    if prob.n == 0:
        return
    truth = exact_brute_max(SCHEMA, bx, ws, region)
    upper, atoms = pair_lp_bound(prob, 30.0, pair_max)
    assert_proven(upper, truth)
    assert atoms is not None
    row = witness_row(store, prob, atoms)
    load = sum((Fraction(w) for b, w in zip(bx, ws) if not b.is_empty() and b.contains_row(row)), Fraction(0))
    assert load <= Fraction(upper)
    if region is not None:
        assert region.contains_row(row)


@given(st.lists(st.tuples(boxes(), extreme_weights), min_size=1, max_size=7))
@FEW
def test_portfolio_pairlp_only_extreme_weights(wl) -> None:
    bx, ws = [b for b, _ in wl], [w for _, w in wl]
    """The portfolio restricted to the step (``assert_sound``'s absolute 1e-12 does not fit 1e300: relative here)."""
    r = max_overlap(bx, ws, SCHEMA, config=PAIRLP)
    truth = exact_brute_max(SCHEMA, bx, ws)
    assert Fraction(r.upper) >= truth
    assert r.lower <= r.upper
    assert abs(Fraction(r.lower) - truth) <= truth * Fraction(1, 10**15) or Fraction(r.lower) <= truth
    if r.exact:
        assert r.upper - r.lower <= 1e-9 * r.upper


def test_subnormal_weights_do_not_raise() -> None:
    """Weights below 2⁻¹⁰²⁴ (positive, finite, accepted by the store): ``math.ldexp(1.0, 1074)`` raises.  Not a
    privacy hole (the portfolio catches the exception and drops the step), a robustness defect."""
    rows = [([0], [0, 1]), ([0, 1], [1])]
    prob = _two_col_problem(rows, [5e-324, 5e-324])
    upper, _ = pair_lp_bound(prob, 30.0)
    assert upper is None or Fraction(upper) >= exact_problem_max(prob)


def test_portfolio_sound_with_subnormal_weights() -> None:
    """The portfolio over subnormal weights stays sound (the step's exception is swallowed)."""
    c3, c4 = SCHEMA["c3"], SCHEMA["c4"]
    bx = [
        Box({"c3": CategorySet.of_indices(c3, [0]), "c4": CategorySet.of_indices(c4, [0, 1])}),
        Box({"c3": CategorySet.of_indices(c3, [0, 1]), "c4": CategorySet.of_indices(c4, [1])}),
        Box({"c3": CategorySet.of_indices(c3, [1, 2]), "c4": CategorySet.of_indices(c4, [0, 2])}),
    ]
    ws = [5e-324, 1e-323, 5e-324]
    for cfg in (PAIRLP, PortfolioConfig()):
        r = max_overlap(bx, ws, SCHEMA, config=cfg)
        assert Fraction(r.upper) >= exact_brute_max(SCHEMA, bx, ws)


def test_complement_grid_two_columns() -> None:
    """Every ``a != i AND b == j`` on two categorical columns with varied weights (the relaxation is exact here)."""
    schema = Schema({"a": CategoricalColumn("a", tuple("pqrs")), "b": CategoricalColumn("b", tuple("xyz"))})
    bx, ws = [], []
    for i in range(4):
        for j in range(3):
            bx.append(
                Box(
                    {
                        "a": CategorySet.of_indices(schema["a"], [i]).complement(),
                        "b": CategorySet.of_indices(schema["b"], [j]),
                    }
                )
            )
            ws.append([1e-300, 1e300, 0.1, 3.0][i] * (j + 1))
    store = BoxStore(schema)
    store.extend(bx, ws)
    prob = build_problem(store, np.arange(len(bx)), None)
    assert_proven(pair_lp_bound(prob, 30.0)[0], exact_problem_max(prob))


# ------------------------------------------------------------------------------------------------------
# HiGHS replaced: adversarial duals, failures, timeouts
# ------------------------------------------------------------------------------------------------------


def _patched_solve(monkeypatch, transform):
    """``pairlp.solve_lp`` solved for real, then its multipliers replaced by ``transform(u, v)``."""
    real = pl.solve_lp

    def fake(c, A, b, E, e, time_limit, stop):  # type: ignore[no-untyped-def]
        res = real(c, A, b, E, e, time_limit, stop)
        if res is None:
            return res
        out = transform(res[1], res[2])
        return res if out is None else (res[0], out[0], out[1])

    monkeypatch.setattr(pl, "solve_lp", fake)


TRANSFORMS = {
    "zero": lambda i, e: (np.zeros_like(i), np.zeros_like(e)),
    "flip": lambda i, e: (-i, -e),
    "huge": lambda i, e: (i * 1e250, e * 1e250),
    "tiny": lambda i, e: (i * 1e-300, e * 1e-300),
    "nan": lambda i, e: (np.full_like(i, np.nan), e),
    "inf": lambda i, e: (i, np.full_like(e, -np.inf)),
    "ulp_down": lambda i, e: (np.nextafter(i, 0.0), np.nextafter(e, 0.0)),
    "ulp_up": lambda i, e: (np.nextafter(i, -np.inf), np.nextafter(e, np.inf)),
    "shrink": lambda i, e: (i * (1 - 1e-9), e * (1 - 1e-9)),
    "v_only": lambda i, e: (np.zeros_like(i), e),
}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
@given(prob=raw_problems(max_cols=3, max_atoms=3, max_queries=6))
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
def test_bound_holds_for_adversarial_duals(monkeypatch, name, prob) -> None:
    """Whatever multipliers HiGHS reports, the returned bound is ≥ the maximum (or ``None``)."""
    _patched_solve(monkeypatch, TRANSFORMS[name])
    try:
        upper, _ = pair_lp_bound(prob, 30.0)
    except OverflowError:  # fsum's intermediate overflow on huge multipliers: no bound, not a wrong one
        return
    if upper is not None:
        assert_proven(upper, exact_problem_max(prob))


def test_failed_run_is_no_bound(monkeypatch) -> None:
    """A HiGHS run that fails (kError) still reports zero multipliers of the right length: no bound is made of them."""
    import highspy
    import highspy._core as hcore

    real = hcore._Highs

    class Failing(real):  # type: ignore[misc, valid-type]
        def run(self):  # type: ignore[no-untyped-def]
            return highspy.HighsStatus.kError

    monkeypatch.setattr(hcore, "_Highs", Failing)
    prob = _two_col_problem([([0], [0, 1]), ([0, 1], [1]), ([2], [2])], [1.0, 1.0, 1.0])
    assert pair_lp_bound(prob, 30.0) == (None, None)


def test_no_multipliers_is_none(monkeypatch) -> None:
    """HiGHS reporting no multipliers at all (a failed solve): no bound."""
    monkeypatch.setattr(pl, "solve_lp", lambda *a, **k: None)
    prob = _two_col_problem([([0], [0, 1]), ([0, 1], [1]), ([2], [2])], [1.0, 1.0, 1.0])
    assert pair_lp_bound(prob, 30.0) == (None, None)


@pytest.mark.parametrize("x", [None, "short"])
def test_stopped_solve_is_proven_without_witness(monkeypatch, x) -> None:
    """HiGHS stopped early (time limit, numerical trouble) with no primal point, or one of the wrong length, and
    whatever multipliers: the certified bound is still ≥ the maximum, and no witness is made up."""
    real = pl.solve_lp

    def fake(c, A, b, E, e, time_limit, stop):  # type: ignore[no-untyped-def]
        res = real(c, A, b, E, e, time_limit, stop)
        assert res is not None
        return (None if x is None else np.zeros(1), np.zeros_like(res[1]), np.zeros_like(res[2]))

    monkeypatch.setattr(pl, "solve_lp", fake)
    prob = _two_col_problem([([0], [0, 1]), ([0, 1], [1]), ([2], [2])], [1.0, 2.0, 1.5])
    upper, atoms = pair_lp_bound(prob, 30.0)
    assert atoms is None
    assert upper is not None
    assert_proven(upper, exact_problem_max(prob))


def test_tiny_time_limit_is_none_or_proven() -> None:
    prob = _two_col_problem([([0], [0, 1]), ([0, 1], [1]), ([2], [2])], [1.0, 2.0, 1.5])
    for t in (0.0, -1.0, 1e-9, pl.PAIRLP_MIN_SECONDS):
        upper, atoms = pair_lp_bound(prob, t)
        if upper is not None:
            assert_proven(upper, exact_problem_max(prob))
        else:
            assert atoms is None


@given(st.lists(st.tuples(boxes(), st.sampled_from([1.0, 0.5, 0.1, 1e-300, 1e300])), min_size=1, max_size=6))
@FEW
def test_portfolio_sound_when_pairlp_fails(wl) -> None:
    """The step returning ``None`` (timeout) or raising: the portfolio's bound comes from elsewhere, still sound."""
    bx, ws = [b for b, _ in wl], [w for _, w in wl]
    import dpmagic.overlap.portfolio as pf

    truth = exact_brute_max(SCHEMA, bx, ws)
    old = pf.pair_lp_bound
    for repl in (lambda p, t, *a, **k: (None, None), lambda p, t, *a: (_ for _ in ()).throw(RuntimeError("x"))):
        pf.pair_lp_bound = repl
        try:
            for cfg in (PAIRLP, PortfolioConfig()):
                r = max_overlap(bx, ws, SCHEMA, config=cfg)
                assert Fraction(r.upper) >= truth
        finally:
            pf.pair_lp_bound = old


# ------------------------------------------------------------------------------------------------------
# certified_dual_bound directly
# ------------------------------------------------------------------------------------------------------
def _cdb(c, A, b, E, e, u, v) -> float:
    try:
        return certified_dual_bound(c, A, b, E, e, u, v)
    except OverflowError:  # fsum's intermediate overflow: no bound (documented in the report), treated as +inf
        return math.inf


pos_floats = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(pos_floats, pos_floats, st.floats(0.0, 1e6), st.integers(-3, 3), st.sampled_from([1.0, 1e-300, 1e300, 0.1]))
@SOME
def test_one_dim_tight_lp(cv, a, b, k, mult) -> None:
    """``max c x, a x ≤ b, 0 ≤ x ≤ 1`` (general ``a``, ``b``: not only 0/±1): exact optimum ``c·min(1, b/a)``; the
    multiplier ``u`` at, and a few ulps around, the optimal dual ``c/a`` (or 0 when the box bound binds)."""
    cv, a, b = cv * mult, a * mult, b * mult
    if not all(math.isfinite(t) for t in (cv, a, b)):
        return
    exact = Fraction(cv) * min(Fraction(1), Fraction(b) / Fraction(a))
    c = np.array([cv])
    A = sp.csr_matrix(np.array([[a]]))
    E = sp.csr_matrix((0, 1))
    u0 = cv / a
    u = u0
    for _ in range(abs(k)):
        u = math.nextafter(u, math.inf if k > 0 else -math.inf)
    for uu in (u, u0, 0.0):
        bound = _cdb(c, A, np.array([b]), E, np.zeros(0), np.array([uu]), np.zeros(0))
        assert bound == math.inf or Fraction(bound) >= exact


@st.composite
def known_lps(draw):
    """An LP with a known exactly feasible point ``x0`` (dyadic, so ``A x0`` and ``E x0`` are exact in float)."""
    n = draw(st.integers(1, 5))
    m = draw(st.integers(0, 5))
    p = draw(st.integers(0, 3))
    ints = st.integers(-4, 4)
    x0 = np.array([draw(st.integers(0, 8)) / 8 for _ in range(n)])
    A = np.array([[draw(ints) for _ in range(n)] for _ in range(m)], dtype=np.float64).reshape(m, n)
    E = np.array([[draw(ints) for _ in range(n)] for _ in range(p)], dtype=np.float64).reshape(p, n)
    slack = np.array([draw(st.sampled_from([0.0, 0.0, 0.5, 1.0])) for _ in range(m)])
    b = A @ x0 + slack  # exact: small integers times eighths
    e = E @ x0
    c = np.array(
        [draw(st.floats(-10, 10, allow_nan=False)) * draw(st.sampled_from([1.0, 1e-300, 1e290])) for _ in range(n)]
    )
    return c, sp.csr_matrix(A), b, sp.csr_matrix(E), e, x0


def _exact_dot(c, x) -> Fraction:
    return sum((Fraction(float(a)) * Fraction(float(b)) for a, b in zip(c, x)), Fraction(0))


@given(known_lps(), st.data())
@SOME
def test_certified_dual_bound_any_multipliers(lp, data) -> None:
    """≥ ``cᵀx0`` for a feasible ``x0`` whatever the multipliers: HiGHS's optimal duals and their ulp neighbours,
    random, huge, tiny, NaN, ±inf."""
    c, A, b, E, e, x0 = lp
    low = _exact_dot(c, x0)
    m, p = A.shape[0], E.shape[0]
    cands = []
    res = _REAL_LINPROG(
        -c,
        A_ub=A if m else None,
        b_ub=b if m else None,
        A_eq=E if p else None,
        b_eq=e if p else None,
        bounds=(0, 1),
        method="highs-ds",
    )
    if res.status == 0:
        u = -np.asarray(res.ineqlin.marginals) if m else np.zeros(0)
        v = -np.asarray(res.eqlin.marginals) if p else np.zeros(0)
        cands += [(u, v), (np.nextafter(u, 0.0), np.nextafter(v, 0.0)), (u * (1 - 1e-12), v * (1 + 1e-12))]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    for scale in (1.0, 1e-300, 1e300, 1e308):
        cands.append((rng.normal(size=m) * scale, rng.normal(size=p) * scale))
    cands.append((np.full(m, np.nan), np.zeros(p)))
    cands.append((np.zeros(m), np.full(p, np.inf)))
    cands.append((np.full(m, -np.inf), np.full(p, -np.inf)))
    cands.append((np.full(m, 2.0**-1074), np.full(p, -(2.0**-1074))))
    for u, v in cands:
        bound = _cdb(c, A, b, E, e, u, v)
        assert not math.isnan(bound)
        assert bound == math.inf or Fraction(bound) >= low, (u, v, bound, float(low))


def test_certified_dual_bound_non_finite_multipliers_give_inf() -> None:
    A = sp.csr_matrix(np.array([[1.0, -1.0], [1.0, 1.0]]))
    E = sp.csr_matrix(np.array([[1.0, 1.0]]))
    c, b, e = np.array([1.0, 2.0]), np.array([0.0, 1.0]), np.array([1.0])
    assert certified_dual_bound(c, A, b, E, e, np.array([np.nan, 0.0]), np.zeros(1)) == math.inf
    assert certified_dual_bound(c, A, b, E, e, np.zeros(2), np.array([np.inf])) == math.inf
    assert certified_dual_bound(c, A, b, E, e, np.array([1e308, 1e308]), np.zeros(1)) == math.inf
    # -inf in u is clipped to 0: a finite, valid bound (the LP's maximum is 2)
    assert certified_dual_bound(c, A, b, E, e, np.array([-np.inf, 0.0]), np.zeros(1)) >= 2.0


def test_certified_dual_bound_huge_multipliers_do_not_raise() -> None:
    """``v = -1e308``: the positive parts are ≈ 1e308 each and ``eᵀv = -1e308``; ``sum_up`` (``math.fsum``) raises
    ``OverflowError`` instead of returning a bound or ``inf``.  Not unsound (an exception is no bound)."""
    A = sp.csr_matrix(np.array([[1.0, -1.0], [1.0, 1.0]]))
    E = sp.csr_matrix(np.array([[1.0, 1.0]]))
    c, b, e = np.array([1.0, 2.0]), np.array([0.0, 1.0]), np.array([1.0])
    assert certified_dual_bound(c, A, b, E, e, np.zeros(2), np.array([-1e308])) >= 2.0
