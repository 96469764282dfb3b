"""Red team (session 12b) of the integer program's dominated-atom reduction, its always-on presolve on small
models and the portfolio's floor stop (issue 28): against brute force on the small domain of ``overlap_support``,
with regions and with HiGHS's time limits forced down to its earliest exits."""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest
import scipy.optimize
from hypothesis import given
from hypothesis import strategies as st
from overlap_support import FAST, SCHEMA, admit_each, boxes, brute_max, row_load
from test_overlap_drilldown import DRILL  # the drill-down plan on every instance without a tensor

from dpmagic.domain.schema import CategoricalColumn, Schema
from dpmagic.domain.sets import Box, CategorySet
from dpmagic.overlap import OverlapEngine
from dpmagic.overlap.encoding import BoxStore, build_problem
from dpmagic.overlap.milp import milp_overlap

weights = st.sampled_from([0.01, 0.037, 0.05, 0.1, 0.083, 0.3, 1.0, 2.5])
nonempty = boxes().filter(lambda b: not b.is_empty())


@st.composite
def two_of(draw: Any, name: str) -> CategorySet:
    """A set of two values of a categorical column (non-Helly: the drill-down plan's territory)."""
    col = SCHEMA[name]
    return CategorySet.of_indices(col, draw(st.sets(st.integers(0, col.size - 1), min_size=2, max_size=2)))


@st.composite
def drill_boxes(draw: Any) -> Box:
    b = draw(nonempty)
    cons = dict(b.constraints)
    for name in ("c3", "c4"):
        if draw(st.booleans()):
            cons[name] = draw(two_of(name))
    return Box(cons)


workloads = st.lists(st.tuples(st.one_of(nonempty, drill_boxes()), weights), min_size=1, max_size=8)


def _solve(bx: list, ws: list[float], region: Any, limit: float, dedupe: bool = True) -> tuple[Any, Any, Any, Any]:
    store = BoxStore(SCHEMA)
    store.extend(bx, np.asarray(ws))
    ids = np.arange(len(bx))
    if region is not None:
        ids = ids[store.overlap_mask(region)[ids]]
    prob = build_problem(store, ids, region, dedupe=dedupe)
    val, atoms, ub = milp_overlap(prob, limit)
    return prob, val, atoms, ub


def _row(prob: Any, atoms: dict[str, int]) -> dict[str, Any]:
    row = dict(prob.defaults)
    for c in prob.columns:
        row[c.name] = c.values[atoms[c.name]]
    return row


@given(workloads, st.one_of(st.none(), boxes()), st.booleans())
@FAST
def test_milp_optimum_and_witness_match_brute_force_in_a_region(wl, region, dedupe) -> None:
    """With the dominated atoms dropped: the incumbent's atoms are a point of the region whose load is the
    reported objective, equal to brute force over the region; the dual bound, the LP relaxation's optimum and a
    dual bound under a loose gap are above it."""
    if region is not None and region.is_empty():
        return
    bx, ws = [b for b, _ in wl], [w for _, w in wl]
    truth = brute_max(SCHEMA, bx, ws, region)
    prob, val, atoms, ub = _solve(bx, ws, region, 10.0, dedupe)  # (without merging equal values: duplicate atoms)
    if prob.n == 0:
        return
    assert ub is not None and truth <= ub + 1e-12
    assert atoms is not None and val is not None
    row = _row(prob, atoms)
    if region is not None:
        assert region.contains_row(row)
    assert row_load(bx, ws, row) == pytest.approx(truth, abs=1e-9)
    assert val == pytest.approx(truth, abs=1e-9)
    # the relaxation of the reduced model and a dual bound left far from the incumbent (a 50% gap) bound it too
    _, _, lp = milp_overlap(prob, 10.0, relax=True)
    assert lp is not None and truth <= lp + 1e-12
    _, _, loose = milp_overlap(prob, 10.0, rel_gap=0.5)
    assert loose is not None and truth <= loose + 1e-12


@given(workloads, st.one_of(st.none(), boxes()), st.sampled_from([1e-7, 1e-5, 1e-4, 1e-3, 3e-3]))
@FAST
def test_milp_bound_stays_proven_when_highs_stops_early(wl, region, limit) -> None:
    """HiGHS (presolve on: small models) stopped by a time limit too short for anything: in presolve, before or
    during branch and bound.  Whatever it reports, a returned upper bound is above brute force and a returned
    witness is a point of the region."""
    if region is not None and region.is_empty():
        return
    orig = scipy.optimize.milp

    def short(*args: Any, **kw: Any) -> Any:
        kw["options"] = {**kw["options"], "time_limit": limit}
        return orig(*args, **kw)

    bx, ws = [b for b, _ in wl], [w for _, w in wl]
    truth = brute_max(SCHEMA, bx, ws, region)
    with mock.patch.object(scipy.optimize, "milp", short):
        prob, _, atoms, ub = _solve(bx, ws, region, 10.0)
    if prob.n == 0:  # (the portfolio never solves an empty problem)
        return
    if ub is not None:
        assert truth <= ub + 1e-12
    if atoms is not None:
        row = _row(prob, atoms)
        assert region is None or region.contains_row(row)
        assert row_load(bx, ws, row) <= truth + 1e-12


@given(
    workloads,
    st.sampled_from([1e-6, 1e-4, 1e-3, 0.01, 1.0]),
    st.sampled_from([0.002, 0.02, 0.2]),
    st.sampled_from(["exact", "chromatic"]),
)
@FAST
def test_drilldown_admissions_stay_proven_with_highs_cut_short(wl, highs_limit, limit, charged) -> None:
    """Admissions under the drill-down plan (probe, HiGHS, searches; the floor stop) with HiGHS's own limit cut
    short and the engine's time limit small: after every admission γ's interval contains brute force, its
    witness's load is its lower end, and it is exact only when it is the maximum."""
    orig = scipy.optimize.milp

    def short(*args: Any, **kw: Any) -> Any:
        kw["options"] = {**kw["options"], "time_limit": min(highs_limit, kw["options"]["time_limit"])}
        return orig(*args, **kw)

    eng = OverlapEngine(SCHEMA, charged=charged, solver=DRILL, time_limit=limit)
    with mock.patch.object(scipy.optimize, "milp", short):
        for ov, bx, ws in admit_each(eng, wl):
            truth = brute_max(SCHEMA, bx, ws)
            assert ov.lower <= truth + 1e-12 and truth <= ov.upper + 1e-12
            if ov.exact:
                assert ov.lower == pytest.approx(truth, abs=1e-9)
            if ov.witness is not None:
                assert row_load(bx, ws, ov.witness) >= ov.lower - 1e-12


@given(
    workloads,
    st.sampled_from([0.0, 0.5, 0.9, 1.0, 1.2]),
    st.sampled_from([1e-6, 1e-3, 0.01, 1.0]),
    st.sampled_from([0.005, 0.05, 1.0]),
)
@FAST
def test_floor_stop_with_highs_cut_short(wl, frac, highs_limit, limit) -> None:
    """The drill-down plan under a floor (below, at, above the maximum) with HiGHS cut short: the interval contains
    brute force, the witness's load is its lower end, exact only at the maximum."""
    from dpmagic.overlap.maxoverlap import solve_overlap

    orig = scipy.optimize.milp

    def short(*args: Any, **kw: Any) -> Any:
        kw["options"] = {**kw["options"], "time_limit": min(highs_limit, kw["options"]["time_limit"])}
        return orig(*args, **kw)

    bx, ws = [b for b, _ in wl], [w for _, w in wl]
    truth = brute_max(SCHEMA, bx, ws)
    store = BoxStore(SCHEMA)
    store.extend(bx, np.asarray(ws))
    with mock.patch.object(scipy.optimize, "milp", short):
        r = solve_overlap(store, floor=frac * truth, config=DRILL, time_limit=limit)
    assert r.lower <= truth + 1e-12 and truth <= r.upper + 1e-12
    if r.exact:
        assert r.lower == pytest.approx(truth, abs=1e-9)
    if r.witness is not None:
        assert row_load(bx, ws, r.witness) == pytest.approx(r.lower, abs=1e-12)


def _tensor_truth(bx: list[Box], ws: np.ndarray, cols: dict[str, CategoricalColumn]) -> float:
    """Brute force over a product of categorical columns: the load of every cell."""
    names = list(cols)
    dims = [cols[c].size for c in names]
    load = np.zeros(dims)
    for b, w in zip(bx, ws):
        inside = np.ones(dims, dtype=bool)
        for j, name in enumerate(names):
            s = b.constraints.get(name)
            if s is not None:
                shape = [1] * len(names)
                shape[j] = dims[j]
                inside = inside & np.array([s.contains(v) for v in cols[name].values]).reshape(shape)
        load += w * inside
    return float(load.max())


@pytest.mark.parametrize("seed", range(6))
def test_presolved_dual_bound_under_time_limits_is_above_brute_force(seed) -> None:
    """Models of a few hundred to a few thousand non-zeros (always presolved) stopped by HiGHS's time limit at
    several points (during presolve: no bound; during branch and bound: its dual bound, status 1): every upper
    bound returned is above brute force over the whole product domain."""
    rng = np.random.default_rng(seed)
    k, ncol, n = int(rng.integers(8, 25)), int(rng.integers(2, 4)), int(rng.integers(60, 200))
    cols = {f"k{j}": CategoricalColumn(f"k{j}", tuple(range(k))) for j in range(ncol)}
    bx = []
    for _ in range(n):
        cons = {}
        for j in range(ncol):
            if rng.random() < 0.7:
                idx = rng.choice(k, size=int(rng.integers(1, k)), replace=False).tolist()
                cons[f"k{j}"] = CategorySet.of_indices(cols[f"k{j}"], idx)
        bx.append(Box(cons))
    ws = rng.choice([0.01, 0.05, 0.1, 0.037, 0.3], size=n)
    truth = _tensor_truth(bx, ws, cols)
    store = BoxStore(Schema(cols))
    store.extend(bx, ws)
    prob = build_problem(store, np.arange(n))
    orig = scipy.optimize.milp
    for limit in (1e-6, 0.002, 0.01, 0.03, 0.1):

        def short(*args: Any, _limit: float = limit, **kw: Any) -> Any:
            assert kw["options"]["presolve"] is True
            kw["options"] = {**kw["options"], "time_limit": _limit}
            return orig(*args, **kw)

        with mock.patch.object(scipy.optimize, "milp", short):
            _, atoms, ub = milp_overlap(prob, 10.0)
        if ub is not None:
            assert truth <= ub
        if atoms is not None:
            assert row_load(bx, ws.tolist(), _row(prob, atoms)) <= truth + 1e-12
