"""Dense analyst instances (issue 28): the decimal-lattice snap and the integer-program-first plan, against brute
force (helpers of ``test_overlap_engine``).

Every path is checked for: γ ≤ reported upper, lower ≤ γ, the witness's load = lower, exact only when the two
are equal, and incremental admissions equal to a from-scratch solve; on small dense instances with same-column
ORs (unions of intervals, category sets of several values) and complements.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from overlap_support import FAST, SCHEMA, admit_each, assert_sound, boxes, brute_max, row_load

from dpmagic.domain.sets import Box, CategorySet, Interval, IntervalSet
from dpmagic.overlap import OverlapEngine, PortfolioConfig, max_overlap, plan
from dpmagic.overlap.encoding import BoxStore, build_problem
from dpmagic.overlap.portfolio import Instance
from dpmagic.overlap.rounding import DecimalLattice, ProblemRounding, is_exact

#: ε typed by an analyst: short decimals (no power-of-two lattice below 2^-50)
decimal_weights = st.sampled_from([0.01, 0.037, 0.05, 0.1, 0.083, 0.3, 0.07, 0.011])
dense_workloads = st.lists(st.tuples(boxes(), decimal_weights), min_size=1, max_size=8)
#: HiGHS right after a (zero-length) graph probe on every instance without a tensor: the dense plan
DENSE = PortfolioConfig(
    tensor_cells=1, milp_dense_vars=1500, milp_dense_scope=99, milp_dense_probe=0.0, scoped_max_columns=0
)
#: HiGHS alone (its tolerance margin: exact only through the decimal snap)
HIGHS = PortfolioConfig(steps=frozenset({"milp"}))


def _subset_sums(ws: list[float]) -> list[Fraction]:
    return [
        sum((Fraction(ws[i]) for i in s), Fraction(0))
        for r in range(len(ws) + 1)
        for s in itertools.combinations(range(len(ws)), r)
    ]


@given(
    st.lists(st.integers(1, 999), min_size=1, max_size=9),
    st.sampled_from([1, 2, 3, 4]),
    st.floats(0.0, 3.0),
)
@FAST
def test_decimal_snap_is_a_proven_bound(ks, digits, slack_steps) -> None:
    """snap(U) ≥ every subset sum ≤ U (exact rationals); within one step above the maximum it is the maximum."""
    ws = [k / 10**digits for k in ks]
    lat = DecimalLattice.of(np.array(ws))
    assert lat is not None and lat.digits <= digits
    sums = _subset_sums(ws)
    top = max(sums)
    u = float(top + Fraction(slack_steps) / 10**digits)
    u = u if Fraction(u) >= top else math.nextafter(u, math.inf)
    snapped = lat.snap(u)
    assert snapped <= u
    assert all(Fraction(snapped) >= s for s in sums if s <= Fraction(u))
    if slack_steps < 0.5:  # less than one step above: the exact maximum, to within the representation errors
        assert is_exact(float(top), snapped)


def test_decimal_snap_declines_long_decimals() -> None:
    """Weights needing more than DECIMAL_MAX_DIGITS digits have no decimal lattice; the bound is then unchanged."""
    assert DecimalLattice.of(np.array([1 / 3, 0.1])) is None
    store = BoxStore(SCHEMA)
    store.extend([Box({})], [1 / 3])
    prob = build_problem(store, np.arange(1))
    assert ProblemRounding.of(prob).snap(0.5) == 0.5


def _instance(bx, ws):
    store = BoxStore(SCHEMA)
    store.extend(bx, np.asarray(ws))
    ids = np.arange(len(bx))
    return Instance.of(store, build_problem(store, ids), ids)


@given(dense_workloads)
@FAST
def test_dense_plan_matches_brute_force(wl) -> None:
    """The integer-program-first plan: exact (decimal snap) and equal to brute force; witness load = lower."""
    bx, ws = [b for b, _ in wl], [w for _, w in wl]
    truth = brute_max(SCHEMA, bx, ws)
    r = max_overlap(bx, ws, SCHEMA, config=DENSE)
    assert r.exact and r.lower == pytest.approx(truth, abs=1e-12)
    r = max_overlap(bx, ws, SCHEMA, config=HIGHS)
    assert r.lower <= truth + 1e-12 and truth <= r.upper + 1e-12
    assert row_load(bx, ws, r.witness) == pytest.approx(r.lower, abs=1e-12)
    assert r.exact == is_exact(r.lower, r.upper)
    assert r.exact  # HiGHS's dual bound plus its tolerance margin, snapped to the decimal lattice
    assert r.lower == pytest.approx(truth, abs=1e-12)


def test_dense_plan_is_chosen_by_instance() -> None:
    """Few columns, few constrained per query, non-Helly, no tensor: HiGHS right after a capped graph probe."""
    rng = np.random.default_rng(3)
    bx = []
    for _ in range(30):
        cons = {}
        for name in rng.choice(SCHEMA.names, size=2, replace=False).tolist():
            col = SCHEMA[name]
            if name in ("c3", "c4"):
                cons[name] = CategorySet.of_indices(col, rng.choice(col.size, size=2, replace=False).tolist())
        bx.append(Box(cons))
    inst = _instance(bx, [0.05] * len(bx))
    assert not inst.helly and inst.mean_scope <= 2
    cfg = PortfolioConfig(tensor_cells=1, milp_dense_vars=1500, scoped_max_columns=0)
    names = [(s.name, cap is not None) for s, cap in plan(inst, cfg)]
    assert names[:2] == [("graph", True), ("milp", False)]
    # with the scoped branch and bound allowed (the default), it runs first on such an instance
    assert plan(inst, replace(cfg, scoped_max_columns=16))[0][0].name == "scoped"
    assert [n for n, _ in names[:2]] != [n for n, _ in (plan(inst, replace(cfg, milp_dense_scope=0.5)))][:2]


@given(dense_workloads, boxes(), decimal_weights)
@FAST
def test_dense_admission_equals_from_scratch(wl, box, w) -> None:
    """Incremental admissions under the dense plan (exact charge) = a from-scratch solve = brute force."""
    eng = OverlapEngine(SCHEMA, charged="exact", solver=DENSE)
    for ov, bx, ws in admit_each(eng, [*wl, (box, w)]):
        truth = brute_max(SCHEMA, bx, ws)
        assert ov.lower <= truth + 1e-12 and truth <= ov.upper + 1e-12
        assert row_load(bx, ws, ov.witness) == pytest.approx(ov.lower, abs=1e-12)
        assert ov.exact == is_exact(ov.lower, ov.upper)
        scratch = max_overlap(bx, ws, SCHEMA, config=DENSE)
        assert ov.exact and scratch.exact
        assert ov.lower == pytest.approx(scratch.lower, abs=1e-12) == pytest.approx(truth, abs=1e-12)


@given(dense_workloads, st.integers(0, 3))
@FAST
def test_highs_folds_unary_and_merges_duplicates(wl, extra) -> None:
    """The integer program folds one-column queries into the objective, drops unconstrained ones into a constant
    and merges identical queries: still a proven bound, exact (snap) and equal to brute force."""
    wl = wl + wl[:extra] + [(Box({}), 0.05)] * (extra % 2)  # duplicates and an unconstrained query
    bx, ws = [b for b, _ in wl], [w for _, w in wl]
    truth = brute_max(SCHEMA, bx, ws)
    r = max_overlap(bx, ws, SCHEMA, config=HIGHS)
    assert r.lower <= truth + 1e-12 and truth <= r.upper + 1e-12
    assert r.exact and r.lower == pytest.approx(truth, abs=1e-12)
    assert row_load(bx, ws, r.witness) == pytest.approx(r.lower, abs=1e-12)


@given(st.lists(st.tuples(boxes(), st.one_of(decimal_weights, st.floats(0.01, 3.0))), min_size=1, max_size=8))
@FAST
def test_pending_terms_are_sound_and_retighten_recovers(wl) -> None:
    """Admissions whose region search cannot run (HiGHS alone, no time) keep proven intervals as pending terms:
    γ ≤ upper and lower ≤ γ after every admission, the witness's load is the lower end; ``retighten`` with time
    with time and the whole portfolio then recovers the exact γ (= brute force = a from-scratch solve)."""
    eng = OverlapEngine(
        SCHEMA, charged="exact", solver=HIGHS, quick_time_limit=0.0, hard_time_limit=0.0, retighten_seconds=0.0
    )
    bx, ws = [], []
    for b, w in wl:
        adm = eng.admit(b, w)
        eng.commit(adm)
        bx.append(b)
        ws.append(w)
        assert_sound(adm.bounds.overlap, bx, ws)
        assert_sound(eng.bounds().overlap, bx, ws)
    eng.quick_time_limit, eng.solver = 2.0, PortfolioConfig()  # time, and the whole portfolio (the tensor)
    assert eng.retighten(30.0)
    ov = eng.overlap()
    assert_sound(ov, bx, ws)
    assert ov.exact
    assert ov.lower == pytest.approx(max_overlap(bx, ws, SCHEMA).lower, abs=1e-12)


def test_pending_terms_drop_and_budget_buys_time() -> None:
    """Three pairwise overlapping boxes with no common row (Smith et al. 2022, Prop. 4) admitted without time for
    a search: γ = 1.0 kept as the interval [1.0, 1.5] (one pending term).  A heavier disjoint box raises the
    witness past the term, which drops out (exact again without re-solving).  With a budget inside the interval
    (near the budget), the same admission searches for the whole time limit and is exact."""
    c3, c4, i = SCHEMA["c3"], SCHEMA["c4"], SCHEMA["i"]
    tri = [
        Box({"c3": CategorySet.of_indices(c3, [0, 1]), "i": IntervalSet.of(i, [Interval(0, 3)])}),
        Box({"c3": CategorySet.of_indices(c3, [1, 2]), "c4": CategorySet.of_indices(c4, [1, 2])}),
        Box({"c3": CategorySet.of_indices(c3, [0, 2]), "c4": CategorySet.of_indices(c4, [0, 1])}),
    ]
    cfg = dict(solver=HIGHS, quick_time_limit=0.0, hard_time_limit=0.0, retighten_seconds=0.0, charge_rel_slack=0.0)
    eng = OverlapEngine(SCHEMA, charged="exact", **cfg)
    for b in tri:
        eng.add(b, 0.5)
    ov = eng.overlap()
    assert not ov.exact and ov.lower == 1.0 and ov.upper >= 1.5
    far = Box({"i": IntervalSet.of(i, [Interval(5, 6)]), "c4": CategorySet.of_indices(c4, [3])})
    eng.add(far, 2.0)
    ov = eng.overlap()
    assert ov.exact and ov.lower == 2.0
    assert_sound(ov, [*tri, far], [0.5, 0.5, 0.5, 2.0])
    near = OverlapEngine(SCHEMA, charged="exact", **cfg)
    near.add(tri[0], 0.5)
    near.add(tri[1], 0.5)
    assert not near.admit(tri[2], 0.5, budget=2.0).bounds.overlap.exact  # far from the budget: the interval
    adm = near.admit(tri[2], 0.5, budget=1.2)  # 1.0 ≤ 1.2 < 1.5: near the budget, the whole time limit
    assert adm.bounds.overlap.exact and adm.bounds.overlap.lower == 1.0


@given(dense_workloads, st.floats(-0.5, 1.5))
@FAST
def test_highs_with_a_floor(wl, frac) -> None:
    """HiGHS under an admission's floor: either exact above the floor or a proven upper bound; never below the
    truth."""
    from dpmagic.overlap.maxoverlap import solve_overlap

    bx, ws = [b for b, _ in wl], [w for _, w in wl]
    truth = brute_max(SCHEMA, bx, ws)
    floor = frac * truth
    store = BoxStore(SCHEMA)
    store.extend(bx, np.asarray(ws))
    r = solve_overlap(store, floor=floor, config=HIGHS)
    assert r.lower <= truth + 1e-12 and truth <= r.upper
    assert row_load(bx, ws, r.witness) == pytest.approx(r.lower, abs=1e-12)
    if r.exact:
        assert r.lower == pytest.approx(truth, abs=1e-12)
    if truth > floor + 1e-9:
        assert r.exact  # above the floor HiGHS finds and proves the maximum
    else:
        assert r.upper <= max(floor, truth) + 1e-6
