"""The accountant's scipy-free paths (issue 11, the CLI's 1 s): numpy CSR graphs, the tensor's difference rows,
the cheap ``IntervalSet.is_full`` — each checked against the scipy / reference computation it replaces."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
from functools import partial

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from overlap_support import SCHEMA, boxes, brute_clique, brute_max, row_load, workloads
from scipy.sparse.csgraph import connected_components

from dpmagic.domain.schema import NumericColumn
from dpmagic.domain.sets import Box, CategorySet, Interval, IntervalSet, _domain
from dpmagic.overlap import OverlapEngine, tensor
from dpmagic.overlap.clique import max_weight_clique
from dpmagic.overlap.encoding import BoxStore, build_problem
from dpmagic.overlap.graph import CSRGraph, adjacency_graph, as_csr, components, overlap_adjacency

SETTINGS = settings(max_examples=120, deadline=None)


@st.composite
def graphs(draw):
    n = draw(st.integers(0, 14))
    pairs = list(itertools.combinations(range(n), 2))
    edges = [p for p in pairs if draw(st.integers(0, 3)) == 0]
    dense = np.zeros((n, n), dtype=bool)
    for u, v in edges:
        dense[u, v] = dense[v, u] = True
    return dense


@SETTINGS
@given(graphs())
def test_csr_graph_matches_scipy(dense):
    g = CSRGraph.from_dense(dense)
    ref = sp.csr_matrix(dense)
    assert np.array_equal(g.to_scipy().toarray(), ref.toarray())
    assert np.array_equal(g.dense(), dense)
    for src in (ref, ref.tocsc(), dense):
        h = as_csr(src)
        assert np.array_equal(h.indptr, g.indptr) and np.array_equal(h.indices, g.indices)
    n = dense.shape[0]
    if n:
        rng = np.random.default_rng(n)
        order = rng.permutation(n)[: max(1, n // 2)]
        order = np.r_[order, order[:1]]  # a repeated vertex is not its own neighbour
        sub = dense[np.ix_(order, order)].copy()
        sub[0, -1] = sub[-1, 0] = False
        assert np.array_equal(g.dense(order), sub)


@SETTINGS
@given(graphs())
def test_components_match_scipy(dense):
    n = dense.shape[0]
    got_csr = components(CSRGraph.from_dense(dense))
    got_dense = components(dense)
    if n == 0:
        assert got_csr == [] and got_dense == []
        return
    k, labels = connected_components(sp.csr_matrix(dense), directed=False)
    want = sorted(sorted(np.flatnonzero(labels == i).tolist()) for i in range(k))
    for got in (got_csr, got_dense):
        assert [c.tolist() for c in got] == want  # numbered by smallest vertex, each sorted


@settings(max_examples=60, deadline=None)
@given(workloads)
def test_adjacency_graph_matches_pairwise_overlap_and_clique(wl):
    bx = [b for b, _ in wl]
    ws = [w for _, w in wl]
    g = adjacency_graph(bx, SCHEMA)
    want = np.array(
        [
            [i != j and not a.is_empty() and not b.is_empty() and a.overlaps(b) for j, b in enumerate(bx)]
            for i, a in enumerate(bx)
        ],
        dtype=bool,
    ).reshape(len(bx), len(bx))
    assert np.array_equal(g.dense(), want)
    assert np.array_equal(overlap_adjacency(bx, SCHEMA).toarray(), want)
    keep = [i for i, b in enumerate(bx) if not b.is_empty()]  # the engine never enters empty boxes
    if keep:
        r = max_weight_clique(CSRGraph.from_dense(g.dense(keep)), [ws[i] for i in keep])
        assert r.exact and r.lower == pytest.approx(brute_clique(bx, ws))


@pytest.mark.parametrize("seed", range(6))
def test_difference_rows_numpy_equals_scipy(seed):
    rng = np.random.default_rng(seed)
    n, a, cells = int(rng.integers(1, 300)), int(rng.integers(1, 60)), int(rng.integers(1, 40))
    rs = rng.integers(0, a, n)
    re = np.minimum(rs + rng.integers(1, 10, n), a)
    qi = np.arange(n)
    r = np.concatenate([rs, re])
    for w in (rng.integers(1, 5, (n, cells)).astype(float), rng.random((n, cells))):
        got = tensor._difference_rows(r, qi, w, a + 1, use_scipy=False)
        want = tensor._difference_rows(r, qi, w, a + 1, use_scipy=True)
        if float(w[0, 0]).is_integer():
            assert np.array_equal(got, want)  # integer sums are exact in any order
        else:
            assert np.allclose(got, want, rtol=0, atol=1e-12 * n)


@settings(max_examples=80, deadline=None)
@given(workloads)
def test_tensor_numpy_path_matches_brute_force(wl):
    wl = [(b, w) for b, w in wl if not b.is_empty()]  # the engine never enters empty boxes
    bx = [b for b, _ in wl]
    ws = [w for _, w in wl]
    store = BoxStore(SCHEMA)
    store.extend(bx, np.array(ws, dtype=float))
    prob = build_problem(store, np.arange(len(bx)))
    orig = tensor._difference_rows
    try:
        tensor._difference_rows = partial(orig, use_scipy=False)  # type: ignore[assignment]
        v_np, _ = tensor.tensor_max(prob)
    finally:
        tensor._difference_rows = orig  # type: ignore[assignment]
    v_sp, _ = tensor.tensor_max(prob)
    assert v_np == pytest.approx(v_sp, abs=1e-12)
    assert v_np == pytest.approx(brute_max(SCHEMA, bx, ws), abs=1e-12)


@settings(max_examples=120, deadline=None)
@given(workloads, st.one_of(st.none(), boxes()), st.booleans())
def test_tensor_split_by_value_matches_brute_force(wl, region, numpy_rows):
    """The tensor evaluated one value of a split column at a time (session 17: each slice from the queries containing
    the value only; forced here on small problems) gives the same maximum as the whole tensor and brute force, and
    its atoms are a row of the region whose load is that maximum; both difference-row paths."""
    from dpmagic.overlap.portfolio import witness_row

    wl = [(b, w) for b, w in wl if not b.is_empty()]
    if region is not None and region.is_empty():
        return
    bx = [b for b, _ in wl]
    ws = [w for _, w in wl]
    store = BoxStore(SCHEMA)
    store.extend(bx, np.array(ws, dtype=float))
    ids = np.arange(len(bx))
    if region is not None:
        ids = ids[store.overlap_mask(region)[ids]] if len(ids) else ids
    prob = build_problem(store, ids, region)
    if prob.n == 0:
        return  # the portfolio never evaluates an empty problem's tensor
    whole, _ = tensor.tensor_max(prob)
    orig_split, orig_rows = tensor.SPLIT_MIN_ENTRIES, tensor._difference_rows
    try:
        tensor.SPLIT_MIN_ENTRIES = -1
        if numpy_rows:
            tensor._difference_rows = partial(orig_rows, use_scipy=False)  # type: ignore[assignment]
        value, atoms = tensor.tensor_max(prob)
    finally:
        tensor.SPLIT_MIN_ENTRIES, tensor._difference_rows = orig_split, orig_rows  # type: ignore[assignment]
    sub = [bx[i] for i in ids.tolist()]
    sw = [ws[i] for i in ids.tolist()]
    assert value == pytest.approx(whole, abs=1e-12)
    assert value == pytest.approx(brute_max(SCHEMA, sub, sw, region), abs=1e-12)
    row = witness_row(store, prob, atoms)
    assert row_load(sub, sw, row) == pytest.approx(value, abs=1e-12)
    if region is not None:
        assert region.contains_row(row)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["int", "float"]),
    st.integers(-5, 5),
    st.integers(0, 6),
    st.lists(st.tuples(st.integers(-8, 12), st.integers(0, 6), st.booleans(), st.booleans()), max_size=3),
)
def test_interval_is_full_equals_reference(kind, lo, width, ivs):
    col = NumericColumn("x", kind, lo, lo + width)
    s = IntervalSet.of(col, [Interval(a, a + d, c1, c2) for a, d, c1, c2 in ivs])
    reference = s == IntervalSet.of(col, [_domain(col)])
    assert s.is_full() == reference
    full = IntervalSet.of(col, [_domain(col)])
    assert full.is_full()


def test_engine_bounds_on_numpy_graphs_match_brute_force():
    """The engine's colouring and clique, computed on the numpy CSR graph, give the brute-force bounds on a dense
    category-set workload (the non-Helly case where the clique search runs)."""
    rng = np.random.default_rng(3)
    bx = []
    for _ in range(9):
        cons = {}
        for c in list(SCHEMA.names)[:2]:
            col = SCHEMA[c]
            idx = rng.choice(col.size, size=int(rng.integers(1, col.size + 1)), replace=False)
            cons[c] = CategorySet.of_indices(col, idx.tolist())
        bx.append(Box(cons))
    ws = rng.choice([1.0, 2.0, 0.5], size=len(bx)).tolist()
    eng = OverlapEngine(SCHEMA)
    eng.extend(bx, ws)
    b = eng.bounds()
    assert b.overlap.exact and b.overlap.lower == pytest.approx(brute_max(SCHEMA, bx, ws))
    assert b.clique == pytest.approx(brute_clique(bx, ws))


def test_cli_overlap_does_not_import_scipy(tmp_path):
    """``dpmagic overlap`` on an interval/point workload runs without importing scipy (its import is ~0.13 s of the
    CLI's 1 s budget); the answer is the brute-force one."""
    schema = {
        "table": "t",
        "columns": {
            "age": {"type": "int", "lower": 0, "upper": 9},
            "sex": {"type": "categorical", "values": ["F", "M"]},
        },
    }
    (tmp_path / "s.json").write_text(json.dumps(schema))
    (tmp_path / "q.sql").write_text(
        "SELECT COUNT(*) FROM t WHERE age <= 4; SELECT COUNT(*) FROM t WHERE age >= 3 AND sex = 'F';\n"
        "SELECT COUNT(*) FROM t WHERE age BETWEEN 2 AND 6; SELECT COUNT(*) FROM t WHERE sex = 'M';"
    )
    code = textwrap.dedent(
        f"""
        import sys, io, contextlib, json
        from dpmagic.presentation.cli import main
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = main(["overlap", "--schema", {str(tmp_path / "s.json")!r}, {str(tmp_path / "q.sql")!r}, "--json"])
        out = json.loads(buf.getvalue())
        print(json.dumps({{"rc": rc, "scipy": sorted(m for m in sys.modules if m.split(".")[0] == "scipy"),
                           "gamma": out["max_overlap"]}}))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    got = json.loads(proc.stdout)
    assert got["rc"] == 0
    assert got["scipy"] == []
    assert got["gamma"]["exact"] and got["gamma"]["value"] == 3.0  # age 3-4, sex F: queries 1, 2, 3


def test_as_csr_reads_a_matrix_as_undirected_and_checks_labels():
    """An edge given in one direction only is an edge (as scipy's ``directed=False`` read it): components and
    cliques see the undirected graph; networkx labels other than 0..n-1 and out-of-range ids are refused."""
    import networkx as nx

    one_way = np.zeros((3, 3), dtype=bool)
    one_way[0, 1] = one_way[2, 1] = True
    assert [c.tolist() for c in components(sp.csr_matrix(one_way))] == [[0, 1, 2]]
    upper = np.triu(np.ones((3, 3), dtype=bool), 1)  # a triangle given above the diagonal only
    r = max_weight_clique(upper, [1.0, 1.0, 1.0])
    assert r.exact and r.lower == 3.0
    assert max_weight_clique(sp.csr_matrix(upper), [1.0, 1.0, 1.0]).lower == 3.0
    g = nx.Graph([(0, 2), (2, 7)])
    with pytest.raises(ValueError, match="0..n-1"):
        as_csr(g)
    with pytest.raises(ValueError, match="vertex ids"):
        CSRGraph.from_edges(2, np.array([0]), np.array([5]))
