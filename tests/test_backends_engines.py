"""pandas, DuckDB and Spark backends: identical exact aggregates, identical charges, identical bind errors.

The SQL corpus (``sql_corpus.py``) runs through every backend in the conformance suite (``test_conformance.py``);
here: charges, bind errors on files, the engines' SQL pieces.  Spark tests are marked ``spark`` (one local[2] SparkSession per test run: ``conftest.spark``).
"""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
from conformance import assert_same_cells
from conformance import plan_query as _plan
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp
from tests_support import DATA

import dpmagic
from dpmagic.accountant.currency import parse_budget
from dpmagic.backends.bind import backend_for
from dpmagic.backends.duckdb import DuckDBBackend
from dpmagic.domain.schema import Schema
from dpmagic.errors import DataValidationError, DPMagicError
from dpmagic.query.sql import parse_query
from dpmagic.releases.plan import units_of
from dpmagic.releases.query import QueryMechanism

CURRENCY = parse_budget("epsilon=1e6").currency


def _parquet(src: Path, dst: Path) -> Path:
    duckdb.sql(f"COPY (SELECT * FROM read_csv('{src}')) TO '{dst}' (FORMAT parquet)")
    return dst


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, tuple[pd.DataFrame, Schema, Path]]:
    d = tmp_path_factory.mktemp("engines")
    out = {}
    for t in ("pums", "adult"):
        df = pd.read_csv(DATA / f"{t}.csv")
        out[t] = (df, Schema.from_json(DATA / f"{t}.schema.json"), _parquet(DATA / f"{t}.csv", d / f"{t}.parquet"))
    return out


QUERIES = [
    ("SELECT COUNT(*) FROM adult WHERE age < 30", 0.2),
    ("SELECT sex, COUNT(*), AVG(age) FROM adult WHERE age >= 30 GROUP BY sex", 0.3),
    ("SELECT race, SUM(fnlwgt) FROM adult WHERE age BETWEEN 25 AND 35 GROUP BY race", 0.1),
    ("SELECT COUNT(*) FROM adult WHERE age < 30", 0.2),  # cached: charges nothing
    ("SELECT VAR(age) AS v, MEDIAN(age) AS m FROM adult WHERE sex = 'Male'", 0.2),
]


def _spend(data, schema: Schema) -> tuple[list[tuple[str, float]], float]:
    s = dpmagic.Session(data, schema, "epsilon=5")
    for sql, eps in QUERIES:
        s.query(sql, epsilon=eps)
    return [(e.sql, e.cost) for e in s.accountant.entries()], s.spent


def test_identical_charges_duckdb(tables) -> None:
    df, schema, path = tables["adult"]
    assert _spend(df, schema) == _spend(str(path), schema)


@pytest.mark.spark
def test_identical_charges_spark(tables, spark) -> None:
    df, schema, path = tables["adult"]
    assert _spend(df, schema) == _spend(spark.read.parquet(str(path)), schema)


# ---- bad input: the same error on every backend, nothing charged ----
def _bad_frames(adult: pd.DataFrame) -> dict[str, pd.DataFrame]:
    base = adult.head(300).copy()
    out = {}
    f = base.copy()
    f.loc[5, "workclass"] = "Astronaut"
    out["category"] = f
    f = base.copy()
    f["age"] = f["age"].astype(np.int64)
    f.loc[[3, 7, 9], "age"] = 120
    out["bounds"] = f
    f = base.copy()
    f["hours-per-week"] = f["hours-per-week"].astype(float)
    f.loc[4, "hours-per-week"] = np.nan
    out["nan"] = f
    f = base.copy()
    f["age"] = f["age"].astype(float)
    f.loc[4, "age"] = 30.5
    out["fraction"] = f
    out["missing column"] = base.drop(columns=["race"])
    f = base.copy()
    f["extra"] = 1
    out["undeclared column"] = f
    f = base.copy()
    f["age"] = f["age"].astype(str)
    out["dtype"] = f
    return out


def _error(fn) -> tuple[type, str]:
    with pytest.raises(DPMagicError) as info:
        fn()
    return type(info.value), str(info.value)


def _write(con: duckdb.DuckDBPyConnection, df: pd.DataFrame, path: Path) -> Path:
    con.register("frame", df)
    con.execute(f"COPY frame TO '{path}' (FORMAT parquet)")
    con.unregister("frame")
    return path


@pytest.fixture(scope="module")
def bad_files(tables, tmp_path_factory) -> dict[str, tuple[pd.DataFrame, Path]]:
    d = tmp_path_factory.mktemp("bad")
    con = duckdb.connect()
    df = tables["adult"][0]
    return {k: (f, _write(con, f, d / f"{i}.parquet")) for i, (k, f) in enumerate(_bad_frames(df).items())}


def test_bad_input_same_errors_duckdb(tables, bad_files, tmp_path) -> None:
    schema = tables["adult"][1]
    for name, (frame, path) in bad_files.items():
        expected = _error(lambda frame=frame: dpmagic.Session(frame, schema, "epsilon=1"))
        assert _error(lambda path=path: dpmagic.Session(str(path), schema, "epsilon=1")) == expected, name
        con = duckdb.connect()
        con.register("t", frame)
        assert _error(lambda con=con: DuckDBBackend(con.table("t"), schema)) == expected, name
    missing = tmp_path / "nope.parquet"
    cls, msg = _error(lambda: dpmagic.Session(str(missing), schema, "epsilon=1"))
    assert cls is DataValidationError and str(missing) in msg
    cls, msg = _error(lambda: dpmagic.Session(str(tmp_path / "*.parquet"), schema, "epsilon=1"))
    assert cls is DataValidationError and "matches" in msg


def test_bad_query_charges_nothing_on_every_backend(tables) -> None:
    df, schema, path = tables["adult"]
    for data in (df, str(path)):
        s = dpmagic.Session(data, schema, "epsilon=1")
        with pytest.raises(DPMagicError, match="unknown column"):
            s.query("SELECT COUNT(*) FROM adult WHERE salary > 3", epsilon=0.1)
        assert s.spent == 0 and len(s.accountant) == 0


@pytest.mark.spark
def test_bad_input_same_errors_spark(tables, bad_files, spark) -> None:
    schema = tables["adult"][1]
    for name, (frame, path) in bad_files.items():
        expected = _error(lambda frame=frame: dpmagic.Session(frame, schema, "epsilon=1"))
        got = _error(lambda path=path: dpmagic.Session(spark.read.parquet(str(path)), schema, "epsilon=1"))
        assert got == expected, name
    with pytest.raises(DataValidationError, match="no table"):
        backend_for("no_such_table", schema, spark=spark)


def test_clamp_policy_in_the_engine(tables, bad_files) -> None:
    schema = tables["adult"][1]
    frame, path = bad_files["bounds"]
    q, units, extra = _plan("SELECT sex, SUM(age), COUNT(*) FROM adult WHERE age > 80 GROUP BY sex", schema)
    a = backend_for(frame, schema, out_of_range="clamp").evaluate(q, units, extended=extra)
    b = backend_for(str(path), schema, out_of_range="clamp").evaluate(q, units, extended=extra)
    assert_same_cells(a, b)
    assert a.counts.sum() >= 3


def test_engine_sql_quotes_identifiers_and_literals() -> None:
    schema = Schema.from_dict(
        {
            "table": "t",
            "columns": {
                'we"ird col': {"type": "categorical", "values": ["it's", 'a"b', "back\\slash"]},
                "x": {"type": "int", "lower": 0, "upper": 9},
            },
        }
    )
    df = pd.DataFrame({'we"ird col': ["it's", 'a"b', "back\\slash", "it's"], "x": [1, 2, 3, 4]})
    con = duckdb.connect()
    con.register("t", df)
    db = DuckDBBackend(con.table("t"), schema)
    q, units, extra = _plan(
        """SELECT "we""ird col", COUNT(*), SUM(x) FROM t WHERE "we""ird col" IN ('it''s', 'back\\slash') """
        """GROUP BY "we""ird col" """,
        schema,
    )
    assert_same_cells(backend_for(df, schema).evaluate(q, units, extended=extra), db.evaluate(q, units, extended=extra))


# ---- property: pandas == DuckDB exactly on small random tables (floats, clamps, values near the bounds) ----
LO, HI = -3.5, 7.25
SCHEMA = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "i": {"type": "int", "lower": -5, "upper": 20},
            "f": {"type": "float", "lower": LO, "upper": HI},
            "c": {"type": "categorical", "values": ["a", "b", "c"]},
        },
    }
)
_near = st.sampled_from([LO, HI, math.nextafter(LO, 1), math.nextafter(HI, 0), 0.0, -0.0, 0.5, 2.5, -2.5, 1e-300])
_float = st.one_of(st.floats(LO, HI, allow_nan=False), _near)
_rows = st.lists(st.tuples(st.integers(-5, 20), _float, st.sampled_from("abc")), min_size=0, max_size=25)
_QUERIES = [
    "SELECT c, COUNT(*), SUM(f), AVG(i) FROM t WHERE f > 0 GROUP BY c",
    "SELECT SUM(CLAMP(f, -1, 2.5)) AS s, SUM(LEAST(GREATEST(i, 0), 3)) AS t FROM t WHERE i <> 4",
    "SELECT c, VAR(f) AS v, STDDEV(i) AS sd FROM t WHERE NOT (i BETWEEN 2 AND 5) GROUP BY c",
    "SELECT COUNT(DISTINCT i) AS d, MEDIAN(f) AS m, MAX(i) AS mx FROM t WHERE c IN ('a', 'b') OR f < -1",
    "SELECT CASE WHEN f < 0 THEN 'neg' ELSE 'pos' END AS g, SUM(f), COUNT(*) FROM t GROUP BY g",
]


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(rows=_rows, cost=st.sampled_from([0.01, 1.0, 1e4]))
def test_pandas_equals_duckdb_random(rows, cost) -> None:
    df = pd.DataFrame(rows, columns=["i", "f", "c"]).astype({"i": np.int64, "f": float, "c": object})
    con = duckdb.connect()
    con.register("t", df)
    db = DuckDBBackend(con.table("t"), SCHEMA)
    pb = backend_for(df, SCHEMA)
    for sql in _QUERIES:
        q = parse_query(sql, SCHEMA, tables=None)
        mech = QueryMechanism(q, SCHEMA, CURRENCY, cost, replace_one=False)
        units, extra = units_of(mech.plan), mech.plan.extra
        assert_same_cells(pb.evaluate(q, units, extended=extra), db.evaluate(q, units, extended=extra))


def _rint_cases(unit: float) -> tuple[list[float], float, float]:
    """Values at, just below and just above every half-way point of ``unit`` in [−4.5, 4.5]·unit, and the clamp."""
    xs = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999999999999994, -0.49999999999999994, 3.0, 1e-300, -7.75, 6.25]
    xs += [k * unit / 2 for k in range(-9, 10)] + [math.nextafter(k * unit / 2, 0) for k in range(-9, 10)]
    xs += [math.nextafter(k * unit / 2, k * unit) for k in range(-9, 10)]
    lo, hi = -8.0 * max(unit, 1), 8.0 * max(unit, 1)
    return xs, lo, hi


@pytest.mark.parametrize("unit", [1.0, 0.5, 2.0, 2.0**-40, 2.0**20])
def test_quantise_in_sql_is_numpys_rint(unit: float) -> None:
    """Half-way cases round to even, as ``np.rint``: the engine's integer units equal dpmagic.noise.calibration.quantise."""
    from dpmagic.aggregates.sqlexpr import quantise_sql
    from dpmagic.backends.compiler import Compiler
    from dpmagic.domain.sets import Box
    from dpmagic.noise.calibration import quantise
    from dpmagic.query.model import Query

    xs, lo, hi = _rint_cases(unit)
    con = duckdb.connect()
    con.register("t", pd.DataFrame({"x": xs}))
    schema = Schema.from_dict({"columns": {"x": {"type": "float", "lower": lo, "upper": hi}}})
    comp = Compiler(schema, exp.to_table("t"), {})
    q = Query(text="", table=None, aggregates=(), group_by=(), where=Box({}))
    view = exp.select(exp.column("x")).from_(exp.to_table("t"))
    got = [
        v
        for (_, v) in con.execute(
            comp.rows(q, {"v": quantise_sql(exp.column("x"), unit, lo, hi)}, view)[0].sql("duckdb")
        ).fetchall()
    ]
    assert got == quantise(np.asarray(xs), unit, lo, hi).tolist()


@pytest.mark.spark
@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("unit", [1.0, 0.5, 2.0, 2.0**-40, 2.0**20])
def test_quantise_on_spark_is_numpys_rint(spark, unit: float, native: bool) -> None:
    """Spark's quantised values, by its ``RINT`` (Java's Math.rint: the compiler's ``native_rint``) and by the
    IEEE spelling, equal dpmagic.noise.calibration.quantise: half-way cases to even, neighbours of the ties exact."""
    from dpmagic.aggregates.sqlexpr import quantise_sql
    from dpmagic.backends.compiler import Compiler
    from dpmagic.domain.sets import Box
    from dpmagic.noise.calibration import quantise
    from dpmagic.query.model import Query

    xs, lo, hi = _rint_cases(unit)
    spark.createDataFrame([(i, x) for i, x in enumerate(xs)], "i BIGINT, x DOUBLE").createOrReplaceTempView("q_t")
    schema = Schema.from_dict({"columns": {"x": {"type": "float", "lower": lo, "upper": hi}}})
    comp = Compiler(schema, exp.to_table("q_t"), {}, native_rint=native)
    q = Query(text="", table=None, aggregates=(), group_by=(), where=Box({}))
    view = exp.select(exp.column("i"), exp.column("x")).from_(exp.to_table("q_t"))
    rows, _ = comp.rows(q, {"i": exp.column("i"), "v": quantise_sql(exp.column("x"), unit, lo, hi)}, view)
    sql = rows.sql("spark")
    assert ("RINT(" in sql) == native
    got = dict(spark.sql(f"SELECT i, v FROM ({sql}) AS r").collect())
    assert [got[i] for i in range(len(xs))] == quantise(np.asarray(xs), unit, lo, hi).tolist()


def test_session_binds_a_connection_and_table(tables) -> None:
    df, schema, path = tables["adult"]
    con = duckdb.connect()
    con.execute(f"CREATE TABLE people AS SELECT * FROM read_parquet('{path}')")
    spent = []
    for data in ((con, "people"), con.sql("SELECT * FROM people"), [str(path)], str(path.parent / "adult.parq*")):
        s = dpmagic.Session(data, schema, "epsilon=1")
        assert s.data is None and s.backend.n_rows == len(df)
        s.query("SELECT sex, COUNT(*) FROM adult GROUP BY sex", epsilon=0.1)
        spent.append(s.spent)
    assert spent == [pytest.approx(0.1)] * 4
    with pytest.raises(DataValidationError, match="no table 'nobody'"):
        dpmagic.Session((con, "nobody"), schema, "epsilon=1")


def test_magic_binds_a_parquet_path(ip, tables, tmp_path) -> None:
    from tests_support import run_cell

    _, schema, path = tables["adult"]
    ip.user_ns["schema"] = schema
    result, cap = run_cell(ip, f"%dpsession {path} --schema schema --budget epsilon=1.0 --ledger memory --panel none")
    assert result.success, cap.stderr
    result, cap = run_cell(ip, "%%dpquery r << --epsilon 0.1\nSELECT sex, COUNT(*) AS n FROM adult GROUP BY sex\n")
    assert result.success, cap.stderr
    assert list(ip.user_ns["r"]["sex"]) == ["Female", "Male"]
    missing = tmp_path / "missing.parquet"
    result, cap = run_cell(ip, f"%dpsession {missing} --schema schema --budget epsilon=1.0 --ledger memory")
    assert f"data file {str(missing)!r} does not exist" in cap.stderr


@pytest.mark.spark
def test_spark_quoting_and_tables(spark) -> None:
    schema = Schema.from_dict(
        {
            "table": "t",
            "columns": {
                'we"ird col': {"type": "categorical", "values": ["it's", 'a"b', "back\\slash"]},
                "x": {"type": "int", "lower": 0, "upper": 9},
            },
        }
    )
    rows = [("it's", 1), ('a"b', 2), ("back\\slash", 3), ("it's", 4)]
    df = pd.DataFrame(rows, columns=['we"ird col', "x"])
    sdf = spark.createDataFrame(rows, schema='`we"ird col` string, x bigint')
    sdf.createOrReplaceTempView("dpmagic_quoting")
    q, units, extra = _plan(
        """SELECT "we""ird col", COUNT(*), SUM(x) FROM t WHERE "we""ird col" IN ('it''s', 'back\\slash') """
        """GROUP BY "we""ird col" """,
        schema,
    )
    expected = backend_for(df, schema).evaluate(q, units, extended=extra)
    assert_same_cells(expected, backend_for(sdf, schema).evaluate(q, units, extended=extra))
    assert_same_cells(expected, backend_for((spark, "dpmagic_quoting"), schema).evaluate(q, units, extended=extra))


def test_csv_file_and_row_limit(tables, monkeypatch) -> None:
    df, schema, _ = tables["adult"]
    q, units, extra = _plan("SELECT race, COUNT(*), SUM(age) FROM adult WHERE sex = 'Female' GROUP BY race", schema)
    csv = DuckDBBackend(str(DATA / "adult.csv"), schema)
    assert_same_cells(
        backend_for(df, schema).evaluate(q, units, extended=extra), csv.evaluate(q, units, extended=extra)
    )
    import dpmagic.backends.engine as sql_backend
    import dpmagic.backends.pandas as pandas_backend

    monkeypatch.setattr(pandas_backend, "MAX_ROWS", 100)
    monkeypatch.setattr(sql_backend, "MAX_ROWS", 100)
    expected = _error(lambda: backend_for(df, schema))
    assert "more than" in expected[1]
    assert _error(lambda: backend_for(str(DATA / "adult.csv"), schema)) == expected


@pytest.mark.spark
def test_spark_limb_sums_are_exact_at_the_int64_extremes(spark) -> None:
    """Spark's exact sums (three BIGINT sums of 21-bit limbs, recombined in the kernel) equal Python's Σ on
    values at and near ±2⁶³ whose true sums overflow int64 many times over."""
    from dpmagic.aggregates.exactsum import combine, exact_sum

    lo, hi = -(2**63), 2**63 - 1
    groups = {
        0: [hi] * 7 + [1, 2**21 - 1, 2**42, 2**42 - 1],
        1: [lo] * 5 + [-1, -(2**21), -(2**42) - 1],
        2: [lo, hi, 0, -7, 2**53 + 1, -(2**53) - 1],
    }
    rows = [(g, v) for g, vs in groups.items() for v in vs]
    df = spark.createDataFrame(rows, "g BIGINT, v BIGINT")
    df.createOrReplaceTempView("dpmagic_limbs")
    parts = exact_sum(exp.column("v"), "spark")
    assert len(parts) == 3
    stmt = exp.select(exp.column("g"), *parts).from_("dpmagic_limbs").group_by(exp.column("g"))
    got = {int(r[0]): combine(list(r[1:])) for r in spark.sql(stmt.sql(dialect="spark")).collect()}
    assert got == {g: sum(vs) for g, vs in groups.items()}
    assert combine([12345]) == 12345  # DuckDB's one HUGEINT sum


@pytest.mark.spark
@pytest.mark.parametrize(("bound", "limbs"), [(2**31 - 1, 1), (2**31, 2), (2**60 - 1, 2), (2**60, 3)])
def test_spark_sums_use_as_few_limbs_as_the_bound_allows_and_stay_exact(spark, bound, limbs) -> None:
    """With a proven per-row bound, Spark sums one BIGINT (|v| < 2³¹) or two limbs (|v| < 2⁶⁰); the values at
    ±bound, and their sums, recombine exactly."""
    from dpmagic.aggregates.exactsum import combine, exact_sum

    vals = [bound, -bound, bound - 1, -(bound - 1) if bound > 1 else 0, 1, -1, 0, (2**30) - 1, -(2**30)]
    vals = [v for v in vals if abs(v) <= bound]
    groups = {0: vals, 1: [bound] * 9, 2: [-bound] * 9}
    rows = [(g, v) for g, vs in groups.items() for v in vs]
    spark.createDataFrame(rows, "g BIGINT, v BIGINT").createOrReplaceTempView("dpmagic_limbs_b")
    parts = exact_sum(exp.column("v"), "spark", bound)
    assert len(parts) == limbs
    stmt = exp.select(exp.column("g"), *parts).from_("dpmagic_limbs_b").group_by(exp.column("g"))
    got = {int(r[0]): combine(list(r[1:])) for r in spark.sql(stmt.sql(dialect="spark")).collect()}
    assert got == {g: sum(vs) for g, vs in groups.items()}
    assert len(exact_sum(exp.column("v"), "duckdb", bound)) == 1


@pytest.mark.slow
def test_duckdb_answers_beyond_its_memory_limit(tmp_path) -> None:
    """Larger than memory works: a COUNT(DISTINCT) over 1.5M distinct values (and a per-value histogram) need more
    than a 24 MB memory limit — DuckDB alone, with nowhere to spill, runs out of memory — yet the bound file
    answers them (DuckDB spills to dpmagic's private temporary directory; a median is a fixed-size histogram over
    its candidates), exactly as pandas does."""
    n = 1_500_000
    path = tmp_path / "big.parquet"
    schema = Schema.from_dict(
        {
            "table": "t",
            "columns": {
                "g": {"type": "categorical", "values": ["a", "b", "c"]},
                "x": {"type": "float", "lower": 0.0, "upper": 1.0},
                "k": {"type": "int", "lower": 0, "upper": 10_000_000},
            },
        }
    )
    con = duckdb.connect()
    con.execute(
        f"COPY (SELECT ['a', 'b', 'c'][1 + (i % 3)] AS g, (hash(i) % 1000000007) / 1000000007.0 AS x, "
        f"(hash(i + 1) % 10000001)::BIGINT AS k FROM range({n}) t(i)) TO '{path}' (FORMAT parquet)"
    )
    sql = "SELECT g, MEDIAN(x) AS m, COUNT(DISTINCT k) AS d FROM t GROUP BY g"
    q, units, extra = _plan(sql, schema)
    small = duckdb.connect(config={"memory_limit": "24MB", "threads": 1, "temp_directory": ""})
    with pytest.raises(duckdb.OutOfMemoryException):  # the histogram alone does not fit
        small.execute(f"SELECT g, x, COUNT(*) FROM read_parquet('{path}') GROUP BY g, x").fetchall()
    engine = DuckDBBackend(str(path), schema, memory_limit="24MB", threads=1)
    got = engine.evaluate(q, units, extended=extra)
    expected = backend_for(con.execute(f"SELECT * FROM read_parquet('{path}')").df(), schema).evaluate(
        q, units, extended=extra
    )
    assert_same_cells(expected, got)
    assert int(got.extra["m"].sum()) == n
