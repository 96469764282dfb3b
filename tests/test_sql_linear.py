"""SUM / AVG of a linear row expression (issue 29): ``SUM(x + y)``, ``SUM(2 * x - 1)``, ``SUM(x + 1) * 1``, ``AVG(x +
0.5 * y)`` are answered as the linear combination of SUMs and COUNT(*) they equal (:mod:`dpmagic.query.linear`).

Checked: the parsed query is the one written as that combination (same base aggregates, same coverage); the base
releases cover the brute-force change of their exact per-cell sums over every neighbouring pair of data sets of
≤ 2 rows of a tiny domain (both relations, three definitions); end to end at a negligible noise the answer equals
SQLite's evaluation of the original SQL; pandas, DuckDB and Spark compute identical exact aggregates; the
non-linear forms stay refused with a message naming what works.
"""

from __future__ import annotations

import itertools
import re
import sqlite3

import duckdb
import numpy as np
import pandas as pd
import pytest
from conformance import assert_same_cells
from conformance import plan_query as _plan
from tests_support import assert_covered

from dpmagic import Session
from dpmagic.accountant.currency import CURRENCIES
from dpmagic.backends.bind import backend_for
from dpmagic.backends.duckdb import DuckDBBackend
from dpmagic.backends.pandas import PandasBackend
from dpmagic.domain.schema import Schema
from dpmagic.errors import UnsupportedQueryError
from dpmagic.query.sql import parse_query
from dpmagic.releases.plan import plan_noise, units_of

TINY = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "g": {"type": "categorical", "values": ["a", "b"]},
            "x": {"type": "int", "lower": -2, "upper": 3},
            "y": {"type": "int", "lower": 0, "upper": 4},
        },
    }
)
ROWS = [{"g": g, "x": x, "y": y} for g, x, y in itertools.product("ab", range(-2, 4), range(0, 5))]
FRAME = pd.DataFrame(ROWS)

#: linear SELECT with a clamped term → the same query written as the combination
CLAMPED = {
    "SELECT g, SUM(CLAMP(x, 0, 2) - y) AS s, COUNT(*) AS n FROM t GROUP BY g": (
        "SELECT g, SUM(CLAMP(x, 0, 2)) - SUM(y) AS s, COUNT(*) AS n FROM t GROUP BY g"
    ),
    "SELECT g, SUM(2 * CLAMP(x, 0, 3) - 1) AS s FROM t WHERE y > 1 GROUP BY g": (
        "SELECT g, 2 * SUM(CLAMP(x, 0, 3)) - COUNT(*) AS s FROM t WHERE y > 1 GROUP BY g"
    ),
    "SELECT AVG(CLAMP(x, -1, 2) + 0.5 * y) AS a FROM t WHERE g = 'a'": (
        "SELECT (SUM(CLAMP(x, -1, 2)) + 0.5 * SUM(y)) / CAST(COUNT(*) AS DOUBLE) AS a FROM t WHERE g = 'a'"
    ),
    "SELECT SUM(CLAMP(x, 0, 2) + 1) * 1 AS s FROM t": "SELECT (SUM(CLAMP(x, 0, 2)) + COUNT(*)) * 1 AS s FROM t",
}
#: linear SELECTs of plain columns: ONE release of the expression (dpmagic.query.derived; their brute-force
#: coverage: tests/test_sql_rowexpr_wired.py)
ONE_RELEASE = [
    "SELECT SUM(x + y) AS s FROM t",
    "SELECT g, SUM(2 * x - 1) AS s FROM t WHERE y > 1 GROUP BY g",
    "SELECT SUM(x + 1) * 1 AS s FROM t",
    "SELECT AVG(x + 0.5 * y) AS a FROM t WHERE g = 'a'",
]
CASES = [*CLAMPED, *ONE_RELEASE]


def _sqlite_sql(sql: str) -> str:
    return re.sub(r"CLAMP\((\w+), ([-\d.]+), ([-\d.]+)\)", r"MIN(MAX(\1, \2), \3)", sql)


@pytest.mark.parametrize("sql", ONE_RELEASE)
def test_a_linear_expression_of_columns_is_one_release(sql: str) -> None:
    q = parse_query(sql, TINY)
    assert len(q.derived) == 1 and {a.column for a in q.aggregates if a.column is not None} == {q.derived[0][0]}
    plan = plan_noise(q, TINY, CURRENCIES["pure"], 1.0)
    assert len(plan.sums) + len(plan.moments) == 1


@pytest.mark.parametrize(("linear", "direct"), list(CLAMPED.items()))
def test_linear_aggregate_is_the_combination_written_directly(linear: str, direct: str) -> None:
    a, b = parse_query(linear, TINY), parse_query(direct, TINY)
    assert {x.identity() for x in a.aggregates} == {x.identity() for x in b.aggregates}
    assert a.where == b.where and a.groups == b.groups and a.filter == b.filter


COST = {"pure": 0.7, "zcdp": 0.3, "gdp": 0.9}


@pytest.mark.parametrize(
    "definition, replace_one, sql", list(itertools.product(["pure", "zcdp", "gdp"], [False, True], CLAMPED))
)
def test_base_releases_cover_the_brute_force_change(definition, replace_one, sql) -> None:
    q = parse_query(sql, TINY)
    plan = plan_noise(q, TINY, CURRENCIES[definition], COST[definition], replace_one=replace_one)
    exact = PandasBackend(FRAME, TINY).evaluate(q, units_of(plan))
    labels = list(q.groups[0].labels) if q.groups else [None]
    n = len(labels)
    where = {"y > 1": lambda r: r["y"] > 1, "g = 'a'": lambda r: r["g"] == "a"}
    keep = next((f for w, f in where.items() if w in sql), lambda r: True)
    cell = [(labels.index(r["g"]) if q.groups else 0) if keep(r) else n for r in ROWS]
    releases = [(plan.count, [1] * len(ROWS), exact.counts.tolist())] if plan.count is not None else []
    for agg in q.aggregates:
        if agg.column is None or agg.sum_key not in plan.sums:
            continue
        lo, hi = agg.clamp if agg.clamp is not None else (TINY[agg.column].lower, TINY[agg.column].upper)
        values = [int(min(max(r[agg.column], lo), hi)) for r in ROWS]
        releases.append((plan.sums[agg.sum_key], values, list(exact.sums[agg.sum_key])))
    assert len(releases) >= 2
    for noise, values, backend in releases:
        contrib = np.zeros((len(ROWS), n), dtype=np.int64)
        for i, (c, v) in enumerate(zip(cell, values, strict=True)):
            if c < n:
                contrib[i, c] = v
        assert contrib.sum(axis=0).tolist() == backend
        assert_covered(noise, contrib, definition, replace_one)


def test_end_to_end_equals_sqlite_on_the_linear_sql() -> None:
    """At ε = 10⁶ per query the discrete noise (scale ≤ 10⁻⁵ units) is 0 except with probability < 10⁻¹⁰⁰⁰⁰ per
    release: the false-failure probability of this test."""
    rng = np.random.default_rng(3)
    df = pd.DataFrame({"g": rng.choice(["a", "b"], 300), "x": rng.integers(-2, 4, 300), "y": rng.integers(0, 5, 300)})
    s = Session(df, TINY, budget="epsilon=1e8")
    con = sqlite3.connect(":memory:")
    df.to_sql("t", con, index=False)
    for sql in CASES:
        got = s.query(sql, epsilon=1e6).df
        ref = con.execute(_sqlite_sql(sql)).fetchall()
        cols = [c for c in got.columns if not str(c).endswith(("_ci_low", "_ci_high"))]
        rows = [tuple(r) for r in got[cols].itertuples(index=False)]
        assert len(rows) == len(ref), sql
        for row, want in zip(rows, ref, strict=True):  # pytest.approx compares flat sequences only
            assert list(row) == pytest.approx(list(want)), sql


def test_pandas_and_duckdb_compute_the_same_exact_aggregates() -> None:
    con = duckdb.connect()
    con.register("t", FRAME)
    db = DuckDBBackend(con.table("t"), TINY)
    pb = backend_for(FRAME, TINY)
    for sql in CASES:
        q, units, extra = _plan(sql, TINY)
        assert_same_cells(pb.evaluate(q, units, extended=extra), db.evaluate(q, units, extended=extra))


@pytest.mark.spark
def test_spark_computes_the_same_exact_aggregates(spark) -> None:
    sb = backend_for(spark.createDataFrame(FRAME), TINY)
    pb = backend_for(FRAME, TINY)
    for sql in CASES:
        q, units, extra = _plan(sql, TINY)
        assert_same_cells(pb.evaluate(q, units, extended=extra), sb.evaluate(q, units, extended=extra))


def test_division_stays_refused_with_the_reason() -> None:
    """A product, ABS or VAR of an expression is one release of a derived column (tests/test_sql_rowexpr_wired.py);
    a division stays refused."""
    with pytest.raises(UnsupportedQueryError, match="division"):
        parse_query("SELECT SUM(x / 2) FROM t", TINY)
