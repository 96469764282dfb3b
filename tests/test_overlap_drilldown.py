"""Drill-down regions (issue 28, held-out family 2): the plan that runs HiGHS right after a graph probe on
many live queries over few non-Helly columns, and HiGHS's presolve on small models, against brute force (helpers
of ``test_overlap_engine``).

Every path is checked for: γ ≤ reported upper, lower ≤ γ, the witness's load = lower, exact only when the two
are equal (and then equal to brute force), and incremental admissions equal to a from-scratch solve.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import scipy.optimize
from hypothesis import given
from hypothesis import strategies as st
from overlap_support import FAST, SCHEMA, admit_each, boxes, brute_max, row_load

from dpmagic.domain.schema import CategoricalColumn, Schema
from dpmagic.domain.sets import Box, CategorySet
from dpmagic.overlap import OverlapEngine, PortfolioConfig, max_overlap, plan
from dpmagic.overlap.encoding import BoxStore, build_problem
from dpmagic.overlap.milp import PRESOLVE_SECONDS_PER_NNZ, milp_overlap
from dpmagic.overlap.portfolio import Instance
from dpmagic.overlap.rounding import is_exact

decimal_weights = st.sampled_from([0.01, 0.037, 0.05, 0.1, 0.083, 0.3, 0.07, 0.011])
any_weights = st.one_of(decimal_weights, st.floats(0.01, 3.0))
workloads = st.lists(st.tuples(boxes(), any_weights), min_size=1, max_size=8)
#: the drill-down plan on every instance without a tensor (no scoped search, any live set, any scope)
DRILL = PortfolioConfig(
    tensor_cells=1,
    scoped_max_columns=0,
    milp_first_min_n=1,
    milp_first_scope=99.0,
    milp_first_probe=0.0,
    column_first_log10=-1.0,
)


def _check(r: Any, bx: list[Box], ws: list[float], truth: float) -> None:
    assert r.lower <= truth + 1e-12 and truth <= r.upper + 1e-12
    assert r.exact == is_exact(r.lower, r.upper)
    if r.exact:
        assert r.lower == pytest.approx(truth, abs=1e-12)
    if r.witness is not None and bx:
        assert row_load(bx, ws, r.witness) == pytest.approx(r.lower, abs=1e-12)


@given(workloads)
@FAST
def test_drilldown_plan_matches_brute_force(wl) -> None:
    """The probe → HiGHS → searches plan: a proven interval around brute force; exact within a generous limit."""
    bx, ws = [b for b, _ in wl], [w for _, w in wl]
    truth = brute_max(SCHEMA, bx, ws)
    r = max_overlap(bx, ws, SCHEMA, config=DRILL)
    _check(r, bx, ws, truth)
    assert r.exact


@given(workloads, st.sampled_from([0.0, 1e-4, 1e-3, 0.01]))
@FAST
def test_drilldown_plan_timeouts_stay_proven(wl, limit) -> None:
    """Under limits too short for HiGHS (or anything) the interval stays proven and the witness's load is lower."""
    bx, ws = [b for b, _ in wl], [w for _, w in wl]
    truth = brute_max(SCHEMA, bx, ws)
    _check(max_overlap(bx, ws, SCHEMA, time_limit=limit, config=DRILL), bx, ws, truth)


@given(workloads, boxes(), decimal_weights)
@FAST
def test_drilldown_admission_equals_from_scratch(wl, box, w) -> None:
    """Incremental admissions under the drill-down plan (exact charge) = a from-scratch solve = brute force."""
    eng = OverlapEngine(SCHEMA, charged="exact", solver=DRILL)
    for ov, bx, ws in admit_each(eng, [*wl, (box, w)]):
        truth = brute_max(SCHEMA, bx, ws)
        _check(ov, bx, ws, truth)
        scratch = max_overlap(bx, ws, SCHEMA, config=DRILL)
        assert ov.exact and scratch.exact
        assert ov.lower == pytest.approx(scratch.lower, abs=1e-12) == pytest.approx(truth, abs=1e-12)


def _drill_instance(n: int, seed: int = 3) -> Instance:
    """``n`` queries over two 4-value categorical columns, each with a set of two values (non-Helly)."""
    rng = np.random.default_rng(seed)
    col = SCHEMA["c4"]
    bx = [
        Box(
            {
                "c4": CategorySet.of_indices(col, rng.choice(4, size=2, replace=False).tolist()),
                "c3": CategorySet.of_indices(SCHEMA["c3"], rng.choice(3, size=2, replace=False).tolist()),
            }
        )
        for _ in range(n)
    ]
    store = BoxStore(SCHEMA)
    store.extend(bx, np.full(n, 0.05))
    ids = np.arange(n)
    return Instance.of(store, build_problem(store, ids), ids)


def test_drilldown_plan_is_chosen_by_instance() -> None:
    """Many live queries, few columns, non-Helly, neither tensor nor scoped search: probe, the pairwise LP (session
    15), HiGHS, then the searches; fewer live queries than ``milp_first_min_n``, a Helly instance, too many columns or a small atom
    product: not."""
    inst = _drill_instance(40)
    assert not inst.helly
    cfg = PortfolioConfig(tensor_cells=1, scoped_max_columns=0, milp_first_min_n=40, column_first_log10=0.5)
    names = [(s.name, cap is not None) for s, cap in plan(inst, cfg)]
    assert names == [
        ("graph", True),
        ("pairlp", False),
        ("milp", False),
        ("graph", False),
        ("columns", False),
        ("lp", False),
    ]
    assert plan(inst, cfg)[0][1] == cfg.milp_first_probe
    no_pairs = replace(cfg, steps=cfg.steps - {"pairlp"})
    assert [(s.name, cap is not None) for s, cap in plan(inst, no_pairs)] == [n for n in names if n[0] != "pairlp"]
    for other in (
        replace(cfg, milp_first_min_n=41),
        replace(cfg, milp_first_max_columns=1),
        replace(cfg, milp_first_scope=1.5),
        replace(cfg, column_first_log10=7.0),  # a small atom product: the column search with tensor leaves first
        replace(cfg, scoped_max_columns=12),  # the scoped search applies: it keeps running first
    ):
        assert [(s.name, cap is not None) for s, cap in plan(inst, other)][:2] != names[:2]
    store = BoxStore(SCHEMA)
    helly = [Box({"c4": CategorySet.of_indices(SCHEMA["c4"], [k % 4])}) for k in range(40)]
    store.extend(helly, np.full(40, 0.05))
    ids = np.arange(40)
    hinst = Instance.of(store, build_problem(store, ids), ids)
    assert hinst.helly
    assert [s.name for s, _ in plan(hinst, cfg)][:2] != ["graph", "pairlp"]
    assert "pairlp" not in [s.name for s, _ in plan(hinst, cfg)]  # Helly: the step does not apply


def test_highs_presolves_small_models_under_a_short_limit(monkeypatch) -> None:
    """A model of a few thousand non-zeros is presolved even when the time left is below
    ``PRESOLVE_SECONDS_PER_NNZ`` per non-zero (the drill-down regions: only presolved does HiGHS close them within
    an admission's budget); its bound stays proven (brute force over the 3 × 30 × 30 domain)."""
    cols = {f"k{j}": CategoricalColumn(f"k{j}", tuple(range(30))) for j in range(2)}
    cols["s"] = CategoricalColumn("s", ("a", "b", "c"))
    schema = Schema(cols)
    rng = np.random.default_rng(5)
    bx = []
    for _ in range(150):
        cons = {
            f"k{j}": CategorySet.of_indices(cols[f"k{j}"], rng.choice(30, size=12, replace=False).tolist())
            for j in range(2)
        }
        bx.append(Box(cons))
    ws = rng.choice([0.01, 0.05, 0.1, 0.037], size=len(bx)).tolist()
    store = BoxStore(schema)
    store.extend(bx, np.asarray(ws))
    prob = build_problem(store, np.arange(len(bx)))
    seen: list[dict[str, Any]] = []
    orig = scipy.optimize.milp

    def spy(*args: Any, **kw: Any) -> Any:
        seen.append(dict(kw["options"]))
        return orig(*args, **kw)

    monkeypatch.setattr(scipy.optimize, "milp", spy)
    limit = 0.5
    _, atoms, ub = milp_overlap(prob, limit)
    assert len(seen) == 1
    nnz = 150 * 2 * 12  # each query: 12 atoms in each of its two columns
    assert seen[0]["time_limit"] < PRESOLVE_SECONDS_PER_NNZ * nnz  # the old rule would not presolve
    assert seen[0]["presolve"] is True
    truth = brute_max(schema, bx, ws)
    if ub is not None:
        assert truth <= ub + 1e-12
    if atoms is not None:
        row = {c.name: c.values[atoms[c.name]] for c in prob.columns}
        assert row_load(bx, ws, row) <= truth + 1e-12


@given(workloads, st.floats(1.0, 1.5))
@FAST
def test_portfolio_stops_once_nothing_is_above_the_floor(wl, frac) -> None:
    """A floor at or above the maximum: once HiGHS's dual bound proves nothing above it the portfolio stops (the
    searches after it would search again for what is proven); the interval stays proven."""
    from dpmagic.overlap.maxoverlap import solve_overlap

    bx, ws = [b for b, _ in wl], [w for _, w in wl]
    truth = brute_max(SCHEMA, bx, ws)
    floor = frac * truth + 0.01  # above HiGHS's tolerance margin
    store = BoxStore(SCHEMA)
    store.extend(bx, np.asarray(ws))
    r = solve_overlap(store, floor=floor, config=DRILL)
    _check(r, bx, ws, truth)
    parts = r.method.split("+")
    if "milp" in parts:  # (a Helly instance: the other plan; no columns at all: the one-cell tensor; every box empty)
        assert r.upper <= floor
        assert not {"graph-search", "branch-and-bound"} & set(parts[parts.index("milp") :])


@given(workloads, st.floats(0.5, 1.5), st.floats(0.0, 1.0))
@FAST
def test_soft_floor_is_sound(wl, frac, soft_frac) -> None:
    """A soft floor (a degraded admission's γ.lower − w, below its floor γ.upper − w) only moves the pairwise LP's
    stopping target: the interval stays proven around brute force (γ ≤ upper, or nothing above the floor), the
    witness's load is the lower end, exact only when equal; a result at most the soft floor is a proven bound."""
    from dpmagic.overlap.maxoverlap import solve_overlap

    bx, ws = [b for b, _ in wl], [w for _, w in wl]
    truth = brute_max(SCHEMA, bx, ws)
    floor = frac * truth
    soft = floor * soft_frac
    store = BoxStore(SCHEMA)
    store.extend(bx, np.asarray(ws))
    r = solve_overlap(store, floor=floor, soft_floor=soft, config=DRILL)
    assert r.lower <= truth + 1e-12 and truth <= r.upper + 1e-12  # proven either way (the LP relaxes the max)
    if r.exact:
        assert r.lower == pytest.approx(truth, abs=1e-12)
    if r.witness is not None and bx:
        assert row_load(bx, ws, r.witness) == pytest.approx(r.lower, abs=1e-12)
    if truth > floor:
        _check(r, bx, ws, truth)


@given(
    st.integers(1, 7).flatmap(
        lambda a: st.tuples(
            st.lists(st.lists(st.booleans(), min_size=a, max_size=a), min_size=0, max_size=5),
            st.lists(st.sampled_from([0.0, 0.01, 0.05, 0.1]), min_size=a, max_size=a),
        )
    )
)
@FAST
def test_dominated_atoms_are_dropped_soundly(data) -> None:
    """The integer program's atom reduction against brute force: every dropped atom has a kept one in every query
    it is in with at least its coefficient, so for every choice of queries to cover the best kept atom is as good
    as the best atom; of identical atoms exactly the first is kept."""
    from dpmagic.overlap.milp import undominated_atoms

    queries, coef = data
    a = len(coef)
    mem = np.array(queries, dtype=bool).T.reshape(a, len(queries))
    c = np.array(coef)
    kept = undominated_atoms(mem, c)
    assert len(kept) >= 1 and list(kept) == sorted(set(kept.tolist()))
    ks = set(kept.tolist())
    for b in range(a):
        if b not in ks:
            assert any(np.all(mem[x] >= mem[b]) and c[x] >= c[b] for x in kept)
    for x in kept:  # no kept atom is a later copy of another kept one
        assert not any(y < x and np.array_equal(mem[y], mem[x]) and c[y] == c[x] for y in kept)
    w = np.array([0.3, 0.07, 0.011, 0.083, 0.037])[: len(queries)]
    for sel in range(2 ** len(queries)):  # each subset of the queries with weights: the best atom is kept
        on = np.array([(sel >> j) & 1 for j in range(len(queries))], dtype=bool)
        val = c + (mem[:, on] @ w[on] if on.any() else 0.0)
        assert max(val[kept]) == max(val)
