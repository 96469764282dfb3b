"""Workload generators (benchmarks/workloads.py) and the Smith et al. 2022 baselines (benchmarks/baselines.py)."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from workloads import (
    CENSUS_INCOME_RANGES,
    adult_query_log,
    box_to_sql,
    census_query,
    census_schema,
    census_sql,
    census_workload,
    paper_uniform_schema,
    uniform_schema,
    uniform_workload,
    write_sql,
)

from dpmagic.domain.schema import CategoricalColumn, Schema
from dpmagic.domain.sets import CategorySet, IntervalSet
from dpmagic.query.sql import parse_query

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from baselines import (  # noqa: E402
    algorithm1_clique,
    algorithm1_overlap,
    brute_force_clique,
    brute_force_overlap,
    build_graph,
    dsatur_bound,
    networkx_clique,
)


def _rows(schema: Schema) -> list[dict]:
    names = schema.names
    return [dict(zip(names, r)) for r in itertools.product(*[schema[c].values for c in names])]  # type: ignore[union-attr]


# --------------------------------------------------------------------------------------------------
# census


def test_census_reproducible():
    s = census_schema()
    assert census_workload(200, 7, s) == census_workload(200, 7, s)
    assert census_workload(200, 7) == census_workload(200, 7)
    assert census_workload(200, 7, s) != census_workload(200, 8, s)


def test_census_shape():
    s = census_schema()
    assert s["income"].kind == "int" and s["income"].lower == 1 and s["income"].upper == CENSUS_INCOME_RANGES
    sizes = {c: s[c].size for c in ("age", "marital", "race", "gender")}  # type: ignore[union-attr]
    assert sizes == {"age": 5, "marital": 4, "race": 7, "gender": 2}
    boxes = census_workload(3000, 1, s)
    unconstrained = {c: 0 for c in sizes}
    for b in boxes:
        inc = b.get("income")
        if inc is not None:  # i = 5000 is the whole income range: a tautology, dropped by Box
            assert isinstance(inc, IntervalSet) and len(inc.intervals) == 1
            iv = inc.intervals[0]
            assert iv.lo == 1 and iv.lo_closed and iv.hi_closed and 1 <= iv.hi < CENSUS_INCOME_RANGES
        for c in sizes:
            v = b.get(c)
            if v is None:
                unconstrained[c] += 1
            else:
                assert isinstance(v, CategorySet) and len(v.indices) == 1
        assert set(b.constraints) <= {"income", *sizes}
    # "all" is one of k + 1 equally likely choices
    for c, k in sizes.items():
        assert abs(unconstrained[c] / len(boxes) - 1 / (k + 1)) < 0.04, c


def test_census_query_and_sql_roundtrip(tmp_path):
    s = census_schema()
    b = census_query(s, 1234, age="20-39", gender="Male")
    assert b.contains_row({"income": 1234, "age": "20-39", "gender": "Male"})
    assert not b.contains_row({"income": 1235, "age": "20-39", "gender": "Male"})
    for box in [b, *census_workload(100, 3, s)]:
        assert parse_query(census_sql(box), s).coverage == box
    p = write_sql(census_workload(5, 0, s), tmp_path / "c.sql", table="census")
    assert p.read_text().count(";") == 5
    with pytest.raises(ValueError):
        census_query(s, 0)


# --------------------------------------------------------------------------------------------------
# uniform synthetic


def test_uniform_reproducible_and_nonempty():
    s = uniform_schema(10, (2, 5), seed=3)
    assert s == uniform_schema(10, (2, 5), seed=3)
    assert all(2 <= s[c].size <= 5 for c in s.names)  # type: ignore[union-attr]
    a = uniform_workload(s, 300, 11)
    assert a == uniform_workload(s, 300, 11)
    assert a != uniform_workload(s, 300, 12)
    ncols = []
    for b in a:
        assert not b.is_empty()
        for v in b.constraints.values():
            assert isinstance(v, CategorySet) and 0 < len(v.indices) < v.column.size
        ncols.append(len(b.constraints))
    assert max(ncols) <= 10 and np.mean(ncols) > 2
    assert all(parse_query(box_to_sql(b), s).coverage == b for b in a[:50])


def test_paper_uniform_schema_large_domains():
    s = paper_uniform_schema(40, seed=1, exponents=(1, 2, 3, 4))
    assert len(s) == 40
    assert {s[c].size for c in s.names} <= {10, 100, 1000, 10_000}  # type: ignore[union-attr]
    boxes = uniform_workload(s, 5, 0)
    assert boxes == uniform_workload(s, 5, 0)
    for b in boxes:
        for v in b.constraints.values():
            assert 0 < len(v.indices) < v.column.size  # type: ignore[union-attr]
    capped = paper_uniform_schema(100, seed=0, exponents=(3,), max_log10_domain=30)
    assert len(capped) == 10


# --------------------------------------------------------------------------------------------------
# Adult analyst log


def test_adult_log_parses_and_is_reproducible(adult_schema):
    log = adult_query_log(300, 0)
    assert len(log) == 300 and log == adult_query_log(300, 0) and log != adult_query_log(300, 1)
    queries = [parse_query(q, adult_schema) for q in log]
    assert any(q.group_by for q in queries)
    assert any(a.func == "avg" for q in queries for a in q.aggregates)
    assert any('"marital-status"' in q or '"hours-per-week"' in q for q in log)
    assert sum(not q.where.constraints for q in queries) < 100  # mostly filtered queries
    counts = adult_query_log(50, 2, counts_only=True)
    assert all(a.func == "count" for q in counts for a in parse_query(q, adult_schema).aggregates)


# --------------------------------------------------------------------------------------------------
# baselines vs brute force


@pytest.mark.parametrize("seed", range(6))
def test_algorithm1_matches_networkx_and_brute_force(seed):
    s = uniform_schema(4, (2, 3), seed=seed)
    boxes = uniform_workload(s, 12, seed)
    rng = np.random.default_rng(seed)
    for weights in (None, [int(x) for x in rng.integers(1, 5, size=len(boxes))]):
        G = build_graph(boxes, weights)
        omega = brute_force_clique(G)
        gamma = brute_force_overlap(boxes, _rows(s), weights)
        assert algorithm1_clique(boxes, weights).value == omega
        assert networkx_clique(boxes, weights).value == omega
        assert algorithm1_overlap(boxes, weights).value == gamma
        assert gamma <= omega <= dsatur_bound(boxes, weights).value


def test_overlap_variant_differs_from_clique_on_prop4_example():
    # Smith et al. 2022 Prop. 4: {a,b}, {b,c}, {a,c} pairwise overlap but share no value
    col = CategoricalColumn("x", ("a", "b", "c"))
    s = Schema({"x": col})
    boxes = [
        parse_query(f"SELECT COUNT(*) FROM t WHERE x IN ({v})", s).coverage for v in ("'a','b'", "'b','c'", "'a','c'")
    ]
    assert algorithm1_clique(boxes).value == 3
    assert algorithm1_overlap(boxes).value == 2 == brute_force_overlap(boxes, _rows(s))


def test_baselines_time_out_cooperatively():
    s = uniform_schema(10, (2, 5), seed=1)
    boxes = uniform_workload(s, 150, 1)
    r = algorithm1_overlap(boxes, time_limit=0.0)
    assert r.timed_out
    assert dsatur_bound(boxes, time_limit=0.0).timed_out
    G = build_graph(boxes)
    assert isinstance(G, nx.Graph) and G.number_of_nodes() == 150


def test_engine_agrees_with_algorithm1_on_small_instances():
    overlap = pytest.importorskip("dpmagic.overlap")
    for seed in range(4):
        s = uniform_schema(6, (2, 4), seed=seed)
        boxes = uniform_workload(s, 30, seed)
        res = overlap.max_overlap(boxes, schema=s, time_limit=5.0)
        assert res.exact and res.upper == algorithm1_overlap(boxes).value
    cs = census_schema()
    boxes = census_workload(150, 5, cs)
    assert overlap.max_overlap(boxes, schema=cs).upper == algorithm1_overlap(boxes).value
