"""Row expressions inside SUM / AVG / VAR / STDDEV, wired through the parser, the planner and the backends (issue 29).

``SUM(x * y)``, ``AVG(x * f)``, ``SUM(CASE WHEN g = 'a' THEN x * 2 ELSE ABS(x - 1) END)``, ``STDDEV(LEAST(x, y))``
are one release each of a *derived column* (:mod:`dpmagic.query.derived`) whose public bounds are the expression's
interval-arithmetic enclosure over the WHERE box (:mod:`dpmagic.query.rowexpr`).

Checked: the derived column's bounds are the enclosure over the WHERE box (not the declared box); end to end at a
negligible noise the answer equals SQLite's (or pandas') evaluation of the same SQL, with an interval that contains
it; pandas, DuckDB and Spark compute identical exact aggregates; every release covers the brute-force change over
every neighbouring pair of data sets of a tiny domain — row level (add/remove and replace-one, ≤ 2 rows) and person
level (≤ 2 rows per person), pure ε, ρ-zCDP and μ-GDP; refusals name the construct and spend nothing.
"""

from __future__ import annotations

import itertools
import sqlite3
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest
from conformance import (
    PERSON_ROWS,
    PERSON_TINY,
    assert_same_cells,
    check_unit_person_sensitivity,
    check_unit_sensitivity,
    plan_query,
)
from tests_support import assert_covered

from dpmagic import Session
from dpmagic.accountant.currency import CURRENCIES
from dpmagic.backends.bind import backend_for
from dpmagic.backends.duckdb import DuckDBBackend
from dpmagic.backends.pandas import PandasBackend
from dpmagic.domain.schema import Schema
from dpmagic.errors import QueryError, UnsupportedQueryError
from dpmagic.query.sql import parse_query
from dpmagic.releases.plan import plan_noise, units_of

SCHEMA = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "g": {"type": "categorical", "values": ["a", "b", "c"]},
            "x": {"type": "int", "lower": -2, "upper": 3},
            "y": {"type": "int", "lower": 0, "upper": 4},
            "f": {"type": "float", "lower": -1.5, "upper": 2.5},
            "d": {"type": "date", "lower": "2024-01-01", "upper": "2024-12-31"},
        },
    }
)
NUMERIC = ("g", "x", "y", "f")


def frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "g": rng.choice(["a", "b", "c"], n),
            "x": rng.integers(-2, 4, n),
            "y": rng.integers(0, 5, n),
            "f": np.round(rng.uniform(-1.5, 2.5, n), 3),
            "d": pd.to_datetime("2024-01-01") + pd.to_timedelta(rng.integers(0, 366, n), unit="D"),
        }
    )


#: queries SQLite evaluates as written (no VAR there)
SQLITE_CASES = [
    "SELECT SUM(x * y) AS s FROM t",
    "SELECT g, AVG(x * f) AS a FROM t WHERE y >= 1 GROUP BY g",
    "SELECT g, SUM(CASE WHEN g = 'a' THEN x * 2 ELSE ABS(x - 1) END) AS s, COUNT(*) AS n FROM t GROUP BY g",
    "SELECT SUM(CASE WHEN x > 1 THEN y ELSE 0 END) AS s FROM t WHERE g <> 'c'",
    "SELECT y, SUM(ABS(x - 1)) AS s, AVG(ABS(x - 1)) AS a FROM t GROUP BY y",
    "SELECT SUM(x * x - y) AS s FROM t WHERE g = 'a' OR x >= 2",
    "SELECT AVG(MIN(x, y) * 2) AS a FROM t",  # SQLite's scalar MIN is LEAST (rewritten below for dpmagic)
    "SELECT SUM(f * f) AS s, AVG(f * y) AS a FROM t WHERE x BETWEEN 0 AND 2",
    "SELECT g, AVG(CASE WHEN x > 0 THEN y ELSE NULL END) AS a FROM t GROUP BY g",  # ELSE NULL: AVG(y) FILTER (x > 0)
]


def _dpmagic_sql(sql: str) -> str:
    return sql.replace("MIN(x, y)", "LEAST(x, y)")


def test_the_derived_column_is_bounded_by_the_enclosure_over_the_where_box() -> None:
    q = parse_query("SELECT SUM(x * y) AS s FROM t WHERE y BETWEEN 1 AND 2 AND x >= 0", SCHEMA)
    [(name, r)] = q.derived
    assert name == "x * y" and q.aggregates[0].column == name
    assert (r.lo, r.hi, r.is_int) == (0, 6, True)  # [0, 3] × [1, 2]: not the declared [-8, 12]
    q = parse_query("SELECT AVG(CASE WHEN g = 'a' THEN f ELSE 0 END) AS a FROM t WHERE g IN ('b', 'c')", SCHEMA)
    [(_, r)] = q.derived
    assert (r.lo, r.hi, r.is_int) == (0.0, 0.0, False)  # g = 'a' never holds in the box: exact CASE


def test_sum_and_avg_of_the_same_expression_share_one_centred_release() -> None:
    q = parse_query("SELECT SUM(x * y) AS s, AVG(x * y) AS a FROM t", SCHEMA)
    plan = plan_noise(q, SCHEMA, CURRENCIES["pure"], 1.0)
    assert not plan.sums and list(plan.moments) == ["x * y"]  # SUM = S + c·n̂: no release of its own


def _sqlite(df: pd.DataFrame, sql: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(":memory:")
    df[list(NUMERIC)].to_sql("t", con, index=False)
    return con.execute(sql).fetchall()


def _check_answer(got: pd.DataFrame, want: list[tuple[Any, ...]], sql: str) -> None:
    cols = [c for c in got.columns if not str(c).endswith(("_ci_low", "_ci_high"))]
    rows = [tuple(r) for r in got[cols].itertuples(index=False)]
    assert len(rows) == len(want), sql
    for i, (row, ref) in enumerate(zip(rows, want, strict=True)):
        assert len(row) == len(ref), sql
        for v, r in zip(row, ref, strict=True):  # numbers to 1e-6, keys exactly (pytest 9.2's approx refuses str)
            if isinstance(r, str) or isinstance(v, str):
                assert v == r, sql
            else:
                assert v == pytest.approx(r, rel=1e-6, abs=1e-5), sql
        for c in cols:  # every released value carries its interval
            if f"{c}_ci_low" in got.columns:
                assert got[f"{c}_ci_low"][i] <= got[c][i] <= got[f"{c}_ci_high"][i], (sql, c)


@pytest.mark.parametrize("engine", ["pandas", "duckdb"])
def test_end_to_end_equals_sqlite(engine: str) -> None:
    """At ε = 10⁸ per query an integer release's discrete noise is 0 except with probability below 10⁻¹⁰⁰⁰⁰⁰; a
    float release's noise has scale ≤ 10⁻⁷ (sensitivity ≤ 20 per row over ε/3), so it exceeds the tolerance of
    10⁻⁵ (absolute, per value) with probability below e⁻¹⁰⁰ per value: the false-failure probability of this test
    is below 10⁻⁴⁰.  (Float values are also quantised per row to a power of two: within the tolerance.)"""
    df = frame(300, 3)
    data: Any = df
    if engine == "duckdb":
        con = duckdb.connect()
        con.register("t", df)
        data = con.table("t")
    s = Session(data, SCHEMA, budget="epsilon=1e9")
    for sql in SQLITE_CASES:
        got = s.query(_dpmagic_sql(sql), epsilon=1e8).df
        _check_answer(got, _sqlite(df, sql), sql)


def test_variance_and_stddev_of_an_expression_equal_pandas() -> None:
    """As :func:`test_end_to_end_equals_sqlite` (same false-failure probability); the reference is pandas'."""
    df = frame(300, 4)
    s = Session(df, SCHEMA, budget="epsilon=1e9")
    got = s.query("SELECT g, VAR(x * y) AS v, STDDEV(LEAST(x, y)) AS sd FROM t GROUP BY g", epsilon=1e6).df
    prod, least = df["x"] * df["y"], np.minimum(df["x"], df["y"])
    for i, g in enumerate(["a", "b", "c"]):
        m = df["g"] == g
        assert got["v"][i] == pytest.approx(prod[m].var(ddof=1), rel=1e-6)
        assert got["sd"][i] == pytest.approx(least[m].std(ddof=1), rel=1e-6)


ENGINE_CASES = [_dpmagic_sql(s) for s in SQLITE_CASES] + [
    "SELECT g, VAR(x * f) AS v, STDDEV(GREATEST(x, y) - 1) AS sd FROM t GROUP BY g",
    "SELECT SUM(CASE WHEN g = 'b' AND NOT x = 0 THEN f * 2 WHEN y >= 3 THEN -1 ELSE x END) AS s FROM t",
    "SELECT SUM(CAST(x AS DOUBLE) * f * 0.1) AS s FROM t",
]


def test_pandas_and_duckdb_compute_the_same_exact_aggregates() -> None:
    df = frame(400, 5)
    con = duckdb.connect()
    con.register("t", df)
    db = DuckDBBackend(con.table("t"), SCHEMA)
    pb = backend_for(df, SCHEMA)
    derived = 0
    for sql in ENGINE_CASES:
        q, units, extra = plan_query(sql, SCHEMA)
        derived += bool(q.derived)  # SUM(CASE WHEN c THEN y ELSE 0 END) alone is SUM(y) over WHERE c (flatten)
        assert_same_cells(pb.evaluate(q, units, extended=extra), db.evaluate(q, units, extended=extra))
    assert derived == len(ENGINE_CASES) - 2  # and AVG(CASE WHEN x > 0 THEN y ELSE NULL END): AVG(y) FILTER


@pytest.mark.spark
@pytest.mark.slow
def test_spark_computes_the_same_exact_aggregates(spark: Any) -> None:
    df = frame(400, 5)
    sb = backend_for(spark.createDataFrame(df), SCHEMA)
    pb = backend_for(df, SCHEMA)
    for sql in ENGINE_CASES:
        q, units, extra = plan_query(sql, SCHEMA)
        assert_same_cells(pb.evaluate(q, units, extended=extra), sb.evaluate(q, units, extended=extra))


# ---- brute-force sensitivity -------------------------------------------------------------------------------

TINY = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "g": {"type": "categorical", "values": ["a", "b"]},
            "x": {"type": "int", "lower": -2, "upper": 3},
            "f": {"type": "float", "lower": -1.5, "upper": 2.5},
        },
    }
)
TINY_ROWS = [{"g": g, "x": x, "f": f} for g, x, f in itertools.product("ab", range(-2, 4), (-1.5, -0.25, 1.0, 2.5))]
#: WHERE clause → the rows it selects (written out independently of the parser); the last is an exact filter
WHERES = {
    "": lambda r: True,
    "WHERE x >= 1": lambda r: r["x"] >= 1,
    "WHERE g = 'a' OR x >= 2": lambda r: r["g"] == "a" or r["x"] >= 2,
}
#: SUM(expression) → its per-row meaning (Python, written out by hand)
SUMS = {
    "SUM(x * x)": lambda r: r["x"] * r["x"],
    "SUM(2 * x - 1)": lambda r: 2 * r["x"] - 1,  # linear: one release too (query.linear)
    "SUM(x + f)": lambda r: r["x"] + r["f"],
    "SUM(CASE WHEN g = 'a' THEN x * 2 ELSE ABS(x - 1) END)": lambda r: r["x"] * 2 if r["g"] == "a" else abs(r["x"] - 1),
    "SUM(GREATEST(x * x, 2) * ABS(x))": lambda r: max(r["x"] * r["x"], 2) * abs(r["x"]),
    "SUM(LEAST(x, f) * 2)": lambda r: min(r["x"], r["f"]) * 2,
    "SUM(x * f)": lambda r: r["x"] * r["f"],
    "SUM(CASE WHEN f > 0 THEN f ELSE x END)": lambda r: r["f"] if r["f"] > 0 else float(r["x"]),
}
COST = {"pure": 0.7, "zcdp": 0.3, "gdp": 0.9}


def _contributions(q: Any, noise: Any, rows: list[dict[str, Any]], meaning: Any, where: str) -> np.ndarray:
    """rows × cells: each row's clamped (and, on floats, quantised) value in its cell (0 outside the filter)."""
    [(_, r)] = q.derived
    labels = list(q.groups[0].labels) if q.groups else [None]
    out = np.zeros((len(rows), len(labels)), dtype=np.int64)
    for i, row in enumerate(rows):
        if not WHERES[where](row):
            continue
        v = min(max(meaning(row), r.lo), r.hi)
        out[i, labels.index(row["g"]) if q.groups else 0] = int(v) if r.is_int else int(np.rint(v / noise.unit))
    return out


@pytest.mark.parametrize("definition", ["pure", "zcdp", "gdp"])
@pytest.mark.parametrize("replace_one", [False, True])
@pytest.mark.parametrize("where", list(WHERES))
@pytest.mark.parametrize("group", ["", "g"])
def test_sum_release_covers_the_brute_force_change(definition, replace_one, where, group) -> None:
    """Row level: every neighbouring pair of data sets of ≤ 2 rows of :data:`TINY`; the backend's exact sums are
    the hand-written contributions."""
    frame_ = pd.DataFrame(TINY_ROWS)
    for select, meaning in SUMS.items():
        key, gb = ("g, ", " GROUP BY g") if group else ("", "")
        q = parse_query(f"SELECT {key}{select} AS s FROM t {where}{gb}", TINY)
        plan = plan_noise(q, TINY, CURRENCIES[definition], COST[definition], replace_one=replace_one)
        noise = plan.sums[q.aggregates[0].sum_key]
        contrib = _contributions(q, noise, TINY_ROWS, meaning, where)
        exact = PandasBackend(frame_, TINY).evaluate(q, units_of(plan))
        assert contrib.sum(axis=0).tolist() == list(exact.sums[q.aggregates[0].sum_key]), select
        assert_covered(noise, contrib, definition, replace_one)


@pytest.mark.parametrize("definition", ["pure", "zcdp", "gdp"])
@pytest.mark.parametrize("replace_one", [False, True])
def test_sum_release_covers_the_brute_force_change_at_person_level(definition, replace_one) -> None:
    """Person level (≤ 2 rows per person, :data:`conformance.PERSON_TINY`): every person is a multiset of ≤ 2 rows,
    its contribution the sum of its rows'; every neighbouring pair of data sets of ≤ 2 persons (add / remove a
    person beside ≤ 1 other, or replace one by another) is covered."""
    persons = [p for k in (1, 2) for p in itertools.combinations_with_replacement(range(len(PERSON_ROWS)), k)]
    meanings = {
        "SUM(x * f)": lambda r: r["x"] * r["f"],
        "SUM(CASE WHEN g = 'a' THEN x * 2 ELSE ABS(x - 1) END)": SUMS[
            "SUM(CASE WHEN g = 'a' THEN x * 2 ELSE ABS(x - 1) END)"
        ],
    }
    for (select, meaning), where, group in itertools.product(meanings.items(), ["", "WHERE x >= 1"], ["", "g"]):
        key, gb = ("g, ", " GROUP BY g") if group else ("", "")
        q = parse_query(f"SELECT {key}{select} AS s FROM t {where}{gb}", PERSON_TINY)
        plan = plan_noise(q, PERSON_TINY, CURRENCIES[definition], COST[definition], replace_one=replace_one)
        noise = plan.sums[q.aggregates[0].sum_key]
        rows = _contributions(q, noise, PERSON_ROWS, meaning, where)
        contrib = np.array([rows[list(p)].sum(axis=0) for p in persons], dtype=np.int64)
        assert_covered(noise, contrib, definition, replace_one)


@pytest.mark.parametrize(
    "kind, select",
    [("avg", "AVG(x * f) AS a"), ("var", "VAR(ABS(x - 1) * 2) AS v"), ("stddev", "STDDEV(x * x) AS sd")],
)
def test_centred_releases_cover_the_brute_force_change(kind: str, select: str) -> None:
    """AVG / VAR / STDDEV of an expression: their count, centred sum and centred sum of squares, row level (≤ 2
    rows) with :func:`conformance.check_unit_sensitivity` (both relations, three definitions)."""
    assert check_unit_sensitivity(kind, select) > 0


@pytest.mark.parametrize("kind, select", [("avg", "AVG(x * f) AS a"), ("var", "VAR(ABS(x - 1) * 2) AS v")])
def test_centred_releases_cover_the_brute_force_change_at_person_level(kind: str, select: str) -> None:
    assert check_unit_person_sensitivity(kind, select) > 0


# ---- refusals ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql, fragment",
    [
        ("SELECT SUM(x / y) FROM t", "division"),
        ("SELECT SUM(x % 2) FROM t", "division"),
        ("SELECT AVG(CASE WHEN x > 0 THEN x WHEN y > 1 THEN y END) FROM t", "ELSE"),
        ("SELECT SUM(SQRT(x * y)) FROM t", "SQRT"),
        ("SELECT SUM(x * g) FROM t", "not numeric"),
        ("SELECT SUM(x * 'a') FROM t", "string"),
        ("SELECT SUM(CASE WHEN x > y THEN 1 ELSE 0 END) FROM t", "several columns"),
        ("SELECT SUM(CASE WHEN x > y THEN f ELSE x END) FROM t", "constant"),
        ("SELECT SUM(d * x) FROM t", "date"),
        ("SELECT SUM(x * nope) FROM t", "nope"),
        ("SELECT MEDIAN(x * y) FROM t", "not supported"),
    ],
)
def test_refusals_name_the_construct_and_spend_nothing(sql: str, fragment: str) -> None:
    s = Session(frame(20, 1), SCHEMA, budget="epsilon=1")
    with pytest.raises(QueryError) as e:
        s.query(sql, epsilon=0.5)
    assert fragment.lower() in str(e.value).lower(), str(e.value)
    assert s.spent == 0 and len(s.accountant) == 0


def test_an_expression_the_linear_path_takes_is_still_refused_when_its_part_is() -> None:
    with pytest.raises(UnsupportedQueryError, match="division"):
        parse_query("SELECT SUM(x + y / 2) FROM t", SCHEMA)


# ---- a column of a public lookup table inside SUM / AVG ----------------------------------------------------------

LOOKUP_ROWS: list[dict[str, Any]] = [
    {"code": 1, "w": 2.5, "pop": 10},
    {"code": 2, "w": 1.0, "pop": 20},
    {"code": 3, "w": None, "pop": 30},  # no weight: SUM skips it (0), AVG refuses
    {"code": 4, "w": -3.0, "pop": 40},
    {"code": 9, "w": 100.0, "pop": 50},  # not a declared code: no private row joins it, its weight never counts
]
LOOKUP = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "region": {"type": "int", "lower": 1, "upper": 5},  # 5 is missing from the lookup
            "age": {"type": "int", "lower": 0, "upper": 3},
            "sex": {"type": "categorical", "values": ["F", "M"]},
        },
        "public_tables": {"regions": {"key": "code", "rows": LOOKUP_ROWS}},
    }
)
LOOKUP_CASES = [
    "SELECT SUM(r.w) FROM t JOIN regions r ON t.region = r.code",
    "SELECT t.sex, SUM(r.pop * t.age) AS s, AVG(r.pop) AS a FROM t JOIN regions r ON t.region = r.code "
    "WHERE t.age > 0 GROUP BY t.sex",
    "SELECT SUM(r.w) AS s, COUNT(*) AS n FROM t LEFT JOIN regions r ON t.region = r.code WHERE t.region >= 2",
    "SELECT STDDEV(r.pop) AS sd FROM t JOIN regions r ON t.region = r.code",
]


@pytest.mark.parametrize("engine", ["pandas", "duckdb"])
def test_a_lookup_column_inside_sum_and_avg_equals_sqlite(engine: str) -> None:
    """As :func:`test_end_to_end_equals_sqlite` (same false-failure probability; STDDEV against pandas')."""
    rng = np.random.default_rng(7)
    df = pd.DataFrame(
        {"region": rng.integers(1, 6, 300), "age": rng.integers(0, 4, 300), "sex": rng.choice(["F", "M"], 300)}
    )
    con = sqlite3.connect(":memory:")
    df.to_sql("t", con, index=False)
    pd.DataFrame(LOOKUP_ROWS).to_sql("regions", con, index=False)
    data: Any = df
    if engine == "duckdb":
        dcon = duckdb.connect()
        dcon.register("t", df)
        data = dcon.table("t")
    s = Session(data, LOOKUP, budget="epsilon=1e9")
    for sql in LOOKUP_CASES[:3]:
        got = s.query(sql, epsilon=1e8).df
        assert not any("CASE" in str(c) for c in got.columns), got.columns  # named as written
        _check_answer(got, con.execute(sql).fetchall(), sql)
    pops = df["region"].map({r["code"]: r["pop"] for r in LOOKUP_ROWS}).dropna()
    got = s.query(LOOKUP_CASES[3], epsilon=1e8).df
    assert got["sd"][0] == pytest.approx(pops.std(ddof=1), rel=1e-6)


@pytest.mark.parametrize("definition", ["pure", "zcdp", "gdp"])
@pytest.mark.parametrize("replace_one", [False, True])
def test_a_lookup_sum_covers_the_brute_force_change(definition: str, replace_one: bool) -> None:
    """Every neighbouring pair of data sets of ≤ 2 rows of the lookup schema's domain: a row contributes its
    region's public weight (0 without one), so the sensitivity is max |weight| over the codes the box allows."""
    rows = [{"region": g, "age": a, "sex": x} for g, a, x in itertools.product(range(1, 6), range(4), "FM")]
    weight = {r["code"]: r["w"] for r in LOOKUP_ROWS}
    for where, keep in [("", lambda r: r["region"] != 5), ("WHERE t.region <= 2", lambda r: r["region"] <= 2)]:
        for group in ("", "t.sex"):
            key, gb = (f"{group}, ", f" GROUP BY {group}") if group else ("", "")
            q = parse_query(f"SELECT {key}SUM(r.w) AS s FROM t JOIN regions r ON t.region = r.code {where}{gb}", LOOKUP)
            plan = plan_noise(q, LOOKUP, CURRENCIES[definition], COST[definition], replace_one=replace_one)
            noise = plan.sums[q.aggregates[0].sum_key]
            labels = list(q.groups[0].labels) if q.groups else [None]
            contrib = np.zeros((len(rows), len(labels)), dtype=np.int64)
            for i, r in enumerate(rows):
                if keep(r):
                    w = weight.get(r["region"]) or 0.0
                    contrib[i, labels.index(r["sex"]) if q.groups else 0] = int(np.rint(w / noise.unit))
            exact = PandasBackend(pd.DataFrame(rows), LOOKUP).evaluate(q, units_of(plan))
            assert contrib.sum(axis=0).tolist() == list(exact.sums[q.aggregates[0].sum_key])
            assert_covered(noise, contrib, definition, replace_one)
            [(_, r)] = q.derived
            assert (r.lo, r.hi) == ((-3.0, 2.5) if not where else (0.0, 2.5))  # the weights the box allows


@pytest.mark.parametrize(
    "sql, fragment",
    [
        ("SELECT AVG(r.w) FROM t JOIN regions r ON t.region = r.code", "NULL"),
        ("SELECT AVG(r.pop) FROM t LEFT JOIN regions r ON t.region = r.code", "NULL"),
        ("SELECT MEDIAN(r.pop) FROM t JOIN regions r ON t.region = r.code", "MEDIAN of a lookup column"),
    ],
)
def test_lookup_aggregates_sql_would_skip_rows_of_are_refused(sql: str, fragment: str) -> None:
    with pytest.raises(UnsupportedQueryError, match=fragment):
        parse_query(sql, LOOKUP)


def _lookup_frame() -> pd.DataFrame:
    rng = np.random.default_rng(8)
    return pd.DataFrame(
        {"region": rng.integers(1, 6, 300), "age": rng.integers(0, 4, 300), "sex": rng.choice(["F", "M"], 300)}
    )


def test_a_lookup_sum_is_the_same_on_pandas_and_duckdb() -> None:
    df = _lookup_frame()
    con = duckdb.connect()
    con.register("t", df)
    db, pb = DuckDBBackend(con.table("t"), LOOKUP), backend_for(df, LOOKUP)
    for sql in LOOKUP_CASES:
        q, units, extra = plan_query(sql, LOOKUP)
        assert q.derived, sql
        assert_same_cells(pb.evaluate(q, units, extended=extra), db.evaluate(q, units, extended=extra))


@pytest.mark.spark
@pytest.mark.slow
def test_a_lookup_sum_is_the_same_on_spark(spark: Any) -> None:
    df = _lookup_frame()
    sb, pb = backend_for(spark.createDataFrame(df), LOOKUP), backend_for(df, LOOKUP)
    for sql in LOOKUP_CASES:
        q, units, extra = plan_query(sql, LOOKUP)
        assert_same_cells(pb.evaluate(q, units, extended=extra), sb.evaluate(q, units, extended=extra))


def test_a_backend_without_row_expressions_refuses_before_the_charge() -> None:
    """A backend that does not declare ``row_expressions`` (a new engine not yet taught them) is refused in the
    mechanism's check, before anything is charged or read."""

    class Plain(PandasBackend):
        row_expressions = False

        def evaluate(self, *a: Any, **k: Any) -> Any:
            raise AssertionError("data read")

    df = frame(50, 2)
    s = Session(df, SCHEMA, budget="epsilon=1")
    s.backend = Plain(s.backend.df, SCHEMA)
    with pytest.raises(UnsupportedQueryError, match="does not compute row expressions"):
        s.query("SELECT SUM(x * y) FROM t", epsilon=0.5)
    assert s.spent == 0 and len(s.accountant) == 0
