"""Row expressions inside SUM / AVG (issue 29): the interval-arithmetic enclosure, refusals, the per-row value
identical on numpy and DuckDB, and the brute-force sensitivity of the clamped sum against ``patterns``."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from dpmagic.aggregates.rowvalues import row_sql, row_values
from dpmagic.domain.schema import Schema
from dpmagic.errors import UnsupportedQueryError
from dpmagic.noise.sensitivity import Coverage, patterns
from dpmagic.query.rowexpr import enclosure, row_expr

SCHEMA = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "g": {"type": "categorical", "values": ["a", "b"]},
            "x": {"type": "int", "lower": -2, "upper": 3},
            "y": {"type": "int", "lower": 0, "upper": 4},
            "p": {"type": "float", "lower": -1.5, "upper": 2.25},
            "q": {"type": "float", "lower": 0.0, "upper": 10.0},
        },
    }
)
DECLARED: dict[str, Any] = {"x": (-2, 3), "y": (0, 4), "p": (-1.5, 2.25), "q": (0.0, 10.0), "g": ("a", "b")}


def bounds(box: dict[str, Any] | None = None) -> Any:
    merged = {**DECLARED, **(box or {})}
    return lambda name: merged[name]


def parse(sql: str) -> exp.Expr:
    return sqlglot.parse_one(sql, read="duckdb")


# --- the enclosure: hypothesis over random expression trees --------------------------------------------------

ATOMS = st.sampled_from(["x", "y", "p", "q", "2", "-3", "0.5"])


def _combine(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    two = st.tuples(children, children)
    return st.one_of(
        two.map(lambda t: f"({t[0]} + {t[1]})"),
        two.map(lambda t: f"({t[0]} - {t[1]})"),
        two.map(lambda t: f"({t[0]} * {t[1]})"),
        children.map(lambda a: f"ABS({a})"),
        children.map(lambda a: f"-({a})"),
        two.map(lambda t: f"LEAST({t[0]}, {t[1]})"),
        two.map(lambda t: f"GREATEST({t[0]}, {t[1]})"),
        two.map(lambda t: f"CASE WHEN x > 0 AND g = 'a' THEN {t[0]} ELSE {t[1]} END"),
        two.map(lambda t: f"CASE WHEN NOT (p <= 1) OR y = 2 THEN {t[0]} ELSE {t[1]} END"),
    )


EXPRS = st.recursive(ATOMS, _combine, max_leaves=6)


def _exact(node: exp.Expr, row: dict[str, Any]) -> Fraction:
    """v(row) in exact rational arithmetic (a reference evaluator independent of rowexpr's)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Literal):
        return Fraction(node.this)
    if isinstance(node, exp.Column):
        return Fraction(row[node.name])
    if isinstance(node, exp.Neg):
        return -_exact(node.this, row)
    if isinstance(node, exp.Add):
        return _exact(node.this, row) + _exact(node.expression, row)
    if isinstance(node, exp.Sub):
        return _exact(node.this, row) - _exact(node.expression, row)
    if isinstance(node, exp.Mul):
        return _exact(node.this, row) * _exact(node.expression, row)
    if isinstance(node, exp.Abs):
        return abs(_exact(node.this, row))
    if isinstance(node, exp.Least):
        return min(_exact(a, row) for a in [node.this, *node.expressions])
    if isinstance(node, exp.Greatest):
        return max(_exact(a, row) for a in [node.this, *node.expressions])
    if isinstance(node, exp.Case):
        for w in node.args["ifs"]:
            if _truth(w.this, row):
                return _exact(w.args["true"], row)
        return _exact(node.args["default"], row)
    raise AssertionError(node.sql())


def _truth(node: exp.Expr, row: dict[str, Any]) -> bool:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Not):
        return not _truth(node.this, row)
    if isinstance(node, exp.And):
        return _truth(node.this, row) and _truth(node.expression, row)
    if isinstance(node, exp.Or):
        return _truth(node.this, row) or _truth(node.expression, row)
    v = row[node.this.name]
    k: Any = node.expression.this if node.expression.is_string else Fraction(node.expression.this)
    ops = {exp.EQ: v == k, exp.GT: v > k, exp.LTE: v <= k}
    return bool(ops[type(node)])


def _box_rows(box: dict[str, Any]) -> list[dict[str, Any]]:
    """Every row of a small grid of the box (all ints; floats at their ends, 0 and a few inner points)."""

    def floats(lo: float, hi: float) -> list[float]:
        pts = {lo, hi, (lo + hi) / 2, lo + (hi - lo) / 3}
        if lo <= 0 <= hi:
            pts.add(0.0)
        if lo <= 1 <= hi:
            pts.add(1.0)
        return sorted(pts)

    xs = range(box["x"][0], box["x"][1] + 1)
    ys = range(box["y"][0], box["y"][1] + 1)
    return [
        {"g": g, "x": x, "y": y, "p": p, "q": q}
        for g, x, y, p, q in itertools.product(box["g"], xs, ys, floats(*box["p"]), floats(*box["q"]))
    ]


@settings(max_examples=60, deadline=None)
@given(EXPRS, st.integers(-2, 3), st.integers(0, 3), st.booleans())
def test_enclosure_contains_every_value_in_the_box(sql: str, x_lo: int, x_w: int, only_a: bool) -> None:
    box = {**DECLARED, "x": (x_lo, min(3, x_lo + x_w)), "g": ("a",) if only_a else ("a", "b")}
    node = parse(sql)
    lo, hi, _ = enclosure(node, SCHEMA, bounds(box))
    r = row_expr(node, SCHEMA, bounds(box))
    assert Fraction(r.lo) <= lo <= hi <= Fraction(r.hi)  # rounded outwards
    for row in _box_rows(box):
        assert lo <= _exact(node, row) <= hi, (sql, row)


def test_case_over_declared_values_is_exact() -> None:
    # the first branch cannot hold in the box x <= 1: the range is y's alone
    node = parse("CASE WHEN x > 1 THEN 100 ELSE y END")
    assert enclosure(node, SCHEMA, bounds({"x": (-2, 1)}))[:2] == (0, 4)
    assert enclosure(node, SCHEMA, bounds())[:2] == (0, 100)
    # a condition that always holds hides the later branches
    node = parse("CASE WHEN g = 'a' THEN x * 2 ELSE 1000 END")
    assert enclosure(node, SCHEMA, bounds({"g": ("a",)}))[:2] == (-4, 6)
    node = parse("CASE WHEN y >= 0 THEN ABS(x - 1) ELSE -50 END")
    assert enclosure(node, SCHEMA, bounds())[:2] == (0, 3)


def test_box_bounds_come_from_the_where_box() -> None:
    from dpmagic.query.rowexpr import box_bounds
    from dpmagic.query.sql import parse_query

    q = parse_query("SELECT COUNT(*) FROM t WHERE x <= 1 AND g = 'a' AND q > 2.5", SCHEMA)
    of = box_bounds(q, SCHEMA)
    assert of("x") == (-2, 1) and of("y") == (0, 4) and tuple(of("g")) == ("a",) and of("q") == (2.5, 10.0)
    node = parse("CASE WHEN g = 'b' THEN 1000 ELSE x * y END")
    assert enclosure(node, SCHEMA, of)[:2] == (-8, 4)


def test_integrality() -> None:
    assert row_expr(parse("x * y - 3"), SCHEMA, bounds()).is_int
    assert row_expr(parse("CAST(x * y AS BIGINT)"), SCHEMA, bounds()).is_int
    assert not row_expr(parse("x * 0.5"), SCHEMA, bounds()).is_int
    assert not row_expr(parse("x * p"), SCHEMA, bounds()).is_int
    assert not row_expr(parse("CAST(x AS DOUBLE) + 1"), SCHEMA, bounds()).is_int
    # an intermediate beyond 2^62 is computed in doubles (int64 would overflow)
    assert not row_expr(parse("x * 4611686018427387904"), SCHEMA, bounds()).is_int
    assert not row_expr(parse("y + 9223372036854775807 - 9223372036854775807"), SCHEMA, bounds()).is_int
    with pytest.raises(UnsupportedQueryError, match="2\\^1000"):
        row_expr(parse("p * " + str(2**1001)), SCHEMA, bounds())


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("x / y", "division"),
        ("p % 2", "division"),
        ("CAST(p AS INT)", "integer type"),
        ("SQRT(q)", "SQRT"),
        ("g + 1", "not numeric"),
        ("CASE WHEN x > 0 THEN y END", "ELSE"),
        ("CASE WHEN x > y THEN 1 ELSE 0 END", "constant"),
        ("CASE WHEN g < 'b' THEN 1 ELSE 0 END", "categorical"),
        ("zz + 1", "unknown column"),
    ],
)
def test_refusals_name_the_problem(sql: str, why: str) -> None:
    with pytest.raises(UnsupportedQueryError, match=why):
        row_expr(parse(sql), SCHEMA, bounds())


# --- numpy = DuckDB, bit for bit ----------------------------------------------------------------------------

ENGINE_CASES = [
    "x * y",
    "ABS(x - 1) * y - 7",
    "CASE WHEN g = 'a' THEN x * 2 ELSE y END",
    "p * q",
    "ABS(p - 0.1) * 3 + LEAST(q, 2.5) - GREATEST(p, x)",
    "CASE WHEN q > 5 OR NOT (x = 1) THEN p * 1.1 ELSE q - y END",
    "x * 4611686018427387904 + y",
]


def _frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "g": rng.choice(["a", "b"], n),
            "x": rng.integers(-2, 4, n),
            "y": rng.integers(0, 5, n),
            "p": rng.uniform(-1.5, 2.25, n),
            "q": rng.uniform(0.0, 10.0, n),
        }
    )


def _engine_case(sql: str) -> tuple[pd.DataFrame, np.ndarray, str, Any]:
    """(frame, numpy's per-row values, the engine SELECT of the same values, the RowExpr)."""
    from dpmagic.aggregates.sqlexpr import rint

    df = _frame(2000, 7)
    r = row_expr(parse(sql), SCHEMA, bounds())
    # the float SUM path's quantum keeps every quantised value within int64 (float_unit)
    unit = None if r.is_int else max(2.0**-40, 2.0 ** (math.ceil(math.log2(max(abs(r.lo), abs(r.hi)))) - 62))
    mine = row_values(r, {c: df[c].to_numpy() for c in df.columns}, unit)
    out = row_sql(r, SCHEMA, unit)
    if isinstance(out, tuple):
        value = out[0]
    else:
        value = rint(out.y, exp.cast(exp.Floor(this=out.y.copy()), "BIGINT"))
    lo_u, hi_u = (r.lo, r.hi) if r.is_int else (r.lo / unit, r.hi / unit)  # type: ignore[operator]
    assert mine.min() >= np.floor(lo_u) and mine.max() <= np.ceil(hi_u)
    return df, mine, exp.select(exp.alias_(value, "v")).from_("t"), r


@pytest.mark.parametrize("sql", ENGINE_CASES)
def test_numpy_and_duckdb_per_row_values_are_identical(sql: str) -> None:
    df, mine, select, _ = _engine_case(sql)
    con = duckdb.connect()
    con.register("t", df)
    theirs = con.execute(select.sql(dialect="duckdb")).fetchnumpy()["v"].astype(np.int64)
    np.testing.assert_array_equal(mine, theirs)
    assert int(mine.sum()) == int(theirs.sum())


@pytest.mark.spark
@pytest.mark.slow
def test_numpy_and_spark_per_row_values_are_identical(spark: Any) -> None:
    for sql in ENGINE_CASES:
        df, mine, select, _ = _engine_case(sql)
        spark.createDataFrame(df).createOrReplaceTempView("t")
        rows = spark.sql(select.sql(dialect="spark")).collect()
        theirs = np.array([int(row["v"]) for row in rows], dtype=np.int64)
        np.testing.assert_array_equal(mine, theirs, err_msg=sql)


# --- brute-force sensitivity of the clamped sum -------------------------------------------------------------


@pytest.mark.parametrize("sql", ["x * y - 3", "CASE WHEN x > 0 THEN x * 2 ELSE y END", "ABS(x - 1) * y"])
@pytest.mark.parametrize("replace_one", [False, True])
def test_sum_sensitivity_brute_force(sql: str, replace_one: bool) -> None:
    """Every dataset of ≤ 2 rows over a small box and every neighbour (add / remove a row, or replace one): the
    largest change of the per-cell sums (one cell, and two cells grouped by g) is within ``patterns(lo, hi)``
    under each definition (L1 for pure ε, L2 for ρ-zCDP, L∞ per cell for μ-GDP)."""
    box = {**DECLARED, "x": (-1, 2), "y": (0, 2)}
    r = row_expr(parse(sql), SCHEMA, bounds(box))
    grid = [{"g": g, "x": x, "y": y} for g in "ab" for x in range(-1, 3) for y in range(0, 3)]
    vals = row_values(r, {c: np.array([row[c] for row in grid]) for c in ("x", "y", "g")}, None)
    for cells in (1, 2):
        cov = Coverage(False, False, cells)
        sens = patterns(r.lo, r.hi, cov, replace_one=replace_one)

        def sums(rows: tuple[int, ...], cells: int = cells) -> np.ndarray:
            out = np.zeros(cells, dtype=np.int64)
            for i in rows:
                out[0 if cells == 1 or grid[i]["g"] == "a" else 1] += vals[i]
            return out

        worst = {"pure": 0.0, "zcdp": 0.0, "gdp": 0.0}
        for size in range(0, 3):
            for rows in itertools.combinations_with_replacement(range(len(grid)), size):
                base = sums(rows)
                if replace_one:
                    nbrs = [rows[:k] + (j,) + rows[k + 1 :] for k in range(len(rows)) for j in range(len(grid))]
                else:
                    nbrs = [rows + (j,) for j in range(len(grid))]
                for nb in nbrs:
                    d = np.abs(sums(nb) - base).astype(float)
                    worst["pure"] = max(worst["pure"], float(d.sum()))
                    worst["zcdp"] = max(worst["zcdp"], float(np.sqrt((d * d).sum())))
                    worst["gdp"] = max(worst["gdp"], float(d.max()))
        for definition, w in worst.items():
            assert w <= sens.delta(definition) + 1e-9, (sql, cells, definition, w, sens)
