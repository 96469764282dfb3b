"""Person-level tables: stable truncation, identical on pandas, DuckDB and Spark, and the binding checks
(docs/people.md §1; :mod:`dpmagic.backends.truncate`).

* stability, by brute force over random small tables: truncating the table without person p keeps, for every
  other person, exactly the rows truncating the full table keeps (also: the input's row order does not matter,
  every declared bound holds, and a person within every bound keeps all their rows);
* the three engines keep the same multiset of rows and give identical exact aggregates through ``evaluate``;
* the binding errors: a NULL id, a declared invariant column that varies (``"check"``), and ``"first"`` mode;
  a row-level schema binds as before; a Session answers COUNT(*) on a person-level table on each backend.

No statistical test here: every assertion is exact (no false-failure probability).  Spark tests are marked
``spark`` (one local[2] SparkSession per test run: ``conftest.spark``) and run few examples.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest
from conformance import assert_same_cells
from conformance import plan_query as _plan
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpmagic.backends.bind import backend_for
from dpmagic.backends.pandas import PandasBackend
from dpmagic.backends.truncate import truncate_frame
from dpmagic.domain.schema import Schema
from dpmagic.errors import DataValidationError
from dpmagic.session.session import Session

NAMES = ("pid", "sex", "dx", "site", "yr", "amt")
COLUMNS: dict[str, Any] = {
    "pid": {"type": "int", "lower": 0, "upper": 20},
    "sex": {"type": "categorical", "values": ["F", "M"]},
    "dx": {"type": "categorical", "values": ["a", "b", "c"]},
    "site": {"type": "categorical", "values": [10, 20, 30]},  # categories that are numbers
    "yr": {"type": "int", "lower": 2000, "upper": 2003},
    "amt": {"type": "float", "lower": -5.0, "upper": 5.0},
}
SPARK_TYPES = "pid BIGINT, sex STRING, dx STRING, site BIGINT, yr BIGINT, amt DOUBLE"
CODES = {n: {v: i for i, v in enumerate(c["values"])} for n, c in COLUMNS.items() if c["type"] == "categorical"}
QUERIES = [
    "SELECT COUNT(*) FROM t",
    "SELECT dx, COUNT(*), SUM(amt) FROM t GROUP BY dx",
    "SELECT site, SUM(yr) FROM t WHERE sex = 'F' GROUP BY site",
    "SELECT COUNT(DISTINCT pid) FROM t",
    "SELECT sex, COUNT(DISTINCT pid) FROM t WHERE amt > 0 GROUP BY sex",
]


def schema_of(unit: dict[str, Any] | str) -> Schema:
    return Schema.from_dict({"table": "t", "privacy_unit": unit, "columns": COLUMNS})


def frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(NAMES))
    return df.astype({"pid": "int64", "site": "int64", "yr": "int64", "amt": "float64"})


# ---- strategies ------------------------------------------------------------------------------------------------
AMTS = [-0.0, 0.0, 0.5, -2.25, 3.0, 0.001]


@st.composite
def units(draw: st.DrawFn) -> dict[str, Any]:
    unit: dict[str, Any] = {"id": "pid", "max_rows": draw(st.integers(1, 5)), "invariant": ["sex"]}
    per_group: dict[str, Any] = {}
    for column in draw(st.lists(st.sampled_from(["dx", "yr", "site"]), unique=True, max_size=2)):
        bound = {}
        g, c = draw(st.sampled_from([None, 1, 2, 3])), draw(st.sampled_from([None, 1, 2]))
        if g is None and c is None:
            c = 1
        if g is not None:
            bound["max_groups"] = g
        if c is not None:
            bound["max_rows"] = c
        per_group[column] = bound
    if per_group:
        unit["per_group"] = per_group
    unit["invariant_mode"] = draw(st.sampled_from(["check", "first"]))
    salt = draw(st.sampled_from([None, "s1", "it's a \\ salt | é"]))
    if salt is not None:
        unit["salt"] = salt
    return unit


@st.composite
def tables(draw: st.DrawFn, unit: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Rows of 1–4 persons with 1–6 rows each (rows may repeat); in "check" mode sex is constant per person."""
    pids = draw(st.lists(st.integers(0, 20), min_size=1, max_size=4, unique=True))
    rows: list[tuple[Any, ...]] = []
    for p in pids:
        sex = draw(st.sampled_from(["F", "M"]))
        for _ in range(draw(st.integers(1, 6))):
            s = sex if unit["invariant_mode"] == "check" else draw(st.sampled_from(["F", "M"]))
            rows.append(
                (
                    p,
                    s,
                    draw(st.sampled_from(["a", "b", "c"])),
                    draw(st.sampled_from([10, 20, 30])),
                    draw(st.integers(2000, 2003)),
                    draw(st.one_of(st.sampled_from(AMTS), st.floats(-5.0, 5.0))),
                )
            )
    return draw(st.permutations(rows))


@st.composite
def cases(draw: st.DrawFn) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    unit = draw(units())
    return unit, draw(tables(unit))


def truncated(rows: list[tuple[Any, ...]], schema: Schema) -> dict[int, Counter]:
    """The pandas reference's kept rows, per person (a multiset of row tuples)."""
    if not rows:
        return {}
    kept = truncate_frame(schema.validate(frame(rows)), schema)
    out: dict[int, Counter] = {}
    for r in kept.itertuples(index=False):
        out.setdefault(int(r[0]), Counter())[tuple(r)] += 1
    return out


# ---- stability (pandas, the reference) ---------------------------------------------------------------------------
@given(cases())
@settings(max_examples=150, deadline=None)
def test_truncation_is_stable_under_removing_any_person(case) -> None:
    unit, rows = case
    schema = schema_of(unit)
    full = truncated(rows, schema)
    for p in {r[0] for r in rows}:
        without = truncated([r for r in rows if r[0] != p], schema)
        assert without == {q: kept for q, kept in full.items() if q != p}


@given(cases(), st.randoms(use_true_random=False))
@settings(max_examples=100, deadline=None)
def test_truncation_respects_every_bound_and_ignores_row_order(case, rnd) -> None:
    unit, rows = case
    schema = schema_of(unit)
    full = truncated(rows, schema)
    shuffled = list(rows)
    rnd.shuffle(shuffled)
    assert truncated(shuffled, schema) == full
    k_prime = schema.person_unit.kept_rows
    for p in {r[0] for r in rows}:
        mine = Counter(r for r in rows if r[0] == p)
        kept = full[p]
        assert 1 <= sum(kept.values()) <= min(unit["max_rows"], k_prime)
        if unit["invariant_mode"] == "first":
            assert len({r[1] for r in kept}) == 1  # made invariant
            assert next(iter(kept))[1] in {r[1] for r in mine}
            kept = Counter({r: n for r, n in kept.items()})  # compare all but sex below
            mine_ns = Counter((r[0], *r[2:]) for r in mine.elements())
            kept_ns = Counter((r[0], *r[2:]) for r in kept.elements())
            assert not kept_ns - mine_ns
        else:
            assert not kept - mine  # kept rows are the person's own rows
        within = True
        for column, bound in unit.get("per_group", {}).items():
            i = NAMES.index(column)
            per_value = Counter(r[i] for r in kept.elements())
            all_values = Counter(r[i] for r in mine.elements())
            if "max_groups" in bound:
                assert len(per_value) <= bound["max_groups"]
                within &= len(all_values) <= bound["max_groups"]
            if "max_rows" in bound:
                assert max(per_value.values()) <= bound["max_rows"]
                within &= max(all_values.values()) <= bound["max_rows"]
        if within and sum(mine.values()) <= unit["max_rows"]:
            assert sum(kept.values()) == sum(mine.values())  # a person within every bound keeps every row


# ---- the same rows and aggregates on every engine ------------------------------------------------------------------
def coded_rows(rows: list[tuple[Any, ...]]) -> Counter:
    """A multiset of rows as the engines' coded tables hold them (categories as declared positions)."""
    out: Counter = Counter()
    for r in rows:
        out[tuple(CODES[n][v] if n in CODES else (float(v) if n == "amt" else int(v)) for n, v in zip(NAMES, r))] += 1
    return out


def pandas_kept(b: PandasBackend) -> Counter:
    return coded_rows([tuple(r) for r in b.df[list(NAMES)].itertuples(index=False)])


def engine_kept(rows: list[tuple[Any, ...]]) -> Counter:
    return Counter(tuple(float(v) if n == "amt" else int(v) for n, v in zip(NAMES, r)) for r in rows)


def duckdb_backend(df: pd.DataFrame, schema: Schema):
    con = duckdb.connect()
    con.register("src", df)
    return backend_for((con, "src"), schema)


def duckdb_kept(b) -> Counter:
    return engine_kept(b._select(f"SELECT {', '.join(NAMES)} FROM {b.people_table}"))


def spark_kept(b) -> Counter:
    return engine_kept([tuple(r) for r in b.spark.table(b.coded_view).select(*NAMES).collect()])


def check_same_cells(reference: PandasBackend, other: Any, schema: Schema) -> None:
    for sql in QUERIES:
        q, units_, extra = _plan(sql, schema)
        assert_same_cells(reference.evaluate(q, units_, extended=extra), other.evaluate(q, units_, extended=extra))


@given(cases())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_duckdb_keeps_the_same_rows_as_pandas(case) -> None:
    unit, rows = case
    schema = schema_of(unit)
    df = frame(rows)
    reference = backend_for(df, schema)
    engine = duckdb_backend(df, schema)
    assert duckdb_kept(engine) == pandas_kept(reference)
    check_same_cells(reference, engine, schema)


@pytest.mark.spark
@given(cases())
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_spark_keeps_the_same_rows_as_pandas(spark, case) -> None:
    unit, rows = case
    schema = schema_of(unit)
    df = frame(rows)
    reference = backend_for(df, schema)
    engine = backend_for(spark.createDataFrame(rows, SPARK_TYPES), schema)
    assert spark_kept(engine) == pandas_kept(reference)
    check_same_cells(reference, engine, schema)


# ---- binding checks ------------------------------------------------------------------------------------------------
UNIT = {"id": "pid", "max_rows": 2, "invariant": ["sex"]}
ROWS = [
    (1, "F", "a", 10, 2000, 1.0),
    (1, "F", "b", 20, 2001, 2.0),
    (1, "F", "c", 30, 2002, 3.0),
    (2, "M", "a", 10, 2003, -1.0),
    (3, "F", "b", 20, 2000, 0.5),
    (3, "F", "b", 20, 2000, 0.5),
]
VARYING = [*ROWS, (2, "F", "c", 30, 2001, 4.5)]  # person 2 has both sexes


def bind_each(rows: list[tuple[Any, ...]], schema: Schema, spark: Any = None) -> dict[str, Any]:
    """{backend: the bound backend, or the error binding raised}."""
    binders = {
        "pandas": lambda: backend_for(frame(rows), schema),
        "duckdb": lambda: duckdb_backend(frame(rows), schema),
    }
    if spark is not None:
        binders["spark"] = lambda: backend_for(spark.createDataFrame(rows, SPARK_TYPES), schema)
    out: dict[str, Any] = {}
    for name, bind in binders.items():
        try:
            out[name] = bind()
        except DataValidationError as e:
            out[name] = e
    return out


def check_null_id(errors: dict[str, Any]) -> None:
    messages = set()
    for name, e in errors.items():
        assert isinstance(e, DataValidationError), name
        text = str(e)
        assert "'pid'" in text and "privacy unit's id" in text, text
        messages.add(text)
    assert len(messages) == 1  # the same error everywhere


def test_null_id_is_refused_naming_the_id_column() -> None:
    schema = schema_of(UNIT)
    df = frame(ROWS).astype({"pid": "float64"})
    df.loc[3, "pid"] = np.nan
    errors = {}
    for name, bind in {"pandas": lambda: backend_for(df, schema), "duckdb": lambda: duckdb_backend(df, schema)}.items():
        with pytest.raises(DataValidationError) as info:
            bind()
        errors[name] = info.value
    check_null_id(errors)


@pytest.mark.spark
def test_null_id_is_refused_on_spark(spark) -> None:
    schema = schema_of(UNIT)
    rows = [(None if i == 3 else r[0], *r[1:]) for i, r in enumerate(ROWS)]
    with pytest.raises(DataValidationError) as info:
        backend_for(spark.createDataFrame(rows, SPARK_TYPES), schema)
    with pytest.raises(DataValidationError) as ref:
        backend_for(frame(ROWS).astype({"pid": "float64"}).assign(pid=lambda d: d.pid.where(d.index != 3)), schema)
    check_null_id({"spark": info.value, "pandas": ref.value})


def check_varying(errors: dict[str, Any]) -> None:
    messages = {str(e) for e in errors.values()}
    assert all(isinstance(e, DataValidationError) for e in errors.values()), errors
    assert len(messages) == 1, messages
    (text,) = messages
    assert "'sex'" in text and "invariant" in text
    for value in ("'F'", "'M'", " 2 ", "1 person"):  # no value, no person, no count
        assert value not in text


def test_a_varying_invariant_column_is_refused_on_pandas_and_duckdb() -> None:
    check_varying(bind_each(VARYING, schema_of(UNIT)))


def test_every_varying_invariant_column_is_named() -> None:
    rows = [*VARYING, (1, "F", "a", 20, 2000, 1.0)]  # site varies within person 1 too
    errors = bind_each(rows, schema_of({**UNIT, "invariant": ["sex", "site", "yr"][:2]}))
    texts = {str(e) for e in errors.values()}
    assert len(texts) == 1
    (text,) = texts
    assert "'sex'" in text and "'site'" in text and "'yr'" not in text


@pytest.mark.spark
def test_a_varying_invariant_column_is_refused_on_spark(spark) -> None:
    check_varying(bind_each(VARYING, schema_of(UNIT), spark))


def check_first(backends: dict[str, Any]) -> None:
    kept = {}
    for name, b in backends.items():
        assert not isinstance(b, Exception), (name, b)
        kept[name] = pandas_kept(b) if name == "pandas" else duckdb_kept(b) if name == "duckdb" else spark_kept(b)
    assert len({tuple(sorted(k.items())) for k in kept.values()}) == 1, kept
    rows = kept["pandas"]
    sexes: dict[int, set[int]] = {}
    for r in rows:
        sexes.setdefault(r[0], set()).add(r[1])
    assert all(len(s) == 1 for s in sexes.values())  # every person's kept rows share one sex


def test_first_mode_makes_the_column_invariant() -> None:
    unit = {**UNIT, "max_rows": 3, "invariant_mode": "first"}
    rows = [*VARYING, (2, "F", "b", 20, 2000, 0.0), (2, "M", "b", 20, 2000, -0.0)]
    check_first(bind_each(rows, schema_of(unit)))


@pytest.mark.spark
def test_first_mode_on_spark(spark) -> None:
    unit = {**UNIT, "max_rows": 3, "invariant_mode": "first"}
    check_first(bind_each(VARYING, schema_of(unit), spark))


def test_a_row_level_schema_binds_as_before() -> None:
    schema = schema_of("one row")
    df = frame(VARYING)
    b = backend_for(df, schema)
    pd.testing.assert_frame_equal(b.df, schema.validate(df))  # every row, untouched
    d = duckdb_backend(df, schema)
    assert not hasattr(d, "people_table")
    assert d.sql(d.compiler.source) == "dpmagic_source"  # the compiler reads the bound source itself
    check_same_cells(b, d, schema)


def test_truncation_happens_once_per_binding() -> None:
    schema = schema_of(UNIT)
    b = duckdb_backend(frame(ROWS), schema)
    q, units_, extra = _plan("SELECT COUNT(*) FROM t", schema)
    statements: list[str] = []
    run = b._select
    b._select = lambda sql: statements.append(sql) or run(sql)  # type: ignore[method-assign]
    b.evaluate(q, units_, extended=extra)
    assert statements and all("ROW_NUMBER" not in s.upper() for s in statements)
    assert any(b.people_table in s for s in statements)


def test_truncated_counts_on_a_known_table() -> None:
    """Person 1 keeps 2 of 3 rows, person 2 its 1, person 3 both (identical) rows: 5 rows, 3 persons."""
    schema = schema_of(UNIT)
    for b in bind_each(ROWS, schema).values():
        q, units_, extra = _plan("SELECT COUNT(*), COUNT(DISTINCT pid) AS n FROM t", schema)
        cells = b.evaluate(q, units_, extended=extra)
        assert cells.counts.tolist() == [5]
        assert np.asarray(cells.extra["n"]).ravel().tolist() == [3]


def _session_count(data: Any, schema: Schema) -> None:
    s = Session(data, schema, "epsilon=5")
    r = s.query("SELECT COUNT(*) FROM t", epsilon=1)
    assert len(r.df) == 1
    assert s.spent > 0


def test_a_session_counts_a_person_level_table_on_pandas_and_duckdb() -> None:
    schema = schema_of(UNIT)
    _session_count(frame(ROWS), schema)
    con = duckdb.connect()
    con.register("src", frame(ROWS))
    _session_count((con, "src"), schema)


@pytest.mark.spark
def test_a_session_counts_a_person_level_table_on_spark(spark) -> None:
    _session_count(spark.createDataFrame(ROWS, SPARK_TYPES), schema_of(UNIT))


@pytest.mark.spark
def test_spark_without_cache_truncates_the_same(spark) -> None:
    from dpmagic.backends.spark import SparkBackend

    schema = schema_of({**UNIT, "per_group": {"dx": {"max_groups": 1}}})
    engine = SparkBackend(spark.createDataFrame(ROWS, SPARK_TYPES), schema, cache=False)
    assert engine.cached is None
    reference = backend_for(frame(ROWS), schema)
    assert spark_kept(engine) == pandas_kept(reference)
    check_same_cells(reference, engine, schema)
