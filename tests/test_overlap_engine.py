"""Property and known-case tests of dpmagic.overlap (brute force over small declared domains)."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from overlap_support import (
    FAST,
    SCHEMA,
    boxes,
    brute_clique,
    brute_max,
    row_load,
    workloads,
)

from dpmagic.domain.schema import CategoricalColumn, NumericColumn, Schema
from dpmagic.domain.sets import Box, CategorySet, Interval, IntervalSet
from dpmagic.overlap import (
    Instance,
    OverlapEngine,
    PortfolioConfig,
    max_overlap,
    max_weight_clique,
    overlap_adjacency,
    plan,
    weighted_coloring_bound,
)


def check_bounds(eng: OverlapEngine, bx, ws, truth):
    b = eng.bounds()
    ov = b.overlap
    assert ov.lower <= truth + 1e-12 and truth <= ov.upper + 1e-12
    assert ov.exact and ov.lower == truth == ov.upper
    assert ov.upper <= b.clique + 1e-12 <= b.chromatic + 2e-12 <= b.sequential + 3e-12
    assert b.clique_exact
    if bx:
        assert math.isclose(b.clique, brute_clique(bx, ws))
    if ov.witness is not None:
        assert math.isclose(row_load(bx, ws, ov.witness), ov.lower)
        assert set(ov.members) == {
            i for i, (x, w) in enumerate(zip(bx, ws)) if not x.is_empty() and x.contains_row(ov.witness)
        }
    for kind in ("exact", "clique", "chromatic", "sequential"):
        v, _ = b.charge(kind)
        assert v >= truth - 1e-12
    # the colouring is proper and its value is right
    colors = eng.coloring()
    for i, j in itertools.combinations(range(len(bx)), 2):
        if bx[i].overlaps(bx[j]):
            assert colors[i] != colors[j]
    return b


@FAST
@given(workloads)
def test_incremental_equals_brute_force(wl):
    bx = [b for b, _ in wl]
    ws = [w for _, w in wl]
    truth = brute_max(SCHEMA, bx, ws)
    eng = OverlapEngine(SCHEMA)
    for b, w in wl:
        eng.add(b, w)
    b1 = check_bounds(eng, bx, ws, truth)
    eng2 = OverlapEngine.from_boxes(SCHEMA, bx, ws)
    b2 = check_bounds(eng2, bx, ws, truth)
    assert b1.overlap.lower == b2.overlap.lower and b1.clique == b2.clique
    r = max_overlap(bx, ws, SCHEMA)
    assert r.exact and r.lower == truth


@FAST
@given(workloads, boxes())
def test_max_load_over_and_preview(wl, region):
    bx = [b for b, _ in wl]
    ws = [w for _, w in wl]
    eng = OverlapEngine.from_boxes(SCHEMA, bx, ws)
    before = eng.bounds()
    r = eng.max_load_over(region)
    truth = 0.0 if region.is_empty() else brute_max(SCHEMA, bx, ws, region)
    assert r.exact and r.lower == truth == r.upper
    if r.witness is not None and not region.is_empty():
        assert region.contains_row(r.witness)
        assert row_load(bx, ws, r.witness) == r.lower
    p = eng.preview(region, 1.0)
    assert len(eng) == len(bx)
    assert eng.bounds() == before
    truth2 = brute_max(SCHEMA, bx + [region], ws + [1.0])
    assert p.overlap.lower == truth2 == p.overlap.upper
    eng.add(region, 1.0)
    after = eng.bounds()
    assert after.overlap.lower == p.overlap.lower
    assert after.clique == p.clique and after.sequential == p.sequential


@FAST
@given(st.lists(st.tuples(boxes(), st.floats(0.01, 10.0)), min_size=1, max_size=8))
def test_float_weights_never_under_report(wl):
    bx = [b for b, _ in wl]
    ws = [w for _, w in wl]
    truth = brute_max(SCHEMA, bx, ws)
    eng = OverlapEngine(SCHEMA)
    for b, w in wl:
        eng.add(b, w)
    b = eng.bounds()
    assert b.overlap.upper >= truth
    assert math.isclose(b.overlap.lower, truth, rel_tol=1e-12, abs_tol=1e-12)
    assert b.overlap.upper <= b.clique <= b.chromatic <= b.sequential


# ------------------------------------------------------------------------------------------------------
# known cases (Smith et al. 2022)
# ------------------------------------------------------------------------------------------------------
PN = Schema(
    {"Postcode": CategoricalColumn("Postcode", ("A", "B", "C")), "Native": CategoricalColumn("Native", ("Y", "N"))}
)


def pn(p=None, n=None):
    d = {}
    if p:
        d["Postcode"] = CategorySet.of_values(PN["Postcode"], list(p))
    if n:
        d["Native"] = CategorySet.of_values(PN["Native"], [n])
    return Box(d)


def test_example_2():
    r = max_overlap([pn("A", "Y"), pn("AB"), pn("B", "N")], schema=PN)
    assert r.exact and r.lower == 2.0


def test_example_3():
    q = [pn("A", "Y"), pn("AB"), pn("AC", "N"), pn(None, "Y"), pn("C"), pn("B", "N")]
    eng = OverlapEngine(PN)
    for b in q:
        eng.add(b, 1.0)
    b = eng.bounds()
    assert b.overlap.exact and b.overlap.upper == 3.0
    assert PN["Postcode"].index_of(b.overlap.witness["Postcode"]) is not None
    assert eng.load_at(b.overlap.witness) == 3.0


def test_prop4_counterexample():
    X = Schema({"X": CategoricalColumn("X", ("a", "b", "c"))})
    bx = [Box({"X": CategorySet.of_values(X["X"], s)}) for s in (["a", "b"], ["b", "c"], ["a", "c"])]
    eng = OverlapEngine.from_boxes(X, bx)
    b = eng.bounds()
    assert b.clique == 3.0 and b.clique_exact
    assert b.overlap.upper == 2.0 and b.overlap.exact
    assert b.charge("exact") == (2.0, "exact")
    assert b.charge("clique")[0] == 3.0


def test_helly_intervals():
    sch = Schema({"x": NumericColumn("x", "float", 0, 10), "y": NumericColumn("y", "int", 0, 10)})
    rng = np.random.default_rng(1)
    bx = []
    for _ in range(30):
        a, b = sorted(rng.uniform(0, 10, 2))
        c, d = sorted(rng.integers(0, 11, 2))
        bx.append(
            Box(
                {
                    "x": IntervalSet.of(sch["x"], [Interval(a, b, bool(rng.integers(2)), bool(rng.integers(2)))]),
                    "y": IntervalSet.of(sch["y"], [Interval(float(c), float(d))]),
                }
            )
        )
    eng = OverlapEngine.from_boxes(sch, bx)
    b = eng.bounds()
    A = overlap_adjacency(bx, sch)
    cr = max_weight_clique(A, np.ones(len(bx)))
    assert cr.exact and b.overlap.exact and b.overlap.upper == cr.lower == b.clique


def test_histogram_cells():
    X = Schema({"X": CategoricalColumn("X", tuple("abcdefg")), "y": NumericColumn("y", "int", 0, 100)})
    bx = [Box({"X": CategorySet.of_values(X["X"], [v])}) for v in "abcdefg"]
    eng = OverlapEngine(X)
    for b in bx:
        eng.add(b, 0.1)
    b = eng.bounds()
    assert b.overlap.upper == pytest.approx(0.1) and b.chromatic == pytest.approx(0.1)
    assert b.sequential == pytest.approx(0.7)


def test_empty_and_whole_domain():
    eng = OverlapEngine(SCHEMA)
    assert eng.bounds().overlap.upper == 0.0
    empty = Box({"c3": CategorySet(SCHEMA["c3"], 0)})
    eng.add(empty, 5.0)
    b = eng.bounds()
    assert b.overlap.upper == 0.0 and b.sequential == 5.0
    eng.add(Box({}), 1.0)
    eng.add(Box({}), 2.0)
    b = eng.bounds()
    assert b.overlap.upper == 3.0 and b.clique == 3.0
    assert eng.coloring()[0] == -1
    assert list(eng.neighbors(Box({}))) == [1, 2]


def test_float_open_closed_ends():
    sch = Schema({"f": NumericColumn("f", "float", 0, 10)})
    F = sch["f"]
    a = Box({"f": IntervalSet.of(F, [Interval(0, 5, True, False)])})  # [0, 5)
    b = Box({"f": IntervalSet.of(F, [Interval(5, 10, True, True)])})  # [5, 10]
    c = Box({"f": IntervalSet.of(F, [Interval(5, 5, True, True)])})  # {5}
    d = Box({"f": IntervalSet.of(F, [Interval(4.5, 5, False, False)])})  # (4.5, 5)
    r = max_overlap([a, b], schema=sch)
    assert r.lower == 1.0
    r = max_overlap([a, d, b, c], schema=sch)
    assert r.lower == 2.0 and r.exact
    assert max_overlap([b, c], schema=sch).witness == {"f": 5.0}
    assert max_overlap([a, d], schema=sch).witness["f"] > 4.5


def test_int_column_unions():
    sch = Schema({"i": NumericColumn("i", "int", 0, 100)})
    col = sch["i"]
    bx = [Box({"i": IntervalSet.of(col, [Interval(k, k + 1), Interval(k + 50, k + 51)])}) for k in range(0, 40, 3)]
    bx.append(Box({"i": IntervalSet.of(col, [Interval(1, 1)]).complement()}))
    truth = brute_max(sch, bx, [1.0] * len(bx))
    assert max_overlap(bx, schema=sch).lower == truth


def test_coloring_bound_function():
    import networkx as nx

    G = nx.cycle_graph(5)
    v, colors = weighted_coloring_bound(G, np.ones(5))
    assert v == 3.0
    assert all(colors[a] != colors[b] for a, b in G.edges)
    cr = max_weight_clique(G, np.ones(5))
    assert cr.exact and cr.lower == 2.0


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 9).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=30),
            st.lists(st.sampled_from([1.0, 2.0, 3.0, 0.5]), min_size=n, max_size=n),
            st.integers(0, 2**n - 1),
            st.sampled_from([-math.inf, 0.0, 1.0, 2.5, 4.0]),
        )
    )
)
def test_colour_bound_brute_force(case):
    """The weighted colouring bound: bounds[i] ≥ every clique among order[:i+1]; ``skip`` only drops the
    classes whose bound is ≤ skip."""
    from dpmagic.overlap.clique import colour_bound

    n, edges, w, P, skip = case
    w = sorted(w, reverse=True)  # callers number the vertices heaviest first
    adj = [0] * n
    for a, b in edges:
        if a != b:
            adj[a] |= 1 << b
            adj[b] |= 1 << a
    order, bounds = colour_bound(P, adj, w)
    assert sorted(order) == [v for v in range(n) if P >> v & 1]
    assert bounds == sorted(bounds)
    for i in range(len(order)):
        prefix = order[: i + 1]
        heaviest = max(
            sum(w[v] for v in sub)
            for r in range(1, len(prefix) + 1)
            for sub in itertools.combinations(prefix, r)
            if all(adj[a] >> b & 1 for a, b in itertools.combinations(sub, 2))
        )
        assert heaviest <= bounds[i]
    o2, b2 = colour_bound(P, adj, w, skip)
    keep = [i for i, b in enumerate(bounds) if b > skip]
    assert o2 == [order[i] for i in keep] and b2 == [bounds[i] for i in keep]


def _uniform(rng, t, m=10, kmax=4):
    cols = {f"a{j}": CategoricalColumn(f"a{j}", tuple(range(int(rng.integers(2, kmax + 1))))) for j in range(m)}
    sch = Schema(cols)
    bx = []
    for _ in range(t):
        cons = {}
        for name in rng.choice(list(cols), int(rng.integers(1, m + 1)), replace=False):
            col = cols[name]
            vals = rng.choice(col.size, int(rng.integers(1, col.size + 1)), replace=False)
            cons[name] = CategorySet.of_indices(col, vals)
        bx.append(Box(cons))
    return sch, bx


def test_uniform_small_matches_brute_force():
    rng = np.random.default_rng(7)
    for _ in range(5):
        sch, bx = _uniform(rng, 25, m=5, kmax=3)
        ws = [float(x) for x in rng.integers(1, 4, len(bx))]
        truth = brute_max(sch, bx, ws)
        r = max_overlap(bx, ws, sch)
        assert r.exact and r.lower == truth
        r2 = max_overlap(bx, ws, sch, method="milp")
        assert r2.lower == truth


def test_branch_and_bound_path():
    cfg = PortfolioConfig.for_method("bb", tensor_cells=8)  # the column search, tensor leaves of ≤ 8 cells
    rng = np.random.default_rng(3)
    for _ in range(4):
        sch, bx = _uniform(rng, 30, m=5, kmax=3)
        ws = [float(x) for x in rng.integers(1, 4, len(bx))]
        truth = brute_max(sch, bx, ws)
        r = max_overlap(bx, ws, sch, config=cfg)
        assert r.exact and r.lower == truth and "branch" in r.method


def _instance(sch, bx):
    from dpmagic.overlap.encoding import BoxStore, build_problem

    store = BoxStore(sch)
    store.extend(bx, np.ones(len(bx)))
    ids = np.arange(len(bx))
    return Instance.of(store, build_problem(store, ids), ids)


def _names(steps):
    return [(s.name, cap is not None) for s, cap in steps]


def test_plan_orders_steps_by_instance():
    """The plan is data: cheap tensor alone; a graph probe (capped) before the tensor when the graph is cheap;
    non-Helly instances whose integer program is small go to HiGHS right after the probe, Helly ones last."""
    rng = np.random.default_rng(4)
    sch, bx = _uniform(rng, 20, m=3, kmax=3)
    inst = _instance(sch, bx)
    for method in ("auto", "bb", "graph"):
        assert _names(plan(inst, PortfolioConfig.for_method(method))) == [("tensor", False)]
    probe = PortfolioConfig(
        graph_seconds_per_word=0.0, probe_min_seconds=0.0, tensor_seconds_per_entry=1.0, scoped_max_columns=0
    )
    # (the scoped search, when allowed, runs first on this small instance: tests/test_overlap_scoped.py)
    assert _names(plan(inst, replace(probe, scoped_max_columns=16)))[0] == ("scoped", False)
    # (HiGHS after the tensor only runs when the tensor step was skipped for lack of time)
    assert _names(plan(inst, probe))[:2] == [("graph", True), ("tensor", False)]
    assert not inst.helly  # category sets of several values
    no_tensor = replace(probe, tensor_cells=1, milp_early_nnz=1e9)
    assert _names(plan(inst, no_tensor))[:2] == [("graph", True), ("milp", False)]
    late = replace(no_tensor, milp_early_nnz=0, milp_dense_vars=0)
    assert _names(plan(inst, late))[-2:] == [("milp", False), ("lp", False)]
    # interval-only boxes (Helly): HiGHS stays last
    col = NumericColumn("x", "int", 0, 99)
    hsch = Schema({"x": col, "y": NumericColumn("y", "int", 0, 99)})
    hb = [
        Box(
            {
                "x": IntervalSet.of(col, [Interval(int(a), int(a) + 20)]),
                "y": IntervalSet.of(hsch["y"], [Interval(int(b), int(b) + 9)]),
            }
        )
        for a, b in rng.integers(0, 80, (30, 2))
    ]
    hinst = _instance(hsch, hb)
    assert hinst.helly
    names = [n for n, _ in _names(plan(hinst, no_tensor))]
    assert names.index("milp") > max(names.index("columns"), names.index("graph"))


def test_milp_early_plans_match_brute_force():
    """The plan that sends non-Helly instances to HiGHS first is exact (brute force), its witness load = lower."""
    cfg = PortfolioConfig(tensor_cells=1, milp_early_nnz=1e9, scoped_max_columns=0)
    rng = np.random.default_rng(17)
    for _ in range(6):
        sch, bx = _uniform(rng, int(rng.integers(8, 30)), m=int(rng.integers(2, 5)), kmax=4)
        ws = [float(x) for x in rng.integers(1, 5, len(bx))]
        assert [s.name for s, _ in plan(_instance(sch, bx), cfg)][0] in ("graph", "milp")
        truth = brute_max(sch, bx, ws)
        r = max_overlap(bx, ws, sch, time_limit=30.0, config=cfg)
        assert r.lower <= truth <= r.upper
        assert r.exact and r.lower == truth and row_load(bx, ws, r.witness) == r.lower


@pytest.mark.parametrize("probe_wins", [True, False])
def test_graph_probe_before_tensor_or_columns(probe_wins):
    """Plans that start with a graph-search probe are exact (brute force on small domains); a generous probe
    (the estimated tensor time is huge) finishes on its own."""
    base = PortfolioConfig(
        steps=frozenset({"tensor", "graph", "columns"}),
        graph_seconds_per_word=0.0,
        probe_min_seconds=0.0,
        tensor_seconds_per_entry=1.0 if probe_wins else 1e-300,
    )
    rng = np.random.default_rng(31)
    for k in range(8):
        cfg = replace(base, tensor_cells=1) if k % 2 else base  # odd k: the column search follows the probe
        sch, bx = _uniform(rng, int(rng.integers(8, 30)), m=int(rng.integers(2, 6)), kmax=4)
        ws = [float(x) for x in rng.integers(1, 5, len(bx))]
        truth = brute_max(sch, bx, ws)
        r = max_overlap(bx, ws, sch, time_limit=30.0, config=cfg)
        assert r.exact and r.lower == truth == r.upper
        assert row_load(bx, ws, r.witness) == r.lower
        if probe_wins:
            assert r.method == "graph-probe"


def test_time_limit_not_exact_but_safe():
    from tests_support import uniform_boxes

    sch, bx = uniform_boxes(100, m=10, kmin=5, kmax=10, seed=110)
    truth = max_overlap(bx, None, sch, time_limit=60, method="milp")
    assert truth.exact
    for method in ("auto", "bb"):
        # 2 ms: with 0.9 of 10 ms the graph search now solves this instance (session 10, issue 28)
        r = max_overlap(bx, None, sch, time_limit=0.002, method=method)
        assert not r.exact
        assert r.lower <= truth.lower <= r.upper
    A = overlap_adjacency(bx, sch)
    cr = max_weight_clique(A, np.ones(len(bx)), time_limit=0.0)
    assert not cr.exact and cr.upper >= truth.lower
    eng = OverlapEngine.from_boxes(sch, bx, time_limit=0.002)
    b = eng.bounds()
    assert not b.overlap.exact and b.overlap.upper >= truth.lower
    assert b.overlap.upper <= b.clique <= b.chromatic <= b.sequential
    v, label = b.charge("clique")
    assert v >= truth.lower and (b.clique_exact or "not exact" in label)


def test_wide_categorical_column():
    sch = Schema({"k": CategoricalColumn("k", tuple(range(100))), "b": CategoricalColumn("b", ("x", "y"))})
    rng = np.random.default_rng(5)
    bx = []
    for _ in range(30):
        cons = {"k": CategorySet.of_indices(sch["k"], rng.choice(100, int(rng.integers(1, 60)), replace=False))}
        if rng.integers(2):
            cons["b"] = CategorySet.of_indices(sch["b"], [int(rng.integers(2))])
        bx.append(Box(cons))
    ws = [float(x) for x in rng.integers(1, 5, len(bx))]
    truth = brute_max(sch, bx, ws)
    eng = OverlapEngine(sch)
    for b, w in zip(bx, ws):
        eng.add(b, w)
    b = eng.bounds()
    assert b.overlap.exact and b.overlap.lower == truth
    assert OverlapEngine.from_boxes(sch, bx, ws).bounds().overlap.lower == truth
    A = overlap_adjacency(bx, sch).toarray()
    for i in range(len(bx)):
        for j in range(len(bx)):
            assert A[i, j] == (i != j and bx[i].overlaps(bx[j]))


def test_inexact_clique_stays_safe_incrementally():
    from tests_support import uniform_boxes

    sch, bx = uniform_boxes(120, m=6, kmin=3, kmax=5, seed=4)
    eng = OverlapEngine(sch, time_limit=10.0, clique_time_limit=0.0)
    eng.extend(bx[:100], np.ones(100))
    b = eng.bounds()
    for x in bx[100:]:
        p = eng.preview(x, 1.0)
        eng.add(x, 1.0)
        b = eng.bounds()
        assert b.clique == p.clique and b.overlap.lower == p.overlap.lower
    truth = max_overlap(bx, None, sch).lower
    assert b.overlap.exact and b.overlap.lower == truth
    A = overlap_adjacency(bx, sch)
    omega = max_weight_clique(A, np.ones(len(bx)), time_limit=60)
    if not b.clique_exact:
        assert b.clique >= omega.lower
    assert b.overlap.upper <= b.clique <= b.chromatic <= b.sequential


# ------------------------------------------------------------------------------------------------------
# graph search with the running intersection (gsearch.py) and the portfolio
# ------------------------------------------------------------------------------------------------------


def _graph_exact(bx, ws, sch, **kw):
    return max_overlap(bx, ws, sch, time_limit=kw.pop("time_limit", 30.0), method="graph", **kw)


def test_graph_search_matches_brute_force_small_domains():
    cfg = PortfolioConfig(tensor_cells=1, scoped_max_columns=0)  # force the searches even on tiny domains
    rng = np.random.default_rng(11)
    for _ in range(8):
        sch, bx = _uniform(rng, int(rng.integers(5, 30)), m=int(rng.integers(2, 6)), kmax=4)
        ws = [float(x) for x in rng.integers(1, 5, len(bx))]
        truth = brute_max(sch, bx, ws)
        for method in ("graph", "bb", "auto"):
            r = max_overlap(bx, ws, sch, time_limit=30.0, method=method, config=cfg)
            assert r.exact and r.lower == truth == r.upper, method
            assert row_load(bx, ws, r.witness) == r.lower
        assert "graph" in max_overlap(bx, ws, sch, method="graph", config=cfg).method


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads, st.sampled_from(["graph", "bb", "auto"]))
def test_searches_hypothesis(wl, method):
    # mixed categorical / int / float columns, unions and complements, dyadic weights
    bx = [b for b, _ in wl]
    ws = [w for _, w in wl]
    truth = brute_max(SCHEMA, bx, ws)
    r = max_overlap(
        bx, ws, SCHEMA, time_limit=30.0, method=method, config=PortfolioConfig(tensor_cells=1, scoped_max_columns=0)
    )
    assert r.exact and r.lower == truth == r.upper
    assert row_load(bx, ws, r.witness) == r.lower


def _sparse_many_columns(rng, t, m, kmax, p_col=0.5):
    """Each query constrains about ``p_col`` of the m columns (random value subsets): a sparse query graph."""
    cols = {f"c{j}": CategoricalColumn(f"c{j}", tuple(range(int(rng.integers(2, kmax + 1))))) for j in range(m)}
    sch = Schema(cols)
    bx = []
    for _ in range(t):
        cons = {}
        for name in cols:
            if rng.random() < p_col:
                col = cols[name]
                vals = rng.choice(col.size, int(rng.integers(1, col.size + 1)), replace=False)
                cons[name] = CategorySet.of_indices(col, vals)
        bx.append(Box(cons))
    return sch, bx


def test_graph_search_sparse_many_columns_agrees_with_milp():
    rng = np.random.default_rng(23)
    for t, m in ((40, 30), (60, 60), (30, 120)):
        sch, bx = _sparse_many_columns(rng, t, m, kmax=5)
        ws = [float(x) for x in rng.integers(1, 4, len(bx))]
        ref = max_overlap(bx, ws, sch, time_limit=60.0, method="milp")
        assert ref.exact
        r = _graph_exact(bx, ws, sch)
        assert r.exact and r.lower == ref.lower
        assert row_load(bx, ws, r.witness) == r.lower
        a = max_overlap(bx, ws, sch, time_limit=30.0)
        assert a.exact and a.lower == ref.lower and "graph" in a.method


def test_graph_search_brute_force_sparse_tiny_domain():
    # many binary columns: the domain is 2^12 rows, small enough to enumerate
    rng = np.random.default_rng(5)
    for _ in range(4):
        sch, bx = _sparse_many_columns(rng, 35, 12, kmax=2, p_col=0.3)
        ws = [float(x) for x in rng.integers(1, 4, len(bx))]
        truth = brute_max(sch, bx, ws)
        r = _graph_exact(bx, ws, sch)
        assert r.exact and r.lower == truth


def test_graph_search_timeout_is_safe_and_respects_the_budget():
    from tests_support import uniform_boxes

    from dpmagic.overlap.encoding import BoxStore, build_problem
    from dpmagic.overlap.gsearch import graph_search

    sch, bx = uniform_boxes(300, m=10, kmin=3, kmax=6, seed=4)
    truth = max_overlap(bx, None, sch, time_limit=120, method="milp")
    store = BoxStore(sch)
    store.extend(bx, np.ones(len(bx)))
    prob = build_problem(store, np.arange(len(bx)))
    import time

    for limit in (0.0, 0.05):
        r = graph_search(prob, time.perf_counter() + limit)
        if truth.exact:
            assert r.best <= truth.lower <= r.upper
        assert r.exact or r.upper >= r.best
    for method in ("auto", "graph", "bb"):
        r = max_overlap(bx, None, sch, time_limit=0.3, method=method)  # its wall time: bench_time_limits.py
        if truth.exact:
            assert r.lower <= truth.lower <= r.upper


def test_engine_region_and_incremental_use_graph_search():
    cfg = PortfolioConfig(tensor_cells=1, column_first_log10=-1.0, scoped_max_columns=0)  # graph search first
    rng = np.random.default_rng(2)
    sch, bx = _uniform(rng, 25, m=4, kmax=3)
    ws = [float(x) for x in rng.integers(1, 4, len(bx))]
    eng = OverlapEngine(sch, time_limit=30.0, solver=cfg)
    for i, (b, w) in enumerate(zip(bx, ws)):
        eng.add(b, w)
        g = eng.overlap()
        assert g.exact and g.lower == brute_max(sch, bx[: i + 1], ws[: i + 1])
    region = bx[0]
    r = eng.max_load_over(region)
    assert r.exact and r.lower == brute_max(sch, bx, ws, region=region)


@pytest.mark.parametrize("k", [63, 64, 65])
def test_category_bit_masks_at_the_word_boundary(k):
    """Columns of 63/64/65 values: the engine's uint64 masks (k ≤ 64) and byte masks (k > 64) give the
    brute-force γ (incrementally and from scratch) and the pairwise overlap test of Box.overlaps."""
    rng = np.random.default_rng(k)
    col, col2 = CategoricalColumn("c", tuple(range(k))), CategoricalColumn("d", (0, 1, 2))
    sch = Schema({"c": col, "d": col2})
    for _ in range(10):
        bx = [
            Box(
                {
                    "c": CategorySet.of_indices(col, rng.choice(k, int(rng.integers(1, k + 1)), replace=False)),
                    "d": CategorySet.of_indices(col2, rng.choice(3, int(rng.integers(1, 4)), replace=False)),
                }
            )
            for _ in range(12)
        ]
        ws = [float(x) for x in rng.integers(1, 4, len(bx))]
        truth = brute_max(sch, bx, ws)
        eng = OverlapEngine(sch)
        for b, w in zip(bx, ws):
            eng.add(b, w)
        g = eng.overlap()
        assert g.exact and g.lower == truth and max_overlap(bx, ws, sch).lower == truth
        A = overlap_adjacency(eng._store, ids=np.arange(len(bx)))
        A = A.toarray() if hasattr(A, "toarray") else np.asarray(A)
        for i, j in itertools.combinations(range(len(bx)), 2):
            assert bool(A[i, j]) == bx[i].overlaps(bx[j])


def test_tensor_step_runs_even_when_the_probe_used_up_the_time():
    """A plan of probe + tensor stays exact under a tiny time limit: the bounded tensor always runs (as it
    does when it is the whole plan), so a tight limit never turns an exact instance into Σw."""
    from tests_support import uniform_boxes

    sch, bx = uniform_boxes(800, m=10, kmin=2, kmax=5, seed=3)
    ref = max_overlap(bx, None, sch, method="bb")
    assert ref.exact
    for limit in (1e-4, 2e-3):
        r = max_overlap(bx, None, sch, time_limit=limit)
        assert r.exact and r.lower == r.upper == ref.lower and "tensor" in r.method
