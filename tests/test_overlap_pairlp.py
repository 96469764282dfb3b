"""The pairwise-marginal LP (issue 28, session 15: :mod:`dpmagic.overlap.pairlp`) against brute force.

Every path is checked: its bound is ≥ the brute-force maximum (with and without a region), its certified dual
bound holds for *any* multipliers (not only HiGHS's), its witness is a row whose load the portfolio recomputes,
the portfolio with the step is sound (lower ≤ γ ≤ upper, exact only when equal, witness load = lower), and the
relaxation is strictly tighter than the integer program's own LP on an instance where that one is loose.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from overlap_support import FAST, SCHEMA, assert_sound, boxes, brute_max, problem_of, row_load, weights_st

from dpmagic.domain.schema import CategoricalColumn, Schema
from dpmagic.domain.sets import Box, CategorySet
from dpmagic.overlap import PortfolioConfig, max_overlap, plan
from dpmagic.overlap.encoding import BoxStore, build_problem
from dpmagic.overlap.milp import milp_overlap
from dpmagic.overlap.pairlp import certified_dual_bound, pair_lp_bound
from dpmagic.overlap.portfolio import Instance, witness_row

decimal_weights = st.sampled_from([0.01, 0.037, 0.05, 0.1, 0.083, 0.3, 0.07, 0.011])
any_weights = st.one_of(weights_st, decimal_weights, st.floats(0.01, 3.0))
workloads = st.lists(st.tuples(boxes(), any_weights), min_size=1, max_size=9)
#: the pairwise LP as the only bound (with the exact tensor off, nothing else closes an instance)
PAIRLP = PortfolioConfig(steps=frozenset({"pairlp"}))


@given(
    workloads,
    st.one_of(st.none(), boxes()),
    st.sampled_from([math.inf, 0.0, 4.0]),
    st.floats(-1.0, 12.0),
    st.sampled_from([None, 0.0, 2.0, 4.0]),
)
@FAST
def test_pair_lp_bound_is_proven(wl, region, pair_max, frac, first) -> None:
    """The bound is ≥ the brute-force maximum (over the region when given), also when pairs of more than
    ``pair_max`` cells get no joint (their queries keep the one-column rows); the witness is a row of the problem's
    domain (inside the region) whose load is at most the bound.

    With a target (HiGHS's dual simplex stops once its bound passes it) the bound is still ≥ the maximum whatever
    the target — below the maximum, at it, between it and the LP optimum, above Σw — and at most the target when the
    target is above the LP optimum.  (Whether HiGHS stops early is a matter of speed, measured in the benchmarks,
    not of soundness: a solve that ignored the target passes here too.)  With a cheaper first stage
    (``first_pair_max``: only the small pairs' joints, the full LP only when that bound is above the target) every
    bound is still ≥ the maximum, and at most the target whenever the full LP alone was."""
    bx, ws = [b for b, _ in wl], [w for _, w in wl]
    if region is not None and region.is_empty():
        return
    store, prob = problem_of(bx, ws, region)
    if prob.n == 0:
        return
    truth = brute_max(SCHEMA, bx, ws, region)
    upper, atoms = pair_lp_bound(prob, 30.0, pair_max)
    assert upper is not None and atoms is not None
    assert truth <= upper
    assert upper <= math.fsum(ws) * (1 + 1e-9) + 1e-12
    row = witness_row(store, prob, atoms)
    assert row_load(bx, ws, row) <= upper
    if region is not None:
        assert region.contains_row(row)
    full = upper
    for target in (truth * frac, truth, (truth + full) / 2, full, full * 1.5 + 1.0):
        up, _ = pair_lp_bound(prob, 30.0, pair_max, target=target, first_pair_max=first)
        assert up is not None
        assert truth <= up
        if target >= full * (1 + 1e-6):
            assert up <= target * (1 + 1e-6) + 1e-9


@given(workloads)
@FAST
def test_portfolio_with_pair_lp_is_sound(wl) -> None:
    """The portfolio restricted to the pairwise LP: lower ≤ γ ≤ upper, exact only when the two are equal (then
    equal to γ), the witness's load is the lower end."""
    bx, ws = [b for b, _ in wl], [w for _, w in wl]
    r = max_overlap(bx, ws, SCHEMA, config=PAIRLP)
    assert_sound(r, bx, ws)


@given(workloads, st.data())
@FAST
def test_certified_dual_bound_holds_for_any_multipliers(wl, data) -> None:
    """Weak duality: ``certified_dual_bound`` is ≥ the LP's maximum — hence ≥ the brute-force maximum load — for
    arbitrary multipliers (random, zero, negative ``u`` clipped), not only for HiGHS's optimal ones."""
    from scipy.optimize import linprog

    import dpmagic.overlap.pairlp as pl

    bx, ws = [b for b, _ in wl], [w for _, w in wl]
    store, prob = problem_of(bx, ws)
    if prob.n == 0 or not prob.columns:
        return
    captured = {}
    orig = pl.solve_lp

    def spy(c, A, b, E, e, time_limit, stop):  # type: ignore[no-untyped-def]
        captured.update(c=c, A=A, b=b, E=E, e=e)
        return orig(c, A, b, E, e, time_limit, stop)

    old = pl.solve_lp
    pl.solve_lp = spy
    try:
        pl.pair_lp_bound(prob, 30.0)
    finally:
        pl.solve_lp = old
    if not captured:
        return
    c, E, e = captured["c"], captured["E"], captured["e"]
    A, b = captured["A"], captured["b"]
    opt = linprog(-c, A_ub=A if A.shape[0] else None, b_ub=b if A.shape[0] else None, A_eq=E, b_eq=e, bounds=(0, 1))
    assert opt.status == 0
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    for u, v in (
        (np.zeros(A.shape[0]), np.zeros(E.shape[0])),
        (rng.normal(size=A.shape[0]), rng.normal(size=E.shape[0])),
        (rng.exponential(size=A.shape[0]), rng.normal(scale=3.0, size=E.shape[0])),
    ):
        assert certified_dual_bound(c, A, b, E, e, u, v) >= -opt.fun - 1e-12


def test_tighter_than_the_integer_programs_relaxation() -> None:
    """Two columns of two values, the four one-cell queries: the integer program's LP puts y = ½ on every value
    and counts every query half (bound 2); the joint distribution of the pair holds mass 1 (bound 1 = γ)."""
    schema = Schema({"a": CategoricalColumn("a", ("0", "1")), "b": CategoricalColumn("b", ("0", "1"))})
    bx = [
        Box({"a": CategorySet.of_indices(schema["a"], [x]), "b": CategorySet.of_indices(schema["b"], [y])})
        for x in (0, 1)
        for y in (0, 1)
    ]
    ws = [1.0, 1.0, 1.0, 1.0]
    store = BoxStore(schema)
    store.extend(bx, ws)
    prob = build_problem(store, np.arange(4), None)
    _, _, lp = milp_overlap(prob, 30.0, relax=True)
    upper, _ = pair_lp_bound(prob, 30.0)
    assert lp is not None and lp >= 2.0 - 1e-6
    assert upper is not None and upper == pytest.approx(1.0, abs=1e-9)
    assert upper >= 1.0


def test_complements_closed_by_the_pair_lp_alone() -> None:
    """Complements on two columns (``!=`` and ``NOT IN``, the drill-down family's siblings): the pairwise LP's bound
    is the maximum and its witness attains it, so the portfolio restricted to it reports exact."""
    cols = {n: SCHEMA[n] for n in SCHEMA.names if isinstance(SCHEMA[n], CategoricalColumn)}
    a, b = list(cols)[:2]
    bx = []
    for i in range(cols[a].size):
        for j in range(cols[b].size):
            bx.append(
                Box({a: CategorySet.of_indices(cols[a], [i]).complement(), b: CategorySet.of_indices(cols[b], [j])})
            )
    ws = [0.01 * (k % 7 + 1) for k in range(len(bx))]
    r = max_overlap(bx, ws, SCHEMA, config=PAIRLP)
    assert_sound(r, bx, ws)
    assert r.exact and "pairlp" in r.method


def _drilldown_like(n: int, seed: int):
    """``n`` random drill-down-like boxes on Adult: 1–3 predicates over 3 categorical and 3 numeric columns, with
    complements, ``NOT IN`` and same-column ORs of ranges at non-round cut points (so that a numeric column has
    more atoms than the scoped search takes)."""
    from dpmagic import load_adult
    from dpmagic.domain.sets import Interval, IntervalSet

    _, schema = load_adult()
    rng = np.random.default_rng(seed)
    cats, nums = ["education", "occupation", "sex"], ["age", "hours-per-week", "capital-gain"]
    out = []
    for _ in range(n):
        cons = {}
        for name in rng.choice(cats + nums, size=int(rng.integers(1, 4)), replace=False):
            col = schema[str(name)]
            if name in cats:
                idx = rng.choice(col.size, size=int(rng.integers(1, max(2, col.size // 2))), replace=False)
                cs = CategorySet.of_indices(col, [int(k) for k in idx])
                cons[str(name)] = cs.complement() if rng.random() < 0.4 else cs
            else:
                lo, hi = sorted(rng.uniform(col.lower, col.upper, size=2).round().tolist())
                ivs = [Interval(float(lo), float(hi), True, True)]
                s_ = IntervalSet.of(col, ivs)
                cons[str(name)] = s_.complement() if rng.random() < 0.3 else s_
        out.append(Box(cons))
    return schema, out


def test_in_the_drill_down_plan_before_the_integer_program() -> None:
    """The drill-down plan (many live queries, few columns, non-Helly, a numeric column past the scoped search's
    atom limit, a large atom product) runs the probe, then the pairwise LP, then HiGHS's integer program; its
    bound is at least the integer program's proven optimum there."""
    schema, bx = _drilldown_like(220, seed=3)
    ws = [0.01 * (1 + k % 10) for k in range(len(bx))]
    store = BoxStore(schema)
    store.extend(bx, ws)
    ids = np.flatnonzero(store.alive[: store.n])
    prob = build_problem(store, ids, None)
    cfg = PortfolioConfig(scoped_max_atoms=64)  # (the default, 256 since session 19, takes this instance)
    assert max(c.a for c in prob.columns) > cfg.scoped_max_atoms
    names = [s.name for s, _ in plan(Instance.of(store, prob, ids), cfg)]
    assert names[:3] == ["graph", "pairlp", "milp"], names
    inc, atoms, milp_up = milp_overlap(prob, 60.0)
    upper, _ = pair_lp_bound(prob, 60.0)
    assert inc is not None and milp_up is not None and upper is not None
    best = row_load(bx, ws, witness_row(store, prob, atoms))
    assert best <= upper
    assert upper <= milp_up * (1 + 1e-6) + 1e-9  # never looser than the integer program's own dual bound ...
    no_pairs = PortfolioConfig(steps=frozenset({"milp", "lp"}), scoped_max_atoms=64)
    assert "pairlp" not in [s.name for s, _ in plan(Instance.of(store, prob, ids), no_pairs)]


def test_cheap_first_stage_then_the_full_lp(monkeypatch) -> None:
    """``first_pair_max``: the cheaper LP (the small pairs' joints only) is solved first; when its proven bound is at
    most the target the full LP is never built, else the full LP follows and the smaller bound is returned — never
    above the cheap one, as tight as the full LP alone (up to HiGHS's stop at the target), and ≥ the maximum."""
    import dpmagic.overlap.pairlp as pl

    schema, bx = _drilldown_like(120, seed=5)
    ws = [0.01 * (1 + k % 10) for k in range(len(bx))]
    store = BoxStore(schema)
    store.extend(bx, ws)
    prob = build_problem(store, np.flatnonzero(store.alive[: store.n]), None)
    calls: list[int] = []
    real = pl.solve_lp

    def counted(c, A, b, E, e, time_limit, stop):
        calls.append(len(c))
        return real(c, A, b, E, e, time_limit, stop)

    monkeypatch.setattr(pl, "solve_lp", counted)
    full, _ = pair_lp_bound(prob, 60.0)
    cheap, _ = pair_lp_bound(prob, 60.0, pair_max=20.0)
    assert full is not None and cheap is not None and full < cheap  # the big pairs matter on this instance
    calls.clear()
    up, _ = pair_lp_bound(prob, 60.0, target=full * 0.5, first_pair_max=20.0)
    assert len(calls) == 2 and calls[0] < calls[1]  # cheap first (fewer variables), then the full LP
    assert up is not None and up == pytest.approx(full, rel=1e-9) and up <= cheap
    calls.clear()
    up, _ = pair_lp_bound(prob, 60.0, target=math.inf, first_pair_max=20.0)
    assert len(calls) == 1 and up == pytest.approx(full, rel=1e-9)  # no target: the optimum is wanted, one LP
    calls.clear()
    up, _ = pair_lp_bound(prob, 60.0, target=cheap * 1.01, first_pair_max=20.0)
    assert len(calls) == 1 and up is not None and up <= cheap * 1.01  # proven at the target by the cheap LP alone
    calls.clear()
    up, _ = pair_lp_bound(prob, 60.0, target=full * 0.5, first_pair_max=1e9)
    assert len(calls) == 1  # no pair is dropped by the first stage: one LP
    truth_lb = row_load(bx, ws, witness_row(store, prob, pair_lp_bound(prob, 60.0)[1] or {}))
    assert truth_lb <= full


def test_target_half_a_lattice_step_above_the_best_load(monkeypatch) -> None:
    """On decimal costs (a lattice of step δ) the portfolio asks the LP only for a bound less than δ/2 above the best
    load (such a bound snaps to it), and the result is still sound and exact when the portfolio says so."""
    import dpmagic.overlap.portfolio as pf

    schema, bx = _drilldown_like(60, seed=7)
    ws = [round(0.013 * (1 + k % 7), 3) for k in range(len(bx))]
    seen: list[tuple[float, float, float]] = []
    real = pf.pair_lp_bound

    def spy(prob, time_limit, *a, **k):
        out = real(prob, time_limit, *a, **k)
        seen.append((k["target"], out[0] if out[0] is not None else math.nan, time_limit))
        return out

    monkeypatch.setattr(pf, "pair_lp_bound", spy)
    r = max_overlap(bx, ws, schema, config=PAIRLP)
    assert seen, "the pairwise LP ran"
    lower = r.lower
    # the target is a load of the problem (a multiple of 0.001: the best load when the LP started) plus δ/2
    t = seen[0][0]
    assert round(t - 0.0005, 3) == pytest.approx(t - 0.0005, abs=1e-12) and t - 0.0005 <= lower + 1e-12, (seen, lower)
    store = BoxStore(schema)
    store.extend(bx, ws)
    assert row_load(bx, ws, r.witness) == pytest.approx(lower)
    if r.exact:
        assert r.upper - r.lower <= 1e-9 * r.upper


def test_solving_prints_nothing() -> None:
    """A fresh process that solves the LP writes nothing to its stdout or stderr: ``highspy.Highs()`` prints HiGHS's
    banner to file descriptor 1 on its first construction, which a notebook kernel would show in a cell's output."""
    import subprocess
    import sys

    code = (
        "from dpmagic.domain.schema import CategoricalColumn, Schema\n"
        "from dpmagic.domain.sets import Box, CategorySet\n"
        "from dpmagic.overlap.encoding import BoxStore, build_problem\n"
        "from dpmagic.overlap.pairlp import pair_lp_bound\n"
        "import numpy as np\n"
        "s = Schema({'a': CategoricalColumn('a', ('0', '1')), 'b': CategoricalColumn('b', ('0', '1'))})\n"
        "bx = [Box({'a': CategorySet.of_indices(s['a'], [x]), 'b': CategorySet.of_indices(s['b'], [y])})"
        " for x in (0, 1) for y in (0, 1)]\n"
        "st = BoxStore(s); st.extend(bx, [1.0] * 4)\n"
        "u, _ = pair_lp_bound(build_problem(st, np.arange(4), None), 30.0)\n"
        "assert u is not None and abs(u - 1.0) < 1e-9, u\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "" and out.stderr == ""
